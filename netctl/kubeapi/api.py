"""The Kubernetes API as netctl calls it: raw JSON from trio.

Where the API server is and who netctl is to it (an :class:`Access`) is read by netctl
itself (:func:`netctl.kubeapi.lite.netctl_access`), else by kubernetes-asyncio's loaders
(:mod:`netctl.kubeapi.full`). Every call goes over :class:`~netctl.kubeapi.http.Http`,
with no model layer: bodies stay bytes, which the callers decode with msgspec. A 401
reads the credentials again and retries once (a rotated service-account token).

Every call has a timeout (``api-timeout``), and a failure is one :class:`ApiError`:
``status`` the HTTP status, 0 when the server could not be reached or did not answer in
time; then :attr:`Api.unreachable` says why and the :meth:`Api.on_unreachable` callbacks
are called (a caller waiting for a watch stops waiting for a server known gone). A watch
the server ends, or whose stream drops, is not such a failure: its renewal tells.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Protocol, TypeVar
from urllib.parse import urlencode

import trio

from netctl.kubeapi.errors import JSON as JSON
from netctl.kubeapi.errors import ApiError as ApiError
from netctl.kubeapi.errors import KubeSettings as KubeSettings
from netctl.kubeapi.errors import Query as Query
from netctl.kubeapi.errors import reason_of
from netctl.kubeapi.http import Endpoint, Headers, Http, HttpError, Stream
from netctl.kubeapi.lite import netctl_access

log = logging.getLogger("netctl.kube")
T = TypeVar("T")
PATCH_MERGE = "application/merge-patch+json"


class Access(Protocol):
    """Where the API server is and who we are to it, as a loader read them."""

    endpoint: Endpoint
    host: str  # the server's URL, for messages
    loader: str  # who read the configuration: "netctl", "kubernetes-asyncio"

    async def headers(self) -> Headers:
        """The headers that say who we are (``Authorization``), current."""

    async def authorization(self) -> str:
        """The ``Authorization`` value the calls carry (``Bearer …``); "" when the
        credentials are no token."""

    async def reload(self) -> None:
        """Read the credentials again (after a 401)."""


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
    """A connection to one API server; every method is called from trio. Made by
    :meth:`connect` (or from an :class:`Access` a loader read)."""

    def __init__(self, access: Access, settings: KubeSettings) -> None:
        self.access = access
        self.http = Http(access.endpoint, access.headers)
        self.host = access.host
        self.settings = settings
        self.calls: dict[tuple[str, str], int] = {}  # (verb, resource) → count
        # (verb, resource, code) → count, once answered (code_label: bounded)
        self.answers: dict[tuple[str, str, str], int] = {}
        self.credential_reloads = 0  # after a 401: the token re-read
        self.unreachable = ""  # why the last call did not reach the server ("": it did)
        self._on_unreachable: list[Callable[[], None]] = []

    @classmethod
    async def connect(cls, settings: KubeSettings) -> Api:
        """The configuration netctl reads itself, else kubernetes-asyncio's loaders' (they
        run on the asyncio loop trio-asyncio opened: :mod:`netctl.kubeapi.full`)."""
        access: Access | None = netctl_access(settings)
        if access is None:
            from netctl.kubeapi import full

            access = await full.configuration(settings)
        return cls(access, settings)

    @property
    def full(self) -> bool:
        """Whether kubernetes-asyncio read the configuration."""
        return self.access.loader != "netctl"

    async def authorization(self) -> str:
        """The ``Authorization`` value the calls carry (``Bearer …``; an exec plugin's or
        OIDC token refreshed); "" when the credentials are no token."""
        return await self.access.authorization()

    async def close(self) -> None:
        await self.http.aclose()

    async def _reload_credentials(self) -> None:
        self.credential_reloads += 1
        await self.access.reload()

    def _not_reachable(self, why: object) -> str:
        """The words for a call that did not reach the server: its address, the step and
        the cause (:mod:`netctl.kubeapi.http`), and in-cluster where the address came
        from."""
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

    async def request(self, verb: str, method: str, path: str,
                      query: list[tuple[str, str]] | None = None, body: bytes | None = None,
                      content_type: str = "application/json", accept: str = JSON) -> bytes:
        """One request; its body (any 2xx: the callers need no finer code)."""
        self._count(verb, path)
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        target = _target(path, query)
        try:
            for attempt in range(2):
                answer = await self.http.request(method, target, headers, body,
                                                 self.settings.api_timeout)
                if answer.status != 401 or attempt:
                    break
                await self._reload_credentials()  # a rotated token: re-read, once
        except HttpError as exc:
            raise self._failed(verb, path, 0, self._not_reachable(exc)) from None
        if not 200 <= answer.status <= 299:
            raise self._failed(verb, path, answer.status, answer.reason, answer.body)
        self._answered(verb, path, 200)
        return answer.body

    def _failed(self, verb: str, path: str, status: int, reason: str, body: bytes = b""
                ) -> ApiError:
        """The error of a call answered ``status`` (0: not reached), counted as
        :meth:`_answered` counts it; the reason the server's Status gives, else
        ``reason``."""
        error = ApiError(status, reason_of(body) or reason, body)
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
        stream = await self._open_watch(path, params, accept)
        deadline = trio.current_time() + self.settings.watch_timeout + 30
        rest = b""
        try:
            while True:
                data = b""
                with trio.move_on_at(deadline):
                    data = await stream.receive()
                if not data:
                    return  # ended (or silent past the deadline): the caller renews it
                *lines, rest = (rest + data).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield line
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _open_watch(self, path: str, params: Query, accept: str) -> Stream:
        """A watch's stream, its status checked as :meth:`request` checks it."""
        target = _target(path, params)
        try:
            for attempt in range(2):
                stream = await self.http.open_stream(
                    "GET", target, {"Accept": accept}, self.settings.api_timeout)
                if 200 <= stream.status <= 299:
                    self._answered("watch", path, 200)
                    return stream
                body = b""
                with trio.move_on_after(self.settings.api_timeout):
                    while chunk := await stream.receive():
                        body += chunk
                await stream.aclose()
                if stream.status == 401 and not attempt:
                    await self._reload_credentials()  # re-read, once
                    continue
                raise self._failed("watch", path, stream.status, stream.reason, body)
        except HttpError as exc:
            raise self._failed("watch", path, 0, self._not_reachable(exc)) from None
        raise AssertionError("unreachable")


def with_api(settings: KubeSettings, fn: Callable[[Api], Awaitable[T]]) -> T:
    """``fn(api)`` from synchronous code (the CLI): its own trio run and API client, with
    the asyncio loop kubernetes-asyncio's loaders need only when the configuration is one
    netctl does not read itself (:mod:`netctl.kubeapi.full`)."""
    own = netctl_access(settings)  # read once: the kubeconfig, its CA and key

    async def call() -> T:
        api = Api(own, settings) if own is not None else await Api.connect(settings)
        try:
            return await fn(api)
        finally:
            await api.close()

    if own is not None:
        return trio.run(call)

    import trio_asyncio

    async def on_loop() -> T:
        async with trio_asyncio.open_loop():
            return await call()

    return trio.run(on_loop)


def _target(path: str, query: Query | None) -> str:
    return f"{path}?{urlencode(query)}" if query else path


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
