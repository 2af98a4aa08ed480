"""A node switched from Multus thick to netctl, on a real single-node cluster
(:class:`netctl.kit.realnode.RealNode`), as docs/migrating.md says to switch.

1. Multus thick v4.1.4 (the anchors' ``multus-daemon`` and ``multus-shim``, in an image built
   here from netctl's Debian base: no registry) runs as the DaemonSet of
   ``multus-thick.yaml`` (laid out as Multus' own ``deployments/multus-daemonset-thick.yml``),
   Ready; it writes ``00-multus.conf`` in front of the node's primary (a bridge with
   host-local) and a Deployment of 3 pods gets two secondary networks from it (bridge NADs
   with host-local IPAM): network-status written by Multus, the interfaces in the pods'
   netns, Multus' scratch cache of each sandbox under ``/var/lib/cni/multus``.
2. The switch, docs/migrating.md's step 2 literally: Multus' DaemonSet deleted, then netctl
   installed as docs/kubernetes.md says (:meth:`~netctl.kit.realnode.RealNode.install_netctl`)
   with ``--replace-multus`` added to the init container's ``install-cni --auto-config``.
   Multus v4.1's daemon removes its ``00-multus.conf`` when its DaemonSet is deleted (on
   SIGTERM), not as the doc says: a pod created in that gap comes up on the primary
   network alone, Running, no network-status (asserted: it is what a user would meet).
   New pods get their networks from netctl (its journal holds their ADDs).
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
MULTUS_IMAGE = "localhost/multus-thick:v4.1.4"
MULTUS_MANIFEST = Path(__file__).with_name("multus-thick.yaml")
BASE_IMAGE = "localhost/netctl-base:bookworm"  # `make image`'s (Makefile: BASE_IMAGE)
BUILD = ROOT / "build" / "multus"
BLUE = ipaddress.IPv4Network("10.219.1.0/24")
GREEN = ipaddress.IPv4Network("10.219.2.0/24")
SUBNETS = {"primary": ipaddress.ip_network(PRIMARY_SUBNET), "blue": BLUE, "green": GREEN}
WANT = {"eth0": "primary", "net1": "default/blue", "net2": "default/green"}
TIMINGS: dict[str, float] = {}
NOTES: dict[str, Any] = {}  # what the node showed at the doc's steps, printed at the end
STATE: dict[str, Any] = {}  # what a test hands to the next (they run in this order)


# -- Multus' image, built here ---------------------------------------------------------------


def anchors_missing() -> str | None:
    for name in MULTUS_BINARIES:
        if not (ANCHORS / f"{name}.gz").exists():
            return (f"no {ANCHORS / name}.gz (Multus thick v4.1.4): set NETCTL_ANCHORS_DIR "
                    "to a dir holding multus-daemon.gz and multus-shim.gz, or put "
                    "../shared/anchors beside the repository")
    return None


def build_multus_image() -> None:
    """``localhost/multus-thick:v4.1.4``: netctl's Debian base and the anchors' static
    binaries at Multus' paths (``/usr/src/multus-cni/bin``), built by podman with no
    network (layers cached: seconds once built)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    for name in MULTUS_BINARIES:
        packed, out = ANCHORS / f"{name}.gz", BUILD / name
        if out.exists() and out.stat().st_mtime >= packed.stat().st_mtime:
            continue
        part = BUILD.parent / f".{name}.{os.getpid()}.part"  # outside the build context
        with gzip.open(packed, "rb") as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        part.chmod(0o755)
        part.rename(out)
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
    container's ``install-cni --auto-config`` (docs/migrating.md, step 2)."""
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "daemonset.yaml").read_text()) if d]
    out = copy.deepcopy(docs)
    for doc in out:
        if doc["kind"] == "DaemonSet":
            (init,) = doc["spec"]["template"]["spec"]["initContainers"]
            assert init["name"] == "install-cni" and "--auto-config" in init["command"]
            init["command"].append("--replace-multus")
    return out


# -- the workload -------------------------------------------------------------------------------


def nad(name: str, bridge: str, subnet: ipaddress.IPv4Network) -> dict[str, Any]:
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": False,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": str(subnet)}]]}}]}
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"config": json.dumps(config)}}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {
                         "metadata": {"labels": {"app": name},
                                      "annotations": {NETWORKS: "blue,green"}},
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
    TIMINGS["multus image"] = time.monotonic() - t1
    with RealNode() as n:
        assert n.kube is not None
        t2 = time.monotonic()
        n.import_image(MULTUS_IMAGE)
        n.kubectl("apply", "-f", str(CRDS / "network-attachment-definitions.yaml"))
        n.apply(multus_manifest(n.kube.port))
        n.apply([nad("blue", f"{n.prefix}b1", BLUE), nad("green", f"{n.prefix}b2", GREEN)])
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


def multus_cache(node: RealNode) -> set[str]:
    d = node.node_path("/var/lib/cni/multus")
    return {f.name for f in d.iterdir() if f.is_file()} if d.is_dir() else set()


def bridges(node: RealNode) -> tuple[str, ...]:
    return (node.primary_bridge, f"{node.prefix}b1", f"{node.prefix}b2")


def ports(node: RealNode) -> dict[str, int]:
    return {b: len(bridge_ports(b)) for b in bridges(node)}


def sandboxes(node: RealNode) -> set[str]:
    """The containers holding a primary address: the pods' sandboxes."""
    return set(leases(node, "primary").values())


def check_networks(node: RealNode, pod: dict[str, Any]) -> dict[str, str]:
    """The pod's network-status names eth0 (the cluster network, default), net1 and net2
    (the NADs), each address in its network's subnet and on that interface in the pod's
    netns (with its MAC), no other interface but lo; interface → address."""
    name = pod["metadata"]["name"]
    status = node.network_status(pod)
    by_if = {e["interface"]: e for e in status if e.get("interface")}
    assert {i: e["name"] for i, e in by_if.items()} == WANT, (name, status)
    assert by_if["eth0"].get("default") is True, status
    links = node.pod_links(pod)
    assert set(links) == {"lo", *WANT}, (name, links)
    out = {}
    for ifname, entry in by_if.items():
        assert sorted(entry.get("ips", [])) == links[ifname]["ips"], (name, entry, links)
        assert entry.get("mac", "").lower() == links[ifname]["mac"].lower(), (name, entry)
        (address,) = entry["ips"]
        assert ipaddress.ip_address(address) in SUBNETS[entry["name"].split("/")[-1]]
        out[ifname] = address
    assert pod["status"]["podIP"] == out["eth0"]
    return out


def check_deployment(node: RealNode, app: str) -> set[str]:
    """Every pod of ``app`` has its three networks, no address twice; their sandboxes (the
    containers holding their primary leases)."""
    pods = node.pods(NS, f"app={app}")
    assert len(pods) == 3
    seen: set[str] = set()
    for pod in pods:
        seen.update(check_networks(node, pod).values())
    assert len(seen) == 9
    primary = leases(node, "primary")
    ids = {primary[p["status"]["podIP"]] for p in pods}
    assert len(ids) == 3
    return ids


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
    old = check_deployment(node, "old")
    assert set(leases(node, "blue").values()) == old == set(leases(node, "green").values())
    # Multus' record of each sandbox: its delegates, the cluster network first
    assert multus_cache(node) == old
    for cid in old:
        cached = json.loads(node.node_path(f"/var/lib/cni/multus/{cid}").read_text())
        assert [d["Name"] for d in cached][1:] == ["default/blue", "default/green"], cached
    assert ports(node) == dict.fromkeys(bridges(node), 3)
    assert len(node.sandbox_netns()) == 3
    STATE["old"] = old
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
    gap = deployment("gap", 1)
    node.apply([gap])
    node.wait_ready("deployment", "gap", NS)
    (pod,) = node.pods(NS, "app=gap")
    NOTES["a pod created before netctl is installed"] = {
        "network-status": node.network_status(pod), "links": sorted(node.pod_links(pod))}
    assert node.network_status(pod) == [] and set(node.pod_links(pod)) == {"lo", "eth0"}
    STATE["gap"] = leases(node, "primary")[pod["status"]["podIP"]]
    # "then roll out netctl's with --replace-multus added to the init container's
    # install-cni --auto-config"
    t1 = time.monotonic()
    node.install_netctl(build=False, daemonset=netctl_daemonset_replacing_multus())
    TIMINGS["2: netctl ready"] = time.monotonic() - t1
    listed = conf_dir(node)
    NOTES["conf dir once netctl is installed"] = listed
    assert listed[0] == "00-netctl.conflist", listed
    assert "00-multus.conf" not in listed
    netctl_conf = json.loads(node.node_path("/etc/cni/net.d/00-netctl.conflist").read_text())
    assert netctl_conf["plugins"][0]["clusterNetwork"] == "/etc/cni/net.d/10-primary.conflist"

    # new pods get their networks from netctl: journaled as its ADDs
    node.apply([deployment("new", 3)])
    node.wait_ready("deployment", "new", NS, timeout=120)
    new = check_deployment(node, "new")
    assert not new & (STATE["old"] | {STATE["gap"]})
    for cid in new:
        ops = journal(node, cid)
        assert [(o["verb"], o["state"]) for o in ops] == [("ADD", "done")], ops
    assert multus_cache(node) == STATE["old"]  # Multus' cache: nothing new in it
    assert ports(node) == {**dict.fromkeys(bridges(node), 6), node.primary_bridge: 7}
    STATE["new"] = new
    TIMINGS["2: the switch"] = time.monotonic() - t0


def test_pods_from_before_the_switch_release_everything(node: RealNode) -> None:
    need("old", "gap", "new")
    old, gap, new = STATE["old"], STATE["gap"], STATE["new"]
    t0 = time.monotonic()
    scale(node, "old", 0)
    scale(node, "gap", 0)
    node.wait_pods_gone(NS, "app in (old,gap)", timeout=120)

    def released() -> bool:
        held = {n: set(leases(node, n).values()) for n in SUBNETS}
        return all(h == new for h in held.values()) and \
            ports(node) == dict.fromkeys(bridges(node), 3) and \
            len(node.sandbox_netns()) == 3 and not multus_cache(node)
    try:
        wait_for(released, 60, "the old pods' leases, veths, netns and Multus cache gone",
                 interval=0.5)
    except Exception as exc:
        raise AssertionError(
            f"{exc}\nleases: { {n: leases(node, n) for n in SUBNETS} }\nports: "
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
    results = node.node_path("/var/lib/cni/results")
    NOTES["libcni result caches of the old sandboxes left"] = sorted(
        f.name for f in results.iterdir() if any(c in f.name for c in old | {gap})) \
        if results.is_dir() else []

    # the pods created under netctl are untouched, and go cleanly too
    assert check_deployment(node, "new") == new
    scale(node, "new", 0)
    node.wait_pods_gone(NS, "app=new", timeout=120)
    wait_for(lambda: not any(leases(node, n) for n in SUBNETS)
             and not any(ports(node).values()) and not node.sandbox_netns(), 60,
             "nothing held once every pod is gone", interval=0.5)
    NOTES["libcni result caches left at the end"] = len(list(results.iterdir())) \
        if results.is_dir() else 0
    TIMINGS["3: all released"] = time.monotonic() - t0
