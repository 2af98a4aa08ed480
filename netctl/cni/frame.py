"""The socket's frame, both ways: a 4-byte big-endian length, then that many bytes (the
JSON of a message of :mod:`netctl.cni.request`). Pure, so that the one way of writing it
serves both ends in Python: the daemon's server (reading from a trio stream) and the admin
commands (``netctl status``, ``reconcile``, ``forget``: a blocking socket). The thin
plugin's side, in C, is ``plugin/frame.c`` and ``plugin/main.c``."""

from __future__ import annotations

import struct

HEADER = struct.Struct(">I")  # HEADER.size bytes in front of every body


def frame(body: bytes) -> bytes:
    """``body`` with its length in front, ready to send."""
    return HEADER.pack(len(body)) + body


def body_size(header: bytes) -> int:
    """The length of the body a header announces; :class:`struct.error` when ``header``
    is not :data:`HEADER`'s size (a connection cut short)."""
    (size,) = HEADER.unpack(header)
    return int(size)
