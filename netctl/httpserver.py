"""The daemon's one HTTP server: metrics and probes (``metrics-addr``) and the query endpoint
(``query-addr``) are each an :class:`HttpServer` with a handler.

h11 reads each request and writes its answer; trio's listeners (TLS with a context) carry
them. One request per connection, answered with ``Connection: close``: the clients are a
scraper, kubelet's probes and ``kubectl netctl``, each asking now and then. A client gets
``timeout`` seconds to send its request and read the answer; a request that is not HTTP,
or whose head is larger than ``max_head``, is answered 400 and the connection closed; the
handler's exception is answered 500 and logged, the server goes on.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import trio

from netctl.errors import describe

if TYPE_CHECKING:
    import h11

log = logging.getLogger("netctl.http")

READ_SIZE = 65536


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]  # each parameter's last value
    headers: dict[str, str]  # names in lower case

    @property
    def authorization(self) -> str:
        return self.headers.get("authorization", "")


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain"


def parse_addr(addr: str, setting: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9090`` for IPv6; an empty host: every address) → (host, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{setting} {addr!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def url_of(scheme: str, host: str, port: int, path: str = "") -> str:
    """A bound address's URL (the port the kernel chose for ``:0``)."""
    return (f"{scheme}://[{host}]:{port}{path}" if ":" in host
            else f"{scheme}://{host}:{port}{path}")


Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class HttpServer:
    """``handler``'s answers on ``addr`` (``setting`` names it in errors), served in the
    daemon's nursery until :meth:`stop`; ``name`` and ``path`` say in ``logger``'s log
    where (``metrics at http://127.0.0.1:9090/metrics``)."""

    addr: str
    setting: str
    handler: Handler
    tls: ssl.SSLContext | None = None
    timeout: float = 10.0
    max_head: int = 16384
    name: str = ""
    path: str = ""
    logger: logging.Logger = log
    served: int = 0  # requests answered
    port: int = 0  # the bound port (addr may say 0)
    _scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        host, port = parse_addr(self.addr, self.setting)
        tcp = await trio.open_tcp_listeners(port, host=host or None)
        bound = [listener.socket.getsockname()[:2] for listener in tcp]
        self.port = bound[0][1]
        listeners: list[Any] = ([trio.SSLListener(t, self.tls, https_compatible=True)
                                 for t in tcp] if self.tls else tcp)
        scheme = "https" if self.tls else "http"
        self.logger.info("%s at %s", self.name or self.setting,
                         ", ".join(url_of(scheme, h, p, self.path) for h, p in bound))
        with self._scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, self._connection, listeners)
                task_status.started()

    def stop(self) -> None:
        self._scope.cancel()

    async def _connection(self, stream: trio.abc.Stream) -> None:
        import h11  # (here, not at the top: a daemon that serves no HTTP never loads it)

        try:
            async with stream:
                with trio.move_on_after(self.timeout):
                    await self._exchange(stream, h11.Connection(
                        h11.SERVER, max_incomplete_event_size=self.max_head))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError) as exc:
            log.debug("%s: connection dropped: %s", self.setting, exc)

    async def _exchange(self, stream: trio.abc.Stream, conn: h11.Connection) -> None:
        import h11

        try:
            event = conn.next_event()
            while event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(READ_SIZE)))
                event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            await self._send(stream, conn, Response(400, f"not an HTTP request: {exc}\n"
                                                    .encode()), head_only=False)
            return
        if not isinstance(event, h11.Request):
            return  # the client closed before it asked
        request = _request(event)
        try:
            response = await self.handler(request)
        except Exception as exc:  # a bug: answered, logged, the server goes on
            log.exception("%s: %s %s failed", self.setting, request.method, request.path)
            response = Response(500, f"netctl internal error: {describe(exc)}\n".encode())
        self.served += 1
        await self._send(stream, conn, response, head_only=request.method == "HEAD")

    async def _send(self, stream: trio.abc.Stream, conn: h11.Connection, response: Response,
                    head_only: bool) -> None:
        import h11

        headers = [("Content-Type", response.content_type),
                   ("Content-Length", str(len(response.body))), ("Connection", "close")]
        reason = HTTPStatus(response.status).phrase.encode()
        data = conn.send(h11.Response(status_code=response.status, headers=headers,
                                      reason=reason)) or b""
        if not head_only:
            data += conn.send(h11.Data(data=response.body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)


def request_of(method: str, target: str, headers: dict[str, str] | None = None) -> Request:
    """The :class:`Request` of ``method`` on ``target`` (a path and its query). Pure."""
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    return Request(method, url.path, query,
                   {k.lower(): v for k, v in (headers or {}).items()})


def _request(event: h11.Request) -> Request:
    return request_of(event.method.decode("latin-1"), event.target.decode("latin-1"),
                      {name.decode("latin-1"): value.decode("latin-1")
                       for name, value in event.headers})
