"""We test the DEL that arrives while the daemon is down: the plugin exits 0 and leaves a
durable record beside the socket (``pending-del/``), and the restarted daemon finishes it
in its start-up replay, before its socket accepts; a record for a container the journal
never saw is dropped; corrupt, foreign and half-written records do not trip the daemon;
a record never undoes an ADD that came after it. And the first reconcile round runs right
after the replay: a sandbox that vanished while the daemon was down is released at once,
with the periodic round off.

Subnet: 10.182.0.0/24."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from netctl_kit import harness, journaldb

from tests.conftest import Daemon, bridge_conf, bridge_ports, ipam_held, netns_links, wait_for

pytestmark = pytest.mark.netns


def _start(daemon: Daemon) -> str:
    br = daemon.name("d0")
    daemon.add_network("rd", bridge_conf("rd", br, "10.182.0.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    return br


def _records(daemon: Daemon) -> list[str]:
    pending = Path(daemon.socket).parent / "pending-del"
    return sorted(os.listdir(pending)) if pending.is_dir() else []


def _write_record(daemon: Daemon, name: str, data: bytes) -> Path:
    pending = Path(daemon.socket).parent / "pending-del"
    pending.mkdir(mode=0o700, exist_ok=True)
    (pending / name).write_bytes(data)
    return pending / name


def test_a_del_while_the_daemon_is_down_is_finished_before_the_restart_serves(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = _start(daemon)
    conf = daemon.conf("rd", "1.0.0")
    gone, kept = netns(), netns()
    for container, ns in (("down1", gone), ("up1", kept)):
        assert daemon.cni("ADD", container, ns, conf).rc == 0
    assert len(bridge_ports(br)) == 2
    daemon.kill()

    res = daemon.cni("DEL", "down1", gone, conf)
    assert res.rc == 0, res.describe()
    assert "recorded" in res.stderr and "pending-del" in res.stderr, res.stderr
    [record] = _records(daemon)
    assert record.endswith(".del")
    assert json.loads((Path(daemon.socket).parent / "pending-del" / record).read_text())[
        "container_id"] == "down1"

    daemon.start()  # returns once the socket accepts
    assert daemon.live_attachments_of(["down1"]) == 0  # finished before it served
    assert daemon.live_attachments_of(["up1"]) == 2 - 1  # one attachment: eth0
    assert len(bridge_ports(br)) == 1 and netns_links(gone) == ["lo"]
    assert len(ipam_held(daemon.ipam_dir)) == 1
    assert _records(daemon) == []
    assert daemon.status()["replay"]["recorded_dels"] == {
        "finished": 1, "dropped": 0, "corrupt": 0, "failed": []}
    assert [(o["verb"], o["origin"], o["state"]) for o in daemon.read(
        journaldb.operation_rows, container="down1")] == [("ADD", "runtime", "done"),
                                                          ("DEL", "plugin-record", "done")]
    assert daemon.cni("DEL", "up1", kept, conf).rc == 0


def test_records_unknown_corrupt_foreign_or_half_written_do_not_trip_the_daemon(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = _start(daemon)
    daemon.kill()
    conf = daemon.conf("rd", "1.0.0")
    never = daemon.cni("DEL", "never-seen", netns(), conf)  # the journal never saw it
    assert never.rc == 0 and "recorded" in never.stderr
    now = time.time_ns()
    _write_record(daemon, f"{now:020d}-1.del", b'{"command": "DEL", "container_id": "x"')
    _write_record(daemon, f"{now:020d}-2.del", b"\xff\xfe not json")
    _write_record(daemon, f"{now:020d}-3.del", json.dumps(
        {"command": "ADD", "container_id": "sneaky", "netns": "/proc/1/ns/net",
         "ifname": "eth0", "stdin": json.dumps(conf)}).encode())
    _write_record(daemon, "not-a-record.del", b'{"command": "DEL"}')
    fresh = _write_record(daemon, f".{now:020d}-4.tmp", b'{"command": "DE')
    old = _write_record(daemon, f".{now - 120 * 10**9:020d}-5.tmp", b'{"comm')
    os.utime(old, (time.time() - 120, time.time() - 120))

    daemon.start()
    assert daemon.status()["replay"]["recorded_dels"] == {
        "finished": 0, "dropped": 1, "corrupt": 4, "failed": []}
    assert _records(daemon) == [fresh.name]  # a plugin may still be writing that one
    assert daemon.read(journaldb.operation_rows,
                       containers=("never-seen", "x", "sneaky")) == []
    log = daemon.log()
    assert "not-a-record.del" in log and "not DEL" in log
    ns = netns()
    assert daemon.cni("ADD", "after", ns, conf).rc == 0 and len(bridge_ports(br)) == 1
    assert daemon.cni("DEL", "after", ns, conf).rc == 0 and bridge_ports(br) == []


def test_a_record_never_undoes_an_add_that_came_after_it(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    """A record that lands while the daemon starts is finished by the next round; by then
    the runtime may have ADDed the same container again (podman network reload)."""
    br = _start(daemon)
    conf = daemon.conf("rd", "1.0.0")
    ns = netns()
    stale = json.dumps({"command": "DEL", "container_id": "again", "netns": "/run/netns/x",
                        "ifname": "eth0", "stdin": json.dumps(conf)}).encode()
    # written a second ago: the ADD below is journaled after it
    _write_record(daemon, f"{time.time_ns() - 10**9:020d}-7.del", stale)
    assert daemon.cni("ADD", "again", ns, conf).rc == 0
    report = daemon.reconcile()  # a round finishes recorded DELs first
    assert report["errors"] == []
    assert _records(daemon) == []
    assert daemon.live_attachments_of(["again"]) == 1 and len(bridge_ports(br)) == 1
    assert daemon.cni("DEL", "again", ns, conf).rc == 0


def test_a_sandbox_that_vanished_while_down_is_released_by_the_first_round(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    """``reconcile-interval`` 0: no periodic round, only the one right after the replay."""
    daemon.settings["reconcile-grace"] = 0
    br = _start(daemon)
    conf = daemon.conf("rd", "1.0.0")
    ns = netns()
    assert daemon.cni("ADD", "vanish1", ns, conf).rc == 0
    daemon.kill()
    harness.netns_del(ns)
    daemon.start()
    wait_for(lambda: daemon.live_attachments_of(["vanish1"]) == 0, 20,
             "the vanished sandbox released by the first round")
    assert bridge_ports(br) == [] and ipam_held(daemon.ipam_dir) == []
    # the round right after the replay DELs it; on a loaded machine the kernel may destroy
    # the netns (and the host veth) only after the daemon started, and then the netlink
    # event's round can be first: either way one DEL, and no periodic round
    ops = [op for op in daemon.read(journaldb.operation_states)
           if op[1] in ("reconcile", "event")]
    assert ("RECONCILE", "reconcile", "done") in ops
    assert [op for op in ops if op[0] == "DEL"] in ([("DEL", "reconcile", "done")],
                                                   [("DEL", "event", "done")]), ops
