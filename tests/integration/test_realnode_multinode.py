"""netctl on three real nodes of one cluster (:class:`netctl_kit.realnode.RealCluster`, the
session's shared cluster grown to three: tests/conftest.py ``real_nodes``), each node its
own kubelet, containerd, mount and network namespaces, its ``eth0`` on a node network (a
bridge on the machine); the cluster IPAM on (``ipam-backend: kubernetes``) as
docs/ipam.md says, with ``node-gone-grace: 10`` and ``block-check: 2`` so that a gone node
is noticed in seconds (``block-idle`` stays 600 s: nothing here waits for it).

- A Deployment spread over the three nodes on a macvlan network across the node network,
  its pool shared: no address twice, each in a block its pod's node claimed through the
  API, and the pods ping each other from node to node over that network.
- A StatefulSet pod moved to another node (its node cordoned, the pod deleted) gets its
  sticky address back; ``kubectl netctl journal --ip`` names both holders, each on its
  node, over time.
- A node drained while the pool is nearly full (the pods moved off it cannot all get an
  address: code 100), then its whole stack stopped (a node that died) while pods on the
  other nodes come and go — none of them waits on it — then its Node deleted (and the pods
  still bound to it, as an operator does): another daemon takes the gone-nodes Lease the
  dead node held, takes its blocks over and,
  holding nothing in them, releases them at once: the waiting pods get their addresses,
  no address twice. The node then boots again and rejoins.
- A rolling update of netctl's DaemonSet across the three nodes during churn: every pod
  Ready with its network, nothing held afterwards but what live pods hold.

The timings (take-over, pods Ready again) are printed with the module's teardown.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from netctl_kit import realnode
from netctl_kit.realnode import (
    BUSYBOX_IMAGE,
    NETWORKS,
    PRIMARY_SUBNET,
    RealCluster,
    is_ready,
    wait_for,
)

from tests.conftest import ROOT, RealNodes

pytestmark = [pytest.mark.realnode, pytest.mark.netns, pytest.mark.slow]

NS = "default"
NODES = 3
SHARED = ipaddress.ip_network("10.215.0.0/26")  # sixteen /30 blocks
STICKY = ipaddress.ip_network("10.215.1.0/26")
TIGHT = ipaddress.ip_network("10.215.2.0/28")  # fourteen single-address blocks
CHURN = ipaddress.ip_network("10.215.3.0/24")
SUBNETS = {"primary": ipaddress.ip_network(PRIMARY_SUBNET), "shared": SHARED,
           "sticky": STICKY, "tight": TIGHT, "churn": CHURN}
DAEMON_CONFIG = "ipam-backend: kubernetes\nnode-gone-grace: 10\nblock-check: 2\n"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/netctl-ipam-gone-nodes"
TIMINGS: dict[str, float] = {}


def nad(name: str, subnet: ipaddress.IPv4Network, **ipam: Any) -> dict[str, Any]:
    """A macvlan NAD on each node's eth0 (the node network), its addresses from the
    cluster IPAM."""
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "macvlan", "master": "eth0", "mode": "bridge",
        "ipam": {"type": "netctl-ipam", "range": str(subnet), **ipam}}]}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS}, "spec": {"config": json.dumps(config)}}


def template(app: str, network: str, *, spread: bool = True,
             avoid: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False, "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 2,
        "containers": [{
            "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]}]}
    if spread:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": app}}}]
    if avoid:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "NotIn", "values": [avoid]}]}]}}}
    return {"metadata": {"labels": {"app": app}, "annotations": {NETWORKS: network}},
            "spec": spec}


def deployment(name: str, replicas: int, network: str, **kw: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": template(name, network, **kw)}}


def ready_pods(c: RealCluster, app: str) -> list[dict[str, Any]]:
    return [p for p in c.pods(NS, f"app={app}") if is_ready("pod", p)]


def net1(c: RealCluster, pod: dict[str, Any], network: str) -> str:
    """The pod's address on ``network`` (its net1), checked against its netns."""
    return c.node_of(pod).check_networks(pod, {"eth0": "primary", "net1": f"{NS}/{network}"},
                                         SUBNETS)["net1"]


def blocks(c: RealCluster, pool: ipaddress.IPv4Network) -> list[dict[str, Any]]:
    """The pool's IPAMBlocks' specs (borrow objects left out)."""
    assert c.kube is not None
    items = c.kube.request("GET", "/apis/ipam.netctl.dev/v1/ipamblocks")["items"]
    return [b["spec"] for b in items if b["spec"].get("range") == str(pool)
            and not b["spec"].get("parent")]


def owner(c: RealCluster, pool: ipaddress.IPv4Network, address: str) -> list[str]:
    ip = ipaddress.ip_address(address)
    return [b["node"] for b in blocks(c, pool) if ip in ipaddress.ip_network(b["cidr"])]


def lease_holder(c: RealCluster) -> str:
    assert c.kube is not None
    lease = c.kube.request("GET", LEASE, ok_missing=True) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def kubectl_netctl(c: RealCluster, *args: str) -> dict[str, Any]:
    """``kubectl netctl ARGS --json`` (the console script) with the admin's kubeconfig."""
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "kubectl-netctl"), *args, "--json",
                           "--kubeconfig", str(c.admin_kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def held(c: RealCluster) -> dict[str, dict[str, int]]:
    """node → range → addresses in use, from each node's daemon."""
    return {n.name: n.held() for n in c.nodes}


def set_daemon_config(c: RealCluster, extra: str) -> None:
    """The netctl-config ConfigMap's daemon.yaml as deploy/kubernetes/daemonset.yaml has
    it, with ``extra`` appended; the DaemonSet's pods deleted at once (its controller makes
    them anew) to read it."""
    cm = c.get("configmaps", "netctl-config", "kube-system")
    assert cm is not None
    base = cm["data"]["daemon.yaml"].split("# -- test --\n")[0]
    cm["data"]["daemon.yaml"] = base + ("# -- test --\n" + extra if extra else "")
    c.apply([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "netctl-config", "namespace": "kube-system"}, "data": cm["data"]}])
    selector = "app.kubernetes.io/name=netctl"
    old = {p["metadata"]["uid"] for p in c.pods("kube-system", selector)}
    c.kubectl("-n", "kube-system", "delete", "pods", "-l", selector, "--wait=false")

    def renewed() -> bool:
        pods = c.pods("kube-system", selector)
        return len(pods) == len(c.nodes) and all(
            p["metadata"]["uid"] not in old and is_ready("pod", p) for p in pods)
    wait_for(renewed, 240, "netctl's pods made anew and Ready", interval=0.5)


@pytest.fixture(scope="module", params=realnode.versions(), ids=str)
def cluster(request: pytest.FixtureRequest, real_nodes: RealNodes) -> Iterator[RealCluster]:
    kube = request.param
    TIMINGS.clear()
    t0 = time.monotonic()
    c = real_nodes.cluster(kube, NODES)
    TIMINGS["cluster of 3"] = time.monotonic() - t0
    t1 = time.monotonic()
    set_daemon_config(c, DAEMON_CONFIG)
    TIMINGS["rolled to the cluster IPAM"] = time.monotonic() - t1
    c.apply([nad("shared", SHARED), nad("tight", TIGHT), nad("churn", CHURN),
             nad("sticky", STICKY, sticky=True, sticky_for="1h")])
    yield c
    # its daemon config and a node that died and came back: not for the next module
    real_nodes.release()
    print(f"\nreal cluster {kube} timings (s): "
          f"{json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


@pytest.fixture(autouse=True)
def clean(cluster: RealCluster) -> Iterator[None]:
    yield
    for n in cluster.nodes:
        if not n.node_running:
            n.start_node()
        cluster.kubectl("uncordon", n.name, check=False)
    cluster.kubectl("-n", NS, "delete", "deployments,statefulsets,pods", "--all",
                    "--wait=false", "--grace-period=1")
    cluster.wait_pods_gone(NS, "")


def test_pods_spread_over_three_nodes_share_a_pool_and_reach_each_other(
        cluster: RealCluster) -> None:
    c = cluster
    c.apply([deployment("web", 6, "shared")])
    c.wait_ready("deployment", "web", NS, timeout=180)
    pods = ready_pods(c, "web")
    by_node: dict[str, list[tuple[str, str]]] = {}
    for p in pods:
        by_node.setdefault(p["spec"]["nodeName"], []).append((p["metadata"]["name"],
                                                              net1(c, p, "shared")))
    assert sorted(by_node) == sorted(n.name for n in c.nodes), by_node  # spread: all three
    addresses = [a for got in by_node.values() for _, a in got]
    assert len(set(addresses)) == len(addresses) == 6
    for node, got in by_node.items():  # each address in a block of its pod's node
        for _, a in got:
            assert owner(c, SHARED, a) == [node], (a, node, blocks(c, SHARED))
    # from one pod on each node, every pod on the other nodes, over the macvlan network
    for p in pods:
        here = p["spec"]["nodeName"]
        if p["metadata"]["name"] != by_node[here][0][0]:
            continue
        for other, got in by_node.items():
            if other == here:
                continue
            for _, a in got:
                out = c.node_of(p).in_pod_netns(p, "ping", "-c", "1", "-W", "5", "-I", "net1",
                                                a)
                assert " 0% packet loss" in out, out


def test_a_statefulset_pod_moved_to_another_node_keeps_its_sticky_address(
        cluster: RealCluster) -> None:
    c = cluster
    c.apply([{"apiVersion": "apps/v1", "kind": "StatefulSet",
              "metadata": {"name": "db", "namespace": NS},
              "spec": {"replicas": 1, "serviceName": "db",
                       "selector": {"matchLabels": {"app": "db"}},
                       "template": template("db", "sticky", spread=False)}}])
    c.wait_ready("statefulset", "db", NS)
    first = c.get("pods", "db-0", NS)
    assert first is not None
    address, was_on = net1(c, first, "sticky"), first["spec"]["nodeName"]
    t0 = time.monotonic()
    c.kubectl("cordon", was_on)
    c.kubectl("-n", NS, "delete", "pod", "db-0", "--wait=false")

    def moved() -> dict[str, Any] | None:
        pod = c.get("pods", "db-0", NS)
        if pod is None or pod["metadata"]["uid"] == first["metadata"]["uid"]:
            return None
        return pod if is_ready("pod", pod) else None
    second = wait_for(moved, 120, "db-0 on another node and Ready", interval=0.25)
    TIMINGS["sticky pod moved, Ready"] = time.monotonic() - t0
    now_on = second["spec"]["nodeName"]
    assert now_on != was_on
    assert net1(c, second, "sticky") == address  # its address, on another node

    history = kubectl_netctl(c, "journal", "--ip", address)
    assert history["unanswered"] == []
    rows = [(a["node"], a["pod"], a["until"] is None) for a in history["allocations"]]
    assert rows == [(was_on, f"{NS}/db-0", False), (now_on, f"{NS}/db-0", True)], rows


def test_a_dead_then_deleted_node_gives_its_blocks_back_at_once(cluster: RealCluster) -> None:
    c = cluster
    holder = wait_for(lambda: lease_holder(c), 60, "a holder of the gone-nodes Lease")
    # the node to lose: the Lease's holder, so that another daemon must take the Lease too
    victim = c.node(holder)
    others = [n for n in c.nodes if n is not victim]
    c.apply([deployment("fill", 12, "tight")])  # 4 a node, 12 of the pool's 14 addresses
    c.wait_ready("deployment", "fill", NS, timeout=180)
    before = {p["metadata"]["name"]: net1(c, p, "tight") for p in ready_pods(c, "fill")}
    assert len(set(before.values())) == 12
    on_victim = [p for p in ready_pods(c, "fill") if p["spec"]["nodeName"] == victim.name]
    assert on_victim

    # drained: its pods come back on the others, where the pool has 2 addresses left
    c.kubectl("drain", victim.name, "--ignore-daemonsets", "--force", "--grace-period=1",
              "--timeout=120s")
    wait_for(lambda: len(ready_pods(c, "fill")) == 12 - len(on_victim) + 2, 120,
             "the pods moved off the drained node: two of them with an address")

    def refused() -> bool:
        events = c.kube_list("events", NS)
        return any("exhausted" in (e.get("message") or "") for e in events)
    wait_for(refused, 60, "a moved pod refused: the pool exhausted", interval=1)
    assert len(ready_pods(c, "fill")) == 12 - len(on_victim) + 2

    # the node dies: kubelet, runtime, daemon; the other nodes go on
    victim.stop_node()
    t0 = time.monotonic()
    c.apply([deployment("churn", 4, "churn", avoid=victim.name)])
    c.wait_ready("deployment", "churn", NS, timeout=60)
    c.kubectl("-n", NS, "scale", "deployment/churn", "--replicas=1")
    wait_for(lambda: len(c.pods(NS, "app=churn")) == 1, 60, "churn scaled down")
    TIMINGS["churn beside a dead node"] = time.monotonic() - t0

    # its Node deleted, and the pods still bound to it (its DaemonSet pod), as an operator
    # removing a dead node does (left alone, the pod garbage collector deletes them 40 s
    # later, and the blocks follow then): the Lease taken by another daemon, its blocks
    # taken over, released
    victims_blocks = {b["cidr"] for b in blocks(c, TIGHT) if b["node"] == victim.name}
    assert victims_blocks
    c.kubectl("delete", "node", victim.name)
    t1 = time.monotonic()
    c.kubectl("delete", "pods", "-A", "--field-selector", f"spec.nodeName={victim.name}",
              "--force", "--grace-period=0")
    wait_for(lambda: lease_holder(c) in {n.name for n in others}, 60,
             "another daemon holding the gone-nodes Lease", interval=0.5)
    TIMINGS["Lease taken over"] = time.monotonic() - t1

    def released() -> bool:
        """None of its blocks is its own, nor held by the node that took it over (its
        history names it): each deleted, or claimed afresh since."""
        return not [b for b in blocks(c, TIGHT) if b["cidr"] in victims_blocks and (
            b["node"] == victim.name
            or any(h["node"] == victim.name for h in b.get("history") or []))]
    wait_for(released, 240, "the dead node's blocks taken over and released", interval=0.5)
    TIMINGS["blocks taken over and released"] = time.monotonic() - t1
    c.wait_ready("deployment", "fill", NS, timeout=120)
    TIMINGS["every pod Ready again"] = time.monotonic() - t1
    after = [net1(c, p, "tight") for p in ready_pods(c, "fill")]
    assert len(set(after)) == len(after) == 12
    for p in ready_pods(c, "fill"):
        a = net1(c, p, "tight")
        assert owner(c, TIGHT, a) == [p["spec"]["nodeName"]]

    # it boots again and rejoins (its Node registered anew); netctl runs there again
    victim.start_node()
    c.wait_ready("daemonset", "netctl", "kube-system", timeout=180)


def test_a_rolling_update_across_the_nodes_during_churn_loses_nothing(
        cluster: RealCluster) -> None:
    c = cluster
    c.apply([deployment("roll", 6, "shared")])
    c.wait_ready("deployment", "roll", NS, timeout=180)
    stop = threading.Event()
    errors: list[str] = []

    def churn() -> None:
        replicas = 6
        while not stop.is_set():
            replicas = 3 if replicas == 6 else 6
            try:
                c.kubectl("-n", NS, "scale", "deployment/roll", f"--replicas={replicas}")
            except Exception as exc:  # reported after the update
                errors.append(str(exc))
            stop.wait(3)

    worker = threading.Thread(target=churn)
    worker.start()
    t0 = time.monotonic()
    try:
        c.kubectl("-n", "kube-system", "rollout", "restart", "daemonset/netctl")
        c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/netctl",
                  "--timeout=240s", timeout=260)
    finally:
        stop.set()
        worker.join()
    TIMINGS["rolling update during churn"] = time.monotonic() - t0
    assert errors == []
    c.kubectl("-n", NS, "scale", "deployment/roll", "--replicas=6")
    c.wait_ready("deployment", "roll", NS, timeout=180)
    addresses = [net1(c, p, "shared") for p in ready_pods(c, "roll")]
    assert len(set(addresses)) == len(addresses) == 6
    # nothing held but what the live pods hold: 6 addresses of the shared pool in all
    wait_for(lambda: sum(h.get(str(SHARED), 0) for h in held(c).values()) == 6, 60,
             "the shared pool holding the live pods' addresses, no more", interval=1)
