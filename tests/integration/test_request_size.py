"""We test these aspects: no DEL is refused for its size, and an ADD over the limit is
told which setting raises it — against a real daemon, real netns and real plugins.

- A containerd-shaped request (the pod's annotations in
  ``runtimeConfig["io.kubernetes.cri.pod-annotations"]``, one of them 200 KiB of ``<``,
  written to stdin as Go writes it, every ``<`` as ``\\u003c``: 1.2 MB): the ADD and the
  DEL succeed under the default ``max-request-bytes``, the attachment is gone after the
  DEL, and the journal's DEL holds no annotations.
- A DEL frame from an older plugin (stdin re-escaped into a JSON string, 1.4 MB) over a
  small ``max-request-bytes`` is still served.
- The same DEL while the daemon is down is recorded without the annotations, and
  finished at the next start.
- An ADD over a small ``max-request-bytes`` gets code 105 naming its size, the limit and
  the setting; nothing runs.

Subnets: 10.114.0.0/24.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

import pytest
from netctl_kit import journaldb

from tests.conftest import Daemon, bridge_conf, bridge_ports, netns_links, wait_for

pytestmark = pytest.mark.netns

POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
BIG = 200 * 1024  # one annotation's length: Kubernetes allows 256 KiB in all


def go_json(obj: Any) -> bytes:
    """JSON as Go's encoding/json (containerd, CRI-O) writes it: ``<``, ``>``, ``&``
    escaped."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def containerd_conf(daemon: Daemon, size: int = BIG) -> dict[str, Any]:
    """The config containerd hands the plugin for a pod with a ``size``-byte annotation."""
    return daemon.conf("br", runtimeConfig={POD_ANNOTATIONS: {
        "k8s.v1.cni.cncf.io/networks": "[]", "example.com/notes": "<" * size}})


def setup(daemon: Daemon, **settings: Any) -> str:
    br = daemon.name("b")
    daemon.add_network("br", bridge_conf("br", br, "10.114.0.0/24", ipam_dir=daemon.ipam_dir))
    daemon.settings.update(settings)
    daemon.start()
    return br


def assert_attached(daemon: Daemon, ns: str, br: str) -> None:
    assert len(bridge_ports(br)) == 1
    assert "eth0" in netns_links(ns)
    assert daemon.live_counts()[0] == 1


def assert_gone(daemon: Daemon, ns: str, br: str) -> None:
    assert bridge_ports(br) == []
    assert netns_links(ns) == ["lo"]
    assert daemon.live_counts()[0] == 0


def journaled_dels(daemon: Daemon) -> list[bytes]:
    return [bytes(o["request"])
            for o in daemon.read(journaldb.operation_rows, verb="DEL", state="done")]


def old_frame(command: str, container: str, ns: str, stdin: bytes) -> bytes:
    """A request frame as a plugin from before the raw ``config`` field sent it: stdin
    escaped into the string ``stdin`` (every ``\\u003c`` now 7 bytes)."""
    body = json.dumps({"command": command, "container_id": container,
                       "netns": f"/var/run/netns/{ns}", "ifname": "eth0", "args": "",
                       "path": "/opt/cni/bin", "stdin": stdin.decode(),
                       "plugin": "netctl-cni"}).encode()
    return struct.pack(">I", len(body)) + body


def raw_request(path: str, frame: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(path)
        try:
            s.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused unread: the answer is waiting
        (size,) = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))
        reply: dict[str, Any] = json.loads(s.recv(size, socket.MSG_WAITALL))
        return reply


def test_containerd_add_and_del_with_a_200k_annotation(daemon: Daemon, netns) -> None:
    br = setup(daemon)
    ns = netns()
    stdin = go_json(containerd_conf(daemon))
    assert len(stdin) > 6 * BIG
    res = daemon.cni("ADD", "big1", ns, stdin, pod="shop/web")
    assert res.rc == 0, res.describe()
    assert_attached(daemon, ns, br)
    res = daemon.cni("DEL", "big1", ns, stdin, pod="shop/web")
    assert res.rc == 0, res.describe()
    assert_gone(daemon, ns, br)
    (request,) = journaled_dels(daemon)
    assert POD_ANNOTATIONS.encode() not in request and len(request) < 2000
    assert json.loads(request)["runtimeConfig"] == {}


def test_an_older_plugins_del_over_the_limit_is_served(daemon: Daemon, netns) -> None:
    br = setup(daemon, **{"max-request-bytes": 65536})
    ns = netns()
    res = daemon.cni("ADD", "big2", ns, go_json(containerd_conf(daemon, 100)))
    assert res.rc == 0, res.describe()
    assert_attached(daemon, ns, br)
    frame = old_frame("DEL", "big2", ns, go_json(containerd_conf(daemon)))
    assert len(frame) > 7 * BIG
    reply = raw_request(daemon.socket, frame)
    assert reply.get("status", 0) == 0, reply
    assert_gone(daemon, ns, br)
    (request,) = journaled_dels(daemon)
    assert POD_ANNOTATIONS.encode() not in request
    # an ADD as large is refused, unread or not
    reply = raw_request(daemon.socket, old_frame("ADD", "big3", ns, go_json(
        containerd_conf(daemon))))
    assert reply["status"] == 1 and json.loads(reply["output"])["code"] == 105, reply


def test_a_del_recorded_while_the_daemon_is_down_leaves_the_annotations_out(
        daemon: Daemon, netns) -> None:
    br = setup(daemon)
    ns = netns()
    stdin = go_json(containerd_conf(daemon))
    res = daemon.cni("ADD", "big4", ns, stdin)
    assert res.rc == 0, res.describe()
    daemon.stop()
    res = daemon.cni("DEL", "big4", ns, stdin)
    assert res.rc == 0 and "recorded" in res.stderr, res.describe()
    pending = os.path.join(os.path.dirname(daemon.socket), "pending-del")
    (record,) = os.listdir(pending)
    with open(os.path.join(pending, record), "rb") as fh:
        data = fh.read()
    assert POD_ANNOTATIONS.encode() not in data and len(data) < 2000
    daemon.start()
    assert_gone(daemon, ns, br)
    wait_for(lambda: not os.listdir(pending), what="the record removed")


def test_an_add_over_the_limit_names_the_setting(daemon: Daemon, netns) -> None:
    setup(daemon, **{"max-request-bytes": 65536})
    ns = netns()
    stdin = go_json(containerd_conf(daemon, 70_000))
    res = daemon.cni("ADD", "big5", ns, stdin)
    assert res.rc == 1 and res.out is not None, res.describe()
    assert res.out["code"] == 105, res.out
    for fragment in ("request of", "exceeds the daemon's limit of 65536 bytes",
                     "max-request-bytes"):
        assert fragment in res.out["msg"], res.out
    assert netns_links(ns) == ["lo"]
    assert daemon.read(journaldb.row_counts, ("operations",)) == {"operations": 0}
