"""We test a broken journal: pages in the middle of the file overwritten while the daemon
was stopped (as a bad block or a lying fsync leaves them). The daemon refuses to start on
it, says so naming the command, and leaves the file as it was; ``netctl journal rebuild``
keeps it aside and builds a new journal from what can be read; the restarted daemon
serves, the live pods keep their networks and their addresses (netctl's own IPAM: the
addresses live in the journal), and their DELs release everything.

Subnet: 10.187.0.0/24."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from netctl_kit import harness, journaldb

from tests.conftest import Daemon, bridge_ports, ipam_bridge, netns_links

pytestmark = pytest.mark.netns


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def address(res: harness.CNIResult) -> str:
    assert res.rc == 0 and res.out is not None, res.describe()
    return str(res.out["ips"][0]["address"])


def test_a_broken_journal_is_kept_aside_and_rebuilt_and_live_pods_keep_everything(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = daemon.name("j0")
    daemon.add_network("bj", ipam_bridge("bj", br, {"type": "netctl-ipam",
                                                    "range": "10.187.0.0/24"}))
    daemon.start()
    conf = daemon.conf("bj", "1.0.0")
    scratch = netns()
    for i in range(40):  # history: a page or two of operations and steps
        assert daemon.cni("ADD", f"old{i}", scratch, conf).rc == 0
        assert daemon.cni("DEL", f"old{i}", scratch, conf).rc == 0
    live = {f"live{i}": netns() for i in range(3)}
    held = {c: address(daemon.cni("ADD", c, ns, conf)) for c, ns in live.items()}
    assert daemon.stop() == 0

    # overwrite history's pages in the middle of the file (early steps and operations)
    path = daemon.journal_path
    pages = daemon.read(journaldb.leaf_pages, "steps")[:2] + \
        daemon.read(journaldb.leaf_pages, "operations")[1:2]
    size = daemon.read(journaldb.page_size)
    with open(path, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * size + 8)
            fh.write(os.urandom(size - 8))
    before = digest(path)

    # refused at start, naming the problem and the command; the file untouched
    daemon.start(wait=False)
    assert daemon.proc is not None and daemon.proc.wait(30) != 0
    log = daemon.log()
    assert "fails its integrity check" in log and "netctl journal rebuild" in log, log
    assert digest(path) == before

    # rebuilt: the broken file kept aside whole, what could be read copied
    report = harness.netctl_json("journal", "rebuild", "--state-dir", str(daemon.state_dir))
    assert os.path.basename(report["kept_aside"][0]).startswith("journal.db.broken-")
    assert digest(report["kept_aside"][0]) == before
    assert report["problems"] and report["lost"], report
    assert report["copied"]["attachments"] >= 3 and report["copied"]["ipam_allocations"] >= 3
    assert daemon.read(journaldb.integrity) == ["ok"]

    # the daemon serves again; the live pods keep their networks and addresses
    daemon.start()
    assert daemon.status()["ready"] is True
    assert len(bridge_ports(br)) == 3
    for ns in live.values():
        assert "eth0" in netns_links(ns)
    fresh = netns()
    new = address(daemon.cni("ADD", "fresh", fresh, conf))
    assert new not in held.values()
    for container, ns in [*live.items(), ("fresh", fresh)]:
        assert daemon.cni("DEL", container, ns, conf).rc == 0
    assert bridge_ports(br) == []
    assert daemon.read(journaldb.live_counts) == (0, 0)
    rebuild = harness.netctl_argv("journal", "rebuild", "--state-dir", str(daemon.state_dir),
                                  "--json")
    refused = harness.run(rebuild)  # never under a running daemon
    assert refused.returncode == 1 and b"stop it first" in refused.stderr
    assert daemon.stop() == 0
    done = harness.run(rebuild)  # the new journal passes its check: nothing to rebuild
    assert done.returncode == 0 and json.loads(done.stdout)["kept_aside"] == []
