"""The crash scenario, written once: SIGKILL the daemon in the middle of a churn, restart
it, replay, reconcile, and count what is left; nothing may be. ``netctl bench crash`` runs
it N times; ``tests/integration/test_crash.py`` runs an iteration, and its steps
(:func:`kill`, :func:`recover`, :func:`netctl.harness.leftovers`) around a deterministic
kill.

One temporary state dir and one daemon config for the whole run: a bridge network with
netctl-ipam (the cluster network, ``eth0``) and a bridge network with host-local
(selected in ``NETCTL_NETWORKS``, ``net1``); ``reconcile-interval`` 0 (no periodic round:
only the one a start runs right after its replay), ``reconcile-events`` off (a host veth
the kernel tears down after the restart would otherwise let the events clean a vanished
sandbox first, and the bench times the first round) and ``reconcile-grace`` 0. Each
iteration:

1. start the daemon; ADD two resident pods, which stay attached through the churn;
2. churn: P pods, at most C at a time, each ``ip netns add``, ADD and DEL through the
   installed thin plugin, as a runtime would (a failed ADD is followed by its DEL; a DEL
   that exits 0 lets the runtime forget the pod and delete its netns; one that fails
   keeps the pod for a retry);
3. once a random number of pods has started, after a random pause, SIGKILL the daemon
   and count the operations ``netctl journal --running`` lists. The plugin execs then in flight
   finish however they can (any answer is accepted); no pod starts or goes on after that:
   the runtime keeps what it has;
4. delete the netns of one or two pods the runtime has attached, without a DEL (vanished
   sandboxes); DEL another through the plugin, which records it (the daemon is down);
5. restart the daemon; the time from its exec to its socket accepting is the recovery
   time (it includes killing the delegates the dead daemon left running, and the start-up
   replay, which finishes the recorded DEL: its attachments must be gone by then);
   ``netctl status --json`` gives the replay's figures; then the time from the exec until
   the daemon's own first reconcile round has removed the vanished sandboxes'
   attachments;
6. ``netctl reconcile --json`` (what is left for it to do, and no errors);
7. DEL every pod the runtime still knows through the plugin (as kubelet retries); each must
   exit 0; then delete its netns;
8. look for leftovers (:func:`netctl.harness.leftovers`: operations still running,
   attachments not removed, live IPAM allocations, host-local leases, ports on the bridges,
   host veths named in the journal's results that still exist (those ``netctl reconcile
   --dry-run`` would delete), delegate processes carrying the ``NETCTL_OWNER`` marker,
   netns); then SIGTERM the daemon, which must exit 0.

Any leftover, failed exec (one that finished before the kill, or after the restart) or
reconcile error makes the run exit 1, with what was found. Everything it makes on the host
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

from rich.console import RenderableType

from netctl import harness
from netctl.bench.common import (
    POD_NAMESPACE,
    Bench,
    Measured,
    Side,
    check_result,
    drive,
    from_journal,
    pick_subnets,
    progress,
    summary_ms,
)
from netctl.bench.render import num, steps, table, verdict
from netctl.harness import LEFTOVERS, CNIResult, Daemon, HarnessError, wait_for

PODS = 30  # churned per iteration
RESIDENTS = 3  # pods attached before the churn and kept through it (one DELed while down)
CONCURRENCY = 6
KILL_PAUSE_S = 0.25  # the most the kill waits once its pod count is reached
SETTINGS = {"reconcile-interval": 0, "reconcile-events": False, "reconcile-grace": 0,
            "plugin-timeout": 30, "compensate-timeout": 30, "drain-timeout": 30}


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
    running = daemon.journal("--running")["operations"]
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


# -- the scenario ----------------------------------------------------------------------------


@dataclass
class Pod:
    """A pod as the runtime knows it."""

    index: int
    container: str
    ns: str  # its netns's name
    path: str
    attached: bool = False  # its ADD exited 0 and no DEL has started


@dataclass
class Iteration:
    number: int
    side: Side
    kill_after: int  # pods started before the kill
    started: int = 0  # churned pods started
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
    leftovers: dict[str, list[str]] = field(default_factory=dict)
    exit_code: int | None = None


class CrashBench(Bench):
    def __init__(self, iterations: int, pods: int = PODS,
                 concurrency: int = CONCURRENCY) -> None:
        super().__init__(concurrency, SETTINGS)
        self.iterations = iterations
        self.pods = pods
        self.seed = secrets.randbits(32)
        self.rnd = random.Random(self.seed)
        self.known: dict[str, Pod] = {}  # container → pod: what the runtime knows
        self.lock = threading.Lock()
        self.started = threading.Condition(self.lock)
        self.halt = threading.Event()  # the daemon is dead: the runtime stops
        self.kill_at: float | None = None  # monotonic time the SIGKILL was decided
        self.peak_rss_kib = 0

    def setup(self) -> None:
        """The cluster network with netctl-ipam, a second with host-local; the plugin."""
        for i, subnet in enumerate(pick_subnets(2, self.pods + RESIDENTS + 8)):
            self.add_network(subnet, netctl_ipam=i == 0)
        self.daemon.install_plugin()

    # -- the runtime -----------------------------------------------------------------

    def new_pod(self, it: Iteration, index: int, tag: str = "p") -> Pod:
        ns = f"{self.prefix}-{it.number}{tag}{index}"
        pod = Pod(index, f"{self.prefix}-{it.number}-{tag}{index}", ns, harness.netns_add(ns))
        with self.lock:
            self.known[pod.container] = pod
        return pod

    def forget(self, pod: Pod) -> None:
        """The runtime is done with the pod: its netns goes."""
        with self.lock:
            self.known.pop(pod.container, None)
        harness.netns_del(pod.ns)

    def cni(self, it: Iteration, command: str, pod: Pod) -> CNIResult | None:
        """One exec of the thin plugin; None when it did not exit in time. A failure is
        the bench's unless the exec was cut by the kill (it ended after the kill began)."""
        try:
            res: CNIResult | None = self.daemon.cni(
                command, pod.container, pod.path, self.netctl_conf(),
                pod=f"{POD_NAMESPACE}/crash-{it.number}-{pod.index}",
                networks=self.nets[1].name, args=("IgnoreUnknown=1",))
        except subprocess.TimeoutExpired:
            res = None
        with self.lock:
            it.execs[command] += 1
            cut = self.kill_at is not None and time.monotonic() >= self.kill_at \
                and not it.restarted
            if cut:
                it.interrupted[f"{command} exit {'timeout' if res is None else res.rc}"] += 1
        if cut:
            return res  # cut by the kill: any answer goes
        if it.side.exited_ok(f"{pod.container}: {command}", res) and command == "ADD":
            problem = check_result(res.out if res else None, self.nets[0])
            if problem:
                it.side.fail(f"{pod.container}: ADD result: {problem}")
        return res

    def churn_pod(self, it: Iteration, index: int) -> None:
        if self.halt.is_set():
            return
        pod = self.new_pod(it, index)
        with self.started:
            it.started += 1
            self.started.notify_all()
        add = self.cni(it, "ADD", pod)
        pod.attached = add is not None and add.rc == 0
        if self.halt.is_set():
            return  # the runtime keeps the pod as it is
        pod.attached = False
        rm = self.cni(it, "DEL", pod)
        if rm is not None and rm.rc == 0:
            self.forget(pod)

    # -- the fault ---------------------------------------------------------------------

    def killer(self, it: Iteration, churn_done: threading.Event) -> None:
        """SIGKILL the daemon once ``it.kill_after`` pods started (or the churn ended), after
        a random pause."""
        with self.started:
            while it.started < it.kill_after and not churn_done.is_set() \
                    and not self.stop.is_set():
                self.started.wait(0.05)
        if self.stop.is_set():
            return
        time.sleep(self.rnd.uniform(0, KILL_PAUSE_S))
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
            attached = [p for p in self.known.values() if p.attached]
        if not attached:
            return
        pod = self.rnd.choice(attached)
        res = self.daemon.cni("DEL", pod.container, pod.path, self.netctl_conf(),
                              pod=f"{POD_NAMESPACE}/crash-{it.number}-{pod.index}",
                              networks=self.nets[1].name, args=("IgnoreUnknown=1",))
        if res.rc != 0 or "recorded" not in res.stderr:
            it.side.fail(f"{pod.container}: a DEL while the daemon is down was not recorded: "
                         f"{res.describe()}")
            return
        self.forget(pod)
        it.recorded_dels.append(pod.container)

    def vanish(self, it: Iteration) -> None:
        """Delete the netns of one or two attached pods without a DEL; the runtime forgets them."""
        with self.lock:
            attached = [p for p in self.known.values() if p.attached]
        for pod in self.rnd.sample(attached, min(len(attached), self.rnd.choice((1, 2)))):
            self.forget(pod)
            it.vanished.append(pod.container)

    # -- after the restart -------------------------------------------------------------

    def recover(self, it: Iteration) -> None:
        """Restart, replay and reconcile; then the runtime DELs every pod it still knows."""
        rec = recover(self.daemon, sum(it.in_flight.values()), it.vanished, it.recorded_dels)
        it.recovery_s, it.replay, it.reconcile = rec.seconds, rec.replay, rec.reconcile
        it.released_s = rec.released_s
        for problem in rec.problems:
            it.side.fail(problem)
        self.halt.clear()
        with self.lock:
            it.restarted = True
            left = list(self.known.values())
        it.runtime_dels = len(left)

        def retry(index: int) -> None:
            rm = self.cni(it, "DEL", left[index])
            if rm is not None and rm.rc == 0:
                self.forget(left[index])

        self.parallel(it.side, len(left), retry)

    # -- one iteration, the whole run ----------------------------------------------------

    def iteration(self, number: int) -> Iteration:
        it = Iteration(number, Side(f"iteration {number}"),
                       kill_after=self.rnd.randint(self.concurrency,
                                                   max(self.pods - self.concurrency,
                                                       self.concurrency)))
        self.kill_at = None
        self.halt.clear()
        self.daemon.start()
        for i in range(RESIDENTS):
            pod = self.new_pod(it, i, tag="r")
            add = self.cni(it, "ADD", pod)
            pod.attached = add is not None and add.rc == 0
        churn_done = threading.Event()
        killer = threading.Thread(target=self.killer, args=(it, churn_done), daemon=True,
                                  name="killer")
        killer.start()
        try:
            self.parallel(it.side, self.pods, lambda index: self.churn_pod(it, index))
        finally:
            churn_done.set()
            killer.join(60)
        if not it.killed:
            raise RuntimeError(f"iteration {number}: the daemon was not killed")
        self.vanish(it)
        self.del_while_down(it)
        self.recover(it)
        it.leftovers = harness.leftovers(self.daemon, bridges=[n.bridge for n in self.nets],
                                         netns_prefix=self.prefix,
                                         ipam_dir=self.daemon.ipam_dir)
        rss, it.exit_code = self.finish_daemon()
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        if it.exit_code != 0:
            it.side.fail(f"the daemon exited with {it.exit_code} on SIGTERM")
        return it

    def measure(self) -> Measured:
        self.setup()
        progress(f"networks {self.nets[0].subnet} (netctl-ipam), {self.nets[1].subnet} "
                 f"(host-local); {self.iterations} iterations of {self.pods} pods, "
                 f"concurrency {self.concurrency}")
        done: list[Iteration] = []
        with steps("iterations", self.iterations) as step:
            for n in range(1, self.iterations + 1):
                it = self.iteration(n)
                done.append(it)
                left = sum(len(v) for v in it.leftovers.values())
                step(f"iteration {n}: killed with {sum(it.in_flight.values())} operations "
                     f"running, {len(it.vanished)} sandbox(es) vanished, recovered in "
                     f"{it.recovery_s * 1000:.0f} ms, {left} leftovers")
        return self.report(done)

    def report(self, done: list[Iteration]) -> Measured:
        distinct: dict[str, list[str]] = {key: [] for key in LEFTOVERS}
        for it in done:
            for key, items in it.leftovers.items():
                distinct[key] += [i for i in items if i not in distinct[key]]
        problems = [msg for it in done for msg in it.side.failures]
        problems += harness.describe_leftovers(distinct)
        in_flight = [sum(it.in_flight.values()) for it in done]
        by_verb: Counter[str] = Counter()
        interrupted: Counter[str] = Counter()
        for it in done:
            by_verb.update(it.in_flight)
            interrupted.update(it.interrupted)
        states = from_journal(Path(self.daemon.journal_path), lambda conn: dict(Counter(
            f"{v} {o} {s}" for v, o, s in conn.execute(
                "SELECT verb, origin, state FROM operations"))))
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
            },
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
                "leftovers": {k: len(v) for k, v in it.leftovers.items()},
                "failures": it.side.failures[:20], "exit_code": it.exit_code,
            } for it in done],
        }
        return Measured(
            params={"iterations": self.iterations, "pods_per_iteration": self.pods,
                    "resident_pods": RESIDENTS, "concurrency": self.concurrency,
                    "seed": self.seed, "daemon_settings": SETTINGS},
            parts=parts, peak_rss_kib=self.peak_rss_kib,
            exit_code=done[-1].exit_code if done else None, problems=problems)


# -- the report ------------------------------------------------------------------------------


def render_crash(report: dict[str, Any]) -> list[RenderableType]:
    p, f = report["params"], report["faults"]
    rp, rc, rec = report["replay"], report["reconcile"], report["recovery_ms"]
    rel = report["vanished_released_ms"]

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
             "replay before the socket accepts)", str(f["dels_while_down"]))]),
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


def run_crash(args: argparse.Namespace) -> int:
    if args.iterations < 1:
        print("netctl bench crash: --iterations must be ≥ 1", file=sys.stderr)
        return 2
    why = harness.preflight()
    if why:
        print(f"netctl bench crash: {why}", file=sys.stderr)
        return 2
    bench = CrashBench(args.iterations)
    return drive(bench, "crash", bench.measure, render_crash, args.json)
