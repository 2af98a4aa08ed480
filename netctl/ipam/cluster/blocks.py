"""Address blocks: how a pool is cut into the blocks nodes claim. Pure.

A node claims aligned blocks of a shared pool (one API object each, created to claim) and
hands out addresses inside its own blocks. A pool's block size is ``block_size`` from the
``ipam`` section, else /26 for IPv4 and /122 for IPv6, shrunk until the pool holds
:data:`MIN_BLOCKS` blocks; a pool too small for that uses single addresses. A block's
object name derives from the scope and the CIDR, so two nodes claiming one block create
one name and one of them is told AlreadyExists. This module is the one place the cluster
store turns an API object's text into a :class:`Block`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, replace

from netctl.ipam.ranges import Range, merge_intervals
from netctl.kubeapi.blocks import scope_digest
from netctl.kubeapi.objects import Block as IPAMBlock
from netctl.kubeapi.objects import Borrow

DEFAULT_PREFIX = {4: 26, 6: 122}
MIN_BLOCKS = 16  # a default block size is shrunk until the pool holds this many
BITS = {4: 32, 6: 128}


@dataclass(frozen=True, slots=True)
class Block:
    """One aligned block of a range: ``start``..``end`` inclusive, as ints."""

    version: int
    start: int
    prefix: int

    @property
    def end(self) -> int:
        return self.start + (1 << (BITS[self.version] - self.prefix)) - 1

    @property
    def cidr(self) -> str:
        net = ipaddress.ip_network((self.start, self.prefix)) if self.version == 4 \
            else ipaddress.IPv6Network((self.start, self.prefix))
        return str(net)

    def contains(self, ip: int) -> bool:
        return self.start <= ip <= self.end


def parse_block(cidr: str) -> Block | None:
    """The block a CIDR's text names; None when it does not parse."""
    try:
        net = ipaddress.ip_network(cidr)
    except ValueError:
        return None
    return Block(net.version, int(net.network_address), net.prefixlen)


def parse_address(text: str) -> tuple[int, int] | None:
    """(family, address) of an address's text, its prefix length ignored; None when it
    does not parse."""
    try:
        addr = ipaddress.ip_address(text.split("/")[0])
    except ValueError:
        return None
    return addr.version, int(addr)


def cidr_size(cidr: str) -> int:
    """How many addresses a block's CIDR spans (0 when it does not parse)."""
    _, sep, prefix = cidr.rpartition("/")
    if not sep or not prefix.isdigit():
        return 0
    return 1 << max(0, (128 if ":" in cidr else 32) - int(prefix))


def block_prefix(rng: Range, configured: int | None = None) -> int:
    """The prefix length of ``rng``'s blocks (see the module's docstring)."""
    bits = BITS[rng.version]
    pool = rng.cidr.prefixlen
    if configured is not None and (configured <= 32) == (rng.version == 4):
        return min(max(configured, pool), bits)
    prefix = max(DEFAULT_PREFIX[rng.version], pool + MIN_BLOCKS.bit_length() - 1)
    return prefix if prefix <= bits - 2 else bits


def block_at(rng: Range, prefix: int, ip: int) -> Block:
    size = 1 << (BITS[rng.version] - prefix)
    return Block(rng.version, ip - (ip - int(rng.cidr.network_address)) % size, prefix)


def usable(rng: Range, block: Block) -> int:
    """How many addresses of ``block`` the range may hand out."""
    lo, hi = max(block.start, rng.first), min(block.end, rng.last)
    if lo > hi:
        return 0
    cut = sum(min(e, hi) - max(s, lo) + 1 for s, e in rng.excluded if s <= hi and e >= lo)
    return hi - lo + 1 - cut


def candidates(rng: Range, prefix: int, node: str) -> Iterator[Block]:
    """Every block of ``rng`` holding an assignable address, starting at the node's own
    starting point and wrapping around."""
    size = 1 << (BITS[rng.version] - prefix)
    base = int(rng.cidr.network_address)
    first = (rng.first - base) // size
    last = (rng.last - base) // size
    count = last - first + 1
    digest = int.from_bytes(hashlib.sha256(node.encode()).digest()[:8], "big")
    offset = digest % count
    for i in range(count):
        block = Block(rng.version, base + ((first + (offset + i) % count) * size), prefix)
        if usable(rng, block):
            yield block


def block_name(scope: str, block: Block) -> str:
    """The claim object's name: a DNS-1123 subdomain, the same on every node for the same
    scope and block (``b-<scope hash>-<cidr>``)."""
    digest = scope_digest(scope)
    text = block.cidr.replace(".", "-").replace(":", "-").replace("/", "-")
    return f"b-{digest}-{text.strip('-')}"


def narrow(rng: Range, blocks: Iterable[Block]) -> Range:
    """``rng`` restricted to ``blocks``: the same key, CIDR and gateway (leases keep the
    pool's prefix length), assignable only inside the blocks."""
    clipped = [(max(b.start, rng.first), min(b.end, rng.last)) for b in blocks]
    spans = merge_intervals([(s, e) for s, e in clipped if s <= e])  # blocks may overlap
    if not spans:  # nothing assignable: an empty range (first > last)
        return replace(rng, first=rng.first, last=rng.first - 1, excluded=())
    first, last = spans[0][0], spans[-1][1]
    gaps = [(e + 1, s - 1) for (_, e), (s, _) in itertools.pairwise(spans)
            if s > e + 1]
    inside = [(max(s, first), min(e, last)) for s, e in rng.excluded if s <= last and e >= first]
    return replace(rng, first=first, last=last, excluded=merge_intervals(inside + gaps))


def held_elsewhere(blocks: Iterable[IPAMBlock], node: str, pools: Collection[str],
                   held: Collection[str]) -> dict[str, int]:
    """By pool (of ``pools``), the addresses of other nodes' blocks: a block counts its
    size; a borrow counts only when it was granted out of one of ``node``'s blocks
    (``held``: their names) — the others lie in a block counted already."""
    out: dict[str, int] = {}
    for obj in blocks:
        spec = obj.spec
        if spec.node == node or spec.pool not in pools:
            continue
        if isinstance(obj, Borrow):
            n = 1 if obj.spec.parent in held and obj.spec.grant == "granted" else 0
        else:
            n = cidr_size(spec.cidr)
        out[spec.pool] = out.get(spec.pool, 0) + n
    return out


def published_for(blocks: Iterable[IPAMBlock], node: str, pool: str, identity: str,
                  ifname: str, now: float) -> tuple[str, IPAMBlock] | None:
    """The address of ``pool`` another node than ``node`` published as reserved for
    ``identity`` on ``ifname`` (not expired), and the block object of ``blocks`` it is
    published on (pure)."""
    for obj in blocks:
        if obj.spec.pool != pool or obj.spec.node == node:
            continue
        for entry in obj.spec.reserved:
            if (entry.identity, entry.ifname) == (identity, ifname) and entry.until > now:
                return entry.address, obj
    return None
