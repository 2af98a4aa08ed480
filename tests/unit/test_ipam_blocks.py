"""We test the arithmetic of the cluster-wide IPAM's blocks (``netctl/ipam/cluster/blocks.py``):

- block sizes: the default shrunk for small pools, single addresses below a /26, an
  explicit ``block_size`` per family;
- every node walks every block with an assignable address, once, from its own start;
- names: the same block and scope give the same name on every node, DNS-1123 safe;
- a range narrowed to some blocks hands out only addresses inside them that the range
  itself may hand out (``range_start``, ``range_end``, ``exclude``, the gateway), and all
  of those (generated ranges and block choices, single addresses among them that may lie
  inside another block: a borrowed address in a block taken over since).
"""

from __future__ import annotations

import ipaddress
import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from netctl.errors import CNIError
from netctl.ipam.cluster import blocks as b
from netctl.ipam.ranges import Range, next_free, parse_config


def one(ipam: dict[str, object]) -> Range:
    _, ranges = parse_config({"type": "netctl-ipam", **ipam})
    return ranges[0]


def test_block_sizes() -> None:
    assert b.block_prefix(one({"range": "10.0.0.0/16"})) == 26
    assert b.block_prefix(one({"range": "10.0.0.0/24"})) == 28  # at least 16 blocks
    assert b.block_prefix(one({"range": "10.0.0.0/26"})) == 30
    assert b.block_prefix(one({"range": "10.0.0.0/27"})) == 32  # single addresses
    assert b.block_prefix(one({"range": "fd00::/64"})) == 122
    assert b.block_prefix(one({"range": "10.0.0.0/16"}), 24) == 24
    assert b.block_prefix(one({"range": "10.0.0.0/24"}), 20) == 24  # never above the pool
    assert b.block_prefix(one({"range": "fd00::/64"}), 24) == 122  # an IPv4 size: not v6's
    assert b.block_prefix(one({"range": "fd00::/64"}), 120) == 120


def test_every_node_walks_every_usable_block_once() -> None:
    rng = one({"range": "10.0.0.0/24", "range_start": "10.0.0.20", "range_end": "10.0.0.200"})
    walks = {node: [blk.start for blk in b.candidates(rng, 28, node)]
             for node in ("node-a", "node-b", "node-c")}
    usable = sorted(blk.start for blk in b.candidates(rng, 28, "x"))
    # 10.0.0.16/28 … 10.0.0.192/28 hold an address of 20..200; .0/28 and .208/28 up do not
    assert [str(ipaddress.ip_address(s)) for s in usable][:2] == ["10.0.0.16", "10.0.0.32"]
    assert len(usable) == 12
    assert all(sorted(w) == usable for w in walks.values())
    assert len({w[0] for w in walks.values()}) > 1  # not every node starts at the same block


def test_names_are_stable_and_dns_safe() -> None:
    rng = one({"range": "fd00:1::/64"})
    blk = next(b.candidates(rng, 122, "n"))
    name = b.block_name("network:blue", blk)
    assert name == b.block_name("network:blue", b.Block(6, blk.start, 122))
    assert name != b.block_name("network:green", blk)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 253


@settings(max_examples=300, deadline=None)
@given(start=st.integers(1, 100), length=st.integers(0, 150),
       excluded=st.lists(st.integers(0, 255), max_size=6),
       chosen=st.sets(st.integers(0, 15), max_size=16), gateway=st.booleans(),
       singles=st.sets(st.integers(0, 255), max_size=4))
def test_a_narrowed_range_hands_out_exactly_its_blocks_assignable_addresses(
        start: int, length: int, excluded: list[int], chosen: set[int], gateway: bool,
        singles: set[int]) -> None:
    end = min(254, start + length)
    ipam: dict[str, object] = {
        "range": "10.9.0.0/24", "range_start": f"10.9.0.{start}", "range_end": f"10.9.0.{end}",
        "exclude": [f"10.9.0.{x}/32" for x in excluded]}
    if gateway:
        ipam["gateway"] = "10.9.0.1"
    try:
        rng = one(ipam)
    except CNIError:  # e.g. nothing left to hand out but the gateway: a refused config
        assume(False)
    base = int(ipaddress.ip_address("10.9.0.0"))
    blocks = [b.Block(4, base + 16 * i, 28) for i in chosen]
    blocks += [b.Block(4, base + i, 32) for i in singles]  # borrowed, maybe inside a block
    narrowed = b.narrow(rng, blocks)
    handed: list[int] = []
    while (ip := next_free(narrowed, set(handed), None, "lowest")) is not None:
        handed.append(ip)
    wanted = [ip for ip in range(rng.first, rng.last + 1)
              if rng.contains(ip) and any(blk.contains(ip) for blk in blocks)]
    assert handed == wanted
    if not singles:
        assert sum(b.usable(rng, blk) for blk in blocks) == len(wanted)
