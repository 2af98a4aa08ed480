"""Device networks end to end on real parts: a real daemon in Kubernetes mode (the fake API
server; DRA needs ``resource.k8s.io/v1``, which the real v1.24 server of ``../shared/kube``
predates), host veths standing in for SR-IOV VFs, ``tests/plugins/devmove`` moving the
device named by ``deviceID`` into the pod as SR-IOV CNI does, and the kubelet's
PodResources API served by the kit's stand-in on a real gRPC socket (the real kubelet's is
driven in ``test_realnode_devices.py``).

Asserted: two networks of one resource get two distinct devices, each delegate saw its
``deviceID`` (conf and runtimeConfig) and ``CNIDeviceInfoFile``; the devices are in the
pod's netns with their addresses; network-status carries ``device-info``; ``netctl journal
--device`` answers who held a device, and when; DEL moves the devices back and removes the
CNI's device-info copies; no device → code 7 naming the resource and the pod, with an
Event; a kubelet that does not answer → code 11 naming the socket, and DEL still works.

DRA, on states a real v1.36 cluster produces (the fake refuses the others: a pod status
naming a claim its spec names directly, a device status for a device not allocated, a
``status.devices`` write without the driver permission): claims named directly, from a
template and for an extended resource each give their device; each claim's status gets
``networkData`` and ``Ready`` (its transition time kept on a later write); a write refused
is a Warning Event on the pod; an unreadable claim is answered from the kubelet's
PodResources (its DRA devices). Subnets: 10.186.0.0/24 (cluster), 10.186.1.0/24 (the
VFs)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from netctl_kit.devices import PodResourcesServer, Prepared, temporary_device_veths
from netctl_kit.kubefake import (
    FakeKube,
    claim_allocation,
    nad,
    node,
    pod,
    resource_claim,
    resource_slice,
)
from netctl_kit.kubefake.objects import claim_ref, extended_claim_status, template_claim_status

from netctl.devices import devinfo
from tests import access
from tests.conftest import Daemon, ipam_bridge, netns_addrs, netns_links, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.servers("fake")]

NODE = "node-d"
STATUS = "k8s.v1.cni.cncf.io/network-status"
RESOURCE_NAME = "k8s.v1.cni.cncf.io/resourceName"


@pytest.fixture
def vfs(daemon: Daemon) -> Iterator[list[str]]:
    """Four host veths standing in for VFs (their peers stay on the host)."""
    with temporary_device_veths(daemon.name("v"), 4) as names:
        yield names


@pytest.fixture
def resource(daemon: Daemon) -> Iterator[str]:
    """A resource name of this test's own, and its device-info files removed after."""
    name = f"netctl.test/{daemon.prefix}"
    base = Path(devinfo.BASE)
    made = [d for d in (base.parent, base, base / "dp", base / "cni") if not d.exists()]
    try:
        yield name
    finally:
        for sub in ("dp", "cni"):
            d = base / sub
            for f in d.glob(f"*{daemon.prefix}*") if d.is_dir() else ():
                f.unlink()
        for d in reversed(made):  # the directories this test made, when they are empty
            with contextlib.suppress(OSError):
                d.rmdir()


def write_dp_info(resource: str, device: str) -> dict[str, Any]:
    info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": f"0000:ff:00.{device[-1]}"}}
    path = Path(devinfo.dp_path(resource, device))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info))
    return info


def vf_conf(daemon: Daemon, name: str, record: Path) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "devmove", "record": str(record),
        "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True},
        "ipam": {"type": "netctl-ipam", "range": "10.186.1.0/24"}}]}


def start(daemon: Daemon, kube: FakeKube, tmp_path: Path, resource: str, socket: Path,
          token: str | None = None, **settings: Any) -> Path:
    record = tmp_path / "record"
    kube.create("network-attachment-definitions", nad(
        "cluster", "kube-system", ipam_bridge("cluster", daemon.name("k0"), {
            "type": "netctl-ipam", "range": "10.186.0.0/24"})))
    kube.create("network-attachment-definitions", nad(
        "vf", "default", vf_conf(daemon, "vf", record), annotations={RESOURCE_NAME: resource}))
    kube.create("nodes", node(NODE))
    config = kube.kubeconfig(tmp_path / "kubeconfig", token=token)
    daemon.settings.update({"kubeconfig": str(config),
                            "node-name": NODE, "api-timeout": 3, "pod-wait": 0.5,
                            "pod-resources-socket": str(socket), **settings})
    daemon.start()
    kube.wait_watches(3)
    return record


def add_pod(kube: FakeKube, name: str, networks: str) -> str:
    return str(kube.create("pods", pod(name, node=NODE, annotations={
        "k8s.v1.cni.cncf.io/networks": networks}))["metadata"]["uid"])


def cni(daemon: Daemon, verb: str, container: str, ns: str, name: str, uid: str) -> Any:
    return daemon.cni(verb, container, ns, daemon.conf("cluster", "1.0.0"),
                      pod=f"default/{name}", args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))


def host_has(link: str) -> bool:
    return Path(f"/sys/class/net/{link}").exists()


def test_two_networks_of_one_resource_get_two_devices_and_give_them_back(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path,
        vfs: list[str], resource: str) -> None:
    socket = tmp_path / "pod-resources.sock"
    with PodResourcesServer(socket) as kubelet:
        record = start(daemon, kube, tmp_path, resource, socket)
        infos = {vf: write_dp_info(resource, vf) for vf in vfs[:2]}
        uid = add_pod(kube, "p1", "vf,vf")
        kubelet.pods[("default", "p1")] = {resource: vfs[:2], "gpu.example.com/x": ["g0"]}
        wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
        ns = netns()
        plain = netns()
        res = cni(daemon, "ADD", "c1", ns, "p1", uid)
        assert res.rc == 0, res.describe()
        assert kubelet.calls == 1

        # each network its own device, moved into the pod, with its address
        assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net2"}
        assert not host_has(vfs[0]) and not host_has(vfs[1]) and host_has(vfs[2])
        addrs = netns_addrs(ns)
        assert addrs["net1"][0].startswith("10.186.1.") and addrs["net2"][0].startswith(
            "10.186.1.")
        seen = {ifname: json.loads((record / f"c1-{ifname}.json").read_text())
                for ifname in ("net1", "net2")}
        assert {s["deviceID"] for s in seen.values()} == set(vfs[:2])
        for ifname, s in seen.items():
            assert s["pciBusID"] == s["deviceID"] == s["runtimeConfig"]["deviceID"]
            assert s["runtimeConfig"]["CNIDeviceInfoFile"] == devinfo.cni_path(
                "vf", "c1", ifname)

        # network-status: each device network's device-info, the device plugin's
        status = {e["interface"]: e for e in json.loads(
            kube.get("pods", "default", "p1")["metadata"]["annotations"][STATUS])}
        for ifname, s in seen.items():
            assert status[ifname]["device-info"] == infos[s["deviceID"]]
            assert status[ifname]["ips"] == [a.split("/")[0] for a in addrs[ifname]]
        assert "device-info" not in status["eth0"]

        # a pod without device networks never asks the kubelet
        uid2 = add_pod(kube, "p2", "")
        wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 2, 10, "p2")
        assert cni(daemon, "ADD", "c2", plain, "p2", uid2).rc == 0
        assert kubelet.calls == 1

        # the journal: who held the device, and when
        held = daemon.journal("--device", seen["net1"]["deviceID"])["attachments"]
        assert [(a["pod"], a["ifname"], a["device"], a["resource"], a["until"])
                for a in held] == [("default/p1", "net1", seen["net1"]["deviceID"], resource,
                                    None)]
        during = time.time()

        assert cni(daemon, "DEL", "c1", ns, "p1", uid).rc == 0
        assert host_has(vfs[0]) and host_has(vfs[1])
        assert netns_links(ns) == ["lo"]
        assert not any(Path(devinfo.cni_path("vf", "c1", i)).exists() for i in seen)
        after = daemon.journal("--device", seen["net1"]["deviceID"])["attachments"]
        assert after[0]["until"] is not None and after[0]["state"] == "removed"
        at = daemon.journal("--device", seen["net2"]["deviceID"], "--at", f"{during:.3f}")
        assert [a["ifname"] for a in at["attachments"]] == ["net2"]
        assert cni(daemon, "DEL", "c2", plain, "p2", uid2).rc == 0


def test_no_device_is_code_7_and_a_kubelet_that_does_not_answer_is_code_11(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path,
        vfs: list[str], resource: str) -> None:
    socket = tmp_path / "pod-resources.sock"
    with PodResourcesServer(socket) as kubelet:
        start(daemon, kube, tmp_path, resource, socket)
        uid = add_pod(kube, "p1", "vf")
        wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
        ns = netns()

        res = cni(daemon, "ADD", "c1", ns, "p1", uid)
        assert res.rc != 0 and res.out and res.out["code"] == 7, res.describe()
        assert resource in res.out["msg"] and "default/p1" in res.out["msg"]
        assert "default/vf" in res.out["msg"]
        wait_for(lambda: [e["reason"] for e in kube.list("events", "default")
                          if e["involvedObject"]["name"] == "p1"] == ["NoDeviceAllocated"],
                 10, "the pod's Event")
        assert netns_links(ns) == ["lo"] and daemon.live_counts() == (0, 0)

        kubelet.unavailable = True
        res = cni(daemon, "ADD", "c1", ns, "p1", uid)
        assert res.rc != 0 and res.out and res.out["code"] == 11, res.describe()
        assert str(socket) in res.out["msg"]

        kubelet.unavailable = False
        kubelet.pods[("default", "p1")] = {resource: [vfs[3]]}
        assert cni(daemon, "ADD", "c1", ns, "p1", uid).rc == 0
        assert "net1" in netns_links(ns) and not host_has(vfs[3])

        kubelet.unavailable = True  # a DEL never asks: the journal has the device
        calls = kubelet.calls
        assert cni(daemon, "DEL", "c1", ns, "p1", uid).rc == 0
        assert host_has(vfs[3]) and kubelet.calls == calls
    # no socket at all: code 11 naming it
    res = cni(daemon, "ADD", "c1", ns, "p1", uid)
    assert res.rc != 0 and res.out and res.out["code"] == 11, res.describe()
    assert "no such socket" in res.out["msg"]



# -- DRA: the states a real v1.36 cluster produces ---------------------------------------------

DRIVER, GPU = "sriov.example.com", "gpu.example.com"
SA_TOKEN = "netctl-daemonset-token"
SA_USER = "system:serviceaccount:kube-system:netctl"
EXTENDED_REQUEST = "container-0-request-0"  # the scheduler's request name in that claim


def dra_cluster(kube: FakeKube, vfs: list[str], resource: str, *, driver_grant: bool) -> None:
    """This node's slices (three VFs with both network attributes, a fourth with a deviceID
    alone, as a DeviceClass with an extendedResourceName serves it; a GPU of another
    driver), and the daemon's identity: its DaemonSet's ServiceAccount token, bound to a
    pod of this node, granted the rows of access.RULES (the driver row only when
    ``driver_grant``)."""
    kube.create("resourceslices", resource_slice(f"{NODE}-sriov", NODE, DRIVER, {
        **{f"vf{i}": {"k8s.cni.cncf.io/resourceName": resource,
                      "k8s.cni.cncf.io/deviceID": vf} for i, vf in enumerate(vfs[:3])},
        "vf3": {"k8s.cni.cncf.io/deviceID": vfs[3]}}))
    kube.create("resourceslices", resource_slice(f"{NODE}-gpu", NODE, GPU, {"gpu0": {}}))
    kube.create("resourceslices", resource_slice("elsewhere", "node-x", DRIVER, {
        "vf0": {"k8s.cni.cncf.io/resourceName": resource,
                "k8s.cni.cncf.io/deviceID": "not-this-node"}}))
    kube.add_token(SA_TOKEN, SA_USER, node=NODE)
    for rule in access.RULES:
        if rule.resource != "resourceclaims/driver" or driver_grant:
            for verb in rule.verbs:
                kube.grant(SA_USER, verb, rule.resource, api_group=rule.api_group)


def allocated(kube: FakeKube, name: str, devices: list[str], request: str = "net",
              gpu: bool = False) -> None:
    """A claim allocated as the scheduler allocates one on this node (``gpu``: with the
    GPU too, and its driver's own status entry for it)."""
    kube.create("resourceclaims", resource_claim(name, "default", "sriov", len(devices),
                                                 request=request))
    status = claim_allocation(DRIVER, NODE, devices, request, node=NODE)
    if gpu:
        status["allocation"]["devices"]["results"].append(
            {"request": request, "driver": GPU, "pool": NODE, "device": "gpu0"})
        status["devices"] = [{"driver": GPU, "pool": NODE, "device": "gpu0", "conditions": [
            {"type": "Ready", "status": "True", "reason": "Up", "message": "",
             "lastTransitionTime": "2026-11-29T00:00:00Z"}]}]
    kube.patch("resourceclaims", "default", name, {"status": status}, subresource="status")


def dra_pod(kube: FakeKube, name: str, networks: str, *, claims: list[dict[str, str]] = (),
            status: dict[str, Any] | None = None, requests: dict[str, str] | None = None
            ) -> str:
    """A pod with its claims, its status as the controllers leave it (the template's claim
    named, the extended-resource claim named)."""
    made = kube.create("pods", pod(name, node=NODE, resource_claims=list(claims),
                                   requests=requests,
                                   annotations={"k8s.v1.cni.cncf.io/networks": networks}))
    if status:
        kube.patch("pods", "default", name, {"status": status}, subresource="status")
    return str(made["metadata"]["uid"])


def network_entries(kube: FakeKube, claim: str) -> dict[str, dict[str, Any]]:
    found = kube.get("resourceclaims", "default", claim)
    assert found is not None
    return {d["device"]: d for d in found["status"].get("devices", [])}


def pod_events(kube: FakeKube, name: str) -> list[dict[str, Any]]:
    return [e for e in kube.list("events", "default") if e["involvedObject"]["name"] == name]


def test_dra_direct_template_and_extended_claims_get_their_devices_and_network_data(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path,
        vfs: list[str], resource: str) -> None:
    """A pod naming one claim directly and one through a template (findings 2 and 4: the
    direct one is in its spec only, the template's in its status) gets a device of each; a
    pod whose claim the scheduler made for its extended resource gets that claim's device
    (a device without a resourceName attribute: its request serves the resource); each
    claim's status gets networkData and Ready, written with the ServiceAccount's rows of
    access.RULES — the driver row among them (finding 1) — and the GPU driver's entry kept;
    an ADD again keeps the Ready condition's transition time (finding 3). No PodResources
    socket at all: DRA devices never need it."""
    dra_cluster(kube, vfs, resource, driver_grant=True)
    allocated(kube, "shared-vf", ["vf1"], gpu=True)
    allocated(kube, "p1-made-x7k2p", ["vf0"])
    allocated(kube, "p2-extended-q8n4t", ["vf3"], request=EXTENDED_REQUEST)
    # the pods as the controllers leave them, before the daemon's first list
    uid1 = dra_pod(kube, "p1", "vf,vf", claims=[
        claim_ref("shared", claim="shared-vf"), claim_ref("made", template="vf-template")],
        status=template_claim_status("made", "p1-made-x7k2p"))
    uid2 = dra_pod(kube, "p2", "vf", requests={resource: "1"}, status=extended_claim_status(
        "p2-extended-q8n4t", resource, EXTENDED_REQUEST))
    start(daemon, kube, tmp_path, resource, tmp_path / "absent.sock", token=SA_TOKEN)
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 2, 10, "the pods")
    ns1, ns2 = netns(), netns()

    res = cni(daemon, "ADD", "c1", ns1, "p1", uid1)
    assert res.rc == 0, res.describe()
    assert not host_has(vfs[0]) and not host_has(vfs[1]) and host_has(vfs[2])
    assert kube.watches("resourceslices") == 1
    shared, made = network_entries(kube, "shared-vf"), network_entries(kube, "p1-made-x7k2p")
    assert shared["gpu0"]["conditions"][0]["reason"] == "Up"  # the driver's own kept
    addrs = netns_addrs(ns1)
    ifnames = {shared["vf1"]["networkData"]["interfaceName"],
               made["vf0"]["networkData"]["interfaceName"]}
    assert ifnames == {"net1", "net2"}
    for entry in (shared["vf1"], made["vf0"]):
        data = entry["networkData"]
        assert data["ips"] == addrs[data["interfaceName"]]
        link = json.loads(subprocess.run(
            ["ip", "-n", ns1, "-j", "link", "show", data["interfaceName"]],
            capture_output=True, check=True).stdout)
        assert data["hardwareAddress"] == link[0]["address"]
        assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == \
            [("Ready", "True", "NetworkReady")]
    for vf in vfs[:2]:
        assert daemon.journal("--device", vf)["attachments"][0]["pod"] == "default/p1"

    res = cni(daemon, "ADD", "c2", ns2, "p2", uid2)
    assert res.rc == 0, res.describe()
    assert not host_has(vfs[3]) and "net1" in netns_links(ns2)
    extended = network_entries(kube, "p2-extended-q8n4t")
    assert extended["vf3"]["networkData"]["ips"] == netns_addrs(ns2)["net1"]

    # the Ready condition moved to True once; another ADD keeps its transition time
    since = "2026-12-01T00:00:00Z"  # as if the first write had been then
    kept = network_entries(kube, "p1-made-x7k2p")["vf0"]
    kept["conditions"][0]["lastTransitionTime"] = since
    kube.patch("resourceclaims", "default", "p1-made-x7k2p", {"status": {"devices": [kept]}},
               subresource="status")
    assert cni(daemon, "DEL", "c1", ns1, "p1", uid1).rc == 0
    assert host_has(vfs[0]) and host_has(vfs[1])
    res = cni(daemon, "ADD", "c1", ns1, "p1", uid1)
    assert res.rc == 0, res.describe()
    again = network_entries(kube, "p1-made-x7k2p")["vf0"]
    assert again["conditions"][0]["lastTransitionTime"] == since
    assert again["networkData"]["ips"] == netns_addrs(ns1)[again["networkData"]["interfaceName"]]
    assert not pod_events(kube, "p1")

    for container, ns, name, uid in (("c1", ns1, "p1", uid1), ("c2", ns2, "p2", uid2)):
        assert cni(daemon, "DEL", container, ns, name, uid).rc == 0
    assert all(host_has(vf) for vf in vfs)


def test_dra_a_refused_network_data_write_is_an_event_and_the_kubelet_stands_in(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path,
        vfs: list[str], resource: str) -> None:
    """Without the driver row (finding 1: v1.36 refuses status.devices without it) the ADD
    stands, the claim keeps no networkData, and the pod gets a Warning Event
    NetworkDataNotWritten naming the missing grant. A claim the daemon may not read (its GET
    refused) does not fail the ADD while the kubelet's PodResources answer lists the devices
    it prepared for the pod (finding 2); neither answering is code 11 naming both."""
    dra_cluster(kube, vfs, resource, driver_grant=False)
    allocated(kube, "shared-vf", ["vf1"])
    allocated(kube, "p3-made-m2k9d", ["vf2"])
    uid1 = dra_pod(kube, "p1", "vf", claims=[claim_ref("shared", claim="shared-vf")])
    uid3 = dra_pod(kube, "p3", "vf", claims=[claim_ref("made", template="vf-template")],
                   status=template_claim_status("made", "p3-made-m2k9d"))
    socket = tmp_path / "pod-resources.sock"
    with PodResourcesServer(socket) as kubelet:
        start(daemon, kube, tmp_path, resource, socket, token=SA_TOKEN)
        wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 2, 10, "the pods")
        ns1, ns3 = netns(), netns()

        res = cni(daemon, "ADD", "c1", ns1, "p1", uid1)
        assert res.rc == 0, res.describe()
        assert not host_has(vfs[1]) and "net1" in netns_links(ns1)
        assert "networkData" not in str(kube.get("resourceclaims", "default", "shared-vf"))
        wait_for(lambda: [e["reason"] for e in pod_events(kube, "p1")] ==
                 ["NetworkDataNotWritten"], 10, "the pod's Event")
        (event,) = pod_events(kube, "p1")
        assert event["type"] == "Warning"
        assert "ResourceClaim default/shared-vf" in event["message"]
        assert "associated-node:patch on resourceclaims/driver" in event["message"]
        assert kubelet.calls == 0  # the claim was read: the kubelet not asked

        kube.forbid("get", "resourceclaims")
        kubelet.claims[("default", "p3")] = [Prepared("p3-made-m2k9d", DRIVER, NODE, "vf2"),
                                             Prepared("p3-made-m2k9d", GPU, NODE, "gpu0")]
        res = cni(daemon, "ADD", "c3", ns3, "p3", uid3)
        assert res.rc == 0, res.describe()
        assert not host_has(vfs[2]) and kubelet.calls == 1
        assert daemon.journal("--device", vfs[2])["attachments"][0]["pod"] == "default/p3"
        assert cni(daemon, "DEL", "c3", ns3, "p3", uid3).rc == 0 and host_has(vfs[2])

        kubelet.unavailable = True
        res = cni(daemon, "ADD", "c3", ns3, "p3", uid3)
        assert res.rc != 0 and res.out and res.out["code"] == 11, res.describe()
        assert "ResourceClaim default/p3-made-m2k9d" in res.out["msg"]
        assert str(socket) in res.out["msg"]
        assert cni(daemon, "DEL", "c1", ns1, "p1", uid1).rc == 0 and host_has(vfs[1])
