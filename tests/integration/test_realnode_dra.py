"""DRA end to end on a real node (:class:`netctl_kit.realnode.RealNode`, Kubernetes v1.34 or
later: the newest version :mod:`netctl_kit.kubebins` finds; v1.36.2 where it was tried):
the real API server, scheduler, controller-manager and kubelet, netctl installed as
docs/kubernetes.md says (its ``rbac.yaml`` unchanged), and the kit's own DRA driver
(:mod:`netctl_kit.dradriver`) registered with the kubelet through its plugin watcher,
publishing host veths as network devices.

We test these aspects:

- a pod naming a ResourceClaim directly and another through a ResourceClaimTemplate, and a
  NAD of that resource selected twice, gets both devices — the scheduler allocated them,
  the kubelet had the driver prepare them, netctl found them (the direct one in the pod's
  spec only, the template's in its status) and gave each to the delegate
  (``tests/plugins/devmove`` moves the veth named by ``deviceID`` into the pod);
- a pod requesting the extended resource a DeviceClass serves (``extendedResourceName``)
  gets the device of the claim the scheduler made for it
  (``status.extendedResourceClaimStatus``);
- each claim's ``status.devices[]`` gets ``networkData`` (the interface, its addresses and
  MAC as the pod's netns has them) and ``Ready``, written by the DaemonSet's
  ServiceAccount and accepted by the real API server's validation and its
  ``resourceclaims/driver`` authorization (v1.36: ``associated-node:patch``, the shipped
  RBAC): no request of netctl's refused, no ``NetworkDataNotWritten`` Event;
- deleting the pods gives the devices back to the host, the addresses back to the pool,
  and the kubelet unprepares the claims.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from netctl_kit import devices, dradriver, kubebins
from netctl_kit.realnode import BUSYBOX_IMAGE, DEVMOVE_RECORD, NETWORKS, RealNode, wait_for

from tests.conftest import RealNodes

pytestmark = [pytest.mark.realnode, pytest.mark.netns, pytest.mark.slow]

NS = "default"
DRA_MINOR = 34  # resource.k8s.io/v1 (and extended resources backed by DRA)
DRIVER = "vf.netctl.test"
# the NAD's resourceName, the devices' attribute, the class's extendedResourceName: not the
# device plugin's resource of test_realnode.py (the kubelet keeps a plugin's resource on
# the shared node after the plugin leaves, and would admit the extended resource there)
RESOURCE = "netctl.test/dra-vf"
DEVICE_CLASS = "netctl-vf"   # extendedResourceName
VF = ipaddress.ip_network("10.218.9.0/24")
RECORD = DEVMOVE_RECORD
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def node(real_nodes: RealNodes) -> Iterator[RealNode]:
    """The session's node of the newest version with DRA (tests/conftest.py:
    ``real_nodes``), with the test delegate and this module's NAD (deleted after it)."""
    kube = kubebins.pick(min_minor=DRA_MINOR)
    if kube is None:
        pytest.skip(f"real node with DRA: {kubebins.missing(min_minor=DRA_MINOR)}")
    t0 = time.monotonic()
    n = real_nodes(kube)
    n.device_network("vf", NS, RESOURCE, VF)
    TIMINGS.update(n.timings, fixture=time.monotonic() - t0)
    yield n
    n.kubectl("-n", NS, "delete", "network-attachment-definitions", "vf", "--ignore-not-found")
    print(f"\nreal node {kube} (DRA) timings (s): "
          f"{json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


def dra_pod(name: str, networks: str, *, claims: list[dict[str, str]] = (),
            extended: int = 0) -> dict[str, Any]:
    """A pod selecting ``networks``; its container uses ``claims`` (its spec's
    resourceClaims entries), and asks for ``extended`` of the extended resource."""
    container: dict[str, Any] = {
        "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]}
    resources: dict[str, Any] = {}
    if claims:
        resources["claims"] = [{"name": c["name"]} for c in claims]
    if extended:
        resources["requests"] = resources["limits"] = {RESOURCE: str(extended)}
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"automountServiceAccountToken": False, "enableServiceLinks": False,
                            "terminationGracePeriodSeconds": 5, "containers": [container]}
    if claims:
        spec["resourceClaims"] = list(claims)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "annotations": {NETWORKS: networks}},
            "spec": spec}


def claim_of(node: RealNode, name: str) -> dict[str, Any]:
    assert node.kube is not None
    found = node.kube.get("resourceclaims", NS, name)
    assert found is not None, name
    return found


def network_entries(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in (claim.get("status") or {}).get("devices") or []
            if d.get("driver") == DRIVER and d.get("networkData")]


def check_network_data(node: RealNode, pod: dict[str, Any], claim: dict[str, Any],
                       devices_by_name: dict[str, str]) -> str:
    """The claim's one device has networkData saying what the pod's netns has for the
    interface netctl gave it, and Ready; returns that interface."""
    (entry,) = network_entries(claim)
    data = entry["networkData"]
    ifname = data["interfaceName"]
    link = node.pod_links(pod)[ifname]
    assert [str(ipaddress.ip_interface(a).ip) for a in data["ips"]] == link["ips"], (data, link)
    assert all(ipaddress.ip_interface(a).ip in VF for a in data["ips"])
    assert data["hardwareAddress"] == link["mac"]
    ready = [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]]
    assert ready == [("Ready", "True", "NetworkReady")], entry
    # the device netctl gave that interface is the one the claim's allocation holds
    saw = json.loads(node.node_path(RECORD).joinpath(
        f"{pod_sandbox(node, pod)}-{ifname}.json").read_text())
    assert saw["deviceID"] == devices_by_name[entry["device"]]
    return str(ifname)


def pod_sandbox(node: RealNode, pod: dict[str, Any]) -> str:
    """The pod's sandbox (the CNI container id), as the journal has it."""
    doc = json.loads(node.netctl("journal", "--pod", f"{NS}/{pod['metadata']['name']}",
                                 "--json"))
    return str(next(a["container"] for a in doc["attachments"] if a["state"] == "attached"))


def on_node(node: RealNode, link: str) -> bool:
    return link in node.links()


def test_claims_direct_templated_and_extended_get_devices_and_network_data(
        node: RealNode) -> None:
    assert node.kube is not None
    node.kube.reset_counts()  # the node may have served another module: its requests since
    t0 = time.monotonic()
    with devices.temporary_device_veths(f"{node.prefix}v", 4, node.netns) as vfs:
        by_name = {f"vf{i}": vf for i, vf in enumerate(vfs)}
        with dradriver.DraDriver(DRIVER, node.name, {n: (RESOURCE, vf) for n, vf in
                                                    by_name.items()},
                                 node.kube, node.node_path("/var/lib/kubelet")) as driver:
            assert driver.registered and driver.calls[:2] == ["GetInfo",
                                                              "NotifyRegistrationStatus"]
            node.apply([
                dradriver.device_class(DEVICE_CLASS, DRIVER, extended_resource=RESOURCE),
                dradriver.resource_claim("vf-direct", NS, DEVICE_CLASS),
                dradriver.claim_template("vf-template", NS, DEVICE_CLASS)])
            node.kube.reset_counts()
            node.apply([
                dra_pod("dra-a", "vf,vf", claims=[
                    {"name": "direct", "resourceClaimName": "vf-direct"},
                    {"name": "made", "resourceClaimTemplateName": "vf-template"}]),
                dra_pod("dra-ext", "vf", extended=1)])
            node.wait_ready("pod", "dra-a", NS, timeout=180)
            node.wait_ready("pod", "dra-ext", NS, timeout=180)
            TIMINGS["pods ready"] = time.monotonic() - t0

            pod_a, pod_ext = node.get("pods", "dra-a", NS), node.get("pods", "dra-ext", NS)
            assert pod_a is not None and pod_ext is not None
            # the template's claim is named in the pod's status, the direct one is not
            statuses = pod_a["status"].get("resourceClaimStatuses") or []
            assert [s["name"] for s in statuses] == ["made"], statuses
            made = statuses[0]["resourceClaimName"]
            extended = pod_ext["status"]["extendedResourceClaimStatus"]["resourceClaimName"]

            # three VFs gone from the host into the pods, each network its own device
            wait_for(lambda: sum(1 for vf in vfs if on_node(node, vf)) == 1, 30,
                     "three VFs in the pods")
            status = {e["interface"]: e["name"] for e in node.network_status(pod_a)}
            assert status.get("net1") == status.get("net2") == f"{NS}/vf", status
            ifnames = {check_network_data(node, pod_a, claim_of(node, c), by_name)
                       for c in ("vf-direct", made)}
            assert ifnames == {"net1", "net2"}
            assert check_network_data(node, pod_ext, claim_of(node, extended),
                                      by_name) == "net1"
            prepared = {claim_of(node, c)["metadata"]["uid"]
                        for c in ("vf-direct", made, extended)}
            assert set(driver.prepared) == prepared

            # accepted by the real server: nothing of netctl's refused, no Event
            assert node.kube.refused == []
            events = json.loads(node.kubectl("-n", NS, "get", "events", "-o", "json"))
            assert not [e for e in events["items"]
                        if e["reason"] == "NetworkDataNotWritten"], events["items"]

            node.kubectl("-n", NS, "delete", "pod", "dra-a", "dra-ext", "--wait=true",
                         timeout=120)
            wait_for(lambda: all(on_node(node, vf) for vf in vfs), 60,
                     "the VFs back on the host", interval=0.5)
            wait_for(lambda: str(VF) not in node.held(), 30, "the VF addresses released")
            wait_for(lambda: not driver.prepared, 60, "the claims unprepared", interval=0.5)
            wait_for(lambda: node.kube is not None and node.kube.get(
                "resourceclaims", NS, made) is None, 60, "the template's claim deleted")
            node.kubectl("-n", NS, "delete", "resourceclaim/vf-direct",
                         "resourceclaimtemplate/vf-template", "--wait=true")
            node.kubectl("delete", "deviceclass", DEVICE_CLASS, "--wait=true")
    TIMINGS["dra"] = time.monotonic() - t0
