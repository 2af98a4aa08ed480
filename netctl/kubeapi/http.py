"""HTTP/1.1 from trio: every call netctl makes — the API server's requests and watches, and
``kubectl netctl``'s questions to each node's query endpoint — goes through :class:`Http`.

httpcore (on h11, with its trio backend) carries the bytes: its pool keeps connections
alive (:data:`IDLE_KEPT` of them, each :data:`IDLE_FOR` seconds at most), drops one the
server closed while it was idle, and tunnels through an HTTP proxy (``CONNECT`` for an
https server). Which server, TLS, proxy and credentials an :class:`Endpoint` names is read
elsewhere (:mod:`netctl.kubeapi.lite`, :mod:`netctl.kubeapi.full`); the proxy the
environment names (``HTTPS_PROXY``, ``NO_PROXY``, …) is found here (:func:`environment_proxy`).

Added here: an idempotent GET whose connection broke before any answer is sent once more
(a kept-alive connection the server closed just as the request went out); a watch's
stream has no read timeout of its own (its reader bounds it); and every failure to reach
the server, or to get its whole answer in time, is one :class:`HttpError` naming the
address, the step (connecting, the TLS handshake, sending, waiting for the answer,
reading it) and why (the errno's name, the TLS library's reason, the timeout's length),
which the callers turn into their status-0 errors.
"""

from __future__ import annotations

import base64
import errno
import os
import ssl
import typing
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

import httpcore
import trio

IDLE_KEPT = 8  # idle connections kept for reuse; more are closed as they come back
IDLE_FOR = 60.0  # an idle connection older than this is closed rather than reused

Headers = dict[str, str]


class HttpError(Exception):
    """The server could not be reached, or did not answer (completely) in time."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy: its URL (``http://host:port``) and the headers it is sent
    (``Proxy-Authorization`` from the URL's user and password, or the configuration's)."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Endpoint:
    """A server: where it is, the path its URL carries before the calls' (``prefix``), the
    Host header (``authority``), TLS (None: plain http) naming ``server_hostname``, and
    the proxy to reach it through (None: directly)."""

    host: str
    port: int
    prefix: str
    authority: str
    tls: ssl.SSLContext | None
    server_hostname: str
    proxy: Proxy | None = None


def endpoint_at(url: SplitResult, tls: ssl.SSLContext | None, server_name: str | None = None,
                proxy: Proxy | None = None) -> Endpoint:
    """The endpoint of ``url`` (http or https, with a host): its port, or the scheme's;
    the Host header without credentials; TLS with ``tls`` (None: plain http), naming
    ``server_name`` or the URL's host; through ``proxy``, else the environment's."""
    host = url.hostname or ""
    return Endpoint(host, url.port or (443 if url.scheme == "https" else 80),
                    url.path.rstrip("/"), url.netloc.rpartition("@")[2], tls,
                    server_name or host, proxy or environment_proxy(url))


def proxy_at(address: str, headers: dict[str, str] | None = None) -> Proxy:
    """The proxy at ``address`` (``http://[user:password@]host:port``): a user and
    password in it become its ``Proxy-Authorization``."""
    url = urlsplit(address if "://" in address else f"http://{address}")
    sent = dict(headers or {})
    if url.username is not None:
        pair = f"{unquote(url.username)}:{unquote(url.password or '')}"
        sent.setdefault("Proxy-Authorization",
                        "Basic " + base64.b64encode(pair.encode()).decode())
    bare = url._replace(netloc=url.netloc.rpartition("@")[2]).geturl()
    return Proxy(bare, tuple(sent.items()))


def environment_proxy(url: SplitResult) -> Proxy | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``/``HTTP_PROXY``, else
    ``ALL_PROXY``, by the URL's scheme; none when ``NO_PROXY`` covers its host)."""
    proxies = urllib.request.getproxies_environment()
    address = proxies.get(url.scheme) or proxies.get("all")
    if not address or urllib.request.proxy_bypass(url.netloc.rpartition("@")[2]):
        return None
    return proxy_at(address)


@dataclass
class Answer:
    status: int
    reason: str
    body: bytes


class Stream:
    """An answer read as it comes: :meth:`receive` its next chunk, b"" at its end (or
    when the connection drops: the caller renews a watch either way)."""

    def __init__(self, response: httpcore.Response) -> None:
        self._response: httpcore.Response | None = response
        self.status = response.status
        self.reason = _reason_of(response)
        stream = typing.cast(typing.AsyncIterable[bytes], response.stream)
        self._chunks: AsyncIterator[bytes] = stream.__aiter__()

    async def receive(self) -> bytes:
        if self._response is None:
            return b""
        try:
            while not (chunk := await self._chunks.__anext__()):
                pass
            return chunk
        except (StopAsyncIteration, *_FAILURES):
            return b""

    async def aclose(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            await response.aclose()


class _Counted(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, counting the connections it opens and naming the step
    (connecting, the TLS handshake) and address of a failure to open one."""

    def __init__(self) -> None:
        self._trio = httpcore.TrioBackend()
        self.opened = 0

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        try:
            stream = await self._trio.connect_tcp(host, port, timeout, local_address,
                                                  socket_options)
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            raise type(exc)(f"connecting to {host}:{port}: {describe(exc, timeout)}") from exc
        self.opened += 1
        return _Tls(stream, f"{host}:{port}")

    async def sleep(self, seconds: float) -> None:
        await self._trio.sleep(seconds)


class _Tls(httpcore.AsyncNetworkStream):
    """A TCP stream whose TLS handshake's failure names its address and the step."""

    def __init__(self, stream: httpcore.AsyncNetworkStream, address: str) -> None:
        self._stream = stream
        self._address = address

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        try:
            return await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            raise type(exc)(f"TLS handshake with {self._address}: "
                            f"{describe(exc, timeout)}") from exc

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


_FAILURES = (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError,
             httpcore.ProxyError, httpcore.UnsupportedProtocol, trio.TooSlowError)
# the connection broke before any answer came: an idempotent request may be sent again
_BROKEN = (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError)


class Http:
    """Requests to one server over kept-alive HTTP/1.1 connections. ``credentials``
    gives the headers that say who we are (``Authorization``), asked before each
    request (a token file that rotates, an exec plugin's token that expires)."""

    def __init__(self, endpoint: Endpoint,
                 credentials: Callable[[], Awaitable[Headers]] | None = None,
                 headers: Headers | None = None) -> None:
        self.endpoint = endpoint
        self._credentials = credentials
        self._headers = {"User-Agent": "netctl", **(headers or {})}
        self._scheme = b"https" if endpoint.tls is not None else b"http"
        self._backend = _Counted()
        proxy = endpoint.proxy
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=endpoint.tls, max_connections=None,
            max_keepalive_connections=IDLE_KEPT, keepalive_expiry=IDLE_FOR,
            network_backend=self._backend,
            proxy=httpcore.Proxy(proxy.url, headers=list(proxy.headers)) if proxy else None)

    @property
    def opened(self) -> int:
        """Connections opened (a reused one is not counted again)."""
        return self._backend.opened

    async def _request(self, method: str, target: str, headers: Headers, body: bytes | None,
                       timeout: float, read_timeout: float | None) -> httpcore.Request:
        e = self.endpoint
        who = await self._credentials() if self._credentials is not None else {}
        fields = {"Host": e.authority, **self._headers, **who, **headers}
        if body is not None:
            fields["Content-Length"] = str(len(body))
        extensions: dict[str, typing.Any] = {"timeout": {
            "connect": timeout, "read": read_timeout, "write": timeout, "pool": timeout}}
        if e.tls is not None and e.server_hostname != e.host:
            extensions["sni_hostname"] = e.server_hostname
        try:
            url = httpcore.URL(scheme=self._scheme, host=e.host.encode("ascii"), port=e.port,
                               target=(e.prefix + target).encode("ascii"))
            return httpcore.Request(method.encode("ascii"), url, headers=[
                (k.encode("ascii"), v.encode("ascii")) for k, v in fields.items()],
                content=body or b"", extensions=extensions)
        except UnicodeEncodeError:
            raise HttpError(f"the request to {self._address}: a header or the path is not "
                            "ASCII") from None

    @property
    def _address(self) -> str:
        return f"{self.endpoint.host}:{self.endpoint.port}"

    async def request(self, method: str, target: str, headers: Headers, body: bytes | None,
                      timeout: float) -> Answer:
        """One request and its whole answer; each read waits ``timeout`` at most, as
        does the connection."""
        for attempt in range(2):
            request = await self._request(method, target, headers, body, timeout, timeout)
            step = "waiting for the answer from"
            try:
                response = await self._pool.handle_async_request(request)
                step = "reading the answer from"
                try:
                    data = await response.aread()
                finally:
                    await response.aclose()
            except _BROKEN as exc:
                if step == "waiting for the answer from" and method == "GET" and not attempt:
                    continue  # the server closed it as we sent: once more, on a new one
                raise self._failure(step, exc, timeout) from None
            except _FAILURES as exc:
                raise self._failure(step, exc, timeout) from None
            return Answer(response.status, _reason_of(response), data)
        raise AssertionError("unreachable")

    async def open_stream(self, method: str, target: str, headers: Headers,
                          timeout: float) -> Stream:
        """A request whose answer is read as it comes (a watch). Connecting and the
        answer's head wait ``timeout`` at most; the body's chunks are the caller's to
        bound."""
        request = await self._request(method, target, headers, None, timeout, None)
        try:
            with trio.fail_after(timeout):
                return Stream(await self._pool.handle_async_request(request))
        except _FAILURES as exc:
            raise self._failure("waiting for the answer from", exc, timeout) from None

    def _failure(self, step: str, exc: BaseException, timeout: float) -> HttpError:
        if isinstance(exc, httpcore.ConnectError | httpcore.ConnectTimeout) and str(exc):
            return HttpError(str(exc))  # (the step and address named as it failed)
        if isinstance(exc, httpcore.LocalProtocolError):
            return HttpError(f"the request to {self._address}: {exc}")
        if isinstance(exc, httpcore.WriteError | httpcore.WriteTimeout):
            step = "sending the request to"
        return HttpError(f"{step} {self._address}: {describe(exc, timeout)}")

    async def aclose(self) -> None:
        await self._pool.aclose()


def _reason_of(response: httpcore.Response) -> str:
    reason = response.extensions.get("reason_phrase", b"")
    return reason.decode("latin-1") if isinstance(reason, bytes) else str(reason)


def describe(exc: BaseException, timeout: float | None) -> str:
    """Why a step failed, in words: a timeout with its length, the OS's error with its
    errno name (found under the wrappers: a broken TLS stream keeps the socket's error
    as its cause, a failed connect its attempts' errors), a TLS error as the library gives
    it, a closed connection as such."""
    if isinstance(exc, httpcore.TimeoutException | trio.TooSlowError):
        return f"timeout (no progress within {timeout:g} s)"
    found = _root_cause(exc)
    if isinstance(found, ssl.SSLError):
        return f"TLS: {found.reason or found}"
    if isinstance(found, OSError) and found.errno:
        name = errno.errorcode.get(found.errno, str(found.errno))
        return f"{name} ({os.strerror(found.errno)})"
    if _closed(exc) or (isinstance(exc, httpcore.RemoteProtocolError)
                        and "disconnected" in str(exc)):
        return "the connection was closed by the other end"
    return str(exc) or type(exc).__name__


def _closed(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


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
