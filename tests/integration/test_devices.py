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
Event; a kubelet that does not answer → code 11 naming the socket, and DEL still works;
DRA: the claim's status gets ``networkData`` and ``Ready`` for the attached device, the
kubelet never asked. Subnets: 10.186.0.0/24 (cluster), 10.186.1.0/24 (the VFs)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netctl.devices import devinfo
from netctl.kit.devices import PodResourcesServer, temporary_device_veths
from netctl.kit.kubefake import (
    FakeKube,
    claim_allocation,
    nad,
    node,
    pod,
    resource_claim,
    resource_slice,
)
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
          **settings: Any) -> Path:
    record = tmp_path / "record"
    kube.create("network-attachment-definitions", nad(
        "cluster", "kube-system", ipam_bridge("cluster", daemon.name("k0"), {
            "type": "netctl-ipam", "range": "10.186.0.0/24"})))
    kube.create("network-attachment-definitions", nad(
        "vf", "default", vf_conf(daemon, "vf", record), annotations={RESOURCE_NAME: resource}))
    kube.create("nodes", node(NODE))
    daemon.settings.update({"kubeconfig": str(kube.kubeconfig(tmp_path / "kubeconfig")),
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


def test_dra_the_claims_device_is_attached_and_its_status_gets_network_data(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path,
        vfs: list[str], resource: str) -> None:
    driver = "sriov.example.com"
    kube.create("resourceslices", resource_slice(f"{NODE}-sriov", NODE, driver, {
        f"vf{i}": {"k8s.cni.cncf.io/resourceName": resource,
                   "k8s.cni.cncf.io/deviceID": vf} for i, vf in enumerate(vfs[:2])}))
    kube.create("resourceslices", resource_slice("elsewhere", "node-x", driver, {
        "vf0": {"k8s.cni.cncf.io/resourceName": resource,
                "k8s.cni.cncf.io/deviceID": "not-this-node"}}))
    kube.create("resourceclaims", resource_claim("p1-net", "default", "sriov"))
    kube.patch("resourceclaims", "default", "p1-net", {"status": {
        **claim_allocation(driver, NODE, ["vf1"]),
        "devices": [{"driver": "gpu.example.com", "pool": NODE, "device": "gpu0",
                     "conditions": [{"type": "Ready", "status": "True", "reason": "Up",
                                     "message": "", "lastTransitionTime":
                                     "2026-11-29T00:00:00Z"}]}]}}, subresource="status")
    # no PodResources socket at all: a pod whose devices come through DRA never needs one
    # the pod with its claim (as the scheduler and kubelet leave it) before the daemon's
    # first list, so that list has it whole
    uid = add_pod(kube, "p1", "vf")
    kube.patch("pods", "default", "p1", {"status": {"resourceClaimStatuses": [
        {"name": "net", "resourceClaimName": "p1-net"}]}}, subresource="status")
    start(daemon, kube, tmp_path, resource, tmp_path / "absent.sock")
    wait_for(lambda: (daemon.status()["kubernetes"]["pods"]["objects"] == 1), 10, "the pod")
    ns = netns()

    res = cni(daemon, "ADD", "c1", ns, "p1", uid)
    assert res.rc == 0, res.describe()
    assert not host_has(vfs[1]) and host_has(vfs[0])  # vf1 is the claim's
    assert kube.watches("resourceslices") == 1
    claim = kube.get("resourceclaims", "default", "p1-net")
    by_device = {d["device"]: d for d in claim["status"]["devices"]}
    assert by_device["gpu0"]["conditions"][0]["reason"] == "Up"  # the driver's own kept
    data = by_device["vf1"]["networkData"]
    assert data["interfaceName"] == "net1"
    assert data["ips"] == netns_addrs(ns)["net1"]
    link = json.loads(subprocess.run(["ip", "-n", ns, "-j", "link", "show", "net1"],
                                     capture_output=True, check=True).stdout)
    assert data["hardwareAddress"] == link[0]["address"]
    assert [(c["type"], c["status"]) for c in by_device["vf1"]["conditions"]] == \
        [("Ready", "True")]
    assert daemon.journal("--device", vfs[1])["attachments"][0]["pod"] == "default/p1"

    assert cni(daemon, "DEL", "c1", ns, "p1", uid).rc == 0
    assert host_has(vfs[1])
