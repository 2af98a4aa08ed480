"""The API server over HTTP/1.1 from trio itself: netctl's requests and watches without
the asyncio bridge.

kubernetes-asyncio still loads the configuration (kubeconfig or in-cluster), the
credentials and their refresh; this module only carries the bytes. A request through
the client's aiohttp session crosses into asyncio and back several times (trio-asyncio
runs each of aiohttp's callbacks as a turn of its loop): about 1.1 ms of the daemon's
CPU per small request, against about 0.4 ms here (``h11`` parses the HTTP, trio's own
sockets and TLS carry it). One network-status patch per pod, and a watch event per
change, make that a tenth of a pod's daemon CPU in Kubernetes mode.

:func:`wire_for` says when this applies: an ``http`` or ``https`` server, reached
directly, with a bearer token (its refresh hook plain, as the in-cluster one is) or a
client certificate. A proxy, a ``.netrc`` entry for the server or an asynchronous
credential hook leave the calls on the client's session (:mod:`netctl.kube.api`).

Connections are kept alive and reused, one request at a time each; a watch holds its
own until it ends. One found closed by the server while it was idle is dropped before
use; a GET whose reused connection fails before any answer is sent again once, on a
new one. Every failure to reach the server, or to get its whole answer in time, is one
:class:`WireError` the caller turns into its status-0 error.
"""

from __future__ import annotations

import inspect
import select
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11
import trio

IDLE_KEPT = 8  # idle connections kept for reuse; more are closed as they come back
IDLE_FOR = 60.0  # an idle connection older than this is closed rather than reused
READ_SIZE = 1 << 16


class WireError(Exception):
    """The server could not be reached, or did not answer (completely) in time."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    prefix: str  # a path the server's URL carries before /api ("" mostly)
    authority: str  # the Host header
    tls: ssl.SSLContext | None  # None: plain http
    server_hostname: str


def endpoint_of(conf: Any) -> Endpoint | None:
    """Where the client's configuration points, with its TLS settings; None: a URL this
    module does not speak (not http or https)."""
    url = urlsplit(str(conf.host))
    if url.scheme not in ("http", "https") or not url.hostname:
        return None
    port = url.port or (443 if url.scheme == "https" else 80)
    tls = None
    if url.scheme == "https":
        tls = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
        if conf.cert_file:
            tls.load_cert_chain(conf.cert_file, keyfile=conf.key_file or None)
        if not conf.verify_ssl:
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        if getattr(conf, "disable_strict_ssl_verification", False):
            tls.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return Endpoint(url.hostname, port, url.path.rstrip("/"),
                    url.netloc.rpartition("@")[2], tls,
                    getattr(conf, "tls_server_name", None) or url.hostname)


def wire_for(api: Any) -> Wire | None:
    """A :class:`Wire` for ``api`` (a kubernetes-asyncio ApiClient), or None when its
    calls must stay on its session: a proxy, basic auth from ``.netrc`` (the session
    then still trusts the environment), an asynchronous credential hook, or a URL
    scheme other than http(s)."""
    conf = api.configuration
    rest = api.rest_client
    if rest.proxy or getattr(rest.pool_manager, "_trust_env", True):
        return None
    hook = conf.refresh_api_key_hook
    if hook is not None and inspect.iscoroutinefunction(hook):
        return None
    endpoint = endpoint_of(conf)
    if endpoint is None:
        return None
    default = dict(getattr(api, "default_headers", {}) or {})
    return Wire(endpoint, lambda: _credentials(conf), default)


def _credentials(conf: Any) -> dict[str, str]:
    """The Authorization header as the client would send it (its refresh hook run)."""
    hook = conf.refresh_api_key_hook
    if hook is not None:
        hook(conf)
    token = conf.api_key.get("BearerToken")
    if not token:
        return {}
    prefix = conf.api_key_prefix.get("BearerToken")
    return {"Authorization": f"{prefix} {token}" if prefix else token}


@dataclass
class Answer:
    status: int
    reason: str
    body: bytes


class Stream:
    """An answer read as it comes: :meth:`receive` its next chunk, b"" at its end (or
    when the connection drops: the caller renews a watch either way)."""

    def __init__(self, conn: _Conn, status: int, reason: str) -> None:
        self._conn: _Conn | None = conn
        self.status, self.reason = status, reason

    async def receive(self) -> bytes:
        conn = self._conn
        while conn is not None:
            try:
                event = await conn.next_event(None)
            except _FAILURES:
                return b""
            if isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return b""
        return b""

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class _Conn:
    __slots__ = ("fd", "http", "idle_since", "stream")

    def __init__(self, stream: trio.abc.Stream, fd: int) -> None:
        self.stream = stream
        self.fd = fd
        self.http = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    def stale(self) -> bool:
        """Closed by the server (or sent something unasked) while it was idle."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(poller.poll(0))

    async def send(self, *events: Any) -> None:
        await self.stream.send_all(b"".join(self.http.send(e) or b"" for e in events))

    async def next_event(self, read_timeout: float | None) -> Any:
        while True:
            event = self.http.next_event()
            if event is not h11.NEED_DATA:
                return event
            if read_timeout is None:
                data = await self.stream.receive_some(READ_SIZE)
            else:
                with trio.fail_after(read_timeout):
                    data = await self.stream.receive_some(READ_SIZE)
            self.http.receive_data(bytes(data))

    async def head(self, read_timeout: float) -> h11.Response:
        """The answer's status line and headers (past any 1xx)."""
        while True:
            event = await self.next_event(read_timeout)
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise h11.RemoteProtocolError(
                    "the connection closed before an answer came" if isinstance(
                        event, h11.ConnectionClosed) else f"no answer but {event!r}")

    async def close(self) -> None:
        await trio.aclose_forcefully(self.stream)


_FAILURES = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
             h11.ProtocolError, ssl.SSLError)


class Wire:
    """Requests to one API server over kept-alive HTTP/1.1 connections."""

    def __init__(self, endpoint: Endpoint, credentials: Callable[[], dict[str, str]],
                 headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self._credentials = credentials
        self._headers = {"User-Agent": "netctl", **(headers or {})}
        self._idle: list[_Conn] = []
        self.opened = 0  # connections opened (a reused one is not counted again)

    async def _connect(self, timeout: float) -> _Conn:
        e = self.endpoint
        with trio.fail_after(timeout):
            tcp = await trio.open_tcp_stream(e.host, e.port)
            stream: trio.abc.Stream = tcp
            if e.tls is not None:
                tls = trio.SSLStream(tcp, e.tls, server_hostname=e.server_hostname,
                                     https_compatible=True)
                try:
                    await tls.do_handshake()
                except BaseException:
                    await trio.aclose_forcefully(tcp)
                    raise
                stream = tls
        self.opened += 1
        return _Conn(stream, tcp.socket.fileno())

    async def _take(self, timeout: float) -> tuple[_Conn, bool]:
        """An idle connection still open (True: reused), else a new one."""
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < IDLE_FOR and not conn.stale():
                return conn, True
            await conn.close()
        return await self._connect(timeout), False

    async def _give_back(self, conn: _Conn) -> None:
        http = conn.http
        if http.our_state is h11.DONE and http.their_state is h11.DONE \
                and len(self._idle) < IDLE_KEPT:
            http.start_next_cycle()
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            await conn.close()

    def _request(self, method: str, target: str, headers: dict[str, str],
                 body: bytes | None) -> list[Any]:
        e = self.endpoint
        fields = {"Host": e.authority, **self._headers, **self._credentials(), **headers}
        if body is not None:
            fields["Content-Length"] = str(len(body))
        events: list[Any] = [h11.Request(method=method, target=e.prefix + target,
                                         headers=list(fields.items()))]
        if body:
            events.append(h11.Data(data=body))
        events.append(h11.EndOfMessage())
        return events

    async def request(self, method: str, target: str, headers: dict[str, str],
                      body: bytes | None, timeout: float) -> Answer:
        """One request and its whole answer; each read waits ``timeout`` at most, as
        does the connection."""
        for attempt in range(2):
            try:
                conn, reused = await self._take(timeout)
            except _FAILURES as exc:
                raise WireError(_describe(exc)) from None
            answered = False
            done = False
            try:
                with trio.fail_after(timeout):
                    await conn.send(*self._request(method, target, headers, body))
                head = await conn.head(timeout)
                answered = True
                chunks = []
                while True:
                    event = await conn.next_event(timeout)
                    if isinstance(event, h11.Data):
                        chunks.append(bytes(event.data))
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        raise WireError("the connection closed before the answer ended")
                done = True
            except _FAILURES as exc:
                if reused and not answered and method == "GET" and not attempt:
                    continue  # the server closed it as we sent: once more, on a new one
                raise WireError(_describe(exc)) from None
            finally:
                if done:
                    await self._give_back(conn)
                else:
                    await conn.close()
            return Answer(head.status_code, head.reason.decode(errors="replace"),
                          b"".join(chunks))
        raise AssertionError("unreachable")

    async def open_stream(self, method: str, target: str, headers: dict[str, str],
                          timeout: float) -> Stream:
        """A request whose answer is read as it comes (a watch), on a connection of its
        own, closed with the :class:`Stream`. Connecting and the answer's head wait
        ``timeout`` at most; the body's chunks are the caller's to bound."""
        conn = await self._connect_or_fail(timeout)
        try:
            with trio.fail_after(timeout):
                await conn.send(*self._request(method, target, headers, None))
            head = await conn.head(timeout)
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, _FAILURES):
                raise WireError(_describe(exc)) from None
            raise
        return Stream(conn, head.status_code, head.reason.decode(errors="replace"))

    async def _connect_or_fail(self, timeout: float) -> _Conn:
        try:
            return await self._connect(timeout)
        except _FAILURES as exc:
            raise WireError(_describe(exc)) from None

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "timeout"
    return str(exc) or type(exc).__name__
