"""We test these aspects of hot-plug in Kubernetes mode (a Kubernetes-mode daemon against the
fake API server, the thin plugin run as the runtime would, real netns): a network added to
a running pod's annotation is attached (its interface in the netns, an ADD of origin
``hotplug`` in the journal, network-status rewritten, a Normal Event); two added and one
removed in one change; a network without an interface name unplugged by removing it; a
failing delegate compensated with a Warning Event and not tried again until the
annotation changes; an attribute change (``ips``) refused without the opt-in annotation
and applied (detach + attach) with it; a hostNetwork pod refused; a stale or wrong
network-status never makes a double attach; a runtime DEL cancels a hot-plug in flight
(compensated); an annotation changed during the sandbox's ADD is applied after it; a
change made while the daemon was down is applied at its start; ``netctl attach`` is
refused in Kubernetes mode, saying the annotation is the source of truth.

Subnets: 10.184.0.0/24 (cluster), 10.184.1.0/24 (blue), 10.184.2.0/24 (green),
10.184.3.0/24 (red), 10.184.4.0/24 (broken)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb
from netctl_kit.harness import netctl_argv, run
from netctl_kit.kubefake import FakeKube, nad

from netctl.journal import query
from tests.conftest import (
    Background,
    Daemon,
    bridge_ports,
    netns_addrs,
    netns_links,
    step_states,
    wait_for,
)
from tests.integration.test_kube_mode import _net, add_pod, cni, start

pytestmark = [pytest.mark.netns, pytest.mark.servers("fake")]

NETWORKS = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
REPLACE = "netctl.dev/hotplug-replace"


def setup(daemon: Daemon, kube: FakeKube, tmp_path: Path) -> None:
    """The daemon with networks cluster, blue, green (:func:`start`), red, and broken (a
    bridge, then the fail plugin)."""
    start(daemon, kube, tmp_path)
    kube.create("network-attachment-definitions", nad(
        "red", "default", _net(daemon, "red", "k3", "10.184.3.0/24")))
    broken = _net(daemon, "broken", "k4", "10.184.4.0/24")
    broken["plugins"].append({"type": "fail"})
    kube.create("network-attachment-definitions", nad("broken", "default", broken))
    wait_for(lambda: daemon.status()["kubernetes"]["nads"]["objects"] == 5, 10, "the NADs")


def running(daemon: Daemon, kube: FakeKube, netns: Callable[[], str], name: str,
            networks: str = "", **annotations: str) -> tuple[str, str]:
    """A pod (with ``networks``) whose sandbox ``c<name>`` the runtime ADDed: its uid and
    netns."""
    notes = {NETWORKS: networks, **annotations} if networks else dict(annotations)
    uid = add_pod(kube, name, notes)
    wait_for(lambda: any(p for p in kube.list("pods", "default")
                         if p["metadata"]["name"] == name), 5, "the pod")
    ns = netns()
    res = cni(daemon, "ADD", f"c{name}", ns, name, uid)
    assert res.rc == 0, res.describe()
    return uid, ns


def annotate(kube: FakeKube, name: str, networks: str | None = None, **more: str) -> None:
    notes: dict[str, Any] = dict(more)
    if networks is not None:
        notes[NETWORKS] = networks
    kube.patch("pods", "default", name, {"metadata": {"annotations": notes}})


def status_of(kube: FakeKube, name: str) -> dict[str, tuple[str, list[str]]]:
    """The pod's network-status: interface → (network, addresses)."""
    pod = kube.get("pods", "default", name)
    assert pod is not None
    value = pod["metadata"].get("annotations", {}).get(STATUS)
    return {e["interface"]: (e["name"], e.get("ips", [])) for e in json.loads(value or "[]")}


def events_of(kube: FakeKube, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the pod's Events, oldest first."""
    return [(e["type"], e["reason"], e["message"]) for e in kube.list("events", "default")
            if e["involvedObject"]["name"] == name]


def hotplug_ops(daemon: Daemon, container: str) -> list[tuple[str, str]]:
    ops = daemon.journal("--container", container)["operations"]
    return [(o["verb"], o["state"]) for o in sorted(ops, key=lambda o: o["id"])
            if o["origin"] == "hotplug" and o["verb"] != "ANNOTATE"]


def ops_are(daemon: Daemon, container: str, *ops: tuple[str, str]) -> None:
    """Wait until the container's hot-plug operations (verb, state) are ``ops``."""
    wait_for(lambda: hotplug_ops(daemon, container) == list(ops), 20, f"operations {ops}")


def test_a_network_added_to_the_annotation_is_attached_and_removed_detached(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)
    uid, ns = running(daemon, kube, netns, "p1", "blue")
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}

    annotate(kube, "p1", "blue,green")
    ops_are(daemon, "cp1", ("ADD", "done"))
    assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net2"}
    green = netns_addrs(ns)["net2"]
    assert green[0].startswith("10.184.2.")
    status = wait_for(lambda: (s := status_of(kube, "p1")) and "net2" in s and s, 10,
                      "network-status rewritten")
    assert status["net2"] == ("default/green", [green[0].split("/")[0]])
    assert status["net1"][0] == "default/blue" and status["eth0"][0] == "kube-system/cluster"
    wait_for(lambda: ("Normal", "NetworkAttached",
                      f"network default/green attached as net2 ({green[0]})")
             in events_of(kube, "p1"), 10, "the Normal Event")

    # unplugged by removing it: no interface name needed
    annotate(kube, "p1", "blue")
    ops_are(daemon, "cp1", ("ADD", "done"), ("DEL", "done"))
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    wait_for(lambda: set(status_of(kube, "p1")) == {"eth0", "net1"}, 10, "status rewritten")
    wait_for(lambda: ("Normal", "NetworkDetached", "network default/green detached from net2")
             in events_of(kube, "p1"), 10, "the Normal Event")
    assert bridge_ports(daemon.name("k2")) == []
    counts = daemon.status()["kubernetes"]["hotplug"]
    assert (counts["rounds"], counts["attached"], counts["detached"], counts["failed"]) == (
        2, 1, 1, 0)

    # netctl attach/detach stay refused: the annotation is the source of truth
    proc = run(netctl_argv("attach", "--container", "cp1", "--network", "red", "--socket",
                           daemon.socket))
    assert proc.returncode == 1 and b"source of truth" in proc.stderr, proc.stderr

    assert cni(daemon, "DEL", "cp1", ns, "p1", uid).rc == 0
    assert netns_links(ns) == ["lo"]
    assert daemon.live_attachments_of(["cp1"]) == 0


def test_two_added_and_one_removed_in_one_change(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)
    uid, ns = running(daemon, kube, netns, "p2", "blue")
    annotate(kube, "p2", "green@data0,red")
    ops_are(daemon, "cp2", ("DEL", "done"), ("ADD", "done"), ("ADD", "done"))
    # blue detached first: its net1 is free again, red takes it
    assert set(netns_links(ns)) == {"lo", "eth0", "data0", "net1"}
    addrs = netns_addrs(ns)
    assert addrs["data0"][0].startswith("10.184.2.") and addrs["net1"][0].startswith(
        "10.184.3.")
    assert bridge_ports(daemon.name("k1")) == []
    status = wait_for(lambda: (s := status_of(kube, "p2")) and "data0" in s and s, 10,
                      "network-status rewritten")
    assert {k: v[0] for k, v in status.items()} == {
        "eth0": "kube-system/cluster", "data0": "default/green", "net1": "default/red"}
    wait_for(lambda: sorted(r for t, r, _ in events_of(kube, "p2") if t == "Normal") == [
        "NetworkAttached", "NetworkAttached", "NetworkDetached"], 10, "three Normal Events")
    assert cni(daemon, "DEL", "cp2", ns, "p2", uid).rc == 0
    assert netns_links(ns) == ["lo"]


def test_a_failing_delegate_is_compensated_and_not_retried_until_the_annotation_changes(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)
    uid, ns = running(daemon, kube, netns, "p3")
    annotate(kube, "p3", "broken")
    warned = wait_for(lambda: [m for t, r, m in events_of(kube, "p3")
                               if (t, r) == ("Warning", "NetworkAttachFailed")], 20,
                      "the Warning Event")
    assert "default/broken not attached" in warned[0] and "refused on purpose" in warned[0]
    assert "not tried again until the annotation" in warned[0]
    assert hotplug_ops(daemon, "cp3") == [("ADD", "compensated")]
    assert set(netns_links(ns)) == {"lo", "eth0"}
    counts = daemon.status()["kubernetes"]["hotplug"]
    assert (counts["failed"], counts["not_retried"]) == (1, 1)
    assert bridge_ports(daemon.name("k4")) == []

    # the pod changes, its networks do not: not tried again
    annotate(kube, "p3", **{REPLACE: "true"})
    # its networks change: blue attached, broken tried once more
    annotate(kube, "p3", "blue,broken")
    ops_are(daemon, "cp3", ("ADD", "compensated"), ("ADD", "done"), ("ADD", "compensated"))
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    assert cni(daemon, "DEL", "cp3", ns, "p3", uid).rc == 0
    assert netns_links(ns) == ["lo"]


def test_an_attribute_change_is_refused_without_the_opt_in_and_replaces_with_it(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)

    def blue(ip: str) -> str:
        return json.dumps([{"name": "blue", "ips": [ip]}])

    uid, ns = running(daemon, kube, netns, "p4", blue("10.184.1.50/24"))
    assert netns_addrs(ns)["net1"] == ["10.184.1.50/24"]
    annotate(kube, "p4", blue("10.184.1.60/24"))
    refusal = wait_for(lambda: [m for t, r, m in events_of(kube, "p4")
                                if (t, r) == ("Warning", "NetworkChangeRefused")], 20,
                       "the refusal's Event")
    assert "network default/blue on net1: its ips changed" in refusal[0]
    assert f'{REPLACE}="true"' in refusal[0]
    assert netns_addrs(ns)["net1"] == ["10.184.1.50/24"]
    assert hotplug_ops(daemon, "cp4") == []

    annotate(kube, "p4", **{REPLACE: "true"})
    ops_are(daemon, "cp4", ("DEL", "done"), ("ADD", "done"))
    assert netns_addrs(ns)["net1"] == ["10.184.1.60/24"]
    wait_for(lambda: status_of(kube, "p4").get("net1") == ("default/blue", ["10.184.1.60"]),
             10, "network-status rewritten")
    assert cni(daemon, "DEL", "cp4", ns, "p4", uid).rc == 0
    assert netns_links(ns) == ["lo"]


def test_a_host_network_pod_is_refused(
        daemon: Daemon, kube: FakeKube, tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)
    obj = kube.create("pods", {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "host", "namespace": "default"},
                               "spec": {"nodeName": "node-a", "hostNetwork": True,
                                        "containers": [{"name": "c", "image": "pause"}]}})
    annotate(kube, "host", "blue")
    warned = wait_for(lambda: [m for t, r, m in events_of(kube, "host")
                               if (t, r) == ("Warning", "NetworkChangeRefused")], 20,
                      "the refusal's Event")
    assert "hostNetwork" in warned[0]
    uid = obj["metadata"]["uid"]
    assert daemon.read(journaldb.operation_rows, pod_uid=uid) == []


def test_a_stale_or_wrong_network_status_does_not_cause_a_double_attach(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)
    uid, ns = running(daemon, kube, netns, "p5", "blue")
    # the status lost blue and claims green, which the sandbox does not have
    wrong = [{"name": "kube-system/cluster", "interface": "eth0", "default": True},
             {"name": "default/green", "interface": "net2"}]
    kube.patch("pods", "default", "p5", {"metadata": {"annotations": {
        STATUS: json.dumps(wrong)}}})
    annotate(kube, "p5", "blue,green")
    ops_are(daemon, "cp5", ("ADD", "done"))  # green alone, once
    assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net2"}
    assert netns_addrs(ns)["net1"][0].startswith("10.184.1.")
    assert len(bridge_ports(daemon.name("k1"))) == 1
    status = wait_for(lambda: (s := status_of(kube, "p5")) and "net1" in s and s, 10,
                      "network-status rewritten from the journal")
    assert {k: v[0] for k, v in status.items()} == {
        "eth0": "kube-system/cluster", "net1": "default/blue", "net2": "default/green"}
    assert all(ips for _, ips in status.values())
    assert cni(daemon, "DEL", "cp5", ns, "p5", uid).rc == 0


def held_hotplug(daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path,
                 name: str, gate: Path) -> tuple[str, str]:
    """The networks of :func:`setup` and ``held`` (a bridge, then the gate plugin waiting
    for ``gate``); pod ``name`` running, ``held`` added to its annotation and its hot-plug
    held in the gate step. The pod's uid and netns."""
    daemon.settings["plugin-timeout"] = 300
    setup(daemon, kube, tmp_path)
    held = _net(daemon, "held", "k5", "10.184.5.0/24")
    held["plugins"].append({"type": "gate", "gate": str(gate)})
    kube.create("network-attachment-definitions", nad("held", "default", held))
    wait_for(lambda: daemon.status()["kubernetes"]["nads"]["objects"] == 6, 10, "the NAD")
    uid, ns = running(daemon, kube, netns, name)
    annotate(kube, name, "held")
    wait_for(lambda: step_states(daemon, f"c{name}").get("gate") == "running", 20,
             "the hot-plug's gate step running")
    return uid, ns


def test_a_runtime_del_cancels_a_hotplug_in_flight(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    # cancel-grace: the cancelled gate step waits through it and is killed after it (the
    # default, 5 s, is no part of what this test checks)
    daemon.settings["cancel-grace"] = 0.5
    uid, ns = held_hotplug(daemon, kube, netns, tmp_path, "p6", gate)
    assert "net1" in netns_links(ns)
    res = cni(daemon, "DEL", "cp6", ns, "p6", uid)
    assert res.rc == 0, res.describe()
    ops_are(daemon, "cp6", ("ADD", "compensated"))
    assert netns_links(ns) == ["lo"]
    assert daemon.live_attachments_of(["cp6"]) == 0
    assert bridge_ports(daemon.name("k5")) == [] and bridge_ports(daemon.name("k0")) == []
    warned = wait_for(lambda: [m for t, r, m in events_of(kube, "p6")
                               if (t, r) == ("Warning", "NetworkAttachFailed")], 10,
                      "the Warning Event")
    assert "attaching network default/held" in warned[0] and "cancelled by a DEL" in warned[0]
    assert daemon.delegates() == []


def test_an_annotation_changed_during_the_add_is_applied_after_it(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], background: Background,
        tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    setup(daemon, kube, tmp_path)
    kube.create("network-attachment-definitions", nad("held", "default", {
        "cniVersion": "1.0.0", "name": "held", "plugins": [{"type": "gate",
                                                             "gate": str(gate)}]}))
    wait_for(lambda: daemon.status()["kubernetes"]["nads"]["objects"] == 6, 10, "the NAD")
    uid = add_pod(kube, "p7", {NETWORKS: "held"})
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
    ns = netns()
    call = background("ADD", "cp7", ns, daemon.conf("cluster", "1.0.0"), pod="default/p7",
                      args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))
    wait_for(lambda: step_states(daemon, "cp7").get("gate") == "running", 20,
             "the ADD in flight")
    annotate(kube, "p7", "held,blue")
    gate.touch()
    res = call.result(timeout=30)
    assert res.rc == 0, res.describe()
    ops_are(daemon, "cp7", ("ADD", "done"))  # blue, after the ADD
    assert set(netns_links(ns)) == {"lo", "eth0", "net2"}
    assert cni(daemon, "DEL", "cp7", ns, "p7", uid).rc == 0
    assert netns_links(ns) == ["lo"]


def test_a_change_made_while_the_daemon_was_down_is_applied_at_its_start(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)
    uid, ns = running(daemon, kube, netns, "p8", "blue")
    daemon.stop()
    annotate(kube, "p8", "green")
    daemon.start()
    ops_are(daemon, "cp8", ("DEL", "done"), ("ADD", "done"))  # blue replaced by green
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    assert netns_addrs(ns)["net1"][0].startswith("10.184.2.")
    wait_for(lambda: status_of(kube, "p8").get("net1", ("",))[0] == "default/green", 10,
             "network-status rewritten")
    assert cni(daemon, "DEL", "cp8", ns, "p8", uid).rc == 0
    assert netns_links(ns) == ["lo"]


def test_a_network_the_namespace_may_not_use_is_refused_with_an_event(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    setup(daemon, kube, tmp_path)
    kube.create("network-attachment-definitions", nad(
        "blue", "other", _net(daemon, "oblue", "k6", "10.184.6.0/24")))
    wait_for(lambda: daemon.status()["kubernetes"]["nads"]["objects"] == 6, 10, "the NAD")
    uid = add_pod(kube, "p9")
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
    ns = netns()
    conf = daemon.conf("cluster", "1.0.0", namespaceIsolation=True)
    res = daemon.cni("ADD", "cp9", ns, conf, pod="default/p9",
                     args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))
    assert res.rc == 0, res.describe()
    annotate(kube, "p9", "other/blue")
    warned = wait_for(lambda: [m for t, r, m in events_of(kube, "p9")
                               if (t, r) == ("Warning", "NetworkNotAllowed")], 20,
                      "the refusal's Event")
    assert "other/blue, outside the pod's namespace" in warned[0]
    # the same annotation with a network it may use: attached
    annotate(kube, "p9", "blue")
    ops_are(daemon, "cp9", ("ADD", "done"))
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    assert netns_addrs(ns)["net1"][0].startswith("10.184.1.")
    assert daemon.cni("DEL", "cp9", ns, conf, pod="default/p9",
                      args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}")).rc == 0
    assert netns_links(ns) == ["lo"]


def test_a_hotplug_cut_by_a_daemon_crash_is_undone_then_done_at_the_restart(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    uid, ns = held_hotplug(daemon, kube, netns, tmp_path, "p10", gate)
    daemon.kill()
    gate.touch()
    daemon.start()
    # the replay undid the cut one; the pods' first list plugged it again
    wait_for(lambda: hotplug_ops(daemon, "cp10")[-1:] == [("ADD", "done")], 30,
             "held plugged at the restart")
    ops = hotplug_ops(daemon, "cp10")
    assert len(ops) == 2 and ops[0][0] == "ADD" and ops[0][1] not in ("done", "running"), ops
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    assert len(bridge_ports(daemon.name("k5"))) == 1
    assert [(a["network"], a["state"]) for a in daemon.read(query.attachments, container="cp10")
            if a["ifname"] == "net1" and a["state"] != "removed"] == [("default/held", "attached")]
    assert cni(daemon, "DEL", "cp10", ns, "p10", uid).rc == 0
    assert netns_links(ns) == ["lo"] and bridge_ports(daemon.name("k5")) == []
