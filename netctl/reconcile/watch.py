"""Reconcile on kernel events (docs/operating.md, "On kernel events"), from two
non-blocking fds waited on with ``trio.lowlevel.wait_readable``: a plain ``AF_NETLINK``
route socket (pyroute2's run an asyncio loop and decode slowly) with a BPF filter that
keeps only the deletions, and inotify on the netns dirs through libc (a dir not there yet
is watched for through its nearest existing parent). :class:`EventWatcher` gathers hints
for :data:`WINDOW` after the first, then hands the batch to
:meth:`~netctl.reconcile.leaks.Reconciler.run_for`; a container with a request in flight
is looked at again :data:`RETRY` seconds later.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import socket
import sqlite3
import struct
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import trio

from netctl.cni import inotify
from netctl.cni.rtnl import (
    NETLINK_ADD_MEMBERSHIP,
    NETLINK_ROUTE,
    RTM_DELLINK,
    RTM_DELNSID,
    RTNLGRP_LINK,
    RTNLGRP_NSID,
    SOL_NETLINK,
)
from netctl.errors import CNIError
from netctl.reconcile.events import AF_BRIDGE, Hints, netlink_hints
from netctl.reconcile.leaks import Reconciler

log = logging.getLogger("netctl.reconcile")

WINDOW = 0.1  # seconds a batch gathers events after its first one
RETRY = 1.0  # seconds before a container left alone (request in flight) is looked at again
RCVBUF = 4 << 20  # the netlink socket's receive buffer
READ_BURST = 256  # reads before yielding to the other tasks
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
DIR_MASK = (inotify.IN_DELETE | inotify.IN_MOVED_FROM | inotify.IN_DELETE_SELF
            | inotify.IN_MOVE_SELF | inotify.IN_ONLYDIR | inotify.IN_MASK_ADD)
PARENT_MASK = inotify.IN_CREATE | inotify.IN_MOVED_TO | inotify.IN_ONLYDIR | inotify.IN_MASK_ADD


SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
_BPF_LDH_ABS, _BPF_LDB_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x28, 0x30, 0x15, 0x06
_BPF_INSN = struct.Struct("=HBBI")  # struct sock_filter: code, jt, jf, k


def _big_endian_type(kind: int) -> int:
    """``nlmsg_type`` as a BPF half-word load sees it (network byte order)."""
    return int.from_bytes(struct.pack("=H", kind), "big")


def deletions_only() -> bytes:
    """A classic BPF program that keeps ``RTM_DELNSID`` and ``RTM_DELLINK`` but a bridge
    port's, and drops the rest (``nlmsg_type`` at offset 4, ``ifi_family`` at 16)."""
    return b"".join(_BPF_INSN.pack(*insn) for insn in (
        (_BPF_LDH_ABS, 0, 0, 4),
        (_BPF_JEQ_K, 4, 0, _big_endian_type(RTM_DELNSID)),  # → keep
        (_BPF_JEQ_K, 0, 2, _big_endian_type(RTM_DELLINK)),  # else → drop
        (_BPF_LDB_ABS, 0, 0, 16),
        (_BPF_JEQ_K, 0, 1, AF_BRIDGE),  # → drop, else → keep
        (_BPF_RET_K, 0, 0, 0),
        (_BPF_RET_K, 0, 0, 0xFFFFFFFF),
    ))


def _attach_filter(sock: socket.socket, program: bytes) -> None:
    """SO_ATTACH_FILTER: the kernel copies the program (``struct sock_fprog``)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", len(program) // _BPF_INSN.size, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def open_netlink() -> socket.socket:
    """A non-blocking netlink route socket, subscribed and filtered (module doc)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK
                         | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except PermissionError:  # not root: as much as rmem_max allows
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        try:
            _attach_filter(sock, deletions_only())
        except OSError as exc:  # no filter: netlink_hints skips the rest, at some cost
            log.warning("netlink events unfiltered (%s)", exc)
        sock.bind((0, 0))
        for group in (RTNLGRP_LINK, RTNLGRP_NSID):
            sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
    except BaseException:
        sock.close()
        raise
    return sock


class NetnsDirs:
    """inotify watches on the netns dirs; :meth:`hints` turns what is read from
    :attr:`fd` into the netns paths deleted (see the module docstring)."""

    def __init__(self, dirs: Sequence[str]) -> None:
        self.spellings: dict[str, tuple[str, ...]] = {}  # real path → how it is written
        for d in dirs:
            real = os.path.realpath(d)
            self.spellings[real] = tuple(dict.fromkeys(
                (*self.spellings.get(real, ()), os.path.normpath(d), real)))
        self.fd = inotify.init()
        self._dirs: dict[int, set[str]] = {}  # wd → the netns dirs (real paths) it watches
        self._parents: set[int] = set()  # wds waiting for a missing netns dir to appear
        try:
            self.arm()
        except BaseException:
            os.close(self.fd)
            raise

    @property
    def watched(self) -> list[str]:
        return sorted(d for dirs in self._dirs.values() for d in dirs)

    def arm(self) -> None:
        """Watch every netns dir that exists, and the nearest existing parent of each other."""
        watched = {d for dirs in self._dirs.values() for d in dirs}
        for real in self.spellings:
            if real in watched:
                continue
            wd = inotify.add_watch(self.fd, real, DIR_MASK)  # None: not there (now)
            if wd is not None:
                self._dirs.setdefault(wd, set()).add(real)
                continue
            parent = os.path.dirname(real)
            while parent != "/" and not os.path.isdir(parent):
                parent = os.path.dirname(parent)
            wd = inotify.add_watch(self.fd, parent, PARENT_MASK)
            if wd is not None:
                self._parents.add(wd)

    def hints(self, buf: bytes) -> Hints:
        out = Hints()
        rearm = False
        for wd, mask, name in inotify.events(buf):
            if mask & inotify.IN_Q_OVERFLOW:
                out.recheck = True
                continue
            dirs = self._dirs.get(wd, set())
            if mask & (inotify.IN_DELETE | inotify.IN_MOVED_FROM) and name:
                out.netns.update(os.path.join(spelling, name)
                                 for real in dirs for spelling in self.spellings[real])
            if dirs and mask & inotify.IN_MOVE_SELF:
                inotify.rm_watch(self.fd, wd)
            if mask & inotify.IN_IGNORED:  # the dir (or a parent) went: watch for it again
                out.recheck = out.recheck or bool(dirs)
                self._dirs.pop(wd, None)
                self._parents.discard(wd)
                rearm = True
            if wd in self._parents and mask & (inotify.IN_CREATE | inotify.IN_MOVED_TO):
                rearm = True
        if rearm:
            self.arm()
        return out

    def close(self) -> None:
        os.close(self.fd)


class EventWatcher:
    """Kernel events → batched runs of :meth:`Reconciler.run_for` (module docstring)."""

    def __init__(self, reconciler: Reconciler, netns_dirs: Sequence[str],
                 window: float = WINDOW, retry: float = RETRY) -> None:
        self.reconciler = reconciler
        self.netns_dirs = tuple(netns_dirs)
        self.window, self.retry = window, retry
        self.sources: list[str] = []
        self.counts = dict.fromkeys(("links_deleted", "netns_deleted", "nsids_deleted",
                                     "events_lost", "batches", "attachments_reconciled",
                                     "allocations_released", "deferred"), 0)
        self._pending = Hints()
        self._wakeup = trio.Event()
        self._taken = trio.Event()  # set when the batch being gathered is taken
        self._drains: dict[str, Callable[[], Awaitable[bool]]] = {}  # source → its reader
        self._scope = trio.CancelScope()

    def status(self) -> dict[str, Any]:
        """What ``netctl status`` shows: the sources and the counts so far."""
        return {"sources": list(self.sources), **self.counts}

    def note(self, hints: Hints) -> None:
        """Add ``hints`` to the next batch."""
        self._pending.merge(hints)
        self._wakeup.set()

    def stop(self) -> None:
        self._scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Subscribe, report started, then read and reconcile until :meth:`stop`; a source
        that cannot be opened is logged and left out."""
        with self._scope, contextlib.ExitStack() as opened:
            async with trio.open_nursery() as nursery:
                try:
                    sock = opened.enter_context(open_netlink())
                except OSError as exc:
                    log.warning("no netlink events (%s): the periodic reconcile is the "
                                "back-stop", exc)
                else:
                    self.sources.append("netlink")
                    nursery.start_soon(self._watch, "netlink", sock.fileno(),
                                       partial(self._read_netlink, sock))
                if self.netns_dirs:
                    try:
                        dirs = NetnsDirs(self.netns_dirs)
                    except OSError as exc:
                        log.warning("no netns-dir events (%s): the periodic reconcile is "
                                    "the back-stop", exc)
                    else:
                        opened.callback(dirs.close)
                        self.sources += [f"inotify:{d}" for d in dirs.spellings]
                        nursery.start_soon(self._watch, "inotify", dirs.fd,
                                           partial(self._read_inotify, dirs))
                log.info("reconcile on events from %s", ", ".join(self.sources) or "nothing")
                task_status.started()
                await self._batches(nursery)

    async def _watch(self, name: str, fd: int, read: Callable[[], Awaitable[bool]]) -> None:
        """Read ``fd`` when it has something, but leave what comes while a batch is gathered
        to :meth:`_batches`; ``read`` returns False when the source stopped."""
        self._drains[name] = read
        while name in self._drains:
            await trio.lowlevel.wait_readable(fd)
            if not await read():
                self._drains.pop(name, None)
            elif self._wakeup.is_set():  # a batch is being gathered (maybe by this read)
                await self._taken.wait()

    async def _read_netlink(self, sock: socket.socket) -> bool:
        """Everything queued, :data:`READ_BURST` datagrams at a time; False when it stopped."""
        while True:
            hints, more = Hints(), True
            for _ in range(READ_BURST):
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    more = False
                    break
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        log.warning("netlink events stopped (%s): the periodic reconcile is "
                                    "the back-stop", exc)
                        return False
                    self.counts["events_lost"] += 1
                    hints.recheck = True  # the kernel dropped some: look at every netns
                    continue
                got = netlink_hints(data)
                self.counts["links_deleted"] += len(got.links)
                self.counts["nsids_deleted"] += got.recheck
                hints.merge(got)
            if hints:
                self.note(hints)
            if not more:
                return True
            await trio.lowlevel.checkpoint()  # a burst: let the others run meanwhile

    async def _read_inotify(self, dirs: NetnsDirs) -> bool:
        """Everything queued on the inotify fd; False when it stopped."""
        while True:
            try:
                buf = os.read(dirs.fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError as exc:
                log.warning("netns-dir events stopped (%s): the periodic reconcile is the "
                            "back-stop", exc)
                return False
            hints = dirs.hints(buf)
            self.counts["netns_deleted"] += len({os.path.basename(p) for p in hints.netns})
            self.counts["events_lost"] += hints.recheck
            if hints:
                self.note(hints)

    async def _batches(self, nursery: trio.Nursery) -> None:
        while True:
            await self._wakeup.wait()
            await trio.sleep(self.window)  # let the burst come in
            for name, read in list(self._drains.items()):  # what came meanwhile
                if not await read():
                    self._drains.pop(name, None)
            hints, self._pending, self._wakeup = self._pending, Hints(), trio.Event()
            taken, self._taken = self._taken, trio.Event()
            taken.set()  # the sources wake the next batch
            self.counts["batches"] += 1
            log.debug("events: %s", hints.describe())
            try:
                report, later = await self.reconciler.run_for(hints)
            except (CNIError, OSError, sqlite3.Error) as exc:
                log.warning("reconcile on events failed (%s); trying again in %gs", exc,
                            self.retry)
                nursery.start_soon(self._later, hints)
                continue
            self.counts["attachments_reconciled"] += len(report["plan"]["attachments"])
            self.counts["allocations_released"] += len(report["plan"]["allocations"])
            if later.busy:
                self.counts["deferred"] += len(later.busy)
                nursery.start_soon(self._later, Hints(containers=set(later.busy)))
            if later.ripening:  # looked at again once the first is old enough
                nursery.start_soon(self._later, Hints(containers=set(later.ripening)),
                                   min(later.ripening.values()))

    async def _later(self, hints: Hints, wait: float | None = None) -> None:
        await trio.sleep(self.retry if wait is None else wait)
        self.note(hints)
