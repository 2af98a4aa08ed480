"""``python -m netctl_kit.demo STEP ARGS…``: the scaffolding and the checks of
``deploy/demo.sh`` and ``deploy/tour.sh``, so that the scripts keep only what a user types
and sees (netctl's commands, the plugin exec'd as a runtime execs it, ``ip``).

Each step is one subcommand: waits (a daemon ready, its Kubernetes watches, a pod's
attachments DELeted), requests to the API server as any client makes them, and checks of
what the demo shows (addresses against the central allocator, nothing left, the
allocation history). A check prints its ``ok:`` lines; when it fails it prints why
(``demo: …``) on stderr and exits 1, and the script stops. It asks netctl only through
its commands (``--json``), never its database, and the host through ``ip``
(:mod:`netctl_kit.harness`).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import yaml
from netctl_kit import harness


class Failed(Exception):
    """A check failed: the message says what the demo expected."""


def ok(*words: object) -> None:
    print("    ok:", *words, flush=True)


def indent(text: str, mark: str = "") -> str:
    return "\n".join(f"    {mark}{line}" for line in text.rstrip("\n").splitlines())


def netctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(harness.netctl_argv(*args), capture_output=True, text=True,
                          check=False, timeout=300)


def wait(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    try:
        return harness.wait_for(cond, timeout, what)
    except harness.HarnessError as exc:
        raise Failed(str(exc)) from None


def pairs(items: Sequence[str]) -> dict[str, str]:
    """``pod=container`` arguments, in their order."""
    return dict(item.split("=", 1) for item in items)


def allocations(state: str, history: bool = False) -> list[dict[str, Any]]:
    """The central allocator's live allocations; with ``history``, every one it made."""
    if not history:
        return harness.live_allocations(state)
    found: list[dict[str, Any]] = []
    for pool in harness.netctl_json("ipam", "pools", "--state-dir", state)["pools"]:
        found += harness.netctl_json("ipam", "show", pool["key"], "--state-dir", state,
                                     "--all")["allocations"]
    return found


def v4(ns: str, ifname: str) -> str:
    """The IPv4 address (no prefix) of ``ifname`` inside netns ``ns``, or ""."""
    for addr in harness.netns_addrs(ns).get(ifname, []):
        if ipaddress.ip_interface(addr).version == 4:
            return addr.split("/")[0]
    return ""


# -- the daemon --------------------------------------------------------------------------------


def wait_ready(a: argparse.Namespace) -> None:
    """``netctl status`` answers (ready or degraded); its output shown unless ``--quiet``."""
    argv = ["status", "--socket", a.socket, "--degraded-ok"]
    argv += ["--cni-conf-dir", a.cni_conf_dir] if a.cni_conf_dir else []

    def answered() -> subprocess.CompletedProcess[str] | None:
        if a.pid and not os.path.exists(f"/proc/{a.pid}"):
            raise Failed("the daemon exited during start-up")
        proc = netctl(*argv)
        return proc if proc.returncode == 0 else None

    proc = wait(answered, a.timeout, "the daemon to answer `netctl status`")
    if not a.quiet:
        print(indent(proc.stdout))


def in_flight(state: str) -> Counter[str]:
    """The verbs of the operations the journal has running (``netctl journal --running``)."""
    ops = harness.netctl_json("journal", "--state-dir", state, "--running")["operations"]
    return Counter(op["verb"] for op in ops)


def running(a: argparse.Namespace) -> None:
    """The operations in flight: "ADD 2, DEL 1" or "none"."""
    verbs = in_flight(a.state)
    print(", ".join(f"{verb} {n}" for verb, n in sorted(verbs.items())) or "none")


def wait_running(a: argparse.Namespace) -> None:
    """An operation of VERB is in flight."""
    wait(lambda: in_flight(a.state)[a.verb] > 0, a.timeout, f"an {a.verb} in flight")


def idle(a: argparse.Namespace) -> None:
    """No operation is running."""
    if verbs := in_flight(a.state):
        raise Failed(f"operations still running: {dict(verbs)}")


def replay(a: argparse.Namespace) -> None:
    """What the start-up replay did (``netctl status --json``); no failure."""
    r = harness.netctl_json("status", "--socket", a.socket)["replay"]
    print(f"    start-up replay: {r['operations']} unfinished operation(s) closed, "
          f"{r['attachments']} half-done attachment(s) of {r['containers']} container(s) "
          "undone")
    if r["failed"]:
        raise Failed(f"replay failures: {r['failed']}")


def reconciled(a: argparse.Namespace) -> None:
    """``netctl reconcile`` DELeted the vanished container, or a round before it did."""
    plan = harness.netctl_json("reconcile", "--socket", a.socket)["plan"]
    did = (("attachments", "attachment(s) DELeted"), ("allocations", "allocation(s) released"),
           ("links", "link(s) removed"))
    print("    reconcile:", ", ".join(f"{len(plan[key])} {what}" for key, what in did))
    if any(att["container"] == a.container for att in plan["attachments"]):
        return
    # the daemon's own first round, right after its start-up replay, or a reconcile on the
    # kernel's events, usually DELetes it before anyone asks
    journal = harness.netctl_json("journal", "--state-dir", a.state, "--container", a.container)
    live = [att for att in journal["attachments"] if att["state"] != "removed"]
    by = {op["origin"] for op in journal["operations"] if op["verb"] == "DEL"} & {
        "reconcile", "event"}
    if live or not by:
        raise Failed(f"the reconciler did not DEL {a.container}, whose netns vanished")
    names = {"reconcile": "the first round after the replay", "event": "the kernel events"}
    print(f"    (it was DELeted already, before it was asked: by "
          f"{' and '.join(names[o] for o in sorted(by))})")


# -- the pods ----------------------------------------------------------------------------------


def answer(a: argparse.Namespace) -> None:
    """One line of the plugin's answer in FILE (a result, or an error); with ``--code``,
    the error it must be."""
    try:
        with open(a.file) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        print("no answer")
        doc = {}
    if "code" in doc:
        print(f"code {doc['code']}: {doc.get('msg', '')}")
    elif doc:
        print("cniVersion", doc["cniVersion"], "|", ", ".join(
            doc["interfaces"][ip["interface"]]["name"] + " " + ip["address"]
            for ip in doc["ips"]))
    if a.code is not None and (doc.get("code") != a.code or a.says not in doc.get("msg", "")):
        raise Failed(f"the answer is {doc}, not code {a.code} naming {a.says!r}")


def show_pods(a: argparse.Namespace) -> None:
    """Each pod's interfaces as read inside its netns, next to what the central allocator
    (netctl-ipam, in the journal) holds for that container and interface."""
    held = {(x["container"], x["ifname"]): f"{x['address']}  (pool {x['pool']})"
            for x in allocations(a.state)}
    row = "    {:<6} {:<9} {:<6} {:<15} {}"
    print(row.format("POD", "INTERFACE", "STATE", "IN THE NETNS", "ALLOCATED BY netctl-ipam"))
    for pod, cid in pairs(a.pods).items():
        lines = harness.ip("-n", a.prefix + pod, "-br", "-4", "addr").stdout.splitlines()
        for cols in (line.split() for line in lines):
            if cols[0] != "lo":
                ifname = cols[0].split("@")[0]
                print(row.format(pod, ifname, cols[1], cols[2] if len(cols) > 2 else "",
                                 held.get((cid, ifname), "none")))


def attached(a: argparse.Namespace) -> None:
    """Every pod has an address of each network; they are exactly the central allocator's
    live allocations; the bridge has a port per pod (saved for :func:`clean`)."""
    pods = pairs(a.pods)
    want = set()
    for pod, cid in pods.items():
        for ifname, net in (("eth0", a.eth0), ("net1", a.net1)):
            addr = v4(a.prefix + pod, ifname)
            if not addr or ipaddress.ip_address(addr) not in ipaddress.ip_network(net):
                raise Failed(f"{pod} has no {net} address on {ifname} (got {addr!r})")
            want.add((cid, ifname, addr))
    ok(f"every pod has eth0 on {a.eth0} and net1 on {a.net1}")
    got = {(x["container"], x["ifname"], x["address"].split("/")[0])
           for x in allocations(a.state)}
    if got != want:
        raise Failed("the central allocator's live allocations are not the pods' addresses;"
                     f" allocator: {sorted(got)}; pods: {sorted(want)}")
    ok("each pod address is netctl-ipam's live allocation for that container and interface",
       f"({len(got)} allocations, no other)")
    ports = harness.bridge_ports(a.bridge)
    if len(ports) != len(pods):
        raise Failed(f"expected {len(pods)} ports on {a.bridge}, found: {ports}")
    with open(a.save, "w") as fh:
        fh.write("\n".join(ports))
    ok(f"{a.bridge} has {len(pods)} ports: {' '.join(ports)}")


def clean(a: argparse.Namespace) -> None:
    """After the DELs: no interface, no port, none of the saved host veths, no live
    allocation; each allocation released by a DEL and each attachment removed (history):
    two per pod, and ``--plugged`` more (plugged by ``netctl attach``, unplugged by
    ``netctl detach``)."""
    pods = pairs(a.pods)
    nothing_left(argparse.Namespace(netns=[a.prefix + p for p in pods], bridge=[], state=[]))
    ok("no interface but lo in any pod netns")
    nothing_left(argparse.Namespace(netns=[], bridge=[a.bridge], state=[]))
    ok(f"no port left on {a.bridge}")
    with open(a.veths) as fh:
        veths = fh.read().split()
    if left := set(veths) & set(harness.host_links()):
        raise Failed(f"host veths still there: {sorted(left)}")
    ok(f"none of the pods' host veths is left ({' '.join(veths)})")
    nothing_left(argparse.Namespace(netns=[], bridge=[], state=[a.state]))
    journal = harness.netctl_json("journal", "--state-dir", a.state)
    want = 2 * len(pods) + a.plugged
    dels = {op["id"] for op in journal["operations"] if op["verb"] == "DEL"}
    released = [x for x in allocations(a.state, history=True) if x["released_op"] in dels]
    if len(released) != want:
        raise Failed(f"{len(released)} allocations released by a DEL, expected {want}")
    atts = journal["attachments"]
    if len(atts) != want:
        raise Failed(f"the journal has {len(atts)} attachments, expected {want}")
    if live := [x for x in atts if x["state"] != "removed" or x["until"] is None]:
        raise Failed("attachments not removed: " + ", ".join(
            f"{x['pod']} {x['network']} {x['ifname']} ({x['state']})" for x in live))
    ok(f"no live allocation (all {want} released by the DELs, kept as history)")
    ok(f"the journal shows all {want} attachments removed")


def nothing_left(a: argparse.Namespace) -> None:
    """Only lo in each netns, no port on each bridge, no live allocation in each state."""
    for ns in a.netns:
        if (links := harness.netns_links(ns)) != ["lo"]:
            raise Failed(f"{ns} still has interfaces: {links}")
    for bridge in a.bridge:
        if ports := harness.bridge_ports(bridge):
            raise Failed(f"ports left on {bridge}: {ports}")
    for state in a.state:
        if live := allocations(state):
            raise Failed(f"live allocations left in {state}: " + ", ".join(
                f"{x['container']} {x['ifname']} {x['address']}" for x in live))


def held_at(state: str, addr: str, at: str) -> tuple[set[str], list[dict[str, Any]]]:
    """The pods ``netctl journal --ip ADDR --at AT`` names, and the allocations it lists."""
    doc = harness.netctl_json("journal", "--state-dir", state, "--ip", addr, "--at", at)
    return {x["pod"] for x in doc["attachments"] + doc["allocations"]}, doc["allocations"]


def who_had(a: argparse.Namespace) -> None:
    """The journal names POD as the holder of ADDR at AT; the allocation history agrees
    (allocated by its ADD, released by the runtime's DEL); nobody holds ADDR now."""
    holders, allocs = held_at(a.state, a.addr, a.at)
    if holders != {a.pod}:
        raise Failed(f"the journal says {a.addr} was held at {a.at} by {sorted(holders)}, "
                     f"not {a.pod}")
    ok(f"the journal answers: at {a.at}, {a.addr} was held by {a.pod}")
    if len(allocs) != 1:
        raise Failed(f"{len(allocs)} allocations held {a.addr} at {a.at}, expected 1")
    ops = {op["id"]: op for op in harness.netctl_json(
        "journal", "--state-dir", a.state, "--container", a.container)["operations"]}
    x = allocs[0]
    add, rm = ops.get(x["allocated_op"], {}), ops.get(x["released_op"], {})

    def fmt(t: float) -> str:
        return datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")

    print(f"    allocation {x['address']} (pool {x['pool']}) held by {x['pod']}, "
          f"container {x['container']}, {x['ifname']}:")
    print(f"        allocated {fmt(x['since'])} by its {add.get('verb', '-')}, released "
          f"{fmt(x['until']) if x['until'] else '(never)'} by {rm.get('verb', '-')} "
          f"({rm.get('origin', '-')})")
    got = (x["pod"], x["container"], add.get("verb"), rm.get("verb"), rm.get("origin"))
    if got != (a.pod, a.container, "ADD", "DEL", "runtime"):
        raise Failed(f"the allocation of {a.addr} at {a.at} is {got}; expected {a.pod}'s, "
                     "allocated by its ADD and released by the runtime's DEL")
    ok(f"the allocation history agrees: {a.pod}'s, allocated by its ADD, released by its DEL")
    now = datetime.now().astimezone().isoformat()
    if holders := held_at(a.state, a.addr, now)[0]:
        raise Failed(f"the journal says {a.addr} is held now, by {sorted(holders)}")
    ok(f"and now ({now}) nobody holds {a.addr}")


# -- Kubernetes mode ---------------------------------------------------------------------------


def api(kubeconfig: str, method: str, path: str, body: Any = None,
        content_type: str = "application/json") -> Any:
    """A request to the API server over its real HTTP API, as any client makes it (URL,
    token and CA from ``kubeconfig``); the answer's document."""
    with open(kubeconfig) as fh:
        doc = yaml.safe_load(fh)
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    headers = {"Content-Type": content_type}
    if user.get("token"):
        headers["Authorization"] = f"Bearer {user['token']}"
    request = urllib.request.Request(cluster["server"] + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
    tls = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),  # loopback only
                                         urllib.request.HTTPSHandler(context=tls))
    try:
        with opener.open(request, timeout=10) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raise Failed(f"{method} {path}: {exc.code} {exc.read().decode()}") from None


def create(a: argparse.Namespace) -> None:
    """Objects created through the API: a namespace, a node, a NAD (CONFIG its spec.config)
    or a pod (NETWORKS its annotation; its uid printed)."""
    meta: dict[str, Any] = {"name": a.name}
    if a.kind == "namespace":
        api(a.kubeconfig, "POST", "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    elif a.kind == "node":
        api(a.kubeconfig, "POST", "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": meta})
    elif a.kind == "nad":
        api(a.kubeconfig, "POST", f"/apis/k8s.cni.cncf.io/v1/namespaces/{a.namespace}/"
            "network-attachment-definitions",
            {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
             "metadata": {**meta, "namespace": a.namespace}, "spec": {"config": a.spec}})
    else:
        meta.update(namespace=a.namespace,
                    annotations={"k8s.v1.cni.cncf.io/networks": a.spec})
        pod = api(a.kubeconfig, "POST", f"/api/v1/namespaces/{a.namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": a.node,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause"}]}})
        print(pod["metadata"]["uid"])


def delete_pod(a: argparse.Namespace) -> None:
    """At once (gracePeriodSeconds 0): no kubelet runs here to finish a graceful deletion."""
    api(a.kubeconfig, "DELETE", f"/api/v1/namespaces/{a.namespace}/pods/{a.name}",
        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})


def wait_kube(a: argparse.Namespace) -> None:
    """The daemon is ready, watching pods and NADs, with ``--nads`` NADs cached."""
    def watching() -> bool:
        proc = netctl("status", "--socket", a.socket, "--degraded-ok", "--json")
        if proc.returncode != 0:
            return False
        doc = json.loads(proc.stdout)
        k = doc["kubernetes"]
        return bool(doc["ready"] and k["pods"]["state"] == k["nads"]["state"] == "watching"
                    and k["nads"]["objects"] == a.nads)

    wait(watching, a.timeout, f"the watches of {a.socket}")


def kube_pod(a: argparse.Namespace) -> None:
    """POD's interfaces are WANT ("IFNAME NETWORK ADDRESS-PREFIX"), and its network-status in
    the API names the same networks, interfaces and addresses (default: eth0); with
    ``--wait``, waited for that long (a hot-plug under way)."""
    deadline = time.monotonic() + a.wait
    while True:
        try:
            have, text = _pod_as_wanted(a)
            break
        except Failed:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
    print("\n".join(f"    {a.name}: {ifname} {addr}" for ifname, addr in have.items()))
    print("    network-status, as the API server has it:")
    print(indent(text, "| "))
    ok(f"{a.name} has {', '.join(have)}, and its network-status says so (default: eth0)")


def _pod_as_wanted(a: argparse.Namespace) -> tuple[dict[str, str], str]:
    """POD's interfaces and its network-status, checked against WANT (:func:`kube_pod`)."""
    have = {ifname: addrs[0] for ifname, addrs in harness.netns_addrs(a.netns).items()
            if ifname != "lo" and addrs}
    want = [w.split() for w in a.want]
    if sorted(have) != sorted(i for i, _, _ in want):
        raise Failed(f"interfaces {sorted(have)}, expected {sorted(i for i, _, _ in want)}")
    for ifname, _, prefix in want:
        if not have[ifname].startswith(prefix):
            raise Failed(f"{ifname} has {have[ifname]}, expected {prefix}…")
    pod = api(a.kubeconfig, "GET", f"/api/v1/namespaces/{a.namespace}/pods/{a.name}")
    text = pod["metadata"]["annotations"].get("k8s.v1.cni.cncf.io/network-status", "[]")
    got = {(e["interface"], e["name"], tuple(e["ips"]), bool(e.get("default")))
           for e in json.loads(text)}
    expected = {(ifname, net, (have[ifname].split("/")[0],), ifname == "eth0")
                for ifname, net, _ in want}
    if got != expected:
        raise Failed(f"network-status says {sorted(got)}, expected {sorted(expected)}")
    return have, text


def annotate(a: argparse.Namespace) -> None:
    """POD's networks annotation set to NETWORKS through the API (a merge patch, as
    ``kubectl annotate --overwrite`` sends it)."""
    api(a.kubeconfig, "PATCH", f"/api/v1/namespaces/{a.namespace}/pods/{a.name}",
        {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": a.networks}}},
        content_type="application/merge-patch+json")


def pod_events(a: argparse.Namespace) -> None:
    """POD's Events with a reason in REASONS, waited for (the daemon posts them after the
    change's network-status); printed as a user's ``kubectl get events`` shows them."""
    deadline = time.monotonic() + a.timeout
    while True:
        events = [e for e in api(a.kubeconfig, "GET",
                                 f"/api/v1/namespaces/{a.namespace}/events")["items"]
                  if e["involvedObject"]["name"] == a.name and e["reason"] in a.reasons]
        if {e["reason"] for e in events} >= set(a.reasons):
            break
        if time.monotonic() >= deadline:
            raise Failed(f"no Event {sorted(set(a.reasons) - {e['reason'] for e in events})} "
                         f"on pod {a.name} within {a.timeout:g} s")
        time.sleep(0.1)
    for e in events:
        print(f"    Event {e['type']} {e['reason']}: {e['message']}")


def api_calls(a: argparse.Namespace) -> None:
    """The node's API calls since it started: no pod GET, one pod PATCH per ADD."""
    calls = harness.netctl_json("status", "--socket", a.socket,
                                "--degraded-ok")["kubernetes"]["api_calls"]
    print(f"    API calls of {a.node} since it started:",
          ", ".join(f"{what} {n}" for what, n in calls.items()))
    reads = {what: n for what, n in calls.items() if what.startswith("get pods")}
    if reads or calls.get("patch pods", 0) != a.patches:
        raise Failed(f"{a.node} made pod GETs {reads} and {calls.get('patch pods', 0)} pod "
                     f"PATCHes; expected no GET and {a.patches} PATCH")


def deleted_by(a: argparse.Namespace) -> None:
    """Every attachment of CONTAINER is removed (waiting for it), by DELs of ORIGIN (and
    of ``hotplug``: networks unplugged from the running pod before)."""
    def gone() -> dict[str, Any] | None:
        doc = harness.netctl_json("journal", "--state-dir", a.state, "--container", a.container)
        atts = doc["attachments"]
        return doc if atts and all(x["state"] == "removed" for x in atts) else None

    doc = wait(gone, a.timeout, f"the attachments of {a.container} to be DELeted")
    if (origins := {o["origin"] for o in doc["operations"]
                    if o["verb"] == "DEL" and o["origin"] != "hotplug"}) != {a.origin}:
        raise Failed(f"the attachments were DELeted by {sorted(origins)}, not {a.origin}")


def wait_file(a: argparse.Namespace) -> None:
    """PATH exists (the API server writes its kubeconfig once it listens)."""
    wait(lambda: os.path.exists(a.path), a.timeout, a.path)


def outage(a: argparse.Namespace) -> None:
    """SIGUSR1 to the API server process: it stops listening (waits until its log says so)."""
    os.kill(a.pid, signal.SIGUSR1)

    def said() -> bool:
        with open(a.log) as fh:
            return "outage" in fh.read()

    wait(said, 10, "the outage")


# -- the tour's -----------------------------------------------------------------------------


def free_port(a: argparse.Namespace) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def metrics(a: argparse.Namespace) -> None:
    """The series of ``URL`` that are not 0 (no comments, no histogram buckets)."""
    with urllib.request.urlopen(a.url, timeout=5) as reply:
        body = reply.read().decode()
    for line in body.splitlines():
        if not (line.startswith("#") or line.endswith(" 0.0") or "_bucket" in line):
            print(line)


def remove(a: argparse.Namespace) -> None:
    """Every netns and host link named PREFIX… (the leftovers of a run)."""
    if left := harness.remove_host_objects(a.prefix):
        raise Failed(f"cannot remove {left}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m netctl_kit.demo")
    sub = p.add_subparsers(dest="step", required=True)

    def step(fn: Callable[[argparse.Namespace], None], *args: str,
             **opts: dict[str, Any]) -> argparse.ArgumentParser:
        s = sub.add_parser(fn.__name__.replace("_", "-"), help=(fn.__doc__ or "").split("\n")[0])
        for arg in args:
            s.add_argument(arg, nargs="*" if arg in ("pods", "want", "reasons") else None)
        for name, kw in opts.items():
            s.add_argument("--" + name.replace("_", "-"), **kw)
        s.set_defaults(fn=fn)
        return s

    step(wait_ready, "socket", cni_conf_dir={}, pid={"type": int}, quiet={"action": "store_true"},
         timeout={"type": float, "default": 30.0})
    step(running, "state")
    step(wait_running, "state", "verb", timeout={"type": float, "default": 30.0})
    step(idle, "state")
    step(replay, "socket")
    step(reconciled, "socket", "state", "container")
    step(answer, "file", code={"type": int}, says={"default": ""})
    step(show_pods, "state", "prefix", "pods")
    step(attached, "state", "prefix", "bridge", "pods", eth0={}, net1={}, save={})
    step(clean, "state", "prefix", "bridge", "pods", veths={},
         plugged={"type": int, "default": 0})
    step(nothing_left, netns={"action": "append", "default": []},
         bridge={"action": "append", "default": []},
         state={"action": "append", "default": []})
    step(who_had, "state", "addr", "at", "pod", "container")
    step(create, "kubeconfig", "kind", "name", namespace={}, node={}, spec={})
    step(delete_pod, "kubeconfig", "namespace", "name")
    step(wait_kube, "socket", nads={"type": int}, timeout={"type": float, "default": 30.0})
    step(kube_pod, "kubeconfig", "namespace", "name", "netns", "want",
         wait={"type": float, "default": 0.0})
    step(annotate, "kubeconfig", "namespace", "name", "networks")
    step(pod_events, "kubeconfig", "namespace", "name", "reasons",
         timeout={"type": float, "default": 30.0})
    step(api_calls, "socket", "node", patches={"type": int, "default": 1})
    step(deleted_by, "state", "container", "origin", timeout={"type": float, "default": 30.0})
    step(wait_file, "path", timeout={"type": float, "default": 60.0})
    step(outage, "log", pid={"type": int})
    step(free_port)
    step(metrics, "url")
    step(remove, "prefix")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.fn(args)
    except (Failed, harness.HarnessError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
