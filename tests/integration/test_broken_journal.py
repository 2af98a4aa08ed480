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
    assert report["problems"] and report["broken_spans"], report
    assert not os.path.exists(f"{path}.rebuilding")  # built aside, renamed into place
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


@pytest.mark.parametrize("broken", [("attachments",),
                                    ("attachments", "ipam_allocations", "operations")],
                         ids=["attachments-lost", "allocations-lost"])
def test_live_pods_whose_rows_were_lost_keep_their_addresses(
        daemon: Daemon, netns: Callable[[], str], broken: tuple[str, ...]) -> None:
    """The rows of live pods on broken pages: the rebuild reads their addresses back from
    their netns, so no other pod is given them, and they are released once the netns go."""
    br = daemon.name("j1")
    daemon.settings["reconcile-grace"] = 0
    ipam = {"type": "netctl-ipam", "range": "10.187.1.0/24"}
    if "ipam_allocations" in broken:  # a pool whose key is first-last/prefix
        ipam |= {"range_start": "10.187.1.20", "range_end": "10.187.1.90"}
    daemon.add_network("bk", ipam_bridge("bk", br, ipam))
    daemon.start()
    conf = daemon.conf("bk", "1.0.0")
    live = {f"pod{i}": netns() for i in range(3)}
    results = {c: daemon.cni("ADD", c, ns, conf) for c, ns in live.items()}
    held = {c: address(res).split("/")[0] for c, res in results.items()}
    # the runtime's cached ADD result of one of them, as libcni writes it
    cache = daemon.root / "cni-results"
    cache.mkdir(exist_ok=True)
    (cache / "netctl-pod0-eth0").write_text(json.dumps({
        "kind": "cniCacheV1", "containerId": "pod0", "ifName": "eth0",
        "networkName": "netctl", "cniArgs": [["K8S_POD_NAMESPACE", "default"],
                                             ["K8S_POD_NAME", "web-0"]],
        "result": results["pod0"].out}))
    assert daemon.stop() == 0

    pages = [page for table in broken for page in daemon.read(journaldb.leaf_pages, table)]
    size = daemon.read(journaldb.page_size)
    with open(daemon.journal_path, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * size + 8)
            fh.write(os.urandom(size - 8))
    report = harness.netctl_json("journal", "rebuild", "--config",
                                 str(daemon.root / "daemon.json"))
    assert report["problems"], report
    found = {item["address"]: item for item in report["recovered"]}
    assert set(found) == set(held.values()), report["recovered"]
    if "ipam_allocations" in broken:  # held again, for the container the node names
        assert all(item["kind"] == "recovered" for item in found.values())
        pod0 = found[held["pod0"]]
        assert (pod0["container"], pod0["named_by"], pod0["ifname"]) == \
            ("pod0", "runtime cache", "eth0")
        assert {found[held[c]]["named_by"] for c in ("pod1", "pod2")} == {"nothing"}
    else:  # the allocations survived their attachments: kept, not released as orphans
        assert all(item["kind"] == "kept" for item in found.values())

    daemon.start()
    daemon.reconcile()  # a round: nothing of the live pods is touched
    assert len(bridge_ports(br)) == 3
    assert daemon.read(journaldb.live_counts) == (0, 3)
    fresh = netns()
    taken = daemon.cni("ADD", "fresh", fresh, conf, args=[f"IP={held['pod1']}"])
    assert taken.out is not None and taken.out["code"] == 7, taken.describe()
    assert f"already allocated to an unknown container in netns /run/netns/{live['pod1']}" \
        in taken.out["msg"] if "ipam_allocations" in broken else \
        "already allocated to container pod1" in taken.out["msg"], taken.describe()
    assert address(daemon.cni("ADD", "fresh", fresh, conf)).split("/")[0] \
        not in held.values()
    for container, ns in [*live.items(), ("fresh", fresh)]:  # the runtime's DELs, netns gone
        assert daemon.cni("DEL", container, ns, conf).rc == 0
        harness.netns_del(ns)
    daemon.reconcile()
    assert daemon.read(journaldb.live_counts) == (0, 0)
    assert bridge_ports(br) == []
