"""We test these aspects of the plugin binary's side of the frame, exec'ing the binary
(``make plugin``) against a socket that records what it sends (tests/framerecorder.py)
and passing that to the daemon's decoder, as the socket would:

- a stdin that is a JSON object travels verbatim as the raw ``config`` value (the frame
  is no larger than stdin plus the CNI_* fields, whatever Go escaped in it), and the
  daemon decodes exactly the config the runtime wrote — any JSON object (generated);
- a DEL leaves the pod's annotations out, every other byte of the config as written
  (in the plugin, and again in the daemon for an older plugin's frame, so the journal
  never holds them), empty keys too;
- a stdin that is not a JSON object, or holds a ``\\ud…`` escape the daemon's decoder
  refuses, goes as the ``stdin`` string of the older frame, which the daemon still reads;
- the frame says its protocol (``proto``); the socket comes from the config (its
  ``ipam`` section for netctl-ipam, by the executable's name), CNI_NETNS is made absolute;
  VERSION and a stdin that is not a config are answered without the daemon;
- the reply: ``output`` on stdout, ``warning`` on stderr, exit 1 for a non-zero status;
- the executable is static (no ELF interpreter, no dynamic section);
- and the server's size rule serves a DEL over the limit.

And what a plugin written in C could get wrong where a memory-safe language would not,
or only subtly: the problem with a stdin that is not JSON, said exactly (the byte, where,
what is around it); nesting far past the limit (code 6, no crash) and up to it (verbatim);
an empty stdin, and one of megabytes; bytes that are not UTF-8 in the CNI_* variables
(replaced); the reply's escapes, surrogate pairs among them, unescaped to UTF-8; a reply
that is not JSON, not a reply, or larger than any reply (code 11); a reply timeout; an
answer waiting while the frame is refused unread; calls interrupted by SIGSTOP/SIGCONT.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netctl.cni.request import (
    DEL_CEILING,
    POD_ANNOTATIONS,
    PROTO,
    Invocation,
    Request,
    decode,
)
from netctl.daemon.server import admitted, readable
from tests.conftest import PLUGIN_BINARY, SANITIZED
from tests.framerecorder import FrameRecorder, exec_plugin

NETWORKS = "k8s.v1.cni.cncf.io/networks"


@pytest.fixture(scope="module")
def recorder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrameRecorder]:
    with FrameRecorder(tmp_path_factory.mktemp("sock") / "netctl.sock") as rec:
        yield rec


@pytest.fixture(autouse=True)
def fresh(recorder: FrameRecorder) -> None:
    recorder.frames.clear()
    recorder.answer = True
    recorder.delay = 0.0
    recorder.reply = {"status": 0, "output": "", "proto": PROTO}


def go_json(obj: Any) -> bytes:
    """JSON as Go's encoding/json writes it: ``<``, ``>`` and ``&`` escaped everywhere."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def containerd_conf(socket: str, annotation_bytes: int = 200 * 1024) -> dict[str, Any]:
    """A config as containerd passes it: the pod's annotations in runtimeConfig, one of
    them ``annotation_bytes`` long and full of ``<``."""
    return {"cniVersion": "1.0.0", "name": "netctl", "type": "netctl-cni", "socket": socket,
            "clusterNetwork": "br",
            "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80,
                                                "protocol": "tcp"}],
                              POD_ANNOTATIONS: {NETWORKS: "[]", "big": "<" * annotation_bytes}}}


def through(recorder: FrameRecorder, command: str, stdin: bytes,
            **kw: Any) -> tuple[bytes, Request, Invocation]:
    """What the plugin sends for ``stdin``, and what the daemon decodes of it."""
    res = exec_plugin(PLUGIN_BINARY, command, stdin, **kw)
    assert res.rc == 0 and res.stdout == "", res
    (body,) = recorder.frames
    recorder.frames.clear()
    req = msgspec.json.decode(body, type=Request)
    return body, req, decode(req)


def test_a_containerd_add_travels_verbatim_whatever_go_escaped(
        recorder: FrameRecorder) -> None:
    stdin = go_json(containerd_conf(recorder.path))
    assert len(stdin) > 6 * 200 * 1024  # every "<" is "\u003c" on stdin
    body, req, inv = through(recorder, "ADD", stdin)
    assert req.stdin == "" and bytes(req.config) == stdin
    assert len(body) < len(stdin) + 300  # the CNI_* fields only: nothing re-escaped
    assert inv.conf == containerd_conf(recorder.path)
    assert inv.stdin == stdin
    assert inv.pod.name == "web" and inv.container_id == "c1" and inv.ifname == "eth0"
    assert req.proto == PROTO == 2 and req.plugin == "netctl-cni"
    assert body.startswith(b'{"proto":2,"command":"ADD",')


def test_a_del_leaves_the_pods_annotations_out(recorder: FrameRecorder) -> None:
    stdin = go_json(containerd_conf(recorder.path))
    body, req, inv = through(recorder, "DEL", stdin)
    assert len(body) < 1000
    expected = containerd_conf(recorder.path)
    del expected["runtimeConfig"][POD_ANNOTATIONS]
    assert inv.conf == expected  # the rest of runtimeConfig kept
    assert msgspec.json.decode(inv.stdin) == expected  # what the journal stores
    assert POD_ANNOTATIONS.encode() not in bytes(req.config)
    # nothing else re-encoded: the members as written, in their order
    assert bytes(req.config) == go_json(expected)


def test_a_del_with_empty_keys(recorder: FrameRecorder) -> None:
    """Found by fuzzing (tests/fuzz/corpus/frame/regress-empty-key-quoted-in-a-del): an
    empty key is an empty buffer, whose null pointer the DEL's re-encoding offset (undefined
    behaviour, which the sanitized build aborts on)."""
    stdin = ('{"":1,"socket":"' + recorder.path + '","runtimeConfig":{"' + POD_ANNOTATIONS
             + '":{"a":"b"},"":2}}').encode()
    _, req, inv = through(recorder, "DEL", stdin)
    assert bytes(req.config) == ('{"":1,"socket":"' + recorder.path
                                 + '","runtimeConfig":{"":2}}').encode()
    assert inv.conf == {"": 1, "socket": recorder.path, "runtimeConfig": {"": 2}}
    _, req, _ = through(recorder, "ADD", stdin)
    assert bytes(req.config) == stdin


def test_the_daemon_drops_them_from_an_older_plugins_del() -> None:
    """An older plugin sends every stdin as a string, annotations and all."""
    stdin = go_json(containerd_conf("/x", 1000))
    for verb in ("DEL", "ADD"):
        inv = decode(Request(command=verb, container_id="c1", ifname="eth0",
                             stdin=stdin.decode()))
        assert inv.conf is not None
        kept = POD_ANNOTATIONS in inv.conf["runtimeConfig"]
        assert kept == (verb == "ADD")
        assert (POD_ANNOTATIONS.encode() in inv.stdin) == kept


@pytest.mark.parametrize("stdin", [b"{not json", b"[1, 2]", b"", b"\xff\xfe", b"null",
                                   b'{"a": NaN}', b'{"a": 1} {"b": 2}'])
def test_a_stdin_that_is_not_an_object_goes_as_a_string(recorder: FrameRecorder,
                                                         stdin: bytes) -> None:
    """Such a DEL names no socket: it goes to the default one, here the recorder's
    through a private mount namespace."""
    _, req, inv = through(recorder, "DEL", stdin,
                          default_socket_dir=os.path.dirname(recorder.path))
    assert len(req.config) == 0
    assert req.stdin == stdin.decode("utf-8", "replace")
    assert inv.conf is None and inv.conf_error


@pytest.mark.parametrize("stdin", [b"{not json", b"[1, 2]", b"\xff\xfe", b'{"a": NaN}'])
def test_an_add_whose_stdin_is_not_a_config_is_answered_at_once(
        recorder: FrameRecorder, stdin: bytes) -> None:
    res = exec_plugin(PLUGIN_BINARY, "ADD", stdin)
    assert res.rc == 1 and res.out["code"] == 6, res
    assert "the network config on stdin is not valid" in res.out["msg"], res
    assert recorder.frames == []


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDC00", "\\ud83d\\ude00"])
def test_a_surrogate_escape_goes_as_a_string(recorder: FrameRecorder, escape: str) -> None:
    """Python reads a lone surrogate escape, msgspec refuses it: as a raw value it would
    make the whole frame undecodable, and even a DEL would be refused (code 6)."""
    for verb in ("ADD", "DEL"):
        stdin = ('{"cniVersion":"1.0.0","name":"n","socket":"' + recorder.path + '","x":"'
                 + escape + '","runtimeConfig":{"' + POD_ANNOTATIONS + '":{"a":"b"}}}').encode()
        _, req, inv = through(recorder, verb, stdin)
        assert len(req.config) == 0 and req.stdin
        assert inv.verb == verb
        assert (POD_ANNOTATIONS in req.stdin) == (verb == "ADD")


def test_a_del_keeps_every_number_as_written(recorder: FrameRecorder) -> None:
    conf = {"cniVersion": "1.0.0", "name": "n", "socket": recorder.path, "mtu": 1500,
            "rate": 0.25, "big": 10 ** 30, "tiny": -1.5e-300,
            "runtimeConfig": {POD_ANNOTATIONS: {"a": "b"}, "bandwidth": {"ingressRate": 1e9}}}
    stdin = json.dumps(conf).encode()
    _, req, inv = through(recorder, "DEL", stdin)
    del conf["runtimeConfig"][POD_ANNOTATIONS]  # type: ignore[attr-defined]
    assert inv.conf == conf
    # the object and runtimeConfig joined anew, every value in them as written
    runtime = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}"
                             for k, v in conf["runtimeConfig"].items()) + "}"
    assert bytes(req.config).decode() == "{" + ",".join(
        f"{json.dumps(k)}:{runtime if k == 'runtimeConfig' else json.dumps(v)}"
        for k, v in conf.items()) + "}"
    assert b"1000000000000000000000000000000," in bytes(req.config)


def test_a_del_with_a_number_out_of_range_still_leaves_the_annotations_out(
        recorder: FrameRecorder) -> None:
    """1e999 is valid JSON but no float: the plugin re-encodes nothing, so it slims the
    config all the same; the daemon reads no config of it (a DEL needs none)."""
    stdin = ('{"cniVersion":"1.0.0","name":"n","socket":"' + recorder.path + '","x":1e999,'
             '"runtimeConfig":{"' + POD_ANNOTATIONS + '":{"a":"b"},"k":1}}').encode()
    _, req, inv = through(recorder, "DEL", stdin)
    assert bytes(req.config) == stdin.replace(
        b'"' + POD_ANNOTATIONS.encode() + b'":{"a":"b"},', b"")
    assert inv.conf is None  # out of range for the daemon: DEL needs no config


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


# through the sanitized build (make test-sanitized), 50 of them, to keep that pass short: the
# fuzz targets search this space by the million (tests/fuzz/fuzz_frame.c)
@settings(max_examples=50 if SANITIZED else 300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conf=st.dictionaries(st.text(), JSON_VALUES, max_size=6), go=st.booleans(),
       spaced=st.booleans(), verb=st.sampled_from(["ADD", "DEL", "CHECK"]))
def test_any_object_arrives_as_the_runtime_wrote_it(recorder: FrameRecorder,
                                                    conf: dict[str, Any], go: bool,
                                                    spaced: bool, verb: str) -> None:
    conf = {**conf, "socket": recorder.path}
    stdin = go_json(conf) if go else json.dumps(conf).encode()
    if spaced:
        stdin = b" \n\t" + stdin + b"\r\n"
    body, req, inv = through(recorder, verb, stdin)
    assert inv.conf == conf
    if len(req.config):
        assert bytes(req.config) == stdin.strip()  # verbatim: nothing re-encoded
        assert len(body) - len(req.config) <= len(msgspec.json.encode(
            msgspec.structs.replace(req, config=msgspec.Raw()))) + len(',"config":')
    else:  # only a surrogate escape (json.dumps writes astral characters so) goes as text
        assert "\\ud" in req.stdin.lower() and req.stdin == stdin.decode().strip()


# -- the rest of the plugin's side -----------------------------------------------------------


def test_version_is_answered_without_the_daemon(recorder: FrameRecorder) -> None:
    for version in ("0.3.1", "1.0.0", "1.1.0"):
        res = exec_plugin(PLUGIN_BINARY, "VERSION", json.dumps(
            {"cniVersion": version, "socket": recorder.path}).encode())
        assert res.rc == 0 and res.out == {"cniVersion": version, "supportedVersions": [
            "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}, res
    assert recorder.frames == []


def test_the_socket_comes_from_the_ipam_section_for_netctl_ipam(
        recorder: FrameRecorder, tmp_path: Path) -> None:
    """netctl-ipam reads ``ipam.socket`` (its stdin is the main plugin's config); netctl-cni
    the top level's, and ignores the other."""
    elsewhere = str(tmp_path / "nothing.sock")
    ipam_conf = {"cniVersion": "1.0.0", "name": "n", "type": "bridge", "socket": elsewhere,
                 "ipam": {"type": "netctl-ipam", "socket": recorder.path}}
    _, req, _ = through(recorder, "ADD", json.dumps(ipam_conf).encode(), name="netctl-ipam")
    assert req.plugin == "netctl-ipam"
    cni_conf = {"cniVersion": "1.0.0", "name": "n", "socket": recorder.path,
                "ipam": {"socket": elsewhere}}
    _, req, _ = through(recorder, "ADD", json.dumps(cni_conf).encode(), name="netctl-cni")
    assert req.plugin == "netctl-cni"


def test_a_relative_netns_is_made_absolute(recorder: FrameRecorder, tmp_path: Path) -> None:
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    _, req, _ = through(recorder, "ADD", conf, env={"CNI_NETNS": "ns/x"}, cwd=str(tmp_path))
    assert req.netns == str(tmp_path / "ns" / "x")


def test_the_reply_output_warning_and_status(recorder: FrameRecorder) -> None:
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    error = json.dumps({"cniVersion": "1.0.0", "code": 7, "msg": "no"})
    recorder.reply = {"status": 1, "output": error, "warning": "look", "proto": PROTO}
    res = exec_plugin(PLUGIN_BINARY, "ADD", conf)
    assert (res.rc, res.stdout, res.stderr) == (1, error + "\n", "warning: look\n")
    recorder.reply = {"status": 0, "output": '{"cniVersion":"1.0.0"}'}
    res = exec_plugin(PLUGIN_BINARY, "ADD", conf)
    assert (res.rc, res.stdout, res.stderr) == (0, '{"cniVersion":"1.0.0"}\n', "")


def test_no_answer_is_code_11_and_a_recorded_del(recorder: FrameRecorder) -> None:
    """The daemon closes the connection unanswered (it died mid-request): ADD fails with
    11, a DEL is recorded beside the socket."""
    recorder.answer = False
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    res = exec_plugin(PLUGIN_BINARY, "ADD", conf)
    assert res.rc == 1 and res.out["code"] == 11 and "gave no answer" in res.out["msg"], res
    pending = Path(recorder.path).parent / "pending-del"
    res = exec_plugin(PLUGIN_BINARY, "DEL", conf)
    try:
        assert res.rc == 0 and "recorded" in res.stderr, res
        (record,) = pending.iterdir()
        assert record.name.endswith(".del") and record.stat().st_mode & 0o777 == 0o600
        assert json.loads(record.read_bytes()) == json.loads(recorder.frames[-1])
    finally:
        for p in pending.iterdir():
            p.unlink()
        pending.rmdir()


def test_a_del_that_cannot_be_recorded_is_code_11(tmp_path: Path) -> None:
    (tmp_path / "pending-del").write_text("a file, not the directory")
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n",
                       "socket": str(tmp_path / "netctl.sock")}).encode()
    res = exec_plugin(PLUGIN_BINARY, "DEL", conf)
    assert res.rc == 1 and res.out["code"] == 11, res
    assert "could not be recorded" in res.out["msg"] and "try again later" in res.out["msg"]


@pytest.mark.skipif(SANITIZED, reason="the sanitized build is linked dynamically")
def test_the_executable_is_static() -> None:
    """No ELF interpreter (PT_INTERP) and no dynamic section (PT_DYNAMIC): it runs on a
    host without libc."""
    data = PLUGIN_BINARY.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2  # 64-bit
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    kinds = {struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)}
    assert 1 in kinds  # PT_LOAD
    assert not kinds & {2, 3}, kinds  # PT_DYNAMIC, PT_INTERP


def test_the_size_rule() -> None:
    limit = 1 << 20
    assert readable(limit, limit) and admitted(limit, limit, "ADD")
    assert readable(limit + 1, limit) and readable(DEL_CEILING, limit)
    assert not readable(DEL_CEILING + 1, limit)
    assert readable(DEL_CEILING + 1, DEL_CEILING + 1)  # a larger limit wins
    assert admitted(limit + 1, limit, "DEL")
    for other in ("ADD", "CHECK", "GC", ""):
        assert not admitted(limit + 1, limit, other)


# -- what C makes risky ----------------------------------------------------------------------

NOT_VALID = "netctl-cni: the network config on stdin is not valid: "


@pytest.mark.parametrize("stdin, problem", [
    (b"", "unexpected end of JSON input"),
    (b" \n\t", "unexpected end of JSON input"),
    (b'{"a": 1,}', "invalid character '}' looking for beginning of object key string at byte "
                   "9, near `{\"a\": 1,}`"),
    (b'{"a": 01}', "invalid character '1' after object key:value pair at byte 8, near "
                   "`{\"a\": 01}`"),
    (b'{"a": NaN}', "invalid character 'N' looking for beginning of value at byte 7, near "
                    "`{\"a\": NaN}`"),
    (b'{"a": "\x01"}', "invalid character '\\x01' in string literal at byte 8, near "
                       "`{\"a\": \"\x01\"}`"),
    (b'{"a": "\\x"}', "invalid character 'x' in string escape code at byte 9, near "
                      "`{\"a\": \"\\x\"}`"),
    (b'{"a": tru}', "invalid character '}' in literal true (expecting 'e') at byte 10, near "
                    "`{\"a\": tru}`"),
    (b'{"a": 1} x', "invalid character 'x' after top-level value at byte 10, near "
                    "`{\"a\": 1} x`"),
    (b'{"a": 1', "unexpected end of JSON input at byte 7, near `{\"a\": 1`"),
    (b'{"a": "\xc3\x28"}', "not UTF-8"),
    (b'"a"', "not a JSON object"),
    (b'{"socket": "/x", "a": [' + b"1," * 40 + b'}',
     "invalid character '}' looking for beginning of value at byte 104, near "
     "`,1,1,1,1,1,1,1,}`"),
])
def test_the_problem_with_a_stdin_is_said_exactly(recorder: FrameRecorder, stdin: bytes,
                                                  problem: str) -> None:
    """The byte the JSON went wrong at, counted from 1 and from the first byte that is not
    whitespace, and what is around it: the 15 bytes before it, it, and 16 after."""
    res = exec_plugin(PLUGIN_BINARY, "ADD", stdin)
    assert res.rc == 1 and res.out == {"cniVersion": "1.1.0", "code": 6,
                                       "msg": NOT_VALID + problem}, res
    assert recorder.frames == []


def test_nesting_past_the_limit_is_code_6_and_up_to_it_a_config(recorder: FrameRecorder) -> None:
    """10,000 levels, Go's encoding/json's limit and the Go plugin's; far past it the
    plugin neither recurses nor runs out of stack."""
    for stdin, problem in ((b"[" * 1_000_000, "'[' exceeded max depth at byte 10001, near `[[["),
                           (b'{"a":' * 200_000, "'{' exceeded max depth at byte 50001, near "
                                                '`{"a":{"a":{"a":{'),
                           (b"[" * 10_001 + b"]" * 10_001, "'[' exceeded max depth at byte "
                                                           "10001, near `[[[")):
        res = exec_plugin(PLUGIN_BINARY, "ADD", stdin)
        assert res.rc == 1 and res.out["code"] == 6, res
        assert res.out["msg"].startswith(NOT_VALID + "invalid character " + problem), res
        assert not res.stderr
    deep = ('{"socket":"' + recorder.path + '","deep":' + "[" * 9_999 + "]" * 9_999 + "}")
    res = exec_plugin(PLUGIN_BINARY, "ADD", deep.encode())
    assert res.rc == 0, res
    (body,) = recorder.frames
    assert body.endswith(b',"config":' + deep.encode() + b"}")


def test_an_empty_stdin(recorder: FrameRecorder) -> None:
    """VERSION answers the latest version, ADD code 6, a DEL goes to the default socket
    (test_a_stdin_that_is_not_an_object_goes_as_a_string)."""
    res = exec_plugin(PLUGIN_BINARY, "VERSION", b"")
    assert (res.rc, res.stdout, res.stderr) == (
        0, '{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0",'
           '"1.1.0"]}', ""), res  # no newline after it, as before
    res = exec_plugin(PLUGIN_BINARY, "ADD", b"")
    assert res.rc == 1 and res.out["msg"] == NOT_VALID + "unexpected end of JSON input"


def test_a_stdin_of_megabytes_arrives_whole(recorder: FrameRecorder) -> None:
    stdin = go_json(containerd_conf(recorder.path, annotation_bytes=1 << 20))
    assert len(stdin) > 6 << 20
    body, req, inv = through(recorder, "ADD", stdin)
    assert bytes(req.config) == stdin and inv.conf == containerd_conf(recorder.path, 1 << 20)
    body, req, _ = through(recorder, "DEL", stdin)
    assert len(body) < 1000
    body, req, _ = through(recorder, "DEL", stdin[:-1],  # not JSON: all of it, as a string
                           default_socket_dir=os.path.dirname(recorder.path))
    assert req.stdin == stdin[:-1].decode()


def test_bytes_that_are_not_utf8_are_replaced(recorder: FrameRecorder) -> None:
    """In the CNI_* variables (a surrogate escape in Python: those bytes on the plugin's
    environment), each byte of a sequence that is not UTF-8 is U+FFFD; the rest is kept,
    U+2028 escaped."""
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    _, req, inv = through(recorder, "ADD", conf, env={
        "CNI_ARGS": "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web;A=\udcff;B=\udcc3(;C=é\u2028",
        "CNI_IFNAME": "eth\udced\udca0\udc80"})  # the UTF-8 of a UTF-16 surrogate
    assert req.args == "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web;A=\ufffd;B=\ufffd(;C=é\u2028"
    assert req.ifname == "eth\ufffd\ufffd\ufffd"
    assert inv.pod.name == "web"


def test_the_reply_is_unescaped_to_utf8(recorder: FrameRecorder) -> None:
    """json.dumps escapes every character that is not ASCII: an astral one as a surrogate
    pair; a lone surrogate is U+FFFD, as a byte that is not UTF-8 in a reply is."""
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    output = 'é 😀 \u2028 <&> \\ " \t\x00 end'
    recorder.reply = {"status": 0, "output": output, "warning": "\ud800 alone \udc00"}
    res = exec_plugin(PLUGIN_BINARY, "ADD", conf)
    assert (res.rc, res.stdout, res.stderr) == (0, output + "\n",
                                                "warning: \ufffd alone \ufffd\n"), res
    recorder.reply = b'{"output": "\xff\xc3(", "unknown": {"a": [1, "\\ud800"]}, "Status": 1,' \
                     b' "warning": "w", "warning": null}'
    res = exec_plugin(PLUGIN_BINARY, "ADD", conf)
    assert (res.rc, res.stdout, res.stderr) == (1, "\ufffd\ufffd(\n", "warning: w\n"), res


@pytest.mark.parametrize("reply, problem", [
    (b"nothing", "invalid character 'o' in literal null (expecting 'u')"),
    (b"", "unexpected end of JSON input"),
    (b'{"status": 0,}', "invalid character '}' looking for beginning of object key string"),
    (b"[" * 100_000, "invalid character '[' exceeded max depth"),
    (b'{"status": "0"}', "cannot unmarshal string into the reply's \"status\" (an integer)"),
    (b'{"status": 1.5}', "cannot unmarshal number 1.5 into the reply's \"status\""),
    (b'{"output": 7}', "cannot unmarshal number into the reply's \"output\" (a string)"),
    (b"[]", "cannot unmarshal array into the reply (an object)"),
])
def test_an_answer_that_is_not_a_reply_is_code_11(recorder: FrameRecorder, reply: bytes,
                                                  problem: str) -> None:
    recorder.reply = reply
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    res = exec_plugin(PLUGIN_BINARY, "ADD", conf)
    assert res.rc == 1 and res.out["code"] == 11, res
    assert (f"netctl daemon at {recorder.path} gave no answer (the answer is not the "
            f"daemon's JSON: {problem}") in res.out["msg"], res


@contextlib.contextmanager
def answering(path: Path, answer: bytes, *, read_frame: bool) -> Iterator[None]:
    """A socket at ``path`` that answers one connection with the bytes ``answer``, after
    the whole frame, or (not ``read_frame``) after its length only, closing with the rest
    of the frame unread (as the daemon refuses a frame over its size)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            (size,) = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))
            while read_frame and size > 0:
                size -= len(conn.recv(min(size, 1 << 20)))
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(10)
        server.close()
        path.unlink()


def test_an_answer_waiting_behind_a_frame_refused_unread(tmp_path: Path) -> None:
    """The daemon answers a frame over its size without reading it: the plugin's send
    fails (EPIPE, ECONNRESET) and it reads the answer all the same."""
    path = tmp_path / "netctl.sock"
    stdin = json.dumps({"cniVersion": "1.0.0", "socket": str(path), "pad": "x" * (4 << 20)})
    reply = json.dumps({"status": 1, "output": '{"code":105}', "proto": PROTO}).encode()
    with answering(path, struct.pack(">I", len(reply)) + reply, read_frame=False):
        res = exec_plugin(PLUGIN_BINARY, "ADD", stdin.encode())
    assert (res.rc, res.stdout) == (1, '{"code":105}\n'), res


def test_an_answer_larger_than_any_reply_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "netctl.sock"
    conf = json.dumps({"cniVersion": "1.0.0", "socket": str(path)}).encode()
    with answering(path, struct.pack(">I", (64 << 20) + 1), read_frame=True):
        res = exec_plugin(PLUGIN_BINARY, "ADD", conf)
    assert res.rc == 1 and res.out["code"] == 11, res
    assert "(an answer of 67108865 bytes is not the daemon's); try again later" \
        in res.out["msg"]


def test_no_answer_within_the_reply_timeout(recorder: FrameRecorder) -> None:
    """NETCTL_REPLY_TIMEOUT, seconds as Go's ParseFloat reads them (0x1p-2 is 0.25)."""
    recorder.delay = 1.5
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    for timeout, said in (("0.2", "200ms"), ("0x1p-2", "250ms")):
        started = time.monotonic()
        res = exec_plugin(PLUGIN_BINARY, "ADD", conf, env={"NETCTL_REPLY_TIMEOUT": timeout})
        assert time.monotonic() - started < 1.2
        assert res.rc == 1 and res.out["code"] == 11, res
        assert f"gave no answer (nothing within {said} (NETCTL_REPLY_TIMEOUT)); try again" \
            in res.out["msg"], res


def test_a_plugin_stopped_and_continued_while_it_waits_gets_its_answer(
        recorder: FrameRecorder) -> None:
    """SIGSTOP and SIGCONT interrupt a socket call that has a timeout (EINTR, even without
    a signal handler): the plugin calls again."""
    recorder.reply = {"status": 0, "output": "done", "proto": PROTO}
    recorder.delay = 1.0
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": recorder.path}).encode()
    env = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1",
           "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0", "CNI_ARGS": "",
           "CNI_PATH": "/opt/cni/bin"}
    with tempfile.TemporaryFile() as stdin:
        stdin.write(conf)
        stdin.seek(0)
        with subprocess.Popen([str(PLUGIN_BINARY)], stdin=stdin, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env) as proc:
            time.sleep(0.3)  # it waits for the answer now
            for _ in range(3):
                proc.send_signal(signal.SIGSTOP)
                time.sleep(0.05)
                proc.send_signal(signal.SIGCONT)
                time.sleep(0.05)
            out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (0, b"done\n", b"")


def test_the_socket_is_the_last_one_named_and_unescaped(recorder: FrameRecorder) -> None:
    escaped = recorder.path.replace("/", "\\/")
    stdin = ('{"cniVersion":"1.0.0","socket":"/nowhere","soc\\u006bet":"' + escaped + '"}')
    _, req, _ = through(recorder, "ADD", stdin.encode())
    assert bytes(req.config) == stdin.encode()
