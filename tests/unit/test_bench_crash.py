"""We test these aspects of `netctl bench crash`'s own logic, without a daemon: the check
after each restart (:func:`netctl_kit.bench.crash.violations`) passes a sound state and names
each kind of violation (a journal that fails its integrity check, an address allocated
twice, an allocation whose attachment is not live, an attachment of a deleted or unknown
pod, an acknowledged pod with nothing attached, a bridge port too many, a netns left, a
delegate running, reconcile work left); the faulty delegates' scripts; an iteration's
random choices come from the seed and its number alone; every round of four iterations
gives each kind of fault to its first pod, whatever the seed, and plans its GC before the
kill's count."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from netctl_kit.bench import crash
from netctl_kit.bench.crash import FAULTS, Facts, violations

NET = "default/ncb-1"


def att(number: int, container: str) -> dict[str, object]:
    return {"attachment": number, "container": container, "network": NET, "ifname": "eth0",
            "state": "attached"}


def alloc(address: str, attachment: int | None, container: str) -> dict[str, object]:
    return {"address": f"{address}/24", "attachment": attachment, "container": container,
            "ifname": "eth0"}


SOUND = Facts(
    integrity=["ok"], attachments=[att(1, "a"), att(2, "b")],
    allocations=[alloc("10.0.0.2", 1, "a"), alloc("10.0.0.3", 2, "b")],
    known={"a": True, "b": True, "c": False}, deleted=["d"], networks={NET: "br1"},
    ports={"br1": 2}, netns=["ns-a", "ns-b", "ns-c"], known_netns=["ns-a", "ns-b", "ns-c"],
    delegates=[], plan={"attachments": [], "allocations": [], "links": []})


def test_a_sound_state_passes() -> None:
    assert violations(SOUND) == []


@pytest.mark.parametrize(("change", "expected"), [
    ({"integrity": ["row 3 missing from index x"]}, "journal integrity_check: row 3"),
    ({"allocations": [alloc("10.0.0.2", 1, "a"), alloc("10.0.0.2", 2, "b")]},
     "address 10.0.0.2 allocated 2 times"),
    ({"allocations": [alloc("10.0.0.2", 1, "a"), alloc("10.0.0.3", 9, "x")]},
     "allocation 10.0.0.3/24 of x eth0: its owner (attachment 9) is not live"),
    ({"allocations": [alloc("10.0.0.2", 1, "a"), alloc("10.0.0.3", None, "x")]},
     "its owner (attachment None) is not live"),
    ({"attachments": [att(1, "a"), att(2, "b"), att(3, "d")], "ports": {"br1": 3}},
     "attachment 3 of d on default/ncb-1: the pod was deleted"),
    ({"attachments": [att(1, "a"), att(2, "b"), att(3, "z")], "ports": {"br1": 3}},
     "attachment 3 of z on default/ncb-1: a pod the runtime does not know"),
    ({"attachments": [att(1, "a")], "allocations": [alloc("10.0.0.2", 1, "a")],
      "ports": {"br1": 1}}, "b: acknowledged ADD, pod not deleted, but no attachment live"),
    ({"ports": {"br1": 3}}, "bridge br1: 3 ports for 2 live attachments of default/ncb-1"),
    ({"netns": ["ns-a", "ns-b", "ns-c", "ns-d"]}, "netns ns-d left"),
    ({"delegates": ["pid 7 sleep"]}, "delegate process left: pid 7 sleep"),
    ({"plan": {"attachments": [], "allocations": [], "links": ["veth1"]}},
     "reconcile would still links: veth1"),
])
def test_each_violation_is_named(change: dict[str, object], expected: str) -> None:
    found = violations(replace(SOUND, **change))  # type: ignore[arg-type]

    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_fault_plugins(tmp_path: Path, kind: str) -> None:
    plugin = tmp_path / f"fault-{kind}"
    plugin.write_text(crash.fault_plugin(kind))
    plugin.chmod(0o755)

    def run(verb: str, timeout: float = 10) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([str(plugin)], input=b"{}", capture_output=True, timeout=timeout,
                              env={"CNI_COMMAND": verb, "PATH": os.defpath}, check=False)

    for verb in ("DEL", "CHECK", "VERSION"):
        assert run(verb).returncode == 0
    if kind == "hang":
        with pytest.raises(subprocess.TimeoutExpired):
            run("ADD", timeout=0.5)
        return
    add = run("ADD")
    assert {"fail": 1, "crash": -11, "garbage": 0}[kind] == add.returncode, add


def test_an_iterations_choices_come_from_the_seed_and_its_number() -> None:
    def bench(seed: int) -> crash.CrashBench:
        b = crash.CrashBench.__new__(crash.CrashBench)
        b.seed, b.pods, b.concurrency = seed, 30, 6
        return b

    def choices(b: crash.CrashBench, n: int) -> tuple[object, ...]:
        it = b.plan(n)
        return it.kill_after, it.reboot, it.gc_after, tuple(it.faulty)

    assert choices(bench(5), 3) == choices(bench(5), 3)
    assert [choices(bench(5), n) for n in range(1, 20)] != [
        choices(bench(6), n) for n in range(1, 20)]
    faults = [f for n in range(1, 50) for f in bench(5).plan(n).faulty if f]
    assert set(faults) == set(FAULTS)


def test_each_round_of_iterations_covers_every_fault_kind() -> None:
    def bench(seed: int, pods: int) -> crash.CrashBench:
        b = crash.CrashBench.__new__(crash.CrashBench)
        b.seed, b.pods, b.concurrency = seed, pods, 3
        return b

    for seed in range(20):
        for first in (1, 5, 9):  # rounds 1, 2, 3
            plans = [bench(seed, 6).plan(n) for n in range(first, first + len(FAULTS))]
            assert sorted(str(p.faulty[0]) for p in plans) == sorted(FAULTS), seed
            assert all(p.gc_after is None or 0 <= p.gc_after <= p.kill_after for p in plans)
        assert [crash.fault_cover(seed, n) for n in range(1, 9)] == [
            bench(seed, 6).plan(n).faulty[0] for n in range(1, 9)]
    # the order of a round comes from the seed
    assert len({tuple(crash.fault_cover(seed, n) for n in range(1, 5))
                for seed in range(20)}) > 1
    assert bench(1, 0).plan(1).faulty == []  # no churned pod, no fault
