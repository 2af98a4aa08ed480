"""A block's life on this node, as one table: the only code that changes a block's journal
record or what this node holds (:class:`~netctl.ipam.cluster.state.Holdings`' ``held``).

A record is opened ``claiming`` when this node asks for a block: a claim, a borrow, the
transfer of a borrowed address, the take-over of a gone node's block, the adoption of a
block the API names this node's and the journal does not. Then:

============  ==========  =========================================================
from          event       to
============  ==========  =========================================================
claiming      granted     held: the object is this node's (created, granted, handed over)
claiming      refused     taken (ended): another node's, refused, or never answered
held          settled     held: read back at start, its object still this node's
held          released    released (ended): this node gave it back (idle, transferred)
held          lost        lost (ended): another node's now, or gone
============  ==========  =========================================================

Between ``held`` and ``released`` a block is *withdrawn* (:meth:`Lifecycle.withdraw`): out
of the holdings, so no allocation lands in it while its release is in flight, and put back
(:meth:`Lifecycle.restore`) when the API server did not take the release.
:func:`next_state` is the table, pure; :class:`Lifecycle` applies it: the journal first,
then the holdings, in that order, so a crash between the two is settled from the journal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from netctl.ipam.cluster.blocks import Block, parse_block
from netctl.ipam.cluster.state import Cluster, Held, Holdings
from netctl.journal.records import BlockRecord
from netctl.kubeapi.objects import Block as IPAMBlock

log = logging.getLogger("netctl.ipam")

CLAIMING, HELD, TAKEN, RELEASED, LOST = "claiming", "held", "taken", "released", "lost"
ENDED = frozenset({TAKEN, RELEASED, LOST})

TABLE: dict[tuple[str, str], str] = {
    (CLAIMING, "granted"): HELD,
    (CLAIMING, "refused"): TAKEN,
    (HELD, "settled"): HELD,
    (HELD, "released"): RELEASED,
    (HELD, "lost"): LOST,
}
EVENTS = frozenset(event for _, event in TABLE)


def block_of(obj: IPAMBlock) -> Block | None:
    """The numbers of a block object (None, warned, when its CIDR does not parse)."""
    blk = parse_block(obj.spec.cidr)
    if blk is None:
        log.warning("block %s has a malformed cidr %r: ignored", obj.metadata.name,
                    obj.spec.cidr)
    return blk


class LifecycleError(Exception):
    """An event the block's state does not take (a bug: the callers follow the table)."""


def next_state(state: str, event: str) -> str:
    """The state a block in ``state`` is in after ``event``. Pure."""
    try:
        return TABLE[(state, event)]
    except KeyError:
        raise LifecycleError(f"a {state} block takes no {event!r}") from None


@dataclass
class Lifecycle:
    """:func:`next_state` applied to this node's blocks: journaled, then held or not."""

    cluster: Cluster
    holdings: Holdings

    async def open(self, rec: BlockRecord) -> BlockRecord:
        """Journal ``rec``'s claim (``claiming``): asked for, its outcome not known yet."""
        if rec.state != CLAIMING:
            raise LifecycleError(f"a block's record opens {CLAIMING}, not {rec.state}")
        rec.id = await self.cluster.journal.ipam.open_block(rec)
        return rec

    async def move(self, rec: BlockRecord, event: str, obj: IPAMBlock | None = None, *,
                   taken_over: bool = False) -> None:
        """``event`` happened to ``rec``'s block (``obj``: its object as it is now, for
        ``granted`` and ``settled``): the new state journaled (unless it is the same),
        then the holdings changed to match."""
        new = next_state(rec.state, event)
        if new != rec.state:
            await self.cluster.journal.ipam.set_block(rec.id, new, ended=new in ENDED)
        rec.state = new
        if new in ENDED:
            self.holdings.held.pop(rec.name, None)
            return
        assert obj is not None, f"{event}: the block's object"
        self.cluster.blocks.cache[("", obj.metadata.name)] = obj
        blk = block_of(obj)
        if blk is not None:
            self.holdings.held[rec.name] = Held(rec, blk, obj, taken_over=taken_over)

    def withdraw(self, name: str) -> Held:
        """Block ``name`` out of the holdings while its release is in flight (no
        allocation lands in it meanwhile); journaled ``released`` by :meth:`move`, or put
        back by :meth:`restore`."""
        return self.holdings.held.pop(name)

    def restore(self, h: Held) -> None:
        """A withdrawn block held again: its release did not happen."""
        self.holdings.held[h.record.name] = h
