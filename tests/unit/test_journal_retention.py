"""We test these aspects of the journal's retention (netctl/journal/retention.py, pruner.py),
on real SQLite files written through the journal's own API, with the journal's and the
pruner's documented clock parameter standing in for the passing days:

- durations parse (``7d``, ``12h``, ``30m``, ``90s``, plain seconds, ``0``/``off``), bad ones
  are refused, and the daemon's ``journal-retention``/``allocation-retention`` take them;
- a prune takes exactly what ended before journal-retention — finished operations with their
  steps, removed attachments with their steps and addresses — and keeps live attachments
  with their operations and steps, a stuck attachment with its DEL, running operations and
  what they add, live allocations with the operation that made each, a removed attachment a
  live allocation still names, attachments removed in the reconciler's window;
- allocation history stays for allocation-retention, with references to pruned rows cleared,
  so ``netctl journal --ip --at`` still names the pod; then it goes, with ended blocks;
- the reconciler's facts are the same before and after a prune;
- pruning runs beside the requests' writes in one trio run: none fails or waits past its
  deadline, every old row goes, every new one stays;
- the file is in incremental auto-vacuum mode (new, and an old file converted once), and the
  pruner gives freed pages back.
"""

from __future__ import annotations

import contextlib
import ipaddress
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
import trio.lowlevel
from netctl_kit import journaldb
from netctl_kit.bench.retention import POOL, POOL_INFO, PodLife, SimClock, add_pod, del_pod

from netctl.cni.request import Pod
from netctl.errors import CNIError
from netctl.journal import migrate, query
from netctl.journal.migrate import ensure_incremental_vacuum
from netctl.journal.pruner import Pruner
from netctl.journal.records import Allocation, BlockRecord, OpEnd, OpStart, Owner
from netctl.journal.retention import (
    DAY,
    Retention,
    cutoffs,
    parse_duration,
    show_duration,
)
from netctl.journal.store import Journal, open_journal
from netctl.reconcile.facts import gather
from netctl.reconcile.plan import Link
from netctl.settings import load_config

T = TypeVar("T")
T0 = 1_790_000_000.0
SETTINGS = Retention(7 * DAY, 90 * DAY)


# -- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("7d", 7 * DAY), ("12h", 43200.0), ("30m", 1800.0), ("90s", 90.0), ("3600", 3600.0),
    (3600, 3600.0), (1.5, 1.5), ("0", 0.0), (0, 0.0), ("off", 0.0), ("OFF", 0.0),
    (" 2d ", 2 * DAY), ("0.5d", 43200.0)])
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-1", "-5m", "1w", "inf", "nan", "d", True])
def test_bad_durations(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_show_duration() -> None:
    assert [show_duration(s) for s in (7 * DAY, 43200, 1800, 90, 0)] == \
        ["7d", "12h", "30m", "90s", "off"]


def test_daemon_settings(tmp_path: Path) -> None:
    cfg = load_config(None, {})
    assert (cfg.journal_retention, cfg.allocation_retention) == (7 * DAY, 90 * DAY)
    path = tmp_path / "netctl.yaml"
    path.write_text("journal-retention: 12h\nallocationRetention: off\n")
    cfg = load_config(str(path), {})
    assert (cfg.journal_retention, cfg.allocation_retention) == (43200.0, 0.0)
    path.write_text("journal-retention: 3600\n")
    assert load_config(str(path), {}).journal_retention == 3600.0
    path.write_text("journal-retention: a week\n")
    with pytest.raises(CNIError, match="journal-retention"):
        load_config(str(path), {})


def test_cutoffs_keep_the_reconcilers_window() -> None:
    cut = cutoffs(Retention(3600, 0), T0)
    assert cut.operations == T0 - 3600
    assert cut.removed == T0 - DAY  # removed attachments: never within a day
    assert cut.allocations is None
    assert cutoffs(Retention(0, 0), T0) == cutoffs(Retention(0, 0), T0 + 1)
    assert not Retention(0, 0).enabled


# -- what a prune takes and keeps ---------------------------------------------------------------


def read(path: str, reader: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """What ``reader`` (of :mod:`netctl_kit.journaldb`) reads of the journal at ``path``."""
    with contextlib.closing(query.open_read_only(path)) as conn:
        return reader(conn, *args, **kwargs)


ROWS = {"operations": journaldb.operation_rows, "attachments": journaldb.attachment_rows,
        "steps": journaldb.step_rows, "ipam_allocations": journaldb.allocation_rows}


def ids(path: str, table: str) -> set[int]:
    return {r["id"] for r in read(path, ROWS[table])}


def plain(n: int) -> Allocation:
    """A plain IPAM plugin's allocation (no attachment)."""
    ip = ipaddress.IPv4Address("10.128.200.0") + n
    cid = f"plain{n}"
    return Allocation(pool=POOL, scope=POOL, ip=int(ip), version=4, prefix=16,
                      owner=Owner(cid, "eth0", f"/run/netns/{cid}",
                                  Pod(namespace="ns", name=f"p{n}")))


async def history(journal: Journal, clock: SimClock) -> dict[str, Any]:
    """A week-old history of every kind, then a recent removal (see the module's docstring).
    Returns the rows' ids by role."""
    out: dict[str, Any] = {}
    old = await add_pod(journal, 1)  # added and removed a week ago: goes
    clock.now += 60
    await del_pod(journal, old)
    out["old"] = old
    out["live"] = await add_pod(journal, 2)  # live for a week: stays, with its ADD
    stuck = await add_pod(journal, 3)  # its DEL failed: stays, with its ADD and DEL
    op, _ = await journal.begin(OpStart(verb="DEL", container_id=stuck.att.container_id),
                             removing=[stuck.att])
    await journal.finish(op, OpEnd(state="failed", code=107, error="bridge: busy",
                                   kept=[(stuck.att, "bridge: busy")]),
                         retry_at=lambda n: clock.now + 60 * n)
    out["stuck"], out["stuck_del"] = stuck, op
    running = await add_pod(journal, 4)  # a DEL cut short a week ago: its op still runs
    out["running"] = running
    out["running_op"] = (await journal.begin(
        OpStart(verb="DEL", container_id=running.att.container_id), removing=[running.att])).op_id
    leak = await add_pod(journal, 5)  # removed, but its address never released (a leak)
    op, _ = await journal.begin(OpStart(verb="DEL", container_id=leak.att.container_id),
                             removing=[leak.att])
    await journal.finish(op, OpEnd(state="done", removed=[leak.att]))
    out["leak"] = leak
    held = plain(1)  # a plain IPAM allocation still held: stays, with its op
    out["held_op"] = await journal.one_transaction(OpStart(verb="ADD", origin="ipam"),
                                                   new=[held], pools=POOL_INFO)
    gone = plain(2)  # a plain IPAM allocation released: ops go, the allocation stays
    out["gone_ops"] = [
        await journal.one_transaction(OpStart(verb="ADD", origin="ipam"), new=[gone],
                                      pools=POOL_INFO),
        await journal.one_transaction(OpStart(verb="DEL", origin="ipam"), gone=[gone])]
    block = await journal.ipam.open_block(BlockRecord(name="b1", pool=POOL, scope=POOL,
                                                 cidr="10.129.0.0/26", node="n2",
                                                 state="seen"))
    await journal.ipam.set_block(block, "seen", ended=True)
    clock.now = T0 + 7.5 * DAY
    recent = await add_pod(journal, 6)  # removed half a day ago: stays
    await del_pod(journal, recent)
    out["recent"] = recent
    return out


# every simulated pod's host veth, still on the host: the sweep reads the removed
# attachments naming one (kit/bench/retention.py: veth<n>, the same MAC for all)
ON_HOST = {f"veth{n:08x}": Link("veth", "0a:58:0a:80:ff:fe") for n in range(1, 20)}


def facts(path: str, now: float) -> Any:
    f = gather(path, now=now, links=ON_HOST)
    return (f.attachments, f.removed_results, f.allocations)


def test_prune_takes_exactly_what_is_old(tmp_path: Path) -> None:
    clock = SimClock(T0)

    async def main() -> None:
        async with open_journal(tmp_path, clock=clock) as journal:
            h = await history(journal, clock)
            path = journal.path
            clock.now += 0.5 * DAY  # day 8
            before = facts(path, clock.now)
            all_ops, all_atts = ids(path, "operations"), ids(path, "attachments")
            old: PodLife = h["old"]
            kept_pods = [h[k] for k in ("live", "stuck", "running", "leak", "recent")]
            ipam_ops = {o["id"] for o in read(path, journaldb.operation_rows, origin="ipam")}
            steps_of_kept = set(ids(path, "steps")) - {s["id"] for s in read(
                path, journaldb.step_rows, attachment=old.att.id)} - {
                    s["id"] for s in read(path, journaldb.step_rows)
                    if s["operation_id"] in ipam_ops}

            pruner = Pruner(journal, SETTINGS, clock=clock, batch=2, pause=0, keep_free=0)
            got = await pruner.prune_once()

            # gone: the old pod's attachment, its two operations and four steps, its
            # addresses; the released plain allocation's two operations
            assert got.attachments == 1 and got.operations == 4 and got.steps == 4
            assert ids(path, "attachments") == all_atts - {old.att.id}
            assert ids(path, "operations") == all_ops - {old.att.add_op, old.att.del_op,
                                                         *h["gone_ops"]}
            assert ids(path, "steps") == steps_of_kept
            assert read(path, journaldb.indexed_addresses, old.att.id) == []
            # kept, whatever their age: live, stuck, running, leaked, recent; their ops
            for life in kept_pods:
                assert life.att.id in ids(path, "attachments")
                assert life.att.add_op in ids(path, "operations")
                assert len(read(path, journaldb.step_rows, operation=life.att.add_op)) == 2
            assert {h["stuck_del"], h["running_op"], h["held_op"]} <= ids(path, "operations")
            assert [(a["del_failures"], a["error"]) for a in read(
                path, journaldb.attachment_rows, att_id=h["stuck"].att.id)] == [
                (1, "bridge: busy")]
            # allocation history stays (90 days), references to pruned rows cleared
            assert len(ids(path, "ipam_allocations")) == 8  # pods 1-6, plain 1-2
            assert [(a["attachment_id"], a["allocated_op"], a["released_op"], a["pod_name"])
                    for a in read(path, journaldb.allocation_rows,
                                  address=old.alloc.address)] == [(None, None, None, "pod-1")]
            # …so "who had this address a week ago" is still answered, from IPAM's rows
            conn = query.connect(tmp_path)
            try:
                who = query.allocations_at(conn, old.alloc.address, at=T0 + 1)
                assert [a["pod"] for a in who] == ["bench/pod-1"]
                assert query.attachments(conn, ip=old.alloc.address) == []
            finally:
                conn.close()
            # the reconciler sees the same journal
            assert facts(path, clock.now) == before
            assert pruner.status()["pruned"]["attachments"] == 1
            assert pruner.status()["last_prune"] == clock.now

            # a second prune finds nothing
            again = await pruner.prune_once()
            assert again.operations == again.attachments == again.steps == 0

            # past allocation-retention: released allocations and ended blocks go
            clock.now = T0 + 98 * DAY  # 90 days after the last release
            got = await pruner.prune_once()
            assert got.allocations == 3 and got.blocks == 1  # old's, plain 2's, recent's
            assert got.attachments == 1  # the recent one is old now
            live_addresses = {a["address"] for a in read(path, journaldb.allocation_rows)}
            assert live_addresses == {h[k].alloc.address for k in
                                      ("live", "stuck", "running", "leak")} | {
                plain(1).address}
            assert read(path, journaldb.block_rows) == []
            for key in ("live", "stuck", "running", "leak"):
                assert h[key].att.id in ids(path, "attachments")

    trio.run(main)


def test_retention_off_keeps_everything(tmp_path: Path) -> None:
    clock = SimClock(T0)

    async def main() -> None:
        async with open_journal(tmp_path, clock=clock) as journal:
            await history(journal, clock)
            counts = {t: len(ids(journal.path, t)) for t in ("operations", "steps",
                                                              "attachments")}
            clock.now += 1000 * DAY
            got = await Pruner(journal, Retention(0, 0), clock=clock).prune_once()
            assert (got.operations, got.attachments, got.allocations) == (0, 0, 0)
            assert {t: len(ids(journal.path, t)) for t in counts} == counts

    trio.run(main)


# -- beside the requests ---------------------------------------------------------------------


def test_pruning_beside_requests_fails_and_delays_none(tmp_path: Path) -> None:
    """400 week-old lifecycles pruned 5 rows of each kind at a time, while 8 tasks write 25
    new lifecycles each: every write succeeds within its deadline; afterwards no old row is
    left, every new one is."""
    clock = SimClock(T0)
    deadline = 5.0

    async def main() -> None:
        async with open_journal(tmp_path, write_deadline=deadline, clock=clock) as journal:
            async with trio.open_nursery() as nursery:
                for k in range(8):
                    async def old(k: int = k) -> None:
                        for n in range(50):
                            await del_pod(journal, await add_pod(journal, 1000 * k + n))
                    nursery.start_soon(old)
            clock.now += 8 * DAY
            pruner = Pruner(journal, SETTINGS, clock=clock, batch=5, pause=0, keep_free=0)
            took: list[float] = []
            new: list[PodLife] = []

            async def writer(k: int) -> None:
                for n in range(25):
                    t0 = time.monotonic()
                    life = await add_pod(journal, 100_000 + 1000 * k + n)
                    took.append(time.monotonic() - t0)
                    if n % 2:
                        t0 = time.monotonic()
                        await del_pod(journal, life)
                        took.append(time.monotonic() - t0)
                    else:
                        new.append(life)

            async def prune_rounds(done: trio.Event) -> None:
                while not done.is_set():
                    await pruner.prune_once()
                    await trio.lowlevel.checkpoint()

            done = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(prune_rounds, done)
                async with trio.open_nursery() as writers:
                    for k in range(8):
                        writers.start_soon(writer, k)
                done.set()
            assert len(took) == 8 * (25 + 12) and max(took) < deadline
            assert pruner.batches > 10  # it did run beside the writers, in many batches
            await pruner.prune_once()
            path = journal.path
            assert [a for a in read(path, journaldb.attachment_rows)
                    if a["created_at"] < T0 + DAY] == []
            assert [o for o in read(path, journaldb.operation_rows)
                    if o["started_at"] < T0 + DAY] == []
            assert [s for s in read(path, journaldb.step_rows)
                    if s["started_at"] < T0 + DAY] == []
            assert len(ids(path, "attachments")) == 8 * 25  # new ones: removed too recently
            live = {a["id"] for a in read(path, journaldb.attachment_rows, state="attached")}
            assert live == {life.att.id for life in new}
            assert read(path, journaldb.row_counts, ("ipam_allocations",)) == {
                "ipam_allocations": 400 + 200}

    trio.run(main)


# -- vacuum ------------------------------------------------------------------------------------


def test_pruned_pages_go_back_to_the_file_system(tmp_path: Path) -> None:
    clock = SimClock(T0)

    async def main() -> None:
        async with open_journal(tmp_path, clock=clock) as journal:
            for n in range(300):
                await del_pod(journal, await add_pod(journal, n))
            before = await journal.size()
            assert before.auto_vacuum == "incremental" and before.free_pages == 0
            clock.now += 100 * DAY
            pruner = Pruner(journal, SETTINGS, clock=clock, pause=0, vacuum_step=16,
                            keep_free=0)
            await pruner.prune_once()
            after = await journal.size()
            assert after.free_pages == 0 and pruner.vacuumed_pages > 16
            assert after.pages == before.pages - pruner.vacuumed_pages
            assert after.as_dict()["bytes"] == after.file_bytes + after.wal_bytes > 0

    trio.run(main)


def test_an_old_journal_is_converted_once(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journaldb.simulate_file_before_auto_vacuum(path)
    conn = migrate.connect(path)
    try:
        assert journaldb.settings(conn)["auto_vacuum"] == 0
        assert ensure_incremental_vacuum(conn) is True
        assert journaldb.settings(conn)["auto_vacuum"] == 2
        assert ensure_incremental_vacuum(conn) is False
    finally:
        conn.close()
    fresh = tmp_path / "fresh.db"
    migrate.migrate(fresh)
    assert read(str(fresh), journaldb.settings)["auto_vacuum"] == 2


def test_the_sweep_reads_only_the_removed_attachments_naming_a_veth_on_the_host(
        tmp_path: Path) -> None:
    """A day of a busy node's removed attachments is tens of thousands of results: the
    sweep reads those whose host interface is a veth on the host now, nothing else."""
    clock = SimClock(T0)

    async def main() -> list[PodLife]:
        async with open_journal(tmp_path, clock=clock) as journal:
            pods = [await add_pod(journal, n) for n in (1, 2, 3)]
            for life in pods:
                await del_pod(journal, life)
            return pods

    pods = trio.run(main)
    path = str(tmp_path / "journal.db")
    only_2 = {"veth00000002": Link("veth", "0a:58:0a:80:ff:fe"), "eth9": Link("", "")}
    got = gather(path, now=T0 + 60, links=only_2).removed_results
    assert [att for att, _ in got] == [pods[1].att.id]
    assert got[0][1] is not None and got[0][1]["interfaces"][1]["name"] == "veth00000002"
    # a link of that name that is not a veth, or no veth at all: nothing read
    assert gather(path, now=T0 + 60, links={"veth00000002": Link("bridge", "")}
                  ).removed_results == []
    assert gather(path, now=T0 + 60, links={}).removed_results == []
    assert len(gather(path, now=T0 + 60, links=ON_HOST).removed_results) == 3
