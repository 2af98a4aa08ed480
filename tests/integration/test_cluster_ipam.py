"""We test the cluster-wide IPAM (``ipam-backend: kubernetes``) with real daemons as nodes
of one fake API server (real HTTP, the real kubernetes-asyncio client): several nodes
allocating concurrently from one pool hand out no address twice and each block has one
owner; steady churn writes nothing to the API; a crash between a block's claim and its
record is settled at the restart; a pool exhausted across nodes answers code 100 naming
it, and released blocks are claimed again; a deleted node's blocks are taken over after
the grace, never while its pods live, one owner when two nodes race; a node whose state
dir was wiped hands out no address its pods still hold; whereabouts' records are taken; a
lender whose watch lags behind its own grant never hands the lent address out.

Addresses are allocated through the plain ``netctl-ipam`` plugin (what a delegate with
``"ipam": {"type": "netctl-ipam"}`` execs): the node's allocator and its API traffic,
without a netns per pod. Pools: 10.185.0.0/16 and smaller ones inside it."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import harness, journaldb
from netctl_kit.harness import CNIResult
from netctl_kit.kubefake import IPAMBLOCKS, IPPOOLS, RESERVATIONS, FakeKube, node, pod

from netctl.journal import query
from tests.conftest import (
    SYSTEM_CNI,
    TEST_PLUGINS,
    TEST_SETTINGS,
    Daemon,
    Kube,
    kube_server,
    wait_for,
)

pytestmark = [pytest.mark.netns, pytest.mark.servers("fake", "real")]

WRITES = ("create", "update", "patch", "delete")


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> Iterator[Kube]:
    with kube_server(request, crds=[IPAMBLOCKS, IPPOOLS, RESERVATIONS],
                     bookmark_interval=0.5) as server:
        yield server
        assert server.server_errors == []


@pytest.fixture
def nodes(tmp_path: Path, kube: FakeKube, installed_plugin: Path,
          ) -> Iterator[Callable[..., Daemon]]:
    """A factory of daemons, each a node of ``kube`` with the cluster IPAM backend (the
    plugin as ``netctl install-cni`` installs it in each one's bin dir)."""
    made: list[Daemon] = []
    config = kube.kubeconfig(tmp_path / "kubeconfig")

    def make(name: str, **settings: Any) -> Daemon:
        root = tmp_path / name
        root.mkdir()
        d = Daemon(root, f"ncc{len(made)}", [str(TEST_PLUGINS), SYSTEM_CNI], {
            **TEST_SETTINGS, "kubeconfig": str(config), "node-name": name,
            "ipam-backend": "kubernetes", "api-timeout": 3, "block-check": 0.2, **settings})
        shutil.copytree(installed_plugin, Path(d.plugin).parent)
        made.append(d)
        if kube.get("nodes", None, name) is None:
            kube.create("nodes", node(name))
        d.start()
        wait_for(lambda: (d.status().get("kubernetes") or {}).get("ipam", {}).get("ready"),
                 20, f"{name}'s cluster IPAM ready")
        return d

    try:
        yield make
    finally:
        for d in made:
            d.shut_down()


def ipam_conf(daemon: Daemon, pool: str, **ipam: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "shared", "type": "bridge", "ipam": {
        "type": "netctl-ipam", "socket": daemon.socket, "range": pool, **ipam}}


def ipam(daemon: Daemon, command: str, container: str, pool: str, *, args: str = "",
         **extra: Any) -> CNIResult:
    return harness.exec_plugin(daemon.ipam_plugin, command, ipam_conf(daemon, pool, **extra),
                               container=container, args=args, timeout=60)


def address(res: CNIResult) -> str:
    assert res.rc == 0 and res.out is not None, res.describe()
    return str(res.out["ips"][0]["address"]).split("/")[0]


def fill(daemon: Daemon, pool: str, prefix: str) -> list[str]:
    """ADD containers prefix0, prefix1, … until the node answers code 100 (exhausted):
    the addresses they got."""
    got: list[str] = []
    while True:
        res = ipam(daemon, "ADD", f"{prefix}{len(got)}", pool)
        if res.rc != 0:
            assert res.out is not None and res.out["code"] == 100, res.describe()
            return got
        got.append(address(res))


def blocks(kube: FakeKube) -> list[dict[str, Any]]:
    return [b["spec"] for b in kube.list("ipamblocks")]


def rounds(daemon: Daemon) -> int:
    """The maintenance rounds the node's cluster IPAM completed."""
    return int(daemon.status()["kubernetes"]["ipam"]["maintenance_rounds"])


def api_writes(kube: FakeKube) -> int:
    return sum(kube.count(verb, "ipamblocks") for verb in WRITES)


def test_four_nodes_allocate_from_one_pool_without_a_duplicate(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    pool = "10.185.0.0/16"
    daemons = [nodes(f"node-{i}") for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(8) as workers:
        results = list(workers.map(
            lambda job: (job[0], address(ipam(daemons[job[0]], "ADD", f"c{job[0]}-{job[1]}",
                                              pool))),
            [(n, i) for i in range(40) for n in range(4)]))
    addresses = [a for _, a in results]
    assert len(set(addresses)) == len(addresses) == 160
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(pool) for a in addresses)
    owned = blocks(kube)
    names = [b["cidr"] for b in owned]
    assert len(set(names)) == len(names)  # one object, one owner, per block
    for n, a in results:  # every address lies in a block of the node that gave it
        assert [b["node"] for b in owned
                if ipaddress.ip_address(a) in ipaddress.ip_network(b["cidr"])] == [f"node-{n}"]
    # the blocks were claimed once each: 40 addresses fit in one /26 per node
    assert kube.count("create", "ipamblocks") == len(owned) == 4

    kube.reset_counts()  # steady churn: DEL and ADD again, no write to the API for IPAM
    for n, d in enumerate(daemons):
        for i in range(20):
            assert ipam(d, "DEL", f"c{n}-{i}", pool).rc == 0
            address(ipam(d, "ADD", f"d{n}-{i}", pool))
    assert api_writes(kube) == 0
    assert kube.count("get", "pods") == kube.count("list", "pods") == 0


@pytest.mark.servers("fake")  # an answer held back: answers_held()
def test_a_crash_between_the_claim_and_its_record(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """The daemon is SIGKILLed after the API server created its block and before it heard
    so: at the restart the claim is settled from the API — the block is this node's, it is
    used, nothing is claimed twice and nothing is held."""
    pool = "10.185.16.0/20"
    d = nodes("node-a")
    with kube.answers_held("create", "ipamblocks"), \
            concurrent.futures.ThreadPoolExecutor(1) as worker:
        pending = worker.submit(ipam, d, "ADD", "lost-add", pool)
        wait_for(lambda: kube.held_answers == 1, 20, "the block created, its answer held")
        d.kill()
        assert pending.result(60).rc != 0  # the runtime saw the ADD fail
    claimed = blocks(kube)
    assert [b["node"] for b in claimed] == ["node-a"]
    assert [b["state"] for b in d.read(journaldb.block_rows)] == ["claiming"]
    d.start()
    wait_for(lambda: d.status()["kubernetes"]["ipam"]["ready"], 20, "ready again")
    assert [(b["state"], b["until"] is None) for b in d.read(journaldb.block_rows)] == [
        ("held", True)]
    got = address(ipam(d, "ADD", "after", pool))
    assert ipaddress.ip_address(got) in ipaddress.ip_network(claimed[0]["cidr"])
    assert kube.count("create", "ipamblocks") == 1 and len(blocks(kube)) == 1
    assert [a["container_id"] for a in d.read(query.live_allocations)] == ["after"]


@pytest.mark.servers("fake")  # an answer held back: answers_held()
def test_a_borrow_lost_in_a_crash_is_never_another_nodes(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """Node A asks node B for an address (a borrow object) and is SIGKILLed before it hears
    whether the object was made; meanwhile node C's borrow of that address is the object of
    that name, not answered yet (B is down). At A's restart the claim is settled: it ended
    (the object is another node's), and C's borrow is left alone — a node deletes its own
    objects only (deploy/kubernetes/node-reach.yaml refuses it any other)."""
    pool = "10.185.48.0/24"  # blocks of /28
    a, b = nodes("node-a"), nodes("node-b")
    address(ipam(b, "ADD", "on-b", pool))
    (b_block,) = [x["cidr"] for x in blocks(kube)]
    lent = str(ipaddress.ip_network(b_block)[-2])
    b.kill()
    with kube.answers_held("create", "ipamblocks"), \
            concurrent.futures.ThreadPoolExecutor(1) as worker:
        pending = worker.submit(ipam, a, "ADD", "borrower", pool, args=f"IP={lent}")
        wait_for(lambda: kube.held_answers == 1, 20, "the borrow made, its answer held")
        a.kill()
        assert pending.result(60).rc != 0
    (asked,) = [x for x in kube.list("ipamblocks") if x["spec"].get("parent")]
    kube.delete("ipamblocks", None, asked["metadata"]["name"])
    theirs = kube.create("ipamblocks", {
        "metadata": {"name": asked["metadata"]["name"], "labels": {
            **asked["metadata"]["labels"], "ipam.netctl.dev/node": "node-c"}},
        "spec": {**asked["spec"], "node": "node-c"}})
    a.start()
    wait_for(lambda: a.status()["kubernetes"]["ipam"]["ready"], 20, "ready again")
    assert [r["state"] for r in a.read(journaldb.block_rows, cidr=f"{lent}/32")] == ["taken"]
    kept = kube.get("ipamblocks", None, asked["metadata"]["name"])
    assert kept is not None and kept["metadata"]["uid"] == theirs["metadata"]["uid"]


def test_a_pool_exhausted_across_nodes_then_freed_blocks_reused(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """A /26 cut into sixteen /30 blocks (62 addresses in all) shared by two nodes: the 63rd
    allocation answers code 100 naming the pool; once one node's pods are gone its empty
    blocks are released (one kept) and the other node claims and uses them."""
    pool = "10.185.32.0/26"
    a, b = nodes("node-a", **{"block-idle": 0.5}), nodes("node-b", **{"block-idle": 0.5})
    got: dict[str, list[str]] = {"a": [], "b": []}
    refused: dict[str, CNIResult] = {}
    while len(refused) < 2:  # turn about, until each node is refused
        for key, d in (("a", a), ("b", b)):
            if key in refused:
                continue
            res = ipam(d, "ADD", f"{key}{len(got[key])}", pool)
            if res.rc == 0:
                got[key].append(address(res))
            else:
                refused[key] = res
    assert len(set(got["a"] + got["b"])) == len(got["a"] + got["b"]) == 62
    for res in refused.values():
        assert res.rc == 1 and res.out is not None and res.out["code"] == 100, res.describe()
        assert pool in res.out["msg"] and "exhausted" in res.out["msg"]
    held_by_a = [x for x in blocks(kube) if x["node"] == "node-a"]
    assert len(held_by_a) > 1
    for i in range(len(got["a"])):
        assert ipam(a, "DEL", f"a{i}", pool).rc == 0
    wait_for(lambda: len([x for x in blocks(kube) if x["node"] == "node-a"]) == 1, 30,
             "node-a's empty blocks released, one kept")
    more = [address(ipam(b, "ADD", f"b-more{i}", pool)) for i in range(20)]
    assert not set(more) & set(got["b"])  # none of b's own live addresses again
    owners = [x["node"] for x in blocks(kube)]
    assert owners.count("node-a") == 1 and len(owners) == len(set(x["cidr"]
                                                                  for x in blocks(kube)))


def test_a_deleted_nodes_blocks_are_taken_over_once_its_pods_are_gone(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """A /26 in /30 blocks, node B holding some and node A the rest (A refused, code 100).
    B's Node object is deleted while a pod of B still exists: its blocks stay B's (the
    holder of the gone-nodes Lease looks, the pod is there); once the pod is deleted they
    are handed over to exactly one of the two surviving nodes — the Lease's holder, the one
    daemon that watches the Nodes — and, holding nothing, released at once, with
    ``block-idle`` at 600 s: A, refused before, gets every address of them."""
    pool = "10.185.64.0/26"
    net = ipaddress.ip_network(pool)
    long_idle = {"node-gone-grace": 0.5, "block-idle": 600}
    a, b, c = nodes("node-a", **long_idle), nodes("node-b"), nodes("node-c", **long_idle)
    live = {"c": address(ipam(c, "ADD", "first-c", pool))}
    for i in range(10):
        address(ipam(b, "ADD", f"b{i}", pool))
    got_a = fill(a, pool, "a")
    b_blocks = sorted(x["cidr"] for x in blocks(kube) if x["node"] == "node-b")
    assert len(b_blocks) >= 3
    kube.create("pods", pod("on-b", node="node-b"))
    b.kill()
    kube.delete("nodes", None, "node-b")
    wait_for(lambda: kube.count("list", "pods") >= 4, 30,
             "the gone-nodes Lease's holder looking for node-b's pods, more than once")
    assert sorted(x["cidr"] for x in blocks(kube) if x["node"] == "node-b") == b_blocks
    assert ipam(a, "ADD", "a-still-refused", pool).rc == 1
    kube.delete("pods", "default", "on-b")
    wait_for(lambda: not {x["cidr"] for x in blocks(kube)} & set(b_blocks), 30,
             "node-b's blocks taken over and released")
    handovers = sum(d.status()["kubernetes"]["ipam"]["handovers"] for d in (a, c))
    assert handovers == len(b_blocks)  # each block handed over once, whoever won
    released = [r["cidr"] for d in (a, c) for r in d.read(journaldb.block_rows,
                                                          state="released")]
    assert sorted(released) == b_blocks
    freed = {str(h) for cidr in b_blocks for h in ipaddress.ip_network(cidr)
             if h not in (net.network_address, net.broadcast_address)}
    after = fill(a, pool, "after")
    assert set(after) == freed and not freed & {*got_a, *live.values()}


def test_two_nodes_racing_to_take_over_one_block(kube: FakeKube, tmp_path: Path) -> None:
    """Two API clients hand over the same block read at the same resourceVersion, at
    once: one succeeds, the other is told it changed; the block has one owner."""
    import trio
    import trio_asyncio

    from netctl.kubeapi import blocks as block_objects
    from netctl.kubeapi.api import Api, KubeSettings
    from netctl.kubeapi.objects import BlockSpec

    config = kube.kubeconfig(tmp_path / "kubeconfig")

    async def main() -> list[bool]:
        async with trio_asyncio.open_loop():
            apis = [await Api.connect(KubeSettings(str(config))) for _ in range(2)]
            try:
                made = await block_objects.claim(apis[0], "b-race", BlockSpec(
                    pool="p", scope="s", cidr="10.185.96.0/26", node="gone"))
                assert made is not None
                read = await block_objects.get(apis[0], "b-race")
                assert read is not None
                results: list[bool] = []

                async def take(api: Api, node: str) -> None:
                    results.append(await block_objects.hand_over(api, read, node) is not None)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(take, apis[0], "node-x")
                    nursery.start_soon(take, apis[1], "node-y")
                return results
            finally:
                for api in apis:
                    await api.close()

    results = trio.run(main)
    assert sorted(results) == [False, True]
    stored = kube.get("ipamblocks", None, "b-race")
    assert stored is not None and stored["spec"]["node"] in ("node-x", "node-y")
    assert [h["node"] for h in stored["spec"]["history"]] == ["gone"]


def test_a_wiped_state_dir_hands_out_no_address_a_live_pod_holds(
        nodes: Callable[..., Daemon], kube: FakeKube, tmp_path: Path) -> None:
    """Node A's journal is lost while its pods live: at the restart it adopts its blocks
    and the addresses its pods' network-status names, and hands out none of them; a pod
    deleted later gives its address back."""
    pool = "10.185.112.0/28"  # single-address blocks: every allocation claims one
    a = nodes("node-a")
    held = [address(ipam(a, "ADD", f"p{i}", pool)) for i in range(4)]
    for i, ip in enumerate(held):
        kube.create("pods", pod(f"p{i}", node="node-a", annotations={
            "k8s.v1.cni.cncf.io/network-status": json.dumps(
                [{"name": "shared", "interface": "eth0", "ips": [ip], "default": True}])}))
    a.kill()
    shutil.rmtree(a.state_dir)
    a.start()
    wait_for(lambda: a.status()["kubernetes"]["ipam"]["ready"], 20, "ready again")
    adopted = [x["container_id"] for x in a.read(query.live_allocations)]
    assert len(adopted) == 4 and all(c.startswith("pod:") for c in adopted)
    fresh = fill(a, pool, "new")
    assert len(fresh) == 14 - 4 and not set(fresh) & set(held)
    kube.delete("pods", "default", "p0")
    wait_for(lambda: len([x for x in a.read(query.live_allocations)
                          if x["container_id"].startswith("pod:")]) == 3, 30,
             "the deleted pod's adopted address released")
    assert address(ipam(a, "ADD", "last", pool)) == held[0]


def test_a_borrowed_address_inside_a_block_taken_over_is_adopted_once(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """Node A borrows an address of node B's block, then takes that block over (B is gone):
    A holds the borrowed /32 and the block around it. A's journal is lost: at the restart
    both blocks are adopted and the pod's address is recorded once, in the first round.
    Once the pod is gone, the borrow (the address A lends itself) is released as any idle
    block, and the address handed out again."""
    pool = "10.185.160.0/24"  # blocks of /28
    a = nodes("node-a", **{"node-gone-grace": 0.3, "block-idle": 0.3})
    b = nodes("node-b")
    address(ipam(b, "ADD", "on-b", pool))
    (b_block,) = [x["cidr"] for x in blocks(kube) if x["node"] == "node-b"]
    lent = str(ipaddress.ip_network(b_block)[-2])
    assert address(ipam(a, "ADD", "borrower", pool, args=f"IP={lent}")) == lent
    uid = kube.create("pods", pod("borrower", node="node-a", annotations={
        "k8s.v1.cni.cncf.io/network-status": json.dumps(
            [{"name": "shared", "interface": "eth0", "ips": [lent], "default": True}])})
    )["metadata"]["uid"]
    b.kill()
    kube.delete("nodes", None, "node-b")
    wait_for(lambda: {x["node"] for x in blocks(kube)} == {"node-a"}, 30,
             "node-b's block taken over by node-a")
    assert sorted(x["cidr"] for x in blocks(kube)) == sorted([b_block, f"{lent}/32"])

    a.kill()
    shutil.rmtree(a.state_dir)
    before = len(a.log())
    a.start()
    wait_for(lambda: a.status()["kubernetes"]["ipam"]["ready"], 20, "ready again")
    assert [(x["address"], x["container_id"]) for x in a.read(journaldb.allocation_rows)] == [
        (lent, f"pod:{uid}")]
    assert sorted(x["cidr"] for x in a.read(journaldb.block_rows, state="held")) == sorted([
        f"{lent}/32", b_block])
    # in the first round: no journal write refused, no "cluster IPAM: …; retrying"
    assert not [line for line in a.log()[before:].splitlines()
                if "UNIQUE constraint" in line or "cluster IPAM:" in line], a.log()[before:]

    kube.delete("pods", "default", "borrower")
    wait_for(lambda: [x["cidr"] for x in blocks(kube)] == [b_block], 30,
             "the borrow released once its address is free; the block kept")
    assert address(ipam(a, "ADD", "again", pool, args=f"IP={lent}")) == lent
    assert [x["cidr"] for x in blocks(kube)] == [b_block]  # from the block, no new borrow


def test_whereabouts_records_are_taken_until_their_pods_are_gone(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """With ``ipam-takeover: [whereabouts]``, the addresses whereabouts' IPPool and
    OverlappingRangeIPReservation objects record for pods that still exist are never
    handed out; one whose pod is gone is."""
    pool = "10.185.120.0/28"  # 14 addresses
    kube.create("pods", pod("wa", node="elsewhere"))
    kube.create("pods", pod("wb", node="elsewhere"))
    kube.create("ippools", {"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
                            "metadata": {"name": "10.185.120.0-28", "namespace": "kube-system"},
                            "spec": {"range": pool, "allocations": {
                                "1": {"id": "c1", "podref": "default/wa", "ifname": "eth0"},
                                "2": {"id": "c2", "podref": "default/wb", "ifname": "eth0"},
                                "3": {"id": "c3", "podref": "default/gone", "ifname": "eth0"}}}})
    kube.create("overlappingrangeipreservations", {
        "apiVersion": "whereabouts.cni.cncf.io/v1alpha1",
        "kind": "OverlappingRangeIPReservation",
        "metadata": {"name": "10.185.120.9", "namespace": "kube-system"},
        "spec": {"podref": "default/wa", "containerid": "c1"}})
    a = nodes("node-a", **{"ipam-takeover": ["whereabouts"]})
    assert a.status()["kubernetes"]["ipam"]["whereabouts_holds"] == 3
    got = fill(a, pool, "c")
    taken = {"10.185.120.1", "10.185.120.2", "10.185.120.9"}
    assert len(got) == 14 - 3 and not set(got) & taken and "10.185.120.3" in got


def test_requested_addresses_across_the_cluster(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """A requested address (IP=) in a block nobody holds: the block is claimed and the
    address granted. In another node's block: that node is asked (a borrow object) and
    grants a free address — which it then never hands out itself — or refuses one in use
    (code 7 naming it). A borrowed address freed is given back."""
    pool = "10.185.128.0/24"  # blocks of /28
    a, b = nodes("node-a", **{"block-idle": 0.3}), nodes("node-b")
    theirs = address(ipam(b, "ADD", "on-b", pool))
    net = ipaddress.ip_network(pool)
    free = next(str(ip) for ip in net.hosts() if not any(
        ip in ipaddress.ip_network(x["cidr"]) for x in blocks(kube)))
    assert address(ipam(a, "ADD", "wants-free", pool, args=f"IP={free}")) == free
    assert [x["node"] for x in blocks(kube)
            if ipaddress.ip_address(free) in ipaddress.ip_network(x["cidr"])] == ["node-a"]

    res = ipam(a, "ADD", "wants-used", pool, args=f"IP={theirs}")
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.describe()
    assert theirs in res.out["msg"] and "node-b" in res.out["msg"]
    assert not [x for x in blocks(kube) if x.get("parent")]  # the refused borrow is gone

    b_block = next(x for x in blocks(kube) if x["node"] == "node-b")
    lent = str(ipaddress.ip_network(b_block["cidr"])[-2])  # high in b's block: free
    assert address(ipam(a, "ADD", "borrower", pool, args=f"IP={lent}")) == lent
    borrow = [x for x in blocks(kube) if x.get("parent")]
    assert [(x["node"], x["cidr"], x["grant"]) for x in borrow] == [
        ("node-a", f"{lent}/32", "granted")]
    assert a.status()["kubernetes"]["ipam"]["borrowed"] == 1
    assert b.status()["kubernetes"]["ipam"]["lent"] == 1
    got = [address(ipam(b, "ADD", f"b-fill{i}", pool)) for i in range(16)]
    assert lent not in got and theirs not in got  # b's whole block and more: never that one

    assert ipam(a, "DEL", "borrower", pool).rc == 0
    wait_for(lambda: not [x for x in blocks(kube) if x.get("parent")], 30,
             "the borrowed address given back")


def test_a_borrow_answered_late_is_not_withdrawn_by_the_borrowers_own_rounds(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """The lender answers a borrow only after several of the borrower's maintenance rounds
    (``block-check`` 0.2 s; the lender stopped for three of them): the borrower's rounds leave
    its ask alone while it waits, and the address is granted (the rounds took the ask for
    one left by a crash and deleted it, and the ADD failed as refused)."""
    pool = "10.185.144.0/24"
    a, b = nodes("node-a"), nodes("node-b")
    address(ipam(b, "ADD", "on-b", pool))
    b_block = next(x for x in blocks(kube) if x["node"] == "node-b")
    lent = str(ipaddress.ip_network(b_block["cidr"])[-2])
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as worker:
            asked = worker.submit(ipam, a, "ADD", "borrower", pool, args=f"IP={lent}")
            wait_for(lambda: [x for x in blocks(kube) if x.get("parent")], 20, "the ask")
            since = rounds(a)
            wait_for(lambda: rounds(a) >= since + 3, 20,
                     "three of the borrower's rounds while the lender is silent")
            b.proc.send_signal(signal.SIGCONT)
            assert address(asked.result(timeout=60)) == lent
    finally:
        b.proc.send_signal(signal.SIGCONT)
    assert [(x["node"], x["grant"]) for x in blocks(kube) if x.get("parent")] == [
        ("node-a", "granted")]


@pytest.mark.servers("fake")  # the lender's watch held back from its grant: watches_held()
def test_a_lender_whose_watch_lags_behind_its_grant_never_hands_the_address_out(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """The lender's watch brings the borrow object it answered only after its grant (the
    watch held from that change on, through several of its maintenance rounds): meanwhile
    the address still counts as lent there — its rounds do not count the lent addresses
    again from a cache that has not seen the grant (nor answer the ask again) — and 16
    more addresses of the lender never include it; once the watch catches up it stays
    lent, and when the borrower gives it back it is lent no more."""
    pool = "10.185.176.0/24"  # blocks of /28
    a, b = nodes("node-a", **{"block-idle": 0.3}), nodes("node-b")  # a gives back soon
    address(ipam(b, "ADD", "on-b", pool))
    b_block = next(x for x in blocks(kube) if x["node"] == "node-b")
    lent = str(ipaddress.ip_network(b_block["cidr"])[-2])  # high in b's block: free

    def granted(kind: str, obj: dict[str, Any]) -> bool:
        return kind == "MODIFIED" and obj.get("spec", {}).get("grant") == "granted"

    def lenders_view() -> dict[str, Any]:
        return dict(b.status()["kubernetes"]["ipam"])

    kube.reset_counts()
    with kube.watches_held(from_event=granted):
        assert address(ipam(a, "ADD", "borrower", pool, args=f"IP={lent}")) == lent
        [borrow] = [x for x in kube.list("ipamblocks") if x["spec"].get("parent")]
        written = int(borrow["metadata"]["resourceVersion"])
        since = rounds(b)
        wait_for(lambda: rounds(b) >= since + 3, 20, "three of the lender's rounds")
        assert lenders_view()["lent"] == 1
        got = [address(ipam(b, "ADD", f"b-fill{i}", pool)) for i in range(16)]
        assert lent not in got  # b's whole block and more: never that one
        behind = lenders_view()["asking_cache"]
        assert int(behind["resource_version"]) < written  # its watch had not brought it
        assert kube.count("update", "ipamblocks") == 1  # the ask answered once
    wait_for(lambda: int(lenders_view()["asking_cache"]["resource_version"]) >= written,
             20, "the lender's watch caught up")
    since = rounds(b)
    wait_for(lambda: rounds(b) >= since + 2, 20, "two more of the lender's rounds")
    assert lenders_view()["lent"] == 1

    assert ipam(a, "DEL", "borrower", pool).rc == 0
    wait_for(lambda: not [x for x in blocks(kube) if x.get("parent")], 30,
             "the borrowed address given back")
    wait_for(lambda: lenders_view()["lent"] == 0, 20, "the address no longer lent")


def test_each_node_names_its_own_blocks_and_journals_no_other_nodes(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """``netctl journal --ip`` on node B names node B for an address of its block, now and
    at a past time, and after B released the block no more; node A, which watches only
    its own blocks, journals none of B's (the cluster-wide ``kubectl netctl journal --ip``
    asks every node); ``netctl ipam pools`` on each shows its own blocks."""
    pool = "10.185.144.0/20"
    a, b = nodes("node-a"), nodes("node-b", **{"block-idle": 0.3})
    address(ipam(a, "ADD", "on-a", pool))
    theirs = address(ipam(b, "ADD", "on-b", pool))
    address(ipam(b, "ADD", "keeps-b", pool, args="IP=10.185.159.200"))  # a second block

    def named(d: Daemon) -> list[str]:
        return [x["node"] for x in d.journal("--ip", theirs)["blocks"]]

    assert named(b) == ["node-b"] and named(a) == []
    for d, held in ((a, {"node-a": 1}), (b, {"node-b": 2})):
        pools = harness.netctl_json("ipam", "pools", "--state-dir", str(d.state_dir))["pools"]
        assert [p["blocks"] for p in pools if p["key"] == pool] == [held]
    assert not [x for x in a.read(journaldb.block_rows) if x["node"] != "node-a"]
    held_at = f"{time.time():.3f}"
    assert ipam(b, "DEL", "on-b", pool).rc == 0  # its block empties, and is released
    wait_for(lambda: named(b) == [], 30, "the released block no longer named")
    assert [x["node"] for x in b.journal("--ip", theirs, "--at", held_at)["blocks"]] == [
        "node-b"]


def test_a_node_is_degraded_when_other_nodes_hold_nearly_all_the_pool(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """``pool-degraded-at`` with shared pools: a node holding one address of a /26 (62
    assignable, /30 blocks) is degraded once another node's blocks take 0.6 of the pool —
    its own usage (1 of 62) says nothing of the room left for its next pods — and ready
    again once that node's empty blocks are released."""
    pool = "10.185.48.0/26"
    a = nodes("node-a", **{"block-idle": 0.5, "pool-degraded-at": 0.6})
    # node-b's maintenance rounds 4 times as often as the other tests' (0.2 s): it reads the
    # pool's fill every 30 rounds, which this test waits for twice (12 s at 0.2 s)
    b = nodes("node-b", **{"pool-degraded-at": 0.6, "block-check": 0.05})
    address(ipam(b, "ADD", "b0", pool))
    health = b.status()
    assert (health["state"], health["degraded_reasons"]) == ("ready", []), health
    got = [address(ipam(a, "ADD", f"a{i}", pool)) for i in range(40)]
    assert len(set(got)) == 40
    # node-b reads node-a's blocks of the pool every 30 maintenance rounds (1.5 s here)
    health = wait_for(lambda: (h := b.status())["state"] == "degraded" and h, 30,
                      "node-b degraded")
    (reason,) = health["degraded_reasons"]
    assert health["ready"] is True, health
    assert f"pool {pool} is nearly exhausted" in reason, reason
    (fill,) = [p for p in health["pools"] if p["pool"] == pool]
    assert fill["size"] == 62 and fill["used"] >= 41, fill  # b's 1 + a's blocks
    for i in range(40):
        assert ipam(a, "DEL", f"a{i}", pool).rc == 0
    wait_for(lambda: b.status()["state"] == "ready", 30,
             "node-b ready once node-a's empty blocks are released")


def pod_args(namespace: str, name: str, uid: str) -> str:
    return f"K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};K8S_POD_UID={uid}"


def published(kube: FakeKube, node: str) -> list[tuple[str, str]]:
    """(address, identity) of the sticky reservations ``node`` published on its blocks."""
    return sorted((e["address"], e["identity"]) for b in blocks(kube) if b["node"] == node
                  for e in b.get("reserved", []))


@pytest.mark.servers("fake")
def test_a_sticky_pod_gets_its_address_back_on_the_same_and_on_another_node(
        nodes: Callable[..., Daemon], kube: FakeKube) -> None:
    """Sticky addresses with the cluster IPAM: released on node A, the address is
    reserved for the pod's identity in A's journal and published on A's block; the pod
    recreated on A gets it back from the journal; recreated on node B, B borrows it from
    A naming the identity, A grants it (a reserved address, to that identity only), its
    reservation ends journaled as taken back by node B, and B's journal has the identity.
    Released on B, the reservation is B's (published on its borrow object), and a pod of
    another identity on B never gets the address; recreated on node C, B hands its borrow
    object over to C for the identity; recreated on A again, C hands it to A."""
    pool = "10.185.96.0/24"  # blocks of /28
    sticky = {"sticky": True, "sticky_for": "1h"}
    a, b = nodes("node-a"), nodes("node-b")
    db0 = ("apps", "db-0")
    mine = address(ipam(a, "ADD", "db0-1", pool, args=pod_args(*db0, "u1"), **sticky))
    address(ipam(a, "ADD", "other-a", pool, args=pod_args("apps", "web-0", "w0"), **sticky))
    assert ipam(a, "DEL", "db0-1", pool, args=pod_args(*db0, "u1"), **sticky).rc == 0
    wait_for(lambda: published(kube, "node-a") == [(mine, "pod:apps/db-0")], 10,
             "the reservation published on node-a's block")

    # the same node: from the journal, no API write for the address itself
    assert address(ipam(a, "ADD", "db0-2", pool, args=pod_args(*db0, "u2"), **sticky)) == mine
    wait_for(lambda: published(kube, "node-a") == [], 10, "the reservation taken back")
    assert ipam(a, "DEL", "db0-2", pool, args=pod_args(*db0, "u2"), **sticky).rc == 0
    wait_for(lambda: published(kube, "node-a") == [(mine, "pod:apps/db-0")], 10,
             "published again")

    # another node: borrowed from node-a for the identity
    # (node-b watches only its own blocks: its ADD reads node-a's scope when it needs it)
    assert address(ipam(b, "ADD", "db0-3", pool, args=pod_args(*db0, "u3"), **sticky)) == mine
    borrow = [x for x in blocks(kube) if x.get("parent")]
    assert [(x["node"], x["cidr"], x["grant"], x["identity"]) for x in borrow] == [
        ("node-b", f"{mine}/32", "granted", "pod:apps/db-0")]
    assert [x["sticky_key"] for x in b.read(journaldb.allocation_rows, container="db0-3")
            if x["released_at"] is None] == ["pod:apps/db-0"]
    assert [x["reservation_end"] for x in a.read(journaldb.allocation_rows,
                                                 container="db0-2")] == ["taken back"]
    assert [o["reason"] for o in a.read(journaldb.operation_rows, origin="sticky")] == [
        f"sticky reservation of {mine} for pod:apps/db-0 (eth0) taken back by node node-b"]
    wait_for(lambda: published(kube, "node-a") == [], 10, "node-a's entry removed")
    assert a.status()["sticky"]["ended"]["taken_back"] == 2  # on node-a, then by node-b

    # released on B: B's reservation, on its borrow object; B never hands it to another
    assert ipam(b, "DEL", "db0-3", pool, args=pod_args(*db0, "u3"), **sticky).rc == 0
    wait_for(lambda: published(kube, "node-b") == [(mine, "pod:apps/db-0")], 10,
             "node-b's reservation published")
    res = ipam(b, "ADD", "web-1", pool, args=f"{pod_args('apps', 'web-1', 'w1')};IP={mine}",
               **sticky)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.describe()
    assert "reserved for pod:apps/db-0" in res.out["msg"], res.out["msg"]
    assert address(ipam(b, "ADD", "db0-4", pool, args=pod_args(*db0, "u4"), **sticky)) == mine
    assert ipam(b, "DEL", "db0-4", pool, args=pod_args(*db0, "u4"), **sticky).rc == 0
    wait_for(lambda: published(kube, "node-b") == [(mine, "pod:apps/db-0")], 10,
             "node-b's reservation published again")

    # a third node: node-b hands its borrow object over for the identity
    c = nodes("node-c")
    assert address(ipam(c, "ADD", "db0-5", pool, args=pod_args(*db0, "u5"), **sticky)) == mine
    borrow = [x for x in blocks(kube) if x.get("parent")]
    assert [(x["node"], x["cidr"], [h["node"] for h in x["history"]], x.get("reserved"))
            for x in borrow] == [("node-c", f"{mine}/32", ["node-b"], None)]
    assert [o["reason"] for o in b.read(journaldb.operation_rows, origin="sticky")] == [
        f"sticky reservation of {mine} for pod:apps/db-0 (eth0) taken back by node node-c"]
    assert [x["state"] for x in b.read(journaldb.block_rows, cidr=f"{mine}/32",
                                       node="node-b")] == ["released"]
    # and back to the block's own node: node-c hands it over to node-a
    assert ipam(c, "DEL", "db0-5", pool, args=pod_args(*db0, "u5"), **sticky).rc == 0
    wait_for(lambda: published(kube, "node-c") == [(mine, "pod:apps/db-0")], 10,
             "node-c's reservation published")
    assert address(ipam(a, "ADD", "db0-6", pool, args=pod_args(*db0, "u6"), **sticky)) == mine
    assert [x["node"] for x in blocks(kube) if x.get("parent")] == ["node-a"]
    assert ipam(a, "DEL", "db0-6", pool, args=pod_args(*db0, "u6"), **sticky).rc == 0
