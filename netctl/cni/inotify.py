"""inotify through libc: a non-blocking fd, watches added by path, and the events read
from it. ``install-cni --auto-config`` waits on its conf dir with it, the reconciler on
the netns dirs (:mod:`netctl.reconcile.watch`)."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Iterator

IN_MODIFY = 0x2
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_MASK_ADD = 0x20000000

_libc = ctypes.CDLL(None, use_errno=True)
_EVENT = struct.Struct("=iIII")  # wd, mask, cookie, len; then the name


def _failed(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def init() -> int:
    """A new inotify fd, non-blocking and close-on-exec."""
    fd = int(_libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        raise _failed("inotify_init1")
    return fd


def add_watch(fd: int, path: str, mask: int) -> int | None:
    """Watch ``path`` for ``mask``: the watch descriptor, or None when ``path`` is not
    there (or not a dir, with ``IN_ONLYDIR``)."""
    wd = int(_libc.inotify_add_watch(fd, os.fsencode(path), mask))
    if wd < 0:
        err = ctypes.get_errno()
        if err in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")
    return wd


def rm_watch(fd: int, wd: int) -> None:
    """Remove a watch (its ``IN_IGNORED`` event follows)."""
    _libc.inotify_rm_watch(fd, wd)


def events(buf: bytes) -> Iterator[tuple[int, int, str]]:
    """(watch descriptor, mask, name) of each ``struct inotify_event`` in ``buf``."""
    offset = 0
    while offset + _EVENT.size <= len(buf):
        wd, mask, _, length = _EVENT.unpack_from(buf, offset)
        start = offset + _EVENT.size
        name = buf[start:start + length].split(b"\0", 1)[0].decode(errors="surrogateescape")
        yield wd, mask, name
        offset = start + length
