"""The API server over HTTP/1.1 from trio itself: netctl's requests and watches without
the asyncio bridge.

netctl reads the configuration (:mod:`netctl.kube.client.lite`), or kubernetes-asyncio
does for the kubeconfigs netctl leaves to it (:mod:`netctl.kube.client.full`); this
module only carries the bytes. A request through
the client's aiohttp session crosses into asyncio and back several times (trio-asyncio
runs each of aiohttp's callbacks as a turn of its loop): about 1.1 ms of the daemon's
CPU per small request, against about 0.25 ms here (``httptools``, llhttp's C parser,
reads the answers; a request's head is a few formatted lines; trio's own sockets and
TLS carry them). One network-status patch per pod, and a watch event per
change, make that a tenth of a pod's daemon CPU in Kubernetes mode.

:func:`wire_for` says when this applies: an ``http`` or ``https`` server, reached
directly, with a bearer token (its refresh hook plain, as the in-cluster one is) or a
client certificate. A proxy, a ``.netrc`` entry for the server or an asynchronous
credential hook leave the calls on the client's session (:mod:`netctl.kube.client.api`).

Connections are kept alive and reused, one request at a time each; a watch holds its
own until it ends. One found closed by the server while it was idle is dropped before
use; a GET whose reused connection fails before any answer is sent again once, on a
new one. Every failure to reach the server, or to get its whole answer in time, is one
:class:`WireError` the caller turns into its status-0 error.
"""

from __future__ import annotations

import errno
import inspect
import os
import re
import select
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httptools
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
    return endpoint_at(url, tls, getattr(conf, "tls_server_name", None))


def endpoint_at(url: SplitResult, tls: ssl.SSLContext | None,
                server_name: str | None = None) -> Endpoint:
    """The endpoint of ``url`` (http or https, with a host): its port, or the scheme's;
    the Host header without credentials; TLS with ``tls`` (None: plain http), naming
    ``server_name`` or the URL's host."""
    host = url.hostname or ""
    return Endpoint(host, url.port or (443 if url.scheme == "https" else 80),
                    url.path.rstrip("/"), url.netloc.rpartition("@")[2], tls,
                    server_name or host)


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
        if conn is None:
            return b""
        try:
            return await conn.body_part(None)
        except _FAILURES:
            return b""

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class ProtocolError(Exception):
    """The server's bytes are not the HTTP/1.1 answer asked for."""


class _Reading:
    """One answer as the parser finds it (httptools calls these back as it reads)."""

    __slots__ = ("body", "complete", "delimited", "head", "keep_alive", "parser", "reason")

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.on_message_begin()

    def on_message_begin(self) -> None:  # (again after an informational answer)
        self.keep_alive = False  # the server keeps the connection open after it
        self.reason = b""
        self.head = False  # status line and headers read
        self.delimited = False  # a Content-Length or chunked body: its end is known
        self.body: list[bytes] = []
        self.complete = False

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.delimited = True

    def on_headers_complete(self) -> None:
        self.head = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # (the parser resets after this)


class _Conn:
    __slots__ = ("answer", "closed", "fd", "idle_since", "stream")

    def __init__(self, stream: trio.abc.Stream, fd: int) -> None:
        self.stream = stream
        self.fd = fd
        self.idle_since = 0.0
        self.answer = _Reading()
        self.closed = False  # the server closed its side

    def stale(self) -> bool:
        """Closed by the server (or sent something unasked) while it was idle."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(poller.poll(0))

    async def send(self, data: bytes) -> None:
        self.answer = _Reading()
        await self.stream.send_all(data)

    async def _read(self, read_timeout: float | None) -> None:
        if read_timeout is None:
            data = await self.stream.receive_some(READ_SIZE)
        else:
            with trio.fail_after(read_timeout):
                data = await self.stream.receive_some(READ_SIZE)
        if not data:
            self.closed = True
            answer = self.answer
            if answer.head and not answer.delimited:  # its body ends with the connection
                answer.complete = True
                return
            raise ProtocolError("the connection closed before the answer ended")
        try:
            self.answer.parser.feed_data(bytes(data))
        except httptools.HttpParserError as exc:
            raise ProtocolError(f"not an HTTP/1.1 answer: {exc}") from None

    async def head(self, read_timeout: float) -> tuple[int, str]:
        """The answer's status and reason (past any 1xx)."""
        answer = self.answer
        while True:
            while not answer.head:
                await self._read(read_timeout)
            status = answer.parser.get_status_code()
            if status >= 200 or status == 101:
                return status, answer.reason.decode(errors="replace")
            answer.head = False  # an informational answer: the real one follows

    async def body_part(self, read_timeout: float | None) -> bytes:
        """The body's next bytes as they come; b"" at its end."""
        answer = self.answer
        while not answer.body:
            if answer.complete:
                return b""
            await self._read(read_timeout)
        data = b"".join(answer.body)
        answer.body.clear()
        return data

    def reusable(self) -> bool:
        return self.answer.complete and not self.closed and self.answer.keep_alive

    async def close(self) -> None:
        await trio.aclose_forcefully(self.stream)


_FAILURES = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
             ProtocolError, ssl.SSLError)
_UNSAFE = re.compile("[\r\n\0]")


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
        """A new connection (TLS when the endpoint has it); :class:`WireError` naming the
        address, the step that failed (connect, TLS handshake) and why."""
        e = self.endpoint
        step = f"connecting to {e.host}:{e.port}"
        try:
            with trio.fail_after(timeout):
                tcp = await trio.open_tcp_stream(e.host, e.port)
                stream: trio.abc.Stream = tcp
                if e.tls is not None:
                    step = f"TLS handshake with {e.host}:{e.port}"
                    tls = trio.SSLStream(tcp, e.tls, server_hostname=e.server_hostname,
                                         https_compatible=True)
                    try:
                        await tls.do_handshake()
                    except BaseException:
                        await trio.aclose_forcefully(tcp)
                        raise
                    stream = tls
        except _FAILURES as exc:
            raise WireError(f"{step}: {_describe(exc, timeout)}") from None
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
        if conn.reusable() and len(self._idle) < IDLE_KEPT:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            await conn.close()

    def _request(self, method: str, target: str, headers: dict[str, str],
                 body: bytes | None) -> bytes:
        """The request's bytes: its head (a line per header) and its body."""
        e = self.endpoint
        fields = {"Host": e.authority, **self._headers, **self._credentials(), **headers}
        if body is not None:
            fields["Content-Length"] = str(len(body))
        lines = [f"{method} {e.prefix}{target} HTTP/1.1"]
        lines.extend(f"{name}: {value}" for name, value in fields.items())
        if any(_UNSAFE.search(line) for line in lines):
            raise ProtocolError("a header or the path holds a line break or a NUL")
        text = "\r\n".join(lines)
        try:
            head = (text + "\r\n\r\n").encode("ascii")
        except UnicodeEncodeError:
            raise ProtocolError("a header or the path is not ASCII") from None
        return head + body if body else head

    async def request(self, method: str, target: str, headers: dict[str, str],
                      body: bytes | None, timeout: float) -> Answer:
        """One request and its whole answer; each read waits ``timeout`` at most, as
        does the connection."""
        for attempt in range(2):
            conn, reused = await self._take(timeout)
            answered = False
            done = False
            step = "sending the request"
            try:
                data = self._request(method, target, headers, body)
                with trio.fail_after(timeout):
                    await conn.send(data)
                step = "waiting for the answer"
                status, reason = await conn.head(timeout)
                step = "reading the answer"
                answered = True
                chunks = []
                while part := await conn.body_part(timeout):
                    chunks.append(part)
                done = True
            except _FAILURES as exc:
                if reused and not answered and method == "GET" and not attempt:
                    continue  # the server closed it as we sent: once more, on a new one
                raise self._failure(step, exc, timeout) from None
            finally:
                if done:
                    await self._give_back(conn)
                else:
                    await conn.close()
            return Answer(status, reason, b"".join(chunks))
        raise AssertionError("unreachable")

    async def open_stream(self, method: str, target: str, headers: dict[str, str],
                          timeout: float) -> Stream:
        """A request whose answer is read as it comes (a watch), on a connection of its
        own, closed with the :class:`Stream`. Connecting and the answer's head wait
        ``timeout`` at most; the body's chunks are the caller's to bound."""
        conn = await self._connect(timeout)
        step = "sending the request"
        try:
            data = self._request(method, target, headers, None)
            with trio.fail_after(timeout):
                await conn.send(data)
            step = "waiting for the answer"
            status, reason = await conn.head(timeout)
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, _FAILURES):
                raise self._failure(step, exc, timeout) from None
            raise
        return Stream(conn, status, reason)

    def _failure(self, step: str, exc: BaseException, timeout: float) -> WireError:
        e = self.endpoint
        return WireError(f"{step} to {e.host}:{e.port}: {_describe(exc, timeout)}"
                         if step == "sending the request" else
                         f"{step} from {e.host}:{e.port}: {_describe(exc, timeout)}")

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


def _describe(exc: BaseException, timeout: float) -> str:
    """Why a step failed, in words: a timeout with its length, the OS's error with its
    errno name (found under trio's wrappers: a broken TLS stream keeps the socket's error
    as its cause, a failed connect its attempts' errors), a TLS error as the library gives
    it, a closed connection as such."""
    if isinstance(exc, trio.TooSlowError):
        return f"timeout (no progress within {timeout:g} s)"
    found = _root_cause(exc)
    if isinstance(found, ssl.SSLError):
        return f"TLS: {found.reason or found}"
    if isinstance(found, OSError) and found.errno:
        name = errno.errorcode.get(found.errno, str(found.errno))
        return f"{name} ({os.strerror(found.errno)})"
    if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError):
        return "the connection was closed by the other end"
    return str(exc) or type(exc).__name__


def _root_cause(exc: BaseException) -> BaseException | None:
    """The first TLS error or OS error with an errno under ``exc`` (itself, its causes,
    the errors of a group), breadth first; None when there is none."""
    queue: list[BaseException] = [exc]
    seen: set[int] = set()
    while queue:
        item = queue.pop(0)
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ssl.SSLError) or (isinstance(item, OSError) and item.errno):
            return item
        if isinstance(item, BaseExceptionGroup):
            queue.extend(item.exceptions)
        queue.extend(e for e in (item.__cause__, item.__context__) if e is not None)
    return None
