"""We test these aspects of the frame between the thin plugin and the daemon: a stdin
that is a JSON object travels verbatim as the raw ``config`` value (the frame is no
larger than stdin plus the CNI_* fields, whatever Go escaped in it), and the daemon
decodes exactly the config the runtime wrote; a DEL leaves the pod's annotations out
(in the plugin, and again in the daemon for an older plugin's frame, so the journal
never holds them); a stdin that is not a JSON object, or holds a ``\\ud…`` escape the
daemon's decoder refuses, goes as the ``stdin`` string of the older frame, which the
daemon still reads; and the server's size rule serves a DEL over the limit.

The plugin's :func:`frame_body` and the daemon's :func:`decode` are both pure: we pass
the plugin's bytes to the daemon's decoder, as the socket would.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netctl_plugin import netctl_cni as plugin

from netctl.cni.request import DEL_CEILING, POD_ANNOTATIONS, Invocation, Request, decode
from netctl.server import admitted, readable

ENV = {"command": "ADD", "container_id": "c1", "netns": "/var/run/netns/x", "ifname": "eth0",
       "args": "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web", "path": "/opt/cni/bin",
       "plugin": "netctl-cni"}
NETWORKS = "k8s.v1.cni.cncf.io/networks"


def go_json(obj: Any) -> bytes:
    """JSON as Go's encoding/json writes it: ``<``, ``>`` and ``&`` escaped everywhere."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def containerd_conf(annotation_bytes: int = 200 * 1024) -> dict[str, Any]:
    """A config as containerd passes it: the pod's annotations in runtimeConfig, one of
    them ``annotation_bytes`` long and full of ``<``."""
    return {"cniVersion": "1.0.0", "name": "netctl", "type": "netctl-cni",
            "clusterNetwork": "br",
            "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80,
                                                "protocol": "tcp"}],
                              POD_ANNOTATIONS: {NETWORKS: "[]", "big": "<" * annotation_bytes}}}


def through(command: str, stdin: bytes) -> tuple[bytes, Request, Invocation]:
    """What the plugin sends for ``stdin``, and what the daemon decodes of it."""
    text, conf = "", None
    try:
        text = stdin.decode().strip()
        obj = plugin.loads(text)
        conf = obj if isinstance(obj, dict) else None
    except ValueError:
        pass
    if conf is None:
        text = stdin.decode("utf-8", "replace")
    body = plugin.frame_body({**ENV, "command": command}, command, conf, text)
    req = msgspec.json.decode(body, type=Request)
    return body, req, decode(req)


def test_a_containerd_add_travels_verbatim_whatever_go_escaped() -> None:
    stdin = go_json(containerd_conf())
    assert len(stdin) > 6 * 200 * 1024  # every "<" is "\u003c" on stdin
    body, req, inv = through("ADD", stdin)
    assert req.stdin == "" and bytes(req.config) == stdin
    assert len(body) < len(stdin) + 300  # the CNI_* fields only: nothing re-escaped
    assert inv.conf == containerd_conf()
    assert inv.stdin == stdin
    assert inv.pod.name == "web"


def test_a_del_leaves_the_pods_annotations_out() -> None:
    stdin = go_json(containerd_conf())
    body, req, inv = through("DEL", stdin)
    assert len(body) < 1000
    expected = containerd_conf()
    del expected["runtimeConfig"][POD_ANNOTATIONS]
    assert inv.conf == expected  # the rest of runtimeConfig kept
    assert msgspec.json.decode(inv.stdin) == expected  # what the journal stores
    assert POD_ANNOTATIONS.encode() not in bytes(req.config)


def test_the_daemon_drops_them_from_an_older_plugins_del() -> None:
    """An older plugin sends every stdin as a string, annotations and all."""
    stdin = go_json(containerd_conf(1000))
    for verb in ("DEL", "ADD"):
        inv = decode(Request(command=verb, container_id="c1", ifname="eth0",
                             stdin=stdin.decode()))
        assert inv.conf is not None
        kept = POD_ANNOTATIONS in inv.conf["runtimeConfig"]
        assert kept == (verb == "ADD")
        assert (POD_ANNOTATIONS.encode() in inv.stdin) == kept


@pytest.mark.parametrize("stdin", [b"{not json", b"[1, 2]", b"", b"\xff\xfe", b"null",
                                   b'{"a": NaN}'])
def test_a_stdin_that_is_not_an_object_goes_as_a_string(stdin: bytes) -> None:
    _, req, inv = through("DEL", stdin)
    assert len(req.config) == 0
    assert req.stdin == stdin.decode("utf-8", "replace")
    assert inv.conf is None and inv.conf_error


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDC00", "\\ud83d\\ude00"])
def test_a_surrogate_escape_goes_as_a_string(escape: str) -> None:
    """Python reads a lone surrogate escape, msgspec refuses it: as a raw value it would
    make the whole frame undecodable, and even a DEL would be refused (code 6)."""
    for verb in ("ADD", "DEL"):
        stdin = ('{"cniVersion":"1.0.0","name":"n","x":"' + escape + '","runtimeConfig":{"'
                 + POD_ANNOTATIONS + '":{"a":"b"}}}').encode()
        _, req, inv = through(verb, stdin)
        assert len(req.config) == 0 and req.stdin
        assert inv.verb == verb


def test_a_del_with_numbers_keeps_them() -> None:
    conf = {"cniVersion": "1.0.0", "name": "n", "mtu": 1500, "rate": 0.25, "big": 10 ** 30,
            "tiny": -1.5e-300, "runtimeConfig": {POD_ANNOTATIONS: {"a": "b"},
                                                 "bandwidth": {"ingressRate": 1e9}}}
    _, _, inv = through("DEL", json.dumps(conf).encode())
    del conf["runtimeConfig"][POD_ANNOTATIONS]  # type: ignore[attr-defined]
    assert inv.conf == conf


def test_a_del_whose_config_cannot_be_reencoded_goes_whole() -> None:
    """1e999 reads as infinity in Python, which JSON cannot say: the plugin sends the
    stdin as it came, and the daemon drops the annotations itself."""
    stdin = ('{"cniVersion":"1.0.0","name":"n","x":1e999,"runtimeConfig":{"'
             + POD_ANNOTATIONS + '":{"a":"b"}}}').encode()
    _, req, inv = through("DEL", stdin)
    assert bytes(req.config) == stdin
    assert inv.conf is None  # out of range for the daemon: DEL needs no config


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(conf=st.dictionaries(st.text(), JSON_VALUES, max_size=6), go=st.booleans(),
       verb=st.sampled_from(["ADD", "DEL", "CHECK"]))
def test_any_object_arrives_as_the_runtime_wrote_it(conf: dict[str, Any], go: bool,
                                                    verb: str) -> None:
    stdin = go_json(conf) if go else json.dumps(conf).encode()
    body, req, inv = through(verb, stdin)
    assert inv.conf == conf
    if len(req.config):
        assert len(body) <= len(stdin) + len(json.dumps(ENV)) + len(',"config":')


def test_the_size_rule() -> None:
    limit = 1 << 20
    assert readable(limit, limit) and admitted(limit, limit, "ADD")
    assert readable(limit + 1, limit) and readable(DEL_CEILING, limit)
    assert not readable(DEL_CEILING + 1, limit)
    assert readable(DEL_CEILING + 1, DEL_CEILING + 1)  # a larger limit wins
    assert admitted(limit + 1, limit, "DEL")
    for other in ("ADD", "CHECK", "GC", ""):
        assert not admitted(limit + 1, limit, other)
