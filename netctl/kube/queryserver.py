"""The daemon's read-only query endpoint (``--query-addr HOST:PORT``, Kubernetes mode): what
``kubectl netctl`` asks each node, over HTTP, under the cluster's RBAC.

Served, GET only (anything else: 405), each answer one JSON document
``{"node": NAME, "answer": {…}}`` built by the same code as the local command
(:mod:`netctl.reconcile.readonly`, the admin socket's status):

- ``/v1/journal?ip=&at=&since=&pod=&container=&network=&running=&limit=`` — ``netctl
  journal`` (``pod`` a selector: ``NS/NAME``, ``NAME``, ``NS/*`` for a namespace; ``at``
  and ``since`` UNIX seconds: the caller reads the times it was given);
- ``/v1/ipam/pools`` and ``/v1/ipam/leaks?grace=`` — ``netctl ipam pools|leaks``;
- ``/v1/status`` — ``netctl status``'s document.

Every request carries ``Authorization: Bearer <token>``; :class:`~netctl.kube.client.review.Reviews`
checks it with a TokenReview and a SubjectAccessReview (401 without a valid token, 403
without the permission, 503 when the API server cannot say) before anything is read.
Errors are ``{"node": NAME, "error": "…"}`` with the status. Nothing served writes: the
journal is opened read-only, and no route reaches the engine or the reconciler.

TLS: with ``query-tls-cert`` and ``query-tls-key`` (PEM files, e.g. a Secret mounted
into the pod) the endpoint speaks HTTPS; without them plain HTTP — the bearer token then
crosses the network in clear, so do that on loopback or a trusted network only.

Request parsing and routing (:func:`parse`, :func:`route`) are pure; :class:`QueryServer`
is the trio TCP server (one request per connection, reads and writes under a deadline).
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import trio

from netctl.journal.query import Filters
from netctl.metrics import parse_addr, read_head
from netctl.reconcile import readonly

if TYPE_CHECKING:  # the client is imported in Kubernetes mode only
    from netctl.kube.client.review import Verdict

log = logging.getLogger("netctl.query")

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
           503: "Service Unavailable"}
PATHS = ("/v1/journal", "/v1/ipam/pools", "/v1/ipam/leaks", "/v1/status")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    authorization: str


@dataclass(frozen=True)
class Ask:
    """What a request asks: one of :data:`PATHS` and its parameters, checked."""

    what: str  # journal, pools, leaks, status
    filters: Filters | None = None
    grace: float = 0.0


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def parse(head: bytes) -> Request:
    """An HTTP/1.x request head (up to the blank line) → :class:`Request`. Pure."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) < 2:
        raise Refused(400, "not an HTTP request")
    url = urlsplit(parts[1])
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    auth = ""
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == "authorization":
            auth = value.strip()
    return Request(parts[0], url.path, query, auth)


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer …`` header; "" without one."""
    scheme, _, token = (header or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _number(query: dict[str, str], name: str) -> float | None:
    if not query.get(name):
        return None
    try:
        return float(query[name])
    except ValueError:
        raise Refused(400, f"{name}: not a number: {query[name]!r}") from None


def route(req: Request) -> Ask:
    """What ``req`` asks, or :class:`Refused` (404, 405, 400). Pure."""
    if req.path not in PATHS:
        raise Refused(404, f"no {req.path}: one of {', '.join(PATHS)}")
    if req.method not in ("GET", "HEAD"):
        raise Refused(405, "read-only: GET only")
    q = req.query
    if req.path == "/v1/ipam/pools":
        return Ask("pools")
    if req.path == "/v1/ipam/leaks":
        return Ask("leaks", grace=_number(q, "grace") or 0.0)
    if req.path == "/v1/status":
        return Ask("status")
    limit = _number(q, "limit")
    return Ask("journal", Filters(
        pod=q.get("pod") or None, container=q.get("container") or None,
        ip=q.get("ip") or None, at=_number(q, "at"), since=_number(q, "since"),
        network=q.get("network") or None, device=q.get("device") or None,
        running=q.get("running") in ("1", "true"),
        limit=int(limit) if limit is not None else Filters.limit))


def answer(status: int, doc: dict[str, Any], head_only: bool = False) -> bytes:
    """The HTTP answer carrying ``doc`` as JSON. Pure."""
    body = json.dumps(doc).encode()
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + (b"" if head_only else body)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


@dataclass
class QueryServer:
    """``GET /v1/…`` on ``addr``, in the daemon's nursery until :meth:`stop`."""

    addr: str
    node: str
    state_dir: str
    check: Callable[[str], Awaitable[Verdict]]  # bearer token → verdict (Reviews.check)
    status: Callable[[], Awaitable[dict[str, Any]]]
    tls: ssl.SSLContext | None = None
    timeout: float = 30.0
    max_head: int = 16384
    served: int = 0
    refused: int = 0
    port: int = 0  # the bound port (addr may say 0)
    _scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        host, port = parse_addr(self.addr, "query-addr")
        tcp = await trio.open_tcp_listeners(port, host=host or None)
        self.port = tcp[0].socket.getsockname()[1]
        listeners: list[Any] = [trio.SSLListener(t, self.tls, https_compatible=True)
                                for t in tcp] if self.tls else tcp
        log.info("query endpoint (%s) on port %d", "https" if self.tls else "http", self.port)
        with self._scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, self._handle, listeners)
                task_status.started()

    def stop(self) -> None:
        self._scope.cancel()

    async def _handle(self, stream: trio.abc.Stream) -> None:
        try:
            async with stream:
                with trio.move_on_after(self.timeout):
                    head = await read_head(stream, self.max_head)
                    await stream.send_all(await self._respond(head))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError) as exc:
            log.debug("query connection dropped: %s", exc)

    async def _respond(self, head: bytes) -> bytes:
        req: Request | None = None
        try:
            req = parse(head)
            ask = route(req)
            verdict = await self.check(bearer(req.authorization))
            if verdict.status != 200:
                raise Refused(verdict.status, verdict.reason)
            doc = await self._ask(ask)
            self.served += 1
            log.debug("query %s for %s", req.path, verdict.user)
            return answer(200, {"node": self.node, "answer": doc}, req.method == "HEAD")
        except Refused as exc:
            self.refused += 1
            return answer(exc.status, {"node": self.node, "error": exc.message})
        except (ValueError, FileNotFoundError) as exc:  # a bad address, no journal yet
            return answer(400, {"node": self.node, "error": str(exc)})
        except Exception as exc:  # a bug: answered, logged, the endpoint goes on
            log.exception("query %s failed", req.path if req else "?")
            return answer(500, {"node": self.node, "error": f"netctl internal error: {exc!r}"})

    async def _ask(self, ask: Ask) -> dict[str, Any]:
        if ask.what == "status":
            return await self.status()
        if ask.what == "pools":
            return await trio.to_thread.run_sync(readonly.pools, self.state_dir)
        if ask.what == "leaks":
            return await trio.to_thread.run_sync(readonly.leaks, self.state_dir, ask.grace)
        assert ask.filters is not None
        return await trio.to_thread.run_sync(readonly.journal, self.state_dir, ask.filters)
