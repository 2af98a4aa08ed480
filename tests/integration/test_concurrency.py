"""We test these aspects: many pods at once (50 pods, 16 runtime threads exec'ing the plugin),
with unique addresses and nothing left after; requests for one container are serialized
(two identical ADDs at once give one result and one set of interfaces; ADDs and DELs of two
interfaces of one container never overlap in the journal); and a DEL that arrives during a
long ADD cancels it (code 106), the ADD's work is undone, and the DEL succeeds.

The long ADD comes from ``tests/plugins/slow``, which sleeps before delegating to bridge.
Subnets: 10.102.1-3.0/24.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.journal import query
from tests.conftest import (
    CNIResult,
    Daemon,
    bridge_conf,
    bridge_ports,
    host_links,
    host_veths,
    ipam_held,
    journal_results,
    netns_addrs,
    netns_links,
    wait_for,
)

pytestmark = pytest.mark.netns

PODS = 50
WORKERS = 16


def slow_conf(name: str, bridge: str, subnet: str, sleep: float, ipam_dir: str) -> dict[str, Any]:
    """A network whose ADD sleeps ``sleep`` seconds, then runs bridge on the same config."""
    return {"cniVersion": "1.0.0", "name": name, "type": "slow", "sleep": sleep,
            "delegate": "bridge", "bridge": bridge, "isGateway": True,
            "ipam": {"type": "host-local", "subnet": subnet, "dataDir": ipam_dir}}


def running_steps(daemon: Daemon, plugin: str, container: str) -> list[int]:
    return [s["id"] for s in daemon.read(journaldb.step_rows, plugin=plugin, verb="ADD",
                                         state="running", container=container)]


def ops(daemon: Daemon, container: str) -> list[tuple[Any, ...]]:
    """(id, verb, ifname, state, code, started_at, finished_at) per operation, in order."""
    return [(o["id"], o["verb"], o["ifname"], o["state"], o["code"], o["started_at"],
             o["finished_at"])
            for o in daemon.read(journaldb.operation_rows, container=container)]


def assert_nothing_left(daemon: Daemon, namespaces: list[str], bridges: list[str],
                        containers: list[str]) -> None:
    for ns in namespaces:
        assert netns_links(ns) == ["lo"], ns
    for br in bridges:
        assert bridge_ports(br) == [], br
    veths = {v for c in containers for v in host_veths(journal_results(daemon, c))}
    assert not veths & set(host_links("veth"))
    assert ipam_held(daemon.ipam_dir) == []
    assert daemon.live_counts()[0] == 0  # attachments not removed
    assert daemon.read(query.running_operations) == []


@pytest.mark.slow
def test_fifty_pods_add_then_del_in_parallel(daemon: Daemon, netns) -> None:
    br = daemon.name("b0")
    daemon.add_network("br", bridge_conf("br", br, "10.102.1.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    conf = daemon.conf("br", "1.0.0")
    namespaces = [netns() for _ in range(PODS)]

    def pod(i: int) -> tuple[str, str, CNIResult, CNIResult]:
        container, ns = f"pod-{i}", namespaces[i]
        add = daemon.cni("ADD", container, ns, conf, pod=f"default/pod-{i}")
        seen = netns_addrs(ns).get("eth0", [""])[0] if add.rc == 0 else ""
        dele = daemon.cni("DEL", container, ns, conf)
        return container, seen, add, dele

    with ThreadPoolExecutor(WORKERS) as pool:
        outcomes = list(pool.map(pod, range(PODS)))

    addresses = []
    for (container, seen, add, dele), ns in zip(outcomes, namespaces, strict=True):
        assert add.rc == 0, f"{container}: {add.stdout} {add.stderr}"
        assert dele.rc == 0, f"{container}: {dele.stdout} {dele.stderr}"
        assert add.out is not None
        ip = add.out["ips"][0]["address"]
        assert seen == ip  # each pod got its own result, for its own namespace
        assert add.out["interfaces"][add.out["ips"][0]["interface"]]["sandbox"] \
            == f"/var/run/netns/{ns}"
        addresses.append(ip)
    assert len(set(addresses)) == PODS
    containers = [o[0] for o in outcomes]
    ends = Counter((verb, state) for verb, _, state in daemon.read(journaldb.operation_states))
    assert sorted((verb, state, n) for (verb, state), n in ends.items()) == [
        ("ADD", "done", PODS), ("DEL", "done", PODS)]
    assert_nothing_left(daemon, namespaces, [br], containers)


@pytest.mark.slow
def test_fifty_pods_attached_at_once(daemon: Daemon, netns) -> None:
    br = daemon.name("b0")
    daemon.add_network("br", bridge_conf("br", br, "10.102.1.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    conf = daemon.conf("br")
    namespaces = [netns() for _ in range(PODS)]

    def run(command: str) -> Callable[[int], CNIResult]:
        return lambda i: daemon.cni(command, f"pod-{i}", namespaces[i], conf)

    with ThreadPoolExecutor(WORKERS) as pool:
        adds = list(pool.map(run("ADD"), range(PODS)))
    for res in adds:
        assert res.rc == 0, res.stdout + res.stderr
    held = [netns_addrs(ns)["eth0"][0] for ns in namespaces]
    assert held == [res.out["ips"][0]["address"] for res in adds if res.out]
    assert len(set(held)) == PODS
    assert len(bridge_ports(br)) == PODS
    assert len(ipam_held(daemon.ipam_dir)) == PODS
    with ThreadPoolExecutor(WORKERS) as pool:
        dels = list(pool.map(run("DEL"), range(PODS)))
    for res in dels:
        assert res.rc == 0, res.stdout + res.stderr
    assert_nothing_left(daemon, namespaces, [br], [f"pod-{i}" for i in range(PODS)])


def test_two_identical_adds_at_once_give_one_result(daemon: Daemon, netns) -> None:
    br = daemon.name("b1")
    daemon.add_network("slowbr", slow_conf("slowbr", br, "10.102.2.0/24", 1.5,
                                           daemon.ipam_dir))
    daemon.start()
    ns = netns()
    conf = daemon.conf("slowbr")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(daemon.cni, "ADD", "twin", ns, conf)
        wait_for(lambda: running_steps(daemon, "slow", "twin"), what="the slow ADD to run")
        launched = time.time()
        second = pool.submit(daemon.cni, "ADD", "twin", ns, conf)
        a, b = first.result(), second.result()
    assert a.rc == 0, a.stdout + a.stderr
    assert b.rc == 0, b.stdout + b.stderr
    assert a.out == b.out
    assert a.out is not None and a.out["ips"][0]["address"].startswith("10.102.2.")
    assert set(netns_links(ns)) == {"lo", "eth0"}
    assert len(bridge_ports(br)) == 1
    assert len(ipam_held(daemon.ipam_dir)) == 1
    # One ADD ran; the second was answered from the journal after it, not run alongside.
    (add,) = ops(daemon, "twin")
    assert add[1:5] == ("ADD", "eth0", "done", None)
    assert launched < add[6]  # the second ADD was sent while the first was running
    assert len(daemon.read(journaldb.step_rows, verb="ADD")) == 1
    assert daemon.cni("DEL", "twin", ns, conf).rc == 0
    assert_nothing_left(daemon, [ns], [br], ["twin"])


def assert_disjoint(daemon: Daemon, op_a: int, op_b: int) -> None:
    """Operation ``op_b`` began after ``op_a`` ended, and so did each of its steps."""
    a_end = daemon.read(journaldb.operation_rows, op_id=op_a)[0]["finished_at"]
    b_start = daemon.read(journaldb.operation_rows, op_id=op_b)[0]["started_at"]
    assert a_end is not None and b_start >= a_end
    last_a = max((s["finished_at"] for s in daemon.read(journaldb.step_rows, operation=op_a)
                  if s["finished_at"] is not None), default=None)
    first_b = min((s["started_at"] for s in daemon.read(journaldb.step_rows, operation=op_b)),
                  default=None)
    assert last_a is not None and first_b is not None and first_b >= last_a


def test_requests_for_one_container_do_not_overlap(daemon: Daemon, netns) -> None:
    br = daemon.name("b1")
    daemon.add_network("slowbr", slow_conf("slowbr", br, "10.102.2.0/24", 1,
                                           daemon.ipam_dir))
    daemon.start()
    ns = netns()
    conf = daemon.conf("slowbr")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(daemon.cni, "ADD", "pair", ns, conf, ifname="eth0")
        wait_for(lambda: running_steps(daemon, "slow", "pair"), what="the slow ADD to run")
        second = pool.submit(daemon.cni, "ADD", "pair", ns, conf, ifname="eth1")
        a, b = first.result(), second.result()
    assert a.rc == 0, a.stdout + a.stderr
    assert b.rc == 0, b.stdout + b.stderr
    assert set(netns_links(ns)) == {"lo", "eth0", "eth1"}
    assert len(bridge_ports(br)) == 2
    add_a, add_b = ops(daemon, "pair")
    assert (add_a[1:4], add_b[1:4]) == (("ADD", "eth0", "done"), ("ADD", "eth1", "done"))
    assert_disjoint(daemon, add_a[0], add_b[0])

    with ThreadPoolExecutor(2) as pool:
        dels = list(pool.map(lambda i: daemon.cni("DEL", "pair", ns, conf, ifname=i),
                             ["eth0", "eth1"]))
    assert [d.rc for d in dels] == [0, 0], [d.stdout for d in dels]
    del_a, del_b = ops(daemon, "pair")[2:]
    assert {del_a[1], del_b[1]} == {"DEL"} and {del_a[2], del_b[2]} == {"eth0", "eth1"}
    assert_disjoint(daemon, del_a[0], del_b[0])
    assert len(daemon.read(journaldb.step_rows, verb="DEL", state="ok")) == 2
    assert_nothing_left(daemon, [ns], [br], ["pair"])


def test_del_during_add_cancels_it(daemon: Daemon, netns) -> None:
    br, slow_br = daemon.name("b0"), daemon.name("b2")
    daemon.settings["plugin-timeout"] = 90  # the DEL, not the timeout, must end the ADD
    daemon.settings["cancel-grace"] = 0.5  # the slow plugin sleeps through it: killed after
    daemon.add_network("br", bridge_conf("br", br, "10.102.1.0/24", ipam_dir=daemon.ipam_dir))
    daemon.add_network("slow", slow_conf("slow", slow_br, "10.102.3.0/24", 37.25,
                                         daemon.ipam_dir))
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        add = pool.submit(daemon.cni, "ADD", "victim", ns, conf, networks="slow")
        wait_for(lambda: running_steps(daemon, "slow", "victim"), what="the slow ADD to run")
        # The cluster network attaches meanwhile: there is something to undo.
        wait_for(lambda: daemon.read(journaldb.step_rows, plugin="bridge", verb="ADD",
                                     state="ok"), what="the bridge ADD")
        assert "eth0" in netns_links(ns) and len(bridge_ports(br)) == 1
        wait_for(lambda: sleeping("37.25"), what="the slow plugin's sleep to start")
        dele = daemon.cni("DEL", "victim", ns, conf)
        res = add.result()
    assert time.monotonic() - started < 30  # far below the slow plugin's sleep
    assert dele.rc == 0, dele.stdout + dele.stderr
    assert res.rc == 1, res.stdout + res.stderr
    assert res.out is not None and res.out["code"] == 106, res.out
    assert "cancelled" in res.out["msg"]

    add_op, del_op = ops(daemon, "victim")
    assert add_op[1:5] == ("ADD", "eth0", "compensated", 106)
    assert del_op[1:4] == ("DEL", "eth0", "done")
    assert del_op[5] >= add_op[6]  # the DEL ran once the ADD had undone its work
    steps = sorted(((s["plugin_type"], s["verb"], s["state"], s["error"])
                    for s in daemon.read(journaldb.step_rows, operation=add_op[0])),
                   key=lambda s: (s[0], s[1]))
    assert steps == [("bridge", "ADD", "ok", None), ("bridge", "DEL", "ok", None),
                     ("slow", "ADD", "failed",
                      "cancelled; still running after 0.5s of grace, killed"),
                     ("slow", "DEL", "ok", None)]
    assert daemon.read(journaldb.step_rows, operation=del_op[0]) == []
    # The slow plugin and its sleep were killed, not left behind.
    wait_for(lambda: not sleeping("37.25"), what="the slow plugin's sleep to be killed")
    assert_nothing_left(daemon, [ns], [br, slow_br], ["victim"])


def sleeping(seconds: str) -> bool:
    """Whether some process runs ``sleep <seconds>``."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args[:2] == [b"sleep", seconds.encode()]:
            return True
    return False
