"""We test these aspects of the reconcile on kernel events, without a daemon:

- netlink datagrams → hints: the name of each ``RTM_DELLINK``, a recheck for an
  ``RTM_DELNSID``, every other message (a bridge port's ``RTM_DELLINK``, a truncated
  one) skipped;
- ``struct inotify_event`` records, one after another, names padded with NULs;
- which containers hints concern, from the journal's index of what is live (a deleted
  host link named in an attachment's result, a deleted netns path, a recheck: every
  netns that is gone; plain-plugin allocations too), which netns paths that needs a
  look at, and that what a DEL under way removes concerns nobody; the index follows
  results, DELs and removals; the reconciler's one plan then decides;
- the netns-dir watches on a real inotify fd: spellings of one dir share a watch and a
  deletion is reported under each; a dir that does not exist yet is waited for and
  watched once it appears; a watched dir that goes away asks for a recheck and is
  waited for again;
- the watcher's batches: what comes within a batch's window joins it, read when the
  window closes; events that tell nothing open no batch.
"""

from __future__ import annotations

import os
import select
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
from pyroute2.netlink.rtnl import RTM_DELLINK, RTM_DELNSID, RTM_NEWLINK

from netctl.cni.inotify import IN_DELETE, IN_Q_OVERFLOW
from netctl.cni.inotify import events as inotify_events
from netctl.journal.live import LiveIndex
from netctl.reconcile import watch
from netctl.reconcile.events import (
    AF_BRIDGE,
    Hints,
    concerned,
    netlink_hints,
    netns_to_check,
)
from netctl.reconcile.leaks import Later
from netctl.reconcile.plan import AttachmentFact, Facts, plan
from netctl.reconcile.watch import EventWatcher, NetnsDirs


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


def veth_result(veth: str, netns: str) -> dict[str, Any]:
    return {"interfaces": [{"name": veth, "mac": "aa:bb:cc:dd:ee:0f"},
                           {"name": "eth0", "sandbox": netns}]}


def index() -> LiveIndex:
    """Four pods' attachments, and three allocations: two of attachments, a plain
    plugin's one."""
    live = LiveIndex()
    live.attachment(1, "bridged", "/run/netns/a", veth_result("veth1111", "/run/netns/a"))
    live.attachment(2, "macvlan", "/run/netns/b")
    live.attachment(3, "proc", "/proc/42/ns/net")
    live.attachment(4, "alive", "/run/netns/d", veth_result("veth4444", "/run/netns/d"))
    live.allocated(("s", "10.0.0.1"), "bridged", "/run/netns/a", 1)
    live.allocated(("s", "10.0.0.5"), "plain", "/run/netns/e", None)
    live.allocated(("s", "10.0.0.4"), "alive", "/run/netns/d", 4)
    return live


EXISTS = {"/run/netns/a": False, "/run/netns/b": False, "/proc/42/ns/net": False,
          "/run/netns/d": True, "/run/netns/e": False}


def which(hints: Hints, live: LiveIndex | None = None) -> frozenset[str]:
    """concerned(), with the netns paths it asks about answered from EXISTS."""
    live = live or index()
    return concerned(live, hints, {p: EXISTS[p] for p in netns_to_check(live, hints)})


def test_which_containers_hints_concern() -> None:
    assert which(Hints(links={"veth1111", "eth9"})) == {"bridged"}
    assert which(Hints(netns={"/run/netns/b", "/var/run/netns/b"})) == {"macvlan"}
    assert which(Hints(netns={"/run/netns/e"})) == {"plain"}  # plain-plugin
    # a spelling the watcher does not know: the same name, and no longer a netns
    assert which(Hints(netns={"/srv/ns/b", "/srv/ns/d"})) == {"macvlan"}
    assert which(Hints(recheck=True)) == {"bridged", "macvlan", "proc", "plain"}
    assert which(Hints(containers={"alive"})) == {"alive"}
    assert which(Hints(links={"veth9999"}, netns={"/run/netns/z"})) == set()
    assert which(Hints(links={"veth1111", "veth4444"})) == {"bridged", "alive"}


def test_which_netns_paths_need_a_look() -> None:
    live = index()
    assert netns_to_check(live, Hints(links={"veth1111"})) == set()  # nothing: no I/O
    assert netns_to_check(live, Hints(netns={"/run/netns/b", "/var/run/netns/b"})) == set()
    assert netns_to_check(live, Hints(netns={"/srv/ns/b", "/srv/ns/d"})) == {
        "/run/netns/b", "/run/netns/d"}
    assert netns_to_check(live, Hints(recheck=True)) == set(EXISTS)


def test_what_a_del_under_way_removes_concerns_nobody() -> None:
    """The runtime's DEL deletes the pod's host veth, and its netns goes right after."""
    live = index()
    live.leaving([1])
    assert which(Hints(links={"veth1111"}), live) == set()
    assert which(Hints(netns={"/run/netns/a"}), live) == set()  # nor the allocation it frees
    assert which(Hints(recheck=True), live) == {"macvlan", "proc", "plain"}
    live.leaving([1], leaving=False)  # that DEL failed: the attachment stays
    assert which(Hints(links={"veth1111"}), live) == {"bridged"}
    live.removed([1])  # …or it went: the link names nobody, the allocation still held does
    assert which(Hints(links={"veth1111"}), live) == set()
    assert which(Hints(netns={"/run/netns/a"}), live) == {"bridged"}
    live.released([("s", "10.0.0.1")])
    assert which(Hints(netns={"/run/netns/a"}), live) == set()
    assert "/run/netns/a" not in live.netns_paths() and live.named("a") == set()


def test_the_index_follows_results_and_removals() -> None:
    live = index()
    live.result(2, veth_result("veth2222", "/run/netns/b"))  # a later step's result
    assert which(Hints(links={"veth2222"}), live) == {"macvlan"}
    live.result(2, None)
    assert which(Hints(links={"veth2222"}), live) == set()
    live.removed([4])
    live.released([("s", "10.0.0.4")])
    assert "/run/netns/d" not in live.netns_paths()
    live.result(4, veth_result("veth4444", "/run/netns/d"))  # removed: not brought back
    assert which(Hints(links={"veth4444"}), live) == set()


def test_the_plan_decides_on_the_facts() -> None:
    """A hint only says where to look: the veth of a pod whose netns still exists was
    deleted by someone else; the plan leaves that pod be."""
    result = veth_result("veth1111", "/run/netns/a")
    facts = Facts(
        attachments=[AttachmentFact(1, "bridged", "default/n", "eth0", "/run/netns/a",
                                    "attached", False, result),
                     AttachmentFact(4, "alive", "default/n", "eth0", "/run/netns/d",
                                    "attached", False, result)],
        removed_results=[], allocations=[],
        netns_exists={"/run/netns/a": False, "/run/netns/d": True}, host_links={},
        now=1_800_000_000.0)
    todo = plan(facts, grace=30)
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


# -- the watcher's batches, on a real inotify fd ------------------------------------------------


class Recorder:
    """Stands in for the reconciler: records the netns paths of each batch."""

    def __init__(self) -> None:
        self.batches: list[set[str]] = []
        self.ran = trio.Event()

    async def run_for(self, hints: Hints) -> tuple[dict[str, Any], Later]:
        if hints.netns:
            self.batches.append(set(hints.netns))
            self.ran.set()
        return {"plan": {"attachments": [], "allocations": []}}, Later()


def test_what_comes_during_a_window_is_read_with_its_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first event wakes the watcher; what follows within the window waits in the
    kernel's queue and joins the same batch. Events that tell nothing (a dir appearing)
    open no batch and hold nothing up. Only the netns dir is watched here: the host's
    links come and go with whatever else runs on it."""
    def no_netlink() -> socket.socket:
        raise OSError("not in this test")

    monkeypatch.setattr(watch, "open_netlink", no_netlink)
    later = tmp_path / "run" / "netns"
    recorder = Recorder()
    watcher = EventWatcher(recorder, [str(later)], window=0.2)  # type: ignore[arg-type]

    async def next_batch() -> set[str]:
        with trio.fail_after(10):
            await recorder.ran.wait()
        recorder.ran = trio.Event()
        return recorder.batches[-1]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(watcher.run)
            later.parent.mkdir()
            later.mkdir()
            for name in ("a", "b", "c", "d"):
                (later / name).touch()
            await trio.sleep(0.1)  # the watch moved into the new dir: no batch for that
            assert recorder.batches == []
            for name in ("a", "b", "c"):
                (later / name).unlink()
                await trio.sleep(0.02)
            assert await next_batch() == {f"{later}/{n}" for n in "abc"}
            (later / "d").unlink()
            assert await next_batch() == {f"{later}/d"}
            assert watcher.counts["netns_deleted"] == 4
            assert watcher.sources == [f"inotify:{later}"]
            watcher.stop()

    trio.run(main)
