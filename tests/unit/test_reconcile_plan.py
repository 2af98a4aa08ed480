"""We test these aspects of the reconciler's pure planner: attachments whose netns is
gone, leftovers of failed ADDs and unfinished DELs, busy containers left alone,
allocations of removed/missing attachments and of gone plain-plugin netns (after the
grace period), and host veths of removed attachments (never bridges, never reused names).

Stuck attachments (a clean-up failed before, ``del_failures > 0``): listed in
``plan.stuck`` whatever happens; left alone while ``retry_at`` is in the future (and
while busy), deleted again once ``facts.now`` passes it. And ``leaks(facts, plan)``,
the answer of ``netctl ipam leaks``: the allocations a stuck attachment holds (reason
``stuck``, backing off or not), those of an attachment whose netns is gone
(``netns-gone``, left to its DEL), of failed ADDs and unfinished DELs, and the plan's
releases with their reasons."""

from __future__ import annotations

from typing import Any

from netctl.reconcile.plan import AllocationFact, AttachmentFact, Facts, Link, leaks, plan

NOW = 1_800_000_000.0


def att(i: int, state: str = "attached", netns: str = "/run/netns/p", running: bool = False,
        result: dict[str, Any] | None = None, container: str = "", del_failures: int = 0,
        retry_at: float | None = None, error: str | None = None) -> AttachmentFact:
    return AttachmentFact(i, container or f"c{i}", "default/n", "eth0", netns, state, running,
                          result, del_failures, retry_at, error)


def alloc(i: int, attachment: int | None, state: str | None, netns: str = "",
          age: float = 100.0, container: str = "") -> AllocationFact:
    return AllocationFact(i, "10.0.0.0/24", f"10.0.0.{i}", container or f"c{i}", "eth0", netns,
                          attachment, state, age, prefix=24)


def facts(**kw: object) -> Facts:
    base: dict[str, object] = {"attachments": [], "removed_results": [], "allocations": [],
                               "netns_exists": {}, "host_links": {}}
    base.update(kw)
    return Facts(**base)  # type: ignore[arg-type]


def test_attached_with_gone_netns_is_deleted_unless_busy() -> None:
    f = facts(attachments=[att(1, netns="/gone"), att(2, netns="/here"),
                           att(3, netns="/gone", container="busy")],
              netns_exists={"/gone": False, "/here": True}, busy=frozenset({"busy"}))
    p = plan(f, grace=30)
    assert [(a, c) for a, c, _ in p.delete] == [(1, "c1")]
    assert "netns /gone is gone" in p.delete[0][2]


def test_leftovers_of_failed_add_and_unfinished_del_unless_their_op_runs() -> None:
    f = facts(attachments=[att(1, "adding"), att(2, "removing"), att(3, "adding", running=True)])
    p = plan(f, grace=30)
    assert [a for a, _, _ in p.delete] == [1, 2]
    assert "failed ADD" in p.delete[0][2] and "DEL did not finish" in p.delete[1][2]


def test_allocations_of_removed_missing_and_gone_netns() -> None:
    f = facts(allocations=[alloc(1, 10, "removed"), alloc(2, 11, None), alloc(3, 12, "attached"),
                           alloc(4, None, None, netns="/gone"),
                           alloc(5, None, None, netns="/gone", age=5),
                           alloc(6, None, None, netns="/here"), alloc(7, None, None)],
              netns_exists={"/gone": False, "/here": True})
    p = plan(f, grace=30)
    assert [a for a, _, _ in p.release] == [1, 2, 4]
    assert "removed" in p.release[0][2] and "not in the journal" in p.release[1][2]
    # no one's but younger than the grace: looked at again when the grace ends
    assert p.ripening == {"c5": 25}
    young = facts(allocations=[alloc(1, 10, "removed", container="c", age=10),
                               alloc(2, None, None, netns="/gone", container="c", age=20),
                               alloc(3, None, None, netns="/here", container="d", age=1)],
                  netns_exists={"/gone": False, "/here": True})
    p = plan(young, grace=30)
    assert p.empty and p.ripening == {"c": 10}  # the first of the container's to ripen
    assert plan(young, grace=5).ripening == {}  # old enough: released, not ripening


def test_allocation_of_an_attachment_being_deleted_is_left_to_its_del() -> None:
    f = facts(attachments=[att(10, netns="/gone")], allocations=[alloc(1, 10, "attached")],
              netns_exists={"/gone": False})
    p = plan(f, grace=0)
    assert [a for a, _, _ in p.delete] == [10] and p.release == []


def test_host_veths_of_removed_attachments_only() -> None:
    result = {"interfaces": [{"name": "br0", "mac": "aa:aa:aa:aa:aa:01"},
                             {"name": "vethA", "mac": "aa:aa:aa:aa:aa:02"},
                             {"name": "eth0", "mac": "aa:aa:aa:aa:aa:03", "sandbox": "/n"}]}
    reused = {"interfaces": [{"name": "vethB", "mac": "aa:aa:aa:aa:aa:04"}]}
    live = {"interfaces": [{"name": "vethC", "mac": "aa:aa:aa:aa:aa:05"}]}
    f = facts(attachments=[att(9, result=live)],
              removed_results=[(1, result), (2, reused), (3, live)],
              host_links={"br0": Link("bridge", "aa:aa:aa:aa:aa:01"),
                          "vethA": Link("veth", "aa:aa:aa:aa:aa:02"),
                          "vethB": Link("veth", "bb:bb:bb:bb:bb:bb"),
                          "vethC": Link("veth", "aa:aa:aa:aa:aa:05")})
    p = plan(f, grace=30)
    assert [n for n, _ in p.unlink] == ["vethA"]
    assert p.to_json()["links"] == [{"link": "vethA",
                                     "reason": "host end of removed attachment 1"}]


def test_nothing_to_do() -> None:
    assert plan(facts(), grace=30).empty


# stuck attachments: back-off, retry, and what ``netctl ipam leaks`` says of them


def stuck_att(retry_at: float | None) -> AttachmentFact:
    """Attachment 1 of c1, left ``removing`` by two failed DELs."""
    return att(1, "removing", del_failures=2, retry_at=retry_at, error="bridge: boom")


def test_stuck_attachment_backing_off_is_listed_but_not_deleted() -> None:
    f = facts(attachments=[stuck_att(NOW + 60)],
              allocations=[alloc(5, 1, "removing", container="c1")], now=NOW)
    p = plan(f, grace=30)
    assert [a.id for a in p.stuck] == [1]
    assert p.delete == [] and p.release == [] and p.empty
    assert p.to_json()["stuck"] == [{
        "attachment": 1, "container": "c1", "network": "default/n", "ifname": "eth0",
        "state": "removing", "failures": 2, "retry_at": NOW + 60, "error": "bridge: boom"}]


def test_stuck_attachment_is_deleted_again_once_its_back_off_passes() -> None:
    for now in (NOW + 60, NOW + 61):  # at retry_at, and after it
        p = plan(facts(attachments=[stuck_att(NOW + 60)], now=now), grace=30)
        assert [(a, c) for a, c, _ in p.delete] == [(1, "c1")]
        assert "DEL did not finish" in p.delete[0][2]
        assert [a.id for a in p.stuck] == [1]  # still shown as stuck until it is gone
    # no back-off recorded: retried at once
    p = plan(facts(attachments=[stuck_att(None)], now=NOW), grace=30)
    assert [a for a, _, _ in p.delete] == [1]


def test_stuck_attachment_of_a_busy_container_is_left_alone_but_listed() -> None:
    p = plan(facts(attachments=[stuck_att(NOW - 1)], busy=frozenset({"c1"}), now=NOW),
             grace=30)
    assert p.delete == [] and [a.id for a in p.stuck] == [1]


def test_attached_attachment_with_its_back_off_running_is_left_alone() -> None:
    f = facts(attachments=[att(1, netns="/gone", retry_at=NOW + 60)],
              netns_exists={"/gone": False}, now=NOW)
    assert plan(f, grace=30).delete == []
    later = facts(attachments=[att(1, netns="/gone", retry_at=NOW + 60)],
                  netns_exists={"/gone": False}, now=NOW + 60)
    assert [a for a, _, _ in plan(later, grace=30).delete] == [1]


def test_a_stuck_attachments_addresses_are_freed_once_its_netns_is_gone() -> None:
    """Backing off or not, once its netns is gone nothing can use what netctl allocated
    for it: freed at once (no DEL, which keeps its back-off); never while the netns
    exists, nor while the container is busy."""
    allocations = [alloc(5, 1, "removing", container="c1", age=1)]  # younger than grace
    gone = facts(attachments=[stuck_att(NOW + 60)], allocations=allocations,
                 netns_exists={"/run/netns/p": False}, now=NOW)
    p = plan(gone, grace=30)
    assert [(a, c) for a, c, _ in p.free] == [(1, "c1")]
    assert "netns /run/netns/p is gone; its DEL failed 2 times" in p.free[0][2]
    assert p.delete == [] and p.release == [] and not p.empty
    assert p.found == {"stuck-netns-gone": 1}
    assert p.to_json()["freed"][0]["attachment"] == 1
    rows = leaks(gone, p)
    assert [(r["allocation"], r["reason"]) for r in rows] == [(5, "netns-gone")]
    here = facts(attachments=[stuck_att(NOW + 60)], allocations=allocations,
                 netns_exists={"/run/netns/p": True}, now=NOW)
    assert plan(here, grace=30).free == []
    busy = facts(attachments=[stuck_att(NOW + 60)], allocations=allocations,
                 netns_exists={"/run/netns/p": False}, busy=frozenset({"c1"}), now=NOW)
    assert plan(busy, grace=30).free == []
    nothing_held = facts(attachments=[stuck_att(NOW + 60)],
                         netns_exists={"/run/netns/p": False}, now=NOW)
    assert plan(nothing_held, grace=30).empty


def test_leaks_report_a_stuck_attachments_allocations_as_stuck() -> None:
    allocations = [alloc(5, 1, "removing", container="c1"),
                   alloc(6, 1, "removing", container="c1")]
    backing_off = facts(attachments=[stuck_att(NOW + 60)], allocations=allocations, now=NOW)
    rows = leaks(backing_off, plan(backing_off, grace=30))
    assert [(r["allocation"], r["address"], r["reason"]) for r in rows] == [
        (5, "10.0.0.5/24", "stuck"), (6, "10.0.0.6/24", "stuck")]
    assert rows[0]["attachment"] == 1 and rows[0]["container"] == "c1"
    assert "clean-up failed 2 times (bridge: boom)" in rows[0]["detail"]
    # retried now: still the reason ``stuck`` (its DEL will release them)
    due = facts(attachments=[stuck_att(NOW - 1)], allocations=allocations, now=NOW)
    rows = leaks(due, plan(due, grace=30))
    assert [(r["allocation"], r["reason"]) for r in rows] == [(5, "stuck"), (6, "stuck")]
    assert rows[0]["detail"].startswith("attachment 1: ")


def test_leaks_report_allocations_of_an_attachment_whose_netns_is_gone() -> None:
    f = facts(attachments=[att(1, netns="/gone"), att(2, netns="/here")],
              allocations=[alloc(5, 1, "attached", container="c1", netns="/gone"),
                           alloc(6, 2, "attached", container="c2", netns="/here")],
              netns_exists={"/gone": False, "/here": True})
    p = plan(f, grace=30)
    assert p.release == []  # the attachment's DEL releases it
    rows = leaks(f, p)
    assert [(r["allocation"], r["address"], r["reason"]) for r in rows] == [
        (5, "10.0.0.5/24", "netns-gone")]
    assert rows[0]["detail"] == "attachment 1: netns /gone is gone"


def test_leaks_reasons_for_leftovers_and_releases() -> None:
    f = facts(attachments=[att(1, "adding"), att(2, "removing"), att(3, "adding", running=True)],
              allocations=[alloc(5, 1, "adding", container="c1"),
                           alloc(6, 2, "removing", container="c2"),
                           alloc(7, 3, "adding", container="c3"),
                           alloc(8, 10, "removed"), alloc(9, 11, None),
                           alloc(10, None, None, netns="/gone"),
                           alloc(11, None, None, netns="/gone", age=5)],
              netns_exists={"/gone": False})
    rows = leaks(f, plan(f, grace=30))
    assert [(r["allocation"], r["reason"]) for r in rows] == [
        (5, "failed-add"), (6, "unfinished-del"), (8, "attachment-removed"),
        (9, "attachment-missing"), (10, "netns-gone")]
    assert leaks(facts(), plan(facts(), grace=30)) == []
