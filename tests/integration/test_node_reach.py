"""We test ``deploy/kubernetes/node-reach.yaml``, the admission policies that keep each netctl
daemon to its own node, on a real kube-apiserver of a version that has them (1.30 or later)
with the shipped ``rbac.yaml``: Node objects, and a daemon pod on each (Pending: no kubelet
runs) whose ServiceAccount token is bound to it, as the DaemonSet's is. The writes are
netctl's own calls (``netctl/kubeapi/blocks.py``, ``statuswrites.py``, ``leases.py``) over
an :class:`~netctl.kubeapi.api.Api` made from a kubeconfig holding that token. We test these
aspects:

- the premise: a pod-bound token's user info names the pod's node;
- a daemon's own writes pass: claim a block, publish its reservations, release it; patch a
  pod of its node; hold the gone-nodes Lease;
- the protocol's writes on other nodes' objects pass, and only they: a borrow asked of
  another node and answered by that node (not by the borrower, not by a third node); a
  borrow object asked for by a third node, withdrawn, asked again and handed over; a gone
  node's block and a borrow it lent taken over by the holder of the Lease, and by no other
  node;
- the same token aimed at another node's block or pod, or at the Lease in another node's
  name, is refused (403) with the policy's message, and nothing changes; a token that names
  no node is refused, saying so;
- an admin's writes are not looked at;
- real daemons run the cluster IPAM under the policies — claims, a borrow answered, a gone
  node's blocks taken over, idle blocks released — and none of their requests is refused.

The API server loads a policy (and the Lease that is its parameter) a moment after it is
written: the tests wait until a dry run is answered as the policy says, never a fixed time.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from netctl_kit import kubebins
from netctl_kit.kubefake import real as realkube
from netctl_kit.kubefake.real import ApiFailure, RealKube, manifest

from netctl.cni.request import Pod
from netctl.ipam.cluster.gone import LEASE_NAME, LEASE_NAMESPACE
from netctl.kubeapi import blocks
from netctl.kubeapi.api import Api, ApiError, KubeSettings
from netctl.kubeapi.leases import LeaseHold
from netctl.kubeapi.objects import Block, BlockSpec, BorrowSpec, StickyEntry, TransferAsk
from netctl.kubeapi.statuswrites import Write, patch_status
from tests.conftest import TEST_PLUGINS, TEST_SETTINGS, Daemon, wait_for
from tests.integration.test_cluster_ipam import address, ipam

POLICIES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "node-reach.yaml"
REACH, GONE = "netctl-node-reach", "netctl-node-reach-gone-nodes"  # the two policies
MIN_MINOR = 30  # admissionregistration.k8s.io/v1 policies; nodes in tokens by default
NODES = ("node-a", "node-b", "node-c")
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}"


@pytest.fixture(scope="module")
def real(request: pytest.FixtureRequest) -> Iterator[RealKube]:
    """The session's real API server (``real_kube``) with the policies applied and enforced
    for this module's tests, then removed, and waited for until they no longer refuse
    anything: they would refuse the session's other tests' tokens, which name no node.
    That server runs the newest selected version: 1.30 or later whenever
    :func:`~netctl_kit.kubebins.pick` finds one (a server of the module's own took another
    7 s or more to start)."""
    version = kubebins.pick(MIN_MINOR, names=kubebins.SERVER_BINARIES)
    reason = realkube.unavailable() or (
        kubebins.missing(MIN_MINOR, names=kubebins.SERVER_BINARIES) if version is None else "")
    if reason:
        pytest.skip(f"real kube-apiserver: {reason}")
    kube: RealKube = request.getfixturevalue("real_kube")
    policies = manifest(POLICIES)

    def probe() -> tuple[int, str]:  # a block made with a token that names no node
        return dry_run(kube, kube.sa_token, "POST", blocks.BLOCKS, block_doc("b-probe", "node-a"))

    kube.apply(policies)
    try:
        wait_for(lambda: probe() == (403, REACH), 60, f"policy {REACH} enforced")
        yield kube
    finally:
        # (the gone-nodes policy looks only at tokens bound to a pod on a node, which no
        # other module makes)
        kube.remove(policies)
        wait_for(lambda: probe() == (200, ""), 60, f"policy {REACH} no longer enforced")


@pytest.fixture
def tokens(real: RealKube) -> Iterator[dict[str, str]]:
    """node → the token of a daemon pod on it (each node and pod made here); everything
    the test made removed afterwards."""
    try:
        yield {node: daemon_token(real, node) for node in NODES}
    finally:
        real.clean()


def daemon_token(real: RealKube, node: str) -> str:
    """A Node, netctl's pod on it, and that pod's ServiceAccount token."""
    if real.get("nodes", None, node) is None:
        real.create("nodes", {"metadata": {"name": node}})
    name = f"netctl-{node}"
    real.create("pods", {"metadata": {"name": name, "namespace": "kube-system"}, "spec": {
        "nodeName": node, "serviceAccountName": "netctl",
        "containers": [{"name": "netctl", "image": "localhost/netctl:0.1.0"}]}})
    return real.token_for("kube-system", "netctl", bound_pod=name)


def status_write(real: RealKube, node: str) -> Write:
    """netctl's write of an (empty) network-status to its own pod on ``node``."""
    pod = real.get("pods", "kube-system", f"netctl-{node}")
    assert pod is not None
    return Write(Pod(namespace="kube-system", name=f"netctl-{node}",
                     uid=pod["metadata"]["uid"]), "[]")


def block_doc(name: str, node: str) -> dict[str, Any]:
    """A block of ``node`` as the admin writes it."""
    return {"apiVersion": blocks.BLOCK_API_VERSION, "kind": blocks.BLOCK_KIND,
            "metadata": {"name": name, "labels": blocks.labels_for(BlockSpec(scope="s",
                                                                             node=node))},
            "spec": {"pool": "p", "scope": "s", "cidr": "10.190.0.0/28", "node": node}}


def dry_run(real: RealKube, token: str, method: str, path: str, body: Any,
            ) -> tuple[int, str]:
    """A request as a dry run (admission runs, nothing is stored): 200 and "", or the
    status and the policy that refused it ("" for none)."""
    try:
        real.request(method, f"{path}?dryRun=All", body, token=token)
    except ApiFailure as exc:
        return exc.status, next((p for p in (GONE, REACH) if f"'{p}'" in exc.body), "")
    return 200, ""


def wait_takeover(real: RealKube, token: str, name: str, node: str, answer: tuple[int, str]
                  ) -> None:
    """Until a dry run of ``node`` taking block ``name`` over is answered so: the gone-nodes
    policy has read the Lease as it is now."""
    doc = real.get("ipamblocks", None, name)
    assert doc is not None
    old = doc["spec"]["node"]
    doc["spec"] = {**doc["spec"], "node": node, "history": [{"node": old}]}
    doc["metadata"]["labels"][blocks.NODE_LABEL] = node
    wait_for(lambda: dry_run(real, token, "PUT", f"{blocks.BLOCKS}/{name}", doc) == answer,
             30, f"the gone-nodes policy to answer {answer} to node {node}")


@contextlib.asynccontextmanager
async def connected(real: RealKube, path: Path, token: str) -> AsyncIterator[Api]:
    """netctl's client, under ``token``."""
    api = await Api.connect(KubeSettings(str(real.kubeconfig(path, token=token)),
                                         api_timeout=10))
    try:
        yield api
    finally:
        await api.close()


def spec_of(node: str, cidr: str, **more: Any) -> BlockSpec:
    """A block's spec, or with ``parent`` (and the rest of ``more``) a borrow's."""
    kind = BorrowSpec if "parent" in more else BlockSpec
    return kind(pool="p", scope="s", range="10.190.0.0/16", poolSize=65534, prefix=16,
                cidr=cidr, node=node, claimedAt=blocks.now_rfc3339(), **more)


async def refused(call: Awaitable[object], *words: str) -> None:
    """``call`` (a request of netctl's client) ends with a 403 whose message says each of
    ``words``."""
    with pytest.raises(ApiError) as caught:
        await call
    message = caught.value.reason
    assert caught.value.status == 403, message
    assert all(w in message for w in words), message


def test_a_pod_bound_token_names_the_pods_node(real: RealKube,
                                               tokens: dict[str, str]) -> None:
    review = real.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        token=tokens["node-a"])
    user = review["status"]["userInfo"]
    assert user["username"] == realkube.SA_USER
    assert user["extra"]["authentication.kubernetes.io/node-name"] == ["node-a"]


def test_a_daemons_own_writes_pass(real: RealKube, tokens: dict[str, str],
                                   tmp_path: Path) -> None:
    """Node A claims a block, publishes a reservation on it, releases it; writes its pod's
    network-status; takes the gone-nodes Lease; labels a block without labels (any
    node's, as after an upgrade from a netctl whose blocks had none)."""
    write = status_write(real, "node-a")

    async def main() -> None:
        async with connected(real, tmp_path / "a", tokens["node-a"]) as a:
            made = await blocks.claim(a, "b-own", spec_of("node-a", "10.190.0.0/28"))
            assert made is not None
            made = await blocks.set_reserved(a, made, [StickyEntry(
                "10.190.0.1", "default/web-0", "eth0", time.time() + 60, "node-a")])
            assert made is not None and made.spec.reserved[0].identity == "default/web-0"
            assert await blocks.release(a, made)
            assert await patch_status(a, write) == "written", write.error
            assert await LeaseHold(a, LEASE_NAMESPACE, LEASE_NAME, "node-a", 10).tick()

    trio.run(main)
    assert real.get("ipamblocks", None, "b-own") is None

    # a block made before blocks carried labels, of another node: labelled by the first
    # daemon to start after the upgrade (its spec unchanged)
    unlabelled = block_doc("b-old", "node-b")
    del unlabelled["metadata"]["labels"]
    real.create("ipamblocks", unlabelled)

    async def label() -> None:
        async with connected(real, tmp_path / "a", tokens["node-a"]) as a:
            old = await blocks.get(a, "b-old")
            assert old is not None
            assert await blocks.label(a, old) is not None

    trio.run(label)
    labelled = real.get("ipamblocks", None, "b-old")
    assert labelled is not None
    assert labelled["metadata"]["labels"][blocks.NODE_LABEL] == "node-b"
    lease = real.request("GET", LEASE)
    assert lease["spec"]["holderIdentity"] == "node-a"


def test_another_nodes_block_or_pod_is_refused_and_unchanged(
        real: RealKube, tokens: dict[str, str], tmp_path: Path) -> None:
    """Node A's token at node B's block, pod and Lease: 403, the policy's message, nothing
    written; the admin does the same, and it passes."""
    write = status_write(real, "node-b")
    forged = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {
        "name": LEASE_NAME, "namespace": LEASE_NAMESPACE}, "spec": {"holderIdentity": "node-b"}}
    with pytest.raises(ApiFailure) as caught:  # made in another node's name
        real.request("POST", LEASE.rpartition("/")[0], forged, token=tokens["node-a"])
    assert caught.value.status == 403, caught.value.body
    assert "may hold Lease netctl-ipam-gone-nodes in its own name only, not as node-b" \
        in caught.value.body

    async def bs() -> Block:
        async with connected(real, tmp_path / "b", tokens["node-b"]) as b:
            theirs = await blocks.claim(b, "b-theirs", spec_of("node-b", "10.190.1.0/28"))
            assert theirs is not None
            assert await LeaseHold(b, LEASE_NAMESPACE, LEASE_NAME, "node-b", 10).tick()
            return theirs

    theirs = trio.run(bs)
    wait_takeover(real, tokens["node-a"], "b-theirs", "node-a", (403, GONE))
    lease = real.request("GET", LEASE)
    in_bs_name = json.dumps(lease).encode()

    async def as_a() -> None:
        async with connected(real, tmp_path / "a", tokens["node-a"]) as a:
            await refused(blocks.claim(a, "b-mine", spec_of("node-b", "10.190.2.0/28")),
                          REACH, "netctl on node node-a may create its own IPAMBlocks only",
                          "names node node-b")
            await refused(blocks.set_reserved(a, theirs, [StickyEntry(
                "10.190.1.1", "default/web-0", node="node-a")]),
                "netctl on node node-a may not change IPAMBlock b-theirs of node node-b")
            await refused(blocks.release(a, theirs),
                          "netctl on node node-a may delete its own IPAMBlocks only",
                          "b-theirs is node node-b's")
            await refused(blocks.hand_over(a, theirs, "node-a"), GONE,
                          "netctl on node node-a takes over IPAMBlock b-theirs of node "
                          "node-b only while it holds Lease kube-system/netctl-ipam-gone-nodes",
                          "which node node-b holds")
            await refused(blocks.hand_over(a, theirs, "node-c"), REACH,
                          "may not move IPAMBlock b-theirs from node node-b to node node-c")
            assert await patch_status(a, write) == "failed"
            assert "403" in write.error and "netctl on node node-a may write the pods of its " \
                "own node only; pod kube-system/netctl-node-b is on node node-b" in write.error
            await refused(a.request("update", "PUT", LEASE, body=in_bs_name),
                          "netctl on node node-a may hold Lease netctl-ipam-gone-nodes in its "
                          "own name only, not as node-b")

    trio.run(as_a)
    stored = real.get("ipamblocks", None, "b-theirs")
    assert stored is not None and stored["spec"]["node"] == "node-b"
    assert "reserved" not in stored["spec"] and stored["metadata"]["generation"] == 1
    assert real.get("ipamblocks", None, "b-mine") is None
    pod = real.get("pods", "kube-system", "netctl-node-b")
    assert pod is not None and not pod["metadata"].get("annotations")
    after = real.request("GET", LEASE)
    assert after["metadata"]["resourceVersion"] == lease["metadata"]["resourceVersion"]

    # the admin: not looked at
    real.patch("pods", "kube-system", "netctl-node-b", {"metadata": {"annotations": {
        "k8s.v1.cni.cncf.io/network-status": "[]"}}})
    real.update("ipamblocks", {**stored, "spec": {**stored["spec"], "node": "node-c"}})
    real.create("ipamblocks", block_doc("b-admins", "node-b"))
    real.delete("ipamblocks", None, "b-theirs")
    real.request("PUT", LEASE, {**after, "spec": {**after["spec"], "holderIdentity": "x"}})


def test_a_token_naming_no_node_is_refused(real: RealKube, tokens: dict[str, str],
                                           tmp_path: Path) -> None:
    """netctl's ServiceAccount with a token bound to no pod (a TokenRequest of its own, as
    on a cluster whose tokens carry no node): every write the policies look at refused."""
    write = status_write(real, "node-a")

    async def main() -> None:
        async with connected(real, tmp_path / "none", real.sa_token) as api:
            await refused(blocks.claim(api, "b-none", spec_of("node-a", "10.190.3.0/28")),
                          REACH, "netctl's ServiceAccount made this request with a token that "
                          "names no node", "Kubernetes 1.30 or later")
            assert await patch_status(api, write) == "failed"
            assert "names no node" in write.error
            nodes = await api.get("/api/v1/nodes/node-a")  # a read: not looked at
            assert nodes is not None

    trio.run(main)
    assert real.get("ipamblocks", None, "b-none") is None


def test_borrows_are_answered_and_transferred_by_their_nodes_only(
        real: RealKube, tokens: dict[str, str], tmp_path: Path) -> None:
    """B borrows an address of A's block; only A answers. C asks B for the borrow object
    (a sticky identity's address came back on C), withdraws, asks again; A may not ask in
    C's name; B refuses, C asks again, B hands it over to C, and then may no longer delete
    it."""
    async def main() -> None:
        async with connected(real, tmp_path / "a", tokens["node-a"]) as a, \
                connected(real, tmp_path / "b", tokens["node-b"]) as b, \
                connected(real, tmp_path / "c", tokens["node-c"]) as c:
            parent = await blocks.claim(a, "b-parent", spec_of("node-a", "10.190.4.0/28"))
            assert parent is not None
            await refused(blocks.claim(b, "b-self", spec_of(
                "node-b", "10.190.4.6/32", parent="b-parent"), lender="node-b"),
                "netctl on node node-b may not create IPAMBlock b-self lent by itself")
            ask = await blocks.claim(b, "b-borrow", spec_of(
                "node-b", "10.190.4.5/32", parent="b-parent", identity="default/web-0",
                ifname="eth0"), lender="node-a")
            assert ask is not None
            for node, api in (("node-b", b), ("node-c", c)):
                await refused(blocks.answer(api, ask, "granted"),
                              f"netctl on node {node} may not answer borrow b-borrow: its "
                              "lender (label ipam.netctl.dev/lender) is node node-a")
            granted = await blocks.answer(a, ask, "granted")
            assert granted is not None and granted.spec.grant == "granted"

            wanted = TransferAsk(node="node-c", identity="default/web-0", ifname="eth0")
            asked = await blocks.ask_transfer(c, granted, wanted)
            assert asked is not None
            withdrawn = await blocks.withdraw_transfer(c, asked)
            assert withdrawn is not None and withdrawn.spec.transfer is None
            await refused(blocks.ask_transfer(a, withdrawn, wanted),
                          "netctl on node node-a may not change IPAMBlock b-borrow of node "
                          "node-b (spec transfer)")
            asked = await blocks.ask_transfer(c, withdrawn, wanted)
            assert asked is not None
            no = await blocks.answer_transfer(b, asked, False)
            assert no is not None and no.spec.transfer is not None and no.spec.transfer.refused
            asked = await blocks.ask_transfer(c, no, wanted)  # over the refusal
            assert asked is not None
            await refused(blocks.answer_transfer(c, asked, True),
                          "may not move IPAMBlock b-borrow from node node-b to node node-c")
            handed = await blocks.answer_transfer(b, asked, True)
            assert handed is not None and handed.spec.node == "node-c"
            await refused(blocks.release(b, handed), "b-borrow is node node-c's")
            assert await blocks.release(c, handed)

    trio.run(main)
    assert [b["metadata"]["name"] for b in real.list("ipamblocks")] == ["b-parent"]


def test_a_gone_nodes_blocks_go_to_the_leases_holder_only(
        real: RealKube, tokens: dict[str, str], tmp_path: Path) -> None:
    """Node G is gone with a block, and B's borrow of an address in it: the daemon holding
    the gone-nodes Lease takes the block over and names itself the borrow's lender; the
    others may not, before or after."""
    real.create("ipamblocks", block_doc("b-gone", "node-g"))

    async def b_holds() -> None:
        async with connected(real, tmp_path / "b", tokens["node-b"]) as b:
            lent = await blocks.claim(b, "b-lent", spec_of(
                "node-b", "10.190.0.9/32", parent="b-gone"), lender="node-g")
            assert lent is not None
            assert await LeaseHold(b, LEASE_NAMESPACE, LEASE_NAME, "node-b", 10).tick()

    trio.run(b_holds)
    wait_takeover(real, tokens["node-a"], "b-gone", "node-a", (403, GONE))

    async def a_may_not() -> None:
        async with connected(real, tmp_path / "a", tokens["node-a"]) as a:
            gone, lent = await blocks.get(a, "b-gone"), await blocks.get(a, "b-lent")
            assert gone is not None and lent is not None
            await refused(blocks.hand_over(a, gone, "node-a"), "which node node-b holds")
            await refused(blocks.label(a, lent, lender="node-a"),
                          "netctl on node node-a names itself the lender of borrow b-lent "
                          "only while it holds Lease")
            # B stops renewing; A finds the Lease unchanged for its duration and takes it
            hold = LeaseHold(a, LEASE_NAMESPACE, LEASE_NAME, "node-a", 10)
            assert not await hold.tick(now=0.0)
            assert await hold.tick(now=100.0)

    trio.run(a_may_not)
    wait_takeover(real, tokens["node-a"], "b-gone", "node-a", (200, ""))

    async def a_takes_over() -> None:
        async with connected(real, tmp_path / "a", tokens["node-a"]) as a, \
                connected(real, tmp_path / "b", tokens["node-b"]) as b:
            gone, lent = await blocks.get(a, "b-gone"), await blocks.get(a, "b-lent")
            assert gone is not None and lent is not None
            taken = await blocks.hand_over(a, gone, "node-a")
            assert taken is not None and taken.spec.node == "node-a"
            relabelled = await blocks.label(a, lent, lender="node-a")
            assert relabelled is not None
            answered = await blocks.answer(a, relabelled, "granted")
            assert answered is not None
            await refused(blocks.label(b, answered, lender="node-b"), "which node node-a holds")

    trio.run(a_takes_over)
    lent = real.get("ipamblocks", None, "b-lent")
    assert lent is not None and lent["metadata"]["labels"][blocks.LENDER_LABEL] == "node-a"
    assert lent["spec"]["grant"] == "granted"
    taken = real.get("ipamblocks", None, "b-gone")
    assert taken is not None and [h["node"] for h in taken["spec"]["history"]] == ["node-g"]


@pytest.mark.netns
@pytest.mark.slow
def test_real_daemons_run_the_cluster_ipam_under_the_policies(
        real: RealKube, tokens: dict[str, str], tmp_path: Path,
        installed_plugin: Path) -> None:
    """Two daemons, each with its pod's token: B claims a block, A borrows an address of
    it (B answers), B's node goes (its daemon killed, its pod and Node deleted) and A, the
    Lease's holder, takes B's block and the borrow over, then releases what is empty.
    Not one of their requests is refused."""
    pool = "10.191.0.0/24"  # blocks of /28
    made: list[Daemon] = []

    def start(node: str, **settings: Any) -> Daemon:
        root = tmp_path / node
        root.mkdir()
        config = real.kubeconfig(root / "kubeconfig", token=tokens[node])
        d = Daemon(root, f"ncv{len(made)}", [str(TEST_PLUGINS)], {
            **TEST_SETTINGS, "kubeconfig": str(config), "node-name": node,
            "ipam-backend": "kubernetes", "api-timeout": 3, "block-check": 0.2, **settings})
        shutil.copytree(installed_plugin, Path(d.plugin).parent)
        made.append(d)
        d.start()
        wait_for(lambda: (d.status().get("kubernetes") or {}).get("ipam", {}).get("ready"),
                 20, f"{node}'s cluster IPAM ready")
        return d

    def owners() -> list[tuple[str, str]]:
        return sorted((b["spec"]["cidr"], b["spec"]["node"]) for b in real.list("ipamblocks"))

    real.reset_counts()
    try:
        a = start("node-a", **{"node-gone-grace": 0.3, "block-idle": 0.3})
        b = start("node-b")
        address(ipam(b, "ADD", "on-b", pool))
        ((b_block, _),) = owners()
        lent = str(ipaddress.ip_network(b_block)[-2])
        assert address(ipam(a, "ADD", "borrower", pool, args=f"IP={lent}")) == lent
        assert owners() == sorted([(b_block, "node-b"), (f"{lent}/32", "node-a")])
        b.kill()
        real.delete("pods", "kube-system", "netctl-node-b")  # as pod GC does on a gone node
        real.delete("nodes", None, "node-b")
        wait_for(lambda: {n for _, n in owners()} == {"node-a"}, 60,
                 "node-b's block taken over by node-a")
        assert ipam(a, "DEL", "borrower", pool).rc == 0
        wait_for(lambda: owners() == [], 60, "the borrow and the block taken over released")
        assert real.refused == [], "netctl's requests refused by the policies"
        assert real.count("update", "ipamblocks") >= 2  # the answer, the handover
    finally:
        for d in made:
            d.shut_down()
