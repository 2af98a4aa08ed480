"""We test these aspects of the reconcile on kernel events, without a daemon:

- netlink datagrams → hints: the name of each ``RTM_DELLINK``, a recheck for an
  ``RTM_DELNSID``, every other message (a bridge port's ``RTM_DELLINK``, a truncated
  one) skipped;
- ``struct inotify_event`` records, one after another, names padded with NULs;
- which containers hints concern (a deleted host link named in an attachment's result,
  a deleted netns path, a recheck: every netns that is gone; plain-plugin allocations
  too) and the facts narrowed to them, which the reconciler's one plan then decides on;
- the netns-dir watches on a real inotify fd: spellings of one dir share a watch and a
  deletion is reported under each; a dir that does not exist yet is waited for and
  watched once it appears; a watched dir that goes away asks for a recheck and is
  waited for again.
"""

from __future__ import annotations

import os
import select
import struct
from pathlib import Path

import pytest
from pyroute2.netlink.rtnl import RTM_DELLINK, RTM_DELNSID, RTM_NEWLINK

from netctl.reconcile.events import (
    AF_BRIDGE,
    IN_DELETE,
    IN_Q_OVERFLOW,
    Hints,
    concerned,
    focus,
    inotify_events,
    netlink_hints,
)
from netctl.reconcile.plan import AllocationFact, AttachmentFact, Facts, plan
from netctl.reconcile.watch import NetnsDirs


def rtattr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def nlmsg(kind: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def link_msg(kind: int, name: str, family: int = 0) -> bytes:
    ifinfo = struct.pack("=BxHiII", family, 1, 7, 0, 0)
    return nlmsg(kind, ifinfo + rtattr(13, b"\x01\x00\x00\x00") + rtattr(3, name.encode() + b"\0"))


def test_netlink_deleted_links_and_nsids() -> None:
    got = netlink_hints(link_msg(RTM_NEWLINK, "veth0new") + link_msg(RTM_DELLINK, "veth1abc")
                        + link_msg(RTM_DELLINK, "veth2def"))
    assert got.links == {"veth1abc", "veth2def"} and not got.recheck
    nsid = nlmsg(RTM_DELNSID, struct.pack("=Bxxx", 0) + rtattr(1, struct.pack("=i", 4)))
    assert netlink_hints(nsid) == Hints(recheck=True)
    assert not netlink_hints(link_msg(RTM_DELLINK, "vethcut")[:-6])  # truncated: skipped
    # a bridge port leaving its bridge: the link's own deletion has its own message
    assert not netlink_hints(link_msg(RTM_DELLINK, "vethport", family=AF_BRIDGE))
    assert not netlink_hints(b"\x01\x02")


def test_inotify_records() -> None:
    def record(wd: int, mask: int, name: bytes, size: int) -> bytes:
        return struct.pack("=iIII", wd, mask, 0, size) + name.ljust(size, b"\0")

    buf = record(1, IN_DELETE, b"cni-1234", 16) + record(2, IN_Q_OVERFLOW, b"", 0) \
        + record(1, IN_DELETE, b"x", 16)
    assert list(inotify_events(buf)) == [(1, IN_DELETE, "cni-1234"), (2, IN_Q_OVERFLOW, ""),
                                         (1, IN_DELETE, "x")]


def att(i: int, container: str, netns: str, veth: str = "") -> AttachmentFact:
    result = {"interfaces": [{"name": veth, "mac": "aa:bb:cc:dd:ee:0f"},
                             {"name": "eth0", "sandbox": netns}]} if veth else None
    return AttachmentFact(i, container, "default/n", "eth0", netns, "attached", False, result)


def alloc(i: int, container: str, netns: str, attachment: int | None) -> AllocationFact:
    return AllocationFact(i, "10.0.0.0/24", f"10.0.0.{i}", container, "eth0", netns,
                          attachment, "attached" if attachment else None, age=100.0)


FACTS = Facts(
    attachments=[att(1, "bridged", "/run/netns/a", veth="veth1111"),
                 att(2, "macvlan", "/run/netns/b"),
                 att(3, "proc", "/proc/42/ns/net"),
                 att(4, "alive", "/run/netns/d", veth="veth4444")],
    removed_results=[(9, None)],
    allocations=[alloc(1, "bridged", "/run/netns/a", 1), alloc(5, "plain", "/run/netns/e", None),
                 alloc(4, "alive", "/run/netns/d", 4)],
    netns_exists={"/run/netns/a": False, "/run/netns/b": False, "/proc/42/ns/net": False,
                  "/run/netns/d": True, "/run/netns/e": False},
    host_links={}, now=1_800_000_000.0)


def test_which_containers_hints_concern() -> None:
    assert concerned(FACTS, Hints(links={"veth1111", "eth9"})) == {"bridged"}
    assert concerned(FACTS, Hints(netns={"/run/netns/b", "/var/run/netns/b"})) == {"macvlan"}
    assert concerned(FACTS, Hints(netns={"/run/netns/e"})) == {"plain"}  # plain-plugin
    # a spelling the watcher does not know: the same name, and no longer a netns
    assert concerned(FACTS, Hints(netns={"/srv/ns/b", "/srv/ns/d"})) == {"macvlan"}
    assert concerned(FACTS, Hints(recheck=True)) == {"bridged", "macvlan", "proc", "plain"}
    assert concerned(FACTS, Hints(containers={"alive"})) == {"alive"}
    assert concerned(FACTS, Hints(links={"veth9999"}, netns={"/run/netns/z"})) == set()


def test_the_plan_decides_on_the_focused_facts() -> None:
    """A hint only says where to look: the veth of a pod whose netns still exists was
    deleted by someone else; the plan leaves that pod be."""
    mine = concerned(FACTS, Hints(links={"veth1111", "veth4444"}))
    assert mine == {"bridged", "alive"}
    focused = focus(FACTS, mine)
    assert [a.container_id for a in focused.attachments] == ["bridged", "alive"]
    assert [a.container_id for a in focused.allocations] == ["bridged", "alive"]
    assert focused.removed_results == [] and focused.host_links == {}
    todo = plan(focused, grace=30)
    assert [(a, c) for a, c, _ in todo.delete] == [(1, "bridged")]
    assert todo.release == [] and todo.unlink == []


def test_hints_merge_and_say_what_they_hold() -> None:
    h = Hints(links={"a"})
    h.merge(Hints(netns={"/run/netns/x", "/var/run/netns/x"}, recheck=True))
    assert h == Hints(links={"a"}, netns={"/run/netns/x", "/var/run/netns/x"}, recheck=True)
    assert h.describe() == "1 links deleted, 1 netns deleted, an nsid deleted or events lost"
    assert not Hints()


# -- the netns-dir watches on a real inotify fd ---------------------------------------------


def read_hints(dirs: NetnsDirs, timeout: float = 5.0) -> Hints:
    """Everything the inotify fd has within ``timeout`` of its first event."""
    out = Hints()
    wait = timeout
    while select.select([dirs.fd], [], [], wait)[0]:
        out.merge(dirs.hints(os.read(dirs.fd, 1 << 16)))
        wait = 0.05
    return out


@pytest.fixture
def watched(tmp_path: Path) -> tuple[Path, Path]:
    real = tmp_path / "run" / "netns"
    real.mkdir(parents=True)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to(tmp_path / "run")
    return real, tmp_path / "var" / "run" / "netns"


def test_a_deletion_is_reported_under_each_spelling(watched: tuple[Path, Path]) -> None:
    real, alias = watched
    (real / "cni-1").touch()
    dirs = NetnsDirs([str(real), str(alias)])
    try:
        assert dirs.watched == [str(real)]
        (real / "cni-1").unlink()
        assert read_hints(dirs) == Hints(netns={f"{real}/cni-1", f"{alias}/cni-1"})
    finally:
        dirs.close()


def test_a_dir_made_later_is_watched_once_it_appears(tmp_path: Path) -> None:
    later = tmp_path / "run" / "netns"
    dirs = NetnsDirs([str(later)])
    try:
        assert dirs.watched == []
        later.parent.mkdir()  # the parent first: the watch moves down one level at a time
        later.mkdir()
        (later / "ns1").touch()
        assert not read_hints(dirs)  # creations tell nothing; the watch is set
        assert dirs.watched == [str(later)]
        (later / "ns1").unlink()
        assert read_hints(dirs) == Hints(netns={f"{later}/ns1"})
        later.rmdir()  # the dir goes: every netns in it is gone, and it is waited for again
        assert read_hints(dirs) == Hints(recheck=True)
        assert dirs.watched == []
        later.mkdir()
        read_hints(dirs)
        (later / "ns2").touch()
        (later / "ns2").unlink()
        assert read_hints(dirs).netns == {f"{later}/ns2"}
    finally:
        dirs.close()
