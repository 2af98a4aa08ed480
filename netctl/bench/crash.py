"""``netctl bench crash``: SIGKILL the daemon in the middle of a churn, N times; nothing
may stay behind.

One temporary state dir and one daemon config for the whole run: a bridge network with
netctl-ipam (the cluster network, ``eth0``) and a bridge network with host-local
(selected in ``NETCTL_NETWORKS``, ``net1``); ``reconcile-interval`` 0 (the bench runs
the reconcile itself) and ``reconcile-grace`` 0. Each iteration:

1. start the daemon; ADD two resident pods, which stay attached through the churn;
2. churn: P pods, at most C at a time, each ``ip netns add``, ADD and DEL through the
   installed thin plugin, as a runtime would (a failed ADD is followed by its DEL; a DEL
   that exits 0 lets the runtime forget the pod and delete its netns; one that fails
   keeps the pod for a retry);
3. once a random number of pods has started, after a random pause, SIGKILL the daemon
   and count the operations the journal has ``running``. The plugin execs then in flight
   finish however they can (any answer is accepted); no pod starts or goes on after that:
   the runtime keeps what it has;
4. delete the netns of one or two pods the runtime has attached, without a DEL (vanished
   sandboxes);
5. restart the daemon; the time from its exec to its socket accepting is the recovery
   time (it includes killing the delegates the dead daemon left running, and the start-up
   replay); ``netctl status --json`` gives the replay's figures;
6. ``netctl reconcile --json``;
7. DEL every pod the runtime still knows through the plugin (as kubelet retries); each must
   exit 0; then delete its netns;
8. look for leftovers: operations still running, attachments not removed, live IPAM
   allocations, host-local leases, ports on the bridges, host veths named in the journal's
   results that still exist, delegate processes carrying the ``NETCTL_OWNER`` marker, netns;
   then SIGTERM the daemon, which must exit 0.

Any leftover, failed exec (one that finished before the kill, or after the restart) or
reconcile error makes the run exit 1, with what was found. Everything it makes on the host
starts with one prefix and is removed at the end, also after a failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from netctl.bench.churn import Churn
from netctl.bench.common import (
    DELEGATE_VERSION,
    EXEC_TIMEOUT,
    POD_NAMESPACE,
    Bench,
    BenchNet,
    Measured,
    Side,
    _cni_env,
    _exited,
    _grid,
    _ip,
    _links,
    _netns_names,
    _num,
    _progress,
    _run,
    _some,
    _tail,
    _verdict,
    drive,
    host_local_leases,
    netctl_argv,
    pick_subnets,
    preflight,
    summary_ms,
)
from netctl.cni.config import parse_chain
from netctl.cni.invoke import owned_processes
from netctl.install import install

PODS = 30  # churned per iteration
RESIDENTS = 2  # pods attached before the churn and kept through it
CONCURRENCY = 6
KILL_PAUSE_S = 0.25  # the most the kill waits once its pod count is reached
LEFTOVERS = {
    "operations_running": "operations still running",
    "attachments_live": "attachments not removed",
    "allocations_live": "live IPAM allocations",
    "host_local_leases": "host-local leases",
    "bridge_ports": "ports on the bridges",
    "host_veths": "host veths named in the journal",
    "delegates": "delegate processes (NETCTL_OWNER)",
    "netns": "netns left",
}


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
    recovery_s: float = 0.0
    replay: dict[str, Any] = field(default_factory=dict)
    reconcile: dict[str, Any] = field(default_factory=dict)
    runtime_dels: int = 0
    leftovers: dict[str, list[str]] = field(default_factory=dict)
    exit_code: int | None = None


class CrashBench(Bench):
    def __init__(self, iterations: int, pods: int = PODS,
                 concurrency: int = CONCURRENCY) -> None:
        super().__init__(concurrency)
        self.iterations = iterations
        self.pods = pods
        self.seed = secrets.randbits(32)
        self.rnd = random.Random(self.seed)
        self.nets: list[BenchNet] = []
        self.conf = b""
        self.daemon_settings = {"reconcile-interval": 0, "reconcile-grace": 0,
                                "plugin-timeout": 30, "compensate-timeout": 30,
                                "drain-timeout": 30}
        self.known: dict[str, Pod] = {}  # container → pod: what the runtime knows
        self.lock = threading.Lock()
        self.started = threading.Condition(self.lock)
        self.halt = threading.Event()  # the daemon is dead: the runtime stops
        self.kill_at: float | None = None  # monotonic time the SIGKILL was decided
        self.peak_rss_kib = 0
        self.journal = str(self.state_dir / "journal.db")

    # -- set-up ----------------------------------------------------------------------

    def make_networks(self) -> None:
        subnets = pick_subnets(2, self.pods + RESIDENTS + 8)
        self.networks_dir.mkdir(parents=True)
        self.ipam_dir.mkdir(parents=True)
        for i, subnet in enumerate(subnets, start=1):
            name, bridge = f"{self.prefix}-{i}", f"{self.prefix}b{i}"
            ipam: dict[str, Any] = (
                {"type": "netctl-ipam", "range": str(subnet),
                 "gateway": str(subnet.network_address + 1)} if i == 1 else
                {"type": "host-local", "subnet": str(subnet), "dataDir": str(self.ipam_dir)})
            conf = {"cniVersion": DELEGATE_VERSION, "name": name, "plugins": [{
                "type": "bridge", "bridge": bridge, "isGateway": True, "ipam": ipam}]}
            nad = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"config": json.dumps(conf)}}
            (self.networks_dir / f"default-{name}.json").write_text(json.dumps(nad))
            self.nets.append(BenchNet(name, bridge, subnet, parse_chain(json.dumps(conf), name),
                                      conf))
        self.conf = json.dumps({
            "cniVersion": DELEGATE_VERSION, "name": f"{self.prefix}-netctl",
            "type": "netctl-cni", "socket": self.socket,
            "clusterNetwork": self.nets[0].name}).encode()

    # -- the runtime -----------------------------------------------------------------

    def new_pod(self, it: Iteration, index: int, tag: str = "p") -> Pod:
        ns = f"{self.prefix}-{it.number}{tag}{index}"
        pod = Pod(index, f"{self.prefix}-{it.number}-{tag}{index}", ns, self.netns_add(ns))
        with self.lock:
            self.known[pod.container] = pod
        return pod

    def forget(self, pod: Pod) -> None:
        """The runtime is done with the pod: its netns goes."""
        with self.lock:
            self.known.pop(pod.container, None)
        self.netns_del(pod.ns)

    def cni(self, it: Iteration, command: str, pod: Pod,
            ) -> subprocess.CompletedProcess[bytes] | None:
        """One exec of the thin plugin; None when it did not exit in time. A failure is
        the bench's unless the exec was cut by the kill (it ended after the kill began)."""
        args = (f"IgnoreUnknown=1;K8S_POD_NAMESPACE={POD_NAMESPACE};"
                f"K8S_POD_NAME=crash-{it.number}-{pod.index};NETCTL_NETWORKS={self.nets[1].name}")
        env = _cni_env(command, pod.container, pod.path, "eth0", args)
        try:
            proc: subprocess.CompletedProcess[bytes] | None = _run(
                [self.plugin], data=self.conf, env=env)
        except subprocess.TimeoutExpired:
            proc = None
        with self.lock:
            it.execs[command] += 1
            cut = self.kill_at is not None and time.monotonic() >= self.kill_at \
                and not it.restarted
            if cut:
                it.interrupted[f"{command} exit "
                               f"{'timeout' if proc is None else proc.returncode}"] += 1
        if cut:
            pass  # cut by the kill: any answer goes
        elif proc is None:
            it.side.fail(f"{pod.container}: {command} did not exit within {EXEC_TIMEOUT:g}s")
        elif proc.returncode != 0:
            it.side.fail(f"{pod.container}: {command} {_exited(proc)}")
        elif command == "ADD":
            problem = Churn.check_result(proc.stdout, self.nets[0])
            if problem:
                it.side.fail(f"{pod.container}: ADD result: {problem}")
        return proc

    def churn_pod(self, it: Iteration, index: int) -> None:
        if self.halt.is_set():
            return
        pod = self.new_pod(it, index)
        with self.started:
            it.started += 1
            self.started.notify_all()
        add = self.cni(it, "ADD", pod)
        pod.attached = add is not None and add.returncode == 0
        if self.halt.is_set():
            return  # the runtime keeps the pod as it is
        pod.attached = False
        rm = self.cni(it, "DEL", pod)
        if rm is not None and rm.returncode == 0:
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
        proc = self.daemon
        if proc is None:
            return
        self.peak_rss_kib = max(self.peak_rss_kib, self.daemon_peak_rss_kib())
        self.halt.set()  # no pod starts, no verb follows, from now on
        with self.lock:
            self.kill_at = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.daemon = None
        it.killed = True
        it.orphans = len(owned_processes(self.journal))
        it.in_flight = dict(self.journal_rows(
            "SELECT verb, count(*) FROM operations WHERE state='running' GROUP BY verb"))

    def journal_rows(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows of a read-only query on the journal (a read-write connection when a
        read-only one cannot recover the WAL index a killed daemon left)."""
        for uri in (f"file:{self.journal}?mode=ro", f"file:{self.journal}"):
            try:
                conn = sqlite3.connect(uri, uri=True)
                try:
                    return list(conn.execute(sql))
                finally:
                    conn.close()
            except sqlite3.OperationalError:
                if "mode=ro" not in uri:
                    raise
        return []

    def vanish(self, it: Iteration) -> None:
        """Delete the netns of one or two attached pods without a DEL; the runtime forgets them."""
        with self.lock:
            attached = [p for p in self.known.values() if p.attached]
        for pod in self.rnd.sample(attached, min(len(attached), self.rnd.choice((1, 2)))):
            self.forget(pod)
            it.vanished.append(pod.container)

    # -- after the restart -------------------------------------------------------------

    def netctl_json(self, it: Iteration, *args: str) -> dict[str, Any]:
        proc = _run(netctl_argv(*args, "--json"), timeout=300)
        try:
            out: dict[str, Any] = json.loads(proc.stdout)
        except ValueError:
            it.side.fail(f"netctl {args[0]}: {_exited(proc)}")
            return {}
        if proc.returncode != 0:
            it.side.fail(f"netctl {args[0]} exited {proc.returncode}: {_tail(proc.stdout)}")
        return out

    def recover(self, it: Iteration) -> None:
        it.recovery_s = self.start_daemon()
        self.halt.clear()
        with self.lock:
            it.restarted = True
        status = self.netctl_json(it, "status", "--socket", self.socket)
        it.replay = status.get("replay", {})
        for failure in it.replay.get("failed", []):
            it.side.fail(f"start-up replay: {failure}")
        running = sum(it.in_flight.values())
        if it.replay.get("operations") != running:
            it.side.fail(f"start-up replay closed {it.replay.get('operations')} operations; "
                         f"the journal had {running} running at the kill")
        report = self.netctl_json(it, "reconcile", "--socket", self.socket, "--state-dir",
                                  str(self.state_dir))
        plan = report.get("plan", {})
        it.reconcile = {"attachments": len(plan.get("attachments", [])),
                        "allocations": len(plan.get("allocations", [])),
                        "links": len(plan.get("links", [])),
                        "errors": report.get("errors", [])}
        for err in it.reconcile["errors"]:
            it.side.fail(f"reconcile: {err}")
        with self.lock:
            left = list(self.known.values())
        it.runtime_dels = len(left)

        def retry(index: int) -> None:
            pod = left[index]
            rm = self.cni(it, "DEL", pod)
            if rm is not None and rm.returncode == 0:
                self.forget(pod)

        self.parallel(it.side, len(left), retry)

    # -- what is left -------------------------------------------------------------------

    def leftovers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {key: [] for key in LEFTOVERS}
        found["operations_running"] = [f"operation {i} {v} of {c}" for i, v, c in self.journal_rows(
            "SELECT id, verb, container_id FROM operations WHERE state='running' ORDER BY id")]
        found["attachments_live"] = [
            f"attachment {i} of {c} on {n} {f} ({s})" for i, c, n, f, s in self.journal_rows(
                "SELECT id, container_id, network, ifname, state FROM attachments"
                " WHERE state != 'removed' ORDER BY id")]
        found["allocations_live"] = [
            f"allocation {i} {a} of {c} {f}" for i, a, c, f in self.journal_rows(
                "SELECT id, address, container_id, ifname FROM ipam_allocations"
                " WHERE released_at IS NULL ORDER BY id")]
        for net in self.nets:
            found["host_local_leases"] += [f"{net.name}: {a}" for a in
                                           host_local_leases(self.ipam_dir / net.name)]
            found["bridge_ports"] += [f"{net.bridge}: {p}" for p in _links("master", net.bridge)]
        bridges = {net.bridge for net in self.nets}
        named: dict[str, int] = {}
        for att_id, result in self.journal_rows(
                "SELECT id, result FROM attachments WHERE result IS NOT NULL"):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                for iface in json.loads(result).get("interfaces") or []:
                    name = iface.get("name", "")
                    if name and not iface.get("sandbox") and name not in bridges:
                        named[name] = att_id
        links = set(_links())
        found["host_veths"] = [f"{n} (attachment {a})" for n, a in sorted(named.items())
                               if n in links]
        found["delegates"] = [f"pid {pid} {_comm(pid)}" for pid in owned_processes(self.journal)]
        found["netns"] = [n for n in _netns_names() if n.startswith(self.prefix)]
        return found

    # -- one iteration, the whole run ----------------------------------------------------

    def iteration(self, number: int) -> Iteration:
        it = Iteration(number, Side(f"iteration {number}"),
                       kill_after=self.rnd.randint(self.concurrency,
                                                   max(self.pods - self.concurrency,
                                                       self.concurrency)))
        self.kill_at = None
        self.halt.clear()
        self.start_daemon()
        for i in range(RESIDENTS):
            pod = self.new_pod(it, i, tag="r")
            add = self.cni(it, "ADD", pod)
            pod.attached = add is not None and add.returncode == 0
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
        self.recover(it)
        it.leftovers = self.leftovers()
        self.peak_rss_kib = max(self.peak_rss_kib, self.daemon_peak_rss_kib())
        it.exit_code = self.stop_daemon()
        if it.exit_code != 0:
            it.side.fail(f"the daemon exited with {it.exit_code} on SIGTERM")
        return it

    def measure(self) -> Measured:
        self.make_networks()
        self.plugin = next(p for p in install(str(self.root / "bin"))
                           if p.endswith("/netctl-cni"))
        _progress(f"networks {self.nets[0].subnet} (netctl-ipam), {self.nets[1].subnet} "
                  f"(host-local); {self.iterations} iterations of {self.pods} pods, "
                  f"concurrency {self.concurrency}")
        done: list[Iteration] = []
        for n in range(1, self.iterations + 1):
            it = self.iteration(n)
            done.append(it)
            left = sum(len(v) for v in it.leftovers.values())
            _progress(f"iteration {n}: killed with {sum(it.in_flight.values())} operations "
                      f"running, {len(it.vanished)} sandbox(es) vanished, recovered in "
                      f"{it.recovery_s * 1000:.0f} ms, {left} leftovers")
        return self.report(done)

    def report(self, done: list[Iteration]) -> Measured:
        distinct: dict[str, list[str]] = {key: [] for key in LEFTOVERS}
        for it in done:
            for key, items in it.leftovers.items():
                distinct[key] += [i for i in items if i not in distinct[key]]
        problems = [msg for it in done for msg in it.side.failures]
        for key, items in distinct.items():
            if items:
                problems.append(f"{LEFTOVERS[key]}: {len(items)}: {_some(items)}")
        in_flight = [sum(it.in_flight.values()) for it in done]
        by_verb: Counter[str] = Counter()
        interrupted: Counter[str] = Counter()
        for it in done:
            by_verb.update(it.in_flight)
            interrupted.update(it.interrupted)
        states = dict(Counter(f"{v} {o} {s}" for v, o, s in self.journal_rows(
            "SELECT verb, origin, state FROM operations")))
        parts = {
            "networks": [{"name": n.name, "subnet": str(n.subnet), "bridge": n.bridge,
                          "ipam": n.conf["plugins"][0]["ipam"]["type"]} for n in self.nets],
            "iterations_run": len(done),
            "faults": {
                "kills": sum(it.killed for it in done),
                "operations_running_at_kill": sum(in_flight),
                "operations_running_at_kill_by_verb": dict(by_verb),
                "operations_running_per_kill": in_flight,
                "execs_cut_by_kill": dict(interrupted),
                "vanished_sandboxes": sum(len(it.vanished) for it in done),
                "orphaned_delegates": sum(it.orphans for it in done),
            },
            "replay": {k: sum(int(it.replay.get(k, 0)) for it in done)
                       for k in ("operations", "attachments", "containers")}
            | {"failed": [f for it in done for f in it.replay.get("failed", [])]},
            "reconcile": {k: sum(int(it.reconcile.get(k, 0)) for it in done)
                          for k in ("attachments", "allocations", "links")}
            | {"errors": [e for it in done for e in it.reconcile.get("errors", [])]},
            "recovery_ms": summary_ms([it.recovery_s for it in done]),
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
                "reconcile": it.reconcile, "runtime_dels_after_restart": it.runtime_dels,
                "leftovers": {k: len(v) for k, v in it.leftovers.items()},
                "failures": it.side.failures[:20], "exit_code": it.exit_code,
            } for it in done],
        }
        return Measured(
            params={"iterations": self.iterations, "pods_per_iteration": self.pods,
                    "resident_pods": RESIDENTS, "concurrency": self.concurrency,
                    "seed": self.seed, "daemon_settings": self.daemon_settings},
            parts=parts, plugin_s={}, peak_rss_kib=self.peak_rss_kib,
            exit_code=done[-1].exit_code if done else None, breakdown={},
            warm_up=Side("warm-up"), problems=problems)

    # -- clean-up ------------------------------------------------------------------------

    def remove_more(self) -> None:
        """Delegates a killed daemon left running (ours: they carry our journal's path),
        then the ports on our bridges."""
        for pid in owned_processes(self.journal):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for net in self.nets:
            for port in _links("master", net.bridge):
                _ip("link", "del", port, check=False)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


# -- the report ------------------------------------------------------------------------------


def render_crash(report: dict[str, Any]) -> str:
    p, f = report["params"], report["faults"]
    nets = ", ".join(f"{n['name']} ({n['subnet']}, bridge + {n['ipam']})"
                     for n in report["networks"])
    rp, rc, rec = report["replay"], report["reconcile"], report["recovery_ms"]
    by_verb = ", ".join(f"{v} {n}" for v, n in sorted(f["operations_running_at_kill_by_verb"]
                                                      .items())) or "none"
    cut = ", ".join(f"{k}: {n}" for k, n in sorted(f["execs_cut_by_kill"].items())) or "none"
    lines = [f"netctl bench crash: {report['iterations_run']} of {p['iterations']} iterations, "
             f"each {p['pods_per_iteration']} pods churned (concurrency {p['concurrency']}) + "
             f"{p['resident_pods']} resident, {p['cpus']} CPUs, prefix {report['prefix']}, "
             f"seed {p['seed']}",
             f"networks: {nets}; eth0 on the first, net1 on the second",
             "plugin execs: " + ", ".join(f"{v} {n}" for v, n in sorted(report["execs"].items())),
             "",
             "faults injected",
             f"  daemon SIGKILLs: {f['kills']}",
             f"  operations running at the kill (journal): {f['operations_running_at_kill']} "
             f"({by_verb}); per kill: {', '.join(map(str, f['operations_running_per_kill']))}",
             f"  plugin execs ending after the kill (any answer accepted): {cut}",
             "  delegate processes of the dead daemon still running just after the kill: "
             f"{f['orphaned_delegates']}",
             f"  vanished sandboxes (netns deleted, no DEL): {f['vanished_sandboxes']}",
             "",
             f"recovery (restart → socket accepting; orphan kill and replay included): "
             f"p50 {rec['p50']:.0f} ms, p95 {rec['p95']:.0f} ms, max {rec['max']:.0f} ms",
             f"start-up replay: {rp['operations']} unfinished operations closed, "
             f"{rp['attachments']} half-done attachments of {rp['containers']} containers "
             f"undone, {len(rp['failed'])} failures",
             f"reconcile: {rc['attachments']} attachments DELeted, {rc['allocations']} "
             f"allocations released, {rc['links']} host links deleted, {len(rc['errors'])} "
             "errors",
             f"runtime's DELs after the restart: {report['runtime_dels_after_restart']}; "
             f"failures: {report['failures']}",
             "journal operations (verb origin state): " + ", ".join(
                 f"{k} {n}" for k, n in sorted(report["journal_operations"].items())),
             "", "leftovers (distinct, over all iterations)"]
    lines += _grid([(f"  {LEFTOVERS[k]}", str(n)) for k, n in report["leftovers"].items()])
    lines += ["", "per iteration"]
    grid: list[tuple[str, ...]] = [("  #", "kill after", "ops running", "vanished",
                                    "recovery ms", "replay ops/atts", "reconcile atts/allocs/links",
                                    "runtime DELs", "leftovers")]
    for it in report["iterations"]:
        rpl, rcn = it["replay"], it["reconcile"]
        grid.append((f"  {it['iteration']}", str(it["kill_after_pods"]),
                     str(sum(it["operations_running_at_kill"].values())),
                     str(len(it["vanished"])), _num(it["recovery_ms"], "{:.0f}"),
                     f"{rpl.get('operations', 0)}/{rpl.get('attachments', 0)}",
                     f"{rcn.get('attachments', 0)}/{rcn.get('allocations', 0)}/"
                     f"{rcn.get('links', 0)}", str(it["runtime_dels_after_restart"]),
                     str(sum(it["leftovers"].values()))))
    lines += _grid(grid)
    for key, items in report.get("leftover_items", {}).items():
        lines.append(f"  {LEFTOVERS[key]}: {_some(items)}")
    lines += _verdict(report["problems"], "every crash recovered; nothing left behind")
    return "\n".join(lines)


def run_crash(args: argparse.Namespace) -> int:
    if args.iterations < 1:
        print("netctl bench crash: --iterations must be ≥ 1", file=sys.stderr)
        return 2
    why = preflight()
    if why:
        print(f"netctl bench crash: {why}", file=sys.stderr)
        return 2
    bench = CrashBench(args.iterations)
    return drive(bench, "crash", bench.measure, render_crash, args.json)
