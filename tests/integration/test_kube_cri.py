"""We test Kubernetes mode under a real runtime driven the way kubelet drives it: Debian's
containerd 1.6 (:class:`tests.cri.Containerd`: runc, its own dirs, a busybox "pause"
image imported with ``ctr``), its CRI plugin reading a netctl conflist at cniVersion
1.0.0 that declares ``portMappings`` and ``io.kubernetes.cri.pod-annotations``, and a
netctl daemon with ``--kubeconfig`` against the fake API server. The test calls
RunPodSandbox, PodSandboxStatus, StopPodSandbox and RemovePodSandbox over containerd's
socket for a pod that exists in the fake (same name, namespace and uid as the sandbox)
and names a second NAD in ``k8s.v1.cni.cncf.io/networks``. We check:

- what containerd sent (a tap in front of ``netctl-cni`` records it): CNI_ARGS with the
  pod's namespace, name, uid and sandbox id; the pod's annotations and its port in
  ``runtimeConfig`` on the ADD and on both DELs; the first DEL (StopPodSandbox) with
  ``prevResult``, the second (RemovePodSandbox) without;
- the sandbox has eth0 on the cluster network (the NAD ``clusterNetwork`` names, in
  ``kube-system``) and net1 on the pod's NAD, addresses from their ranges, as
  PodSandboxStatus reports and as ``ip -n`` reads them in the sandbox's netns;
- the hostPort reaches the sandbox through portmap in the cluster network's chain (the
  "pause" process is busybox's httpd);
- network-status on the pod in the fake names both networks with these addresses;
- the API calls netctl made, counted by the fake: no read at all (the annotations came
  from the runtime, the pod from the watch), one write (the network-status patch);
- StopPodSandbox and RemovePodSandbox both succeed and leave nothing: no port on either
  bridge, no live attachment or allocation (``netctl ipam pools``), no running
  operation, no netns; the port refused again.

And hot-plug under containerd: the pod's annotation changed through the API is applied
in the sandbox's netns (two networks added, then one removed by its name alone).

Subnets: 10.186.0.0/24 (cluster), 10.186.1.0/24 (blue), 10.186.2.0/24 (green).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import harness, journaldb
from netctl_kit.harness_podman import HostSnapshot
from netctl_kit.kubefake import FakeKube, nad, node, pod

from tests import cri
from tests.conftest import (
    SYSTEM_CNI,
    Daemon,
    bridge_ports,
    free_port,
    http_get,
    ipam_bridge,
    netns_addrs,
    netns_links,
    wait_for,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.servers("fake", "real"),
              pytest.mark.skipif(bool(cri.unavailable(sandboxes=True)),
                                 reason=cri.unavailable(sandboxes=True) or "-")]

NODE = "node-cri"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
CLUSTER = ipaddress.IPv4Network("10.186.0.0/24")
BLUE = ipaddress.IPv4Network("10.186.1.0/24")
PAUSE = "localhost/netctl-pause:latest"
TAP = Path(__file__).resolve().parent / "cni-tap"  # records what the runtime sends



@pytest.fixture
def host() -> Iterator[None]:
    """What portmap and libcni leave on the host (iptables chains, /var/lib/cni dirs),
    taken back after the test."""
    before = HostSnapshot.take()
    yield
    assert before.restore() == []


def start_daemon(daemon: Daemon, kube: FakeKube, tmp_path: Path) -> None:
    cluster = harness.bridge_conf("cluster", daemon.name("c0"), {
        "type": "netctl-ipam", "range": str(CLUSTER), "gateway": str(CLUSTER[1])})
    cluster["plugins"].append({"type": "portmap", "capabilities": {"portMappings": True}})
    kube.create("network-attachment-definitions", nad("cluster", "kube-system", cluster))
    kube.create("network-attachment-definitions", nad("blue", "default", ipam_bridge(
        "blue", daemon.name("c1"), {"type": "netctl-ipam", "range": str(BLUE)})))
    daemon.settings.update({"kubeconfig": str(kube.kubeconfig(tmp_path / "kubeconfig")),
                            "node-name": NODE, "api-timeout": 3, "pod-wait": 0.5})
    kube.create("nodes", node(NODE))
    daemon.start()
    kube.wait_watches(3)  # its Node, its pods and the NADs


def runtime_dirs(daemon: Daemon, tmp_path: Path) -> tuple[Path, Path, Path]:
    """containerd's CNI conf dir (the netctl conflist alone) and bin dir (the tap as
    ``netctl-cni``, then the installed plugin; ``loopback`` for the CRI plugin's own lo
    network); and the tap's log."""
    conf_dir, bin_dir, log = tmp_path / "net.d", tmp_path / "cri-bin", tmp_path / "tap.log"
    conf_dir.mkdir()
    bin_dir.mkdir()
    (conf_dir / "10-netctl.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "netctl", "plugins": [{
            "type": "netctl-cni", "socket": daemon.socket, "clusterNetwork": "cluster",
            "capabilities": {"portMappings": True, POD_ANNOTATIONS: True}}]}))
    (bin_dir / "netctl-cni").symlink_to(TAP)
    (bin_dir / "tap.json").write_text(json.dumps({"log": str(log), "exec": daemon.plugin}))
    (bin_dir / "loopback").symlink_to(Path(SYSTEM_CNI) / "loopback")
    return conf_dir, bin_dir, log


def tapped(log: Path) -> list[dict[str, Any]]:
    """What containerd sent netctl-cni, one entry per call (env, stdin)."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def cni_args(call: dict[str, Any]) -> dict[str, str]:
    """CNI_ARGS as a dict (containerd's order varies: a Go map)."""
    return dict(kv.split("=", 1) for kv in call["env"]["CNI_ARGS"].split(";"))


def in_range(addrs: list[str], net: ipaddress.IPv4Network) -> bool:
    return len(addrs) == 1 and ipaddress.ip_interface(addrs[0]).network == net


def test_containerd_runs_a_pod_sandbox_on_kubernetes_mode(
        daemon: Daemon, kube: FakeKube, host: None, tmp_path: Path) -> None:
    start_daemon(daemon, kube, tmp_path)
    conf_dir, bin_dir, log = runtime_dirs(daemon, tmp_path)
    annotations = {NETWORKS: "blue", "example.com/owner": "netctl-tests"}
    meta = kube.create("pods", pod("web", "default", node=NODE, annotations=annotations))[
        "metadata"]
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10,
             "the pod in the daemon's cache")
    port = free_port()
    sandbox = cri.SandboxConfig("web", "default", meta["uid"], annotations=annotations,
                                port_mappings=[cri.PortMapping(80, port, host_ip="127.0.0.1")])

    with cri.Containerd(conf_dir, bin_dir, PAUSE) as ctd:
        image = tmp_path / "pause.tar"
        cri.write_image_tar(image, PAUSE, ["httpd", "-f", "-p", "80", "-h", "/www"],
                            {"www/index.html": f"pause of {meta['uid']}\n"})
        ctd.import_image(image, PAUSE)
        kube.reset_counts()

        try:
            sandbox_id = ctd.cri.run_pod_sandbox(sandbox)
        except Exception as exc:
            raise AssertionError(f"RunPodSandbox: {exc}\n{ctd.log_tail(30)}\n"
                                 f"{daemon.log()[-3000:]}") from exc
        status = ctd.cri.pod_sandbox_status(sandbox_id)
        assert status.ready and (status.name, status.namespace, status.uid) == (
            "web", "default", meta["uid"])
        ns = os.path.basename(status.netns)
        assert status.netns == f"{harness.NETNS_DIR}/{ns}" and os.path.exists(status.netns)

        # the sandbox's interfaces, as the runtime reports them and as the kernel has them
        assert sorted(netns_links(ns)) == ["eth0", "lo", "net1"]
        addrs = netns_addrs(ns)
        assert in_range(addrs["eth0"], CLUSTER) and in_range(addrs["net1"], BLUE), addrs
        pod_ips = {iface: a[0].split("/")[0] for iface, a in addrs.items() if a}
        assert status.ips == [pod_ips["eth0"]]  # the CRI reads eth0's result only
        assert len(bridge_ports(daemon.name("c0"))) == 1
        assert len(bridge_ports(daemon.name("c1"))) == 1

        # the hostPort reaches the pause process through portmap
        answer = wait_for(lambda: http_get(port), 30, f"the sandbox's httpd on :{port}")
        assert answer is not None and f"pause of {meta['uid']}".encode() in answer

        # network-status, written on the pod in the API
        written = kube.get("pods", "default", "web")
        assert written is not None
        entries = {e["interface"]: e for e in json.loads(written["metadata"]["annotations"]
                                                         [STATUS])}
        assert set(entries) == {"eth0", "net1"}
        assert entries["eth0"]["name"] == "kube-system/cluster"
        assert entries["eth0"].get("default") is True
        assert entries["net1"]["name"] == "default/blue" and "default" not in entries["net1"]
        for iface, entry in entries.items():
            assert entry["ips"] == [pod_ips[iface]] and entry["mac"]

        # what containerd sent: kubelet's CNI_ARGS, the annotations and the port
        (add,) = tapped(log)
        assert add["env"]["CNI_COMMAND"] == "ADD" and add["env"]["CNI_IFNAME"] == "eth0"
        assert add["env"]["CNI_CONTAINERID"] == sandbox_id
        assert add["env"]["CNI_NETNS"] == status.netns
        assert cni_args(add) == {
            "IgnoreUnknown": "1", "K8S_POD_NAMESPACE": "default", "K8S_POD_NAME": "web",
            "K8S_POD_INFRA_CONTAINER_ID": sandbox_id, "K8S_POD_UID": meta["uid"]}
        runtime_config = add["stdin"]["runtimeConfig"]
        assert runtime_config[POD_ANNOTATIONS] == annotations
        # go-cni's PortMapping has no JSON tags: Go field names, which portmap (Go's
        # case-insensitive decoding) takes as hostPort…; netctl passes them on as they are
        assert runtime_config["portMappings"] == [{"HostPort": port, "ContainerPort": 80,
                                                   "Protocol": "tcp", "HostIP": "127.0.0.1"}]

        # StopPodSandbox: DEL with prevResult; the netns, the ports, the address go
        ctd.cri.stop_pod_sandbox(sandbox_id)
        assert not ctd.cri.pod_sandbox_status(sandbox_id).ready
        assert not os.path.exists(status.netns)
        assert bridge_ports(daemon.name("c0")) == [] and bridge_ports(daemon.name("c1")) == []
        assert daemon.live_attachments_of([sandbox_id]) == 0
        assert harness.live_allocations(daemon.state_dir) == []
        assert http_get(port) is None

        # RemovePodSandbox: DEL again, without prevResult; nothing to do, still success
        ctd.cri.remove_pod_sandbox(sandbox_id)
        assert ctd.cri.list_pod_sandboxes() == []

    add, stop_del, remove_del = tapped(log)
    for call in (stop_del, remove_del):
        assert call["env"]["CNI_COMMAND"] == "DEL"
        assert call["env"]["CNI_CONTAINERID"] == sandbox_id
        assert cni_args(call) == cni_args(add)
        assert call["stdin"]["runtimeConfig"][POD_ANNOTATIONS] == annotations
    assert "prevResult" in stop_del["stdin"] and "prevResult" not in remove_del["stdin"]
    # the result kept by containerd (libcni's cache) is the cluster network's, as Multus
    # returns it: net1 is in network-status, not in the runtime's result
    prev = stop_del["stdin"]["prevResult"]
    assert {i["name"] for i in prev["interfaces"] if i.get("sandbox")} == {"eth0"}
    assert [ip["address"] for ip in prev["ips"]] == addrs["eth0"]
    assert [(o["verb"], o["origin"], o["state"], o["pod_uid"]) for o in daemon.read(
        journaldb.operation_rows, container=sandbox_id)] == [
        (verb, "runtime", "done", meta["uid"]) for verb in ("ADD", "DEL", "DEL")]

    # the API calls of the whole pod's life: no read, one write
    calls = {key: n for key, n in kube.request_counts.items() if key[0] != "watch"}
    assert calls == {("patch", "pods"): 1}, calls
    assert harness.describe_leftovers(harness.leftovers(
        daemon, bridges=[daemon.name("c0"), daemon.name("c1")])) == []


@pytest.mark.servers("fake")
def test_containerd_sandbox_follows_its_pods_networks_annotation(
        daemon: Daemon, kube: FakeKube, host: None, tmp_path: Path) -> None:
    """Hot-plug under containerd: the pod's annotation changed through the API — two
    networks added (one on a named interface), then one removed by its name alone — is
    applied in the sandbox's netns (found from the journal, not asked of containerd),
    journaled with origin ``hotplug``, written to network-status, with Normal Events;
    Stop/RemovePodSandbox then remove the plugged networks too."""
    start_daemon(daemon, kube, tmp_path)
    green = ipaddress.IPv4Network("10.186.2.0/24")
    kube.create("network-attachment-definitions", nad("green", "default", ipam_bridge(
        "green", daemon.name("c2"), {"type": "netctl-ipam", "range": str(green)})))
    conf_dir, bin_dir, _ = runtime_dirs(daemon, tmp_path)
    annotations = {NETWORKS: "blue"}
    meta = kube.create("pods", pod("app", "default", node=NODE, annotations=annotations))[
        "metadata"]
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1
             and daemon.status()["kubernetes"]["nads"]["objects"] == 3, 10,
             "the pod and the NADs in the daemon's caches")
    sandbox = cri.SandboxConfig("app", "default", meta["uid"], annotations=annotations)

    def hotplugged() -> list[tuple[str, str]]:
        return [(o["verb"], o["state"]) for o in daemon.read(
            journaldb.operation_rows, container=sandbox_id, origin="hotplug")
            if o["verb"] != "ANNOTATE"]

    def status_names() -> dict[str, str]:
        got = kube.get("pods", "default", "app") or {}
        value = got["metadata"].get("annotations", {}).get(STATUS, "[]")
        return {e["interface"]: e["name"] for e in json.loads(value)}

    with cri.Containerd(conf_dir, bin_dir, PAUSE) as ctd:
        image = tmp_path / "pause.tar"
        cri.write_image_tar(image, PAUSE, ["httpd", "-f", "-p", "80", "-h", "/www"],
                            {"www/index.html": "pause\n"})
        ctd.import_image(image, PAUSE)
        sandbox_id = ctd.cri.run_pod_sandbox(sandbox)
        ns = os.path.basename(ctd.cri.pod_sandbox_status(sandbox_id).netns)
        assert sorted(netns_links(ns)) == ["eth0", "lo", "net1"]

        kube.patch("pods", "default", "app", {"metadata": {"annotations": {
            NETWORKS: "blue,green@data0,green"}}})
        wait_for(lambda: hotplugged() == [("ADD", "done")] * 2, 30, "two networks plugged")
        assert sorted(netns_links(ns)) == ["data0", "eth0", "lo", "net1", "net2"]
        addrs = netns_addrs(ns)
        assert in_range(addrs["data0"], green) and in_range(addrs["net2"], green), addrs
        assert len(bridge_ports(daemon.name("c2"))) == 2
        wait_for(lambda: status_names() == {"eth0": "kube-system/cluster", "net1":
                                            "default/blue", "data0": "default/green",
                                            "net2": "default/green"}, 10,
                 "network-status rewritten")

        # blue removed by its name alone
        kube.patch("pods", "default", "app", {"metadata": {"annotations": {
            NETWORKS: "green@data0,green"}}})
        wait_for(lambda: hotplugged()[-1:] == [("DEL", "done")], 30, "blue unplugged")
        assert sorted(netns_links(ns)) == ["data0", "eth0", "lo", "net2"]
        assert bridge_ports(daemon.name("c1")) == []
        wait_for(lambda: set(status_names()) == {"eth0", "data0", "net2"}, 10,
                 "network-status rewritten")
        wait_for(lambda: sorted(e["reason"] for e in kube.list("events", "default")
                                if e["involvedObject"]["uid"] == meta["uid"]
                                and e["type"] == "Normal") == [
            "NetworkAttached", "NetworkAttached", "NetworkDetached"], 10, "the Events")

        ctd.cri.stop_pod_sandbox(sandbox_id)
        ctd.cri.remove_pod_sandbox(sandbox_id)
    assert daemon.live_attachments_of([sandbox_id]) == 0
    assert harness.live_allocations(daemon.state_dir) == []
    assert harness.describe_leftovers(harness.leftovers(
        daemon, bridges=[daemon.name(s) for s in ("c0", "c1", "c2")])) == []
