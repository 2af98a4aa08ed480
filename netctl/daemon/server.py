"""The Unix socket server: framing (:mod:`netctl.cni.frame`), peer credentials (the uid
must be in ``allowed_uids``), a CNI request or admin call per connection
(:func:`classify`), the size limit (a CNI DEL is never refused for its size:
docs/configuration.md), graceful drain. Nothing a client sends can stop the server.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from netctl import logs
from netctl.cni.frame import HEADER, body_size, frame
from netctl.cni.request import (
    DEL_CEILING,
    PROTO,
    Envelope,
    Invocation,
    Request,
    Response,
    decode,
    protocol_refusal,
)
from netctl.cni.versions import LATEST
from netctl.daemon.admin import AdminHandlers, AdminRequest, dispatch
from netctl.engine.verbs import Reply
from netctl.errors import (
    CANCELLED,
    DECODE_FAILURE,
    IO_FAILURE,
    PERMISSION_DENIED,
    REQUEST_TOO_LARGE,
    CNIError,
    describe,
    first_error,
)
from netctl.journal.commit import JournalUnwritable
from netctl.reconcile.pending import keep, pending_dir

log = logging.getLogger("netctl.server")


@dataclass
class ServerConfig:
    socket_path: str
    allowed_uids: tuple[int, ...] = (0,)
    max_request_bytes: int = 4 << 20  # every pod the API accepts fits (see docs/configuration.md)
    read_timeout: float = 10.0
    drain_timeout: float = 30.0


@dataclass(frozen=True)
class Handlers:
    """What the server hands requests to (composed by the daemon)."""

    cni: Callable[[Invocation], Awaitable[Reply]]  # netctl-cni
    ipam: Callable[[Invocation], Awaitable[Reply]]  # netctl-ipam
    admin: AdminHandlers  # netctl status, reconcile, forget, attach, detach (admin.py)
    in_flight: Callable[[], int]
    served: Callable[[str, int, float], None]  # a CNI request answered: verb, code, seconds


async def _read_until(stream: trio.SocketStream, buf: bytearray, n: int) -> None:
    """Read into ``buf`` until it holds ``n`` bytes."""
    while len(buf) < n:
        chunk = await stream.receive_some(max(65536, n - len(buf)))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk


def readable(size: int, limit: int) -> bool:
    """Whether to read a frame of ``size`` bytes at all: one over max-request-bytes
    (``limit``) may still be a DEL, up to :data:`DEL_CEILING`; above both, 105 unread."""
    return size <= max(limit, DEL_CEILING)


def admitted(size: int, limit: int, command: str) -> bool:
    """Whether a frame read whole is served: anything up to ``limit``; over it, only a
    CNI DEL (``command`` is "" for a frame that is not a well-formed CNI request)."""
    return size <= limit or command == "DEL"


def too_large(size: int, limit: int) -> CNIError:
    return CNIError(REQUEST_TOO_LARGE, f"request of {size} bytes exceeds the daemon's limit of "
                    f"{limit} bytes; raise max-request-bytes in the daemon's config to serve it")


def classify(body: bytes, size: int, limit: int) -> Request | AdminRequest:
    """What a frame is — a CNI request or an admin call — or the CNI error it gets (pure):
    code 6 for neither, 105 over ``limit`` (:func:`admitted`), the protocol's refusal for a
    newer frame."""
    try:
        kind = msgspec.json.decode(body, type=Envelope).kind
        if kind == "admin":
            if not admitted(size, limit, ""):
                raise too_large(size, limit)
            return msgspec.json.decode(body, type=AdminRequest)
        req = msgspec.json.decode(body, type=Request)
    except (msgspec.MsgspecError, UnicodeDecodeError) as exc:
        if not admitted(size, limit, ""):
            raise too_large(size, limit) from None
        raise CNIError(DECODE_FAILURE, f"malformed request frame: {exc}") from None
    if not admitted(size, limit, req.command):
        raise too_large(size, limit)
    refusal = protocol_refusal(req)
    if refusal is not None:
        log.warning("%s %s of %s refused: %s", req.plugin[:20], req.command[:20],
                    req.container_id[:80], refusal.msg)
        raise refusal
    return req


def _refusal(err: CNIError, version: str) -> Response:
    return Response(status=1, output=msgspec.json.encode(err.to_json(version)).decode())


def _only_cancelled(exc: BaseException) -> bool:
    """A trio cancellation, possibly grouped by the nurseries it passed through."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


@dataclass
class Server:
    handlers: Handlers
    config: ServerConfig
    started_at: float = field(default_factory=time.time)
    served: int = 0
    _accept_scope: trio.CancelScope | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, tell the caller we are listening, serve until :meth:`stop`, then drain."""
        path = self.config.socket_path
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        if os.path.exists(path):  # noqa: ASYNC240 - start-up, local path
            os.unlink(path)  # a stale socket of a previous run
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            await sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(512)
        listener = trio.SocketListener(sock)
        async with trio.open_nursery() as handlers:
            with trio.CancelScope() as self._accept_scope:
                task_status.started()
                while True:
                    stream = await listener.accept()
                    handlers.start_soon(self._handle, stream)
            # Draining: no new connections; in-flight requests get drain_timeout.
            await listener.aclose()
            if os.path.exists(path):  # noqa: ASYNC240 - shutdown, local path
                os.unlink(path)
            log.info("draining %d in-flight requests (deadline %.0fs)",
                     self.handlers.in_flight(), self.config.drain_timeout)
            handlers.cancel_scope.deadline = trio.current_time() + self.config.drain_timeout

    def stop(self) -> None:
        if self._accept_scope is not None:
            self._accept_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                response = await self._respond(stream)
            except (EOFError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                log.warning("dropped a connection: %s", exc)
                return
            data = msgspec.json.encode(msgspec.structs.replace(response, proto=PROTO))
            try:
                await stream.send_all(frame(data))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.warning("client went away before its answer")

    async def _respond(self, stream: trio.SocketStream) -> Response:
        """Read one frame, classify it, serve it; every failure answered as the CNI error it
        is, in the caller's cniVersion once that is known."""
        version = LATEST
        try:
            peer = self._check_peer(stream)
            size, body = await self._read_frame(stream)
            req = classify(body, size, self.config.max_request_bytes)
            self.served += 1
            if isinstance(req, AdminRequest):
                return Response(output=msgspec.json.encode(await self._admin(req, peer)).decode())
            if size > self.config.max_request_bytes:
                log.info("serving a DEL of %d bytes, over max-request-bytes (%d): no DEL is "
                         "refused for its size", size, self.config.max_request_bytes)
            inv = decode(req)
            version = inv.caller_version
            return await self._serve(inv, body)
        except CNIError as exc:
            if exc.code >= 100 or exc.code in (IO_FAILURE,):
                log.info("request failed: %s (code %d)", exc.msg, exc.code)
            return _refusal(exc, version)
        except (EOFError, trio.BrokenResourceError, trio.TooSlowError):
            raise
        except Exception as exc:
            err = first_error(exc)
            if err is None:  # a bug: answer, log, keep serving
                log.exception("internal error")
                err = CNIError(IO_FAILURE, f"netctl internal error: {describe(exc)}")
            else:  # concurrent parts failed: the first CNI error answers for them
                log.info("request failed: %s", describe(exc))
            return _refusal(err, version)
        except BaseException as exc:
            if _only_cancelled(exc):
                # The drain deadline ran out; the engine compensated (shielded) on the way
                # out. Still tell the caller, briefly, then let the cancellation go on.
                await self._say_cancelled(stream, version)
            raise

    async def _read_frame(self, stream: trio.SocketStream) -> tuple[int, bytes]:
        """The frame's size and body, within ``read_timeout``; code 105 unread when it is
        larger than anything served."""
        limit = self.config.max_request_bytes
        with trio.fail_after(self.config.read_timeout):
            buf = bytearray()
            await _read_until(stream, buf, HEADER.size)
            size = body_size(bytes(buf[:HEADER.size]))
            if not readable(size, limit):
                raise too_large(size, limit)
            await _read_until(stream, buf, HEADER.size + size)
        return size, bytes(buf[HEADER.size:HEADER.size + size])

    async def _serve(self, inv: Invocation, frame: bytes) -> Response:
        """A CNI request to its plugin's handler, every log line of it saying whose; a DEL
        the journal's disk refused is kept (:meth:`_keep`)."""
        logs.bind(verb=inv.verb, container=inv.container_id,
                  pod=logs.pod_name(inv.pod.namespace, inv.pod.name),
                  network=inv.conf_name if inv.plugin == "netctl-ipam" else None)
        handler = self.handlers.ipam if inv.plugin == "netctl-ipam" and \
            inv.verb != "VERSION" else self.handlers.cni
        began, code = time.monotonic(), IO_FAILURE
        try:
            try:
                reply = await handler(inv)
            except Exception as exc:
                refused = first_error(exc)
                if not (isinstance(refused, JournalUnwritable) and inv.verb == "DEL"
                        and inv.plugin == "netctl-cni"):
                    raise
                reply = await self._keep(frame, refused, exc)
            code = 0
        except Exception as exc:  # a CNI error (or a group of them): its code; a bug: 5
            code = err.code if (err := first_error(exc)) else IO_FAILURE
            raise
        except trio.Cancelled:
            code = CANCELLED
            raise
        finally:
            self.handlers.served(inv.verb, code, time.monotonic() - began)
        out = msgspec.json.encode(reply.result).decode() if reply.result is not None else ""
        return Response(output=out, warning=reply.warning)

    async def _say_cancelled(self, stream: trio.SocketStream, version: str) -> None:
        err = CNIError(CANCELLED, "the netctl daemon shut down before this request finished "
                       f"(its drain-timeout of {self.config.drain_timeout:g}s ran out); what "
                       "it had done is undone, or left to the next start-up replay to finish")
        data = msgspec.json.encode(msgspec.structs.replace(_refusal(err, version), proto=PROTO))
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            try:
                await stream.send_all(frame(data))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _admin(self, req: AdminRequest, peer: tuple[int, int]) -> dict[str, Any]:
        """An admin call; ``status`` with the server's own counts."""
        doc = await dispatch(self.handlers.admin, req, peer)
        if req.call == "status":
            doc = {**doc, "served": self.served,
                   "uptime_seconds": round(time.time() - self.started_at, 3),
                   "socket": self.config.socket_path}
        return doc

    async def _keep(self, frame: bytes, refused: JournalUnwritable, exc: Exception) -> Reply:
        """A DEL the journal could not record, kept in ``pending-del/`` for the next
        reconcile round and answered 0 with a warning; no room there either: the journal's
        error."""
        directory = pending_dir(self.config.socket_path)
        try:
            path = await trio.to_thread.run_sync(keep, directory, frame)
        except OSError as err:
            log.error("a DEL could not be kept in %s either: %s", directory, err)
            raise exc from None
        log.warning("DEL kept in %s: %s", path, refused.reason)
        return Reply(None, f"{refused.reason}; the DEL is kept in {directory} and carried "
                     "out once the journal can be written")

    def _check_peer(self, stream: trio.SocketStream) -> tuple[int, int]:
        """The peer's (pid, uid); refused (code 104) unless its uid is allowed."""
        creds = stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                         struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
        if uid not in self.config.allowed_uids:
            raise CNIError(PERMISSION_DENIED, f"caller uid {uid} (pid {pid}) is not allowed on "
                           f"{self.config.socket_path}; allowed uids: "
                           f"{', '.join(map(str, self.config.allowed_uids))}")
        return pid, uid
