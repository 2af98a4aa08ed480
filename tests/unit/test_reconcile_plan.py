"""We test these aspects of the reconciler's pure planner: attachments whose netns is
gone, leftovers of failed ADDs and unfinished DELs, busy containers left alone,
allocations of removed/missing attachments and of gone plain-plugin netns (after the
grace period), and host veths of removed attachments (never bridges, never reused names)."""

from __future__ import annotations

from netctl.reconcile.plan import AllocationFact, AttachmentFact, Facts, Link, plan


def att(i: int, state: str = "attached", netns: str = "/run/netns/p", running: bool = False,
        result: dict | None = None, container: str = "") -> AttachmentFact:
    return AttachmentFact(i, container or f"c{i}", "default/n", "eth0", netns, state, running,
                          result)


def alloc(i: int, attachment: int | None, state: str | None, netns: str = "",
          age: float = 100.0) -> AllocationFact:
    return AllocationFact(i, "10.0.0.0/24", f"10.0.0.{i}", f"c{i}", "eth0", netns,
                          attachment, state, age)


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
