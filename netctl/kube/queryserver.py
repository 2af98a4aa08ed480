"""The daemon's read-only query endpoint (``--query-addr HOST:PORT``, Kubernetes mode): what
``kubectl netctl`` asks each node, over HTTP(S), under the cluster's RBAC.

GET only; :data:`PATHS` are ``netctl journal`` (its filters as query parameters, times as
UNIX seconds), ``netctl ipam pools|leaks`` and ``netctl status``, each answered
``{"node": NAME, "answer": {…}}`` by the local commands' own code
(:mod:`netctl.reconcile.readonly`), an error as ``{"node": NAME, "error": "…"}``. Every
request's bearer token is checked first (:class:`~netctl.kubeapi.review.Reviews`: 401,
403, 503). Nothing served writes: the journal is opened read-only. Without
``query-tls-cert``/``query-tls-key`` the token crosses the network in clear: loopback or a
trusted network only. Routing (:func:`route`) is pure.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from netctl.errors import describe
from netctl.httpserver import HttpServer, Request, Response
from netctl.journal.query import Filters
from netctl.reconcile import readonly

if TYPE_CHECKING:  # the client is imported in Kubernetes mode only
    from netctl.kubeapi.review import Verdict

log = logging.getLogger("netctl.query")

PATHS = {"journal": "/v1/journal", "pools": "/v1/ipam/pools", "leaks": "/v1/ipam/leaks",
         "status": "/v1/status"}  # what is asked → its path
_ASKED = {path: what for what, path in PATHS.items()}


@dataclass(frozen=True)
class Ask:
    """What a request asks: one of :data:`PATHS` and its parameters, checked."""

    what: str  # a key of PATHS
    filters: Filters | None = None
    grace: float = 0.0


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


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
    what = _ASKED.get(req.path)
    if what is None:
        raise Refused(404, f"no {req.path}: one of {', '.join(PATHS.values())}")
    if req.method not in ("GET", "HEAD"):
        raise Refused(405, "read-only: GET only")
    q = req.query
    if what == "leaks":
        return Ask("leaks", grace=_number(q, "grace") or 0.0)
    if what != "journal":
        return Ask(what)
    limit = _number(q, "limit")
    return Ask("journal", Filters(
        pod=q.get("pod") or None, container=q.get("container") or None,
        ip=q.get("ip") or None, at=_number(q, "at"), since=_number(q, "since"),
        network=q.get("network") or None, device=q.get("device") or None,
        running=q.get("running") in ("1", "true"),
        limit=int(limit) if limit is not None else Filters.limit))


def answer(status: int, doc: dict[str, Any]) -> Response:
    """The HTTP answer carrying ``doc`` as JSON. Pure."""
    return Response(status, json.dumps(doc).encode(), "application/json")


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


@dataclass
class QueryServer:
    """``GET /v1/…`` (:meth:`respond`), served on ``addr`` by :attr:`http` until
    :meth:`stop`."""

    addr: str
    node: str
    state_dir: str
    check: Callable[[str], Awaitable[Verdict]]  # bearer token → verdict (Reviews.check)
    status: Callable[[], Awaitable[dict[str, Any]]]
    tls: ssl.SSLContext | None = None
    timeout: float = 30.0
    served: int = 0
    refused: int = 0
    http: HttpServer = field(init=False)

    def __post_init__(self) -> None:
        self.http = HttpServer(self.addr, "query-addr", self.respond, self.tls, self.timeout,
                               name="query endpoint", path="/v1/", logger=log)

    @property
    def port(self) -> int:
        return self.http.port

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        await self.http.serve(task_status=task_status)

    def stop(self) -> None:
        self.http.stop()

    async def respond(self, req: Request) -> Response:
        try:
            ask = route(req)
            verdict = await self.check(bearer(req.authorization))
            if verdict.status != 200:
                raise Refused(verdict.status, verdict.reason)
            doc = await self._ask(ask)
            self.served += 1
            log.debug("query %s for %s", req.path, verdict.user)
            return answer(200, {"node": self.node, "answer": doc})
        except Refused as exc:
            self.refused += 1
            return answer(exc.status, {"node": self.node, "error": exc.message})
        except (ValueError, FileNotFoundError) as exc:  # a bad address, no journal yet
            return answer(400, {"node": self.node, "error": str(exc)})
        except Exception as exc:  # a bug: answered, logged, the endpoint goes on
            log.exception("query %s failed", req.path)
            return answer(500, {"node": self.node,
                                "error": f"netctl internal error: {describe(exc)}"})

    async def _ask(self, ask: Ask) -> dict[str, Any]:
        if ask.what == "status":
            return await self.status()
        if ask.what == "pools":
            return await trio.to_thread.run_sync(readonly.pools, self.state_dir)
        if ask.what == "leaks":
            return await trio.to_thread.run_sync(readonly.leaks, self.state_dir, ask.grace)
        assert ask.filters is not None
        return await trio.to_thread.run_sync(readonly.journal, self.state_dir, ask.filters)
