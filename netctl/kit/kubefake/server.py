"""The HTTP face of the fake API server, and the controls a test holds.

:class:`FakeKube` runs aiohttp's low-level server on its own thread, in its own asyncio
loop, listening on 127.0.0.1 with an ephemeral port: trio tests, plain threads and
daemon processes (through :meth:`FakeKube.kubeconfig`) reach it over real TCP. All state
lives in one :class:`~.store.Store` that only the server's loop touches; the test-side
methods (``create``, ``compact``, ``drop_watches``, …) run their work on that loop and
wait for it, so they are safe from any thread and see a consistent cluster.

The HTTP layer routes a path (:func:`route`), counts the request per (verb, resource),
sleeps ``latency_ms`` if asked, and hands the call to the store; a store
:class:`~.errors.ApiError` becomes a ``Status`` body. A watch is a chunked response of
JSON lines fed by the store's fan-out, with bookmarks every ``bookmark_interval`` seconds
when the client allows them, ended by ``timeoutSeconds``, :meth:`FakeKube.drop_watches`
or :meth:`FakeKube.stop`, held back within :meth:`FakeKube.watches_held`. A watch from a
compacted resourceVersion is answered as the real server does: HTTP 200, then one ERROR
event carrying a 410 ``Expired`` Status.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import concurrent.futures
import contextlib
import threading
import traceback
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml
from aiohttp import web

from . import errors, selectors
from .dra import Requester
from .errors import ApiError
from .resources import BUILTIN, Registry, Resource
from .reviews import ACCESS_REVIEWS, TOKEN_REVIEWS, Grant, Reviews
from .store import Store, clone

T = TypeVar("T")
_END, _ABORT, _BOOKMARK = "END", "ABORT", "BOOKMARK"
PUBLIC = ("version", "healthz", "livez", "readyz")  # served without credentials
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
ADMIN = Requester("kubernetes-admin", ("system:masters",))  # the fake's own token, or none


@dataclass(frozen=True)
class Route:
    resource: Resource
    namespace: str  # "" for cluster-scoped kinds and for lists across namespaces
    name: str  # "" for the collection
    subresource: str  # "" or "status"

    @property
    def counted(self) -> str:
        return f"{self.resource.plural}/{self.subresource}" if self.subresource else \
            self.resource.plural


def route(registry: Registry, path: str) -> Route | dict[str, Any] | str:
    """A resource path → :class:`Route`; a discovery path → its document (a health
    check's: "ok"); else 404."""
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return {"major": "1", "minor": "31", "gitVersion": "v1.31.0-netctl-fake",
                "gitCommit": "0" * 40, "gitTreeState": "clean",
                "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5",
                "compiler": "gc", "platform": "linux/amd64"}
    if len(parts) == 1 and parts[0] in PUBLIC:
        return "ok"
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"]}
    if parts == ["apis"]:
        return registry.group_list()
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    elif len(parts) == 2 and parts[0] == "apis" and registry.group_doc(parts[1]):
        return registry.group_doc(parts[1]) or {}
    else:
        raise errors.path_not_found(path)
    if not rest:
        return registry.resource_list(group, version) or _raise(errors.path_not_found(path))
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        inner = registry.at(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    res = registry.at(group, version, rest[0])
    tail = rest[1:]
    if res is None or len(tail) > 2 or (res.namespaced and tail and not namespace):
        raise errors.path_not_found(path)
    subresource = tail[1] if len(tail) == 2 else ""
    if subresource and (subresource != "status" or not res.status_subresource):
        raise errors.path_not_found(path)
    return Route(res, namespace, tail[0] if tail else "", subresource)


def _raise(exc: Exception) -> Any:
    raise exc


def _true(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "t")


def _number(query: Mapping[str, str], name: str) -> float | None:
    if name not in query:
        return None
    try:
        return float(query[name])
    except ValueError:
        raise errors.bad_request(f"{name}: not a number: {query[name]!r}") from None


def verb(method: str, target: Route, query: Mapping[str, str]) -> str:
    """The verb the API server's audit log would record."""
    item = bool(target.name)
    if method == "GET":
        return "get" if item else ("watch" if _true(query.get("watch")) else "list")
    verbs = {("POST", False): "create", ("PUT", True): "update", ("PATCH", True): "patch",
             ("DELETE", True): "delete", ("DELETE", False): "deletecollection"}
    found = verbs.get((method, item))
    if found is None:
        raise errors.method_not_allowed(f"{method} {target.counted}")
    return found


class _Watch:
    """One open watch stream: the store delivers into its queue."""

    def __init__(self, target: Route, selector: selectors.Selector, bookmarks: bool) -> None:
        self.resource = target.resource
        self.namespace = target.namespace
        self.selector = selector
        self.bookmarks = bookmarks
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.held = False  # watches_held(from_event=…): this stream came to a held event

    def deliver(self, type_: str, obj: dict[str, Any]) -> None:
        self.queue.put_nowait((type_, obj))


def _line(type_: str, obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"type": type_, "object": obj}) + b"\n"


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status,
                        content_type="application/json")


class FakeKube:
    """A Kubernetes API server for tests. Use it as a context manager::

        with FakeKube(crds=[crd("ipam.netctl.dev", "v1", "ipamblocks", "IPAMBlock")]) as kube:
            kube.kubeconfig(tmp_path / "kubeconfig")
            kube.create("pods", pod("a", node="n1"))  # netctl_kit.kubefake.pod: a valid pod
            ...                                           # a daemon runs, ADDs pod a
            assert kube.count("get", "pods") == 0
    """

    def __init__(self, crds: Iterable[Resource] = (), *, token: str | None = None,
                 history_size: int = 1000, bookmark_interval: float = 1.0,
                 latency_ms: float = 0.0, graceful_pod_deletion: bool = False) -> None:
        self.registry = Registry([*BUILTIN, *crds])
        self.token = token  # None: no authentication; else the bearer token required
        self.latency_ms = latency_ms
        self.bookmark_interval = bookmark_interval
        self.server_errors: list[str] = []  # tracebacks of the fake's own failures (500s)
        self.port = 0
        self._reviews = Reviews()  # TokenReview and SubjectAccessReview: add_token(), grant()
        self._store = Store(self.registry, history_size=history_size,
                            graceful_pod_deletion=graceful_pod_deletion,
                            authorize=self._reviews.allows)
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._forbidden: dict[tuple[str, str], int] = {}  # (verb, resource) -> times left
        self._answers_held: dict[tuple[str, str], asyncio.Event] = {}
        self.held_answers = 0  # requests carried out whose answers were held
        self._watches: set[_Watch] = set()
        self._watches_changed = asyncio.Event()  # set, then replaced, at each open or close
        self._flowing = asyncio.Event()  # cleared within watches_held()
        self._flowing.set()
        # watches_held(from_event=…): the event a stream holds from (None: every stream,
        # from its next line)
        self._hold_from: Callable[[str, dict[str, Any]], bool] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._done: asyncio.Future[None] | None = None
        self._web: web.Server | None = None
        self._server: asyncio.Server | None = None

    # -- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> FakeKube:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Start the server's thread and loop, and serve."""
        ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(ready),),
                                        name="kubefake", daemon=True)
        self._thread.start()
        ready.wait()
        self.start()

    def close(self) -> None:
        if self._thread is None or self._loop is None or self._done is None:
            return
        self._await(self._unserve())
        self._loop.call_soon_threadsafe(self._done.set_result, None)
        self._thread.join()
        self._thread = None

    def start(self) -> None:
        """Serve (again) on the same port: the end of an outage."""
        self._await(self._serve())

    def stop(self) -> None:
        """An outage: stop listening and cut every connection, open watches included
        (clients see a reset mid-stream, then connection refused). The cluster's state
        is kept; the test-side methods still work."""
        self._await(self._unserve())

    def restart(self, *, new_history: bool = False) -> None:
        """Stop and start; with ``new_history`` the API server comes back on a new etcd:
        the same objects at new resourceVersions, every earlier one too old (410)."""
        self.stop()
        if new_history:
            self._call(self._store.new_history)
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: str | Path, *, token: str | None = None,
                   token_file: str | Path | None = None, namespace: str = "default") -> Path:
        """Write a kubeconfig that points at this server, with ``token`` (default: the
        server's own), a ``tokenFile``, or no credentials at all."""
        user: dict[str, str] = {}
        if token_file is not None:
            user["tokenFile"] = str(token_file)
        elif token is not None or self.token is not None:
            user["token"] = token if token is not None else str(self.token)
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                      "namespace": namespace}}],
        }
        path = Path(path)
        path.write_text(yaml.safe_dump(config))
        return path

    # -- controls ------------------------------------------------------------------------

    @property
    def request_counts(self) -> collections.Counter[tuple[str, str]]:
        """Requests so far per (verb, resource): ``("list", "pods")``,
        ``("patch", "pods/status")``, ``("watch", "network-attachment-definitions")``."""
        return self._call(lambda: collections.Counter(self._counts))

    def count(self, verb: str, resource: str) -> int:
        return self.request_counts[(verb, resource)]

    def forbid(self, verb: str, resource: str, times: int = 1_000_000) -> None:
        """Answer the next ``times`` requests of ``verb`` on ``resource`` (as counted:
        ``("patch", "pods")``) with 403 Forbidden, as an API server whose RBAC or an
        admission webhook refuses them; ``times=0`` lifts it."""
        self._call(lambda: self._forbidden.__setitem__((verb, resource), times))

    def add_token(self, token: str, user: str, groups: Iterable[str] = (), *,
                  node: str = "") -> None:
        """A TokenReview of ``token`` answers ``user`` (in ``groups`` and
        ``system:authenticated``); any other token is not authenticated. A request made
        with ``token`` is ``user``'s (``node``: the node of the pod a ServiceAccount token
        is bound to) where the fake authorizes within a write (a claim's
        ``status.devices``: :mod:`.dra`, by the rows of :meth:`grant`); made with any other
        token, or none, it is the cluster admin's."""
        def add() -> None:
            self._reviews.tokens[token] = (user, tuple(groups))
            self._reviews.nodes[token] = node
        self._call(add)

    def grant(self, subject: str, verb: str, resource: str, *, api_group: str = "",
              names: Iterable[str] = ()) -> None:
        """An RBAC rule bound to ``subject`` (a user, or ``group:NAME``) for
        SubjectAccessReviews: ``verb`` on ``resource`` (``nodes/netctl-journal`` names a
        subresource; ``*`` any), limited to resource ``names`` when given."""
        rule = Grant(subject, verb, resource, api_group, tuple(names))
        self._call(lambda: self._reviews.grants.append(rule))

    def reset_counts(self) -> None:
        self._call(self._counts.clear)

    @property
    def resource_version(self) -> str:
        return self._call(lambda: str(self._store.rv))

    def watches(self, resource: str | None = None) -> int:
        """How many watch streams are open now (on ``resource``, or on any)."""
        res = self.registry.named(resource) if resource else None
        return self._call(lambda: sum(1 for w in self._watches
                                      if res is None or w.resource is res))

    def wait_watches(self, n: int, resource: str | None = None, timeout: float = 10) -> None:
        """Wait until exactly ``n`` watch streams are open (on ``resource``, or on any):
        a daemon's watches established, or a client's closed stream noticed."""
        res = self.registry.named(resource) if resource else None

        async def wait() -> None:
            async with asyncio.timeout(timeout):
                await self._until_watches(n, res)
        self._await(wait())

    def compact(self) -> None:
        """Drop the history: a watch resumed from any resourceVersion seen so far gets
        410 Expired."""
        self._call(self._store.compact)

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch stream: cleanly (as the server does at a timeout), or with
        ``abort`` by cutting the connection mid-stream. Returns how many."""
        def drop() -> int:
            for w in self._watches:
                w.queue.put_nowait((_ABORT if abort else _END, None))
            return len(self._watches)
        return self._call(drop)

    @contextlib.contextmanager
    def watches_held(self, from_event: Callable[[str, dict[str, Any]], bool] | None = None,
                     ) -> Iterator[None]:
        """Within the block, open watch streams send nothing: the changes made meanwhile
        wait in each stream's queue and go out in order when the block ends — a lagging
        watch (the API server's watch cache behind its writes, as under load), while
        requests, GETs included, are answered at once. No bookmark is sent meanwhile (it
        would claim a resourceVersion whose changes have not been sent).

        With ``from_event`` (called with an event's type and object), each stream sends
        on until the first event ``from_event`` is true for, and holds that one and every
        line after it: a watch that lags from one change on (a client's own write it has
        not seen yet), the streams that never carry such an event flowing."""
        def hold() -> None:
            self._hold_from = from_event
            self._flowing.clear()

        def flow() -> None:
            self._hold_from = None
            self._flowing.set()
            for w in self._watches:
                w.held = False
        self._call(hold)
        try:
            yield
        finally:
            self._call(flow)

    @contextlib.contextmanager
    def answers_held(self, verb: str, resource: str) -> Iterator[None]:
        """Within the block, requests of ``verb`` (any but ``watch``) on ``resource`` (as
        counted) are carried out at once — a list is read then — but not answered until
        the block ends: the client's request succeeded and it does not know yet (the moment
        to kill it), or an answer that takes long (a first list on a big cluster, a server
        that accepts the connection and never answers). :attr:`held_answers` counts them."""
        self._call(lambda: self._answers_held.__setitem__((verb, resource), asyncio.Event()))
        try:
            yield
        finally:
            self._call(lambda: self._answers_held.pop((verb, resource)).set())

    def send_bookmarks(self) -> int:
        """A BOOKMARK now on every watch that allows them. Returns how many."""
        def send() -> int:
            chosen = [w for w in self._watches if w.bookmarks]
            for w in chosen:
                w.queue.put_nowait((_BOOKMARK, self._store.rv))
            return len(chosen)
        return self._call(send)

    # -- the cluster, without a client -----------------------------------------------------

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object (a copy), or None."""
        res = self.registry.named(resource)

        def get() -> dict[str, Any] | None:
            try:
                return clone(self._store.get(res, namespace or "", name))
            except ApiError:
                return None
        return self._call(get)

    def list(self, resource: str, namespace: str | None = None, *,
             label_selector: str | None = None, field_selector: str | None = None,
             ) -> list[dict[str, Any]]:
        res = self.registry.named(resource)
        selector = selectors.parse(label_selector, field_selector, res.fields)
        return self._call(lambda: clone(self._store.select(res, namespace or "", selector)))

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create as a client would (status kept); the namespace comes from the object's
        metadata, ``default`` when it names none."""
        res = self.registry.named(resource)
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        return self._call(lambda: clone(self._store.create(res, ns, obj, from_api=False)))

    def update(self, resource: str, obj: dict[str, Any], *, subresource: str = "",
               ) -> dict[str, Any]:
        res = self.registry.named(resource)
        meta = obj.get("metadata") or {}
        return self._call(lambda: clone(self._store.update(
            res, meta.get("namespace") or "default", meta.get("name", ""), obj, subresource,
            from_api=False)))

    def patch(self, resource: str, namespace: str | None, name: str,
              patch: dict[str, Any] | builtins.list[Any], *, subresource: str = "",
              ) -> dict[str, Any]:
        """A merge patch (a dict) or a JSON patch (a list); ``subresource="status"`` to
        change a status."""
        res = self.registry.named(resource)
        kind = "application/json-patch+json" if isinstance(patch, list) else \
            "application/merge-patch+json"
        return self._call(lambda: clone(self._store.patch(
            res, namespace or "", name, kind, patch, subresource)))

    def delete(self, resource: str, namespace: str | None, name: str, *,
               grace_period: int | None = None,
               preconditions: dict[str, str] | None = None) -> dict[str, Any]:
        res = self.registry.named(resource)
        options: dict[str, Any] = {"preconditions": preconditions or {}}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        return self._call(lambda: clone(self._store.delete(res, namespace or "", name,
                                                           options)))

    # -- the thread's side ---------------------------------------------------------------

    async def _main(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._done = self._loop.create_future()
        ready.set()
        await self._done

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop and return its result (or raise its error)."""
        assert self._loop is not None, "the fake is not open"
        if threading.current_thread() is self._thread:
            return fn()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
        self._loop.call_soon_threadsafe(run)
        return future.result(timeout=30)

    def _await(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "the fake is not open"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _serve(self) -> None:
        if self._server is not None:
            return
        self._web = web.Server(self._handle, handler_cancellation=True, access_log=None)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._web, "127.0.0.1", self.port,
                                                reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _unserve(self) -> None:
        if self._server is None or self._web is None:
            return
        self._server.close()
        for conn in self._web.connections:
            conn.force_close()
        await self._server.wait_closed()
        self._server = None
        # let the cancelled handlers run their clean-up before anyone looks at the state
        async with asyncio.timeout(5):
            await self._until_watches(0, None)

    async def _until_watches(self, n: int, res: Resource | None) -> None:
        while True:
            changed = self._watches_changed
            if sum(1 for w in self._watches if res is None or w.resource is res) == n:
                return
            await changed.wait()

    def _add_watch(self, watch: _Watch) -> None:
        self._watches.add(watch)
        self._watches_changed.set()
        self._watches_changed = asyncio.Event()

    def _remove_watch(self, watch: _Watch) -> None:
        self._store.unwatch(watch)
        self._watches.discard(watch)
        self._watches_changed.set()
        self._watches_changed = asyncio.Event()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            return await self._answer(request)
        except ApiError as exc:
            return _json(exc.status(), exc.code)
        except ConnectionResetError:  # the client went away mid-answer (killed): not ours
            return web.Response(status=499)
        except Exception:
            self.server_errors.append(traceback.format_exc())
            return _json(ApiError(500, "InternalError", "the fake failed; see "
                                  "FakeKube.server_errors").status(), 500)

    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        review = self._review(request)
        if review is not None:
            return await review
        target = route(self.registry, request.path)
        query = request.query
        action = ""
        if isinstance(target, Route):
            action = verb(request.method, target, query)
            self._counts[(action, target.counted)] += 1  # refused ones too: they were made
            left = self._forbidden.get((action, target.counted), 0)
            if left:
                self._forbidden[(action, target.counted)] = left - 1
                raise errors.forbidden(action, target.counted)
        if request.path.strip("/") not in PUBLIC and self.token is not None and \
                request.headers.get("Authorization") != f"Bearer {self.token}" and \
                self._reviews.requester(request.headers.get("Authorization", "")
                                        .removeprefix("Bearer ")) is None:
            raise errors.unauthorized()  # neither the fake's own token nor one add_token() made
        if isinstance(target, str):
            return web.Response(text=target)
        if not isinstance(target, Route):
            return _json(target)
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        if action == "watch":
            return await self._stream(request, target)
        answer = await self._carry_out(request, action, target)
        held = self._answers_held.get((action, target.counted))
        if held is not None:
            self.held_answers += 1
            await held.wait()
        return answer

    def _review(self, request: web.BaseRequest) -> Coroutine[Any, Any, web.Response] | None:
        """A TokenReview or a SubjectAccessReview (``create`` only, as the real server:
        nothing is stored), answered from :attr:`_reviews`; None for anything else."""
        parts = tuple(p for p in request.path.split("/") if p)
        if parts[:1] != ("apis",) or parts[1:] not in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            return None
        resource = parts[3]

        async def answer() -> web.Response:
            if request.method != "POST":
                raise errors.method_not_allowed(f"{request.method} {resource}")
            self._counts[("create", resource)] += 1
            left = self._forbidden.get(("create", resource), 0)
            if left:
                self._forbidden[("create", resource)] = left - 1
                raise errors.forbidden("create", resource)
            if self.token is not None and \
                    request.headers.get("Authorization") != f"Bearer {self.token}":
                raise errors.unauthorized()
            body = await self._body(request)
            if not isinstance(body, dict):
                raise errors.bad_request(f"a {resource} body must be an object")
            if self.latency_ms:
                await asyncio.sleep(self.latency_ms / 1000)
            review = self._reviews.token_review if resource == TOKEN_REVIEWS[2] else \
                self._reviews.access_review
            return _json(review(body), 201)
        return answer()

    async def _carry_out(self, request: web.BaseRequest, action: str,
                         target: Route) -> web.Response:
        query = request.query
        store, res, ns, name = self._store, target.resource, target.namespace, target.name
        if action == "get":
            return _json(store.get(res, ns, name))
        if action == "list":
            selector = selectors.parse(query.get("labelSelector"), query.get("fieldSelector"),
                                       res.fields)
            return _json({"kind": res.list_kind, "apiVersion": res.api_version,
                          "metadata": {"resourceVersion": str(store.rv)},
                          "items": store.select(res, ns, selector)})
        body = await self._body(request)
        if action == "create":
            return _json(store.create(res, ns, body), 201)
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        who = self._reviews.requester(bearer) or ADMIN
        if action == "update":
            return _json(store.update(res, ns, name, body, target.subresource, who=who))
        if action == "patch":
            return _json(store.patch(res, ns, name, request.content_type, body,
                                     target.subresource, who=who))
        options = body if isinstance(body, dict) else {}
        grace = _number(query, "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = int(grace)
        if action == "delete":
            return _json(store.delete(res, ns, name, options))
        selector = selectors.parse(query.get("labelSelector"), query.get("fieldSelector"),
                                   res.fields)
        for obj in store.select(res, ns, selector):
            store.delete(res, ns, obj["metadata"]["name"], options)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Success"})

    @staticmethod
    async def _body(request: web.BaseRequest) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise errors.bad_request(f"the body is not JSON: {exc}") from None

    async def _stream(self, request: web.BaseRequest, target: Route) -> web.StreamResponse:
        query = request.query
        res = target.resource
        watch = _Watch(target, selectors.parse(query.get("labelSelector"),
                                               query.get("fieldSelector"), res.fields),
                       _true(query.get("allowWatchBookmarks")))
        initial_state = _true(query.get("sendInitialEvents"))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            initial = self._store.watch(watch, query.get("resourceVersion"), initial_state)
        except ApiError as exc:
            if exc.code not in (410, 504):
                raise
            await response.prepare(request)
            await response.write(_line("ERROR", exc.status()))
            return response
        self._add_watch(watch)
        try:
            await response.prepare(request)
            for event in initial:
                await self._may_send(watch, *event)  # watches_held(): a resume lags too
                await response.write(_line(*event))
            if initial_state and watch.bookmarks:
                await response.write(self._bookmark(res, self._store.rv, end_of_initial=True))
            await self._follow(request, response, watch, _number(query, "timeoutSeconds"))
        finally:
            self._remove_watch(watch)
        return response

    async def _follow(self, request: web.BaseRequest, response: web.StreamResponse,
                      watch: _Watch, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        next_bookmark = loop.time() + self.bookmark_interval if watch.bookmarks else None
        while True:
            wakes = [t for t in (deadline, next_bookmark) if t is not None]
            try:
                kind, obj = await asyncio.wait_for(
                    watch.queue.get(), min(wakes) - loop.time() if wakes else None)
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    return
                # the queue is empty: every change up to the store's rv has been sent
                kind, obj = _BOOKMARK, self._store.rv
            if kind == _END:
                return
            if kind == _ABORT:
                assert request.transport is not None
                request.transport.abort()
                return
            await self._may_send(watch, kind, obj)
            if kind == _BOOKMARK:
                await response.write(self._bookmark(watch.resource, obj))
                if next_bookmark is not None:
                    next_bookmark = loop.time() + self.bookmark_interval
                continue
            await response.write(_line(kind, obj))

    async def _may_send(self, watch: _Watch, kind: str, obj: Any) -> None:
        """Wait until ``watch`` may send this line: at once, or when the
        :meth:`watches_held` block ends if the stream is held (from this line on)."""
        if self._flowing.is_set():
            return
        if self._hold_from is None or watch.held \
                or (kind != _BOOKMARK and self._hold_from(kind, obj)):
            watch.held = True
            await self._flowing.wait()  # sent when the block ends

    @staticmethod
    def _bookmark(res: Resource, rv: int, *, end_of_initial: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if end_of_initial:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return _line("BOOKMARK", {"kind": res.kind, "apiVersion": res.api_version,
                                  "metadata": meta})
