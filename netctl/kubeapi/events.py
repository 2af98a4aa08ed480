"""The Events netctl posts on a pod — Warning on a refused one, Normal for a network
hot-plugged — a repeat counted on the Event already posted, as kubelet's event recorder
(client-go's correlator) counts one: a sandbox the runtime ADDs again every few seconds
leaves one Event whose ``count`` grows, not one object in etcd per try.

The same Event is one pod (namespace, name and UID), type, reason and message
(:class:`Key`). :class:`EventLog` (pure) decides what to write: a new Event named as
kubelet names its own, or the one it knows with its count one higher (at most ``size``
remembered, each for ``ttl`` seconds after its last repeat). :class:`EventRecorder`
writes it: a create, or a merge patch of ``count`` and ``lastTimestamp``; a patch
answered 404 (the Event expired) creates it again, a create answered 409 (an earlier
create's answer was lost) patches it, as client-go does. Best effort: a failure is
logged, never fails the ADD.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

import msgspec

from netctl.cni.request import Pod
from netctl.errors import EVENT_NOTE_MAX
from netctl.kubeapi.api import PATCH_MERGE, Api, ApiError

log = logging.getLogger("netctl.kube")

LOG_SIZE = 4096  # Events remembered (client-go's correlator: 4096)
LOG_TTL = 600.0  # seconds an Event is counted on after its last repeat
NAME_MAX = 253  # an Event's name is a DNS subdomain


@dataclass(frozen=True)
class Key:
    """What makes two refusals the same Event."""

    pod: Pod
    reason: str
    message: str
    type: str = "Warning"  # or "Normal"


@dataclass(frozen=True)
class Occurrence:
    """One Event to write: ``known`` when it is in the API already (patch it)."""

    name: str
    count: int
    first: str  # firstTimestamp
    last: str  # lastTimestamp
    known: bool


@dataclass
class _Entry:
    name: str
    count: int
    first: str
    seen: float  # monotonic seconds of the last repeat
    known: bool = False


def timestamp(wall: float) -> str:
    """An Event's timestamp (RFC 3339, whole seconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


def event_name(pod: str, wall_ns: int) -> str:
    """``<pod>.<hex nanoseconds>``, as kubelet names its Events; a pod name too long for
    the suffix is cut (and ends with an alphanumeric, as a DNS subdomain must)."""
    suffix = f".{wall_ns:x}"
    return pod[:NAME_MAX - len(suffix)].rstrip(".-") + suffix


class EventLog:
    """The Events this daemon has posted, by :class:`Key` (least recently seen first)."""

    def __init__(self, size: int = LOG_SIZE, ttl: float = LOG_TTL) -> None:
        self.size, self.ttl = size, ttl
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def observe(self, key: Key, wall_ns: int, mono: float) -> Occurrence:
        """One more occurrence of ``key`` at ``wall_ns`` (nanoseconds since the epoch) and
        ``mono`` (monotonic seconds): the Event to write."""
        last = timestamp(wall_ns / 1e9)
        entry = self._entries.pop(key, None)
        if entry is None or mono - entry.seen > self.ttl:
            entry = _Entry(event_name(key.pod.name, wall_ns), 0, last, mono)
        entry.count += 1
        entry.seen = mono
        self._entries[key] = entry  # the most recently seen, last
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return Occurrence(entry.name, entry.count, entry.first, last, entry.known)

    def written(self, key: Key, name: str) -> None:
        """The Event ``name`` of ``key`` is in the API: a repeat patches it."""
        entry = self._entries.get(key)
        if entry is not None and entry.name == name:
            entry.known = True


class EventRecorder:
    """Posts the Events of one node's daemon, repeats counted (:class:`EventLog`)."""

    def __init__(self, api: Api, node: str, events: EventLog | None = None) -> None:
        self.api, self.node = api, node
        self.posted = events if events is not None else EventLog()

    async def warn(self, pod: Pod, reason: str, message: str) -> None:
        """A Warning Event on the pod, or one more count of the same one (best effort: a
        failure is only logged)."""
        await self.post(pod, reason, message, "Warning")

    async def normal(self, pod: Pod, reason: str, message: str) -> None:
        """A Normal Event on the pod (what netctl did to it: a network hot-plugged), counted
        and written as :meth:`warn`'s."""
        await self.post(pod, reason, message, "Normal")

    async def post(self, pod: Pod, reason: str, message: str, type: str) -> None:
        """An Event of ``type`` (Warning or Normal) on the pod, or one more count of the
        same one (best effort: a failure is only logged)."""
        key = Key(pod, reason, message[:EVENT_NOTE_MAX], type)
        occ = self.posted.observe(key, time.time_ns(), time.monotonic())
        try:
            if occ.known and await self._patch(key, occ):
                return
            try:
                await self._create(key, occ)
            except ApiError as exc:
                if exc.status != 409 or not await self._patch(key, occ):
                    raise
        except ApiError as exc:
            log.warning("event %s on pod %s not posted: %s", reason, pod.key, exc)

    def _path(self, namespace: str) -> str:
        return f"/api/v1/namespaces/{namespace}/events"

    async def _create(self, key: Key, occ: Occurrence) -> None:
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"name": occ.name, "namespace": key.pod.namespace},
                 "involvedObject": {"kind": "Pod", "namespace": key.pod.namespace,
                                    "name": key.pod.name, "uid": key.pod.uid,
                                    "apiVersion": "v1"},
                 "reason": key.reason, "message": key.message, "type": key.type,
                 "source": {"component": "netctl", "host": self.node},
                 "firstTimestamp": occ.first, "lastTimestamp": occ.last,
                 "count": occ.count}
        await self.api.request("create", "POST", self._path(key.pod.namespace),
                               body=msgspec.json.encode(event))
        self.posted.written(key, occ.name)

    async def _patch(self, key: Key, occ: Occurrence) -> bool:
        """The count and lastTimestamp of the Event; False when it is not there (404)."""
        body = {"count": occ.count, "lastTimestamp": occ.last}
        try:
            await self.api.request("patch", "PATCH", f"{self._path(key.pod.namespace)}/{occ.name}",
                                   body=msgspec.json.encode(body), content_type=PATCH_MERGE)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        self.posted.written(key, occ.name)
        return True
