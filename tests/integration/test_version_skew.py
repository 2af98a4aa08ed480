"""We test version skew during a rolling upgrade — the host's plugin binary and the daemon
are replaced at different moments — both ways, against a real daemon, real netns and
real plugins:

- a daemon given a frame of a protocol newer than its own (``"proto": 3``) refuses it at
  once with code 11 naming both protocols, ADD and DEL alike, and does nothing; it
  serves the next good request;
- a frame without ``proto`` (the Python plugin's shape: stdin as the string ``stdin``)
  is served as version 1: ADD and DEL work;
- the plugin binary facing a daemon that refuses its protocol (an older daemon: its
  answer names a lower ``proto``): an ADD prints that error (exit 1), a DEL is recorded
  durably as when the daemon is down (exit 0 with a warning) and the daemon's next
  start finishes it — no DEL lost;
- a recorded DEL of a newer protocol (left by an upgraded plugin that this daemon
  refused) is kept, neither carried out nor removed, and reported;
- every answer carries the daemon's protocol.

Subnet: 10.183.0.0/24.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.cni.request import PROTO
from tests.conftest import Daemon, bridge_conf, bridge_ports, netns_links
from tests.framerecorder import FrameRecorder
from tests.integration.test_request_size import raw_request

pytestmark = pytest.mark.netns


def _start(daemon: Daemon) -> str:
    br = daemon.name("v0")
    daemon.add_network("vs", bridge_conf("vs", br, "10.183.0.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    return br


def frame(fields: dict[str, Any]) -> bytes:
    body = json.dumps(fields).encode()
    return struct.pack(">I", len(body)) + body


def request(command: str, container: str, ns: str, conf: dict[str, Any],
            **extra: Any) -> dict[str, Any]:
    return {"command": command, "container_id": container, "netns": f"/var/run/netns/{ns}",
            "ifname": "eth0", "args": "", "path": "/opt/cni/bin", "plugin": "netctl-cni",
            **extra}


def test_a_frame_of_a_newer_protocol_is_refused_naming_both(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = _start(daemon)
    ns = netns()
    conf = daemon.conf("vs", "1.0.0")
    for verb in ("ADD", "DEL", "CHECK"):
        reply = raw_request(daemon.socket, frame(request(verb, "new1", ns, conf, proto=3,
                                                         config=conf)))
        assert reply["status"] == 1 and reply["proto"] == PROTO == 2, reply
        err = json.loads(reply["output"])
        assert err["code"] == 11, err
        for fragment in ("protocol 3", "this netctl daemon's protocol 2", "upgrade",
                         "try again later"):
            assert fragment in err["msg"], err
    assert netns_links(ns) == ["lo"] and bridge_ports(br) == []
    assert daemon.read(journaldb.row_counts, ("operations",)) == {"operations": 0}
    assert "frame of protocol 3" in daemon.log()
    # and it serves the plugin it speaks with
    assert daemon.cni("ADD", "new1", ns, conf).rc == 0 and len(bridge_ports(br)) == 1
    assert daemon.cni("DEL", "new1", ns, conf).rc == 0 and bridge_ports(br) == []


def test_a_frame_without_a_protocol_is_served_as_version_1(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    """The frame of the Python plugin that came before the binary: no ``proto``, and the
    config as the string ``stdin``."""
    br = _start(daemon)
    ns = netns()
    conf = daemon.conf("vs", "1.0.0")
    add = raw_request(daemon.socket, frame(request("ADD", "old1", ns, conf,
                                                   stdin=json.dumps(conf))))
    assert add.get("status", 0) == 0 and add["proto"] == PROTO, add
    assert json.loads(add["output"])["interfaces"], add
    assert "eth0" in netns_links(ns) and len(bridge_ports(br)) == 1
    delete = raw_request(daemon.socket, frame(request("DEL", "old1", ns, conf,
                                                      stdin=json.dumps(conf))))
    assert delete.get("status", 0) == 0, delete
    assert netns_links(ns) == ["lo"] and bridge_ports(br) == []
    assert daemon.live_attachments_of(["old1"]) == 0


def test_a_del_an_older_daemon_refuses_is_recorded_and_finished_after_the_upgrade(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = _start(daemon)
    ns = netns()
    conf = daemon.conf("vs", "1.0.0")
    assert daemon.cni("ADD", "skew1", ns, conf).rc == 0 and len(bridge_ports(br)) == 1
    daemon.stop()
    # An older daemon on the same socket: it refuses the binary's protocol 2.
    Path(daemon.socket).unlink(missing_ok=True)
    refusal = {"cniVersion": "1.0.0", "code": 11, "msg": "netctl-cni sent a frame of "
               "protocol 2, newer than this netctl daemon's protocol 1: ...; try again later"}
    with FrameRecorder(daemon.socket, {"status": 1, "output": json.dumps(refusal),
                                       "proto": 1}) as older:
        add = daemon.cni("ADD", "skew2", netns(), conf)
        assert add.rc == 1 and add.out == refusal, add.describe()
        res = daemon.cni("DEL", "skew1", ns, conf)
        assert res.rc == 0 and res.stdout == "", res.describe()
        assert "frame protocol 1, older than this plugin's 2" in res.stderr, res.stderr
        assert "recorded" in res.stderr and "pending-del" in res.stderr, res.stderr
        assert [json.loads(f)["command"] for f in older.frames] == ["ADD", "DEL"]
    pending = Path(daemon.socket).parent / "pending-del"
    (record,) = pending.iterdir()
    assert json.loads(record.read_bytes())["proto"] == PROTO  # the binary's frame, as sent
    assert len(bridge_ports(br)) == 1  # nothing done yet

    daemon.start()  # the upgraded daemon: its start-up replay finishes the DEL
    assert daemon.live_attachments_of(["skew1"]) == 0
    assert bridge_ports(br) == [] and netns_links(ns) == ["lo"]
    assert list(pending.iterdir()) == []
    assert daemon.status()["replay"]["recorded_dels"]["finished"] == 1
    assert [(o["verb"], o["origin"], o["state"]) for o in daemon.read(
        journaldb.operation_rows, container="skew1")] == [("ADD", "runtime", "done"),
                                                          ("DEL", "plugin-record", "done")]


def test_a_recorded_del_of_a_newer_protocol_waits_for_the_upgraded_daemon(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = _start(daemon)
    ns = netns()
    conf = daemon.conf("vs", "1.0.0")
    assert daemon.cni("ADD", "later1", ns, conf).rc == 0
    daemon.kill()
    pending = Path(daemon.socket).parent / "pending-del"
    pending.mkdir(mode=0o700, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}.del"
    (pending / name).write_text(json.dumps(request("DEL", "later1", ns, conf, proto=3,
                                                   config=conf)))
    daemon.start()
    recorded = daemon.status()["replay"]["recorded_dels"]
    assert recorded["finished"] == 0 and recorded["corrupt"] == 0, recorded
    (why,) = recorded["failed"]
    assert name in why and "protocol 3" in why and "kept for the upgraded daemon" in why
    assert [p.name for p in pending.iterdir()] == [name]  # kept
    assert daemon.live_attachments_of(["later1"]) == 1 and len(bridge_ports(br)) == 1
    (pending / name).unlink()
    assert daemon.cni("DEL", "later1", ns, conf).rc == 0 and bridge_ports(br) == []
