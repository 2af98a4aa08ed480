"""We test these aspects: the daemon dying or stopping in the middle of an ADD, with the
crash scenario's steps (:mod:`netctl_kit.bench.crash`, the one ``netctl bench crash`` runs).

- SIGKILL while one network (bridge) is done and another (``hang``) still runs:
  the journal has that ADD running, the caller gets code 11, the bridge half is left
  on the host; the restarted daemon kills the delegate the dead one left running,
  and before its socket accepts anything its start-up replay has DELeted every
  started step, so the operation is 'compensated', the reconcile finds nothing more,
  nothing of the pod is left (the harness's leftover counts), and new pods work.
- SIGKILL at a random moment of a churn, sandboxes vanished while the daemon is down:
  an iteration of the scenario; the replay closes every operation the kill cut, the
  reconcile DELs the vanished sandboxes, the runtime's DELs succeed, nothing is left.
- The whole harness with a fixed seed, four iterations of a few pods (200 in the
  ``soak`` run, which ``make test`` leaves out): a delegate fault of every kind answered
  and checked before the kill (four iterations give each kind to a first pod, whatever
  the timing), GCs, a node reboot, the checks after each restart (journal integrity,
  addresses, owners, pings between the attached pods, a repeated DEL), and not one
  violation.
- SIGTERM while an ADD runs: the socket goes away at once (new callers get
  code 11), the in-flight ADD finishes and is answered, and the daemon exits 0.
- SIGTERM with an in-flight ADD longer than ``drain-timeout``: it is cancelled
  and compensated, the daemon exits 0, and nothing is left.

Subnets: 10.113.0-2.0/24.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import harness, journaldb
from netctl_kit.bench import crash

from tests.conftest import (
    SYSTEM_CNI,
    Daemon,
    add_hanging,
    assert_still_serves,
    bridge_conf,
    bridge_ports,
    hang_sleeps,
    ipam_held,
    netns_links,
    owned_processes,
    step_states,
    wait_for,
)

pytestmark = pytest.mark.netns


def add_op(daemon: Daemon, container: str) -> tuple[int, str, int | None]:
    rows = [(o["id"], o["state"], o["code"])
            for o in daemon.read(journaldb.operation_rows, verb="ADD", container=container)]
    assert len(rows) == 1, rows
    op_id, state, code = rows[0]
    return op_id, state, code


def undone_steps(daemon: Daemon, op_id: int) -> list[tuple[Any, ...]]:
    """Started ADD steps of the operation with no ok DEL step (in any operation) after them."""
    return [(s["attachment_id"], s["position"], s["plugin_type"])
            for s in daemon.read(journaldb.add_steps_not_undone, op_id)]


def socket_refuses(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError:
            return True
    return False


def test_sigkill_mid_add_is_compensated_at_restart(daemon: Daemon, netns, background) -> None:
    br = daemon.name("b")
    daemon.add_network("br", bridge_conf("br", br, "10.113.0.0/24", ipam_dir=daemon.ipam_dir))
    call, ns = add_hanging(daemon, netns, background, "br", "crash1", pod="default/crash1")
    orphans = hang_sleeps(daemon)

    killed = crash.kill(daemon)

    assert killed.in_flight == {"ADD": 1}
    assert set(orphans) <= set(killed.orphans)
    res = call.result(timeout=30)
    assert res.rc == 1 and res.out is not None, res
    assert res.out["code"] == 11 and "gave no answer" in res.out["msg"], res.out
    # Half done: the bridge attachment is in place, the journal says 'running'.
    assert len(bridge_ports(br)) == 1
    assert "eth0" in netns_links(ns)
    op_id, state, _ = add_op(daemon, "crash1")
    assert state == "running"
    # The dead daemon's delegate is still running (it has its own session).
    assert set(orphans) <= set(owned_processes(daemon))

    # the same state dir; once the socket accepts, `netctl status` and `netctl reconcile`
    recovery = crash.recover(daemon, in_flight=1)

    assert recovery.problems == [] and recovery.replay["operations"] == 1
    assert recovery.reconcile == {"attachments": 0, "allocations": 0, "links": 0, "errors": []}
    assert owned_processes(daemon) == [], "the restarted daemon left the orphan running"
    assert add_op(daemon, "crash1")[1:] == ("compensated", None)
    assert undone_steps(daemon, op_id) == []
    assert [a["state"] for a in daemon.read(journaldb.attachment_rows, add_op=op_id)] == [
        "removed", "removed"]
    assert [(o["verb"], o["state"])
            for o in daemon.read(journaldb.operation_rows, origin="replay")] == [("DEL", "done")]
    assert bridge_ports(br) == []
    assert netns_links(ns) == ["lo"]
    assert ipam_held(daemon.ipam_dir) == []
    left = harness.leftovers(daemon, bridges=[br], ipam_dir=daemon.ipam_dir)
    assert left == {key: [] for key in harness.LEFTOVERS if key != "netns"}
    assert_still_serves(daemon, netns(), "br", br)


# Its first iteration is no reboot (the test below needs a DEL while down); of its first
# four (6 pods, 3 at a time), three run a GC and the fourth is a node reboot.
SEED = 2045


@pytest.fixture
def crash_bench() -> Iterator[crash.CrashBench]:
    bench = crash.CrashBench(iterations=1, pods=12, concurrency=4, seed=SEED)
    try:
        yield bench
    finally:
        assert bench.cleanup() == []


@pytest.mark.slow
def test_sigkill_mid_churn_leaves_nothing(crash_bench: crash.CrashBench) -> None:
    crash_bench.setup()

    it = crash_bench.iteration(1)

    assert it.killed and it.vanished
    assert it.side.failures == []
    assert it.replay["operations"] == sum(it.in_flight.values()) and it.replay["failed"] == []
    assert it.reconcile["errors"] == []
    # every vanished sandbox is released by the daemon's own first round after the replay;
    # the DEL made while the daemon was down was recorded and finished by the replay
    assert it.released_s is not None
    assert it.recorded_dels and it.replay["recorded_dels"]["finished"] >= 1
    assert it.leftovers == {key: [] for key in harness.LEFTOVERS}
    assert it.exit_code == 0


def run_harness(iterations: int) -> dict[str, Any]:
    bench = crash.CrashBench(iterations=iterations, pods=6, concurrency=3, seed=SEED)
    try:
        measured = bench.measure()
    finally:
        assert bench.cleanup() == []
    assert measured.problems == [], measured.problems[:20]
    assert measured.exit_code == 0
    parts = measured.parts
    assert parts["iterations_run"] == iterations
    assert parts["faults"]["kills"] == iterations
    return parts


@pytest.mark.slow
def test_crash_harness_with_a_fixed_seed() -> None:
    parts = run_harness(len(crash.FAULTS))

    faults = parts["faults"]
    # a fault of every kind, by construction (see the unit test); the seed's GCs and reboot
    assert set(faults["delegate_faults"]) == set(crash.FAULTS), faults
    assert all(faults["delegate_faults"].values()), faults
    assert faults["gcs"] > 0 and faults["reboots"] > 0, faults
    assert parts["checked"]["pings"] > 0 and parts["checked"]["repeated_dels"] > 0
    assert parts["replay"]["failed"] == [] and parts["reconcile"]["errors"] == []


@pytest.mark.soak
def test_crash_harness_200_iterations() -> None:
    run_harness(200)


def gated_bridge(daemon: Daemon, name: str, bridge: str, subnet: str) -> Path:
    """A network whose plugin is the real bridge, held at ADD until a gate file exists.

    Returns the gate. The plugin lives in a bin dir of its own, first in the list.
    """
    bin_dir = daemon.root / "gated-bin"
    bin_dir.mkdir()
    gate = daemon.root / "gate"
    plugin = bin_dir / "gatedbridge"
    plugin.write_text(
        "#!/bin/sh\n"
        f'if [ "$CNI_COMMAND" = ADD ]; then\n'
        f'    while [ ! -e "{gate}" ]; do sleep 0.02; done\n'
        "fi\n"
        f"exec {SYSTEM_CNI}/bridge\n")
    plugin.chmod(0o755)
    daemon.bin_dirs.insert(0, str(bin_dir))
    conf = bridge_conf(name, bridge, subnet, ipam_dir=daemon.ipam_dir)
    conf["plugins"][0]["type"] = "gatedbridge"
    daemon.add_network(name, conf)
    return gate


def test_sigterm_drains_an_inflight_add(daemon: Daemon, netns, background) -> None:
    br = daemon.name("b")
    gate = gated_bridge(daemon, "slowbr", br, "10.113.1.0/24")
    daemon.start()
    ns = netns()
    conf = daemon.conf("slowbr")
    call = background("ADD", "drain1", ns, conf)
    wait_for(lambda: step_states(daemon, "drain1") == {"gatedbridge": "running"}, 20,
             "the gated bridge step running")

    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)

    # Draining: the socket is gone at once, a new caller is told to come back later.
    wait_for(lambda: not os.path.exists(daemon.socket), 10, "the socket removed")
    late = daemon.cni("ADD", "late1", netns(), conf)
    assert late.rc == 1 and late.out is not None and late.out["code"] == 11, late
    assert not call.done() and daemon.proc.poll() is None
    gate.touch()
    res = call.result(timeout=30)
    assert res.rc == 0, res.stdout + res.stderr
    assert res.out is not None and res.out["ips"][0]["address"].startswith("10.113.1."), res.out
    assert daemon.proc.wait(30) == 0
    assert add_op(daemon, "drain1")[1:] == ("done", None)
    assert len(bridge_ports(br)) == 1

    # The next daemon has nothing to replay and DELs the drained pod normally.
    daemon.start()
    assert daemon.read(journaldb.operation_rows, origin="replay") == []
    res = daemon.cni("DEL", "drain1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert bridge_ports(br) == []
    assert netns_links(ns) == ["lo"]
    assert ipam_held(daemon.ipam_dir) == []


def test_sigterm_past_drain_timeout_compensates(daemon: Daemon, netns, background) -> None:
    br = daemon.name("b")
    daemon.add_network("br", bridge_conf("br", br, "10.113.2.0/24", ipam_dir=daemon.ipam_dir))
    # cancel-grace: the cancelled hang is killed after it (the default, 5 s, is no part
    # of what this test checks)
    call, ns = add_hanging(daemon, netns, background, "br", "drain2",
                           settings={"drain-timeout": 1, "cancel-grace": 0.5})

    assert daemon.proc is not None
    started = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(30) == 0
    assert time.monotonic() - started < 15

    res = call.result(timeout=30)
    assert res.rc == 1 and res.out is not None, res
    assert res.out["code"] == 106, res.out
    assert "shut down" in res.out["msg"] and "drain-timeout of 1s" in res.out["msg"], res.out
    op_id, state, code = add_op(daemon, "drain2")
    assert (state, code) == ("compensated", 106)
    assert undone_steps(daemon, op_id) == []
    assert owned_processes(daemon) == []
    assert bridge_ports(br) == []
    assert netns_links(ns) == ["lo"]
    assert ipam_held(daemon.ipam_dir) == []
