"""We test these aspects of the IPAM read queries (``netctl ipam …``, ``netctl journal --ip``)
on a real journal file made by the migrations runner, with rows written by hand:

- ``pools``: size as an exact int (an IPv6 /64 passes 2**63), live allocations counted,
  released ones not, free = size - in use, a pool with nothing allocated;
- ``pool_allocations``: live ones in address order with pod, container, ifname, since,
  history with ``include_released``, an unknown pool refused naming it and the known ones;
- leaks, now answered by the reconciler's plan (``facts.gather`` on the same file,
  ``plan``, ``leaks``): an allocation whose attachment is removed or missing, a
  plain-plugin one whose netns path is gone (or is no netns: a plain file); not one
  whose attachment is live (or still being removed by a running DEL), whose netns
  exists, with no netns, or released; an attachment left ``removing`` by a DEL that is
  no longer running is reported as ``unfinished-del``;
- the facts of some containers only (a run on kernel events);
- ``allocations_at``: who held an address at a time (the boundaries: from allocated_at
  inclusive, until released_at exclusive), the whole history without a time, an address
  with a prefix length, and the container/pod filters.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.journal import query
from netctl.journal.migrate import migrate
from netctl.reconcile.facts import gather
from netctl.reconcile.plan import leaks, plan

GRACE = 30.0

T0 = 1_700_000_000.0


class Journal:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "journal.db"
        migrate(self.path)
        self.conn = sqlite3.connect(self.path, isolation_level=None)

    def pool(self, key: str, rng: str, size: int, family: int = 4, network: str = "") -> None:
        journaldb.write_pool(self.conn, key=key, pool_range=rng, size=size, created_at=T0,
                             family=family, network_name=network)

    def attachment(self, container: str, state: str, removed_at: float | None = None,
                   del_op: int | None = None) -> int:
        return journaldb.write_attachment(self.conn, container_id=container, state=state,
                                          created_at=T0, removed_at=removed_at, del_op=del_op)

    def operation(self, verb: str, container: str, state: str = "running") -> int:
        return journaldb.write_operation(self.conn, verb=verb, container_id=container,
                                         state=state, started_at=T0)

    def alloc(self, pool: str, address: str, container: str, *, prefix: int = 24,
              pod: str = "", attachment: int | None = None, netns: str = "",
              at: float = T0, released: float | None = None, ifname: str = "eth0") -> int:
        ns, _, name = pod.partition("/")
        return journaldb.write_allocation(
            self.conn, pool=pool, address=address, prefix=prefix, container_id=container,
            allocated_at=at, ifname=ifname, netns=netns, pod_namespace=ns, pod_name=name,
            pod_uid=f"uid-{container}" if pod else "", attachment_id=attachment,
            released_at=released)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path)
    try:
        yield j
    finally:
        j.conn.close()


@pytest.fixture
def read(journal: Journal) -> Iterator[sqlite3.Connection]:
    """The CLI's read-only connection to the same file."""
    conn = query.connect(journal.path.parent)
    try:
        yield conn
    finally:
        conn.close()


def by_key(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in rows}


def test_pools_count_live_allocations_and_keep_huge_sizes_exact(
        journal: Journal, read: sqlite3.Connection) -> None:
    journal.pool("10.1.0.0/24", "10.1.0.0/24", 253)
    journal.pool("blue/fd00:1::/64", "fd00:1::/64", 2**64 - 1, family=6, network="blue")
    journal.pool("10.2.0.0/28", "10.2.0.0/28", 13)
    journal.alloc("10.1.0.0/24", "10.1.0.2", "c1")
    journal.alloc("10.1.0.0/24", "10.1.0.3", "c2")
    journal.alloc("10.1.0.0/24", "10.1.0.4", "c3", released=T0 + 5)
    journal.alloc("blue/fd00:1::/64", "fd00:1::1", "c1", prefix=64)

    pools = by_key(query.pools(read))
    assert list(pools) == ["10.1.0.0/24", "10.2.0.0/28", "blue/fd00:1::/64"]
    assert pools["10.1.0.0/24"] == {"key": "10.1.0.0/24", "network_name": "",
                                    "range": "10.1.0.0/24", "family": 4, "size": 253,
                                    "in_use": 2, "reserved": 0, "free": 251, "blocks": {},
                                    "reservations": [], "reservations_ended": {}}
    v6 = pools["blue/fd00:1::/64"]
    assert v6["size"] == 2**64 - 1 and isinstance(v6["size"], int)
    assert v6["free"] == 2**64 - 2
    assert (v6["network_name"], v6["family"]) == ("blue", 6)
    assert json.loads(json.dumps(v6))["size"] == 2**64 - 1  # a JSON number, exact
    assert '"size": 18446744073709551615' in json.dumps(v6)
    assert (pools["10.2.0.0/28"]["in_use"], pools["10.2.0.0/28"]["free"]) == (0, 13)


def test_pool_allocations_live_in_address_order_and_history(
        journal: Journal, read: sqlite3.Connection) -> None:
    journal.pool("10.1.0.0/24", "10.1.0.0/24", 253)
    journal.pool("10.9.0.0/24", "10.9.0.0/24", 253)
    att = journal.attachment("c10", "attached")
    journal.alloc("10.1.0.0/24", "10.1.0.10", "c10", pod="shop/web-10", attachment=att,
                  at=T0 + 1)
    journal.alloc("10.1.0.0/24", "10.1.0.9", "c9", pod="shop/web-9", at=T0 + 2, ifname="net1")
    journal.alloc("10.1.0.0/24", "10.1.0.9", "c8", pod="shop/web-8", at=T0, released=T0 + 1)
    journal.alloc("10.9.0.0/24", "10.9.0.2", "other")

    live = query.pool_allocations(read, "10.1.0.0/24")
    assert [a["address"] for a in live] == ["10.1.0.9/24", "10.1.0.10/24"]  # not text order
    assert live[0] == {
        "pool": "10.1.0.0/24", "address": "10.1.0.9/24", "container": "c9",
        "pod": "shop/web-9", "pod_uid": "uid-c9", "ifname": "net1", "netns": "",
        "attachment": None, "since": T0 + 2, "until": None, "allocated_op": None,
        "released_op": None, "identity": "", "reserved_until": None, "reservation_end": None,
        "reservation_op": None}
    assert (live[1]["container"], live[1]["attachment"]) == ("c10", att)

    history = query.pool_allocations(read, "10.1.0.0/24", include_released=True)
    assert [(a["address"], a["container"], a["until"]) for a in history] == [
        ("10.1.0.9/24", "c8", T0 + 1), ("10.1.0.9/24", "c9", None),
        ("10.1.0.10/24", "c10", None)]


def test_unknown_pool_names_it_and_the_known_ones(
        journal: Journal, read: sqlite3.Connection) -> None:
    with pytest.raises(query.UnknownPool) as info:
        query.pool_allocations(read, "10.7.0.0/24")
    assert "'10.7.0.0/24'" in str(info.value) and "none yet" in str(info.value)
    journal.pool("10.1.0.0/24", "10.1.0.0/24", 253)
    journal.pool("blue/10.2.0.0/24", "10.2.0.0/24", 253, network="blue")
    with pytest.raises(ValueError, match=r"no IPAM pool '10\.7\.0\.0/24'") as info2:
        query.pool_allocations(read, "10.7.0.0/24")
    assert "known pools: 10.1.0.0/24, blue/10.2.0.0/24" in str(info2.value)


def journal_leaks(journal: Journal) -> list[dict[str, Any]]:
    """What ``netctl ipam leaks`` answers: the reconciler's plan over the journal's facts."""
    facts = gather(journal.path, links={})
    return leaks(facts, plan(facts, GRACE))


def test_leaks_and_their_reasons(journal: Journal, tmp_path: Path) -> None:
    journal.pool("10.1.0.0/24", "10.1.0.0/24", 253)
    alive_ns = f"/proc/{os.getpid()}/ns/net"  # a real network namespace: this process's
    gone_ns = tmp_path / "netns-gone"
    live_att = journal.attachment("ok", "attached")
    del_running = journal.operation("DEL", "removing")
    removing = journal.attachment("removing", "removing", del_op=del_running)
    removed = journal.attachment("removed", "removed", removed_at=T0 + 3)
    journal.alloc("10.1.0.0/24", "10.1.0.2", "ok", attachment=live_att)
    journal.alloc("10.1.0.0/24", "10.1.0.3", "removing", attachment=removing)
    journal.alloc("10.1.0.0/24", "10.1.0.4", "removed", attachment=removed, pod="a/b")
    journal.alloc("10.1.0.0/24", "10.1.0.5", "missing", attachment=9999)
    journal.alloc("10.1.0.0/24", "10.1.0.6", "plain-alive", netns=alive_ns)
    journal.alloc("10.1.0.0/24", "10.1.0.7", "plain-gone", netns=str(gone_ns))
    journal.alloc("10.1.0.0/24", "10.1.0.8", "plain-no-netns")
    journal.alloc("10.1.0.0/24", "10.1.0.9", "released-gone", netns=str(gone_ns),
                  released=T0 + 1)
    journal.alloc("10.1.0.0/24", "10.1.0.10", "released-removed", attachment=removed,
                  released=T0 + 1)

    found = journal_leaks(journal)
    assert [(x["container"], x["address"], x["reason"]) for x in found] == [
        ("removed", "10.1.0.4/24", "attachment-removed"),
        ("missing", "10.1.0.5/24", "attachment-missing"),
        ("plain-gone", "10.1.0.7/24", "netns-gone")]
    assert found[0]["pod"] == "a/b" and found[0]["attachment"] == removed
    assert found[0]["pool"] == "10.1.0.0/24" and found[0]["since"] == T0
    assert found[0]["detail"] == f"attachment {removed} was removed"
    assert found[1]["detail"] == "attachment 9999 is not in the journal"
    assert found[2]["detail"] == f"netns {gone_ns} is gone"
    assert found[2]["attachment"] is None and found[2]["netns"] == str(gone_ns)

    gone_ns.touch()  # a plain file at that path is no network namespace: still gone
    assert [x["container"] for x in journal_leaks(journal)] == [
        "removed", "missing", "plain-gone"]
    gone_ns.unlink()
    gone_ns.symlink_to(alive_ns)  # a sandbox at that path again: no longer reported
    assert [x["container"] for x in journal_leaks(journal)] == ["removed", "missing"]

    # the DEL that was removing it is no longer running: its address is reported too
    journaldb.simulate_operation_ended(journal.conn, del_running, "failed")
    assert [(x["container"], x["address"], x["reason"]) for x in journal_leaks(journal)] == [
        ("removing", "10.1.0.3/24", "unfinished-del"),
        ("removed", "10.1.0.4/24", "attachment-removed"),
        ("missing", "10.1.0.5/24", "attachment-missing")]


def test_the_facts_of_some_containers_only(journal: Journal) -> None:
    """What a run on kernel events reads: the concerned containers' rows alone."""
    journal.pool("10.1.0.0/24", "10.1.0.0/24", 253)
    for i, container in enumerate(("a", "b", "c")):
        att = journal.attachment(container, "attached")
        journal.alloc("10.1.0.0/24", f"10.1.0.{i + 2}", container, attachment=att)
    journal.alloc("10.1.0.0/24", "10.1.0.9", "plain", netns="/run/netns/plain")
    facts = gather(journal.path, links={}, sweep=False, containers={"c", "plain", "nobody"})
    assert [a.container_id for a in facts.attachments] == ["c"]
    assert [a.container_id for a in facts.allocations] == ["c", "plain"]
    assert set(facts.netns_exists) == {"/run/netns/plain"}
    assert gather(journal.path, links={}, containers=set()).attachments == []
    assert len(gather(journal.path, links={}).attachments) == 3


def test_leaks_leave_young_allocations_alone(journal: Journal, tmp_path: Path) -> None:
    """Within the grace period a runtime may still be setting the sandbox up."""
    journal.pool("10.1.0.0/24", "10.1.0.0/24", 253)
    now = time.time()
    journal.alloc("10.1.0.0/24", "10.1.0.2", "young", netns=str(tmp_path / "gone"),
                  at=now - GRACE / 3)
    journal.alloc("10.1.0.0/24", "10.1.0.3", "old", netns=str(tmp_path / "gone"),
                  at=now - GRACE * 3)
    assert [x["container"] for x in journal_leaks(journal)] == ["old"]


def test_allocations_at_answers_who_held_an_address(
        journal: Journal, read: sqlite3.Connection) -> None:
    journal.pool("10.1.0.0/24", "10.1.0.0/24", 253)
    journal.alloc("10.1.0.0/24", "10.1.0.5", "first", pod="shop/a", at=T0, released=T0 + 10)
    journal.alloc("10.1.0.0/24", "10.1.0.5", "second", pod="shop/b", at=T0 + 20)
    journal.alloc("10.1.0.0/24", "10.1.0.6", "neighbour", at=T0)

    def who(at: float | None, ip: str = "10.1.0.5", **kw: Any) -> list[str]:
        return [a["container"] for a in query.allocations_at(read, ip, at, **kw)]

    assert who(None) == ["first", "second"]  # the whole history, oldest first
    assert who(T0 - 1) == []
    assert who(T0) == ["first"]  # from allocated_at, inclusive
    assert who(T0 + 9.5) == ["first"]
    assert who(T0 + 10) == []  # until released_at, exclusive
    assert who(T0 + 15) == []
    assert who(T0 + 20) == ["second"]
    assert who(T0 + 10**6) == ["second"]  # still held
    assert who(T0 + 5, "10.1.0.5/24") == ["first"]
    assert who(None, container="second") == ["second"]
    assert who(None, pod="shop/a") == ["first"]
    assert who(None, since=T0 + 11) == ["second"]
    assert who(None, "10.1.0.77") == []
    journal.pool("fd00:1::/64", "fd00:1::/64", 2**64 - 1, family=6)
    journal.alloc("fd00:1::/64", "fd00:1::5", "six", prefix=64, at=T0)
    assert who(T0 + 1, "FD00:1:0:0::5/64") == ["six"]  # any spelling of the address
    row = query.allocations_at(read, "10.1.0.5", T0 + 1)[0]
    assert (row["pod"], row["pod_uid"], row["since"], row["until"]) == (
        "shop/a", "uid-first", T0, T0 + 10)
    with pytest.raises(ValueError):
        query.allocations_at(read, "not-an-address")
