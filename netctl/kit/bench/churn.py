"""``netctl bench churn``: runs N pods (at most C at a time) through ADD and DEL twice on the
same K bridge networks, on a temporary state dir:

- **netctl**: the installed thin plugin is exec'd as kubelet's runtime would,
  with network 1 as the cluster network on ``eth0`` and networks 2..K selected
  in ``NETCTL_NETWORKS``; a real ``netctl daemon`` child process runs the chains.
- **direct**: what a runtime does without netctl, the libcni way: for ADD, every
  network in order and every plugin of its chain exec'd one after the other with
  the stdin :func:`netctl.cni.config.plugin_config` builds; DEL in reverse with
  the final result as ``prevResult``.

``--ipam host-local`` (the default) gives both sides host-local; with
``--ipam netctl-ipam`` the netctl side's networks use the daemon's central IPAM
(``{"type": "netctl-ipam", "range": …}``: allocated in-process, the bridge runs
with a ``static`` IPAM section) while the direct side keeps host-local, which is
all a runtime without netctl has.

Each pod is ``ip netns add`` (not timed), ADD (timed: exec start to exit), DEL
(timed), ``ip netns del`` (not timed). Every ADD and DEL must succeed, no
address may stay allocated and no port may stay on a bridge; any failure makes
the run exit 1. Everything it creates on the host starts with one prefix
(``ncb`` + random hex) and is removed at the end, also after a failure, Ctrl-C
or SIGTERM.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netctl_kit import harness, journaldb
from netctl_kit.bench import render
from netctl_kit.bench.common import (
    Bench,
    Measured,
    PodRun,
    Side,
    check_result,
    critical_path,
    drive,
    from_journal,
    operations,
    pick_subnets,
    progress,
    ratios,
    steps_by_operation,
    summary_ms,
    timed_operations,
)
from netctl_kit.harness import CNIResult
from rich.console import RenderableType


class Churn(Bench):
    def __init__(self, pods: int, concurrency: int, networks: int, ipam: str,
                 plugin_binary: str | None = None) -> None:
        super().__init__(concurrency)
        self.pods = pods
        self.k = networks
        self.ipam = ipam  # the netctl side's; the direct side always has host-local
        self.plugin_binary = plugin_binary  # what install-cni installs; None: the build

    def pod_netctl(self, side: Side, index: int, tag: str = "n") -> PodRun:
        conf, networks = self.netctl_conf(), ",".join(n.name for n in self.nets[1:])
        with self.pod_netns(tag, index) as (run, netns):
            def exec_netctl(command: str) -> CNIResult:
                return self.daemon.cni(command, run.container, netns, conf, pod=self.pod(index),
                                       networks=networks, args=("IgnoreUnknown=1",))

            add = run.timed("ADD", lambda: exec_netctl("ADD"))
            ok = side.exited_ok(f"pod {index}: ADD", add)
            if ok and add is not None:
                problem = check_result(add.out, self.nets[0])
                if problem:
                    ok = False
                    side.fail(f"pod {index}: ADD result: {problem}")
            rm = run.timed("DEL", lambda: exec_netctl("DEL"))
            run.ok = side.exited_ok(f"pod {index}: DEL", rm) and ok
        return run

    # -- a churn phase -----------------------------------------------------------

    def churn(self, side: Side, pod: Callable[[Side, int], PodRun]) -> None:
        """N pods through ``pod``, at most C at a time; stops early when asked."""

        def one(index: int) -> None:
            run = pod(side, index)
            with side.lock:
                side.pods.append(run)

        side.wall_s, side.cpu_s = self.parallel(side, self.pods, one)

    # -- the whole run: the netctl side, then the direct side -------------------

    def measure(self) -> Measured:
        for subnet in pick_subnets(self.k, self.pods):
            self.add_network(subnet, netctl_ipam=self.ipam == "netctl-ipam")
        self.daemon.install_plugin(self.plugin_binary)
        progress(f"{self.k} networks {', '.join(str(n.subnet) for n in self.nets)}; "
                 "starting the daemon")
        self.daemon.start()
        # One pod per side first, not timed: warm caches, create the bridges.
        warm = Side("warm-up")
        self.pod_netctl(warm, 0, tag="nw")
        plugin_s = self.time_version_and_status(self.netctl_conf(), self.daemon.plugin)
        netctl, direct = Side("netctl"), Side("direct")
        progress(f"netctl: {self.pods} pods, concurrency {self.concurrency}")
        self.churn(netctl, self.pod_netctl)
        netctl_left = self.leftovers(self.daemon)
        rss, code = self.finish_daemon()
        breakdown = journal_breakdown(Path(self.daemon.journal_path), netctl.pods)
        self.pod_direct(warm, 0, tag="dw")
        plugin_s["delegate_version_ms"] = self.time_delegate_version()
        progress(f"direct: {self.pods} pods, concurrency {self.concurrency}")
        self.churn(direct, self.pod_direct)
        direct_left = self.leftovers()
        n_rep, d_rep = side_report(netctl, self.pods), side_report(direct, self.pods)
        n_rep["leftovers"], d_rep["leftovers"] = netctl_left, direct_left
        d_rep["delegate_exec_ms"] = {"ADD": summary_ms(direct.exec_add_s),
                                     "DEL": summary_ms(direct.exec_del_s)}
        problems = [f"netctl: {m}" for m in netctl.failures + netctl_left]
        problems += [f"netctl journal: {m}" for m in breakdown["operations_not_done"]]
        problems += [f"direct: {m}" for m in direct.failures + direct_left]
        return Measured(
            params={"pods": self.pods, "concurrency": self.concurrency, "networks": self.k,
                    "ipam": self.ipam, "plugin_binary": self.plugin_binary or "the build",
                    "ipam_by_side": {"netctl": self.ipam, "direct": "host-local"}},
            parts={"subnets": [str(n.subnet) for n in self.nets], "netctl": n_rep,
                   "direct": d_rep, "ratio": ratios(n_rep, d_rep)},
            plugin_s=plugin_s, peak_rss_kib=rss, exit_code=code, breakdown=breakdown,
            warm_up=warm, problems=problems)

    def leftovers(self, daemon: harness.Daemon | None = None) -> list[str]:
        """What a phase left (it must leave nothing): ports on the bridges, host-local's
        leases, netns; with the ``daemon``, also what its journal and IPAM still hold."""
        bridges = [n.bridge for n in self.nets]
        if daemon is None:
            found = {"host_local_leases": harness.host_local_leases(self.daemon.ipam_dir),
                     "bridge_ports": [f"{b}: {p}" for b in bridges
                                      for p in harness.bridge_ports(b)],
                     "netns": harness.netns_names(self.prefix)}
        else:
            found = harness.leftovers(daemon, bridges=bridges, netns_prefix=self.prefix,
                                      ipam_dir=daemon.ipam_dir)
        return harness.describe_leftovers(found)


# -- the journal's view of the netctl run -------------------------------------------------


def journal_breakdown(db_path: Path, runs: list[PodRun]) -> dict[str, Any]:
    """Where a netctl ADD/DEL spends its time, from the client's clock and the journal's
    timestamps (one host clock): before the operation starts (plugin start, socket, request,
    the journal read), inside it (delegates on the critical path, and the rest: journal
    writes and scheduling), and after it ends (last commit, reply, plugin exit)."""
    return from_journal(db_path, lambda conn: _breakdown(conn, runs))


def _breakdown(conn: sqlite3.Connection, runs: list[PodRun]) -> dict[str, Any]:
    ops, not_done, counts = operations(conn, "runtime")
    steps = steps_by_operation(conn)
    rows = journaldb.row_counts(conn, ("steps", "ipam_allocations"))
    out: dict[str, Any] = {"operations": counts, "steps": rows["steps"],
                           "ipam_allocations": rows["ipam_allocations"],
                           "operations_not_done": not_done}
    for verb in ("ADD", "DEL"):
        timed = timed_operations(ops, runs, verb)
        delegates = [critical_path(steps.get(t.op["id"], [])) for t in timed]
        per_step = [s["finished_at"] - s["started_at"] - s["seconds"]
                    for t in timed for s in steps.get(t.op["id"], [])
                    if s["finished_at"] is not None and s["seconds"] is not None]
        out[verb] = {
            "pods": len(timed),
            "exec_ms": summary_ms([t.exec_s for t in timed]),
            "before_operation_ms": summary_ms([t.before_s for t in timed]),
            "operation_ms": summary_ms([t.op_s for t in timed]),
            "delegates_critical_path_ms": summary_ms(delegates),
            "journal_and_scheduling_ms": summary_ms(
                [t.op_s - critical for t, critical in zip(timed, delegates, strict=True)]),
            "after_operation_ms": summary_ms([t.after_s for t in timed]),
            "step_overhead_ms": summary_ms(per_step),
        }
    return out


# -- the report ---------------------------------------------------------------------------


def side_report(side: Side, pods_planned: int) -> dict[str, Any]:
    done = list(side.pods)
    return {
        "pods": len(done),
        "pods_planned": pods_planned,
        "wall_s": round(side.wall_s, 3),
        "pods_per_s": round(len(done) / side.wall_s, 3) if side.wall_s else 0.0,
        "add_ms": summary_ms([p.add_s for p in done]),
        "del_ms": summary_ms([p.del_s for p in done]),
        "failures": len(side.failures),
        "errors": side.failures[:100],
        "cpu_s": side.cpu_s,
        "cpu_ms_per_pod": round(sum(side.cpu_s.values()) * 1000 / len(done), 2) if done else 0.0,
    }


def render_churn(report: dict[str, Any]) -> list[RenderableType]:
    p = report["params"]
    n, d = report["netctl"], report["direct"]
    sides = p["ipam_by_side"]
    how = {"netctl-ipam": "central, allocated in the daemon; bridge gets a static IPAM section",
           "host-local": "exec'd by bridge"}
    out: list[RenderableType] = [
        f"netctl bench churn: {p['pods']} pods, concurrency {p['concurrency']}, "
        f"{p['networks']} network(s) of bridge, {p['cpus']} CPUs, prefix {report['prefix']}",
        f"plugin: {p.get('plugin_binary', 'the build')} (installed by netctl install-cni)",
        f"IPAM: netctl side {sides['netctl']} ({how[sides['netctl']]}); direct side "
        f"{sides['direct']} ({how[sides['direct']]})",
        render.load_line(p), "",
        render.table(("", "netctl", "direct", "ratio"), [
            render.compare("pods/s", n, d, "pods_per_s"),
            render.compare("churn wall time (s)", n, d, "wall_s"),
            *render.latency_rows(n, d, report["ratio"]),
            render.compare("CPU per pod (ms, all processes)", n, d, "cpu_ms_per_pod"),
            ("failures", str(n["failures"]), str(d["failures"]), ""),
            ("leftovers after the run", str(len(n["leftovers"])), str(len(d["leftovers"])), ""),
            *render.daemon_rows(report, "delegate_version_ms"),
        ]),
        "(direct VERSION: /usr/lib/cni/bridge; netctl VERSION: the installed netctl-cni, "
        "no daemon involved)"]
    cpu = n["cpu_s"]
    pods = max(n["pods"], 1)
    out.append("netctl CPU per pod (ms): daemon {:.1f}, its delegates {:.1f}, thin plugin "
               "+ ip {:.1f}, bench {:.1f}; direct: delegates + ip {:.1f}, bench {:.1f}".format(
                   *(cpu.get(k, 0.0) * 1000 / pods
                     for k in ("daemon", "daemon_delegates", "execs", "bench")),
                   *(d["cpu_s"].get(k, 0.0) * 1000 / max(d["pods"], 1)
                     for k in ("execs", "bench"))))
    attachments = pods * int(p["networks"])
    out.append("netctl daemon per attachment ({} per pod; ADD + DEL): its own CPU {:.1f} ms, "
               "its delegates' {:.1f} ms".format(
                   p["networks"], *(cpu.get(k, 0.0) * 1000 / attachments
                                    for k in ("daemon", "daemon_delegates"))))
    out.append(render.status_line(report, "plugin STATUS round trip (start, socket, daemon, "
                                          "no journal)"))
    out.append(f"direct: one delegate exec p50 ADD {d['delegate_exec_ms']['ADD']['p50']:.2f} "
               f"ms, DEL {d['delegate_exec_ms']['DEL']['p50']:.2f} ms")
    b = report.get("breakdown")
    if b and "ADD" in b:
        out += ["", render.breakdown_table(
            b, "netctl: where a pod's time goes (medians, ms; client clock and journal "
            "timestamps)",
            (("plugin exec, start to exit", "exec_ms"),
             ("  before the operation starts", "before_operation_ms"),
             ("  the operation in the daemon", "operation_ms"),
             ("    delegates (critical path)", "delegates_critical_path_ms"),
             ("    journal writes + scheduling", "journal_and_scheduling_ms"),
             ("  after the operation ends", "after_operation_ms"),
             ("journal overhead per step", "step_overhead_ms"))),
            "(before: plugin start, socket, request decode, journal read, the operation's "
            "first commit; after: the last commit, the reply, plugin exit; per step: step row "
            "span minus the plugin's own run)",
            f"journal: operations {render.operations_text(b)}; {b['steps']} steps; "
            f"{b['ipam_allocations']} netctl-ipam allocations; "
            f"{len(b['operations_not_done'])} operations not done"]
    return [*out, "", *render.verdict(report["problems"],
                                      "every ADD and DEL succeeded; nothing left behind")]


# -- entry point ---------------------------------------------------------------------------


def run_churn(args: argparse.Namespace) -> int:
    if args.pods < 1 or args.concurrency < 1 or args.networks < 1:
        print("netctl bench churn: --pods, --concurrency and --networks must be ≥ 1",
              file=sys.stderr)
        return 2
    if args.networks > 64:
        print("netctl bench churn: at most 64 networks", file=sys.stderr)
        return 2
    why = harness.preflight()
    if why:
        print(f"netctl bench churn: {why}", file=sys.stderr)
        return 2
    bench = Churn(args.pods, args.concurrency, args.networks, args.ipam, args.plugin_binary)
    return drive(bench, "churn", bench.measure, render_churn, args.json)
