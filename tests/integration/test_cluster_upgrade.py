"""We test an upgrade of the cluster IPAM on a live cluster: daemons of this netctl start
on what three netctl 0.1.0 daemons left in the API and in their journals
(``tests/fixtures/upgrade/``, its ``capture.py`` says how it was made), and lose nothing:

- each node holds the blocks and borrow objects its journal holds, adopts none, and
  keeps every live allocation; no ADD hands out an address another holds;
- the borrow node-b granted node-a stays lent: node-b's block filled, never that address;
  given back once free;
- the sticky reservation published on node-a's block is granted to its identity on
  node-b; the one on node-c's borrow object (a handed-over one, with a history) is
  handed over again, to node-a;
- the transfer ask pending on node-c's borrow object is answered (refused: that identity
  has no reservation there), the refused one on node-a's is left as it is.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import harness, journaldb
from netctl_kit.kubefake import IPAMBLOCKS, node

from netctl.journal import query
from tests.conftest import SYSTEM_CNI, TEST_PLUGINS, TEST_SETTINGS, Daemon, Kube, kube_server
from tests.fixtures.upgrade.capture import ipam

pytestmark = [pytest.mark.netns, pytest.mark.servers("fake", "real")]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade"
NODES = ("node-a", "node-b", "node-c")


def fixture_objects() -> list[dict[str, Any]]:
    """The IPAMBlocks as netctl 0.1.0 left them."""
    items: list[dict[str, Any]] = json.loads((FIXTURE / "ipamblocks.json").read_text())["items"]
    return items


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> Iterator[Kube]:
    with kube_server(request, crds=[IPAMBLOCKS], bookmark_interval=0.5) as server:
        yield server
        assert server.server_errors == []


@pytest.fixture
def upgraded(tmp_path: Path, kube: Kube, installed_plugin: Path) -> Iterator[dict[str, Daemon]]:
    """The fixture's objects in ``kube`` (their name, labels and spec), and a daemon of this
    netctl per node on the fixture's journal of that node, each ready."""
    for obj in fixture_objects():
        kube.create("ipamblocks", {
            "apiVersion": obj["apiVersion"], "kind": obj["kind"], "spec": obj["spec"],
            "metadata": {"name": obj["metadata"]["name"], "labels": obj["metadata"]["labels"]}})
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    daemons: dict[str, Daemon] = {}
    try:
        for i, name in enumerate(NODES):
            d = daemons[name] = Daemon(tmp_path / name, f"ncg{i}",
                                       [str(TEST_PLUGINS), SYSTEM_CNI], {
                **TEST_SETTINGS, "kubeconfig": str(config), "node-name": name,
                "ipam-backend": "kubernetes", "api-timeout": 3, "block-check": 0.2,
                **({"block-idle": 0.3} if name == "node-a" else {})})
            shutil.copytree(installed_plugin, Path(d.plugin).parent)
            d.state_dir.mkdir(parents=True)
            Path(d.journal_path).write_bytes(
                gzip.decompress((FIXTURE / f"journal-{name}.db.gz").read_bytes()))
            kube.create("nodes", node(name))
        for d in daemons.values():
            d.start()
        harness.wait_for(lambda: all(d.status()["kubernetes"]["ipam"]["ready"]
                                     for d in daemons.values()), 30, "the cluster IPAMs ready")
        yield daemons
    finally:
        for d in daemons.values():
            d.shut_down()


def live(d: Daemon) -> set[tuple[str, str]]:
    return {(a["container_id"], a["address"]) for a in d.read(query.live_allocations)}


def held(d: Daemon) -> list[str]:
    return sorted(r["cidr"] for r in d.read(journaldb.block_rows, state="held"))


def rounded(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its reservations' ``until`` in whole seconds: the journal's (which a
    restarted node publishes) and the one published at the release lie a moment apart."""
    return {**spec, "reserved": [{**e, "until": round(e["until"])}
                                 for e in spec.get("reserved", [])]}


def specs(kube: Kube) -> dict[str, dict[str, Any]]:
    return {b["spec"]["cidr"]: b["spec"] for b in kube.list("ipamblocks")}


def test_an_upgrade_keeps_every_allocation_borrow_and_reservation(
        upgraded: dict[str, Daemon], kube: Kube) -> None:
    a, b, c = (upgraded[n] for n in NODES)
    before = {  # the fixture's journals, as netctl 0.1.0 left them
        "node-a": {("a0", "10.192.0.64"), ("a1", "10.192.0.65"), ("a2", "10.192.0.66"),
                   ("borrower", "10.192.0.46")},
        "node-b": {("b0", "10.192.0.32"), ("b1", "10.192.0.33")},
        "node-c": {("c0", "10.192.0.128")}}
    assert {name: live(d) for name, d in upgraded.items()} == before
    assert held(a) == ["10.192.0.46/32", "10.192.0.64/28"]
    assert held(b) == ["10.192.0.32/28"]
    assert held(c) == ["10.192.0.128/28", "10.192.0.68/32"]
    for d in upgraded.values():
        assert "adopted" not in d.log() and "cluster IPAM:" not in d.log(), d.log()
    assert b.status()["kubernetes"]["ipam"]["lent"] == 1
    # the ask pending on node-c's borrow object answered; the refused one left as it was
    harness.wait_for(lambda: specs(kube)["10.192.0.68/32"]["transfer"].get("refused"), 20,
                     "node-c's answer to the pending ask")
    objects = specs(kube)
    assert [(objects[cidr]["node"], objects[cidr]["transfer"]) for cidr in (
        "10.192.0.68/32", "10.192.0.46/32")] == [
        ("node-c", {"node": "node-b", "identity": "pod:apps/s-1", "ifname": "eth0",
                    "refused": True}),
        ("node-a", {"node": "node-c", "identity": "pod:apps/nobody", "ifname": "eth0",
                    "refused": True})]
    old = {s["cidr"]: s for s in (o["spec"] for o in fixture_objects())}
    for cidr in ("10.192.0.32/28", "10.192.0.64/28", "10.192.0.128/28", "10.192.0.46/32"):
        assert rounded(objects[cidr]) == rounded(old[cidr])

    # node-b's block filled: never the address it lent node-a, nor one held elsewhere
    taken = {ip for held_now in before.values() for _, ip in held_now}
    got = [ipam(b, "ADD", f"fill{i}") for i in range(16)]
    assert len(set(got)) == 16 and not set(got) & taken
    # the reservation on node-a's block: granted to its identity on node-b
    assert ipam(b, "ADD", "t0-2", "t-0") == "10.192.0.67"
    # the reservation on node-c's borrow object: handed over to node-a for its identity
    assert ipam(a, "ADD", "s0-4", "s-0") == "10.192.0.68"
    s0 = specs(kube)["10.192.0.68/32"]
    assert (s0["node"], [h["node"] for h in s0["history"]]) == ("node-a", ["node-b", "node-c"])
    # the borrowed address given back once free
    ipam(a, "DEL", "borrower")
    harness.wait_for(lambda: "10.192.0.46/32" not in specs(kube), 30, "the borrow released")
    for name, d in upgraded.items():
        assert before[name] - {("borrower", "10.192.0.46")} <= live(d)

