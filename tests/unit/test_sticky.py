"""We test these aspects of sticky addresses' pure parts and the node's store: the
duration of ``sticky_for`` (units, seconds, the default, refusals naming the key); the
identity chosen (annotation key, then a KubeVirt VM's label, then namespace/name; none
without a pod name); and the planner over the :class:`IndexStore`: a released sticky
address reserved for its identity and interface, handed back to it, counted as used for
everyone else, code 11 while the predecessor holds it, taken back and restored when the
transaction does not commit, expired by the clock."""

from __future__ import annotations

import pytest
import trio

from netctl.cni.request import Pod
from netctl.errors import CNIError
from netctl.ipam.ranges import parse_config
from netctl.ipam.sticky import DEFAULT_STICKY_FOR, identity, parse_sticky_for, sticky_seconds
from netctl.ipam.store import IndexStore
from netctl.journal.records import Owner


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90.0), ("10m", 600.0), ("24h", 86400.0), ("7d", 604800.0), ("1.5h", 5400.0),
    (" 2S ", 2.0), ("30", 30.0), (45, 45.0), (0.5, 0.5)])
def test_sticky_for_durations(text: object, seconds: float) -> None:
    assert parse_sticky_for(text) == seconds


@pytest.mark.parametrize("bad", ["", "0s", "0", "-5", "10 minutes", "1h30m", "inf", True,
                                 [], {}])
def test_bad_sticky_for_is_code_7_naming_the_key(bad: object) -> None:
    with pytest.raises(CNIError) as info:
        parse_sticky_for(bad)
    assert info.value.code == 7 and "sticky_for" in info.value.msg


def test_sticky_seconds_default_and_without_sticky() -> None:
    assert sticky_seconds(False, None) is None
    assert sticky_seconds(True, None) == DEFAULT_STICKY_FOR == 3600.0
    assert sticky_seconds(True, "2s") == 2.0
    with pytest.raises(CNIError) as info:
        sticky_seconds(False, "10m")
    assert info.value.code == 7 and "without sticky: true" in info.value.msg
    with pytest.raises(CNIError) as info:
        parse_config({"type": "netctl-ipam", "range": "10.0.0.0/24", "sticky": True,
                      "sticky_for": "soon"})
    assert info.value.code == 7 and "sticky_for 'soon'" in info.value.msg


def test_identity_choice() -> None:
    p = Pod(namespace="apps", name="db-0", uid="u1")
    assert identity(p) == "pod:apps/db-0"
    assert identity(p, {"netctl.dev/sticky-key": " ledger "},
                    {"vm.kubevirt.io/name": "vm-1"}) == "key:ledger"
    assert identity(p, {"netctl.dev/sticky-key": ""},
                    {"vm.kubevirt.io/name": "vm-1"}) == "vm:apps/vm-1"
    assert identity(p, {}, {"vm.kubevirt.io/name": ""}) == "pod:apps/db-0"
    assert identity(Pod(namespace="apps"), {"netctl.dev/sticky-key": "x"}) == ""
    assert identity(Pod()) == ""


CFG, RANGES = parse_config({"type": "netctl-ipam", "range": "10.9.0.0/29",
                            "allocation_order": "lowest", "sticky": True,
                            "sticky_for": "60s"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def owner(cid: str, ident: str, ifname: str = "eth0") -> Owner:
    return Owner(cid, ifname, identity=ident)


def get(store: IndexStore, own: Owner, wanted: list[str] | None = None) -> str:
    decision = trio.run(store.allocate, CFG, RANGES, own, wanted or [], 0.0)
    store.recorded(decision.new)
    return decision.leases[0].address


def test_store_reserves_hands_back_and_expires() -> None:
    clock = Clock()
    store = IndexStore(clock=clock)
    a = get(store, owner("c1", "pod:apps/db-0"))
    assert a == "10.9.0.1/29"
    # the same identity on another interface is another address
    assert get(store, owner("c1", "pod:apps/db-0", "net1")) == "10.9.0.2/29"
    store.released(store.of_owner("c1", "eth0"))
    [res] = store.reservations()
    assert (res.address, res.identity, res.until) == ("10.9.0.1", "pod:apps/db-0", 1060.0)
    # a reserved address cannot be handed out: the pool's fill counts it, the usage not
    assert store.pool_usage()["10.9.0.0/29"] == (6, 1)
    assert store.pool_fill()["10.9.0.0/29"] == (6, 2)
    # others: the lowest free is .3, the reserved .1 is used; asking for it is code 7
    assert get(store, owner("c2", "pod:apps/web-0")) == "10.9.0.3/29"
    with pytest.raises(CNIError) as info:
        get(store, owner("c3", "pod:apps/web-1"), ["10.9.0.1"])
    assert info.value.code == 7 and "reserved for pod:apps/db-0 (eth0)" in info.value.msg
    # a pod without identity (no pod name) is no exception
    assert get(store, owner("c4", "")) == "10.9.0.4/29"
    # the identity gets it back; not recorded (the transaction failed): reserved again
    decision = trio.run(store.allocate, CFG, RANGES, owner("c5", "pod:apps/db-0"), [], 0.0)
    assert decision.leases[0].address == a and store.reservations() == []
    store.unreserve(decision.new)
    assert [r.address for r in store.reservations()] == ["10.9.0.1"]
    # expiry by the clock
    assert store.expired(1059.0) == []
    clock.now = 2000.0
    ended = store.expired(1060.0)
    assert [r.address for r in ended] == ["10.9.0.1"]
    store.ended(ended)
    assert store.reservations() == [] and store.sticky_status()["ended"]["expired"] == 1
    assert get(store, owner("c6", "pod:apps/web-2")) == "10.9.0.1/29"


def test_a_live_predecessor_is_code_11() -> None:
    store = IndexStore()
    get(store, owner("old", "vm:apps/vm-1"))
    with pytest.raises(CNIError) as info:
        get(store, owner("new", "vm:apps/vm-1"))
    assert info.value.code == 11 and "old" in info.value.msg
    # a requested address takes precedence: no wait, another address
    assert get(store, owner("new", "vm:apps/vm-1"), ["10.9.0.5"]) == "10.9.0.5/29"
    store.released(store.of_owner("old", "eth0"))
    store.released(store.of_owner("new", "eth0"))
    # the newer reservation of the identity replaced the older one
    assert [r.address for r in store.reservations()] == ["10.9.0.5"]


def test_not_sticky_config_ignores_identity() -> None:
    cfg, ranges = parse_config({"type": "netctl-ipam", "range": "10.9.0.0/29",
                                "allocation_order": "lowest"})
    store = IndexStore()
    d = trio.run(store.allocate, cfg, ranges, owner("c1", "pod:a/b"), [], 0.0)
    assert d.new[0].sticky == ""
    store.released(d.new)
    assert store.reservations() == []
