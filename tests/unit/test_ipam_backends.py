"""We test these aspects of the IPAM backend contract, on the in-memory fake and on the
sqlite backend (a real journal file through aiosqlite) alike: first address and
idempotence per owner, round-robin and lowest order, requested addresses, exhaustion
(code 100), dual-stack, uniqueness across overlapping ranges of one network_name,
release by owner, and GC of plain-plugin allocations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from netctl.errors import CNIError
from netctl.ipam.backend import Owner
from netctl.ipam.memory import MemoryBackend
from netctl.ipam.ranges import parse_config
from netctl.ipam.sqlite import SqliteBackend
from netctl.journal.store import open_journal

Call = Callable[..., Awaitable[Any]]


@pytest.fixture(params=["memory", "sqlite"])
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Callable[[Call], Any]], None]:
    def runner(scenario: Callable[[Call], Any]) -> None:
        async def main() -> None:
            if request.param == "memory":
                fake = MemoryBackend()

                async def call(name: str, *args: Any, **kw: Any) -> Any:
                    return await getattr(fake, name)(None, *args, **kw)

                await scenario(call)
            else:
                real = SqliteBackend()
                async with open_journal(tmp_path) as journal:
                    async def call(name: str, *args: Any, **kw: Any) -> Any:
                        return await journal.write(
                            lambda db: getattr(real, name)(db, *args, **kw))

                    await scenario(call)

        trio.run(main)

    return runner


def pool(**ipam: Any) -> tuple[Any, Any]:
    return parse_config({"type": "netctl-ipam", **ipam})


def owner(cid: str, ifname: str = "eth0") -> Owner:
    return Owner(cid, ifname)


def addresses(leases: list[Any]) -> list[str]:
    return [lease.address for lease in leases]


def test_first_address_and_idempotent_per_owner(run) -> None:
    cfg, ranges = pool(range="10.9.0.0/29", gateway="10.9.0.1")

    async def scenario(call: Call) -> None:
        a = await call("allocate", cfg, ranges, owner("a"), [])
        assert addresses(a) == ["10.9.0.2/29"] and a[0].gateway == "10.9.0.1"
        assert addresses(await call("allocate", cfg, ranges, owner("a"), [])) == ["10.9.0.2/29"]
        assert addresses(await call("allocate", cfg, ranges, owner("a", "net1"), [])) == [
            "10.9.0.3/29"]
        held = await call("held_by", cfg, ranges, container_id="a", ifname="eth0")
        assert addresses(held) == ["10.9.0.2/29"]

    run(scenario)


def test_round_robin_does_not_reuse_a_released_address_at_once(run) -> None:
    cfg, ranges = pool(range="10.9.1.0/29")

    async def scenario(call: Call) -> None:
        assert addresses(await call("allocate", cfg, ranges, owner("a"), [])) == ["10.9.1.1/29"]
        assert addresses(await call("allocate", cfg, ranges, owner("b"), [])) == ["10.9.1.2/29"]
        assert await call("release", op_id=None, container_id="a", ifname="eth0") == 1
        assert addresses(await call("allocate", cfg, ranges, owner("c"), [])) == ["10.9.1.3/29"]
        assert await call("held_by", cfg, ranges, container_id="a", ifname="eth0") == []

    run(scenario)


def test_lowest_order_reuses_the_lowest_free(run) -> None:
    cfg, ranges = pool(range="10.9.2.0/29", allocation_order="lowest")

    async def scenario(call: Call) -> None:
        await call("allocate", cfg, ranges, owner("a"), [])
        await call("allocate", cfg, ranges, owner("b"), [])
        await call("release", op_id=None, container_id="a", ifname="eth0")
        assert addresses(await call("allocate", cfg, ranges, owner("c"), [])) == ["10.9.2.1/29"]

    run(scenario)


def test_requested_addresses(run) -> None:
    cfg, ranges = pool(range="10.9.3.0/24")

    async def scenario(call: Call) -> None:
        got = await call("allocate", cfg, ranges, owner("a"), ["10.9.3.50/24"])
        assert addresses(got) == ["10.9.3.50/24"]
        with pytest.raises(CNIError) as taken:
            await call("allocate", cfg, ranges, owner("b"), ["10.9.3.50/24"])
        assert taken.value.code == 7 and "10.9.3.50" in taken.value.msg and "a" in taken.value.msg
        with pytest.raises(CNIError) as outside:
            await call("allocate", cfg, ranges, owner("c"), ["10.10.0.5/24"])
        assert outside.value.code == 7 and "10.10.0.5" in outside.value.msg
        with pytest.raises(CNIError) as family:
            await call("allocate", cfg, ranges, owner("d"), ["fd00::5/64"])
        assert family.value.code == 7
        assert await call("held_by", cfg, ranges, container_id="b", ifname="eth0") == []

    run(scenario)


def test_exhaustion_is_code_100_naming_pool_and_size(run) -> None:
    cfg, ranges = pool(range="10.9.4.0/24", range_start="10.9.4.10", range_end="10.9.4.11")

    async def scenario(call: Call) -> None:
        await call("allocate", cfg, ranges, owner("a"), [])
        await call("allocate", cfg, ranges, owner("b"), [])
        with pytest.raises(CNIError) as full:
            await call("allocate", cfg, ranges, owner("c"), [])
        assert full.value.code == 100
        assert ranges[0].key in full.value.msg and "2 addresses" in full.value.msg
        await call("release", op_id=None, container_id="b", ifname="eth0")
        assert addresses(await call("allocate", cfg, ranges, owner("c"), [])) == [
            "10.9.4.11/24"]

    run(scenario)


def test_dual_stack_one_address_per_range(run) -> None:
    cfg, ranges = pool(ipRanges=[{"range": "10.9.5.0/24"}, {"range": "fd00:9:5::/64"}])

    async def scenario(call: Call) -> None:
        got = await call("allocate", cfg, ranges, owner("a"), [])
        assert addresses(got) == ["10.9.5.1/24", "fd00:9:5::1/64"]
        got = await call("allocate", cfg, ranges, owner("b"), ["fd00:9:5::99/64"])
        assert addresses(got) == ["10.9.5.2/24", "fd00:9:5::99/64"]

    run(scenario)


def test_overlapping_ranges_of_one_network_share_uniqueness(run) -> None:
    wide, wide_ranges = pool(range="10.9.6.0/24", network_name="blue")
    narrow, narrow_ranges = pool(range="10.9.6.0/25", network_name="blue")
    apart, apart_ranges = pool(range="10.9.6.0/25", network_name="blue",
                               enable_overlapping_ranges=False)

    async def scenario(call: Call) -> None:
        await call("allocate", wide, wide_ranges, owner("a"), ["10.9.6.7/24"])
        with pytest.raises(CNIError):
            await call("allocate", narrow, narrow_ranges, owner("b"), ["10.9.6.7/25"])
        got = await call("allocate", apart, apart_ranges, owner("c"), ["10.9.6.7/25"])
        assert addresses(got) == ["10.9.6.7/25"]  # its own scope: uniqueness not shared

    run(scenario)


def test_release_stale_keeps_only_valid_plain_allocations(run) -> None:
    cfg, ranges = pool(range="10.9.7.0/24")

    async def scenario(call: Call) -> None:
        for cid in ("keep", "drop1", "drop2"):
            await call("allocate", cfg, ranges, owner(cid), [])
        released = await call("release_stale", [ranges[0].key], {("keep", "eth0")}, None)
        assert released == 2
        assert addresses(await call("held_by", cfg, ranges, container_id="keep",
                                    ifname="eth0")) == ["10.9.7.1/24"]
        assert await call("held_by", cfg, ranges, container_id="drop1", ifname="eth0") == []

    run(scenario)
