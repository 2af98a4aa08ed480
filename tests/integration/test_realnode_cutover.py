"""A node switched from Multus thick to netctl, on a real single-node cluster
(:class:`netctl.kit.realnode.RealNode`), as docs/migrating.md says to switch.

1. Multus thick v4.1.4 (the anchors' ``multus-daemon`` and ``multus-shim``, in an image built
   here from netctl's Debian base: no registry) runs as the DaemonSet of
   ``multus-thick.yaml`` (laid out as Multus' own ``deployments/multus-daemonset-thick.yml``),
   Ready; it writes ``00-multus.conf`` in front of the node's primary (a bridge with
   host-local) and a Deployment of 3 pods gets three secondary networks from it (bridge
   NADs: two with host-local IPAM, one with whereabouts v0.8.1's, the anchors' binary, its
   records in the API server): network-status written by Multus, the interfaces in the
   pods' netns, whereabouts' IPPool, Multus' scratch cache of each sandbox under
   ``/var/lib/cni/multus``.
2. The switch, docs/migrating.md's steps 1 and 2 literally: netctl's daemon config with
   ``ipam-takeover: [whereabouts]`` (and ``ipam-backend: kubernetes``, without which the
   holds are not read), Multus' DaemonSet deleted, then netctl installed as
   docs/kubernetes.md says (:meth:`~netctl.kit.realnode.RealNode.install_netctl`) with
   ``--replace-multus`` added to the init container's ``install-cni --auto-config``.
   Multus v4.1's daemon removes its ``00-multus.conf`` when its DaemonSet is deleted (on
   SIGTERM), not as the doc says: a pod created in that gap comes up on the primary
   network alone, Running, no network-status (asserted: it is what a user would meet).
   New pods get their networks from netctl (its journal holds their ADDs), the
   whereabouts NAD served by netctl-ipam around the addresses whereabouts gave the running
   pods (whereabouts' records untouched).
3. The pods created under Multus, scaled to 0 after the switch: their DELs reach netctl,
   which never saw them, and run what Multus ran from its cache (docs/migrating.md's step
   3): the host-local leases of the primary and of both secondary networks gone from the
   node's ``/var/lib/cni/networks``, no veth of theirs left on the bridges, no netns, their
   Multus cache files removed, each journaled as a DEL whose reason names Multus' cache;
   the pod from the gap (no Multus cache) has its cluster network DELeted, its lease gone.
   The pods created under netctl are untouched, and once they go too nothing is left.

What is asserted is real state: the node's files, the bridges' ports on the machine, the
netns in the node's ``/run/netns``, the pods' links (``ip -j addr`` in their netns), the
API's objects and netctl's journal (``netctl journal --json`` in its container). The
observations on the doc (what Multus' DaemonSet leaves behind when deleted) are printed at
the end with the timings.
"""

from __future__ import annotations

import copy
import gzip
import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from netctl.kit import realnode
from netctl.kit.harness import bridge_ports, wait_for
from netctl.kit.kubefake.real import ROOT
from netctl.kit.realnode import (
    BUSYBOX_IMAGE,
    CRDS,
    MANIFESTS,
    NETWORKS,
    PRIMARY_SUBNET,
    NodeError,
    RealNode,
)

pytestmark = [pytest.mark.realnode, pytest.mark.netns, pytest.mark.slow]

NS = "default"
ANCHORS = Path(os.environ.get("NETCTL_ANCHORS_DIR") or ROOT.parent / "shared" / "anchors")
MULTUS_BINARIES = ("multus-daemon", "multus-shim")
ANCHOR_BINARIES = (*MULTUS_BINARIES, "whereabouts")
MULTUS_IMAGE = "localhost/multus-thick:v4.1.4"
MULTUS_MANIFEST = Path(__file__).with_name("multus-thick.yaml")
BASE_IMAGE = "localhost/netctl-base:bookworm"  # `make image`'s (Makefile: BASE_IMAGE)
BUILD = ROOT / "build" / "multus"  # the image's context: Multus' binaries
WHEREABOUTS = ROOT / "build" / "whereabouts" / "whereabouts"
# whereabouts' flat file and kubeconfig on the node, where its own install puts them (v0.8.1
# refuses to run without the flat file)
WHEREABOUTS_DIR = "/etc/cni/net.d/whereabouts.d"
BLUE = ipaddress.IPv4Network("10.219.1.0/24")
GREEN = ipaddress.IPv4Network("10.219.2.0/24")
PURPLE = ipaddress.IPv4Network("10.219.3.0/24")  # whereabouts'
SUBNETS = {"primary": ipaddress.ip_network(PRIMARY_SUBNET), "blue": BLUE, "green": GREEN,
           "purple": PURPLE}
HOST_LOCAL = ("primary", "blue", "green")  # the networks with host-local leases
WANT = {"eth0": "primary", "net1": "default/blue", "net2": "default/green",
        "net3": "default/purple"}
TIMINGS: dict[str, float] = {}
NOTES: dict[str, Any] = {}  # what the node showed at the doc's steps, printed at the end
STATE: dict[str, Any] = {}  # what a test hands to the next (they run in this order)


# -- Multus' image, built here ---------------------------------------------------------------


def anchors_missing() -> str | None:
    for name in ANCHOR_BINARIES:
        if not (ANCHORS / f"{name}.gz").exists():
            return (f"no {ANCHORS / name}.gz (Multus thick v4.1.4, whereabouts v0.8.1): set "
                    "NETCTL_ANCHORS_DIR to a dir holding multus-daemon.gz, multus-shim.gz and "
                    "whereabouts.gz, or put ../shared/anchors beside the repository")
    return None


def anchor(name: str, out: Path) -> None:
    """The anchors' ``name.gz`` decompressed to ``out`` (once: kept while newer)."""
    packed = ANCHORS / f"{name}.gz"
    if out.exists() and out.stat().st_mtime >= packed.stat().st_mtime:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.parent.parent / f".{name}.{os.getpid()}.part"  # outside a build context
    with gzip.open(packed, "rb") as src, open(part, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    part.chmod(0o755)
    part.rename(out)


def build_multus_image() -> None:
    """``localhost/multus-thick:v4.1.4``: netctl's Debian base and the anchors' static
    binaries at Multus' paths (``/usr/src/multus-cni/bin``), built by podman with no
    network (layers cached: seconds once built)."""
    for name in MULTUS_BINARIES:
        anchor(name, BUILD / name)
    (BUILD / "Containerfile").write_text(
        f"FROM {BASE_IMAGE}\nCOPY {' '.join(MULTUS_BINARIES)} /usr/src/multus-cni/bin/\n")
    proc = subprocess.run(["podman", "build", "--network=none", "--pull=never", "-q",
                           "-t", MULTUS_IMAGE, "-f", str(BUILD / "Containerfile"), str(BUILD)],
                          env=realnode.podman_env(), capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise NodeError(f"podman build {MULTUS_IMAGE}: {proc.stderr[-3000:]}")


def multus_manifest(api_port: int) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MULTUS_MANIFEST.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            for env in doc["spec"]["template"]["spec"]["containers"][0]["env"]:
                if env["name"] == "KUBERNETES_SERVICE_PORT":
                    env["value"] = str(api_port)
    return docs


def netctl_daemonset_replacing_multus() -> list[dict[str, Any]]:
    """deploy/kubernetes/daemonset.yaml with ``--replace-multus`` added to the init
    container's ``install-cni --auto-config`` (docs/migrating.md, step 2), and its daemon
    config with ``ipam-takeover: [whereabouts]`` (step 1) and ``ipam-backend: kubernetes``
    (step 1 does not say so; its section "Taking over from whereabouts" does: with the
    sqlite backend whereabouts' holds are not read)."""
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


@pytest.fixture(scope="module")
def node() -> Iterator[RealNode]:
    reason = realnode.unavailable() or anchors_missing()
    if reason:
        pytest.skip(f"real node: {reason}")
    t0 = time.monotonic()
    try:
        realnode.build_image()  # this checkout's netctl (and the base Multus' image is on)
    except NodeError as exc:
        missing = realnode.unavailable(image=realnode.netctl_image())
        if missing:
            pytest.skip(f"real node: {missing}; {str(exc).splitlines()[-1]}")
        raise
    TIMINGS["make image"] = time.monotonic() - t0
    t1 = time.monotonic()
    build_multus_image()
    anchor("whereabouts", WHEREABOUTS)
    TIMINGS["multus image"] = time.monotonic() - t1
    with RealNode() as n:
        assert n.kube is not None
        t2 = time.monotonic()
        n.import_image(MULTUS_IMAGE)
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
        n.apply(multus_manifest(n.kube.port))
        n.apply([nad("blue", f"{n.prefix}b1", BLUE), nad("green", f"{n.prefix}b2", GREEN),
                 nad("purple", f"{n.prefix}b3", PURPLE)])
        n.wait_ready("daemonset", "kube-multus-ds", "kube-system", timeout=180)
        TIMINGS.update(n.timings, **{"multus ready": time.monotonic() - t2})
        yield n
        TIMINGS["module"] = time.monotonic() - t0
    print(f"\nreal node cut-over timings (s): "
          f"{json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")
    print(f"observed: {json.dumps(NOTES, indent=1)}")


# -- what the node holds -----------------------------------------------------------------------


def conf_dir(node: RealNode) -> list[str]:
    return sorted(os.listdir(node.node_path("/etc/cni/net.d")))


def leases(node: RealNode, network: str) -> dict[str, str]:
    """host-local's reservations of ``network`` on the node: address → container id."""
    d = node.node_path(f"/var/lib/cni/networks/{network}")
    if not d.is_dir():
        return {}
    return {f.name: f.read_text().split()[0] for f in d.iterdir()
            if f.name[0].isdigit() and f.read_text().strip()}


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


def bridges(node: RealNode) -> tuple[str, ...]:
    return (node.primary_bridge, f"{node.prefix}b1", f"{node.prefix}b2", f"{node.prefix}b3")


def ports(node: RealNode) -> dict[str, int]:
    return {b: len(bridge_ports(b)) for b in bridges(node)}


def sandboxes(node: RealNode) -> set[str]:
    """The containers holding a primary address: the pods' sandboxes."""
    return set(leases(node, "primary").values())


def check_networks(node: RealNode, pod: dict[str, Any]) -> dict[str, str]:
    """:meth:`RealNode.check_networks`: eth0 (the cluster network, default), net1 and net2
    (the NADs) and this module's subnets; interface → address."""
    return node.check_networks(pod, WANT, SUBNETS)


def check_deployment(node: RealNode, app: str) -> dict[str, dict[str, str]]:
    """Every pod of ``app`` has its four networks, no address twice; by sandbox (the
    container holding the pod's primary lease), each interface's address."""
    pods = node.pods(NS, f"app={app}")
    assert len(pods) == 3
    primary = leases(node, "primary")
    out = {primary[p["status"]["podIP"]]: check_networks(node, p) for p in pods}
    assert len(out) == 3
    assert len({a for addresses in out.values() for a in addresses.values()}) == 12
    return out


def journal(node: RealNode, container: str) -> list[dict[str, Any]]:
    """netctl's journaled operations of a container, oldest first."""
    doc = json.loads(node.netctl("journal", "--container", container, "--json"))
    ops: list[dict[str, Any]] = doc["operations"]
    return sorted(ops, key=lambda o: o["id"])


def scale(node: RealNode, name: str, replicas: int) -> None:
    node.kubectl("-n", NS, "scale", f"deployment/{name}", f"--replicas={replicas}")


def need(*keys: str) -> None:
    missing = [k for k in keys if k not in STATE]
    if missing:
        pytest.skip(f"an earlier test of this module failed (no {', '.join(missing)})")


# -- the tests ---------------------------------------------------------------------------------


def test_multus_thick_gives_the_pods_their_networks(node: RealNode) -> None:
    t0 = time.monotonic()
    wait_for(lambda: "00-multus.conf" in conf_dir(node), 60, "Multus' 00-multus.conf")
    multus_conf = json.loads(node.node_path("/etc/cni/net.d/00-multus.conf").read_text())
    assert multus_conf["type"] == "multus-shim", multus_conf
    assert multus_conf["clusterNetwork"].endswith("/10-primary.conflist"), multus_conf
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
    # Multus' record of each sandbox: its delegates, the cluster network first
    assert multus_cache(node) == old
    for cid in old:
        cached = json.loads(node.node_path(f"/var/lib/cni/multus/{cid}").read_text())
        assert [d["Name"] for d in cached][1:] == [
            "default/blue", "default/green", "default/purple"], cached
    assert ports(node) == dict.fromkeys(bridges(node), 3)
    assert len(node.sandbox_netns()) == 3
    STATE["old"] = pods
    TIMINGS["1: 3 pods ready under Multus"] = time.monotonic() - t0


def test_the_switch_to_netctl_as_the_doc_says(node: RealNode) -> None:
    need("old")
    t0 = time.monotonic()
    # docs/migrating.md step 2: "Delete Multus' DaemonSet (its 00-multus.conf stays on the
    # nodes: pods keep getting their networks through Multus' shim meanwhile)"
    node.kubectl("-n", "kube-system", "delete", "daemonset", "kube-multus-ds")
    node.wait_pods_gone("kube-system", "name=multus", timeout=60)
    NOTES["conf dir once Multus' DaemonSet is deleted"] = conf_dir(node)
    NOTES["Multus' cache files left"] = len(multus_cache(node))
    # Multus v4.1's daemon removes its 00-multus.conf on SIGTERM: the runtime is back on
    # the primary alone, and a pod created now comes up without its networks, Running
    node.apply([deployment("gap", 1)])
    node.wait_ready("deployment", "gap", NS)
    (pod,) = node.pods(NS, "app=gap")
    NOTES["a pod created before netctl is installed"] = {
        "network-status": node.network_status(pod), "links": sorted(node.pod_links(pod))}
    assert node.network_status(pod) == [] and set(node.pod_links(pod)) == {"lo", "eth0"}
    STATE["gap"] = leases(node, "primary")[pod["status"]["podIP"]]
    # "then roll out netctl's with --replace-multus added to the init container's
    # install-cni --auto-config" (and step 1's ipam-takeover: [whereabouts])
    t1 = time.monotonic()
    node.install_netctl(build=False, daemonset=netctl_daemonset_replacing_multus())
    TIMINGS["2: netctl ready"] = time.monotonic() - t1
    listed = conf_dir(node)
    NOTES["conf dir once netctl is installed"] = listed
    assert listed[0] == "00-netctl.conflist", listed
    assert "00-multus.conf" not in listed
    netctl_conf = json.loads(node.node_path("/etc/cni/net.d/00-netctl.conflist").read_text())
    assert netctl_conf["plugins"][0]["clusterNetwork"] == "/etc/cni/net.d/10-primary.conflist"

    # new pods get their networks from netctl: journaled as its ADDs; whereabouts' purple
    # addresses of the pods still running are not handed out again (netctl-ipam serves
    # the whereabouts NAD, whereabouts' records untouched)
    old = STATE["old"]
    before = whereabouts_allocations(node)
    node.apply([deployment("new", 3)])
    node.wait_ready("deployment", "new", NS, timeout=120)
    pods = check_deployment(node, "new")
    new = set(pods)
    assert not new & (set(old) | {STATE["gap"]})
    for cid in new:
        ops = journal(node, cid)
        assert [(o["verb"], o["state"]) for o in ops] == [("ADD", "done")], ops
    purple = {a["net3"] for a in pods.values()}
    NOTES["whereabouts NAD: addresses under Multus, under netctl"] = [
        sorted(a["net3"] for a in old.values()), sorted(purple)]
    assert not purple & {a["net3"] for a in old.values()}, (purple, old)
    assert all(ipaddress.ip_address(a) in PURPLE for a in purple)
    assert whereabouts_allocations(node) == before
    assert multus_cache(node) == set(old)  # Multus' cache: nothing new in it
    assert ports(node) == {**dict.fromkeys(bridges(node), 6), node.primary_bridge: 7}
    STATE["new"] = pods
    TIMINGS["2: the switch"] = time.monotonic() - t0


def test_pods_from_before_the_switch_release_everything(node: RealNode) -> None:
    need("old", "gap", "new")
    old, gap, new = set(STATE["old"]), STATE["gap"], set(STATE["new"])
    t0 = time.monotonic()
    scale(node, "old", 0)
    scale(node, "gap", 0)
    node.wait_pods_gone(NS, "app in (old,gap)", timeout=120)

    def released() -> bool:
        return all(set(leases(node, n).values()) == new for n in HOST_LOCAL) and \
            ports(node) == dict.fromkeys(bridges(node), 3) and \
            len(node.sandbox_netns()) == 3 and not multus_cache(node)
    try:
        wait_for(released, 60, "the old pods' leases, veths, netns and Multus cache gone",
                 interval=0.5)
    except Exception as exc:
        raise AssertionError(
            f"{exc}\nleases: { {n: leases(node, n) for n in HOST_LOCAL} }\nports: "
            f"{ports(node)}\nnetns: {node.sandbox_netns()}\nmultus cache: "
            f"{multus_cache(node)}") from exc
    TIMINGS["3: old pods gone, all released"] = time.monotonic() - t0
    for cid in old:  # one DEL of a container netctl never saw, from Multus' cache
        ops = journal(node, cid)
        assert ops and ops[0]["verb"] == "DEL" and ops[0]["state"] == "done", ops
        assert "never saw" in ops[0]["reason"] and "Multus' cache" in ops[0]["reason"], ops
    # the pod from the gap: no Multus cache, its cluster network DELeted (its lease gone)
    ops = journal(node, gap)
    assert ops and ops[0]["verb"] == "DEL" and ops[0]["state"] == "done", ops
    assert "its cluster network" in ops[0]["reason"], ops
    NOTES["whereabouts' allocations left once the old pods are gone"] = \
        whereabouts_allocations(node)
    results = node.node_path("/var/lib/cni/results")
    NOTES["libcni result caches of the old sandboxes left"] = sorted(
        f.name for f in results.iterdir() if any(c in f.name for c in old | {gap})) \
        if results.is_dir() else []

    # the pods created under netctl are untouched, and go cleanly too
    assert check_deployment(node, "new") == STATE["new"]
    scale(node, "new", 0)
    node.wait_pods_gone(NS, "app=new", timeout=120)
    wait_for(lambda: not any(leases(node, n) for n in HOST_LOCAL)
             and not any(ports(node).values()) and not node.sandbox_netns(), 60,
             "nothing held once every pod is gone", interval=0.5)
    NOTES["netctl's addresses held at the end"] = node.held()
    NOTES["libcni result caches left at the end"] = len(list(results.iterdir())) \
        if results.is_dir() else 0
    TIMINGS["3: all released"] = time.monotonic() - t0
