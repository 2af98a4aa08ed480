"""``netctl bench journal --lifecycles N --retention D``: the journal's size over time with
retention on, and what pruning costs the requests.

On a temporary state dir, N pod lifecycles (ADD, then DEL some time later) are written
through the daemon's own journal (:func:`netctl.journal.store.open_journal`), each as the
engine writes it — the operation with its attachment, a bridge step allocating from the
central IPAM and a portmap step, the result, the DEL with its two steps and the release —
``concurrency`` pods at a time (so writes are group-committed as under load), while the
daemon's :class:`~netctl.journal.pruner.Pruner` prunes beside them: a round every 50th of
the journal-retention in simulated time (:data:`ROUNDS`), with the daemon's batch, pause and
vacuum settings.

Time is simulated: one clock (``SimClock``), passed both to the journal (the rows'
timestamps) and to the pruner (its "now"), advances by a fixed step per group of pods, so
that the N lifecycles span three times the longest a finished row is kept (the longer
retention, and at least the day removed attachments are always kept). The journal's size (file and
WAL, pages, free pages) is sampled 40 times: it must be flat once the retention age is
reached (the samples past that point within ±15% of their mean, and no trend), else a
problem (exit 1). ADD latency (one pod's writes, as the engine's ADD makes them) is
reported before any row is old enough to prune and while pruning runs.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import trio
from netctl_kit import journaldb
from netctl_kit.bench.common import Bench, Measured, drive, progress, summary_ms
from netctl_kit.bench.render import num, table, verdict
from rich.console import RenderableType

from netctl.cni.config import Chain, parse_chain
from netctl.cni.request import Pod
from netctl.journal import query
from netctl.journal.pruner import Pruner
from netctl.journal.records import (
    Allocation,
    Attachment,
    OpEnd,
    OpStart,
    Owner,
    PoolInfo,
    StepEnd,
    StepStart,
)
from netctl.journal.retention import REMOVED_KEPT, Retention, parse_duration, show_duration
from netctl.journal.store import Journal, open_journal

RANGE = ipaddress.IPv4Network("10.128.0.0/16")
POOL = str(RANGE)
POOL_INFO = {POOL: PoolInfo("pod-net", POOL, 4, RANGE.num_addresses - 2)}
CONF: dict[str, Any] = {
    "cniVersion": "1.0.0", "name": "pod-net",
    "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                 "ipam": {"type": "netctl-ipam", "range": POOL}},
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True}]}
CHAIN: Chain = parse_chain(CONF, "network default/pod-net")
SAMPLES = 40
ROUNDS = 50  # pruner rounds per journal-retention of simulated time
FLAT = 0.15


class SimClock:
    """The simulated wall clock: the journal's timestamps and the pruner's "now"."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _conf(position: int, prev: dict[str, Any] | None) -> bytes:
    plugin = dict(CONF["plugins"][position], cniVersion=CONF["cniVersion"], name=CONF["name"])
    if prev is not None:
        plugin["prevResult"] = prev
    return json.dumps(plugin).encode()


def _result(n: int, ip: ipaddress.IPv4Address) -> dict[str, Any]:
    return {"cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0", "mac": "0a:58:0a:80:00:01"},
                           {"name": f"veth{n:08x}", "mac": "0a:58:0a:80:ff:fe"},
                           {"name": "eth0", "mac": "0a:58:0a:80:12:34",
                            "sandbox": f"/run/netns/bench-{n}"}],
            "ips": [{"address": f"{ip}/16", "gateway": "10.128.0.1", "interface": 2}],
            "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}


@dataclass
class PodLife:
    """One pod's journaled attachment and allocation, from ADD to DEL."""

    att: Attachment
    alloc: Allocation


async def add_pod(journal: Journal, n: int) -> PodLife:
    """A pod's ADD as the engine journals it: the operation with its attachment, the
    bridge step with its allocation, the portmap step, the attachment live."""
    cid = f"{n:064x}"
    netns = f"/run/netns/bench-{n}"
    pod = Pod(namespace="bench", name=f"pod-{n}", uid=f"uid-{n}")
    att = Attachment(container_id=cid, ifname="eth0", network="default/pod-net", chain=CHAIN,
                     is_default=True, caller_network="netctl", caller_ifname="eth0",
                     netns=netns, pod=pod, capability_args={"portMappings": []})
    op, _ = await journal.begin(OpStart(verb="ADD", container_id=cid, netns=netns, ifname="eth0",
                                     caller_network="netctl", caller_version="1.1.0", pod=pod,
                                     request=b"{}"), adding=[att])
    ip = RANGE.network_address + 2 + n % (RANGE.num_addresses - 4)
    alloc = Allocation(pool=POOL, scope=POOL, ip=int(ip), version=4, prefix=16,
                       owner=Owner(cid, "eth0", netns, pod, att.id))
    result = _result(n, ip)
    prev = None
    for position, plugin in enumerate(("bridge", "portmap")):
        step = await journal.begin_step(StepStart(
            op_id=op, attachment=att.id, position=position, verb="ADD", plugin_type=plugin,
            config=_conf(position, prev), netns=netns, ifname="eth0"),
            new=[alloc] if position == 0 else [], pools=POOL_INFO)
        await journal.end_step(StepEnd(step_id=step, attachment=att.id, verb="ADD",
                                       position=position, result=result, seconds=0.02),
                               op_id=op)
        prev = result
    att.result = result
    await journal.finish(op, OpEnd(state="done", attached=[att]))
    return PodLife(att, alloc)


async def del_pod(journal: Journal, life: PodLife) -> None:
    """Its DEL: the operation removing it, both steps in reverse, the release."""
    att = life.att
    op, _ = await journal.begin(OpStart(verb="DEL", container_id=att.container_id,
                                     netns=att.netns, ifname="eth0", pod=att.pod),
                             removing=[att])
    for position, plugin in ((1, "portmap"), (0, "bridge")):
        step = await journal.begin_step(StepStart(
            op_id=op, attachment=att.id, position=position, verb="DEL", plugin_type=plugin,
            config=_conf(position, att.result), netns=att.netns, ifname="eth0"))
        await journal.end_step(StepEnd(step_id=step, attachment=att.id, verb="DEL",
                                       position=position, seconds=0.01), op_id=op,
                               gone=[life.alloc] if position == 0 else [])
    await journal.finish(op, OpEnd(state="done", removed=[att]))


@dataclass
class Sample:
    lifecycle: int
    sim_days: float
    bytes: int
    file_bytes: int
    wal_bytes: int
    pages: int
    free_pages: int
    rows: int  # operations + steps + attachments + allocations


def count_rows(path: str) -> int:
    """Rows of the tables that grow, read as the CLI reads (read-only, beside the writer)."""
    conn = query.open_read_only(path)
    try:
        return sum(journaldb.row_counts(conn, (
            "operations", "steps", "attachments", "ipam_allocations")).values())
    finally:
        conn.close()


async def simulate(state_dir: str, lifecycles: int, settings: Retention, live: int,
                   concurrency: int, span: float) -> dict[str, Any]:
    groups = max(1, lifecycles // concurrency)
    step = span / groups
    clock = SimClock(time.time() - span)  # history ends now: the CLI sees it as it is
    start = clock.now
    adds: dict[str, list[float]] = {"before": [], "pruning": []}
    deadline = {"late": 0, "failed": 0}
    samples: list[Sample] = []
    async with open_journal(state_dir, clock=clock) as journal:
        pruner = Pruner(journal, settings, clock=clock)

        async def sample(done: int) -> None:
            size = await journal.size()
            rows = await trio.to_thread.run_sync(count_rows, journal.path)
            samples.append(Sample(done, round((clock.now - start) / 86400, 2),
                                  size.file_bytes + size.wal_bytes, size.file_bytes,
                                  size.wal_bytes, size.pages, size.free_pages, rows))

        async def one_add(n: int, alive: list[PodLife]) -> None:
            phase = "pruning" if settings.enabled and clock.now - start > settings.journal \
                else "before"
            t0 = time.perf_counter()
            try:
                alive.append(await add_pod(journal, n))
            except Exception:
                deadline["failed"] += 1
                return
            took = time.perf_counter() - t0
            adds[phase].append(took)
            if took > journal.write_deadline:
                deadline["late"] += 1

        async def one_del(life: PodLife) -> None:
            try:
                await del_pod(journal, life)
            except Exception:
                deadline["failed"] += 1

        pods: list[PodLife] = []
        every = max(1, groups // SAMPLES)
        # a pruner round every ROUNDS-th of the journal-retention in simulated time (the
        # daemon's rounds are 10 min apart: a sliver of 7 days), each a task beside the
        # writes. A round still running when the next is due holds the workload until it
        # ends: a daemon's round takes milliseconds of its 10 minutes, and time compressed
        # a hundred thousand times must not starve the pruner (its batches are paced in
        # real time), or the file would grow with the machine's speed, not the history
        per_round = max(1, int(settings.journal / ROUNDS / step)) if settings.enabled else 0
        due = trio.Semaphore(0)
        round_done = trio.Event()
        round_done.set()

        async def rounds() -> None:
            while True:
                await due.acquire()
                await pruner.prune_once()
                round_done.set()

        async with trio.open_nursery() as background:
            if per_round:
                background.start_soon(rounds)
            for g in range(groups):
                clock.now += step
                born: list[PodLife] = []
                async with trio.open_nursery() as nursery:
                    for i in range(concurrency):
                        nursery.start_soon(one_add, g * concurrency + i, born)
                    if len(pods) >= live:
                        for life in pods[:concurrency]:
                            nursery.start_soon(one_del, life)
                        del pods[:concurrency]
                pods.extend(born)
                if per_round and g % per_round == 0:
                    await round_done.wait()
                    round_done = trio.Event()
                    due.release()
                if g % every == every - 1:
                    await sample((g + 1) * concurrency)
                    progress(f"{(g + 1) * concurrency} lifecycles, day "
                             f"{samples[-1].sim_days:g}: {samples[-1].file_bytes / 2**20:.2f}"
                             f" MiB + WAL {samples[-1].wal_bytes / 2**20:.2f} MiB")
            background.cancel_scope.cancel()
        await pruner.prune_once()  # catch up with the last step of time
        await sample(groups * concurrency)
        return {"samples": [asdict(s) for s in samples], "adds": adds, "deadline": deadline,
                "pruner": pruner.status(), "span_days": round(span / 86400, 2),
                "lifecycles": groups * concurrency, "lifetime_days": round(
                    live / concurrency * step / 86400, 3), "commits": journal.commits,
                "writes": journal.writes, "write_deadline_s": journal.write_deadline}


def flatness(samples: list[dict[str, Any]], after_days: float) -> tuple[float, float, str]:
    """(spread, trend, problem): the file's size in the samples past ``after_days``: their
    largest distance from their mean, relative; the growth from the first half of them to
    the second. (The WAL is reported beside it: its size is the high-water mark of the
    writes between two checkpoints, not of the history kept.)"""
    flat = [s["file_bytes"] for s in samples if s["sim_days"] > after_days]
    if len(flat) < 4:
        return 0.0, 0.0, f"only {len(flat)} samples after day {after_days:g}"
    mean = sum(flat) / len(flat)
    spread = max(abs(b - mean) for b in flat) / mean
    half = len(flat) // 2
    trend = (sum(flat[half:]) / (len(flat) - half)) / (sum(flat[:half]) / half) - 1
    problem = ""
    if spread > FLAT or trend > FLAT / 2:
        problem = (f"the journal's size is not flat after day {after_days:g}: spread "
                   f"±{spread:.0%}, trend {trend:+.0%}")
    return spread, trend, problem


class RetentionBench(Bench):
    def __init__(self, lifecycles: int, settings: Retention, live: int = 200,
                 concurrency: int = 8) -> None:
        super().__init__(concurrency)
        self.lifecycles = lifecycles
        self.settings = settings
        self.live = live

    def measure(self) -> Measured:
        self.daemon.state_dir.mkdir(parents=True)
        progress(f"{self.lifecycles} pod lifecycles, journal-retention "
                 f"{show_duration(self.settings.journal)}, allocation-retention "
                 f"{show_duration(self.settings.allocations)}, {self.concurrency} at a time")
        # the longest any finished row is kept: a removed attachment (with its operations)
        # at least REMOVED_KEPT, whatever the journal-retention
        longest = max(self.settings.journal, REMOVED_KEPT, self.settings.allocations)
        span = 3 * longest
        out = trio.run(simulate, str(self.daemon.state_dir), self.lifecycles, self.settings,
                       self.live, self.concurrency, span)
        progress("the same lifecycles with retention off (the baseline)")
        base_dir = self.daemon.state_dir.parent / "baseline"
        base_dir.mkdir()
        base = trio.run(simulate, str(base_dir), self.lifecycles, Retention(0, 0), self.live,
                        self.concurrency, span)
        problems = []
        # a lifecycle's rows go once its pod is removed and the longer retention has passed
        after = (longest / 86400 + out["lifetime_days"]) * 1.1
        spread, trend, problem = flatness(out["samples"], after)
        if problem:
            problems.append(problem)
        for name, run in (("retention on", out), ("baseline", base)):
            if run["deadline"]["failed"] or run["deadline"]["late"]:
                problems.append(f"{name}: writes failed: {run['deadline']['failed']}, past "
                                f"the deadline: {run['deadline']['late']}")
        adds = {f"retention on, {phase}": summary_ms(s) for phase, s in out.pop("adds").items()}
        adds["retention off (baseline)"] = summary_ms(base.pop("adds")["before"])
        return Measured(
            params={"lifecycles": out["lifecycles"], "concurrency": self.concurrency,
                    "live_pods": self.live,
                    "journal_retention": show_duration(self.settings.journal),
                    "allocation_retention": show_duration(self.settings.allocations)},
            parts={"retention": {**out, "flat_after_days": round(after, 2),
                                 "spread": round(spread, 3), "trend": round(trend, 3),
                                 "add_ms": adds},
                   "baseline": {"samples": base["samples"][-1:], "deadline": base["deadline"],
                                "commits": base["commits"], "writes": base["writes"]}},
            problems=problems)


def render_retention(report: dict[str, Any]) -> list[RenderableType]:
    p, r = report["params"], report["retention"]
    samples = r["samples"]
    shown = samples[:: max(1, len(samples) // 10)] + ([samples[-1]] if samples else [])
    return [
        f"netctl bench journal: {p['lifecycles']} pod lifecycles over {r['span_days']:g} "
        f"simulated days, {p['live_pods']} pods live, {p['concurrency']} at a time; "
        f"journal-retention {p['journal_retention']}, allocation-retention "
        f"{p['allocation_retention']}",
        table(("lifecycles", "day", "file MiB", "WAL MiB", "pages", "free pages", "rows"), [
            (num(s["lifecycle"]), f"{s['sim_days']:g}", f"{s['file_bytes'] / 2**20:.2f}",
             f"{s['wal_bytes'] / 2**20:.2f}", num(s["pages"]), num(s["free_pages"]),
             num(s["rows"])) for s in shown]),
        f"the file after day {r['flat_after_days']:g}: spread ±{r['spread']:.1%}, trend "
        f"{r['trend']:+.1%}; pruned {r['pruner']['pruned']} in {r['pruner']['batches']} "
        f"batches (longest {r['pruner']['longest_batch_s'] * 1000:.1f} ms), "
        f"{r['pruner']['vacuumed_pages']} pages vacuumed",
        "retention off (baseline), at the end: " + ", ".join(
            f"file {s['file_bytes'] / 2**20:.2f} MiB, {s['rows']} rows"
            for s in report["baseline"]["samples"]),
        table(("one pod's ADD writes", "p50 ms", "p95 ms", "p99 ms", "max ms", "n"), [
            (phase, num(t["p50"]), num(t["p95"]), num(t["p99"]), num(t["max"]), num(t["n"]))
            for phase, t in r["add_ms"].items()]),
        "", *verdict(report["problems"], "the file is flat once the retention age is reached; "
                     "no write "
                     "failed or passed its deadline")]


def run_retention(args: argparse.Namespace) -> int:
    try:
        journal = parse_duration(args.retention)
        allocations = parse_duration(args.allocation_retention) \
            if args.allocation_retention else 2 * journal
    except ValueError as exc:
        print(f"netctl bench journal: {exc}", flush=True)
        return 2
    if journal <= 0 or args.lifecycles < 100:
        print("netctl bench journal: --lifecycles ≥ 100 and a --retention that is not off",
              flush=True)
        return 2
    bench = RetentionBench(args.lifecycles, Retention(journal, allocations))
    return drive(bench, "journal", bench.measure, render_retention, args.json)
