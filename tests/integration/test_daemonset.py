"""The DaemonSet's containers, run for real: the image ``make image`` builds, run by podman
as ``deploy/kubernetes/daemonset.yaml`` says (:class:`tests.kubelet.Kubelet`), on a fake
node root (:class:`tests.fakehost.FakeHost`), and Debian's containerd driven over CRI as
kubelet drives it, its CNI conf and bin dirs the fake node's. We check:

- the init container ``install-cni`` installs the static plugin into the node's
  ``/opt/cni/bin`` and writes ``00-netctl.conflist`` in front of the node's primary CNI
  config (a bridge with host-local, at its host path);
- the daemon starts from the ConfigMap's ``daemon.yaml`` (with the fake API server's
  kubeconfig for ``--in-cluster``), the startup and readiness probes pass, metrics are
  served on the documented port;
- a pod whose ``k8s.v1.cni.cncf.io/networks`` names two NADs gets eth0 from the primary
  CNI (host-local's lease in the node's ``/var/lib/cni``, not the container's), net1 from
  a netctl-ipam bridge, and a third delegate that reads a file existing only in the node's
  root (proof that delegates run in the host's context); network-status is written;
- the liveness probe restarts a daemon that stops answering (SIGSTOP): failures counted
  to ``failureThreshold``, a restart, then the restarted daemon answers and is ready;
- the pod is stopped and removed through CRI after the restart: every address is
  released (the lease, netctl's allocation), the delegate's record is gone; the restarted
  daemon serves a new pod;
- rollback: the DaemonSet is deleted, that pod is removed while no daemon runs (the plugin
  records its DELs), and ``deploy/kubernetes/uninstall.yaml``'s init containers run: the
  conflist and the plugin go, the recorded DELs are carried out (the lease, the bridge
  port, netctl's address released);
- nothing is left: containers, sandboxes, netns, the node's links, mounts.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from netctl_kit import harness, realnode
from netctl_kit.harness_podman import HostSnapshot
from netctl_kit.kubefake import FakeKube, nad, node, pod

from tests import cri
from tests.conftest import ROOT, bridge_ports, netns_addrs, netns_links
from tests.fakehost import MARKER, PRIMARY, FakeHost, furnish
from tests.kubelet import KUBECONFIG, Kubelet

MANIFEST = ROOT / "deploy" / "kubernetes" / "daemonset.yaml"
UNINSTALL = ROOT / "deploy" / "kubernetes" / "uninstall.yaml"
NODE = "node-ds"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
RECORD = "/var/lib/netctl-test/hostfile.log"
SUBNET = ipaddress.IPv4Network("10.188.0.0/24")
BLUE = ipaddress.IPv4Network("10.188.1.0/24")
PAUSE = "localhost/netctl-pause:latest"
RUN_NETCTL = Path("/run/netctl")  # the socket's dir: the runtime's plugin reaches it here
METRICS_PORT = 9469

pytestmark = [pytest.mark.netns, pytest.mark.slow,
              pytest.mark.skipif(bool(cri.unavailable(sandboxes=True)),
                                 reason=cri.unavailable(sandboxes=True) or "-")]


def podman_env() -> tuple[list[str], dict[str, str]]:
    """podman as ``make image`` runs it (its containers.conf)."""
    return ["podman"], realnode.podman_env()


@pytest.fixture(scope="module")
def image() -> str:
    """The DaemonSet's image, as ``make image`` builds it from this checkout (seconds when
    only netctl changed: podman's layer cache; about a minute on a fresh machine)."""
    return realnode.build_image()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[FakeHost]:
    with FakeHost(tmp_path / "node") as fake:
        yield fake


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(bookmark_interval=0.5) as fake:
        yield fake


@pytest.fixture
def machine() -> Iterator[None]:
    """What containerd's libcni leaves on this machine (``/var/lib/cni`` dirs), taken back."""
    before = HostSnapshot.take()
    yield
    assert before.restore() == []


@pytest.fixture
def run_netctl() -> Iterator[Path]:
    """The machine's /run/netctl, which the DaemonSet's socket path names: it must be free,
    and it is removed afterwards."""
    if RUN_NETCTL.exists():
        pytest.fail(f"{RUN_NETCTL} exists: a netctl runs on this machine; the DaemonSet "
                    "test needs its socket path")
    try:
        yield RUN_NETCTL
    finally:
        shutil.rmtree(RUN_NETCTL, ignore_errors=True)


def held(kubelet: Kubelet) -> int:
    """Addresses netctl holds on the node: ``netctl ipam pools`` in the image, on the
    node's state dir (the daemon up or not)."""
    state = kubelet.host.path("/var/lib/netctl")
    out = kubelet.run_podman("run", "--rm", "--network", "none", "--volume",
                             f"{state}:/var/lib/netctl", kubelet.image or "", "netctl", "ipam",
                             "pools", "--json")
    return sum(int(p["in_use"]) for p in json.loads(out.stdout)["pools"])


def metrics() -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as r:
        return str(r.read().decode())


def test_the_daemonset_runs_pods_and_restarts_a_daemon_that_stops_answering(
        image: str, host: FakeHost, kube: FakeKube, run_netctl: Path, machine: None,
        tmp_path: Path) -> None:
    tag = os.urandom(2).hex()
    primary_bridge, blue_bridge = f"nctds{tag}p", f"nctds{tag}b"
    furnish(host, primary_bridge, str(SUBNET))
    kube.create("nodes", node(NODE))
    kube.create("network-attachment-definitions", nad("blue", "default", harness.bridge_conf(
        "blue", blue_bridge, {"type": "netctl-ipam", "range": str(BLUE)}, gateway=False)))
    kube.create("network-attachment-definitions", nad("hosted", "default", {
        "cniVersion": "1.0.0", "name": "hosted", "plugins": [{
            "type": "netctl-test-hostfile", "hostFile": MARKER, "record": RECORD}]}))
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")

    def rewrite(container: str, command: list[str]) -> list[str]:
        # --in-cluster needs a service account's token and TLS: the fake API server's
        # kubeconfig instead
        return [f"--kubeconfig={KUBECONFIG}" if a == "--in-cluster" else a for a in command]

    podman, env = podman_env()
    kubelet = Kubelet(MANIFEST, host, tmp_path / "kubelet", node=NODE, podman=podman,
                      env=env, shared=[str(RUN_NETCTL), "/run/netns"], image=image,
                      rewrite=rewrite, extra_mounts=[(str(kubeconfig), KUBECONFIG)])
    (tmp_path / "kubelet").mkdir()
    try:
        # the init container: the plugin and the conflist in front of the primary's
        kubelet.run_init_containers()
        installed = host.path("/opt/cni/bin/netctl-cni")
        assert installed.is_file() and host.path("/opt/cni/bin/netctl-ipam").exists()
        conflist = json.loads(host.path("/etc/cni/net.d/00-netctl.conflist").read_text())
        (entry,) = conflist["plugins"]
        assert entry["type"] == "netctl-cni" and entry["clusterNetwork"] == PRIMARY
        assert entry["socket"] == str(RUN_NETCTL / "netctl.sock")

        kubelet.start_containers()
        kubelet.wait_probe("netctl", "startupProbe", timeout=120)
        kubelet.wait_probe("netctl", "readinessProbe", timeout=60)
        assert "netctl_ready 1.0" in metrics()

        # a pod through containerd's CRI plugin, its networks from NADs
        meta = kube.create("pods", pod("web", "default", node=NODE,
                                       annotations={NETWORKS: "blue,hosted"}))["metadata"]
        with cri.Containerd(host.path("/etc/cni/net.d"), host.path("/opt/cni/bin"),
                            PAUSE) as ctd:
            pause = tmp_path / "pause.tar"
            cri.write_image_tar(pause, PAUSE, ["sleep", "3600"], {})
            ctd.import_image(pause, PAUSE)
            sandbox = cri.SandboxConfig("web", "default", meta["uid"],
                                        annotations={NETWORKS: "blue,hosted"})
            try:
                sandbox_id = ctd.cri.run_pod_sandbox(sandbox)
            except Exception as exc:
                raise AssertionError(f"RunPodSandbox: {exc}\n{ctd.log_tail(30)}\n"
                                     f"{kubelet.logs('netctl')}") from exc
            status = ctd.cri.pod_sandbox_status(sandbox_id)
            ns = os.path.basename(status.netns)
            assert sorted(netns_links(ns)) == ["eth0", "lo", "net1"]  # hostfile makes no link
            addrs = netns_addrs(ns)
            eth0 = ipaddress.ip_interface(addrs["eth0"][0])
            assert eth0.network == SUBNET and ipaddress.ip_interface(
                addrs["net1"][0]).network == BLUE
            # host-local ran in the node's root: its lease is the node's
            lease = host.path(f"/var/lib/cni/networks/primary/{eth0.ip}")
            assert lease.read_text().startswith(sandbox_id)
            # the hostfile delegate read the node's file and wrote the node's record
            assert host.path(RECORD).read_text() == f"the node's own file {sandbox_id}\n"
            written = kube.get("pods", "default", "web")
            assert written is not None
            names = {e["interface"]: e["name"] for e in json.loads(
                written["metadata"]["annotations"][STATUS])}
            # (an attachment without an interface, like hosted's, has no entry: as in Multus)
            assert names == {"eth0": "primary", "net1": "default/blue"}, names

            # the daemon stops answering: the liveness probe restarts it (a stopped process
            # cannot act on the SIGTERM: the probe's 10 s of grace would only be waited out)
            pid = kubelet.pid("netctl")
            os.kill(pid, signal.SIGSTOP)
            spec = kubelet.container("netctl")["livenessProbe"]
            # a stopped daemon never answers (the kernel takes the connection, nothing
            # reads it), so each probe waits out its whole timeoutSeconds (4 s): 1 s while
            # it is stopped, the manifest's again for the restarted one
            timeout = spec["timeoutSeconds"]
            spec["timeoutSeconds"] = 1
            try:
                results = kubelet.watch_liveness("netctl", rounds=10, grace=1)
            finally:
                spec["timeoutSeconds"] = timeout
            assert results == [False] * int(spec["failureThreshold"]), results
            assert kubelet.restarts == {"netctl": 1}
            kubelet.wait_probe("netctl", "startupProbe", timeout=120)
            kubelet.wait_probe("netctl", "readinessProbe", timeout=60)
            assert kubelet.pid("netctl") != pid and kubelet.watch_liveness(
                "netctl", rounds=2) == [True, True]

            # the pod goes: every address back, through the restarted daemon
            ctd.cri.stop_pod_sandbox(sandbox_id)
            ctd.cri.remove_pod_sandbox(sandbox_id)
            assert not lease.exists() and not host.path(RECORD).exists()
            assert not os.path.exists(status.netns)
            assert bridge_ports(primary_bridge) == [] and bridge_ports(blue_bridge) == []
            assert held(kubelet) == 0

            # the restarted daemon serves a new pod too
            late = kube.create("pods", pod("late", "default", node=NODE,
                                           annotations={NETWORKS: "blue"}))["metadata"]
            late_id = ctd.cri.run_pod_sandbox(cri.SandboxConfig(
                "late", "default", late["uid"], annotations={NETWORKS: "blue"}))
            late_ns = ctd.cri.pod_sandbox_status(late_id).netns
            late_ip = ipaddress.ip_interface(
                netns_addrs(os.path.basename(late_ns))["eth0"][0]).ip
            late_lease = host.path(f"/var/lib/cni/networks/primary/{late_ip}")
            assert late_lease.exists() and held(kubelet) == 1

            # rollback: the DaemonSet is deleted; the pod goes while no daemon runs (the
            # plugin records the DELs: nothing is released yet); then uninstall.yaml
            kubelet.close()
            ctd.cri.stop_pod_sandbox(late_id)
            ctd.cri.remove_pod_sandbox(late_id)
            assert late_lease.exists() and os.listdir(RUN_NETCTL / "pending-del")
            undo = Kubelet(UNINSTALL, host, tmp_path / "kubelet", node=NODE, podman=podman,
                           env=env, shared=[str(RUN_NETCTL), "/run/netns"], image=image)
            try:
                undo.run_init_containers()
            finally:
                undo.close()
            assert not host.path("/etc/cni/net.d/00-netctl.conflist").exists()
            assert not host.path("/opt/cni/bin/netctl-cni").exists()
            # the recorded DELs carried out: the lease, the bridge port, netctl's address
            assert not late_lease.exists() and os.listdir(RUN_NETCTL / "pending-del") == []
            assert bridge_ports(primary_bridge) == [] and bridge_ports(blue_bridge) == []
            assert not os.path.exists(late_ns)
            assert held(kubelet) == 0
    finally:
        try:
            kubelet.close()
        finally:
            harness.remove_host_objects(f"nctds{tag}")
