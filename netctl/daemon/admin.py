"""The daemon's second door: netctl's own calls over the socket (``netctl status``,
``reconcile``, ``forget``, ``attach``, ``detach``), both ends.

- :class:`AdminRequest`, the frame (``kind: admin``), beside the runtime's CNI requests on
  the same socket (:mod:`netctl.daemon.server` tells them apart, :func:`classify`);
- :data:`CALLS`, the verb table — each call and the handler that serves it, shaped like the
  engine's (:mod:`netctl.engine.verbs`) — and :func:`dispatch`;
- :func:`call`, the one client: the commands and the kit send an :class:`AdminRequest` and
  get the daemon's document back, decoded once; a refusal comes back as the CNI error
  document it is (``code``, ``msg``).
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from netctl.cni.frame import HEADER, body_size, frame
from netctl.cni.request import Response


class AdminRequest(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="kind",
                   tag="admin"):
    """An operator's call over the socket: ``status``, ``reconcile``, ``forget`` (a
    container's live attachments ended by hand: ``container`` a unique id prefix,
    ``ifname``/``network`` narrowing them, ``force`` past a netns that still exists,
    ``who`` and ``why`` for the journal), ``attach`` (``network`` plugged into the running
    ``container``, on ``ifname`` if given, with ``ips``) or ``detach`` (by ``ifname`` or
    ``network``). Its ``kind`` (``admin``) is its tag: always in the frame."""

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


@dataclass(frozen=True)
class AdminHandlers:
    """What the daemon serves admin calls with (composed by :mod:`netctl.daemon.run`)."""

    status: Callable[[], Awaitable[Doc]]
    reconcile: Callable[[bool], Awaitable[Doc]]  # dry_run → report
    forget: Callable[[AdminRequest], Awaitable[Doc]]  # netctl forget → report
    attach: Callable[[AdminRequest], Awaitable[Doc]]  # netctl attach → what
    detach: Callable[[AdminRequest], Awaitable[Doc]]  # netctl detach → what


Peer = tuple[int, int]  # the caller's (pid, uid), as the kernel gives them
Call = Callable[[AdminHandlers, AdminRequest, Peer], Awaitable[Doc]]


def _forget(h: AdminHandlers, req: AdminRequest, peer: Peer) -> Awaitable[Doc]:
    """``forget`` is journaled with the caller's name and its uid and pid."""
    pid, uid = peer
    return h.forget(msgspec.structs.replace(req, who=f"{req.who or '?'} (uid {uid}, pid {pid})"))


CALLS: Mapping[str, Call] = {
    "status": lambda h, req, peer: h.status(),
    "reconcile": lambda h, req, peer: h.reconcile(req.dry_run),
    "forget": _forget,
    "attach": lambda h, req, peer: h.attach(req),
    "detach": lambda h, req, peer: h.detach(req),
}


async def dispatch(handlers: AdminHandlers, req: AdminRequest, peer: Peer) -> Doc:
    """Serve one admin call (its ``call`` is one of :data:`CALLS`: the frame's type says so)."""
    return await CALLS[req.call](handlers, req, peer)


def call(socket_path: str, req: AdminRequest, timeout: float = 5.0) -> Doc:
    """Send ``req`` to the daemon on ``socket_path`` and return its document (a refusal:
    the CNI error document, ``code`` and ``msg``). ``OSError`` when it cannot be reached,
    ``ValueError`` for an answer that is not one."""
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
