"""Taking over from whereabouts (``ipam-takeover`` names it): the addresses whereabouts
recorded (IPPools, OverlappingRangeIPReservations) whose pods still exist count as used,
in every pool of their family, until those pods are gone — read at start and again every
:data:`WHEREABOUTS_REFRESH` seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from netctl.ipam.cluster.state import Holdings
from netctl.kubeapi import whereabouts
from netctl.kubeapi.api import Api

WHEREABOUTS_REFRESH = 60.0


@dataclass
class WhereaboutsHolds:
    api: Api
    holdings: Holdings
    holds: int = 0  # whereabouts' addresses of live pods, as last read
    _read_at: float | None = None  # when they were last read (None: never)

    async def take_over(self) -> int:
        """Read whereabouts' holds of live pods into the holdings' ``foreign``; how many."""
        holds = await whereabouts.live_holds(self.api, await whereabouts.read_holds(self.api))
        foreign: dict[int, set[int]] = {}
        for version, ip in whereabouts.by_address(holds):
            foreign.setdefault(version, set()).add(ip)
        self.holdings.foreign = foreign
        self._read_at = time.monotonic()
        self.holds = len(holds)
        return len(holds)

    def due(self, now: float) -> bool:
        """Whether the holds, read once already, are to be read again."""
        return self._read_at is not None and now - self._read_at >= WHEREABOUTS_REFRESH
