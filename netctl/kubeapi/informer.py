"""A watched cache of one kind of object (msgspec structs of :mod:`netctl.kubeapi.objects`),
keyed by (namespace, name): list, then watch from the list's resourceVersion with
bookmarks. A key missing from a relist is reported as a deletion; a watch that ends or
drops resumes from the last resourceVersion seen; a 410 Gone relists; an unreachable API
server is retried with a capped back-off (0.5 s doubling to 30 s), the cache kept
meanwhile. :meth:`Informer.wait_for` waits for a key the watch has not delivered yet
(kubelet often runs a sandbox before the watch brings its pod).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Generic, TypeVar

import msgspec
import trio

from netctl.kubeapi.api import (
    JSON,
    METADATA_LIST,
    METADATA_WATCH,
    Api,
    ApiError,
    sleep_backoff,
)
from netctl.kubeapi.objects import Block, Nad, Node, Pod, Slice, Status

log = logging.getLogger("netctl.kube")


class _ListMeta(msgspec.Struct, forbid_unknown_fields=False):
    resourceVersion: str = ""
    # named "continue" on the wire: the next page of a paged list ("" on the last)
    next_page: str = msgspec.field(default="", name="continue")


PAGE = 500  # objects per page of a list the API server's watch cache does not serve


class _Event(msgspec.Struct, forbid_unknown_fields=False):
    type: str
    object: msgspec.Raw


class _RvOnly(msgspec.Struct, forbid_unknown_fields=False):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


class _List(_RvOnly):
    items: list[msgspec.Raw] | None = None  # a metadata-only list of nothing says null


T = TypeVar("T", Pod, Nad, Block, Node, Slice)
Key = tuple[str, str]


class Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


class Informer(Generic[T]):
    def __init__(self, api: Api, kind: type[T], path: str, query: list[tuple[str, str]],
                 on_delete: Callable[[T], None] | None = None,
                 on_put: Callable[[T], None] | None = None, *,
                 metadata_only: bool = False,
                 decode: Callable[[msgspec.Raw], T] | None = None) -> None:
        self.api, self.path, self.query = api, path, query
        # the objects' metadata only, listed and watched (the cache reads nothing else)
        self.accept = (METADATA_LIST, METADATA_WATCH) if metadata_only else (JSON, JSON)
        self.kind: type[T] = kind
        # an object's JSON (a list's items one by one) read as a ``kind``, or by ``decode``
        # (IPAMBlocks: a Block or a Borrow, objects.decode_block)
        self._decode: Callable[[msgspec.Raw], T] = decode or msgspec.json.Decoder(kind).decode
        self.on_delete: Callable[[T], None] | None = on_delete
        self.on_put: Callable[[T], None] | None = on_put  # every object listed or changed
        self.cache: dict[Key, T] = {}
        self.resource_version = ""
        self.synced = trio.Event()
        self.state = "starting"
        self.last_seen = 0.0  # monotonic time of the last list or event
        self.lists = self.watches = self.events = 0
        self.event_bytes = 0  # the watch events' bytes, as received
        self.list_bytes = self.list_objects = 0  # what the lists brought
        self._waiters: dict[Key | None, trio.Event] = {}  # None: the first list

    def age(self) -> float | None:
        """Seconds since the cache last heard from the API server (None: never)."""
        return time.monotonic() - self.last_seen if self.last_seen else None

    def counters(self) -> dict[str, int]:
        """What the cache has received so far: watch events and their bytes, lists, the
        objects and bytes they brought, watches opened (the metrics, ``netctl bench
        scale``)."""
        return {"events": self.events, "bytes": self.event_bytes, "lists": self.lists,
                "list_bytes": self.list_bytes, "list_objects": self.list_objects,
                "watches_opened": self.watches}

    def status(self) -> dict[str, object]:
        age = self.age()
        return {"state": self.state, "synced": self.synced.is_set(), "objects": len(self.cache),
                "resource_version": self.resource_version,
                "age_seconds": None if age is None else round(age, 3),
                "lists": self.lists, "watches": self.watches, "events": self.events}

    def reset(self) -> None:
        """Back to before its first list (its :meth:`run` was stopped): the cache emptied
        (no deletion reported), not synced; a later :meth:`run` lists afresh."""
        self.cache.clear()
        self.resource_version = ""
        self.synced = trio.Event()
        self.state = "stopped"

    async def wait_for(self, key: Key, timeout: float) -> T | None:
        """The object under ``key``, waiting up to ``timeout`` for the watch to bring it."""
        found = self.cache.get(key)
        if found is not None or timeout <= 0:
            return found
        event = self._waiters.setdefault(key, trio.Event())
        with trio.move_on_after(timeout):
            await event.wait()
        return self.cache.get(key)

    async def wait_synced(self, timeout: float) -> bool:
        """Whether the first list has filled the cache, waiting up to ``timeout``."""
        if not self.synced.is_set() and timeout > 0:
            event = self._waiters.setdefault(None, trio.Event())
            with trio.move_on_after(timeout):
                await event.wait()
        return self.synced.is_set()

    def wake_waiters(self) -> None:
        """End every :meth:`wait_for` and :meth:`wait_synced` now: nothing will come."""
        waiters, self._waiters = self._waiters, {}
        for event in waiters.values():
            event.set()

    def _put(self, obj: T) -> None:
        key = (obj.metadata.namespace, obj.metadata.name)
        self.cache[key] = obj
        if self.on_put is not None:
            self.on_put(obj)
        waiter = self._waiters.pop(key, None)
        if waiter is not None:
            waiter.set()

    def _drop(self, key: Key) -> None:
        obj = self.cache.pop(key, None)
        if obj is not None and self.on_delete is not None:
            self.on_delete(obj)

    async def _list(self) -> None:
        """The whole list: from the API server's watch cache (``resourceVersion=0``: no
        read of etcd, what keeps a control-plane restart's relists cheap for the cluster;
        the cache serves it in one piece), or, should the server answer that the cache
        cannot (410), consistently from etcd in pages of :data:`PAGE` objects."""
        self.state = "listing"
        try:
            pages = [await self._page([("resourceVersion", "0")])]
        except ApiError as exc:
            if exc.status != 410:  # the cache cannot serve it ("too old"): etcd, in pages
                raise
            pages = [await self._page([("limit", str(PAGE))])]
            while pages[-1].metadata.next_page:
                pages.append(await self._page([
                    ("limit", str(PAGE)),
                    ("continue", pages[-1].metadata.next_page)]))
        fresh: dict[Key, T] = {(o.metadata.namespace, o.metadata.name): o
                               for page in pages
                               for o in map(self._decode, page.items or ())}
        self.lists += 1
        listed = pages[-1]
        for key in [k for k in self.cache if k not in fresh]:
            self._drop(key)  # deleted while we were not watching
        for obj in fresh.values():
            self._put(obj)
        self.resource_version = listed.metadata.resourceVersion
        self.last_seen = time.monotonic()
        self.synced.set()
        waiter = self._waiters.pop(None, None)
        if waiter is not None:
            waiter.set()

    async def _page(self, extra: list[tuple[str, str]]) -> _List:
        data = await self.api.list(self.path, [*self.query, *extra], accept=self.accept[0])
        page = msgspec.json.decode(data, type=_List)
        self.list_bytes += len(data)
        self.list_objects += len(page.items or ())
        return page

    async def _watch(self) -> None:
        self.state = "watching"
        self.watches += 1
        query = [*self.query, ("resourceVersion", self.resource_version)]
        async with aclosing(self.api.watch(self.path, query, self.accept[1])) as lines:
            async for line in lines:
                self._event(line)

    def _event(self, line: bytes) -> None:
        self.last_seen = time.monotonic()
        try:
            event = msgspec.json.decode(line, type=_Event)
        except msgspec.MsgspecError as exc:
            log.warning("watch %s: an undecodable event ignored: %s", self.path, exc)
            return
        self.events += 1
        self.event_bytes += len(line)
        if event.type == "ERROR":
            status = msgspec.json.decode(event.object, type=Status)
            if status.code == 410:
                raise Gone(status.message)
            raise ApiError(status.code, status.message or status.reason)
        if event.type == "BOOKMARK":
            self.resource_version = msgspec.json.decode(
                event.object, type=_RvOnly).metadata.resourceVersion
            return
        obj = self._decode(event.object)
        if event.type in ("ADDED", "MODIFIED"):
            self._put(obj)
        elif event.type == "DELETED":
            self._drop((obj.metadata.namespace, obj.metadata.name))
        self.resource_version = obj.metadata.resourceVersion or self.resource_version

    async def run(self) -> None:
        """List, watch, resume, relist, back off — for ever (cancel to stop)."""
        failures = 0
        relist = True
        while True:
            try:
                if relist:
                    await self._list()
                    relist = False
                began, events = time.monotonic(), self.events
                await self._watch()
                if self.events == events and time.monotonic() - began < 1.0:
                    # ended at once with nothing in it: never renewed in a tight loop
                    await sleep_backoff(failures)
                    failures += 1
                    continue
                failures = 0  # the server ended the watch: resume from where it was
            except Gone as exc:
                log.info("watch %s: %s; relisting", self.path, exc or "410 Gone")
                relist = True
            except ApiError as exc:
                if exc.status == 410:
                    relist = True
                    continue
                self.state = f"retrying after: {exc}"
                log.warning("watch %s: %s; retrying", self.path, exc)
                self.wake_waiters()  # no event comes while it backs off
                await sleep_backoff(failures)
                failures += 1
            except msgspec.MsgspecError as exc:
                self.state = f"retrying after an undecodable list: {exc}"
                self.wake_waiters()
                await sleep_backoff(failures)
                failures += 1
                relist = True
