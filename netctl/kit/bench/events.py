"""``netctl bench events``: how long a sandbox that vanishes without a DEL keeps its
address, with the reconcile on kernel events, beside the periodic round it would otherwise
wait for.

One daemon on a temporary state dir, ``reconcile-interval`` 0 (no periodic round: only the
events act), and two networks with netctl-ipam:

- **bridge**: the pod's host veth dies with its netns (netlink ``RTM_DELLINK``, and
  ``RTM_DELNSID``), and the netns dir loses its name;
- **macvlan only**, on a veth parent: no host-side link, so only the netns dir tells;
- **stuck**: macvlan on a ``master`` that does not exist (a NAD with a typo), so the ADD
  fails, its compensation's DEL fails and so does the runtime's DEL after it: the
  attachment is stuck, backing off, holding its address until its netns goes. The
  reconciler releases the address on the netns event without running the DEL; the
  attachments stay stuck and are forgotten (``netctl forget``) at the end.

Each round, for each network: ``ip netns add``, ADD through the installed thin plugin as
a runtime would (a pod of that network alone), then ``ip netns del`` — the clock starts
just before it — and wait until the journal shows the address released (read-only reads
of the journal every 10 ms, as the churn bench's breakdown reads it). From the journal's
timestamps (one host clock): *noticed*, when the DEL on events began; *released*, when
the allocation was released; and the DEL through the chain itself.

Baseline: without events, the periodic round every ``--interval`` seconds (the daemon's
default ``reconcile-interval``, 60) finds the sandbox at its next round: after 0 to
``--interval`` seconds, half of it at the median. That wait is the interval, not
something measured; the ratios are the baseline over the measured events.

A round not released within :data:`ROUND_TIMEOUT` seconds, a failed ADD, or anything
left at the end (attachments, allocations, bridge ports, netns) makes the run exit 1.
Everything it makes on the host starts with one prefix and is removed at the end.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netctl_kit import harness, journaldb
from netctl_kit.bench import render
from netctl_kit.bench.common import (
    DELEGATE_VERSION,
    POD_NAMESPACE,
    Bench,
    BenchNet,
    Measured,
    check_result,
    drive,
    from_journal,
    pick_subnets,
    progress,
    summary_ms,
)
from netctl_kit.bench.render import steps
from rich.console import RenderableType

ROUND_TIMEOUT = 30.0  # seconds a vanished sandbox may take to be released
POLL = 0.01
KINDS = {"bridge": "bridge (host veth)", "macvlan": "macvlan only (no host link)",
         "stuck": "stuck (its DEL fails)"}
SETTINGS = {"reconcile-interval": 0, "reconcile-events": True}


@dataclass
class Released:
    """One vanished sandbox, from the journal: seconds after ``ip netns del``."""

    noticed_s: float  # the DEL on events begins
    released_s: float  # its allocation is released
    del_s: float  # the DEL through the chain, start to finish


@dataclass
class Kind:
    name: str
    net: BenchNet | None = None  # the bridge's; the macvlan network is not a bridge
    cluster: str = ""  # the network's NAD name
    rounds: list[Released] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class EventsBench(Bench):
    def __init__(self, rounds: int, interval: float) -> None:
        super().__init__(1, SETTINGS)
        self.rounds = rounds
        self.interval = interval
        self.kinds = {name: Kind(name) for name in KINDS}
        self.stuck: list[str] = []  # containers left stuck, forgotten at the end

    def setup(self) -> None:
        bridge_net, macvlan_net, stuck_net = pick_subnets(3, self.rounds + 4)
        bridge = self.kinds["bridge"]
        bridge.net = self.add_network(bridge_net, netctl_ipam=True)
        bridge.cluster = bridge.net.name
        parent, peer = f"{self.prefix}p", f"{self.prefix}q"
        harness.ip("link", "add", parent, "type", "veth", "peer", "name", peer)
        for link in (parent, peer):
            harness.ip("link", "set", link, "up")
        macvlan = self.kinds["macvlan"]
        macvlan.cluster = f"{self.prefix}-mv"
        self.daemon.add_network(macvlan.cluster, {
            "cniVersion": DELEGATE_VERSION, "name": macvlan.cluster, "plugins": [{
                "type": "macvlan", "master": parent, "mode": "bridge",
                "ipam": {"type": "netctl-ipam", "range": str(macvlan_net)}}]})
        stuck = self.kinds["stuck"]
        stuck.cluster = f"{self.prefix}-typo"
        self.daemon.add_network(stuck.cluster, {
            "cniVersion": DELEGATE_VERSION, "name": stuck.cluster, "plugins": [{
                "type": "macvlan", "master": f"{self.prefix}x", "mode": "bridge",  # no such
                "ipam": {"type": "netctl-ipam", "range": str(stuck_net)}}]})
        self.daemon.install_plugin()

    def attach(self, kind: Kind, tag: str) -> tuple[str, str] | None:
        """A pod of ``kind``'s network alone, in a new netns: (container, netns name)."""
        container, ns = f"{self.prefix}-{tag}", f"{self.prefix}-{tag}"
        harness.netns_add(ns)
        conf = self.daemon.conf(kind.cluster, DELEGATE_VERSION)
        res = self.daemon.cni("ADD", container, ns, conf, pod=f"{POD_NAMESPACE}/{tag}")
        if kind.name == "stuck":
            # fails, and so does the runtime's DEL after it: stuck, holding its address
            dele = self.daemon.cni("DEL", container, ns, conf, pod=f"{POD_NAMESPACE}/{tag}")
            held = from_journal(Path(self.daemon.journal_path), lambda c: {
                "n": journaldb.held_by(c, container)}).get("n")
            if res.rc == 0 or dele.rc == 0 or held != 1:
                kind.failures.append(f"{tag}: not stuck holding one address (ADD "
                                     f"{res.describe()}; DEL {dele.describe()}; {held} held)")
                harness.netns_del(ns)
                return None
            self.stuck.append(container)
            return container, ns
        problem = res.describe() if res.rc != 0 else (
            check_result(res.out, kind.net) if kind.net else None)
        if problem:
            kind.failures.append(f"{tag}: ADD {problem}")
            self.daemon.cni("DEL", container, ns, self.daemon.conf(kind.cluster,
                                                                   DELEGATE_VERSION))
            harness.netns_del(ns)
            return None
        return container, ns

    def vanish(self, kind: Kind, tag: str) -> None:
        """One round: attach, ``ip netns del``, wait for the release; record the times."""
        attached = self.attach(kind, tag)
        if attached is None:
            return
        container, ns = attached
        t0 = time.time()
        harness.ip("netns", "del", ns)
        deadline = time.monotonic() + ROUND_TIMEOUT
        while True:
            found = released(Path(self.daemon.journal_path), container, t0)
            if found is not None:
                kind.rounds.append(found)
                return
            if time.monotonic() > deadline:
                kind.failures.append(f"{tag}: not released within {ROUND_TIMEOUT:g}s of "
                                     "`ip netns del`")
                return
            time.sleep(POLL)

    def measure(self) -> Measured:
        self.setup()
        progress(f"bridge and macvlan-only networks; {self.rounds} rounds each; starting the "
                 "daemon (reconcile-interval 0: only the events act)")
        self.daemon.start()
        for name, kind in self.kinds.items():  # warm-up, not timed: the bridge appears
            self.vanish(kind, f"{name[0]}w")
            kind.rounds.clear()
        with steps("rounds", self.rounds) as step:
            for i in range(self.rounds):
                if self.stop.is_set():
                    break
                for name, kind in self.kinds.items():
                    self.vanish(kind, f"{name[0]}{i}")
                step("")
        for container in self.stuck:  # their DEL can never succeed: ended by hand
            harness.netctl_json("forget", "--socket", self.daemon.socket, "--container",
                                container, "--why", "netctl bench events: stuck on purpose")
        events = self.daemon.status().get("events") or {}
        bridges = [k.net.bridge for k in self.kinds.values() if k.net]
        left = harness.describe_leftovers(harness.leftovers(
            self.daemon, bridges=bridges, netns_prefix=self.prefix))
        rss, code = self.finish_daemon()
        parts: dict[str, Any] = {name: kind_report(kind) for name, kind in self.kinds.items()}
        baseline = {"interval_s": self.interval, "median_ms": self.interval * 500.0,
                    "max_ms": self.interval * 1000.0}
        parts["baseline"] = baseline
        parts["ratio"] = {name: {q: render.ratio(baseline[f"{q}_ms"],
                                                 parts[name]["released_ms"][key])
                                 for q, key in (("median", "p50"), ("max", "max"))}
                          for name in self.kinds}
        parts["events"] = events
        parts["leftovers"] = left
        problems = [f"{name}: {msg}" for name, kind in self.kinds.items()
                    for msg in kind.failures] + left
        return Measured(params={"rounds": self.rounds, "interval_s": self.interval},
                        parts=parts, peak_rss_kib=rss, exit_code=code, problems=problems)


def released(db_path: Path, container: str, t0: float) -> Released | None:
    """The container's vanished sandbox, seconds after ``t0``, once its address is released
    and the DEL on events is done (for a stuck attachment, the RELEASE on events: its DEL
    is not run); None before."""

    def read(conn: sqlite3.Connection) -> dict[str, Any]:
        released_at, held = journaldb.last_release(conn, container)
        op = journaldb.event_release(conn, container)
        if released_at is None or held or op is None:
            return {}
        return {"released": Released(op["started_at"] - t0, released_at - t0,
                                     op["finished_at"] - op["started_at"])}

    found = from_journal(db_path, read).get("released")
    return found if isinstance(found, Released) else None


def kind_report(kind: Kind) -> dict[str, Any]:
    return {"rounds": len(kind.rounds),
            "released_ms": summary_ms([r.released_s for r in kind.rounds]),
            "noticed_ms": summary_ms([r.noticed_s for r in kind.rounds]),
            "del_ms": summary_ms([r.del_s for r in kind.rounds]),
            "failures": kind.failures}


def render_events(report: dict[str, Any]) -> list[RenderableType]:
    p, base = report["params"], report["baseline"]
    b, m, st = report["bridge"], report["macvlan"], report["stuck"]
    interval = f"periodic {base['interval_s']:g} s"

    def row(label: str, key: str, q: str, baseline: float | None) -> render.Row:
        ratios = [render.ratio(baseline, r[key][q]) if baseline else None for r in (b, m)]
        return (label, *(render.num(r[key][q], "{:.0f}") for r in (b, m, st)),
                render.num(baseline, "{:.0f}"), *(render.num(x, "{:.0f}x") for x in ratios))

    ev = report.get("events") or {}
    return [
        f"netctl bench events: {p['rounds']} rounds of each kind, one `ip netns del` at a time, "
        f"reconcile-interval 0 (events only), {p['cpus']} CPUs, prefix {report['prefix']}",
        "bridge: its host veth dies with the netns (netlink) and the netns dir tells; "
        "macvlan only: no host link, the netns dir tells; stuck: a failed ADD whose DELs "
        "fail (macvlan on a missing master), its address released without its DEL",
        render.load_line(p), "",
        render.table(
            ("ms after `ip netns del`", "bridge", "macvlan", "stuck", interval, "ratio br",
             "ratio mv"),
            [row("address released, median", "released_ms", "p50", base["median_ms"]),
             row("address released, max", "released_ms", "max", base["max_ms"]),
             row("DEL (RELEASE) on events begins, median", "noticed_ms", "p50", None),
             ("the DEL (RELEASE) itself, median",
              *(render.num(r["del_ms"]["p50"], "{:.0f}") for r in (b, m, st)), "", "", "")]),
        f"(the periodic round's wait is its interval, not measured: a sandbox vanished at a "
        f"random moment waits 0 to {base['interval_s']:g} s, {base['interval_s'] / 2:g} s at "
        "the median; the ratios are that wait over the measured release; a stuck "
        "attachment's address waited for its DEL to succeed, that is for ever)",
        f"events the daemon saw: {ev.get('links_deleted', 0)} links deleted, "
        f"{ev.get('netns_deleted', 0)} netns deleted, {ev.get('nsids_deleted', 0)} nsids "
        f"deleted, in {ev.get('batches', 0)} batches; {ev.get('attachments_reconciled', 0)} "
        "attachments DELeted (warm-up included)",
        "", *render.verdict(report["problems"], "every vanished sandbox released; nothing left "
                            "behind")]


def run_events(args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.interval <= 0:
        print("netctl bench events: --rounds must be ≥ 1 and --interval > 0", file=sys.stderr)
        return 2
    why = harness.preflight(("bridge", "macvlan"))
    if why:
        print(f"netctl bench events: {why}", file=sys.stderr)
        return 2
    bench = EventsBench(args.rounds, args.interval)
    return drive(bench, "events", bench.measure, render_events, args.json)
