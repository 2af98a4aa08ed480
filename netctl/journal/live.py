"""Where the live attachments and allocations are, in memory: which container holds which
netns path and host-side link. The journal updates it in the step each write commits, so it
never lags behind the database. Pure data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from netctl.cni.types import host_interfaces
from netctl.errors import INVALID_CONFIG, CNIError


@dataclass(frozen=True)
class LiveAttachment:
    container_id: str
    netns: str
    links: frozenset[str] = frozenset()  # host-side interfaces in its latest result
    leaving: bool = False  # a DEL of it is under way in this daemon
    pod_uid: str = ""  # the Kubernetes pod it belongs to ("" outside Kubernetes)


@dataclass(frozen=True)
class LiveAllocation:
    container_id: str
    netns: str
    attachment_id: int | None  # None: a plain IPAM plugin's


Holder = LiveAttachment | LiveAllocation
K = TypeVar("K")
V = TypeVar("V")


class LiveIndex:
    """Live attachments by id and allocations by (scope, address), with lookups by host
    link name, netns path and a netns path's last component."""

    def __init__(self) -> None:
        self.attachments: dict[int, LiveAttachment] = {}
        self.allocations: dict[tuple[str, str], LiveAllocation] = {}
        self._by_container: dict[str, set[int]] = {}  # live attachments only
        self._by_link: dict[str, set[int]] = {}
        self._by_netns: dict[str, set[int | tuple[str, str]]] = {}
        self._by_name: dict[str, set[str]] = {}  # basename → netns paths
        self._by_pod: dict[str, set[int]] = {}  # pod UID → its live attachments
        self.failing: set[int] = set()  # live attachments with a failed DEL (stuck)

    # -- kept by the journal ---------------------------------------------------------------

    def attachment(self, att_id: int, container_id: str, netns: str,
                   result: dict[str, Any] | None = None, pod_uid: str = "") -> None:
        """An attachment is live (begun, or loaded), with its latest result."""
        self._drop_attachment(att_id)
        self._put_attachment(att_id, LiveAttachment(container_id, netns, _links(result),
                                                    pod_uid=pod_uid))

    def result(self, att_id: int, result: dict[str, Any] | None) -> None:
        """A newer result of a live attachment: its host links."""
        att = self.attachments.get(att_id)
        if att is not None:
            self._drop_attachment(att_id)
            self._put_attachment(att_id, replace(att, links=_links(result)))

    def leaving(self, att_ids: Iterable[int], leaving: bool = True) -> None:
        """A DEL of these attachments begins (or ended without removing them)."""
        for att_id in att_ids:
            att = self.attachments.get(att_id)
            if att is not None:
                self.attachments[att_id] = replace(att, leaving=leaving)

    def removed(self, att_ids: Iterable[int]) -> None:
        for att_id in att_ids:
            self._drop_attachment(att_id)
            self.failing.discard(att_id)

    def failed(self, att_ids: Iterable[int]) -> None:
        """A DEL of these live attachments failed (they count as stuck until removed)."""
        self.failing.update(a for a in att_ids if a in self.attachments)

    def allocated(self, key: tuple[str, str], container_id: str, netns: str,
                  attachment_id: int | None) -> None:
        """An allocation, by (scope, address), is live."""
        self.released([key])
        self.allocations[key] = LiveAllocation(container_id, netns, attachment_id)
        self._index_netns(netns, key)

    def released(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            alloc = self.allocations.pop(key, None)
            if alloc is not None:
                self._unindex_netns(alloc.netns, key)

    # -- asked by the reconciler -----------------------------------------------------------

    def holds(self, container_id: str) -> bool:
        return container_id in self._by_container

    def of_container(self, container_id: str) -> frozenset[int]:
        return frozenset(self._by_container.get(container_id, ()))

    def container(self, prefix: str, code: int = INVALID_CONFIG) -> str:
        """The one container with a live attachment whose id starts with ``prefix`` (an
        operator may give podman's short id); refused with ``code`` naming the fault when
        there is none, or more than one."""
        found = {c for c in self._by_container if c.startswith(prefix)} if prefix else set()
        if not found:
            raise CNIError(code, f"no live attachment of a container whose id starts with "
                           f"{prefix!r}")
        if len(found) > 1:
            raise CNIError(code, f"{prefix!r} names {len(found)} containers ("
                           f"{', '.join(sorted(found)[:5])}…): give more of the id")
        (container,) = found
        return container

    def of_pod(self, uid: str) -> set[str]:
        """The containers with a live attachment of the pod with this UID (none: a pod
        deletion has nothing to clean, and costs no journal read)."""
        return {self.attachments[a].container_id for a in self._by_pod.get(uid, ())}

    def at_link(self, name: str) -> Iterator[LiveAttachment]:
        for att_id in self._by_link.get(name, ()):
            yield self.attachments[att_id]

    def at_netns(self, path: str) -> Iterator[Holder]:
        for key in self._by_netns.get(path, ()):
            yield self.attachments[key] if isinstance(key, int) else self.allocations[key]

    def named(self, name: str) -> set[str]:
        """The netns paths whose last component is ``name``."""
        return set(self._by_name.get(name, ()))

    def netns_paths(self) -> set[str]:
        return set(self._by_netns)

    def is_leaving(self, holder: Holder) -> bool:
        """An attachment a DEL is removing, or an allocation of one (that DEL releases it)."""
        if isinstance(holder, LiveAttachment):
            return holder.leaving
        att = self.attachments.get(holder.attachment_id) \
            if holder.attachment_id is not None else None
        return att is not None and att.leaving

    # -- plumbing --------------------------------------------------------------------------

    def _put_attachment(self, att_id: int, att: LiveAttachment) -> None:
        self.attachments[att_id] = att
        self._by_container.setdefault(att.container_id, set()).add(att_id)
        if att.pod_uid:
            self._by_pod.setdefault(att.pod_uid, set()).add(att_id)
        for name in att.links:
            self._by_link.setdefault(name, set()).add(att_id)
        self._index_netns(att.netns, att_id)

    def _drop_attachment(self, att_id: int) -> None:
        att = self.attachments.pop(att_id, None)
        if att is None:
            return
        _discard(self._by_container, att.container_id, att_id)
        if att.pod_uid:
            _discard(self._by_pod, att.pod_uid, att_id)
        for name in att.links:
            _discard(self._by_link, name, att_id)
        self._unindex_netns(att.netns, att_id)

    def _index_netns(self, netns: str, key: int | tuple[str, str]) -> None:
        if netns:
            self._by_netns.setdefault(netns, set()).add(key)
            self._by_name.setdefault(os.path.basename(netns), set()).add(netns)

    def _unindex_netns(self, netns: str, key: int | tuple[str, str]) -> None:
        if _discard(self._by_netns, netns, key):
            _discard(self._by_name, os.path.basename(netns), netns)


def _discard(index: dict[K, set[V]], key: K, value: V) -> bool:
    """Take ``value`` out of ``index[key]`` (the key with its last value: True)."""
    values = index.get(key)
    if values is None:
        return False
    values.discard(value)
    if values:
        return False
    del index[key]
    return True


def _links(result: dict[str, Any] | None) -> frozenset[str]:
    return frozenset(name for name, _ in host_interfaces(result))

