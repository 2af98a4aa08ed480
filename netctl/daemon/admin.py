"""The daemon's second door, netctl's own calls over the socket, both ends: the frame
(:class:`AdminRequest`), one handler per call (:class:`AdminHandlers`, :func:`dispatch`),
and :func:`call`, the one client.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from netctl.cni.frame import HEADER, body_size, frame
from netctl.cni.request import Response


class AdminRequest(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="kind",
                   tag="admin"):
    """An operator's call over the socket, with what the command line gave it. Its
    ``kind`` (``admin``) is its tag: always in the frame."""

    call: Literal["status", "reconcile", "forget", "attach", "detach"] = "status"
    dry_run: bool = False
    container: str = ""
    ifname: str = ""
    network: str = ""
    force: bool = False
    who: str = ""
    why: str = ""
    ips: list[str] = []  # attach: the addresses asked for


Doc = dict[str, Any]
Handler = Callable[[AdminRequest], Awaitable[Doc]]


@dataclass(frozen=True)
class AdminHandlers:
    """The handler of each call, by its name (composed by :mod:`netctl.daemon.run`)."""

    status: Handler
    reconcile: Handler
    forget: Handler
    attach: Handler
    detach: Handler


async def dispatch(handlers: AdminHandlers, req: AdminRequest, peer: tuple[int, int]) -> Doc:
    """Serve one admin call (the frame's type allows only the calls there are handlers
    of); ``forget`` is journaled with the caller's name and the (pid, uid) ``peer``."""
    if req.call == "forget":
        pid, uid = peer
        req = msgspec.structs.replace(req, who=f"{req.who or '?'} (uid {uid}, pid {pid})")
    handler: Handler = getattr(handlers, req.call)
    return await handler(req)


def call(socket_path: str, req: AdminRequest, timeout: float = 5.0) -> Doc:
    """Send ``req`` to the daemon on ``socket_path``; its document (a refusal: the CNI
    error document). ``OSError`` when it cannot be reached, ``ValueError`` for an answer
    that is not one."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(socket_path)
        sock.sendall(frame(msgspec.json.encode(req)))
        size = body_size(sock.recv(HEADER.size, socket.MSG_WAITALL))
        data = bytearray()
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                break
            data += chunk
    try:
        # the frame's Response, then its output (the document, as JSON text)
        doc = msgspec.json.decode(msgspec.json.decode(bytes(data), type=Response).output)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"the daemon's answer is not a document: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("the daemon's answer is not a document")
    return doc
