"""We test these aspects of `netctl bench journal`'s simulated week, without a journal: up to
``busy_rows`` rows the week is the one it always was (the same seed, the same rows); past it,
the node holds about as many addresses at once as at ``busy_rows`` (faster churn, shorter
lives, fewer pods never removed), so its fixed pools hand every address out again instead of
running out; and no address is ever held by two leases at once, in any pool."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

import pytest
from netctl_kit.bench.journal import Simulation, Week


def _rows(week: Week) -> list[tuple[str, str, float, float | None]]:
    return [(a.container, a.address, round(a.created - week.start, 6),
             None if a.removed is None else round(a.removed - week.start, 6))
            for a in week.atts]


def _overlaps(spans: list[tuple[float, float | None]]) -> bool:
    spans = sorted(spans)
    return any(end is None or end > nxt for (_, end), (nxt, _) in pairwise(spans))


def test_up_to_busy_rows_the_week_is_unchanged() -> None:
    before = Simulation(2000)  # busy_rows: 100,000
    same = Simulation(2000, busy_rows=2000)
    assert same.churn == 1.0 and same.lifetime_s == before.lifetime_s
    assert _rows(same.build()) == _rows(before.build())


@pytest.mark.slow
def test_past_busy_rows_the_live_set_stays_and_addresses_come_back() -> None:
    base = Simulation(2000)
    base.build()
    faster = Simulation(28000, busy_rows=2000)
    week = faster.build()
    assert faster.churn == 14.0 and faster.lifetime_s == base.lifetime_s / 14
    for pool, ref in zip(week.pools, base.week.pools, strict=True):
        # the same node: about the live set of busy_rows (leaks, a share of the DELs, add
        # up); the same rows with 3-hour lives hold ten times as many (pod pool: 722 vs 74)
        assert pool.peak < 2 * ref.peak, pool.key
    for pool in week.pools[1:3]:  # the /20s: each address handed out again, round-robin
        addresses = {a.address for a in week.allocs if a.pool is pool}
        assert pool.handed_out > pool.rng.size == len(addresses), pool.key
    held: dict[tuple[str, str], list[tuple[float, float | None]]] = defaultdict(list)
    for alloc in week.allocs:
        held[(alloc.pool.key, alloc.address)].append((alloc.allocated, alloc.released))
    for att in week.atts:  # host-local's addresses too (storage), by their release time
        if not att.net.central and att.result is not None:
            held[("storage", att.address)].append((att.created, att.removed))
    assert not [key for key, spans in held.items() if _overlaps(spans)]
