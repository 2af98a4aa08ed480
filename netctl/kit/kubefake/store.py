"""The cluster's state and the API server's rules over it, without HTTP (an etcd plus
the apiserver's registry, in one synchronous object).

How it works:

- One global resourceVersion, an int counter shown as a string; every write (create,
  update, patch, delete, a finalizer-pending delete) takes the next value and stamps it on
  the written object. Stored objects are never mutated: each write stores a new dict, so
  the history and the watchers may share them.
- Every write is a :class:`Change` appended to a bounded history (``history_size``) and
  offered at once to every registered :class:`Watcher`, which sees it translated through
  its namespace and selectors the way the apiserver's watch cache does: an object that
  starts matching arrives as ADDED, one that stops matching as DELETED (its old state,
  at the new resourceVersion).
- A watch from resourceVersion N replays the history after N; N older than what the
  history still holds is :func:`~.errors.expired` (410), N newer than the counter is
  :func:`~.errors.too_large` (504). A watch without a resourceVersion (or "0") starts
  with a synthetic ADDED for each current object.
- Optimistic concurrency: an update or patch whose object carries a
  ``metadata.resourceVersion`` (or ``uid``) different from the stored one is a 409
  Conflict; a delete's ``preconditions`` likewise. A custom resource's update must carry
  one (422 otherwise, as for CRDs). A write that changes nothing keeps the
  resourceVersion and emits no event.
- ``status`` is a subresource where the kind has one: the main resource's writes keep the
  stored status, the subresource's writes change the status alone.
- Finalizers: a delete of an object with finalizers sets ``deletionTimestamp`` (MODIFIED);
  the write that empties them deletes it. With ``graceful_pod_deletion``, deleting a
  scheduled pod without ``gracePeriodSeconds: 0`` only marks it (as the kubelet would then
  finish it), so tests can play the kubelet.
- DRA (:mod:`.dra`): a pod's resource claims and a claim's status are validated as the real
  server validates them, and a claim's status write that changes ``status.devices`` is
  authorized per driver (the synthetic ``resourceclaims/driver`` check) for the request's
  :class:`~.dra.Requester` through ``authorize``; a write made without one (the test's own)
  is the cluster admin's.

Every rule raises :class:`~.errors.ApiError`; the HTTP layer only translates.
"""

from __future__ import annotations

import collections
import datetime
import json
import random
import re
import uuid
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec

from . import dra, errors, patching
from .resources import PODS, RESOURCECLAIMS, Registry, Resource
from .selectors import Selector

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ANNOTATIONS_MAX = 256 * 1024
T = TypeVar("T")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what generateName draws from


def clone(obj: T) -> T:
    """A deep copy of a JSON-shaped value."""
    copied: T = msgspec.json.decode(msgspec.json.encode(obj), type=type(obj))
    return copied


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: Resource
    obj: dict[str, Any]  # after the write (DELETED: the last state, at the new rv)
    old: dict[str, Any] | None  # before the write (MODIFIED only)


class Watcher(Protocol):
    resource: Resource
    namespace: str  # "" for every namespace
    selector: Selector

    def deliver(self, type_: str, obj: dict[str, Any]) -> None: ...


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    new = dict(obj)
    new["metadata"] = {**_meta(obj), "resourceVersion": str(rv)}
    return new


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """What ``metadata.generation`` counts changes of: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def translate(change: Change, w: Watcher) -> tuple[str, dict[str, Any]] | None:
    """The event ``w`` sees for ``change``, if any (the watch cache's filtering)."""
    if change.resource is not w.resource:
        return None
    if w.namespace and _meta(change.obj).get("namespace") != w.namespace:
        return None
    now_matches = w.selector.matches(change.obj)
    if change.type != "MODIFIED" or change.old is None:
        return (change.type, change.obj) if now_matches else None
    was_matching = w.selector.matches(change.old)
    if now_matches:
        return ("MODIFIED" if was_matching else "ADDED", change.obj)
    if was_matching:
        return ("DELETED", _with_rv(change.old, change.rv))
    return None


def _brief(body: dict[str, Any]) -> str:
    """The start of a body, as the real server quotes it in a decoding error."""
    text = json.dumps(body, separators=(",", ":"))
    return text if len(text) <= 80 else text[:77] + "..."


class Store:
    def __init__(self, registry: Registry, *, history_size: int = 1000,
                 graceful_pod_deletion: bool = False,
                 authorize: dra.Authorize | None = None) -> None:
        self.registry = registry
        self.authorize: dra.Authorize = authorize or (lambda *_: False)
        self.history_size = history_size
        self.graceful_pod_deletion = graceful_pod_deletion
        self.rv = 1  # never "0": that one means "any" to a watch or a list
        self.oldest = 1  # the lowest resourceVersion a watch may resume from
        self.history: collections.deque[Change] = collections.deque()
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            r.qualified: {} for r in registry.all}
        self._watchers: set[Watcher] = set()

    # -- reads ---------------------------------------------------------------------------

    def get(self, res: Resource, ns: str, name: str) -> dict[str, Any]:
        found = self._objects[res.qualified].get((ns if res.namespaced else "", name))
        if found is None:
            raise errors.not_found(res, name)
        return found

    def select(self, res: Resource, ns: str, selector: Selector) -> list[dict[str, Any]]:
        table = self._objects[res.qualified]
        return [table[key] for key in sorted(table)
                if (not ns or key[0] == ns) and selector.matches(table[key])]

    # -- writes --------------------------------------------------------------------------

    def create(self, res: Resource, ns: str, body: Any, *, from_api: bool = True) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request is not a JSON object")
        self._check_type(res, body, from_api)
        obj = clone(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
        name = meta.get("name") or ""
        if not name:
            raise errors.invalid(res, "", ["metadata.name: Required value: name or "
                                           "generateName is required"])
        if (ns if res.namespaced else "", name) in self._objects[res.qualified]:
            raise errors.already_exists(res, name)
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        if from_api and res.custom and res.status_subresource:
            obj.pop("status", None)
        self._validate(res, obj)
        return self._commit(res, "ADDED", obj, None)

    def update(self, res: Resource, ns: str, name: str, body: Any, subresource: str = "",
               *, from_api: bool = True, who: dra.Requester | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request is not a JSON object")
        self._check_type(res, body, from_api)
        return self._replace(res, ns, name, body, subresource, require_rv=res.custom,
                             who=who, verb="update")

    def patch(self, res: Resource, ns: str, name: str, content_type: str, body: Any,
              subresource: str = "", *, who: dra.Requester | None = None) -> dict[str, Any]:
        old = self.get(res, ns, name)
        if content_type == patching.JSON_PATCH:
            candidate = patching.json_patch(old, body)
        elif content_type == patching.MERGE or (content_type == patching.STRATEGIC
                                                and not res.custom):
            if not isinstance(body, dict):
                raise errors.bad_request("a merge patch must be a JSON object")
            candidate = patching.merge(old, body)
        else:
            raise errors.unsupported_media_type(content_type)
        if not isinstance(candidate, dict):
            raise errors.invalid(res, name, ["the patched object is not a JSON object"])
        return self._replace(res, ns, name, candidate, subresource, require_rv=False,
                             who=who, verb="patch")

    def delete(self, res: Resource, ns: str, name: str, options: Any = None) -> dict[str, Any]:
        old = self.get(res, ns, name)
        options = options if isinstance(options, dict) else {}
        meta = _meta(old)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise errors.conflict(res, name, f"Precondition failed: UID in precondition: "
                                  f"{pre['uid']}, UID in object meta: {meta['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(res, name, "Precondition failed: ResourceVersion in "
                                  f"precondition: {pre['resourceVersion']}, ResourceVersion "
                                  f"in object meta: {meta['resourceVersion']}")
        grace = options.get("gracePeriodSeconds")
        if meta.get("finalizers") or (
                self.graceful_pod_deletion and res is PODS and grace != 0
                and (old.get("spec") or {}).get("nodeName")):
            if meta.get("deletionTimestamp"):
                if grace == 0 and not meta.get("finalizers"):
                    return self._commit(res, "DELETED", old, None)
                return old
            new = clone(old)
            if grace is None:
                grace = 0 if meta.get("finalizers") else (
                    (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            new["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=grace)
            return self._commit(res, "MODIFIED", new, old)
        return self._commit(res, "DELETED", old, None)

    # -- watches -------------------------------------------------------------------------

    def watch(self, w: Watcher, resource_version: str | None,
              initial_state: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """Register ``w`` and return the events it gets first: the current objects as
        ADDED (no resourceVersion, "0", or ``initial_state``), else the history after the
        given resourceVersion."""
        if resource_version in (None, "", "0") or initial_state:
            events = [("ADDED", obj) for obj in self.select(w.resource, w.namespace, w.selector)]
        else:
            try:
                asked = int(str(resource_version))
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {resource_version!r}"
                                         ) from None
            if asked < self.oldest:
                raise errors.expired(asked, self.oldest)
            if asked > self.rv:
                raise errors.too_large(asked, self.rv)
            events = [e for ch in self.history if ch.rv > asked
                      for e in [translate(ch, w)] if e is not None]
        self._watchers.add(w)
        return events

    def unwatch(self, w: Watcher) -> None:
        self._watchers.discard(w)

    def compact(self) -> None:
        """Forget the history: every resourceVersion handed out so far is too old to
        resume from, the current one included (as if a write to a kind the fake does not
        serve took the next revision and etcd was compacted past it)."""
        self.history.clear()
        self.rv += 1
        self.oldest = self.rv

    def new_history(self) -> None:
        """A new etcd restored from the objects: each object gets a fresh resourceVersion,
        the history is empty, and every earlier resourceVersion is too old."""
        for table in self._objects.values():
            for key, obj in table.items():
                self.rv += 1
                table[key] = _with_rv(obj, self.rv)
        self.compact()

    # -- rules ---------------------------------------------------------------------------

    def _replace(self, res: Resource, ns: str, name: str, candidate: dict[str, Any],
                 subresource: str, *, require_rv: bool, who: dra.Requester | None = None,
                 verb: str = "update") -> dict[str, Any]:
        old = self.get(res, ns, name)
        meta, old_meta = _meta(candidate), _meta(old)
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not "
                                     f"match the name on the URL ({name})")
        rv = meta.get("resourceVersion")
        if not rv:
            if require_rv:
                raise errors.invalid(res, name, ["metadata.resourceVersion: Invalid value: "
                                                 "0x0: must be specified for an update"])
        elif rv != old_meta["resourceVersion"]:
            raise errors.conflict(res, name)
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise errors.conflict(res, name, f"Precondition failed: UID in precondition: "
                                  f"{meta['uid']}, UID in object meta: {old_meta['uid']}")
        if subresource == "status":
            new = clone(old)
            if "status" in candidate:
                new["status"] = clone(candidate["status"])
            else:
                new.pop("status", None)
        else:
            new = clone(candidate)
            new_meta = new.setdefault("metadata", {})
            for key in ("uid", "creationTimestamp", "namespace", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "generation"):
                if key in old_meta:
                    new_meta[key] = old_meta[key]
                else:
                    new_meta.pop(key, None)
            new_meta["name"] = name
            new["apiVersion"], new["kind"] = res.api_version, res.kind
            if res.status_subresource:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if _content(new) != _content(old):
                new_meta["generation"] = old_meta.get("generation", 0) + 1
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            return old
        self._validate(res, new)
        if res is RESOURCECLAIMS and subresource == "status" and who is not None:
            causes = dra.device_status_authorization(
                old.get("status") or {}, new.get("status") or {}, who, verb, ns, self.authorize)
            if causes:
                raise errors.invalid(res, name, causes)
        if old_meta.get("deletionTimestamp") and not _meta(new).get("finalizers") and (
                not (self.graceful_pod_deletion and res is PODS)):
            return self._commit(res, "DELETED", new, None)
        return self._commit(res, "MODIFIED", new, old)

    def _check_type(self, res: Resource, body: dict[str, Any], from_api: bool = True) -> None:
        # a custom resource's body is decoded as unstructured JSON, which needs both: the
        # real server answers 400 without them (built-in kinds default to the URL's)
        if from_api and res.custom:
            for key, what in (("kind", "Kind"), ("apiVersion", "Version")):
                if not body.get(key):
                    raise errors.bad_request(
                        f"{res.kind} in version \"{res.version}\" cannot be handled as a "
                        f"{res.kind}: Object '{what}' is missing in '{_brief(body)}'")
        if body.get("apiVersion") not in (None, "", res.api_version):
            raise errors.bad_request(f"the API version in the data ({body['apiVersion']}) does "
                                     f"not match the expected API version ({res.api_version})")
        if body.get("kind") not in (None, "", res.kind):
            raise errors.bad_request(f"the kind in the data ({body['kind']}) does not match "
                                     f"the expected kind ({res.kind})")

    def _validate(self, res: Resource, obj: dict[str, Any]) -> None:
        meta = _meta(obj)
        name = meta.get("name", "")
        causes: list[str] = []
        pattern = _DNS_LABEL if res.plural == "namespaces" else _SUBDOMAIN
        if not isinstance(name, str) or len(name) > 253 or not pattern.match(name):
            causes.append(f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
                          f"{'label' if pattern is _DNS_LABEL else 'subdomain'} must consist "
                          "of lower case alphanumeric characters, '-' or '.', and must start "
                          "and end with an alphanumeric character")
        for field in ("labels", "annotations"):
            values = meta.get(field) or {}
            if not isinstance(values, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
                raise errors.bad_request(f"json: cannot unmarshal metadata.{field}: want a map "
                                         "of strings to strings")
            causes.extend(f'metadata.{field}: Invalid value: "{k}": not a qualified name'
                          for k in values if not _QUALIFIED.match(k))
        labels = meta.get("labels") or {}
        causes.extend(f'metadata.labels: Invalid value: "{v}": a valid label must be an empty '
                      "string or consist of alphanumeric characters, '-', '_' or '.', and "
                      "must start and end with an alphanumeric character"
                      for v in labels.values() if len(v) > 63 or not _LABEL_VALUE.match(v))
        annotations = meta.get("annotations") or {}
        if sum(len(k) + len(v) for k, v in annotations.items()) > ANNOTATIONS_MAX:
            causes.append(f"metadata.annotations: Too long: must have at most {ANNOTATIONS_MAX} "
                          "bytes")
        if res is PODS:
            containers = (obj.get("spec") or {}).get("containers")
            if not isinstance(containers, list) or not containers:
                causes.append("spec.containers: Required value")
            elif not all(isinstance(c, dict) and c.get("name") and c.get("image")
                         for c in containers):
                causes.append("spec.containers: Invalid value: every container needs a name "
                              "and an image")
            causes += dra.pod_causes(obj)
        if res is RESOURCECLAIMS:
            causes += dra.claim_status_causes(obj.get("status") or {})
        if causes:
            raise errors.invalid(res, str(name), causes)

    def _commit(self, res: Resource, type_: str, obj: dict[str, Any],
                old: dict[str, Any] | None) -> dict[str, Any]:
        self.rv += 1
        stored = _with_rv(obj, self.rv)
        meta = stored["metadata"]
        key = (meta.get("namespace", "") if res.namespaced else "", meta["name"])
        if type_ == "DELETED":
            self._objects[res.qualified].pop(key, None)
        else:
            self._objects[res.qualified][key] = stored
        change = Change(self.rv, type_, res, stored, old)
        self.history.append(change)
        while len(self.history) > self.history_size:
            self.oldest = self.history.popleft().rv
        for w in list(self._watchers):
            event = translate(change, w)
            if event is not None:
                w.deliver(*event)
        return stored
