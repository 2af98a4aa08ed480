"""A node switched from Multus thick to netctl, on a real single-node cluster
(:class:`netctl_kit.realnode.RealNode`), as docs/migrating.md says to switch — once from
Multus v4.1.4 and once from v4.3.0 on each Kubernetes version found
(:func:`netctl_kit.realnode.versions`): the module's node is parametrized by both (Multus
v4.3.0 caches a conflist cluster network differently, see :mod:`netctl.engine.foreign`).

1. Multus thick (``multus-daemon`` and ``multus-shim`` of that version, in an image built
   here from netctl's Debian base: no registry) runs as the DaemonSet of
   ``multus-thick.yaml`` (laid out as Multus' own ``deployments/multus-daemonset-thick.yml``),
   Ready; it writes ``00-multus.conf`` in front of the node's primary (a bridge with
   host-local) and a Deployment of 3 pods gets three secondary networks from it (bridge
   NADs: two with host-local IPAM, one with whereabouts v0.8.1's, its records in the API
   server): network-status written by Multus, the interfaces in the pods' netns,
   whereabouts' IPPool, Multus' scratch cache of each sandbox under
   ``/var/lib/cni/multus`` (the cluster network's entry in that version's shape).
2. The switch, docs/migrating.md's steps 1 and 2 in the order that leaves no gap: netctl's
   daemon config with ``ipam-takeover: [whereabouts]`` and ``ipam-backend: kubernetes``,
   netctl installed as docs/kubernetes.md says
   (:meth:`~netctl_kit.realnode.RealNode.install_netctl`) with ``--replace-multus`` added to
   the init container's ``install-cni --auto-config`` **while Multus still runs** (its
   ``00-multus.conf`` renamed behind ``00-netctl.conflist``, Multus' daemon still Ready),
   pods created then get their networks from netctl; then Multus' DaemonSet deleted (its
   daemon removes no file netctl needs: ``00-netctl.conflist`` stays first, no
   ``00-multus.conf`` comes back) and a pod created after that gets its networks from
   netctl too. Every new pod's ADD is in netctl's journal; the whereabouts NAD is served by
   netctl-ipam around the addresses whereabouts gave the running pods (whereabouts'
   records untouched).
3. The pods created under Multus, scaled to 0 after the switch: their DELs reach netctl,
   which never saw them, and run what Multus ran from its cache (docs/migrating.md's step
   3): every host-local lease of theirs (primary and both secondary networks) gone from the
   node's ``/var/lib/cni/networks``, no veth of theirs left on the bridges, no netns, their
   Multus cache files removed, each journaled as a DEL whose reason names Multus' cache.
   The pods created under netctl are untouched, and once they go too nothing is left.

What is asserted is real state: the node's files, the bridges' ports on the machine, the
netns in the node's ``/run/netns``, the pods' links (``ip -j addr`` in their netns), the
API's objects and netctl's journal (``netctl journal --json`` in its container). What the
node showed at each step, the addresses released and the timings are printed at the end.

Multus' and whereabouts' binaries are built outside the repository (docs/testing.md says
from which commits, with which Go) into ``NETCTL_ANCHORS_DIR`` (default
``/opt/netctl-anchors``): ``multus-v4.1.4/`` and ``multus-v4.3.0/`` (``multus-daemon``,
``multus-shim``), ``whereabouts-v0.8.1/whereabouts``. A version whose binaries are not
there is skipped with one line saying what is missing and where it was looked for.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from netctl_kit import realnode
from netctl_kit.harness import wait_for
from netctl_kit.kubebins import KubeVersion
from netctl_kit.realnode import (
    BUSYBOX_IMAGE,
    CRDS,
    MANIFESTS,
    NETWORKS,
    PRIMARY_SUBNET,
    NodeError,
    RealNode,
)

from tests.conftest import RealNodes

pytestmark = [pytest.mark.realnode, pytest.mark.netns, pytest.mark.slow]

NS = "default"
ANCHORS = Path(os.environ.get("NETCTL_ANCHORS_DIR") or "/opt/netctl-anchors")
MULTUS_VERSIONS = ("v4.1.4", "v4.3.0")  # their caches differ (engine/foreign.py)
# which of them a run switches from: NETCTL_MULTUS_VERSIONS — "newest" (the default: the
# Multus users run today, and the suite keeps its time), "all", or versions ("v4.1.4,v4.3.0")
_WANT = (os.environ.get("NETCTL_MULTUS_VERSIONS") or "newest").strip()
SWITCHED_FROM = MULTUS_VERSIONS[-1:] if _WANT == "newest" else MULTUS_VERSIONS \
    if _WANT == "all" else tuple(v for v in MULTUS_VERSIONS if v in _WANT.split(","))
MULTUS_BINARIES = ("multus-daemon", "multus-shim")
WHEREABOUTS = ANCHORS / "whereabouts-v0.8.1" / "whereabouts"
MULTUS_MANIFEST = Path(__file__).with_name("multus-thick.yaml")
BASE_IMAGE = "localhost/netctl-base:bookworm"  # `make image`'s (Makefile: BASE_IMAGE)
# whereabouts' flat file and kubeconfig on the node, where its own install puts them (v0.8.1
# refuses to run without the flat file)
WHEREABOUTS_DIR = "/etc/cni/net.d/whereabouts.d"
PRIMARY_CONF = "/etc/cni/net.d/10-primary.conflist"
BLUE = ipaddress.IPv4Network("10.219.1.0/24")
GREEN = ipaddress.IPv4Network("10.219.2.0/24")
PURPLE = ipaddress.IPv4Network("10.219.3.0/24")  # whereabouts'
SUBNETS = {"primary": ipaddress.ip_network(PRIMARY_SUBNET), "blue": BLUE, "green": GREEN,
           "purple": PURPLE}
HOST_LOCAL = ("primary", "blue", "green")  # the networks with host-local leases
WANT = {"eth0": "primary", "net1": "default/blue", "net2": "default/green",
        "net3": "default/purple"}


@dataclass
class Cutover:
    """One module run: the node, the Multus version it switches from, and what a test hands
    to the next (they run in this order), the observations and the timings."""

    node: RealNode
    multus: str
    state: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def need(self, *keys: str) -> None:
        missing = [k for k in keys if k not in self.state]
        if missing:
            pytest.skip(f"an earlier test of this module failed (no {', '.join(missing)})")


# -- Multus' image, built here ---------------------------------------------------------------


def multus_dir(version: str) -> Path:
    return ANCHORS / f"multus-{version}"


def multus_image(version: str) -> str:
    return f"localhost/multus-thick:{version}"


def anchors_missing(version: str) -> str | None:
    """What of Multus ``version``'s and whereabouts v0.8.1's binaries is not there, in one
    line (None when all are)."""
    wanted = [multus_dir(version) / n for n in MULTUS_BINARIES] + [WHEREABOUTS]
    lacking = [str(p.relative_to(ANCHORS)) for p in wanted if not os.access(p, os.X_OK)]
    if not lacking:
        return None
    return (f"no {', '.join(lacking)} in {ANCHORS} (NETCTL_ANCHORS_DIR, default "
            f"/opt/netctl-anchors; Multus thick {version}, whereabouts v0.8.1): build them "
            "outside the repository as docs/testing.md says")


def build_multus_image(version: str) -> None:
    """``localhost/multus-thick:VERSION``: netctl's Debian base and that version's static
    binaries at Multus' paths (``/usr/src/multus-cni/bin``), built by podman with no
    network from the binaries' own directory (layers cached: seconds once built)."""
    image = multus_image(version)
    with tempfile.TemporaryDirectory(prefix="multus-image-") as tmp:
        containerfile = Path(tmp) / "Containerfile"
        containerfile.write_text(
            f"FROM {BASE_IMAGE}\nCOPY {' '.join(MULTUS_BINARIES)} /usr/src/multus-cni/bin/\n")
        proc = subprocess.run(["podman", "build", "--network=none", "--pull=never", "-q",
                               "-t", image, "-f", str(containerfile), str(multus_dir(version))],
                              env=realnode.podman_env(), capture_output=True, text=True,
                              timeout=600, check=False)
    if proc.returncode != 0:
        raise NodeError(f"podman build {image}: {proc.stderr[-3000:]}")


def multus_manifest(version: str, api_host: str, api_port: int) -> list[dict[str, Any]]:
    """``multus-thick.yaml`` with ``version``'s image and the API server's address."""
    docs = [d for d in yaml.safe_load_all(MULTUS_MANIFEST.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            spec = doc["spec"]["template"]["spec"]
            for container in (*spec["initContainers"], *spec["containers"]):
                container["image"] = multus_image(version)
            for env in spec["containers"][0]["env"]:
                if env["name"] == "KUBERNETES_SERVICE_PORT":
                    env["value"] = str(api_port)
                if env["name"] == "KUBERNETES_SERVICE_HOST":
                    env["value"] = api_host
    return docs


def netctl_daemonset_replacing_multus() -> list[dict[str, Any]]:
    """deploy/kubernetes/daemonset.yaml with ``--replace-multus`` added to the init
    container's ``install-cni --auto-config`` (docs/migrating.md, step 2), and its daemon
    config with ``ipam-takeover: [whereabouts]`` and ``ipam-backend: kubernetes`` (step 1)."""
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "daemonset.yaml").read_text()) if d]
    out = copy.deepcopy(docs)
    for doc in out:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "netctl-config":
            doc["data"]["daemon.yaml"] += "ipam-takeover: [whereabouts]\nipam-backend: kubernetes\n"
        if doc["kind"] == "DaemonSet":
            (init,) = doc["spec"]["template"]["spec"]["initContainers"]
            assert init["name"] == "install-cni" and "--auto-config" in init["command"]
            init["command"].append("--replace-multus")
    return out


# -- the workload -------------------------------------------------------------------------------


def nad(name: str, bridge: str, subnet: ipaddress.IPv4Network) -> dict[str, Any]:
    """A bridge NAD: host-local IPAM, or whereabouts' for PURPLE."""
    ipam: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": str(subnet)}]]}
    if subnet == PURPLE:
        ipam = {"type": "whereabouts", "range": str(subnet)}
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": False, "ipam": ipam}]}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"config": json.dumps(config)}}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {
                         "metadata": {"labels": {"app": name},
                                      "annotations": {NETWORKS: "blue,green,purple"}},
                         "spec": {
                             "automountServiceAccountToken": False,
                             "enableServiceLinks": False, "terminationGracePeriodSeconds": 5,
                             "containers": [{
                                 "name": "main", "image": BUSYBOX_IMAGE,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", "trap 'exit 0' TERM; "
                                             "sleep 2147483647 & wait"]}]}}}}


@pytest.fixture(scope="module", ids=lambda p: f"{p[0]}-multus-{p[1]}", params=[
    (kube, multus) for kube in realnode.versions() for multus in SWITCHED_FROM])
def cut(request: pytest.FixtureRequest, real_nodes: RealNodes) -> Iterator[Cutover]:
    kube: KubeVersion | None
    kube, version = request.param
    reason = "; ".join(r for r in (realnode.unavailable(kube=kube), anchors_missing(version))
                       if r)
    if reason:
        pytest.skip(f"real node: {reason}")
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        realnode.build_image()  # this checkout's netctl (and the base Multus' image is on)
    except NodeError as exc:
        missing = realnode.unavailable(image=realnode.netctl_image())
        if missing:
            pytest.skip(f"real node: {missing}; {str(exc).splitlines()[-1]}")
        raise
    timings["make image"] = time.monotonic() - t0
    t1 = time.monotonic()
    build_multus_image(version)
    timings["multus image"] = time.monotonic() - t1
    real_nodes.release()  # a node of its own (Multus first): one node on a machine at a time
    with RealNode(kube=kube) as n:
        assert n.kube is not None
        run = Cutover(n, version, timings=timings)
        t2 = time.monotonic()
        n.import_image(multus_image(version))
        # whereabouts as its install leaves a node: the plugin, its flat file naming a
        # kubeconfig (the admin's token here) in the conf dir's whereabouts.d; its CRDs
        # are the API server's (RealKube's)
        shutil.copy2(WHEREABOUTS, n.node_path("/opt/cni/bin/whereabouts"))
        n.node_path(WHEREABOUTS_DIR).mkdir()
        kubeconfig = f"{WHEREABOUTS_DIR}/whereabouts.kubeconfig"
        n.kube.kubeconfig(n.node_path(kubeconfig), token=n.kube.admin_token)
        n.node_path(f"{WHEREABOUTS_DIR}/whereabouts.conf").write_text(json.dumps({
            "datastore": "kubernetes", "kubernetes": {"kubeconfig": kubeconfig}}))
        n.kubectl("apply", "-f", str(CRDS / "network-attachment-definitions.yaml"))
        n.apply(multus_manifest(version, n.kube.address, n.kube.port))
        n.apply([nad("blue", f"{n.prefix}b1", BLUE), nad("green", f"{n.prefix}b2", GREEN),
                 nad("purple", f"{n.prefix}b3", PURPLE)])
        n.wait_ready("daemonset", "kube-multus-ds", "kube-system", timeout=180)
        timings.update(n.timings, **{"multus ready": time.monotonic() - t2})
        yield run
        timings["module"] = time.monotonic() - t0
    print(f"\nreal node {n.kube_version}, cut-over from Multus {version}, timings (s): "
          f"{json.dumps({k: round(v, 1) for k, v in timings.items()})}")
    print(f"observed: {json.dumps(run.notes, indent=1)}")


# -- what the node holds -----------------------------------------------------------------------


def conf_dir(node: RealNode) -> list[str]:
    return sorted(os.listdir(node.node_path("/etc/cni/net.d")))


def first_config(node: RealNode) -> str:
    """The file of the node's conf dir the runtime loads (the first config by name)."""
    return next(f for f in conf_dir(node) if f.endswith((".conf", ".conflist", ".json")))


def leases(node: RealNode, network: str) -> dict[str, str]:
    """host-local's reservations of ``network`` on the node: address → container id."""
    d = node.node_path(f"/var/lib/cni/networks/{network}")
    if not d.is_dir():
        return {}
    return {f.name: f.read_text().split()[0] for f in d.iterdir()
            if f.name[0].isdigit() and f.read_text().strip()}


def leases_of(node: RealNode, containers: set[str]) -> dict[str, int]:
    """How many host-local leases ``containers`` hold, by network."""
    return {n: sum(c in containers for c in leases(node, n).values()) for n in HOST_LOCAL}


def whereabouts_allocations(node: RealNode) -> dict[str, tuple[str, str]]:
    """whereabouts' IPPools, cluster-wide: address → (container id, podref)."""
    assert node.kube is not None
    out = {}
    for pool in node.kube.request(
            "GET", "/apis/whereabouts.cni.cncf.io/v1alpha1/ippools")["items"]:
        net = ipaddress.ip_network(pool["spec"]["range"])
        for offset, a in (pool["spec"].get("allocations") or {}).items():
            out[str(net.network_address + int(offset))] = (a["id"], a["podref"])
    return out


def multus_cache(node: RealNode) -> set[str]:
    d = node.node_path("/var/lib/cni/multus")
    return {f.name for f in d.iterdir() if f.is_file()} if d.is_dir() else set()


def go_bytes(raw: str) -> Any:
    return json.loads(base64.b64decode(raw))


def bridges(node: RealNode) -> tuple[str, ...]:
    return (node.primary_bridge, f"{node.prefix}b1", f"{node.prefix}b2", f"{node.prefix}b3")


def ports(node: RealNode) -> dict[str, int]:
    return {b: len(node.bridge_ports(b)) for b in bridges(node)}


def check_networks(node: RealNode, pod: dict[str, Any]) -> dict[str, str]:
    """:meth:`RealNode.check_networks`: eth0 (the cluster network, default), net1 to net3
    (the NADs) and this module's subnets; interface → address."""
    return node.check_networks(pod, WANT, SUBNETS)


def check_deployment(node: RealNode, app: str, replicas: int = 3) -> dict[str, dict[str, str]]:
    """Every pod of ``app`` has its four networks, no address twice; by sandbox (the
    container holding the pod's primary lease), each interface's address."""
    pods = node.pods(NS, f"app={app}")
    assert len(pods) == replicas
    primary = leases(node, "primary")
    out = {primary[p["status"]["podIP"]]: check_networks(node, p) for p in pods}
    assert len(out) == replicas
    assert len({a for addresses in out.values() for a in addresses.values()}) == 4 * replicas
    return out


def journal(node: RealNode, container: str) -> list[dict[str, Any]]:
    """netctl's journaled operations of a container, oldest first."""
    doc = json.loads(node.netctl("journal", "--container", container, "--json"))
    ops: list[dict[str, Any]] = doc["operations"]
    return sorted(ops, key=lambda o: o["id"])


def scale(node: RealNode, name: str, replicas: int) -> None:
    node.kubectl("-n", NS, "scale", f"deployment/{name}", f"--replicas={replicas}")


def netctls(node: RealNode, pods: dict[str, dict[str, str]]) -> None:
    """Each of these sandboxes was ADDed by netctl (its journal holds the ADD, done)."""
    for cid in pods:
        ops = journal(node, cid)
        assert [(o["verb"], o["state"]) for o in ops] == [("ADD", "done")], ops


# -- the tests ---------------------------------------------------------------------------------


def test_multus_thick_gives_the_pods_their_networks(cut: Cutover) -> None:
    node = cut.node
    t0 = time.monotonic()
    wait_for(lambda: "00-multus.conf" in conf_dir(node), 60, "Multus' 00-multus.conf")
    multus_conf = json.loads(node.node_path("/etc/cni/net.d/00-multus.conf").read_text())
    assert multus_conf["type"] == "multus-shim", multus_conf
    # the primary's path as Multus' daemon sees the host's conf dir (its /host/etc/cni/net.d)
    assert multus_conf["clusterNetwork"].endswith(PRIMARY_CONF), multus_conf
    assert node.node_path("/opt/cni/bin/multus-shim").exists()

    node.apply([deployment("old", 3)])
    node.wait_ready("deployment", "old", NS, timeout=120)
    pods = check_deployment(node, "old")
    old = set(pods)
    for network in HOST_LOCAL:
        assert set(leases(node, network).values()) == old, network
    # whereabouts' records: each pod's purple address, in its IPPool
    assert {a: cid for a, (cid, _) in whereabouts_allocations(node).items()} == {
        addresses["net3"]: cid for cid, addresses in pods.items()}
    # Multus' record of each sandbox: its delegates, the cluster network first — in this
    # version's shape: v4.1.4 keeps the primary conflist's own bytes in Bytes; v4.3.0 a
    # re-encoding without the bridge's and host-local's settings, the conflist it ran in
    # CNINetworkConfigList
    assert multus_cache(node) == old
    primary = json.loads(node.node_path(PRIMARY_CONF).read_text())
    for cid in old:
        cached = json.loads(node.node_path(f"/var/lib/cni/multus/{cid}").read_text())
        assert [d["Name"] for d in cached] == [
            primary["name"], "default/blue", "default/green", "default/purple"], cached
        first = cached[0]
        if cut.multus == "v4.1.4":
            assert "CNINetworkConfigList" not in first, first
            assert go_bytes(first["Bytes"]) == primary, first
        else:
            lossy = go_bytes(first["Bytes"])
            assert "bridge" not in lossy["plugins"][0], lossy
            assert "dataDir" not in lossy["plugins"][0]["ipam"], lossy
            ran = first["CNINetworkConfigList"]
            assert [go_bytes(p["Bytes"]) for p in ran["Plugins"]] == primary["plugins"], ran
            cut.notes["v4.3.0's Bytes of the cluster network"] = lossy
    assert ports(node) == dict.fromkeys(bridges(node), 3)
    assert len(node.sandbox_netns()) == 3
    cut.state["old"] = pods
    cut.notes["host-local leases of the pods created under Multus"] = leases_of(node, old)
    cut.timings["1: 3 pods ready under Multus"] = time.monotonic() - t0


def test_the_switch_to_netctl_as_the_doc_says(cut: Cutover) -> None:
    cut.need("old")
    node, old = cut.node, cut.state["old"]
    t0 = time.monotonic()
    # docs/migrating.md step 2: netctl installed with --replace-multus while Multus still
    # runs (and step 1's ipam-takeover: [whereabouts])
    before = whereabouts_allocations(node)
    node.install_netctl(build=False, daemonset=netctl_daemonset_replacing_multus())
    cut.timings["2: netctl ready"] = time.monotonic() - t0
    listed = conf_dir(node)
    cut.notes["conf dir once netctl is installed, Multus running"] = listed
    assert first_config(node) == "00-netctl.conflist", listed
    assert "00-multus.conf" not in listed and ".00-multus.conf.netctl-replaced" in listed
    netctl_conf = json.loads(node.node_path("/etc/cni/net.d/00-netctl.conflist").read_text())
    assert netctl_conf["plugins"][0]["clusterNetwork"] == PRIMARY_CONF, netctl_conf
    assert node.ready("daemonset", "kube-multus-ds", "kube-system")  # Multus still runs

    # pods created now get their networks from netctl: journaled as its ADDs;
    # whereabouts' purple addresses of the pods still running are not handed out again
    # (netctl-ipam serves the whereabouts NAD, whereabouts' records untouched)
    node.apply([deployment("new", 3)])
    node.wait_ready("deployment", "new", NS, timeout=120)
    new = check_deployment(node, "new")
    assert not set(new) & set(old)
    netctls(node, new)

    # then Multus' DaemonSet deleted: its daemon takes nothing of netctl's with it
    t1 = time.monotonic()
    node.kubectl("-n", "kube-system", "delete", "daemonset", "kube-multus-ds")
    node.wait_pods_gone("kube-system", "name=multus", timeout=60)
    cut.timings["2: Multus gone"] = time.monotonic() - t1
    listed = conf_dir(node)
    cut.notes["conf dir once Multus' DaemonSet is deleted"] = listed
    assert first_config(node) == "00-netctl.conflist" and "00-multus.conf" not in listed, \
        listed
    cut.notes["Multus' cache files left"] = len(multus_cache(node))
    node.apply([deployment("late", 1)])
    node.wait_ready("deployment", "late", NS, timeout=120)
    late = check_deployment(node, "late", 1)
    netctls(node, late)

    purple = {a["net3"] for a in (*new.values(), *late.values())}
    cut.notes["whereabouts NAD: addresses under Multus, under netctl"] = [
        sorted(a["net3"] for a in old.values()), sorted(purple)]
    assert not purple & {a["net3"] for a in old.values()}, (purple, old)
    assert whereabouts_allocations(node) == before
    assert multus_cache(node) == set(old)  # Multus' cache: nothing new in it
    assert ports(node) == dict.fromkeys(bridges(node), 7)
    cut.state["new"] = {**new, **late}
    cut.timings["2: the switch"] = time.monotonic() - t0


def test_pods_from_before_the_switch_release_everything(cut: Cutover) -> None:
    cut.need("old", "new")
    node = cut.node
    old, new = set(cut.state["old"]), set(cut.state["new"])
    t0 = time.monotonic()
    held = leases_of(node, old)
    scale(node, "old", 0)
    node.wait_pods_gone(NS, "app=old", timeout=120)

    def released() -> bool:
        return all(set(leases(node, n).values()) == new for n in HOST_LOCAL) and \
            ports(node) == dict.fromkeys(bridges(node), 4) and \
            len(node.sandbox_netns()) == 4 and not multus_cache(node)
    try:
        wait_for(released, 60, "the old pods' leases, veths, netns and Multus cache gone",
                 interval=0.5)
    except Exception as exc:
        raise AssertionError(
            f"{exc}\nleases: { {n: leases(node, n) for n in HOST_LOCAL} }\nports: "
            f"{ports(node)}\nnetns: {node.sandbox_netns()}\nmultus cache: "
            f"{multus_cache(node)}") from exc
    cut.timings["3: old pods gone, all released"] = time.monotonic() - t0
    left = leases_of(node, old)
    cut.notes["host-local leases of the old pods: held, released"] = [
        sum(held.values()), sum(held.values()) - sum(left.values())]
    assert sum(held.values()) == 3 * len(HOST_LOCAL) and not any(left.values()), (held, left)
    for cid in old:  # one DEL of a container netctl never saw, from Multus' cache
        ops = journal(node, cid)
        assert ops and ops[0]["verb"] == "DEL" and ops[0]["state"] == "done", ops
        assert "never saw" in ops[0]["reason"] and "Multus' cache" in ops[0]["reason"], ops
    cut.notes["whereabouts' allocations left once the old pods are gone"] = \
        whereabouts_allocations(node)
    results = node.node_path("/var/lib/cni/results")
    cut.notes["libcni result caches of the old sandboxes left"] = sorted(
        f.name for f in results.iterdir() if any(c in f.name for c in old)) \
        if results.is_dir() else []

    # the pods created under netctl are untouched, and go cleanly too
    assert {**check_deployment(node, "new"), **check_deployment(node, "late", 1)} == \
        cut.state["new"]
    scale(node, "new", 0)
    scale(node, "late", 0)
    node.wait_pods_gone(NS, "app in (new,late)", timeout=120)
    wait_for(lambda: not any(leases(node, n) for n in HOST_LOCAL)
             and not any(ports(node).values()) and not node.sandbox_netns(), 60,
             "nothing held once every pod is gone", interval=0.5)
    cut.notes["netctl's addresses held at the end"] = node.held()
    cut.notes["libcni result caches left at the end"] = len(list(results.iterdir())) \
        if results.is_dir() else 0
    cut.timings["3: all released"] = time.monotonic() - t0
