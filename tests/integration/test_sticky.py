"""We test these aspects of sticky addresses (``sticky: true`` in an ``ipam`` section) on
real netns, the real thin plugin and the real bridge plugin:

- a StatefulSet-like pod (same namespace/name) DELeted and ADDed again with a new UID and
  container id gets its address back, also across a daemon restart; other pods do not get
  it while it is reserved (not even with ``allocation_order: lowest``, nor by asking for
  it: code 7 naming the identity);
- while the predecessor still holds the address, the successor's ADD is code 11 and
  leaves nothing behind; once the predecessor is DELeted it gets the address;
- the reservation expires (a short ``sticky_for``, reconcile rounds every 0.3 s): journaled
  as a RELEASE of origin ``sticky`` with its reason, and the address is free for others;
- ``netctl journal --ip`` shows the identity of each holder and how the reservation
  ended; ``netctl ipam pools`` and ``netctl status`` show the reservations;
- a bad ``sticky_for`` is code 7 naming the key.

In Kubernetes mode (the fake API server): the identity of a KubeVirt virt-launcher pod is
its VM's name, and an annotation ``netctl.dev/sticky-key`` names one across pod names.

Subnets: 10.137.0.0/24 onwards."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb
from netctl_kit.harness import netctl_argv
from netctl_kit.kubefake import FakeKube, nad, node, pod

from tests.conftest import (
    CNIResult,
    Daemon,
    bridge_ports,
    eth0_addr,
    ipam_bridge,
    live,
    netns_links,
    wait_for,
)

pytestmark = pytest.mark.netns


def sticky_net(daemon: Daemon, name: str, suffix: str, subnet: str,
               **ipam: Any) -> dict[str, Any]:
    return ipam_bridge(name, daemon.name(suffix), {
        "type": "netctl-ipam", "range": subnet, "allocation_order": "lowest",
        "sticky": True, **ipam})


def add(daemon: Daemon, container: str, ns: str, podname: str, uid: str,
        verb: str = "ADD", **kw: Any) -> CNIResult:
    return daemon.cni(verb, container, ns, daemon.conf("sticky"), pod=podname,
                      args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"), **kw)


def reservations_ended(daemon: Daemon, container: str | None = None) -> list[str | None]:
    """How the reservation of each allocation (of ``container``) ended; None: open or none."""
    return [a["reservation_end"]
            for a in daemon.read(journaldb.allocation_rows, container=container)]


def cli(*args: str) -> dict[str, Any]:
    proc = subprocess.run(netctl_argv(*args, "--json"), capture_output=True, text=True,
                          timeout=60, check=True)
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_a_recreated_pod_gets_its_address_back_and_no_one_else_does(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    daemon.add_network("sticky", sticky_net(daemon, "sticky", "s0", "10.137.0.0/28"))
    daemon.start()
    first, other = netns(), netns()
    res = add(daemon, "db0-a", first, "apps/db-0", "uid-a")
    assert res.rc == 0, res.describe()
    mine = eth0_addr(first)
    assert mine == "10.137.0.1/28"
    assert add(daemon, "web1", other, "apps/web-1", "uid-w1").rc == 0
    assert add(daemon, "db0-a", first, "apps/db-0", "uid-a", "DEL").rc == 0
    assert netns_links(first) == ["lo"]

    # reserved for pod:apps/db-0: shown by `ipam pools` and `status`
    pools = cli("ipam", "pools", "--state-dir", str(daemon.state_dir))["pools"]
    assert [(p["in_use"], p["reserved"]) for p in pools] == [(1, 1)]
    [res_row] = pools[0]["reservations"]
    assert (res_row["address"], res_row["identity"], res_row["ifname"]) == (
        "10.137.0.1", "pod:apps/db-0", "eth0")
    assert res_row["until"] > 0
    sticky = daemon.status()["sticky"]
    assert sticky["reserved"] == {"10.137.0.0/28": 1}
    assert [r["identity"] for r in sticky["reservations"]] == ["pod:apps/db-0"]

    # another pod never gets it, though it is the lowest free address
    stranger = netns()
    assert add(daemon, "web2", stranger, "apps/web-2", "uid-w2").rc == 0
    assert eth0_addr(stranger) != mine

    # the reservation survives a restart; the recreated pod (new UID, new container)
    # gets the address back
    daemon.stop()
    daemon.start()
    again = netns()
    res = add(daemon, "db0-b", again, "apps/db-0", "uid-b")
    assert res.rc == 0, res.describe()
    assert eth0_addr(again) == mine
    assert reservations_ended(daemon, container="db0-a") == ["taken back"]
    assert daemon.status()["sticky"]["ended"]["taken_back"] == 1

    # journal --ip: each holder with its identity, the first one's reservation taken back
    doc = daemon.journal("--ip", "10.137.0.1")
    holders = [(a["container"], a["identity"], a["reservation_end"])
                for a in doc["allocations"]]
    assert holders == [("db0-a", "pod:apps/db-0", "taken back"),
                       ("db0-b", "pod:apps/db-0", None)]
    table = subprocess.run(netctl_argv("journal", "--state-dir", str(daemon.state_dir),
                                       "--ip", "10.137.0.1"),
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "pod:apps/db-0" in table and "taken back" in table

    for cid, ns, name, uid in (("db0-b", again, "apps/db-0", "uid-b"),
                               ("web1", other, "apps/web-1", "uid-w1"),
                               ("web2", stranger, "apps/web-2", "uid-w2")):
        assert add(daemon, cid, ns, name, uid, "DEL").rc == 0
    assert live(daemon) == []
    assert bridge_ports(daemon.name("s0")) == []


def test_a_requested_address_reserved_for_another_identity_is_refused(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    daemon.add_network("sticky", sticky_net(daemon, "sticky", "s1", "10.137.1.0/28"))
    daemon.add_network("fixed", sticky_net(daemon, "fixed", "s2", "10.137.2.0/28"))
    daemon.start()
    a, b = netns(), netns()
    want = json.dumps([{"name": "fixed", "ips": ["10.137.2.9/28"]}])
    assert add(daemon, "db0", a, "apps/db-0", "u1", networks=want).rc == 0
    assert add(daemon, "db0", a, "apps/db-0", "u1", "DEL", networks=want).rc == 0
    res = add(daemon, "web", b, "apps/web-0", "u2", networks=want)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.describe()
    assert "reserved for pod:apps/db-0" in res.out["msg"], res.out["msg"]
    assert netns_links(b) == ["lo"]
    # the identity itself may ask for it
    res = add(daemon, "db0-b", b, "apps/db-0", "u3", networks=want)
    assert res.rc == 0, res.describe()
    assert add(daemon, "db0-b", b, "apps/db-0", "u3", "DEL", networks=want).rc == 0


def test_a_live_predecessor_makes_the_successor_wait(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    daemon.add_network("sticky", sticky_net(daemon, "sticky", "s3", "10.137.3.0/28"))
    daemon.start()
    old, new = netns(), netns()
    assert add(daemon, "db0-old", old, "apps/db-0", "uid-old").rc == 0
    mine = eth0_addr(old)
    res = add(daemon, "db0-new", new, "apps/db-0", "uid-new")
    assert res.rc == 1 and res.out is not None and res.out["code"] == 11, res.describe()
    assert "db0-old" in res.out["msg"] and mine.split("/")[0] in res.out["msg"]
    assert netns_links(new) == ["lo"]
    assert [c for c, _, _ in live(daemon)] == ["db0-old"]  # never two holders

    assert add(daemon, "db0-old", old, "apps/db-0", "uid-old", "DEL").rc == 0
    res = add(daemon, "db0-new", new, "apps/db-0", "uid-new")  # the runtime's retry
    assert res.rc == 0, res.describe()
    assert eth0_addr(new) == mine
    assert add(daemon, "db0-new", new, "apps/db-0", "uid-new", "DEL").rc == 0


def test_the_reservation_expires_and_the_address_is_free_again(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    daemon.add_network("sticky", sticky_net(daemon, "sticky", "s4", "10.137.4.0/28",
                                            sticky_for="2s"))
    daemon.settings["reconcile-interval"] = 0.3
    daemon.start()
    a, b = netns(), netns()
    assert add(daemon, "db0", a, "apps/db-0", "u1").rc == 0
    mine = eth0_addr(a)
    assert add(daemon, "db0", a, "apps/db-0", "u1", "DEL").rc == 0
    assert reservations_ended(daemon) == [None]

    wait_for(lambda: reservations_ended(daemon) == ["expired"], 15,
             "the reservation to expire")
    [(origin, reason)] = [(o["origin"], o["reason"])
                          for o in daemon.read(journaldb.operation_rows, verb="RELEASE")]
    assert origin == "sticky"
    assert reason == f"sticky reservation of {mine.split('/')[0]} for pod:apps/db-0 " \
        "(eth0) expired"
    wait_for(lambda: daemon.status()["sticky"]["ended"]["expired"] == 1, 10,
             "the daemon to count it")
    assert daemon.status()["sticky"]["reserved"] == {}
    pools = cli("ipam", "pools", "--state-dir", str(daemon.state_dir))["pools"]
    assert (pools[0]["reserved"], pools[0]["reservations_ended"]) == (0, {"expired": 1})
    # the lowest free address is the released one: another pod gets it now
    assert add(daemon, "web", b, "apps/web-0", "u2").rc == 0
    assert eth0_addr(b) == mine
    assert add(daemon, "web", b, "apps/web-0", "u2", "DEL").rc == 0


@pytest.mark.parametrize(("ipam", "named"), [
    ({"sticky": True, "sticky_for": "ten minutes"}, "sticky_for 'ten minutes'"),
    ({"sticky": True, "sticky_for": "0s"}, "sticky_for '0s'"),
    ({"sticky_for": "10m"}, "sticky_for '10m' is given without sticky: true"),
    ({"sticky": "yes"}, "sticky"),
])
def test_a_bad_sticky_setting_is_code_7_naming_the_key(
        daemon: Daemon, netns: Callable[[], str], ipam: dict[str, Any], named: str) -> None:
    daemon.add_network("sticky", ipam_bridge("sticky", daemon.name("s5"), {
        "type": "netctl-ipam", "range": "10.137.5.0/28", **ipam}))
    daemon.start()
    ns = netns()
    res = add(daemon, "c1", ns, "apps/db-0", "u1")
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.describe()
    assert named in res.out["msg"], res.out["msg"]
    assert netns_links(ns) == ["lo"]


# -- Kubernetes mode: identities from the pod's labels and annotations ------------------------

NODE = "node-a"


def start_kube(daemon: Daemon, kube: FakeKube, tmp_path: Path) -> None:
    kube.create("network-attachment-definitions", nad(
        "cluster", "kube-system", sticky_net(daemon, "cluster", "s6", "10.137.6.0/28")))
    kube.create("nodes", node(NODE))
    daemon.settings.update({"kubeconfig": str(kube.kubeconfig(tmp_path / "kubeconfig")),
                            "node-name": NODE, "pod-deleted-grace": 0.2, "api-timeout": 3,
                            "pod-wait": 0.5})
    daemon.start()
    kube.wait_watches(3)


def kube_cni(daemon: Daemon, verb: str, container: str, ns: str, name: str,
             uid: str) -> CNIResult:
    return daemon.cni(verb, container, ns, daemon.conf("cluster", "1.0.0"),
                      pod=f"default/{name}", args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))


def recreate(kube: FakeKube, name: str, **meta: Any) -> str:
    return str(kube.create("pods", pod(name, node=NODE, **meta))["metadata"]["uid"])


@pytest.mark.servers("fake")
def test_kubernetes_identities_a_vm_name_and_a_sticky_key(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    start_kube(daemon, kube, tmp_path)
    vm = {"labels": {"vm.kubevirt.io/name": "vm-1", "kubevirt.io": "virt-launcher"}}
    keyed = {"annotations": {"netctl.dev/sticky-key": "ledger"}}
    cases = [("virt-launcher-vm-1-abcde", "virt-launcher-vm-1-fghij", vm, "vm:default/vm-1"),
             ("ledger-x", "ledger-y", keyed, "key:ledger")]
    for before, after, meta, identity in cases:
        ns = netns()
        uid = recreate(kube, before, **meta)
        wait_for(lambda n=before: kube.get("pods", "default", n) is not None, 5, "the pod")
        res = kube_cni(daemon, "ADD", f"{before}-c", ns, before, uid)
        assert res.rc == 0, res.describe()
        mine = eth0_addr(ns)
        assert kube_cni(daemon, "DEL", f"{before}-c", ns, before, uid).rc == 0
        kube.delete("pods", "default", before)
        # a pod of another name, the same identity: the address comes back
        ns2 = netns()
        uid2 = recreate(kube, after, **meta)
        res = kube_cni(daemon, "ADD", f"{after}-c", ns2, after, uid2)
        assert res.rc == 0, res.describe()
        assert eth0_addr(ns2) == mine, identity
        rows = daemon.read(journaldb.allocation_rows, address=mine.split("/")[0])
        assert [(a["container_id"], a["sticky_key"]) for a in rows] == [
            (f"{before}-c", identity), (f"{after}-c", identity)]
        assert kube_cni(daemon, "DEL", f"{after}-c", ns2, after, uid2).rc == 0
    # a plain pod: its namespace/name
    ns = netns()
    uid = recreate(kube, "plain-0")
    assert kube_cni(daemon, "ADD", "plain-c", ns, "plain-0", uid).rc == 0
    assert [a["sticky_key"] for a in daemon.read(journaldb.allocation_rows,
                                                 container="plain-c")] == ["pod:default/plain-0"]
    assert kube_cni(daemon, "DEL", "plain-c", ns, "plain-0", uid).rc == 0
