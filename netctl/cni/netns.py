"""Is this path a network namespace? Decided without side effects on other files.

A ``CNI_NETNS`` that exists but is something else (a regular file, a directory, a device,
the UTS namespace) must be refused before anything is journaled or run. An nsfs file stats
as an empty regular file, so anything else is ``"not-netns"`` without being opened (opening
a FIFO or a device can block or act); the rest is opened non-blocking, checked again with
``fstat`` (the path may have been swapped), and asked its namespace type
(``NS_GET_NSTYPE``): only ``CLONE_NEWNET`` is ``"ok"``. Any ``OSError`` on the way is
``"not-netns"``, except ``ENOENT``/``ENOTDIR`` at the ``stat``: ``"missing"``.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import socket
import stat
import threading
from collections.abc import Callable
from typing import Literal, TypeVar

NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3), linux/nsfs.h
CLONE_NEWNET = 0x40000000

T = TypeVar("T")
NetnsState = Literal["ok", "missing", "not-netns"]

_MISSING_ERRNOS = (errno.ENOENT, errno.ENOTDIR)


def netns_state(path: str) -> NetnsState:
    """``"ok"`` for a network namespace file, ``"missing"`` when nothing is at
    ``path``, ``"not-netns"`` for anything else (see the module docstring)."""
    if not path:
        return "missing"
    try:
        st = os.stat(path)
    except ValueError:  # an embedded NUL byte
        return "missing"
    except OSError as exc:
        return "missing" if exc.errno in _MISSING_ERRNOS else "not-netns"
    if not stat.S_ISREG(st.st_mode) or st.st_size != 0:
        return "not-netns"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "not-netns"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not-netns"
        nstype = fcntl.ioctl(fd, NS_GET_NSTYPE)
    except OSError:
        return "not-netns"
    finally:
        os.close(fd)
    return "ok" if nstype == CLONE_NEWNET else "not-netns"


def is_netns(path: str) -> bool:
    """True only when ``path`` is a network namespace file."""
    return netns_state(path) == "ok"


def in_netns(path: str, fn: Callable[[], T]) -> T:
    """``fn()`` run inside the network namespace at ``path`` by a thread of its own that
    enters it first and ends after: no other code ever runs in that namespace (a pool's
    thread would carry it to its next job), and nothing forks. Blocks until done; its
    ``OSError`` when the namespace cannot be entered."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc().setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"cannot enter netns {path}: {os.strerror(err)}")
            finally:
                os.close(fd)
            out.append(fn())
        except BaseException as exc:  # handed to the caller
            failed.append(exc)
    thread = threading.Thread(target=run, name="netns", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def link_names(path: str) -> set[str]:
    """The names of the links inside the network namespace at ``path`` (read by a thread
    that enters it, :func:`in_netns`)."""
    return in_netns(path, lambda: {name for _, name in socket.if_nameindex()})
