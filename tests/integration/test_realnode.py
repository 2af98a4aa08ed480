"""netctl on a real single-node Kubernetes cluster (:class:`netctl_kit.realnode.RealNode`):
the control plane, kubelet and Debian's containerd, netctl's image built by ``make image``
and installed as docs/kubernetes.md says (the CRD, rbac.yaml, daemonset.yaml). One node
serves the module, once per Kubernetes version selected (:mod:`netctl_kit.kubebins`: the
newest found by default; v1.24.0 and v1.36.2 pass); each test makes its own workload and
takes it back.

What is asserted is real state: pods' ``network-status`` through the API, the interfaces
and addresses in the pods' network namespaces (``ip -j addr`` there), the addresses netctl
holds (``netctl ipam pools --json`` in the daemon's container, through ``kubectl exec``),
the bridges' ports on the machine and the netns left in the node's ``/run/netns``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from netctl_kit import devices, realnode
from netctl_kit.realnode import (
    BUSYBOX_IMAGE,
    NETWORKS,
    PRIMARY_SUBNET,
    RealNode,
    is_ready,
    wait_for,
)

from tests.conftest import RealNodes

pytestmark = [pytest.mark.realnode, pytest.mark.netns, pytest.mark.slow]

NS = "default"
BLUE = ipaddress.ip_network("10.218.1.0/24")
GREEN = ipaddress.ip_network("10.218.2.0/24")
STICKY = ipaddress.ip_network("10.218.3.0/24")
RED = ipaddress.ip_network("10.218.4.0/24")
GWA = ipaddress.ip_network("10.218.5.0/24")  # its bridge the pods' default gateway
GWB = ipaddress.ip_network("10.218.6.0/24")  # its bridge a gateway
SUBNETS = {"primary": ipaddress.ip_network(PRIMARY_SUBNET), "blue": BLUE, "green": GREEN,
           "sticky": STICKY, "red": RED, "gwa": GWA, "gwb": GWB}
TIMINGS: dict[str, float] = {}


def nad(name: str, bridge: str, subnet: ipaddress.IPv4Network, gateway: str = "",
        **ipam: Any) -> dict[str, Any]:
    """A bridge + netctl-ipam NAD; ``gateway``: "" (none), "gateway" (the bridge holds
    the subnet's first address) or "default" (and is the pod's default gateway)."""
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": bool(gateway),
        "isDefaultGateway": gateway == "default",
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


@pytest.fixture(scope="module", params=realnode.versions(), ids=str)
def node(request: pytest.FixtureRequest, real_nodes: RealNodes) -> Iterator[RealNode]:
    """The session's node of this version (tests/conftest.py: ``real_nodes``), with this
    module's NADs; they are deleted after it."""
    kube = request.param
    TIMINGS.clear()
    t0 = time.monotonic()
    n = real_nodes(kube)
    n.apply([nad("blue", f"{n.prefix}b1", BLUE), nad("green", f"{n.prefix}b2", GREEN),
             nad("sticky", f"{n.prefix}b3", STICKY, sticky=True, sticky_for="1h"),
             nad("red", f"{n.prefix}b4", RED),
             nad("gwa", f"{n.prefix}b5", GWA, "default"),
             nad("gwb", f"{n.prefix}b6", GWB, "gateway")])
    TIMINGS.update(n.timings, **{"fixture": time.monotonic() - t0})
    yield n
    n.kubectl("-n", NS, "delete", "network-attachment-definitions", *SUBNETS.keys() - {"primary"},
              "--ignore-not-found")
    print(f"\nreal node {kube} timings (s): "
          f"{json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


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
    """:meth:`RealNode.check_networks` with this module's subnets."""
    return node.check_networks(pod, want, SUBNETS)


def settled(node: RealNode, pools: tuple[ipaddress.IPv4Network, ...],
            bridges: tuple[str, ...]) -> bool:
    """No address held in ``pools``, no port left on ``bridges``, no pod netns."""
    held = node.held()
    return not any(str(p) in held for p in pools) and \
        not any(node.bridge_ports(b) for b in bridges) and not node.sandbox_netns()


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
        return pod if is_ready("pod", pod) else None
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
    assert not any(node.bridge_ports(b) for b in (node.primary_bridge, f"{node.prefix}b1"))
    t1 = time.monotonic()
    node.start_node()

    def restarted() -> list[dict[str, Any]] | None:
        pods = node.pods(NS, "app=boot")
        if sorted(p["metadata"]["uid"] for p in pods) != sorted(before):
            return None
        for p in pods:
            statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
            if statuses[0].get("containerID") in (None, before[p["metadata"]["uid"]]) or \
                    not is_ready("pod", p):
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


def default_routes(node: RealNode, pod: dict[str, Any]) -> list[tuple[str, str]]:
    routes = json.loads(node.in_pod_netns(pod, "ip", "-j", "route", "show", "default") or "[]")
    return [(str(r.get("gateway")), str(r.get("dev"))) for r in routes]


def test_default_route_moves_to_the_network_that_asks(node: RealNode) -> None:
    """``default-route`` in the annotation: the pod's default route goes via that
    network's gateway on its interface, the other network's default route is removed, and
    network-status says where it is; without it the delegate's default route stays."""
    t0 = time.monotonic()
    gwa, gwb = str(GWA[1]), str(GWB[1])
    node.apply([bare_pod("plainroute", "gwa,gwb"), bare_pod("moved", json.dumps(
        [{"name": "gwa"}, {"name": "gwb", "default-route": [gwb]}]))])
    node.wait_ready("pod", "plainroute", NS)
    node.wait_ready("pod", "moved", NS)
    want = {"eth0": "primary", "net1": "default/gwa", "net2": "default/gwb"}
    plain = node.get("pods", "plainroute", NS)
    moved = node.get("pods", "moved", NS)
    assert plain is not None and moved is not None
    check_networks(node, plain, want)
    check_networks(node, moved, want)
    assert default_routes(node, plain) == [(gwa, "net1")]  # gwa's bridge: isDefaultGateway
    assert default_routes(node, moved) == [(gwb, "net2")]
    gateways = {e["interface"]: e.get("gateway") for e in node.network_status(moved)}
    assert gateways["net2"] == [gwb] and not gateways["net1"], gateways
    TIMINGS["f: default-route"] = time.monotonic() - t0


def test_a_rolling_update_of_netctl_during_churn_loses_nothing(node: RealNode) -> None:
    """netctl's DaemonSet rolled (``kubectl rollout restart``) while a Deployment scales
    3 → 8 → 4: every pod that ends up running has its networks and network-status, netctl
    holds exactly their addresses, and nothing once they are gone."""
    t0 = time.monotonic()
    want = {"eth0": "primary", "net1": "default/blue"}
    node.apply([deployment("roll", 3, "blue")])
    node.wait_ready("deployment", "roll", NS)
    daemon = node.daemon_pod()
    scale(node, "deployment", "roll", 8)
    node.kubectl("-n", "kube-system", "rollout", "restart", "daemonset/netctl")
    wait_for(lambda: len(node.pods(NS, "app=roll")) == 8, 60, "8 pods created", interval=0.2)
    scale(node, "deployment", "roll", 4)
    node.kubectl("-n", "kube-system", "rollout", "status", "daemonset/netctl",
                 "--timeout=180s", timeout=200)
    assert node.daemon_pod() != daemon
    node.wait_ready("deployment", "roll", NS, timeout=180)

    def four() -> list[dict[str, Any]] | None:
        pods = [p for p in node.pods(NS, "app=roll")
                if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == 4 and len(node.pods(NS, "app=roll")) == 4 else None
    pods = wait_for(four, 120, "4 pods left", interval=0.5)
    seen = {check_networks(node, p, want)["net1"] for p in pods}
    assert len(seen) == 4
    wait_for(lambda: node.held() == {str(BLUE): 4}, 60, "netctl holding the 4 pods' "
             "addresses only", interval=0.5)
    scale(node, "deployment", "roll", 0)
    node.wait_pods_gone(NS, "app=roll")
    wait_for(lambda: settled(node, (BLUE,), (f"{node.prefix}b1", node.primary_bridge)), 60,
             "every address released", interval=0.5)
    TIMINGS["g: rolling update"] = time.monotonic() - t0


VF = ipaddress.ip_network("10.218.7.0/24")
VF_RESOURCE = "netctl.test/vf"


def device_pod(name: str, networks: str, devices: int) -> dict[str, Any]:
    """A pod selecting ``networks``, its container asking for ``devices`` VFs (0: none)."""
    out = bare_pod(name, networks)
    if devices:
        out["spec"]["containers"][0]["resources"] = {"limits": {VF_RESOURCE: devices}}
    return out


def add_ms(node: RealNode, name: str) -> float:
    """The ADD of the pod's sandbox, in ms, as the journal has it."""
    doc = json.loads(node.netctl("journal", "--pod", f"{NS}/{name}", "--json"))
    ops = [o for o in doc["operations"] if o["verb"] == "ADD" and o["state"] == "done"]
    return round((ops[-1]["finished_at"] - ops[-1]["started_at"]) * 1000, 1)


def test_device_networks_get_the_kubelets_devices_and_give_them_back(node: RealNode) -> None:
    """A device plugin of the kit advertises host veths as ``netctl.test/vf`` (with
    device-info files); a pod asking for two and selecting a NAD of that resource twice
    gets two distinct devices, moved into it by ``devmove`` (the SR-IOV-like test delegate)
    from the ``deviceID`` netctl gave it, as the kubelet's real PodResources API says; its
    network-status carries each device's device-info; the journal answers who had a device;
    deleting the pod gives everything back. A pod that asked for no device is refused (code
    7, ``NoDeviceAllocated``). Then the ADD of a device network beside a bridge (veth)
    network, three pods of each, from the journal."""
    t0 = time.monotonic()
    record = realnode.DEVMOVE_RECORD
    node.device_network("vf", NS, VF_RESOURCE, VF)
    # /var/run is a link to /run; an absolute link under /proc/PID/root resolves in this
    # process's root, so the node's /run is named directly
    devinfo_dir = node.node_path("/run/k8s.cni.cncf.io/devinfo")
    plugins = node.node_path("/var/lib/kubelet/device-plugins")
    with devices.temporary_device_veths(f"{node.prefix}v", 4, node.netns) as vfs, \
            devices.DevicePlugin(VF_RESOURCE, vfs, plugins, devinfo_dir) as plugin:
        wait_for(lambda: (node.get("nodes", node.name) or {}).get("status", {}).get(
            "allocatable", {}).get(VF_RESOURCE) == "4", 60, "the node's 4 VFs allocatable",
            interval=0.5)
        node.apply([device_pod("vf2", "vf,vf", 2), device_pod("novf", "vf", 0)])
        node.wait_ready("pod", "vf2", NS)
        pod = node.get("pods", "vf2", NS)
        assert pod is not None
        given = plugin.allocated[-1]
        assert len(set(given)) == 2 and set(given) <= set(vfs)
        assert plugin.calls[:2] == ["GetDevicePluginOptions", "ListAndWatch"]
        status = {e["interface"]: e for e in node.network_status(pod)}
        links = node.pod_links(pod)
        seen = {}
        for ifname in ("net1", "net2"):
            saw = json.loads(node.node_path(f"{record}/").joinpath(
                f"{pod_sandbox(node, pod)}-{ifname}.json").read_text())
            seen[ifname] = saw["deviceID"]
            assert saw["runtimeConfig"]["deviceID"] == saw["deviceID"]
            assert status[ifname]["name"] == "default/vf"
            assert status[ifname]["device-info"] == devices.device_info(
                plugin.pci_addresses[saw["deviceID"]])
            assert ipaddress.ip_address(links[ifname]["ips"][0]) in VF
            assert saw["deviceID"] not in node.links()
        assert sorted(seen.values()) == sorted(given)  # the kubelet's, each once
        wait_for(lambda: node.held().get(str(VF)) == 2, 30, "netctl holding 2 VF addresses")
        held = json.loads(node.netctl("journal", "--device", given[0], "--json"))
        assert [(a["pod"], a["resource"], a["until"]) for a in held["attachments"]] == \
            [(f"{NS}/vf2", VF_RESOURCE, None)]

        def refused() -> bool:
            events = json.loads(node.kubectl("-n", NS, "get", "events", "-o", "json",
                                             "--field-selector", "involvedObject.name=novf"))
            return any(e["reason"] == "NoDeviceAllocated" and VF_RESOURCE in e["message"]
                       for e in events["items"])
        wait_for(refused, 60, "the pod without a VF refused with NoDeviceAllocated",
                 interval=0.5)
        assert not node.ready("pod", "novf", NS)

        node.kubectl("-n", NS, "delete", "pod", "vf2", "novf", "--wait=true", timeout=120)
        wait_for(lambda: set(given) <= set(node.links()), 60,
                 "both VFs back on the node", interval=0.5)
        wait_for(lambda: str(VF) not in node.held(), 30, "the VF addresses released")
        assert list((devinfo_dir / "cni").iterdir()) == []  # the CNI's copies removed
        held = json.loads(node.netctl("journal", "--device", given[0], "--json"))
        assert held["attachments"][0]["until"] is not None
        TIMINGS["h: device networks"] = time.monotonic() - t0

        # an ADD with a device network beside one with a bridge (veth) network
        adds: dict[str, list[float]] = {"vf": [], "blue": []}
        for i in range(3):
            for net in ("vf", "blue"):
                name = f"lat-{net}-{i}"
                node.apply([device_pod(name, net, 1 if net == "vf" else 0)])
                node.wait_ready("pod", name, NS)
                adds[net].append(add_ms(node, name))
                node.kubectl("-n", NS, "delete", "pod", name, "--wait=true", timeout=120)
        print(f"\nADD (ms), a device network: {adds['vf']}; a bridge network: {adds['blue']}")
    wait_for(lambda: str(VF) not in node.held(), 30, "the VF addresses released")


def pod_sandbox(node: RealNode, pod: dict[str, Any]) -> str:
    """The pod's sandbox (the CNI container id), as the journal has it."""
    doc = json.loads(node.netctl("journal", "--pod", f"{NS}/{pod['metadata']['name']}",
                                 "--json"))
    return str(next(a["container"] for a in doc["attachments"] if a["state"] == "attached"))


def test_uninstall_then_reinstall_with_the_api_server_address_from_its_configmap(
        node: RealNode) -> None:
    """Uninstall as docs/migrating.md says (the DaemonSet deleted, uninstall.yaml run):
    a pod deleted while no daemon ran has its addresses released by the uninstall's replay;
    a pod created after it starts with eth0 alone (what the guide warns of). Reinstalled
    with ConfigMap netctl-api-server naming a port nothing serves: the daemon is not
    ready and says which address, which step and why; with the right port it is, the
    pods from before give their addresses back when deleted, new pods get their networks."""
    t0 = time.monotonic()
    node.apply([bare_pod("victim", "blue"), bare_pod("survivor", "blue")])
    node.wait_ready("pod", "victim", NS)
    node.wait_ready("pod", "survivor", NS)
    assert node.held() == {str(BLUE): 2}

    node.kubectl("-n", "kube-system", "delete", "daemonset", "netctl", "--wait=true",
                 timeout=120)
    wait_for(lambda: not node.daemon_pids(), 60, "the daemon gone", interval=0.2)
    # deleted while no daemon runs: the plugin records its DELs
    node.kubectl("-n", NS, "delete", "pod", "victim", "--wait=true", timeout=120)
    node.apply(realnode.MANIFESTS / "uninstall.yaml")
    node.kubectl("-n", "kube-system", "rollout", "status", "daemonset/netctl-uninstall",
                 "--timeout=180s", timeout=200)
    node.kubectl("delete", "-f", str(realnode.MANIFESTS / "uninstall.yaml"), "--wait=true",
                 timeout=120)
    assert not node.node_path("/etc/cni/net.d/00-netctl.conflist").exists()
    node.apply([bare_pod("after", "blue")])
    node.wait_ready("pod", "after", NS)
    after = node.get("pods", "after", NS)
    assert after is not None and set(node.pod_links(after)) == {"lo", "eth0"}
    node.kubectl("-n", NS, "delete", "pod", "after", "--wait=true", timeout=120)
    TIMINGS["h: uninstall"] = time.monotonic() - t0

    # reinstalled, first with the API server's address at a port where nothing listens
    t1 = time.monotonic()
    assert node.kube is not None
    wrong = realnode.free_port()
    node.kubectl("-n", "kube-system", "patch", "configmap", "netctl-api-server", "--type=merge",
                 "-p", json.dumps({"data": {"k8sServicePort": str(wrong)}}))
    node.kubectl("apply", "-f", str(realnode.MANIFESTS / "daemonset.yaml"))

    def why_not_ready() -> str:
        """The running daemon's reasons once they name the API server (not the status
        command's own "not reachable" while the daemon's container is still starting)."""
        try:
            status = json.loads(node.netctl("status", "--json", check=False) or "{}")
        except (realnode.NodeError, ValueError):
            return ""
        reasons = " ".join(status.get("reasons") or [])
        return reasons if "API server" in reasons and "not reachable" in reasons else ""
    try:
        reasons = wait_for(why_not_ready, 120, "the daemon saying why it is not ready",
                           interval=1)
        assert f"connecting to {node.kube.address}:{wrong}: ECONNREFUSED" in reasons, reasons
        assert "netctl-api-server" in reasons, reasons
        assert not node.ready("daemonset", "netctl", "kube-system")
    finally:  # the right port back, also when this failed: the next tests share the node
        node.kubectl("-n", "kube-system", "patch", "configmap", "netctl-api-server",
                     "--type=merge", "-p",
                     json.dumps({"data": {"k8sServicePort": str(node.kube.port)}}))
    node.kubectl("-n", "kube-system", "rollout", "restart", "daemonset/netctl")
    node.kubectl("-n", "kube-system", "rollout", "status", "daemonset/netctl",
                 "--timeout=180s", timeout=200)
    TIMINGS["h: reinstall"] = time.monotonic() - t1
    # the victim's address was released by the uninstall's replay; the survivor's is held
    wait_for(lambda: node.held() == {str(BLUE): 1}, 60, "only the survivor's address held",
             interval=0.5)
    survivor = node.get("pods", "survivor", NS)
    assert survivor is not None
    check_networks(node, survivor, {"eth0": "primary", "net1": "default/blue"})
    node.apply([deployment("fresh", 2, "blue")])
    node.wait_ready("deployment", "fresh", NS)
    for pod in node.pods(NS, "app=fresh"):
        check_networks(node, pod, {"eth0": "primary", "net1": "default/blue"})
    node.kubectl("-n", NS, "delete", "pod", "survivor", "--wait=true", timeout=120)
    scale(node, "deployment", "fresh", 0)
    node.wait_pods_gone(NS, "app=fresh")
    wait_for(lambda: settled(node, (BLUE,), (f"{node.prefix}b1", node.primary_bridge)), 60,
             "every address released, the survivor's too", interval=0.5)
    TIMINGS["h: uninstall and reinstall"] = time.monotonic() - t0


REBUILD_POD = "netctl-journal-rebuild"
DAEMON_LABEL = "app.kubernetes.io/name=netctl"
BROKEN_TABLES = ("attachments", "ipam_allocations", "operations")
JOURNAL = "/var/lib/netctl/journal.db"  # the node's (the DaemonSet's state dir)


def daemon_pods_on(node: RealNode) -> list[dict[str, Any]]:
    """The DaemonSet's pods on the node (terminating ones too)."""
    return [p for p in node.pods("kube-system", DAEMON_LABEL)
            if p["spec"].get("nodeName") == node.name]


def daemon_exits(pod: dict[str, Any]) -> list[int]:
    """The exit codes the pod's ``netctl`` container ended with (this run and the last)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    (status,) = [s for s in statuses if s["name"] == "netctl"] or [{}]
    return [int(s["terminated"]["exitCode"]) for s in (status.get("state") or {},
                                                        status.get("lastState") or {})
            if s.get("terminated")]


def daemon_failure_log(node: RealNode) -> str:
    """The log of the daemon's container that exited 1 (``kubectl logs``, else
    ``--previous``: the container may have been started again meanwhile)."""
    def failed() -> str | None:
        for pod in daemon_pods_on(node):
            if 1 in daemon_exits(pod):
                return str(pod["metadata"]["name"])
        return None
    name = wait_for(failed, 120, "the daemon's container exiting 1", interval=0.5)
    for previous in ((), ("--previous",)):
        log = node.kubectl("-n", "kube-system", "logs", name, "-c", "netctl", *previous,
                           check=False)
        if "fails its integrity check" in log:
            return log
    return log


def on_node(node: RealNode, code: str) -> Any:
    """What Python ``code`` prints (JSON), run by this interpreter in the node's mount
    namespace: SQLite resolves the machine's ``/proc/PID/root`` link to its own ``/``, so
    the node's journal is opened from inside the node."""
    return json.loads(node.in_node(sys.executable, "-c", code, timeout=60).stdout)


def journal_problems(node: RealNode) -> list[str]:
    """What the integrity check finds wrong with the node's journal ([]: sound)."""
    problems: list[str] = on_node(node, "import json; from netctl.journal import rebuild; "
                                        f"print(json.dumps(rebuild.check({JOURNAL!r})))")
    return problems


def set_daemonset_node_selector(node: RealNode, selector: dict[str, str] | None) -> None:
    """netctl's DaemonSet scheduled only where ``selector`` matches (None: everywhere, as
    deploy/kubernetes/daemonset.yaml has it)."""
    node.kubectl("-n", "kube-system", "patch", "daemonset", "netctl", "--type=merge", "-p",
                 json.dumps({"spec": {"template": {"spec": {"nodeSelector": selector}}}}))


def test_a_broken_journal_is_rebuilt_by_the_documented_pod_and_the_pods_keep_everything(
        node: RealNode) -> None:
    """docs/operating.md, "A broken journal", in Kubernetes: the daemon stopped (its
    DaemonSet kept, scheduled nowhere), every leaf page of the journal's attachments,
    allocations and operations overwritten; the daemon's pod started again fails, its log
    saying why and naming ``netctl journal rebuild``; deploy/kubernetes/journal-rebuild.yaml
    run as the guide says (sed, apply, wait Succeeded, logs, delete, the daemon's pod
    deleted) reads the three live pods' addresses back from their netns; the daemon then
    holds exactly them, the pods keep their interfaces and addresses, three new pods get
    other addresses, and everything is released once all are gone."""
    t0 = time.monotonic()
    want = {"eth0": "primary", "net1": "default/blue"}
    journal = node.node_path(JOURNAL)
    node.apply([deployment("rebuilt", 3, "blue")])
    node.wait_ready("deployment", "rebuilt", NS)
    assert node.held() == {str(BLUE): 3}
    before = {p["metadata"]["name"]: check_networks(node, p, want)["net1"]
              for p in node.pods(NS, "app=rebuilt")}
    assert len(set(before.values())) == 3
    try:
        # the daemon stopped, its DaemonSet kept: scheduled on no node
        set_daemonset_node_selector(node, {"netctl.test/nowhere": "true"})
        wait_for(lambda: not daemon_pods_on(node) and not node.daemon_pids(), 120,
                 "the daemon's pod and process gone", interval=0.5)
        for suffix in ("-wal", "-shm"):  # a daemon stopped cleanly checkpointed its WAL
            side = journal.with_name(journal.name + suffix)
            assert not side.exists() or suffix == "-shm" or side.stat().st_size == 0, side

        # every leaf page of the three tables overwritten past its header
        pages, size = on_node(node, (
            "import json; from netctl.journal import query; from netctl_kit import journaldb\n"
            f"conn = query.open_read_only({JOURNAL!r})\n"
            f"print(json.dumps([[p for t in {BROKEN_TABLES!r} for p in journaldb.leaf_pages("
            "conn, t)], journaldb.page_size(conn)]))"))
        assert pages
        with open(journal, "r+b") as fh:
            for page in pages:
                fh.seek((page - 1) * size + 8)
                fh.write(os.urandom(size - 8))
        assert journal_problems(node)
        TIMINGS["i: journal broken"] = time.monotonic() - t0

        # the daemon started again: it refuses, saying why and what to run
        set_daemonset_node_selector(node, None)
        log = daemon_failure_log(node)
        assert "fails its integrity check" in log and "netctl journal rebuild" in log, log

        # the documented procedure, as written
        t1 = time.monotonic()
        manifest = subprocess.run(
            ["sed", f"s/NODE_NAME/{node.name}/", str(realnode.MANIFESTS / "journal-rebuild.yaml")],
            capture_output=True, text=True, timeout=30, check=True).stdout
        node.kubectl("apply", "-f", "-", data=manifest)

        def finished() -> str | None:
            pod = node.get("pods", REBUILD_POD, "kube-system") or {}
            phase = (pod.get("status") or {}).get("phase")
            return phase if phase in ("Succeeded", "Failed") else None
        try:
            phase = wait_for(finished, 180, f"pod {REBUILD_POD} finished", interval=0.5)
        except realnode.HarnessError as exc:
            raise AssertionError(node.kubectl("-n", "kube-system", "describe", "pod",
                                              REBUILD_POD, check=False)) from exc
        report = node.kubectl("-n", "kube-system", "logs", REBUILD_POD)
        assert phase == "Succeeded", (phase, report, node.kubectl(
            "-n", "kube-system", "get", "pod", REBUILD_POD, "-o", "json"))
        assert "rebuilt; the old one is kept as /var/lib/netctl/journal.db.broken-" in report, \
            report
        for address in before.values():
            (line,) = [ln for ln in report.splitlines() if ln.strip().startswith(f"{address} ")]
            assert "held again for container" in line and "(unknown)" not in line and \
                "on net1 (named by runtime cache)" in line, report
        print(f"\n{REBUILD_POD}'s log:\n{report}")
        node.kubectl("-n", "kube-system", "delete", "pod", REBUILD_POD)
        node.kubectl("-n", "kube-system", "delete", "pod", "--field-selector",
                     f"spec.nodeName={node.name}", "-l", DAEMON_LABEL)
        node.wait_ready("daemonset", "netctl", "kube-system", timeout=180)
        assert journal_problems(node) == []
        TIMINGS["i: rebuild to daemon ready"] = time.monotonic() - t1
    finally:  # the node as the next tests need it, also when this failed
        set_daemonset_node_selector(node, None)
        node.kubectl("-n", "kube-system", "delete", "pod", REBUILD_POD, "--ignore-not-found")
        if journal.exists() and journal_problems(node):  # still broken: moved aside
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            for suffix in ("", "-wal", "-shm"):
                side = journal.with_name(journal.name + suffix)
                if side.exists():
                    side.rename(side.with_name(f"journal.db.broken-test-{stamp}{suffix}"))
            node.kubectl("-n", "kube-system", "delete", "pod", "--field-selector",
                         f"spec.nodeName={node.name}", "-l", DAEMON_LABEL)
        node.wait_ready("daemonset", "netctl", "kube-system", timeout=180)

    # the daemon holds exactly the live pods' addresses; the pods keep them
    wait_for(lambda: node.held() == {str(BLUE): 3}, 60, "the 3 pods' addresses held",
             interval=0.5)
    pods = node.pods(NS, "app=rebuilt")
    assert {p["metadata"]["name"]: check_networks(node, p, want)["net1"]
            for p in pods} == before
    scale(node, "deployment", "rebuilt", 6)
    node.wait_ready("deployment", "rebuilt", NS)
    after = {p["metadata"]["name"]: check_networks(node, p, want)["net1"]
             for p in node.pods(NS, "app=rebuilt")}
    assert {k: v for k, v in after.items() if k in before} == before
    assert len(after) == 6 and len(set(after.values())) == 6  # no address given twice
    wait_for(lambda: node.held() == {str(BLUE): 6}, 60, "the 6 pods' addresses held",
             interval=0.5)

    t2 = time.monotonic()
    scale(node, "deployment", "rebuilt", 0)
    node.wait_pods_gone(NS, "app=rebuilt")
    wait_for(lambda: settled(node, (BLUE,), (f"{node.prefix}b1", node.primary_bridge)), 150,
             "every address released, the recovered ones too", interval=0.5)
    TIMINGS["i: scale to 0, released"] = time.monotonic() - t2
    TIMINGS["i: broken journal"] = time.monotonic() - t0
