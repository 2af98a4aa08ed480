"""Degraded: the daemon serves, but something wants an operator (docs/operating.md, "Is it
up, and can it serve?"): the journal's disk refuses writes, an attachment is stuck, or a
pool is filled to ``pool-degraded-at`` (what this node can no longer hand out: the IPAM
store's ``pool_fill()``). Never fails STATUS nor refuses an ADD. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_POOL_DEGRADED_AT = 0.9


@dataclass(frozen=True)
class PoolFill:
    """A pool's assignable addresses, and how many this node can no longer hand out."""

    pool: str
    size: int
    used: int

    @property
    def fraction(self) -> float:
        return self.used / self.size if self.size else 1.0

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "size": self.size, "used": self.used,
                "fraction": round(self.fraction, 4)}


def parse_threshold(value: object) -> float:
    """``pool-degraded-at`` as a fraction: a number from 0 (off) to 1, or a percentage
    (``"90%"``); ValueError saying what is expected."""
    text = str(value).strip()
    try:
        if isinstance(value, bool):
            raise ValueError
        at = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a number; give a fraction of the pool's "
                         "addresses such as 0.9 (or 90%), 1 for full only, 0 for off") from None
    if not 0 <= at <= 1:
        raise ValueError(f"{value!r} is not between 0 (off) and 1 (degraded only once a "
                         "pool is full); e.g. 0.9")
    return at


def pool_fills(pools: Mapping[str, tuple[int | None, int]]) -> list[PoolFill]:
    """Every pool whose size is known (planned since the start, or journaled), by key."""
    return [PoolFill(pool, size, used) for pool, (size, used) in sorted(pools.items())
            if size]


def full_pools(pools: Mapping[str, tuple[int | None, int]], at: float) -> list[PoolFill]:
    """The pools filled to ``at`` of their size (none when ``at`` is 0), fullest first."""
    if at <= 0:
        return []
    full = [p for p in pool_fills(pools) if p.used >= math.ceil(at * p.size - 1e-9)]
    return sorted(full, key=lambda p: (-p.fraction, p.pool))


def is_degraded(stuck: int, pools: Mapping[str, tuple[int | None, int]], at: float) -> bool:
    """Whether the daemon is degraded (the metrics' question: counts only)."""
    return stuck > 0 or bool(full_pools(pools, at))


def reasons(stuck: Sequence[Mapping[str, Any]], full: Sequence[PoolFill], at: float
            ) -> list[str]:
    """Why the daemon is degraded, one line per stuck attachment (the journal's
    ``stuck_attachments()``) and full pool."""
    out = []
    for s in stuck:
        n = s.get("failures")
        out.append(f"attachment {s.get('attachment')} of container {s.get('container')} "
                   f"({s.get('network')} {s.get('ifname')}) is stuck: its clean-up failed "
                   f"{n} time{'' if n == 1 else 's'} ({s.get('error') or 'no error recorded'})"
                   "; the reconciler retries it with back-off")
    for p in full:
        what = "exhausted" if p.used >= p.size else "nearly exhausted"
        out.append(f"pool {p.pool} is {what}: {p.used} of its {p.size} addresses taken "
                   f"({p.fraction:.0%}; pool-degraded-at {at:g}); an ADD on it gets code "
                   "100 once none is left")
    return out
