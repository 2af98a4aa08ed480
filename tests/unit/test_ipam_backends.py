"""We test the allocation rules (:func:`netctl.ipam.planner.plan`, through
:func:`netctl.ipam.store.allocate`) as a contract, on two stores alike:

- ``memory``: a bare :class:`~netctl.ipam.store.IndexStore` (the in-memory fake);
- ``journal``: an ``IndexStore`` whose allocations and releases go through a real
  journal file (``one_transaction``, as the plain IPAM plugin does: the journal tells the
  store, its ``follower``, of what it committed), and which after every step must equal
  a second store loaded from the journal alone
  (``IndexStore.of(*await journal.ipam.live_allocations())``: allocations, owners, pods,
  netns and round-robin cursors are durable); ``restart`` swaps that
  reloaded store in.

The rules: unique addresses, never the gateway, idempotent per (container, ifname),
requested addresses honoured / refused when taken (naming the holder), outside the
range or of the wrong family (code 7), exhaustion (code 100, naming pool and size),
release then reuse (round-robin moves on, ``lowest`` reuses at once), overlapping
ranges of one network_name sharing uniqueness, dual-stack, concurrent requests, and
staying so across a restart. Plus: GC of plain-plugin allocations through the
plugin's own handler on a journal, and the planner's cost staying flat as a /17
fills (counted membership probes, not wall-clock time).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from netctl.cni.config import parse_chain
from netctl.cni.request import Pod, Request, decode
from netctl.engine.admission import Admission
from netctl.engine.ipam_plugin import IpamPlugin
from netctl.errors import INVALID_CONFIG, POOL_EXHAUSTED, CNIError
from netctl.ipam.planner import Decision, pool_key, scope_of
from netctl.ipam.ranges import IPAMConfig, Range, parse_config
from netctl.ipam.store import IndexStore
from netctl.journal.records import Allocation, Attachment, OpStart, Owner
from netctl.journal.store import Journal, open_journal


@dataclass(frozen=True)
class Pool:
    cfg: IPAMConfig
    ranges: list[Range]

    @property
    def keys(self) -> set[str]:
        return {pool_key(self.cfg, r) for r in self.ranges}


def pool(**ipam: Any) -> Pool:
    return Pool(*parse_config({"type": "netctl-ipam", **ipam}))


def owner(cid: str, ifname: str = "eth0") -> Owner:
    return Owner(cid, ifname, f"/var/run/netns/{cid}",
                 Pod(namespace="shop", name=f"pod-{cid}", uid=f"uid-{cid}"))


def addresses(decision: Decision) -> list[str]:
    return [lease.address for lease in decision.leases]


def snapshot(store: IndexStore) -> list[Allocation]:
    return sorted(store.index.live(), key=lambda a: (a.scope, a.version, a.ip))


class Harness:
    """One store under the contract; ``journal`` is None for the bare fake."""

    def __init__(self, journal: Journal | None) -> None:
        self.journal = journal
        self.store = IndexStore()
        if journal is not None:
            journal.ipam.follower = self.store
        self.pools: set[str] = set()  # every pool seen, for comparing cursors

    async def add(self, p: Pool, cid: str, wanted: list[str] | None = None,
                  ifname: str = "eth0") -> Decision:
        who = owner(cid, ifname)
        op = OpStart(verb="ADD", container_id=cid, ifname=ifname, netns=who.netns,
                     pod=who.pod, origin="ipam")
        try:
            decision = await self.store.allocate(p.cfg, p.ranges, who, wanted or [],
                                      time.time())
        except CNIError as exc:
            if self.journal is not None:
                await self.journal.one_transaction(op, failure=exc)
                await self.check()
            raise
        self.pools |= set(decision.pools)
        if self.journal is not None:
            try:
                await self.journal.one_transaction(op, new=decision.new, pools=decision.pools)
            except BaseException:
                self.store.unreserve(decision.new)
                raise
        else:
            self.store.recorded(decision.new)
        await self.check()
        return decision

    async def delete(self, cid: str, ifname: str = "eth0",
                     pools: AbstractSet[str] | None = None) -> int:
        gone = self.store.index.of_owner(cid, ifname, pools)
        if self.journal is not None:
            await self.journal.one_transaction(
                OpStart(verb="DEL", container_id=cid, ifname=ifname, origin="ipam"), gone=gone)
        else:
            self.store.released(gone)
        await self.check()
        return len(gone)

    def held(self, cid: str, ifname: str = "eth0") -> list[str]:
        return sorted(a.cidr for a in self.store.index.of_owner(cid, ifname))

    async def reloaded(self) -> IndexStore:
        assert self.journal is not None
        return IndexStore.of(*await self.journal.ipam.live_allocations())

    async def check(self) -> None:
        """The journal holds exactly what the store holds, and so does its index of what is
        live (nothing to check without one)."""
        if self.journal is None:
            return
        again = await self.reloaded()
        assert snapshot(again) == snapshot(self.store)
        assert self.journal.live.allocations == (await self.journal.read_live()).allocations
        for key in self.pools:
            assert again.cursor(key) == self.store.cursor(key), key

    async def restart(self) -> None:
        """A new daemon: the store as loaded from the journal (the fake keeps its own)."""
        if self.journal is not None:
            self.store = await self.reloaded()
            self.journal.ipam.follower = self.store


Scenario = Callable[[Harness], Awaitable[None]]


@pytest.fixture(params=["memory", "journal"])
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Scenario], None]]:
    def runner(scenario: Scenario) -> None:
        async def main() -> None:
            if request.param == "memory":
                await scenario(Harness(None))
                return
            async with open_journal(tmp_path) as journal:
                h = Harness(journal)
                await scenario(h)
                await h.check()

        trio.run(main)

    yield runner


def test_first_address_and_idempotent_per_owner(run: Callable[[Scenario], None]) -> None:
    p = pool(range="10.9.0.0/29", gateway="10.9.0.1")

    async def scenario(h: Harness) -> None:
        a = await h.add(p, "a")
        assert addresses(a) == ["10.9.0.2/29"] and a.leases[0].gateway == "10.9.0.1"
        assert [x.owner.container_id for x in a.new] == ["a"]
        again = await h.add(p, "a")
        assert addresses(again) == ["10.9.0.2/29"] and again.new == []  # nothing new
        assert addresses(await h.add(p, "a", ifname="net1")) == ["10.9.0.3/29"]
        assert h.held("a") == ["10.9.0.2/29"] and h.held("a", "net1") == ["10.9.0.3/29"]
        key = pool_key(p.cfg, p.ranges[0])
        held = h.store.held(key, "a", "eth0")
        assert held is not None and held.address == "10.9.0.2"
        assert held.owner.pod == Pod(namespace="shop", name="pod-a", uid="uid-a")

    run(scenario)


def test_addresses_unique_and_never_the_gateway(run: Callable[[Scenario], None]) -> None:
    p = pool(range="10.9.8.0/28", gateway="10.9.8.7")  # 14 usable, less the gateway

    async def scenario(h: Harness) -> None:
        got = [addresses(await h.add(p, f"c{i}"))[0] for i in range(13)]
        assert len(set(got)) == 13
        assert "10.9.8.7/28" not in got
        assert sorted(got, key=lambda a: int(a.split(".")[3].split("/")[0])) == [
            f"10.9.8.{i}/28" for i in range(1, 15) if i != 7]
        with pytest.raises(CNIError) as full:
            await h.add(p, "one-more")
        assert full.value.code == POOL_EXHAUSTED
        await h.delete("c3")
        with pytest.raises(CNIError) as gw:
            await h.add(p, "wants-gw", ["10.9.8.7/28"])
        assert gw.value.code == INVALID_CONFIG and "gateway" in gw.value.msg

    run(scenario)


def test_round_robin_does_not_reuse_a_released_address_at_once(
        run: Callable[[Scenario], None]) -> None:
    p = pool(range="10.9.1.0/29")

    async def scenario(h: Harness) -> None:
        assert addresses(await h.add(p, "a")) == ["10.9.1.1/29"]
        assert addresses(await h.add(p, "b")) == ["10.9.1.2/29"]
        assert await h.delete("a") == 1
        assert await h.delete("a") == 0  # nothing left to release
        assert addresses(await h.add(p, "c")) == ["10.9.1.3/29"]
        assert h.held("a") == []
        await h.restart()  # the cursor is durable: still no reuse at once
        assert addresses(await h.add(p, "d")) == ["10.9.1.4/29"]
        for cid in "ef":
            await h.add(p, cid)
        assert addresses(await h.add(p, "g")) == ["10.9.1.1/29"]  # wraps to the freed one

    run(scenario)


def test_lowest_order_reuses_the_lowest_free(run: Callable[[Scenario], None]) -> None:
    p = pool(range="10.9.2.0/29", allocation_order="lowest")

    async def scenario(h: Harness) -> None:
        await h.add(p, "a")
        await h.add(p, "b")
        await h.delete("a")
        assert addresses(await h.add(p, "c")) == ["10.9.2.1/29"]
        assert addresses(await h.add(p, "d")) == ["10.9.2.3/29"]

    run(scenario)


def test_requested_addresses(run: Callable[[Scenario], None]) -> None:
    p = pool(range="10.9.3.0/24")

    async def scenario(h: Harness) -> None:
        got = await h.add(p, "a", ["10.9.3.50/24"])
        assert addresses(got) == ["10.9.3.50/24"]
        with pytest.raises(CNIError) as taken:
            await h.add(p, "b", ["10.9.3.50/24"])
        assert taken.value.code == INVALID_CONFIG
        assert "10.9.3.50" in taken.value.msg and "container a" in taken.value.msg
        with pytest.raises(CNIError) as outside:
            await h.add(p, "c", ["10.10.0.5/24"])
        assert outside.value.code == INVALID_CONFIG and "10.10.0.5" in outside.value.msg
        with pytest.raises(CNIError) as family:
            await h.add(p, "d", ["fd00::5/64"])
        assert family.value.code == INVALID_CONFIG and "fd00::5" in family.value.msg
        with pytest.raises(CNIError) as garbage:
            await h.add(p, "e", ["not-an-ip"])
        assert garbage.value.code == INVALID_CONFIG
        for cid in "bcde":
            assert h.held(cid) == []
        # the address alone (no prefix length) works too, once free
        await h.delete("a")
        assert addresses(await h.add(p, "b", ["10.9.3.50"])) == ["10.9.3.50/24"]

    run(scenario)


def test_exhaustion_is_code_100_naming_pool_and_size(run: Callable[[Scenario], None]) -> None:
    p = pool(range="10.9.4.0/24", range_start="10.9.4.10", range_end="10.9.4.11")

    async def scenario(h: Harness) -> None:
        await h.add(p, "a")
        await h.add(p, "b")
        with pytest.raises(CNIError) as full:
            await h.add(p, "c")
        assert full.value.code == POOL_EXHAUSTED
        assert p.ranges[0].key in full.value.msg and "2 addresses" in full.value.msg
        assert h.held("c") == []
        await h.delete("b")
        assert addresses(await h.add(p, "c")) == ["10.9.4.11/24"]

    run(scenario)


def test_dual_stack_one_address_per_range(run: Callable[[Scenario], None]) -> None:
    p = pool(ipRanges=[{"range": "10.9.5.0/24"}, {"range": "fd00:9:5::/64"}])

    async def scenario(h: Harness) -> None:
        got = await h.add(p, "a")
        assert addresses(got) == ["10.9.5.1/24", "fd00:9:5::1/64"]
        got = await h.add(p, "b", ["fd00:9:5::99/64"])
        assert addresses(got) == ["10.9.5.2/24", "fd00:9:5::99/64"]
        assert addresses(await h.add(p, "c")) == ["10.9.5.3/24", "fd00:9:5::9a/64"]
        assert h.held("b") == ["10.9.5.2/24", "fd00:9:5::99/64"]
        # one family taken refuses the whole request: nothing half-allocated
        with pytest.raises(CNIError):
            await h.add(p, "d", ["10.9.5.9/24", "fd00:9:5::99/64"])
        assert h.held("d") == []
        assert await h.delete("b") == 2
        await h.restart()
        assert addresses(await h.add(p, "a")) == ["10.9.5.1/24", "fd00:9:5::1/64"]

    run(scenario)


def test_overlapping_ranges_of_one_network_share_uniqueness(
        run: Callable[[Scenario], None]) -> None:
    wide = pool(range="10.9.6.0/24", network_name="blue")
    narrow = pool(range="10.9.6.0/25", network_name="blue")
    apart = pool(range="10.9.6.0/26", network_name="blue", enable_overlapping_ranges=False)
    other = pool(range="10.9.6.0/24", network_name="green")

    async def scenario(h: Harness) -> None:
        assert wide.keys == {"blue/10.9.6.0/24"}
        assert scope_of(wide.cfg, "blue/10.9.6.0/24") == scope_of(narrow.cfg, "blue/10.9.6.0/25")
        await h.add(wide, "a", ["10.9.6.7/24"])
        with pytest.raises(CNIError) as taken:
            await h.add(narrow, "b", ["10.9.6.7/25"])
        assert taken.value.code == INVALID_CONFIG and "container a" in taken.value.msg
        got = await h.add(apart, "c", ["10.9.6.7/26"])
        assert addresses(got) == ["10.9.6.7/26"]  # its own scope: uniqueness not shared
        got = await h.add(other, "d", ["10.9.6.7/24"])
        assert addresses(got) == ["10.9.6.7/24"]  # another network_name: another scope
        # the narrow pool's own cursor still steps over the wide pool's addresses
        await h.add(wide, "e", ["10.9.6.1/24"])
        assert addresses(await h.add(narrow, "f")) == ["10.9.6.2/25"]

    run(scenario)


def test_concurrent_requests_never_share_an_address(run: Callable[[Scenario], None]) -> None:
    p = pool(range="10.9.9.0/27")

    async def scenario(h: Harness) -> None:
        got: dict[str, str] = {}

        async def one(cid: str) -> None:
            got[cid] = addresses(await h.add(p, cid))[0]

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(one, f"c{i}")
        assert len(got) == 20 and len(set(got.values())) == 20
        assert {a.cidr for a in h.store.index.live()} == set(got.values())

    run(scenario)


def test_idempotent_after_restart(run: Callable[[Scenario], None]) -> None:
    p = pool(ipRanges=[{"range": "10.9.10.0/24"}, {"range": "fd00:9:a::/64"}])

    async def scenario(h: Harness) -> None:
        first = addresses(await h.add(p, "a"))
        await h.restart()
        again = await h.add(p, "a")
        assert addresses(again) == first and again.new == []
        with pytest.raises(CNIError) as taken:
            await h.add(p, "b", ["10.9.10.1/24"])
        assert "container a" in taken.value.msg

    run(scenario)


# -- GC of plain-plugin allocations: the plugin's handler, on a journal ----------------------


def test_gc_releases_only_stale_plain_allocations(tmp_path: Path) -> None:
    ipam = {"type": "netctl-ipam", "range": "10.9.7.0/24"}
    p = pool(range="10.9.7.0/24")
    chain = parse_chain({"cniVersion": "1.0.0", "name": "blue",
                         "plugins": [{"type": "bridge", "ipam": ipam}]}, "network blue")

    def gc(valid: list[dict[str, str]] | None) -> Any:
        conf: dict[str, Any] = {"cniVersion": "1.1.0", "name": "blue", "type": "bridge",
                                "ipam": ipam}
        if valid is not None:
            conf["cni.dev/valid-attachments"] = valid
        return decode(Request(command="GC", stdin=json.dumps(conf), plugin="netctl-ipam"))

    async def main() -> None:
        async with open_journal(tmp_path) as journal:
            h = Harness(journal)
            plugin = IpamPlugin(journal, h.store, Admission(), frozenset({"netctl-ipam"}),
                                gc_grace=0.0)
            for cid in ("keep", "drop1", "drop2"):
                await h.add(p, cid)
            # an attachment's own address: GC of plain allocations never takes it
            att = Attachment(container_id="att", ifname="eth0", network="default/blue",
                             chain=chain)
            await journal.begin(OpStart(verb="ADD", container_id="att"), adding=[att])
            decision = await h.store.allocate(p.cfg, p.ranges,
                                      Owner("att", "eth0", attachment_id=att.id), [],
                                      time.time())
            await journal.one_transaction(OpStart(verb="ADD", container_id="att"),
                                          new=decision.new, pools=decision.pools)
            h.store.recorded(decision.new)

            reply = await plugin.handle(gc(None))  # no list: nothing collected
            assert "nothing collected" in reply.warning
            assert len(h.store.index.live()) == 4

            await plugin.handle(gc([{"containerID": "keep", "ifname": "eth0"}]))
            assert h.held("keep") == ["10.9.7.1/24"]
            assert h.held("drop1") == [] and h.held("drop2") == []
            assert h.held("att") == ["10.9.7.4/24"]
            await h.check()  # released in the journal too

            young = IpamPlugin(journal, h.store, Admission(), frozenset({"netctl-ipam"}),
                               gc_grace=3600.0)
            await young.handle(gc([]))  # everything is younger than the grace period
            assert h.held("keep") == ["10.9.7.1/24"]

    trio.run(main)


# -- cost stays flat as a pool fills ----------------------------------------------------------


class CountingSet(AbstractSet[int]):
    """A store's ``used()`` answer that counts the questions asked of it."""

    def __init__(self, inner: AbstractSet[int], counts: Counts) -> None:
        self._inner, self._counts = inner, counts

    def __contains__(self, ip: object) -> bool:
        self._counts.probes += 1
        return ip in self._inner

    def __iter__(self) -> Iterator[int]:
        self._counts.enumerations += 1
        return iter(self._inner)

    def __len__(self) -> int:
        self._counts.enumerations += 1
        return len(self._inner)


@dataclass
class Counts:
    probes: int = 0  # membership questions
    enumerations: int = 0  # iter()/len(): a scan of everything used
    used_calls: int = 0


@dataclass
class CountingStore(IndexStore):
    counts: Counts = field(default_factory=Counts)

    def used(self, scope: str, version: int) -> AbstractSet[int]:
        self.counts.used_calls += 1
        return CountingSet(super().used(scope, version), self.counts)


def test_allocation_cost_stays_flat_as_a_slash_17_fills() -> None:
    p = pool(range="10.128.0.0/17", gateway="10.128.0.1")
    size = p.ranges[0].size
    assert size == 32765 >= 20_000
    store = CountingStore()
    per_call: list[tuple[int, int, int]] = []  # (probes, enumerations, used() calls)

    async def main() -> None:
        for i in range(size):
            before = (store.counts.probes, store.counts.enumerations, store.counts.used_calls)
            decision = await store.allocate(p.cfg, p.ranges, Owner(f"c{i}", "eth0"), [], 0.0)
            store.recorded(decision.new)
            per_call.append((store.counts.probes - before[0],
                             store.counts.enumerations - before[1],
                             store.counts.used_calls - before[2]))
            # fail fast: a cost that grows with the fill would take minutes to finish
            assert per_call[-1][0] <= 64, f"allocation {i} probed {per_call[-1][0]} addresses"
        with pytest.raises(CNIError) as full:
            await store.allocate(p.cfg, p.ranges, Owner("one-more", "eth0"), [], 0.0)
        assert full.value.code == POOL_EXHAUSTED and f"{size} addresses" in full.value.msg

    trio.run(main)
    assert len(store.index.live()) == size
    assert len({a.ip for a in store.index.live()}) == size
    tenth = size // 10
    first, last = set(per_call[:tenth]), set(per_call[-tenth:])
    assert first == last, (first, last)
    assert len(first) == 1
    probes, enumerations, used_calls = first.pop()
    assert 1 <= probes <= 2 and enumerations == 0 and used_calls == 1
    assert all(e == 0 for _, e, _ in per_call), "the planner never enumerates what is used"
