"""The kinds the fake serves, and what the API server knows about each: group, version,
plural, kind, scope, which fields a field selector may name, whether ``status`` is a
subresource, and whether the kind is a custom resource (CRD rules: a create or update body
must carry ``apiVersion`` and ``kind``, an update ``metadata.resourceVersion``; no
strategic-merge patch).

Built in: core/v1 ``pods``, ``events``, ``nodes``, ``namespaces``,
``coordination.k8s.io/v1`` ``leases`` (leader election: whereabouts' protocol, which
``netctl bench cluster`` runs as its baseline), ``resource.k8s.io/v1`` ``resourceclaims``
and ``resourceslices`` (DRA) and the NetworkAttachmentDefinition CRD
(``k8s.cni.cncf.io/v1``). Further CRDs come from
:func:`crd` at the fake's start-up. The discovery documents (``/api``, ``/apis``, …) are
built from the same table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_META_FIELDS = {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace"}


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    # field selector name → dotted path in the object (what the real server supports)
    fields: Mapping[str, str] = field(default_factory=lambda: dict(_META_FIELDS))
    status_subresource: bool = True
    custom: bool = False
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How the API server names the resource in messages: ``pods``, ``x.group``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def discovery(self) -> list[dict[str, Any]]:
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update",
                 "watch"]
        entries = [{"name": self.plural, "singularName": self.singular or self.kind.lower(),
                    "namespaced": self.namespaced, "kind": self.kind, "verbs": verbs}]
        if self.status_subresource:
            entries.append({"name": f"{self.plural}/status", "singularName": "",
                            "namespaced": self.namespaced, "kind": self.kind,
                            "verbs": ["get", "patch", "update"]})
        return entries


def crd(group: str, version: str, plural: str, kind: str, *, namespaced: bool = False,
        status: bool = True, fields: Iterable[str] = ()) -> Resource:
    """A custom resource, as a CustomResourceDefinition would declare it
    (``selectableFields`` are the extra ``fields``)."""
    selectable = dict(_META_FIELDS) if namespaced else {"metadata.name": "metadata.name"}
    selectable.update({f: f for f in fields})
    return Resource(group, version, plural, kind, namespaced, selectable,
                    status_subresource=status, custom=True)


PODS = Resource("", "v1", "pods", "Pod", True, {
    **_META_FIELDS,
    "spec.nodeName": "spec.nodeName", "spec.restartPolicy": "spec.restartPolicy",
    "spec.schedulerName": "spec.schedulerName",
    "spec.serviceAccountName": "spec.serviceAccountName",
    "spec.hostNetwork": "spec.hostNetwork", "status.phase": "status.phase",
    "status.podIP": "status.podIP", "status.nominatedNodeName": "status.nominatedNodeName",
})
EVENTS = Resource("", "v1", "events", "Event", True, {
    **_META_FIELDS,
    "involvedObject.kind": "involvedObject.kind",
    "involvedObject.namespace": "involvedObject.namespace",
    "involvedObject.name": "involvedObject.name", "involvedObject.uid": "involvedObject.uid",
    "involvedObject.apiVersion": "involvedObject.apiVersion",
    "involvedObject.resourceVersion": "involvedObject.resourceVersion",
    "involvedObject.fieldPath": "involvedObject.fieldPath",
    "reason": "reason", "reportingComponent": "reportingComponent",
    "source": "source.component", "type": "type",
}, status_subresource=False)
NODES = Resource("", "v1", "nodes", "Node", False, {
    "metadata.name": "metadata.name", "spec.unschedulable": "spec.unschedulable",
})
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False, {
    "metadata.name": "metadata.name", "status.phase": "status.phase",
})
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True,
                  status_subresource=False)
NADS = crd("k8s.cni.cncf.io", "v1", "network-attachment-definitions",
           "NetworkAttachmentDefinition", namespaced=True, status=False)

# DRA (resource.k8s.io/v1, Kubernetes 1.34 and later): a claim's status is a subresource
# (the allocation and the drivers' per-device status, networkData among it); slices are
# cluster-scoped and selectable by the node and the driver that publish them
RESOURCECLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
RESOURCESLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, {
    "metadata.name": "metadata.name", "spec.nodeName": "spec.nodeName",
    "spec.driver": "spec.driver",
}, status_subresource=False)

BUILTIN = (PODS, EVENTS, NODES, NAMESPACES, LEASES, NADS, RESOURCECLAIMS, RESOURCESLICES)

# CRDs a test or a bench adds: netctl's address blocks, whereabouts' records
IPAMBLOCKS = crd("ipam.netctl.dev", "v1", "ipamblocks", "IPAMBlock")
IPPOOLS = crd("whereabouts.cni.cncf.io", "v1alpha1", "ippools", "IPPool", namespaced=True)
RESERVATIONS = crd("whereabouts.cni.cncf.io", "v1alpha1", "overlappingrangeipreservations",
                   "OverlappingRangeIPReservation", namespaced=True)


class Registry:
    """The served resources, looked up by URL parts or by a test's short name."""

    def __init__(self, resources: Iterable[Resource]) -> None:
        self.all: tuple[Resource, ...] = tuple(resources)
        self._by_path = {(r.group, r.version, r.plural): r for r in self.all}
        if len(self._by_path) != len(self.all):
            raise ValueError("two resources share group, version and plural")

    def at(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_path.get((group, version, plural))

    def named(self, name: str) -> Resource:
        """``pods``, ``ipamblocks``, or ``ipamblocks.ipam.netctl.dev`` when a plural is
        served by two groups."""
        found = [r for r in self.all if name in (r.plural, r.qualified, r.kind)]
        if len(found) != 1:
            known = ", ".join(sorted(r.qualified for r in self.all))
            what = "ambiguous" if found else "unknown"
            raise KeyError(f"{what} resource {name!r} (served: {known})")
        return found[0]

    def groups(self) -> dict[str, list[str]]:
        """Non-core group → its versions, in registration order."""
        out: dict[str, list[str]] = {}
        for r in self.all:
            if r.group and r.version not in out.setdefault(r.group, []):
                out[r.group].append(r.version)
        return out

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        served = [r for r in self.all if (r.group, r.version) == (group, version)]
        if not served:
            return None
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": served[0].api_version,
                "resources": [e for r in served for e in r.discovery()]}

    def group_doc(self, group: str) -> dict[str, Any] | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": listed,
                "preferredVersion": listed[0]}

    def group_list(self) -> dict[str, Any]:
        docs = [self.group_doc(g) for g in self.groups()]
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [{k: v for k, v in d.items() if k not in ("kind", "apiVersion")}
                           for d in docs if d]}
