"""The Kubernetes API as netctl calls it: raw JSON over kubernetes-asyncio, from trio.

kubernetes-asyncio is asyncio-only; this module (with the rest of ``netctl/kube/``) is
where it meets trio, through trio-asyncio. netctl uses the client for what it does
well — configuration (kubeconfig, in-cluster with the service-account token re-read
as it rotates: every minute by the client, and at once when the server answers 401),
TLS, authentication, connection pooling — and skips its model layer:
every call here is :meth:`ApiClient.call_api` on a resource path with the body left
as bytes (``_preload_content=False``), which the callers decode with msgspec into the
few fields netctl keeps. A V1Pod model per event would cost memory and CPU for
nothing; the model classes are not even imported (:mod:`netctl.kube.client.session`).

Every call has a timeout (``api-timeout``, a setting: slow control planes exist), and
a failure is one :class:`ApiError`: ``status`` the HTTP status, 0 when the server
could not be reached or did not answer in time. :attr:`Api.unreachable` says why the
last call failed so (a request, or the opening of a watch; empty once one is answered),
and the callbacks given to :meth:`Api.on_unreachable` are called at each such failure:
a caller waiting for a watch to bring something stops waiting for a server known gone.
A watch the server ends, or whose stream drops, is not such a failure: its renewal is
the call that tells.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import msgspec
import trio
import trio_asyncio
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from netctl.kube.client.errors import JSON as JSON
from netctl.kube.client.errors import ApiError as ApiError  # (where they were)
from netctl.kube.client.errors import KubeSettings as KubeSettings
from netctl.kube.client.errors import Query as Query
from netctl.kube.client.errors import reason_of
from netctl.kube.client.session import client as kclient
from netctl.kube.client.session import config as kconfig
from netctl.kube.client.wire import Wire, WireError, wire_for

log = logging.getLogger("netctl.kube")
T = TypeVar("T")
PATCH_MERGE = "application/merge-patch+json"
PATCH_JSON = "application/json-patch+json"


def run_with_loop(fn: Callable[[], Awaitable[T]]) -> T:
    """``fn()`` from synchronous code, in its own trio run with the asyncio loop the
    client (and the journal) run on."""
    async def go() -> T:
        async with trio_asyncio.open_loop():
            return await fn()

    return trio.run(go)


async def on_asyncio(fn: Callable[[], Awaitable[T]]) -> T:
    """Run an asyncio coroutine function from trio (on the trio-asyncio loop)."""
    result: T = await trio_asyncio.aio_as_trio(fn)()
    return result


# an in-cluster daemon dials what the pod's environment says: the `kubernetes` Service
IN_CLUSTER_HINT = (
    " (in-cluster: the address of KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT, the "
    "`kubernetes` Service unless set; where nothing routes it from the host network, as "
    "before kube-proxy or its replacement is up, give the daemon the API server's own "
    "address in ConfigMap kube-system/netctl-api-server: docs/kubernetes.md, \"Reaching "
    "the API server\")")


# the objects' metadata only, for a cache that reads nothing else (the Node of this node,
# the nodes and blocks the gone-nodes Lease's holder watches): a list of
# PartialObjectMetadata, and each watch event's object one (a watch asked for the list's
# type sends no event at all: the two are asked for apart)
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


class Api:
    """A connection to one API server; every method is called from trio."""

    def __init__(self, api: kclient.ApiClient, settings: KubeSettings) -> None:
        self._api = api
        environment_read_once(api)
        # trio's own HTTP to the server (netctl.kube.client.wire); None: the client's session
        self.wire: Wire | None = wire_for(api)
        self.settings = settings
        self.host = str(api.configuration.host)
        self.calls: dict[tuple[str, str], int] = {}  # (verb, resource) → count
        # (verb, resource, code) → count, once answered (code_label: bounded)
        self.answers: dict[tuple[str, str, str], int] = {}
        self.credential_reloads = 0  # after a 401: the token re-read
        self.unreachable = ""  # why the last call did not reach the server ("": it did)
        self._on_unreachable: list[Callable[[], None]] = []

    @classmethod
    async def connect(cls, settings: KubeSettings) -> Api:
        async def load() -> kclient.ApiClient:
            if settings.in_cluster:
                conf = kclient.Configuration()
                kconfig.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=conf, try_refresh_token=True)
                return kclient.ApiClient(configuration=conf)
            return await kconfig.new_client_from_config(config_file=settings.kubeconfig,
                                                        persist_config=False)
        try:
            return cls(await on_asyncio(load), settings)
        except (kconfig.ConfigException, OSError, ValueError) as exc:
            raise ApiError(0, f"Kubernetes client configuration: {exc}") from exc

    @property
    def client_configuration(self) -> kclient.Configuration:
        """The client's configuration (its credentials), read on the asyncio side."""
        return self._api.configuration

    async def close(self) -> None:
        if self.wire is not None:
            await self.wire.aclose()
        await on_asyncio(self._api.close)

    async def _reload_credentials(self) -> None:
        """Read the token again into the client's configuration (on the asyncio side): the
        service account's in-cluster, else the kubeconfig's (``token`` or ``tokenFile``).
        A configuration that no longer loads leaves the old one: the 401 is the answer."""
        conf = self._api.configuration
        self.credential_reloads += 1
        try:
            if self.settings.in_cluster:
                kconfig.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=conf, try_refresh_token=True)
            else:
                await kconfig.load_kube_config(config_file=self.settings.kubeconfig,
                                               client_configuration=conf,
                                               persist_config=False)
        except (kconfig.ConfigException, OSError, ValueError) as exc:
            log.warning("API credentials not reloaded: %s", exc)

    def _not_reachable(self, why: object) -> str:
        """The words for a call that did not reach the server: its address, the step and
        the cause (:mod:`netctl.kube.client.wire`), and in-cluster where the address came from."""
        hint = IN_CLUSTER_HINT if self.settings.in_cluster else ""
        return f"API server {self.host} not reachable: {why}{hint}"

    def _count(self, verb: str, path: str) -> None:
        resource = _resource_of(path)
        self.calls[(verb, resource)] = self.calls.get((verb, resource), 0) + 1

    def on_unreachable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a call fails to reach the server (status 0)."""
        self._on_unreachable.append(callback)

    def _answered(self, verb: str, path: str, status: int, why: str = "") -> None:
        key = (verb, _resource_of(path), code_label(status))
        self.answers[key] = self.answers.get(key, 0) + 1
        if status:
            self.unreachable = ""
            return
        self.unreachable = why or "not reachable"
        for callback in self._on_unreachable:
            callback()

    async def _call(self, method: str, path: str, query: list[tuple[str, str]] | None = None,
                    body: bytes | None = None, content_type: str = "application/json",
                    timeout: float | None = None, stream: bool = False,
                    accept: str = JSON) -> Any:
        """The aiohttp response of one request (on the asyncio side), status checked. A
        ``stream`` (a watch) has no read timeout here: its reader bounds it (a timer
        per chunk received would cost one more turn of the loop each)."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        to = self.settings.api_timeout if timeout is None else timeout
        # the client JSON-encodes a body itself, for every JSON content type
        document = None if body is None else msgspec.json.decode(body)
        for attempt in range(2):
            resp = await self._api.call_api(
                path, method, query_params=query or [], header_params=headers, body=document,
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=None, connect=to,
                                                       sock_read=None if stream else to))
            if resp.status != 401 or attempt:
                break
            # the token was rotated (bound service-account tokens expire; a kubeconfig's
            # tokenFile is rewritten): read the credentials again, and retry once
            resp.release()
            await self._reload_credentials()
        if not 200 <= resp.status <= 299:
            data = await resp.read()
            resp.release()
            raise ApiError(resp.status, _reason(data) or str(resp.reason), data)
        return resp

    async def request(self, verb: str, method: str, path: str,
                      query: list[tuple[str, str]] | None = None, body: bytes | None = None,
                      content_type: str = "application/json", accept: str = JSON) -> bytes:
        """One request; its body."""
        self._count(verb, path)
        if self.wire is not None:
            return await self._on_wire(verb, method, path, query, body, content_type, accept)

        async def go() -> bytes:
            try:
                resp = await self._call(method, path, query, body, content_type,
                                        accept=accept)
                data: bytes = await resp.read()
                resp.release()
                return data
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise ApiError(0, self._not_reachable(exc or "timeout")
                               ) from None
        try:
            data = await on_asyncio(go)
        except ApiError as exc:
            self._answered(verb, path, exc.status, exc.reason)
            raise
        self._answered(verb, path, 200)  # any 2xx: the callers need no finer code
        return data

    def _target(self, path: str, query: Query | None) -> str:
        return f"{path}?{urlencode(query)}" if query else path

    async def _on_wire(self, verb: str, method: str, path: str, query: Query | None,
                       body: bytes | None, content_type: str, accept: str = JSON) -> bytes:
        """:meth:`request` on :attr:`wire`: the same answers, errors and counts."""
        assert self.wire is not None
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        target = self._target(path, query)
        try:
            for attempt in range(2):
                answer = await self.wire.request(method, target, headers, body,
                                                 self.settings.api_timeout)
                if answer.status != 401 or attempt:
                    break
                await on_asyncio(self._reload_credentials)  # as _call: re-read, once
        except WireError as exc:
            raise self._failed(verb, path, 0, self._not_reachable(exc)
                               ) from None
        if not 200 <= answer.status <= 299:
            raise self._failed(verb, path, answer.status, answer.reason, answer.body)
        self._answered(verb, path, 200)
        return answer.body

    def _failed(self, verb: str, path: str, status: int, reason: str, body: bytes = b""
                ) -> ApiError:
        """The error of a call on :attr:`wire` answered ``status`` (0: not reached),
        counted as :meth:`_answered` counts it; the reason the server's Status gives,
        else ``reason``."""
        error = ApiError(status, _reason(body) or reason, body)
        self._answered(verb, path, status, error.reason)
        return error

    async def get(self, path: str) -> bytes | None:
        """GET one object; None when it does not exist (404)."""
        try:
            return await self.request("get", "GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, path: str, query: Query, accept: str = JSON) -> bytes:
        return await self.request("list", "GET", path, query, accept=accept)

    async def watch(self, path: str, query: Query, accept: str = JSON
                    ) -> AsyncGenerator[bytes, None]:
        """The lines of one watch stream (each a JSON event), until the server ends it, or
        ``watch-timeout`` + 30 s have passed (the server ends it at ``watch-timeout``: a
        stream still open then is a connection gone silent)."""
        self._count("watch", path)
        params = [*query, ("watch", "true"), ("allowWatchBookmarks", "true"),
                  ("timeoutSeconds", str(int(self.settings.watch_timeout)))]
        if self.wire is not None:
            receive, close = await self._open_on_wire(path, params, accept)
        else:
            receive, close = await self._open_on_session(path, params, accept)
        deadline = trio.current_time() + self.settings.watch_timeout + 30
        rest = b""
        try:
            while True:
                data = b""
                with trio.move_on_at(deadline):
                    data = await receive()
                if not data:
                    return  # ended (or silent past the deadline): the caller renews it
                *lines, rest = (rest + data).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield line
        finally:
            with trio.CancelScope(shield=True):
                await close()

    async def _open_on_session(self, path: str, params: Query, accept: str = JSON) -> tuple[
            Callable[[], Awaitable[bytes]], Callable[[], Awaitable[None]]]:
        """A watch's stream on the client's session: what it has received is taken in one
        trip to the asyncio side, however many events it holds."""
        async def open_stream() -> Any:
            try:
                return await self._call("GET", path, params,
                                        timeout=self.settings.watch_timeout + 30, stream=True,
                                        accept=accept)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise ApiError(0, self._not_reachable(exc or "timeout")
                               ) from None

        try:
            resp = await on_asyncio(open_stream)
        except ApiError as exc:
            self._answered("watch", path, exc.status, exc.reason)
            raise
        self._answered("watch", path, 200)

        async def received() -> bytes:
            try:
                data: bytes = await resp.content.readany()
                return data
            except (TimeoutError, aiohttp.ClientError, OSError):
                return b""

        async def close() -> None:
            resp.close()

        return (lambda: on_asyncio(received)), close

    async def _open_on_wire(self, path: str, params: Query, accept: str = JSON) -> tuple[
            Callable[[], Awaitable[bytes]], Callable[[], Awaitable[None]]]:
        """A watch's stream on :attr:`wire`, its status checked as :meth:`_call` does."""
        assert self.wire is not None
        target = self._target(path, params)
        try:
            for attempt in range(2):
                stream = await self.wire.open_stream(
                    "GET", target, {"Accept": accept}, self.settings.api_timeout)
                if 200 <= stream.status <= 299:
                    self._answered("watch", path, 200)
                    return stream.receive, stream.aclose
                body = b""
                with trio.move_on_after(self.settings.api_timeout):
                    while chunk := await stream.receive():
                        body += chunk
                await stream.aclose()
                if stream.status == 401 and not attempt:
                    await on_asyncio(self._reload_credentials)  # re-read, once
                    continue
                raise self._failed("watch", path, stream.status, stream.reason, body)
        except WireError as exc:
            raise self._failed("watch", path, 0, self._not_reachable(exc)) from None
        raise AssertionError("unreachable")


def environment_read_once(api: kclient.ApiClient) -> None:
    """kubernetes-asyncio's aiohttp session trusts the environment: for every request
    aiohttp then reads ``~/.netrc`` and the proxy variables, each on a thread of its own
    (two thread trips per request: a fifth of a small request's CPU in the daemon).
    Neither changes while netctl runs: the proxy the environment names for the API
    server (``HTTPS_PROXY``, ``NO_PROXY``, …) is put into the client's own proxy setting
    here, once, and the session stops looking. A ``.netrc`` entry for the API server's
    host (basic auth) leaves the session as it was."""
    rest = api.rest_client
    session = rest.pool_manager
    url = URL(str(api.configuration.host))
    netrc_auth = getattr(session, "_get_netrc_auth", None)  # aiohttp's own, as it asks
    if not getattr(session, "_trust_env", False) or url.host is None or netrc_auth is None:
        return  # an aiohttp laid out otherwise: the session is left as it was made
    if netrc_auth(url.host) is not None:
        return
    if not rest.proxy:
        try:
            proxy, auth = get_env_proxy_for_url(url)
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}),
                                      "Proxy-Authorization": auth.encode()}
    session._trust_env = False


_reason = reason_of


# HTTP statuses an API server answers that a metric names by number; others by class
CODES = frozenset({400, 401, 403, 404, 409, 410, 422, 429, 500, 502, 503, 504})


def code_label(status: int) -> str:
    """An answer's HTTP status as a bounded label: ``2xx`` for any success, the number
    for the statuses in :data:`CODES`, else its class (``4xx``, ``5xx``); ``0``: no answer
    (unreachable, timed out)."""
    if status == 0:
        return "0"
    if status in CODES:
        return str(status)
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


def _resource_of(path: str) -> str:
    """``/api/v1/namespaces/x/pods/y`` → ``pods``; ``/apis/g/v/things`` → ``things``."""
    parts = [p for p in path.split("/") if p]
    core = parts[:2] == ["api", "v1"]
    rest = parts[2:] if core else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    return rest[0] if rest else (parts[-1] if parts else "")


_JITTER = random.Random()


def backoff(attempt: int, cap: float = 30.0) -> float:
    """The pause before the ``attempt``-th retry of a failed watch or list: 0.5 s, 1 s,
    2 s, … capped, each drawn between half and all of that ("equal jitter"), so that
    thousands of daemons that lost the API server at once do not come back at once."""
    full = min(cap, 0.5 * 2 ** min(attempt, 10))
    return float(full / 2 + _JITTER.random() * full / 2)


async def sleep_backoff(attempt: int, cap: float = 30.0) -> None:
    """Sleep :func:`backoff` seconds."""
    await trio.sleep(backoff(attempt, cap))
