"""The two route-netlink calls the reconciler makes on every sweep, without pyroute2: the
host's links (name, kind, MAC) and deleting one by name.

pyroute2 costs a daemon some 5.5 MiB of resident memory (its message classes, and the
asyncio machinery of its sockets) for these two calls; the kernel's answers to them are
a handful of fixed structures (``struct nlmsghdr``, ``struct ifinfomsg``, ``struct
rtattr``), read here with :mod:`struct`. pyroute2 stays for the rare call that needs more
(:mod:`netctl.cni.routes`: a pod's default routes), loaded then.

Synchronous on purpose, like the rest of the reconciler's facts: the daemon runs these
in a worker thread.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_DELNSID = 89
RTNLGRP_LINK, RTNLGRP_NSID = 1, 28
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
IFLA_ADDRESS, IFLA_IFNAME, IFLA_LINKINFO, IFLA_INFO_KIND = 1, 3, 18, 1

_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_RTATTR = struct.Struct("=HH")  # length, type
_NLMSGERR = struct.Struct("=i")  # the error (negative errno; 0: the ack)
RECEIVE = 1 << 16


class NetlinkError(OSError):
    """The kernel refused a request: ``errno`` its code."""


@dataclass(frozen=True)
class LinkInfo:
    name: str
    kind: str  # IFLA_INFO_KIND ("veth", "bridge", …), "" for a link without one
    mac: str  # lower case, "" without one


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attr(kind: int, value: bytes) -> bytes:
    head = _RTATTR.pack(_RTATTR.size + len(value), kind)
    return (head + value).ljust(_align(len(head) + len(value)), b"\0")


def attributes(data: bytes, offset: int = 0,
               end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """The ``struct rtattr`` in ``data[offset:end]``: (type without its flags, value)."""
    end = len(data) if end is None else end
    while offset + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > end:
            return  # malformed: stop, as the kernel's own parser would
        yield kind & 0x3FFF, data[offset + _RTATTR.size:offset + length]
        offset += _align(length)


def _text(value: bytes) -> str:
    return value.split(b"\0", 1)[0].decode(errors="replace")


def link_name(payload: bytes) -> str:
    """IFLA_IFNAME of one ``RTM_*LINK`` message's payload ("" without one): the first
    attribute of its kind, read without the others."""
    for atype, value in attributes(payload, _IFINFOMSG.size):
        if atype == IFLA_IFNAME:
            return _text(value)
    return ""


def parse_link(payload: bytes) -> LinkInfo:
    """One ``RTM_NEWLINK`` message's payload (after its ``nlmsghdr``)."""
    name = kind = mac = ""
    for atype, value in attributes(payload, _IFINFOMSG.size):
        if atype == IFLA_IFNAME:
            name = _text(value)
        elif atype == IFLA_ADDRESS:
            mac = ":".join(f"{b:02x}" for b in value)
        elif atype == IFLA_LINKINFO:
            for itype, ivalue in attributes(value):
                if itype == IFLA_INFO_KIND:
                    kind = _text(ivalue)
    return LinkInfo(name, kind, mac)


def messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """The netlink messages in one read: (type, sequence, payload)."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, mtype, _flags, seq, _port = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            return
        yield mtype, seq, data[offset + _NLMSGHDR.size:offset + length]
        offset += _align(length)


def _request(mtype: int, flags: int, seq: int, payload: bytes) -> bytes:
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), mtype, flags | NLM_F_REQUEST,
                          seq, 0) + payload


def _error_of(payload: bytes) -> int:
    return -_NLMSGERR.unpack_from(payload)[0] if len(payload) >= _NLMSGERR.size else errno.EIO


class _Socket:
    """One route-netlink socket in the calling thread's netns, for one call."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_ROUTE)
        self.seq = 0

    def __enter__(self) -> _Socket:
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    def send(self, mtype: int, flags: int, payload: bytes) -> int:
        self.seq += 1
        self.sock.sendto(_request(mtype, flags, self.seq, payload), (0, 0))
        return self.seq

    def replies(self, seq: int) -> Iterator[tuple[int, bytes]]:
        """The answers to request ``seq`` until its end (NLMSG_DONE, or an error/ack):
        (type, payload); :class:`NetlinkError` for a refusal."""
        while True:
            data = self.sock.recv(RECEIVE)
            for mtype, mseq, payload in messages(data):
                if mseq != seq:
                    continue  # an answer to nothing we asked now
                if mtype == NLMSG_DONE:
                    return
                if mtype == NLMSG_ERROR:
                    code = _error_of(payload)
                    if code:
                        raise NetlinkError(code, os.strerror(code))
                    return  # the ack
                yield mtype, payload


def links() -> list[LinkInfo]:
    """Every link of the calling thread's netns."""
    with _Socket() as s:
        seq = s.send(RTM_GETLINK, NLM_F_DUMP, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        return [parse_link(p) for t, p in s.replies(seq) if t == RTM_NEWLINK]


def delete_link(name: str) -> bool:
    """Delete the link ``name`` of the calling thread's netns; False when there is none
    (any other refusal: :class:`NetlinkError`)."""
    payload = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + _attr(
        IFLA_IFNAME, name.encode() + b"\0")
    with _Socket() as s:
        seq = s.send(RTM_DELLINK, NLM_F_ACK, payload)
        try:
            for _ in s.replies(seq):
                pass
        except NetlinkError as exc:
            if exc.errno == errno.ENODEV:
                return False
            raise
    return True
