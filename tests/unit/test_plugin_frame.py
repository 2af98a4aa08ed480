"""We test these aspects of the plugin binary's side of the frame, exec'ing the binary
(``make plugin``) against a socket that records what it sends (tests/framerecorder.py)
and passing that to the daemon's decoder, as the socket would:

- a stdin that is a JSON object travels verbatim as the raw ``config`` value (the frame
  is no larger than stdin plus the CNI_* fields, whatever Go escaped in it), and the
  daemon decodes exactly the config the runtime wrote — any JSON object (generated);
- a DEL leaves the pod's annotations out, every other byte of the config as written
  (in the plugin, and again in the daemon for an older plugin's frame, so the journal
  never holds them);
- a stdin that is not a JSON object, or holds a ``\\ud…`` escape the daemon's decoder
  refuses, goes as the ``stdin`` string of the older frame, which the daemon still reads;
- the frame says its protocol (``proto``); the socket comes from the config (its
  ``ipam`` section for netctl-ipam, by the executable's name), CNI_NETNS is made absolute;
  VERSION and a stdin that is not a config are answered without the daemon;
- the reply: ``output`` on stdout, ``warning`` on stderr, exit 1 for a non-zero status;
- the executable is static (no ELF interpreter, no dynamic section);
- and the server's size rule serves a DEL over the limit.
"""

from __future__ import annotations

import json
import os
import struct
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
from tests.conftest import PLUGIN_BINARY
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


@settings(max_examples=300, deadline=None,
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
