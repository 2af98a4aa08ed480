"""We test these aspects of `netctl bench cluster`'s own logic, without daemons: the
whereabouts baseline's lease decisions (create, take a free or expired lease, wait for a held
one) and pool arithmetic (lowest free offset, the container's own offset again, release);
the baseline run against the fake API server from many threads at once (every address
distinct, the IPPool holding exactly the live ones, the lease left free); the duplicate
counter across nodes; the requests-per-pod report (writes and IPAM writes apart); the
blocks counted per node."""

from __future__ import annotations

import ipaddress
import threading
from collections import Counter
from collections.abc import Callable

from netctl_kit.bench import whereabouts as wb
from netctl_kit.bench.cluster import (
    IPPOOLS,
    Alloc,
    blocks_report,
    churn_victims,
    duplicates,
    requests_report,
)
from netctl_kit.kubefake import FakeKube

POOL = ipaddress.ip_network("10.96.0.0/28")


def test_lease_steps() -> None:
    now = 1_000_000.0
    assert wb.lease_step(None, "a", now) == "create"
    held = wb.holding(None, "b", now)
    assert held["spec"]["holderIdentity"] == "b" and held["spec"]["leaseDurationSeconds"] == 1
    held["metadata"]["resourceVersion"] = "7"
    assert wb.lease_step(held, "a", now + 0.5) == "wait"  # held by b, renewed 0.5 s ago
    assert wb.lease_step(held, "a", now + 1.5) == "take"  # expired
    assert wb.lease_step(held, "b", now + 0.5) == "take"  # its own
    free = wb.released(held, now + 0.2)
    assert wb.lease_step(free, "a", now + 0.3) == "take"
    taken = wb.holding(free, "a", now + 0.3)
    assert taken["metadata"]["resourceVersion"] == "7"  # written under the one read
    assert taken["spec"]["leaseTransitions"] == 1
    assert wb.parse_micro_time(wb.micro_time(now + 0.25)) == now + 0.25


def test_pool_offsets() -> None:
    size = POOL.num_addresses
    offset, allocs = wb.assign({}, size, "c1", "ns/p1")
    assert offset == 1 and allocs == {"1": {"id": "c1", "podref": "ns/p1"}}
    offset, allocs = wb.assign(allocs, size, "c2", "ns/p2")
    assert offset == 2
    assert wb.assign(allocs, size, "c1", "ns/p1") == (1, allocs)  # the same again
    allocs = wb.release(allocs, "c1")
    assert wb.assign(allocs, size, "c3", "ns/p3")[0] == 1  # the lowest free
    full = {str(o): {"id": f"x{o}", "podref": ""} for o in range(1, size - 1)}
    try:
        wb.assign(full, size, "c4", "ns/p4")
    except wb.BaselineError as exc:
        assert "full" in str(exc)
    else:
        raise AssertionError("a full pool handed out an address")
    assert wb.pool_name(ipaddress.ip_network("fd00::/120")) == "fd00---120"


def test_baseline_against_the_fake_from_many_threads() -> None:
    stop = threading.Event()
    got: list[str] = []
    lock = threading.Lock()

    def add(i: int) -> None:
        address = wb.Whereabouts(wb.Endpoint(kube.url), POOL, f"bench/p{i}", stop).add(
            f"c{i}", f"bench/p{i}")
        with lock:
            got.append(address)

    def delete(i: int) -> None:
        wb.Whereabouts(wb.Endpoint(kube.url), POOL, f"bench/p{i}", stop).delete(f"c{i}")

    def at_once(work: Callable[[int], None], items: range) -> None:
        threads = [threading.Thread(target=work, args=(i,)) for i in items]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    with FakeKube(crds=[IPPOOLS]) as kube:
        at_once(add, range(6))
        assert sorted(got) == [f"10.96.0.{i}" for i in range(1, 7)]  # distinct, lowest first
        at_once(delete, range(1, 6, 2))
        pool = kube.get("ippools", wb.NAMESPACE, "10.96.0.0-28")
        assert pool is not None
        assert sorted(e["id"] for e in pool["spec"]["allocations"].values()) == ["c0", "c2", "c4"]
        lease = kube.get("leases", wb.NAMESPACE, wb.LEASE_NAME)
        assert lease is not None and lease["spec"]["holderIdentity"] == ""
        assert kube.count("update", "ippools") == 9  # one write per ADD and per DEL
        assert kube.count("create", "ippools") >= 1


def test_duplicates_across_nodes() -> None:
    allocs = [Alloc("node-1", "a", "add", "10.0.0.1"), Alloc("node-2", "b", "add", "10.0.0.1"),
              Alloc("node-2", "c", "add", "10.0.0.2"), Alloc("node-1", "d", "add", "10.0.0.2",
                                                             deleted=True),
              Alloc("node-1", "e", "add", "")]  # failed: no address
    dup = duplicates(allocs)
    assert dup["live"] == 3 and dup["distinct"] == 2 and dup["held_twice"] == 1
    assert dup["examples"] == [{"address": "10.0.0.1", "holders": ["node-1/a", "node-2/b"]}]
    assert [a.container for a in churn_victims(allocs, 2)] == ["a", "c"]


def test_requests_report() -> None:
    counts = Counter({"create ipamblocks": 2, "list ipamblocks": 1, "patch pods": 4,
                      "get leases": 8})
    rep = requests_report(4, counts, ("ipamblocks",))
    assert rep["writes_per_pod"] == 1.5 and rep["ipam_writes_per_pod"] == 0.5
    assert rep["reads_per_pod"] == 2.25
    assert rep["by_verb_per_pod"] == {"create": 0.5, "get": 2.0, "list": 0.25, "patch": 1.0}
    assert requests_report(0, Counter(), ())["writes_per_pod"] == 0.0


def test_blocks_by_node() -> None:
    blocks = [{"spec": {"node": "node-2", "cidr": "10.96.0.0/26"}},
              {"spec": {"node": "node-1", "cidr": "10.96.0.64/26"}},
              {"spec": {"node": "node-2", "cidr": "10.96.0.128/26"}}]
    assert blocks_report(blocks) == {"total": 3, "per_node": {"node-1": 1, "node-2": 2}}
