"""We test the cluster-wide IPAM (``ipam-backend: kubernetes``) with real daemons as nodes
of one fake API server (real HTTP, the real kubernetes-asyncio client): several nodes
allocating concurrently from one pool hand out no address twice and each block has one
owner; steady churn writes nothing to the API; a crash between a block's claim and its
record is settled at the restart; a pool exhausted across nodes answers code 100 naming
it, and released blocks are claimed again; a deleted node's blocks are taken over after
the grace, never while its pods live, one owner when two nodes race; a node whose state
dir was wiped hands out no address its pods still hold; whereabouts' records are taken.

Addresses are allocated through the plain ``netctl-ipam`` plugin (what a delegate with
``"ipam": {"type": "netctl-ipam"}`` execs): the node's allocator and its API traffic,
without a netns per pod. Pools: 10.185.0.0/16 and smaller ones inside it."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netctl import harness
from netctl.harness import CNIResult, Daemon
from netctl.kubefake import FakeKube, crd, node, pod
from tests.conftest import SYSTEM_CNI, TEST_PLUGINS, TEST_SETTINGS, wait_for

pytestmark = pytest.mark.netns

BLOCKS = crd("ipam.netctl.dev", "v1", "ipamblocks", "IPAMBlock")
IPPOOLS = crd("whereabouts.cni.cncf.io", "v1alpha1", "ippools", "IPPool", namespaced=True)
RESERVATIONS = crd("whereabouts.cni.cncf.io", "v1alpha1", "overlappingrangeipreservations",
                   "OverlappingRangeIPReservation", namespaced=True)
WRITES = ("create", "update", "patch", "delete")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(crds=[BLOCKS, IPPOOLS, RESERVATIONS], bookmark_interval=0.5) as fake:
        yield fake
        assert fake.server_errors == []


@pytest.fixture
def nodes(tmp_path: Path, kube: FakeKube) -> Iterator[Callable[..., Daemon]]:
    """A factory of daemons, each a node of ``kube`` with the cluster IPAM backend."""
    made: list[Daemon] = []
    config = kube.kubeconfig(tmp_path / "kubeconfig")

    def make(name: str, **settings: Any) -> Daemon:
        root = tmp_path / name
        root.mkdir()
        d = Daemon(root, f"ncc{len(made)}", [str(TEST_PLUGINS), SYSTEM_CNI], {
            **TEST_SETTINGS, "kubeconfig": str(config), "node-name": name,
            "ipam-backend": "kubernetes", "api-timeout": 3, "block-check": 0.2, **settings})
        d.install_plugin()
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


def blocks(kube: FakeKube) -> list[dict[str, Any]]:
    return [b["spec"] for b in kube.list("ipamblocks")]


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
