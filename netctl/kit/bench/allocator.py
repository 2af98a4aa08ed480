"""The allocator path the engine uses, measured alone: no plugin exec, no socket.

Fills one pool (a /17 by default: 32,766 assignable addresses) with ``count``
allocations, each planned and reserved on the node's :class:`IndexStore` and
recorded in its own journal transaction — what an ADD step with a served IPAM
does before the delegate runs — on a real journal file in a temporary dir. It
reports allocations/s and the mean cost of an allocation in the first and the
last tenth of the fill: the allocator's cost must not grow as the pool fills.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import trio

from netctl.cni.request import Pod
from netctl.ipam.ranges import parse_config
from netctl.ipam.store import IndexStore
from netctl.journal.records import OpStart, Owner
from netctl.journal.store import open_journal


async def _fill(state_dir: str, count: int, cidr: str) -> dict[str, Any]:
    cfg, ranges = parse_config({"type": "netctl-ipam", "range": cidr})
    if ranges[0].size < count:
        raise ValueError(f"{cidr} holds {ranges[0].size} addresses, fewer than {count}")
    seconds: list[float] = []
    cpu: list[float] = []
    async with open_journal(state_dir) as journal:
        store = IndexStore.of(*await journal.ipam.live_allocations())
        journal.ipam.follower = store
        started = time.perf_counter()
        for i in range(count):
            t0, c0 = time.perf_counter(), time.process_time()
            owner = Owner(f"bench{i}", "eth0", "", Pod(), None)
            decision = await store.allocate(cfg, ranges, owner, [], time.time())
            await journal.one_transaction(OpStart(verb="ADD", container_id=owner.container_id,
                                                  ifname="eth0", origin="ipam"),
                                          new=decision.new, pools=decision.pools)
            seconds.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        wall = time.perf_counter() - started
        distinct = len({a.ip for a in store.live()})
    tenth = max(1, count // 10)

    def mean_ms(values: list[float]) -> float:
        return round(sum(values) / len(values) * 1000.0, 4)

    first, last = mean_ms(seconds[:tenth]), mean_ms(seconds[-tenth:])
    first_cpu, last_cpu = mean_ms(cpu[:tenth]), mean_ms(cpu[-tenth:])
    return {
        "pool": cidr, "pool_size": ranges[0].size, "allocations": count,
        "distinct": distinct, "allocations_per_s": round(count / wall, 1),
        "first_tenth_ms": first, "last_tenth_ms": last,
        "last_over_first": round(last / first, 3) if first else None,
        "first_tenth_cpu_ms": first_cpu, "last_tenth_cpu_ms": last_cpu,
        "cpu_last_over_first": round(last_cpu / first_cpu, 3) if first_cpu else None,
    }


def measure(count: int = 20000, cidr: str = "10.96.0.0/17") -> dict[str, Any]:
    """Fill a pool through the engine's allocator path on a fresh journal."""
    with tempfile.TemporaryDirectory(prefix="netctl-bench-alloc-") as state_dir:
        return trio.run(_fill, state_dir, count, cidr)
