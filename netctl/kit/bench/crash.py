"""The crash scenario, written once: SIGKILL the daemon in the middle of a churn, restart
it, replay, reconcile, and count what is left; nothing may be. ``netctl bench crash`` runs
it N times; ``tests/integration/test_crash.py`` runs an iteration, and its steps
(:func:`kill`, :func:`recover`, :func:`netctl_kit.harness.leftovers`) around a deterministic
kill.

One temporary state dir and one daemon config for the whole run: a bridge network with
netctl-ipam (the cluster network, ``eth0``), a bridge network with host-local (selected in
``NETCTL_NETWORKS``, ``net1``) and one network per kind of faulty delegate (a single
plugin: ``fault-fail`` answers ADD with a CNI error, ``fault-hang`` never finishes it,
``fault-crash`` dies of SIGSEGV, ``fault-garbage`` prints malformed JSON; every other verb
succeeds). Those plugins are the logic of ``tests/plugins``' fail, hang, crash and garbage,
written by :func:`fault_plugin` into a bin dir of the run's own (the bench does not depend
on ``tests/``). ``plugin-timeout`` is 2 s (the hang is killed then), ``reconcile-interval``
0 (no periodic round: only the one a start runs right after its replay),
``reconcile-events`` off (a host veth the kernel tears down after the restart would
otherwise let the events clean a vanished sandbox first, and the bench times the first
round) and ``reconcile-grace`` 0.

Every random choice of an iteration is made at its start (:meth:`CrashBench.plan`) from a
stream seeded with the run's ``--seed`` and the iteration's number: the kill's pod count,
whether it is a node reboot (1 in 10), whether and when a GC runs (1 in 2, before the
kill's count is reached), which of the other pods get a faulty delegate (1 in 5, the kind
at random). The first churned pod always gets one, its kind by turns (:func:`fault_cover`:
every round of four iterations hits each kind once, in an order shuffled from the seed).
What lands does not depend on timing: the kill waits for the first pod's ADD to be
answered and for the GC to finish, and the pods past the kill's count wait for them too
(the churn pauses), so the kill still falls in the churn. A faulty ADD the kill cuts
(any answer accepted) is counted apart from those answered and checked. Each iteration:

1. start the daemon; ADD five resident pods, which stay attached through the churn;
2. churn: P pods, at most C at a time, each ``ip netns add``, ADD and DEL through the
   installed thin plugin, as a runtime would (a failed ADD is followed by its DEL; a DEL
   that exits 0 lets the runtime forget the pod and delete its netns; one that fails
   keeps the pod for a retry). A pod with a fault selects its faulty network beside
   net1: its ADD must fail with that fault's code, compensated by the time it answers
   (no attachment live, nothing in its netns), and its DEL must exit 0;
   meanwhile, maybe, a CNI GC (cniVersion 1.1.0, ``cni.dev/valid-attachments`` listing
   every pod the runtime knows; no pod becomes known while it runs): it must DEL none
   of them;
3. once a random number of pods has started (and what the kill waits for is done), after
   a random pause, SIGKILL the daemon and count the operations ``netctl journal
   --running`` lists. The plugin execs then in flight finish however they can (any
   answer is accepted); no pod starts or goes on after that: the runtime keeps what it
   has;
4. delete the netns of one or two pods the runtime has attached, without a DEL (vanished
   sandboxes); DEL another through the plugin, which records it (the daemon is down).
   A node reboot instead deletes every pod's netns, and the runtime forgets them all;
5. restart the daemon; the time from its exec to its socket accepting is the recovery
   time (it includes killing the delegates the dead daemon left running, and the start-up
   replay, which finishes the recorded DEL: its attachments must be gone by then);
   ``netctl status --json`` gives the replay's figures; then the time from the exec until
   the daemon's own first reconcile round has removed the vanished sandboxes'
   attachments;
6. ``netctl reconcile --json`` (what is left for it to do, and no errors);
7. check the state (:func:`violations`, pure, on the :class:`Facts` gathered): the
   journal's ``PRAGMA integrity_check`` is ok; no address is allocated twice among the
   live allocations; every live allocation's attachment is live; every live attachment
   belongs to a pod the runtime knows (none of a deleted pod); every pod whose ADD was
   acknowledged and not followed by a DEL is attached; each bridge has one port per live
   attachment of its network; no netns but the runtime's pods', no delegate process,
   nothing left for ``netctl reconcile --dry-run``. Then each attached pod pings the next
   one's eth0 and net1 addresses (``ip netns exec NS ping -c1 -W1``; only the run's own
   namespaces); and a deleted pod is DELeted again: exit 0, the journal's live
   attachments and allocations unchanged;
8. DEL every pod the runtime still knows through the plugin (as kubelet retries); each must
   exit 0; then delete its netns;
9. look for leftovers (:func:`netctl_kit.harness.leftovers`: operations still running,
   attachments not removed, live IPAM allocations, host-local leases, ports on the bridges,
   host veths named in the journal's results that still exist (those ``netctl reconcile
   --dry-run`` would delete), delegate processes carrying the ``NETCTL_OWNER`` marker,
   netns); then SIGTERM the daemon, which must exit 0.

``--reboot-pods N`` then measures the start-up after a node reboot with N attachments
(:meth:`CrashBench.rebooted_start`): N plain ADDs (the cluster network alone) at
concurrency 8, every netns deleted, SIGKILL, restart; the time from its exec to its
socket accepting and to every attachment released (the replay and the first round).

Any violation, leftover, failed exec (one that finished before the kill, or after the
restart) or reconcile error makes the run exit 1, with what was found, each line naming
its iteration and the seed. Everything it makes on the host
starts with one prefix and is removed at the end, also after a failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import random
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netctl_kit import harness, journaldb
from netctl_kit.bench.common import (
    POD_NAMESPACE,
    Bench,
    Measured,
    Side,
    check_result,
    drive,
    from_journal,
    pick_subnets,
    proc_cpu,
    progress,
    summary_ms,
)
from netctl_kit.bench.render import num, steps, table, verdict
from netctl_kit.harness import LEFTOVERS, CNIResult, Daemon, HarnessError, wait_for
from rich.console import RenderableType

PODS = 30  # churned per iteration
RESIDENTS = 5  # attached before the churn, kept through it (≤ 3 vanish or DELed while down)
CONCURRENCY = 6
KILL_PAUSE_S = 0.25  # the most the kill waits once its pod count is reached
PLUGIN_TIMEOUT_S = 2  # the hang fault is killed after this
SETTINGS = {"reconcile-interval": 0, "reconcile-events": False, "reconcile-grace": 0,
            "plugin-timeout": PLUGIN_TIMEOUT_S, "compensate-timeout": 30, "drain-timeout": 30}
FAULT_SHARE = 0.2  # of the churned pods, with a faulty delegate
GC_SHARE = 0.5  # of the iterations, with a GC during the churn
REBOOT_SHARE = 0.1  # of the iterations, a node reboot (every netns gone at the kill)
REBOOT_CONCURRENCY = 8

# The faulty delegates, written into the run's own bin dir (the bench does not depend on
# tests/: these are the logic of tests/plugins/{fail,hang,crash,garbage}); kind → (script's
# ADD branch, the CNI code netctl answers with, a fragment of its message).
_VERSION = '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]}'
FAULTS = {
    "fail": ("echo '{\"cniVersion\":\"1.0.0\",\"code\":7,\"msg\":\"refused on purpose\"}'; "
             "exit 1", 7, "refused on purpose"),
    "hang": ("exec sleep 600", 101, f"within {PLUGIN_TIMEOUT_S}s and was killed"),
    "crash": ("kill -SEGV $$", 102, "killed by signal 11"),
    "garbage": ("echo '{\"cniVersion\": \"1.0.0\", \"interfaces\": [{\"name\":'", 103,
                "malformed JSON"),
}


def fault_cover(seed: int, number: int) -> str:
    """The kind of faulty delegate iteration ``number`` (from 1) gives its first pod: the
    iterations go in rounds of one per kind, each round's order shuffled from the seed and
    the round's number, so iterations 1 to 4 (and 5 to 8, …) hit every kind."""
    kinds = sorted(FAULTS)
    rounds, position = divmod(number - 1, len(kinds))
    random.Random(f"{seed}/faults/{rounds}").shuffle(kinds)
    return kinds[position]


def fault_plugin(kind: str) -> str:
    """The faulty delegate ``fault-KIND``: ADD fails that way; every other verb succeeds."""
    return (f"#!/bin/sh\ncat >/dev/null\ncase \"$CNI_COMMAND\" in\n"
            f"VERSION) echo '{_VERSION}' ;;\nADD) {FAULTS[kind][0]} ;;\nesac\nexit 0\n")


# -- the steps ---------------------------------------------------------------------------------


@dataclass
class Killed:
    in_flight: dict[str, int]  # the journal's running operations by verb, right after
    orphans: list[int]  # the dead daemon's delegates still running just then
    peak_rss_kib: int


def kill(daemon: Daemon) -> Killed:
    """SIGKILL the daemon; what it left in flight."""
    rss = daemon.peak_rss_kib()
    daemon.kill()
    orphans = daemon.delegates()
    running = daemon.read_journal(running=True)["operations"]
    return Killed(dict(Counter(op["verb"] for op in running)), orphans, rss)


@dataclass
class Recovery:
    seconds: float  # the restart's exec → its socket accepting (orphan kill, replay)
    replay: dict[str, Any]  # the start-up replay's report (``netctl status``)
    reconcile: dict[str, Any]  # what the reconcile did, counted, and its errors
    problems: list[str]
    released_s: float | None = None  # exec → every vanished sandbox's attachments removed


def recover(daemon: Daemon, in_flight: int, vanished: Sequence[str] = (),
            recorded: Sequence[str] = ()) -> Recovery:
    """Restart the daemon after :func:`kill` (``in_flight`` operations were running): the
    DELs the plugin ``recorded`` meanwhile must be finished by the start-up replay, before
    the socket accepts; wait for its first reconcile round (it runs right after the
    replay) to remove the attachments of the ``vanished`` sandboxes, timing it from the
    exec; then ``netctl reconcile``: the replay must close each of those operations
    without a failure, the reconcile report no error."""
    exec_at = time.monotonic()
    seconds = daemon.start()
    left = daemon.live_attachments_of(recorded)
    replay = daemon.status().get("replay", {})
    problems = [f"start-up replay: {failure}" for failure in replay.get("failed", [])]
    finished = replay.get("recorded_dels", {}).get("finished")
    if left or (finished or 0) < len(recorded):  # DELs cut by the kill are recorded too
        problems.append(f"{len(recorded)} DELs recorded while the daemon was down: the "
                        f"start-up replay finished {finished}, {left} attachments left "
                        "when the socket accepted")
    if replay.get("operations") != in_flight:
        problems.append(f"start-up replay closed {replay.get('operations')} operations; the "
                        f"journal had {in_flight} running at the kill")
    released: float | None = None
    try:
        wait_for(lambda: daemon.live_attachments_of(vanished) == 0, 60,
                 "the vanished sandboxes released by the first reconcile round")
        released = time.monotonic() - exec_at
    except HarnessError as exc:
        problems.append(str(exc))
    report = daemon.reconcile()
    plan = report.get("plan", {})
    done = {key: len(plan.get(key, [])) for key in ("attachments", "allocations", "links")}
    errors = list(report.get("errors", []))
    problems += [f"reconcile: {err}" for err in errors]
    return Recovery(seconds, replay, {**done, "errors": errors}, problems, released)


# -- the checks after the restart ----------------------------------------------------------


@dataclass
class Facts:
    """The state at the check point (the daemon restarted, recovered, idle)."""

    integrity: list[str]  # PRAGMA integrity_check
    attachments: list[dict[str, Any]]  # live, from ``netctl journal``
    allocations: list[dict[str, Any]]  # live, from ``netctl ipam show``
    known: dict[str, bool]  # container → attached (its ADD exited 0, no DEL since)
    deleted: list[str]  # containers the runtime DELed (exit 0) and forgot
    networks: dict[str, str]  # journal network name → its bridge
    ports: dict[str, int]  # bridge → ports on it
    netns: list[str]  # netns of the run's prefix
    known_netns: list[str]  # those the runtime knows
    delegates: list[str]  # live delegate processes
    plan: dict[str, list[Any]]  # what ``netctl reconcile --dry-run`` would still do


def violations(f: Facts) -> list[str]:
    """Everything wrong with the state at the check point."""
    out = []
    if f.integrity != ["ok"]:
        out.append(f"journal integrity_check: {harness.some(f.integrity)}")
    seen: Counter[str] = Counter(str(a["address"]).split("/")[0] for a in f.allocations)
    out += [f"address {addr} allocated {n} times" for addr, n in seen.items() if n > 1]
    live_ids = {a["attachment"] for a in f.attachments}
    out += [f"allocation {a['address']} of {a['container']} {a['ifname']}: its owner "
            f"(attachment {a['attachment']}) is not live" for a in f.allocations
            if a["attachment"] not in live_ids]
    owners = {a["container"] for a in f.attachments}
    gone = set(f.deleted)
    out += [f"attachment {a['attachment']} of {a['container']} on {a['network']}: "
            + ("the pod was deleted" if a["container"] in gone else "a pod the runtime "
               "does not know") for a in f.attachments if a["container"] not in f.known]
    out += [f"{c}: acknowledged ADD, pod not deleted, but no attachment live"
            for c, attached in f.known.items() if attached and c not in owners]
    for network, bridge in f.networks.items():
        live = sum(1 for a in f.attachments if a["network"] == network)
        if f.ports.get(bridge, 0) != live:
            out.append(f"bridge {bridge}: {f.ports.get(bridge, 0)} ports for {live} live "
                       f"attachments of {network}")
    out += [f"netns {ns} left, no pod the runtime knows"
            for ns in sorted(set(f.netns) - set(f.known_netns))]
    out += [f"delegate process left: {d}" for d in f.delegates]
    out += [f"reconcile would still {what}: {harness.some([str(x) for x in items])}"
            for what, items in f.plan.items() if items]
    return out


# -- the scenario ----------------------------------------------------------------------------


@dataclass
class Pod:
    """A pod as the runtime knows it."""

    index: int
    container: str
    ns: str  # its netns's name
    path: str
    attached: bool = False  # its ADD exited 0 and no DEL has started
    fault: str | None = None  # the kind of faulty delegate among its networks


@dataclass
class Iteration:
    """One iteration: what was decided for it at its start (from its own random stream,
    seeded with the run's seed and its number, whatever the threads' order) and what
    happened."""

    number: int
    side: Side
    rnd: random.Random
    kill_after: int = 0  # pods started before the kill
    reboot: bool = False  # every netns deleted at the kill, as a node reboot
    gc_after: int | None = None  # pods started before the GC (None: no GC)
    faulty: list[str | None] = field(default_factory=list)  # churned pod → its fault kind
    started: int = 0  # churned pods started
    awaited: set[str] = field(default_factory=set)  # what the kill waits for ("pod 0", "GC")
    execs: Counter[str] = field(default_factory=Counter)  # verb → plugin execs
    # "ADD exit 1", …: execs ending after the kill began (in flight, or started just then)
    interrupted: Counter[str] = field(default_factory=Counter)
    killed: bool = False
    restarted: bool = False  # execs from now on are the bench's to answer for
    in_flight: dict[str, int] = field(default_factory=dict)  # running operations by verb
    orphans: int = 0  # delegates of the dead daemon still running just after the kill
    vanished: list[str] = field(default_factory=list)
    recorded_dels: list[str] = field(default_factory=list)  # DELed while the daemon was down
    recovery_s: float = 0.0
    released_s: float | None = None  # restart → the vanished sandboxes released
    replay: dict[str, Any] = field(default_factory=dict)
    reconcile: dict[str, Any] = field(default_factory=dict)
    runtime_dels: int = 0
    # kind → faulty ADDs answered by the live daemon (and checked), or cut by the kill
    faults: Counter[str] = field(default_factory=Counter)
    faults_cut: Counter[str] = field(default_factory=Counter)
    gc: dict[str, int] = field(default_factory=dict)  # the GC's valid list, DELs it made
    deleted: list[Pod] = field(default_factory=list)  # DELed (exit 0) and forgotten
    checked: dict[str, int] = field(default_factory=dict)  # the check point's counts
    leftovers: dict[str, list[str]] = field(default_factory=dict)
    exit_code: int | None = None


class CrashBench(Bench):
    def __init__(self, iterations: int, pods: int = PODS, concurrency: int = CONCURRENCY,
                 seed: int | None = None, reboot_pods: int = 0) -> None:
        super().__init__(concurrency, SETTINGS)
        self.iterations = iterations
        self.pods = pods
        self.reboot_pods = reboot_pods
        self.seed = secrets.randbits(32) if seed is None else seed
        self.known: dict[str, Pod] = {}  # container → pod: what the runtime knows
        self.lock = threading.Lock()
        self.gc_gate = threading.Lock()  # held by a GC: no pod becomes known meanwhile
        self.fault_nets: dict[str, str] = {}  # kind → its network's name
        self.started = threading.Condition(self.lock)
        self.halt = threading.Event()  # the daemon is dead: the runtime stops
        self.kill_at: float | None = None  # monotonic time the SIGKILL was decided
        self.peak_rss_kib = 0

    def setup(self) -> None:
        """The cluster network with netctl-ipam, a second with host-local, a network of one
        faulty delegate for each kind (in a bin dir of the run's own); the plugin."""
        for i, subnet in enumerate(pick_subnets(2, max(self.pods + RESIDENTS,
                                                       self.reboot_pods) + 8)):
            self.add_network(subnet, netctl_ipam=i == 0)
        bin_dir = self.root / "fault-bin"
        bin_dir.mkdir()
        for kind in FAULTS:
            plugin = bin_dir / f"fault-{kind}"
            plugin.write_text(fault_plugin(kind))
            plugin.chmod(0o755)
            name = self.fault_nets[kind] = f"{self.prefix}-f{kind}"
            self.daemon.add_network(name, {"cniVersion": "1.0.0", "name": name,
                                           "plugins": [{"type": f"fault-{kind}"}]})
        self.daemon.bin_dirs.append(str(bin_dir))
        self.daemon.install_plugin()

    # -- the runtime -----------------------------------------------------------------

    def new_pod(self, it: Iteration, index: int, tag: str = "p", fault: str | None = None) -> Pod:
        ns = f"{self.prefix}-{it.number}{tag}{index}"
        pod = Pod(index, f"{self.prefix}-{it.number}-{tag}{index}", ns, harness.netns_add(ns),
                  fault=fault)
        with self.gc_gate, self.lock:
            self.known[pod.container] = pod
        return pod

    def forget(self, pod: Pod, it: Iteration | None = None) -> None:
        """The runtime is done with the pod: its netns goes (``it``: after its DEL)."""
        with self.lock:
            self.known.pop(pod.container, None)
            if it is not None:
                it.deleted.append(pod)
        harness.netns_del(pod.ns)

    def networks(self, pod: Pod) -> str:
        """``NETCTL_NETWORKS`` of the pod: net1, and its faulty network when it has one."""
        return ",".join([self.nets[1].name] + ([self.fault_nets[pod.fault]] if pod.fault
                                               else []))

    def cni(self, it: Iteration, command: str, pod: Pod) -> CNIResult | None:
        """One exec of the thin plugin; None when it did not exit in time. A failure is
        the bench's unless the exec was cut by the kill (it ended after the kill began)."""
        try:
            res: CNIResult | None = self.daemon.cni(
                command, pod.container, pod.path, self.netctl_conf(),
                pod=f"{POD_NAMESPACE}/crash-{it.number}-{pod.index}",
                networks=self.networks(pod), args=("IgnoreUnknown=1",))
        except subprocess.TimeoutExpired:
            res = None
        with self.lock:
            it.execs[command] += 1
            cut = self.kill_at is not None and time.monotonic() >= self.kill_at \
                and not it.restarted
            if cut:
                it.interrupted[f"{command} exit {'timeout' if res is None else res.rc}"] += 1
            if command == "ADD" and pod.fault:
                (it.faults_cut if cut else it.faults)[pod.fault] += 1
        if cut:
            return res  # cut by the kill: any answer goes
        if command == "ADD" and pod.fault:
            for problem in self.failed_add_problems(pod, res):
                it.side.fail(f"{pod.container}: ADD with a faulty {pod.fault} delegate: "
                             f"{problem}")
            return res
        if it.side.exited_ok(f"{pod.container}: {command}", res) and command == "ADD":
            wrong = check_result(res.out if res else None, self.nets[0])
            if wrong:
                it.side.fail(f"{pod.container}: ADD result: {wrong}")
        return res

    def failed_add_problems(self, pod: Pod, res: CNIResult | None) -> list[str]:
        """What is wrong after an ADD with a faulty delegate: it must fail with that fault's
        code, compensated (no attachment live, nothing in the netns) by the time it answers."""
        _, code, what = FAULTS[pod.fault or ""]
        if res is None:
            return ["did not exit"]
        problems = []
        msg = str((res.out or {}).get("msg", ""))
        if res.rc == 0 or (res.out or {}).get("code") != code or what not in msg:
            problems.append(f"expected code {code} ({what}): {res.describe()}")
        if self.daemon.live_attachments_of([pod.container]):
            problems.append("attachments left live (not compensated)")
        links = harness.netns_links(pod.ns)
        if links != ["lo"]:
            problems.append(f"interfaces left in its netns: {links}")
        return problems

    def churn_pod(self, it: Iteration, index: int) -> None:
        if index >= it.kill_after:  # the kill's count is reached: wait for what it awaits
            with self.started:
                while it.awaited and not self.halt.is_set() and not self.stop.is_set():
                    self.started.wait(0.05)
        if self.halt.is_set():
            return
        try:
            pod = self.new_pod(it, index, fault=it.faulty[index])
            with self.started:
                it.started += 1
                self.started.notify_all()
            add = self.cni(it, "ADD", pod)
        finally:
            self.settled(it, f"pod {index}")  # its ADD answered: the kill may come
        pod.attached = add is not None and add.rc == 0
        if self.halt.is_set():
            return  # the runtime keeps the pod as it is
        pod.attached = False
        rm = self.cni(it, "DEL", pod)
        if rm is not None and rm.rc == 0:
            self.forget(pod, it)

    def settled(self, it: Iteration, what: str) -> None:
        """``what`` (one of ``it.awaited``) is done: the kill waits no more for it."""
        with self.started:
            it.awaited.discard(what)
            self.started.notify_all()

    def gc(self, it: Iteration, churn_done: threading.Event, after: int) -> None:
        """Once ``after`` pods started (at most the kill's count: the kill waits for it), a
        CNI GC (1.1.0) listing every pod the runtime knows (no pod becomes known while it
        runs); it must exit 0 and DEL none of them."""
        try:
            self.collect(it, churn_done, after)
        finally:
            self.settled(it, "GC")

    def collect(self, it: Iteration, churn_done: threading.Event, after: int) -> None:
        with self.started:
            while it.started < after and not churn_done.is_set() and not self.stop.is_set():
                self.started.wait(0.05)
        if self.stop.is_set():
            return
        with self.gc_gate:
            with self.lock:
                valid = sorted(self.known)
            before = self.last_operation()
            conf = {**self.daemon.conf(self.nets[0].name), "cni.dev/valid-attachments": [
                {"containerID": c, "ifname": "eth0"} for c in valid]}
            try:
                res: CNIResult | None = self.daemon.cni("GC", "", None, conf)
            except subprocess.TimeoutExpired:
                res = None
            collected = from_journal(Path(self.daemon.journal_path), lambda conn: {
                str(op): c for op, c in journaldb.containers_after(conn, "gc", before).items()})
        it.gc = {"valid": len(valid), "dels": len(collected)}
        it.side.exited_ok("GC", res)
        wrong = sorted(set(collected.values()) & set(valid))
        if wrong:
            it.side.fail(f"GC DELeted pods its valid list named: {harness.some(wrong)}")

    def last_operation(self) -> int:
        got = from_journal(Path(self.daemon.journal_path), lambda conn: {
            "id": journaldb.last_operation_id(conn)})
        return int(got.get("id", 0))

    # -- the fault ---------------------------------------------------------------------

    def killer(self, it: Iteration, churn_done: threading.Event) -> None:
        """SIGKILL the daemon once ``it.kill_after`` pods started (or the churn ended) and
        what it awaits is done (the first pod's ADD answered, the GC), after a random
        pause."""
        with self.started:
            while not self.stop.is_set() and (
                    it.awaited or (it.started < it.kill_after and not churn_done.is_set())):
                self.started.wait(0.05)
        if self.stop.is_set():
            return
        time.sleep(it.rnd.uniform(0, KILL_PAUSE_S))
        self.halt.set()  # no pod starts, no verb follows, from now on
        with self.lock:
            self.kill_at = time.monotonic()
        killed = kill(self.daemon)
        self.peak_rss_kib = max(self.peak_rss_kib, killed.peak_rss_kib)
        it.killed, it.orphans, it.in_flight = True, len(killed.orphans), killed.in_flight

    def del_while_down(self, it: Iteration) -> None:
        """The runtime DELs one attached pod while the daemon is down: the plugin records
        the DEL and exits 0, and the runtime forgets the pod (its netns goes)."""
        with self.lock:
            attached = sorted((p for p in self.known.values() if p.attached),
                              key=lambda p: p.container)
        if not attached:
            return
        pod = it.rnd.choice(attached)
        res = self.daemon.cni("DEL", pod.container, pod.path, self.netctl_conf(),
                              pod=f"{POD_NAMESPACE}/crash-{it.number}-{pod.index}",
                              networks=self.networks(pod), args=("IgnoreUnknown=1",))
        if res.rc != 0 or "recorded" not in res.stderr:
            it.side.fail(f"{pod.container}: a DEL while the daemon is down was not recorded: "
                         f"{res.describe()}")
            return
        self.forget(pod, it)
        it.recorded_dels.append(pod.container)

    def vanish(self, it: Iteration) -> None:
        """Delete the netns of one or two attached pods without a DEL; the runtime forgets them."""
        with self.lock:
            attached = sorted((p for p in self.known.values() if p.attached),
                              key=lambda p: p.container)
        for pod in it.rnd.sample(attached, min(len(attached), it.rnd.choice((1, 2)))):
            self.forget(pod)
            it.vanished.append(pod.container)

    def reboot(self, it: Iteration) -> None:
        """A node reboot: every pod's netns is gone at once; the runtime forgets them all."""
        with self.lock:
            pods = list(self.known.values())
        self.parallel(it.side, len(pods), lambda i: self.forget(pods[i]), what="netns")
        it.vanished += [p.container for p in pods]

    # -- after the restart -------------------------------------------------------------

    def recover(self, it: Iteration) -> None:
        """Restart, replay and reconcile."""
        rec = recover(self.daemon, sum(it.in_flight.values()), it.vanished, it.recorded_dels)
        it.recovery_s, it.replay, it.reconcile = rec.seconds, rec.replay, rec.reconcile
        it.released_s = rec.released_s
        for problem in rec.problems:
            it.side.fail(problem)
        self.halt.clear()
        with self.lock:
            it.restarted = True

    def delete_all(self, it: Iteration) -> None:
        """The runtime DELs every pod it still knows (as kubelet retries)."""
        with self.lock:
            left = list(self.known.values())
        it.runtime_dels = len(left)

        def retry(index: int) -> None:
            rm = self.cni(it, "DEL", left[index])
            if rm is not None and rm.rc == 0:
                self.forget(left[index], it)

        self.parallel(it.side, len(left), retry)

    def facts(self, it: Iteration) -> Facts:
        d = self.daemon
        with self.lock:
            known = {c: p.attached for c, p in self.known.items()}
            known_netns = [p.ns for p in self.known.values()]
        plan = d.reconcile(dry_run=True).get("plan", {})
        atts = [a for a in d.read_journal()["attachments"] if a["state"] != "removed"]
        return Facts(
            d.integrity(), atts, harness.live_allocations(d.state_dir), known,
            [p.container for p in it.deleted],
            {f"default/{n.name}": n.bridge for n in self.nets},
            {n.bridge: len(harness.bridge_ports(n.bridge)) for n in self.nets},
            harness.netns_names(self.prefix), known_netns,
            [f"pid {pid} {harness.comm(pid)}" for pid in d.delegates()],
            {k: list(plan.get(k, [])) for k in ("attachments", "allocations", "links")})

    def check(self, it: Iteration) -> None:
        """After the restart, before the runtime's DELs: the state is sound (see
        :func:`violations`), the attached pods reach each other over both bridges, and a
        repeated DEL of a deleted pod changes nothing."""
        for problem in violations(self.facts(it)):
            it.side.fail(problem)
        with self.lock:
            attached = [p for p in self.known.values() if p.attached]
        pings = 0
        for src, dst in zip(attached, attached[1:] + attached[:1], strict=True):
            if src is dst:
                break
            addrs = harness.netns_addrs(dst.ns)
            for ifname in ("eth0", "net1"):
                for addr in addrs.get(ifname, []):
                    pings += 1
                    if not harness.ping(src.ns, addr.split("/")[0]):
                        it.side.fail(f"{src.container} cannot ping {dst.container}'s "
                                     f"{ifname} {addr}")
                if not addrs.get(ifname):
                    it.side.fail(f"{dst.container}: attached, but no address on {ifname}")
        redels = 0
        if it.deleted:
            pod = it.rnd.choice(sorted(it.deleted, key=lambda p: p.container))
            before = self.daemon.live_counts()
            self.cni(it, "DEL", pod)  # must exit 0 (a failure of the iteration)
            after = self.daemon.live_counts()
            redels = 1
            if before != after:
                it.side.fail(f"{pod.container}: a repeated DEL changed the live (attachments, "
                             f"allocations) from {before} to {after}")
        it.checked = {"attached": len(attached), "pings": pings, "repeated_dels": redels}

    # -- one iteration, the whole run ----------------------------------------------------

    def plan(self, number: int) -> Iteration:
        """Iteration ``number``'s random choices, made at once from its own stream."""
        rnd = random.Random(f"{self.seed}/{number}")
        it = Iteration(number, Side(f"iteration {number}"), rnd)
        it.kill_after = rnd.randint(self.concurrency, max(self.pods - self.concurrency,
                                                          self.concurrency))
        it.reboot = rnd.random() < REBOOT_SHARE
        it.gc_after = rnd.randint(0, it.kill_after) if rnd.random() < GC_SHARE else None
        it.faulty = [rnd.choice(sorted(FAULTS)) if rnd.random() < FAULT_SHARE else None
                     for _ in range(self.pods)]
        if it.faulty:
            it.faulty[0] = fault_cover(self.seed, number)  # the first pod started
        return it

    def iteration(self, number: int) -> Iteration:
        it = self.plan(number)
        self.kill_at = None
        self.halt.clear()
        self.daemon.start()
        for i in range(RESIDENTS):
            pod = self.new_pod(it, i, tag="r")
            add = self.cni(it, "ADD", pod)
            pod.attached = add is not None and add.rc == 0
        churn_done = threading.Event()
        it.awaited = {"pod 0"} if it.faulty else set()
        if it.gc_after is not None:
            it.awaited.add("GC")
        helpers = [threading.Thread(target=self.killer, args=(it, churn_done), daemon=True,
                                    name="killer")]
        if it.gc_after is not None:
            helpers.append(threading.Thread(target=self.gc, args=(it, churn_done, it.gc_after),
                                            daemon=True, name="gc"))
        for t in helpers:
            t.start()
        try:
            self.parallel(it.side, self.pods, lambda index: self.churn_pod(it, index))
        finally:
            churn_done.set()
            for t in helpers:
                t.join(60)
        if not it.killed:
            raise RuntimeError(f"iteration {number}: the daemon was not killed")
        if it.reboot:
            self.reboot(it)
        else:
            self.vanish(it)
            self.del_while_down(it)
        self.recover(it)
        self.check(it)
        self.delete_all(it)
        it.leftovers = harness.leftovers(self.daemon, bridges=[n.bridge for n in self.nets],
                                         netns_prefix=self.prefix,
                                         ipam_dir=self.daemon.ipam_dir)
        rss, it.exit_code = self.finish_daemon()
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        if it.exit_code != 0:
            it.side.fail(f"the daemon exited with {it.exit_code} on SIGTERM")
        return it

    def rebooted_start(self) -> dict[str, Any]:
        """The start-up after a node reboot with ``reboot_pods`` attachments: that many plain
        ADDs (the cluster network alone, concurrency 8), every netns deleted, SIGKILL, then
        the restart timed from its exec to its socket accepting and to every attachment
        released; then what is left."""
        n, side = self.reboot_pods, Side("reboot")
        it = Iteration(0, side, random.Random(self.seed))
        pods: list[Pod] = []
        self.daemon.start()

        def add(index: int) -> None:
            pod = self.new_pod(it, index, tag="b")
            with self.lock:
                pods.append(pod)
            res = self.daemon.cni("ADD", pod.container, pod.path, self.netctl_conf(),
                                  pod=f"{POD_NAMESPACE}/reboot-{index}")
            side.exited_ok(f"{pod.container}: ADD", res)

        concurrency, self.concurrency = self.concurrency, REBOOT_CONCURRENCY
        try:
            added_s, _ = self.parallel(side, n, add)
            self.parallel(side, len(pods), lambda i: self.forget(pods[i]), what="netns")
        finally:
            self.concurrency = concurrency
        # A rebooted node starts with its namespaces gone; here the kernel is still tearing
        # them down (their veths) for seconds after `ip netns del`: wait for it, so the
        # restart is timed as on a node that rebooted, and say how long it took.
        deleted_at = time.monotonic()
        wait_for(lambda: not any(harness.bridge_ports(net.bridge) for net in self.nets),
                 300, f"the kernel's teardown of {n} deleted netns")
        teardown_s = time.monotonic() - deleted_at
        live = self.daemon.live_counts()[0]
        self.peak_rss_kib = max(self.peak_rss_kib, kill(self.daemon).peak_rss_kib)
        exec_at = time.monotonic()
        accepting_s = self.daemon.start()
        released_s: float | None = None
        cpu = (0.0, 0.0)  # the restarted daemon's CPU s till then: its own, its delegates'
        try:
            wait_for(lambda: self.daemon.live_attachments_of(p.container for p in pods) == 0,
                     300, f"the {n} attachments released after the reboot")
            released_s = time.monotonic() - exec_at
            cpu = proc_cpu(self.daemon.pid) if self.daemon.pid else (0.0, 0.0)
        except HarnessError as exc:
            side.fail(str(exc))
        replay = self.daemon.status().get("replay", {})
        left = harness.leftovers(self.daemon, bridges=[n.bridge for n in self.nets],
                                 netns_prefix=self.prefix, ipam_dir=self.daemon.ipam_dir)
        rss, code = self.finish_daemon()
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        if code != 0:
            side.fail(f"the daemon exited with {code} on SIGTERM")
        side.failures += harness.describe_leftovers(left)
        return {"pods": n, "live_attachments_at_kill": live, "adds_s": round(added_s, 2),
                "kernel_teardown_ms": round(teardown_s * 1000, 1),
                "accepting_ms": round(accepting_s * 1000, 1),
                "released_ms": None if released_s is None else round(released_s * 1000, 1),
                "released_cpu_s": {"daemon": round(cpu[0], 2), "delegates": round(cpu[1], 2)},
                "replay": replay, "leftovers": {k: len(v) for k, v in left.items()},
                "failures": side.failures[:20]}

    def measure(self) -> Measured:
        self.setup()
        progress(f"seed {self.seed}; networks {self.nets[0].subnet} (netctl-ipam), "
                 f"{self.nets[1].subnet} (host-local); {self.iterations} iterations of "
                 f"{self.pods} pods, concurrency {self.concurrency}")
        done: list[Iteration] = []
        with steps("iterations", self.iterations) as step:
            for n in range(1, self.iterations + 1):
                it = self.iteration(n)
                done.append(it)
                left = sum(len(v) for v in it.leftovers.values())
                step(f"iteration {n}{' (reboot)' if it.reboot else ''}: killed with "
                     f"{sum(it.in_flight.values())} operations running, {len(it.vanished)} "
                     f"sandbox(es) vanished, {sum(it.faults.values())} faults "
                     f"({sum(it.faults_cut.values())} more cut by the kill), recovered in "
                     f"{it.recovery_s * 1000:.0f} ms, {len(it.side.failures)} violations, "
                     f"{left} leftovers")
        rebooted = None
        if self.reboot_pods:
            progress(f"reboot: {self.reboot_pods} attachments, every netns deleted, SIGKILL, "
                     "restart")
            rebooted = self.rebooted_start()
        return self.report(done, rebooted)

    def report(self, done: list[Iteration],
               rebooted: dict[str, Any] | None = None) -> Measured:
        distinct: dict[str, list[str]] = {key: [] for key in LEFTOVERS}
        for it in done:
            for key, items in it.leftovers.items():
                distinct[key] += [i for i in items if i not in distinct[key]]
        problems = [f"iteration {it.number} (seed {self.seed}): {msg}"
                    for it in done for msg in it.side.failures]
        problems += [f"iteration {it.number} (seed {self.seed}): {msg}" for it in done
                     for msg in harness.describe_leftovers(it.leftovers)]
        if rebooted:
            problems += [f"reboot of {self.reboot_pods} (seed {self.seed}): {msg}"
                         for msg in rebooted["failures"]]
        in_flight = [sum(it.in_flight.values()) for it in done]
        by_verb: Counter[str] = Counter()
        interrupted: Counter[str] = Counter()
        faults: Counter[str] = Counter()
        faults_cut: Counter[str] = Counter()
        checked: Counter[str] = Counter()
        for it in done:
            by_verb.update(it.in_flight)
            interrupted.update(it.interrupted)
            faults.update(it.faults)
            faults_cut.update(it.faults_cut)
            checked.update(it.checked)
        states = from_journal(Path(self.daemon.journal_path), lambda conn: dict(Counter(
            f"{v} {o} {s}" for v, o, s in journaldb.operation_states(conn))))
        parts = {
            "networks": [{"name": n.name, "subnet": str(n.subnet), "bridge": n.bridge,
                          "ipam": n.ipam} for n in self.nets],
            "iterations_run": len(done),
            "faults": {
                "kills": sum(it.killed for it in done),
                "operations_running_at_kill": sum(in_flight),
                "operations_running_at_kill_by_verb": dict(by_verb),
                "operations_running_per_kill": in_flight,
                "execs_cut_by_kill": dict(interrupted),
                "vanished_sandboxes": sum(len(it.vanished) for it in done),
                "dels_while_down": sum(len(it.recorded_dels) for it in done),
                "orphaned_delegates": sum(it.orphans for it in done),
                "reboots": sum(it.reboot for it in done),
                "delegate_faults": {k: faults[k] for k in FAULTS},
                "delegate_faults_cut": {k: faults_cut[k] for k in FAULTS},
                "gcs": sum(1 for it in done if it.gc),
                "gc_dels": sum(it.gc.get("dels", 0) for it in done),
            },
            "checked": dict(checked),
            "rebooted_start": rebooted,
            "replay": {k: sum(int(it.replay.get(k, 0)) for it in done)
                       for k in ("operations", "attachments", "containers")}
            | {"failed": [f for it in done for f in it.replay.get("failed", [])]},
            "reconcile": {k: sum(int(it.reconcile.get(k, 0)) for it in done)
                          for k in ("attachments", "allocations", "links")}
            | {"errors": [e for it in done for e in it.reconcile.get("errors", [])]},
            "recovery_ms": summary_ms([it.recovery_s for it in done]),
            "vanished_released_ms": summary_ms([it.released_s for it in done
                                                if it.vanished and it.released_s is not None]),
            "runtime_dels_after_restart": sum(it.runtime_dels for it in done),
            "execs": dict(sum((it.execs for it in done), Counter())),
            "failures": sum(len(it.side.failures) for it in done),
            "leftovers": {key: len(items) for key, items in distinct.items()},
            "leftover_items": {key: items[:20] for key, items in distinct.items() if items},
            "journal_operations": states,
            "iterations": [{
                "iteration": it.number, "pods_started": it.started + RESIDENTS,
                "kill_after_pods": it.kill_after, "operations_running_at_kill": it.in_flight,
                "execs_cut_by_kill": dict(it.interrupted), "orphaned_delegates": it.orphans,
                "vanished": it.vanished,
                "recovery_ms": round(it.recovery_s * 1000, 1), "replay": it.replay,
                "vanished_released_ms": None if it.released_s is None
                else round(it.released_s * 1000, 1),
                "reconcile": it.reconcile, "runtime_dels_after_restart": it.runtime_dels,
                "reboot": it.reboot, "delegate_faults": dict(it.faults),
                "delegate_faults_cut": dict(it.faults_cut), "gc": it.gc,
                "checked": it.checked,
                "leftovers": {k: len(v) for k, v in it.leftovers.items()},
                "failures": it.side.failures[:20], "exit_code": it.exit_code,
            } for it in done],
        }
        return Measured(
            params={"iterations": self.iterations, "pods_per_iteration": self.pods,
                    "resident_pods": RESIDENTS, "concurrency": self.concurrency,
                    "seed": self.seed, "reboot_pods": self.reboot_pods,
                    "fault_share": FAULT_SHARE, "gc_share": GC_SHARE,
                    "reboot_share": REBOOT_SHARE, "daemon_settings": SETTINGS},
            parts=parts, peak_rss_kib=self.peak_rss_kib,
            exit_code=done[-1].exit_code if done else None, problems=problems)


# -- the report ------------------------------------------------------------------------------


def render_crash(report: dict[str, Any]) -> list[RenderableType]:
    p, f = report["params"], report["faults"]
    rp, rc, rec = report["replay"], report["reconcile"], report["recovery_ms"]
    rel = report["vanished_released_ms"]
    ck = report["checked"]

    def listed(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "none"

    return [
        f"netctl bench crash: {report['iterations_run']} of {p['iterations']} iterations, each "
        f"{p['pods_per_iteration']} pods churned (concurrency {p['concurrency']}) + "
        f"{p['resident_pods']} resident, {p['cpus']} CPUs, prefix {report['prefix']}, "
        f"seed {p['seed']}",
        "networks: " + ", ".join(f"{n['name']} ({n['subnet']}, bridge + {n['ipam']})"
                                 for n in report["networks"])
        + "; eth0 on the first, net1 on the second",
        f"plugin execs: {listed(report['execs'])}", "",
        table(("faults injected", ""), [
            ("daemon SIGKILLs", str(f["kills"])),
            ("operations running at the kill (journal)", f"{f['operations_running_at_kill']} "
             f"({listed(f['operations_running_at_kill_by_verb'])})"),
            ("  per kill", ", ".join(map(str, f["operations_running_per_kill"]))),
            ("plugin execs ending after the kill (any answer accepted)",
             listed(f["execs_cut_by_kill"])),
            ("delegates of the dead daemon running just after the kill",
             str(f["orphaned_delegates"])),
            ("vanished sandboxes (netns deleted, no DEL)", str(f["vanished_sandboxes"])),
            ("DELs while the daemon was down (recorded by the plugin, finished by the "
             "replay before the socket accepts)", str(f["dels_while_down"])),
            ("node reboots (every netns deleted at the kill)", str(f["reboots"])),
            ("pods with a faulty delegate (ADD failed, compensated, DEL ok)",
             listed(f["delegate_faults"])),
            ("pods with a faulty delegate whose ADD the kill cut (any answer accepted)",
             listed(f["delegate_faults_cut"])),
            ("CNI GCs during the churn (pods DELeted by them)",
             f"{f['gcs']} ({f['gc_dels']})")]),
        "", table(("checked after each restart", ""), [
            ("attached pods (attachment live, pinged over both bridges)",
             str(ck.get("attached", 0))),
            ("pings", str(ck.get("pings", 0))),
            ("repeated DELs of deleted pods (nothing changed)", str(ck.get("repeated_dels", 0))),
            ("journal integrity_check, duplicate addresses, owner of every allocation, "
             "attachments of deleted pods, bridge ports, netns, delegates, reconcile plan",
             "every iteration")]),
        *rebooted_lines(report.get("rebooted_start")),
        "", table(("recovery", ""), [
            ("restart → socket accepting (orphan kill, replay), ms",
             f"p50 {rec['p50']:.0f}, p95 {rec['p95']:.0f}, max {rec['max']:.0f}"),
            ("start-up replay: unfinished operations closed", str(rp["operations"])),
            ("  half-done attachments undone (containers)",
             f"{rp['attachments']} ({rp['containers']})"),
            ("  failures", str(len(rp["failed"]))),
            ("restart → vanished sandboxes released (first round), ms",
             f"p50 {rel['p50']:.0f}, p95 {rel['p95']:.0f}, max {rel['max']:.0f}"
             if rel["n"] else "none vanished"),
            ("netctl reconcile after that: attachments DELeted", str(rc["attachments"])),
            ("  allocations released, host links deleted",
             f"{rc['allocations']}, {rc['links']}"),
            ("  errors", str(len(rc["errors"]))),
            ("runtime's DELs after the restart", str(report["runtime_dels_after_restart"])),
            ("failures", str(report["failures"]))]),
        "journal operations (verb origin state): " + listed(report["journal_operations"]), "",
        table(("leftovers (distinct, over all iterations)", ""),
              [(LEFTOVERS[k], str(n)) for k, n in report["leftovers"].items()]),
        *[f"  {LEFTOVERS[key]}: {harness.some(items)}"
          for key, items in report.get("leftover_items", {}).items()],
        "", table(("#", "kill\nafter", "ops\nrunning", "vanished", "recovery\nms",
                   "replayed\nops/atts", "reconciled\natts/allocs/links", "runtime\nDELs",
                   "left"),
                  [(str(it["iteration"]), str(it["kill_after_pods"]),
                    str(sum(it["operations_running_at_kill"].values())), str(len(it["vanished"])),
                    num(it["recovery_ms"], "{:.0f}"),
                    f"{it['replay'].get('operations', 0)}/{it['replay'].get('attachments', 0)}",
                    "/".join(str(it["reconcile"].get(k, 0))
                             for k in ("attachments", "allocations", "links")),
                    str(it["runtime_dels_after_restart"]), str(sum(it["leftovers"].values())))
                   for it in report["iterations"]], title="per iteration"),
        "", *verdict(report["problems"], "every crash recovered; nothing left behind")]


def rebooted_lines(r: dict[str, Any] | None) -> list[RenderableType]:
    if not r:
        return []
    replay = r["replay"]
    return ["", table((f"node reboot with {r['pods']} attachments", ""), [
        ("plain ADDs (cluster network, concurrency 8), s", f"{r['adds_s']:.1f}"),
        ("attachments live at the SIGKILL (every netns deleted)",
         str(r["live_attachments_at_kill"])),
        ("the kernel's teardown of the deleted netns (before the kill), ms",
         num(r["kernel_teardown_ms"], "{:.0f}")),
        ("restart exec → socket accepting, ms", num(r["accepting_ms"], "{:.0f}")),
        ("restart exec → every attachment released, ms", num(r["released_ms"], "{:.0f}")),
        ("CPU till then: the daemon's, its delegates', s",
         f"{r['released_cpu_s']['daemon']:.1f}, {r['released_cpu_s']['delegates']:.1f}"),
        ("start-up replay: operations closed", str(replay.get("operations", 0))),
        ("leftovers", str(sum(r["leftovers"].values()))),
        ("failures", str(len(r["failures"])))])]


def run_crash(args: argparse.Namespace) -> int:
    if args.iterations < 1 and args.reboot_pods < 1:
        print("netctl bench crash: --iterations must be ≥ 1 (or --reboot-pods given)",
              file=sys.stderr)
        return 2
    why = harness.preflight()
    if why:
        print(f"netctl bench crash: {why}", file=sys.stderr)
        return 2
    bench = CrashBench(args.iterations, pods=args.pods, seed=args.seed,
                       reboot_pods=args.reboot_pods)
    return drive(bench, "crash", bench.measure, render_crash, args.json)
