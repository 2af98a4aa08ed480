"""netctl on a real single-node Kubernetes cluster (:class:`netctl.kit.realnode.RealNode`):
the v1.24 control plane, kubelet and Debian's containerd, netctl's image built by ``make
image`` and installed as docs/kubernetes.md says (the CRD, rbac.yaml, daemonset.yaml). One
node serves the module; each test makes its own workload and takes it back.

What is asserted is real state: pods' ``network-status`` through the API, the interfaces
and addresses in the pods' network namespaces (``ip -j addr`` there), the addresses netctl
holds (``netctl ipam pools --json`` in the daemon's container, through ``kubectl exec``),
the bridges' ports on the machine and the netns left in the node's ``/run/netns``.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from netctl.kit import realnode
from netctl.kit.harness import bridge_ports
from netctl.kit.realnode import BUSYBOX_IMAGE, NETWORKS, PRIMARY_SUBNET, RealNode, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.netns, pytest.mark.slow]

NS = "default"
BLUE = ipaddress.ip_network("10.218.1.0/24")
GREEN = ipaddress.ip_network("10.218.2.0/24")
STICKY = ipaddress.ip_network("10.218.3.0/24")
RED = ipaddress.ip_network("10.218.4.0/24")
SUBNETS = {"blue": BLUE, "green": GREEN, "sticky": STICKY, "red": RED}
TIMINGS: dict[str, float] = {}


def nad(name: str, bridge: str, subnet: ipaddress.IPv4Network,
        **ipam: Any) -> dict[str, Any]:
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": False,
        "ipam": {"type": "netctl-ipam", "range": str(subnet), **ipam}}]}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"config": json.dumps(config)}}


def pod_template(app: str, networks: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}, "annotations": {NETWORKS: networks}},
        "spec": {
            "automountServiceAccountToken": False, "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                # PID 1 ignores a SIGTERM it has no handler for: exit on it at once
                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]}]},
    }


def bare_pod(name: str, networks: str) -> dict[str, Any]:
    template = pod_template(name, networks)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**template["metadata"], "name": name, "namespace": NS},
            "spec": template["spec"]}


def deployment(name: str, replicas: int, networks: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": pod_template(name, networks)}}


@pytest.fixture(scope="module")
def node() -> Iterator[RealNode]:
    reason = realnode.unavailable()
    if reason:
        pytest.skip(f"real node: {reason}")
    t0 = time.monotonic()
    try:
        realnode.build_image()  # this checkout's netctl
    except realnode.NodeError as exc:
        missing = realnode.unavailable(image=realnode.netctl_image())
        if missing:  # no image at all (mmdebstrap and apt-get out of reach, …)
            pytest.skip(f"real node: {missing}; {str(exc).splitlines()[-1]}")
        raise
    TIMINGS["make image"] = time.monotonic() - t0
    with RealNode() as n:
        n.install_netctl(build=False)
        n.apply([nad("blue", f"{n.prefix}b1", BLUE), nad("green", f"{n.prefix}b2", GREEN),
                 nad("sticky", f"{n.prefix}b3", STICKY, sticky=True, sticky_for="1h"),
                 nad("red", f"{n.prefix}b4", RED)])
        TIMINGS.update(n.timings, **{"fixture": time.monotonic() - t0})
        yield n
    print(f"\nreal node timings (s): {json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


@pytest.fixture(autouse=True)
def clean(node: RealNode) -> Iterator[None]:
    """Whatever a test leaves in its namespace (after a failure) deleted, and waited for;
    the node started again if a test left it stopped."""
    yield
    if not node.node_running:
        node.start_node()
    node.kubectl("-n", NS, "delete", "deployments,statefulsets,pods", "--all",
                 "--wait=false", "--grace-period=1")
    node.wait_pods_gone(NS, "")


# -- what a pod has ----------------------------------------------------------------------------


def check_networks(node: RealNode, pod: dict[str, Any], want: dict[str, str]) -> dict[str, str]:
    """The pod's network-status names ``want`` (interface → network: ``primary`` for
    eth0, ``default/NAD`` for the others) and says what its netns holds: each interface's
    addresses (in its network's subnet) and MAC; no other interface but lo. Returns
    interface → address."""
    name = pod["metadata"]["name"]
    status = node.network_status(pod)
    by_if = {e["interface"]: e for e in status if e.get("interface")}
    assert {i: e["name"] for i, e in by_if.items()} == want, (name, status)
    assert by_if["eth0"].get("default") is True, status
    links = node.pod_links(pod)
    assert set(links) == {"lo", *want}, (name, links)
    out = {}
    for ifname, entry in by_if.items():
        assert sorted(entry.get("ips", [])) == links[ifname]["ips"], (name, ifname, entry,
                                                                     links[ifname])
        assert entry.get("mac", "").lower() == links[ifname]["mac"].lower(), (name, entry)
        (address,) = entry["ips"]
        network = entry["name"].split("/")[-1]
        subnet = ipaddress.ip_network(PRIMARY_SUBNET) if ifname == "eth0" else SUBNETS[network]
        assert ipaddress.ip_address(address) in subnet, (name, ifname, address)
        out[ifname] = address
    assert pod["status"]["podIP"] == out["eth0"], (name, pod["status"]["podIP"])
    return out


def settled(node: RealNode, pools: tuple[ipaddress.IPv4Network, ...],
            bridges: tuple[str, ...]) -> bool:
    """No address held in ``pools``, no port left on ``bridges``, no pod netns."""
    held = node.held()
    return not any(str(p) in held for p in pools) and \
        not any(bridge_ports(b) for b in bridges) and not node.sandbox_netns()


def scale(node: RealNode, kind: str, name: str, replicas: int) -> None:
    node.kubectl("-n", NS, "scale", f"{kind}/{name}", f"--replicas={replicas}")


# -- the tests ---------------------------------------------------------------------------------


def test_deployment_pods_get_their_networks_in_both_forms_and_give_them_back(
        node: RealNode) -> None:
    t0 = time.monotonic()
    comma = deployment("comma", 3, "blue,default/green")
    listed = deployment("listed", 2, json.dumps(
        [{"name": "blue", "interface": "blue0"}, {"name": "green", "namespace": NS}]))
    node.apply([comma, listed])
    node.wait_ready("deployment", "comma", NS, timeout=120)
    node.wait_ready("deployment", "listed", NS, timeout=120)
    pods = node.pods(NS, "app in (comma,listed)")
    assert len(pods) == 5
    seen: dict[str, set[str]] = {}
    for pod in pods:
        if pod["metadata"]["labels"]["app"] == "comma":
            want = {"eth0": "primary", "net1": "default/blue", "net2": "default/green"}
        else:
            want = {"eth0": "primary", "blue0": "default/blue", "net2": "default/green"}
        for ifname, address in check_networks(node, pod, want).items():
            seen.setdefault(want[ifname], set()).add(address)
    assert {k: len(v) for k, v in seen.items()} == {
        "primary": 5, "default/blue": 5, "default/green": 5}  # no address given twice
    assert node.held() == {str(BLUE): 5, str(GREEN): 5}
    TIMINGS["a: 5 pods ready"] = time.monotonic() - t0

    t1 = time.monotonic()
    scale(node, "deployment", "comma", 0)
    scale(node, "deployment", "listed", 0)
    node.wait_pods_gone(NS, "app in (comma,listed)")
    wait_for(lambda: settled(node, (BLUE, GREEN), (f"{node.prefix}b1", f"{node.prefix}b2",
                                                   node.primary_bridge)),
             60, "every address released, no veth or netns left", interval=0.5)
    leases = node.node_path("/var/lib/cni/networks/primary")
    assert [f for f in leases.iterdir() if f.name[0].isdigit()] == []  # host-local's too
    TIMINGS["a: scale to 0"] = time.monotonic() - t1


def test_a_statefulset_pod_recreated_gets_its_sticky_address_back(node: RealNode) -> None:
    t0 = time.monotonic()
    node.apply([{
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": pod_template("db", "sticky")}}])
    node.wait_ready("statefulset", "db", NS)
    first = node.get("pods", "db-0", NS)
    assert first is not None
    want = {"eth0": "primary", "net1": "default/sticky"}
    address = check_networks(node, first, want)["net1"]
    assert node.held() == {str(STICKY): 1}

    node.kubectl("-n", NS, "delete", "pod", "db-0", "--wait=false")

    def recreated() -> dict[str, Any] | None:
        pod = node.get("pods", "db-0", NS)
        if pod is None or pod["metadata"]["uid"] == first["metadata"]["uid"]:
            return None
        return pod if node.ready("pod", "db-0", NS) else None
    second = wait_for(recreated, 120, "db-0 recreated and Ready", interval=0.25)
    assert check_networks(node, second, want)["net1"] == address  # its address, sticky
    (pool,) = [p for p in node.pools() if p["range"] == str(STICKY)]
    assert pool["in_use"] == 1, pool

    # scaled to 0: the address stays reserved for db-0, another pod does not get it
    scale(node, "statefulset", "db", 0)
    node.wait_pods_gone(NS, "app=db")

    def reserved() -> dict[str, Any] | None:
        (pool,) = [p for p in node.pools() if p["range"] == str(STICKY)]
        return pool if pool["in_use"] == 0 and pool["reserved"] == 1 else None
    wait_for(reserved, 60, "db-0's address released and reserved", interval=0.5)
    node.apply([bare_pod("other", "sticky")])
    node.wait_ready("pod", "other", NS)
    pod = node.get("pods", "other", NS)
    assert pod is not None and check_networks(node, pod, want)["net1"] != address
    scale(node, "statefulset", "db", 1)
    node.wait_ready("statefulset", "db", NS)
    third = node.get("pods", "db-0", NS)
    assert third is not None and check_networks(node, third, want)["net1"] == address
    TIMINGS["b: sticky"] = time.monotonic() - t0


def test_a_network_added_to_a_running_pod_is_plugged_and_unplugged(node: RealNode) -> None:
    t0 = time.monotonic()
    node.apply([bare_pod("hot", "blue")])
    node.wait_ready("pod", "hot", NS)
    pod = node.get("pods", "hot", NS)
    assert pod is not None
    before = check_networks(node, pod, {"eth0": "primary", "net1": "default/blue"})
    sandbox = pod["status"]["containerStatuses"][0]["containerID"]

    node.kubectl("-n", NS, "annotate", "--overwrite", "pod", "hot", f"{NETWORKS}=blue,red")
    want = {"eth0": "primary", "net1": "default/blue", "net2": "default/red"}

    def plugged() -> dict[str, Any] | None:
        pod = node.get("pods", "hot", NS)
        names = {e.get("interface") for e in node.network_status(pod or {"metadata": {}})}
        return pod if "net2" in names and "net2" in node.pod_links(pod or {}) else None
    pod = wait_for(plugged, 60, "net2 plugged into hot", interval=0.25)
    after = check_networks(node, pod, want)
    assert {k: after[k] for k in before} == before  # the others untouched
    assert pod["status"]["containerStatuses"][0]["containerID"] == sandbox  # no restart
    assert node.held() == {str(BLUE): 1, str(RED): 1}
    TIMINGS["c: plugged"] = time.monotonic() - t0

    node.kubectl("-n", NS, "annotate", "--overwrite", "pod", "hot", f"{NETWORKS}=blue")

    def unplugged() -> dict[str, Any] | None:
        pod = node.get("pods", "hot", NS)
        names = {e.get("interface") for e in node.network_status(pod or {"metadata": {}})}
        return pod if "net2" not in names and "net2" not in node.pod_links(pod or {}) \
            else None
    pod = wait_for(unplugged, 60, "net2 unplugged from hot", interval=0.25)
    assert check_networks(node, pod, {"eth0": "primary", "net1": "default/blue"}) == before
    wait_for(lambda: node.held() == {str(BLUE): 1}, 30, "red's address released",
             interval=0.5)
    TIMINGS["c: hot-plug"] = time.monotonic() - t0


def test_kill_9_of_the_daemon_kubelet_and_containerd_during_scaling(node: RealNode) -> None:
    """10 → 0 → 10 → 0 pods, the daemon, containerd and kubelet killed (SIGKILL) on the way
    (kubelet restarts the daemon's container, the fixture containerd and kubelet): every
    pod has its networks at the end, and nothing is held once they are gone."""
    t0 = time.monotonic()
    bridges = (f"{node.prefix}b1", f"{node.prefix}b2", node.primary_bridge)
    want = {"eth0": "primary", "net1": "default/blue", "net2": "default/green"}
    node.apply([deployment("chaos", 10, "blue,green")])
    node.wait_ready("deployment", "chaos", NS, timeout=180)
    assert node.held() == {str(BLUE): 10, str(GREEN): 10}
    TIMINGS["d: 10 pods ready"] = time.monotonic() - t0

    # 10 → 0: the daemon killed as the DELs begin, then containerd once a pod is gone
    t1 = time.monotonic()
    daemon = node.daemon_pids()
    scale(node, "deployment", "chaos", 0)
    node.kill_daemon()
    wait_for(lambda: len(node.pods(NS, "app=chaos")) < 10, 120, "a first pod gone",
             interval=0.1)
    node.kill_containerd()
    node.wait_pods_gone(NS, "app=chaos", timeout=180)
    node.wait_ready("daemonset", "netctl", "kube-system", timeout=180)
    assert node.daemon_pids() != daemon  # restarted by kubelet
    wait_for(lambda: settled(node, (BLUE, GREEN), bridges), 120,
             "every address released after the kills", interval=0.5)
    TIMINGS["d: 10->0 with kills"] = time.monotonic() - t1

    # 0 → 10: kubelet killed once a pod runs, the daemon once half of them are ready
    t2 = time.monotonic()
    scale(node, "deployment", "chaos", 10)

    def running(n: int) -> bool:
        return sum(1 for p in node.pods(NS, "app=chaos")
                   if (p.get("status") or {}).get("phase") == "Running") >= n
    wait_for(lambda: running(1), 120, "a first pod running", interval=0.1)
    node.kill_kubelet()
    wait_for(lambda: running(5), 180, "5 pods running", interval=0.1)
    node.kill_daemon()
    node.wait_ready("deployment", "chaos", NS, timeout=240)
    node.wait_ready("daemonset", "netctl", "kube-system", timeout=180)
    pods = node.pods(NS, "app=chaos")
    assert len(pods) == 10
    seen: set[str] = set()
    for pod in pods:
        seen.update(check_networks(node, pod, want).values())
    assert len(seen) == 30  # no address given twice
    wait_for(lambda: node.held() == {str(BLUE): 10, str(GREEN): 10}, 60,
             "netctl holding exactly the pods' addresses", interval=0.5)
    TIMINGS["d: 0->10 with kills"] = time.monotonic() - t2

    t3 = time.monotonic()
    scale(node, "deployment", "chaos", 0)
    node.wait_pods_gone(NS, "app=chaos", timeout=180)
    wait_for(lambda: settled(node, (BLUE, GREEN), bridges), 120, "every address released",
             interval=0.5)
    running_ops = json.loads(node.netctl("journal", "--running", "--json"))
    assert not running_ops.get("operations"), running_ops  # nothing left half done
    TIMINGS["d: 10->0"] = time.monotonic() - t3


def test_pods_come_back_with_their_networks_after_a_node_reboot(node: RealNode) -> None:
    """The node stopped (every process, its ``/run`` and so the pods' netns, its links) and
    started again: kubelet makes the pods' sandboxes anew, netctl (restarted by kubelet
    too, from its journal) attaches them, and the old attachments' addresses come back."""
    t0 = time.monotonic()
    want = {"eth0": "primary", "net1": "default/blue"}
    node.apply([deployment("boot", 3, "blue")])
    node.wait_ready("deployment", "boot", NS)
    before = {p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["containerID"]
              for p in node.pods(NS, "app=boot")}
    assert node.held() == {str(BLUE): 3}

    node.stop_node()
    assert node.node_pids() == [] and node.sandbox_netns() == []
    assert not any(bridge_ports(b) for b in (node.primary_bridge, f"{node.prefix}b1"))
    t1 = time.monotonic()
    node.start_node()

    def restarted() -> list[dict[str, Any]] | None:
        pods = node.pods(NS, "app=boot")
        if sorted(p["metadata"]["uid"] for p in pods) != sorted(before):
            return None
        for p in pods:
            statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
            if statuses[0].get("containerID") in (None, before[p["metadata"]["uid"]]) or \
                    not node.ready("pod", p["metadata"]["name"], NS):
                return None
        return pods
    pods = wait_for(restarted, 240, "the pods running again in new sandboxes", interval=0.5)
    node.wait_ready("daemonset", "netctl", "kube-system", timeout=180)
    TIMINGS["e: reboot to pods ready"] = time.monotonic() - t1
    seen = {check_networks(node, p, want)["net1"] for p in pods}
    assert len(seen) == 3
    wait_for(lambda: node.held() == {str(BLUE): 3}, 60,
             "netctl holding the new sandboxes' addresses only", interval=0.5)
    TIMINGS["e: reboot"] = time.monotonic() - t0
