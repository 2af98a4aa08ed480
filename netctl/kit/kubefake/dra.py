"""What the real API server (v1.36) refuses in DRA writes, as the fake refuses it. Pure.

Each function returns the causes of a 422 ``Invalid`` (``field: Type: detail``, the real
server's wording), empty when the write stands:

- :func:`pod_causes`, for a pod written (the real ``validatePodResourceClaim`` and
  ``validatePodResourceClaimStatuses``, ``validatePodExtendedResourceClaimStatus``): each
  ``spec.resourceClaims[]`` entry names one of ``resourceClaimName`` and
  ``resourceClaimTemplateName``; each ``status.resourceClaimStatuses[]`` entry names an
  entry of ``spec.resourceClaims``, once; ``status.extendedResourceClaimStatus`` has request
  mappings whose containers request the resource, and a claim name. One more refusal the
  real validation does not make, as a state no real cluster produces (the resourceclaim
  controller writes a status entry only for a claim made from a template; a claim named
  directly is read from the spec): a status entry for an entry that names its claim
  directly.
- :func:`claim_status_causes`, for a ResourceClaim's status written (the real
  ``validateResourceClaimStatusUpdate``): every ``status.devices[]`` entry is an allocated
  device of the claim (driver, pool, device and shareID of an allocation result), once;
  its ``networkData`` has at most 16 addresses, each in canonical CIDR form, an interface
  name of at most 256 bytes and a hardware address of at most 128; at most 8 conditions,
  each with a type, a status True/False/Unknown, a reason and a lastTransitionTime.
- :func:`device_status_authorization`, the synthetic check the real server makes when a
  status write changes ``status.devices`` (``DRAResourceClaimGranularStatusAuthorization``,
  on by default in v1.36): for each driver whose entries were added, changed or removed, the
  requester needs the verb ``associated-node:<verb>`` (only tried for a ServiceAccount
  token bound to a pod of the node the claim is allocated on: its allocation's node
  selector names exactly that node by ``metadata.name``) or ``arbitrary-node:<verb>`` on
  ``resourceclaims/driver`` in ``resource.k8s.io``, the driver its resource name; refused,
  it is a 422 ``Forbidden`` cause on ``status.devices``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GROUP = "resource.k8s.io"
DRIVER_SUBRESOURCE = "resourceclaims/driver"
ASSOCIATED_NODE, ARBITRARY_NODE = "associated-node:", "arbitrary-node:"
SA_PREFIX = "system:serviceaccount:"
MAX_IPS, MAX_IFNAME, MAX_HWADDR, MAX_CONDITIONS = 16, 256, 128, 8
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


@dataclass(frozen=True)
class Requester:
    """Who makes a request: the user, its groups, and for a ServiceAccount token bound to
    a pod the node of that pod (``authentication.kubernetes.io/node-name``)."""

    user: str
    groups: tuple[str, ...] = ()
    node: str = ""

    @property
    def admin(self) -> bool:
        return "system:masters" in self.groups


# (requester, verb, group, resource, name) → allowed
Authorize = Callable[[Requester, str, str, str, str], bool]


def _q(value: Any) -> str:
    """A value as the real server quotes it in a cause: strings quoted, a Go struct as its
    JSON with the Go field names."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, str | dict) \
        else str(value)


def _claim_ref(ref: Mapping[str, Any]) -> dict[str, Any]:
    return {"Name": ref.get("name", ""), "ResourceClaimName": ref.get("resourceClaimName"),
            "ResourceClaimTemplateName": ref.get("resourceClaimTemplateName")}


def _device_id(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {"Driver": entry.get("driver", ""), "Pool": entry.get("pool", ""),
            "Device": entry.get("device", ""), "ShareID": entry.get("shareID") or ""}


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def _map(obj: Any, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


# -- pods -------------------------------------------------------------------------------------


def pod_causes(pod: Mapping[str, Any]) -> list[str]:
    spec, status = _map(pod, "spec"), _map(pod, "status")
    causes: list[str] = []
    direct: set[str] = set()
    names: set[str] = set()
    for i, ref in enumerate(_list(spec, "resourceClaims")):
        path = f"spec.resourceClaims[{i}]"
        ref = ref if isinstance(ref, Mapping) else {}
        name = ref.get("name")
        if not name:
            causes.append(f"{path}.name: Required value")
        elif name in names:
            causes.append(f"{path}.name: Duplicate value: {_q(name)}")
        names.add(str(name))
        has_claim = ref.get("resourceClaimName") is not None
        has_template = ref.get("resourceClaimTemplateName") is not None
        if has_claim and has_template:
            causes.append(f"{path}: Invalid value: {_q(_claim_ref(ref))}: at most one of "
                          "`resourceClaimName` or `resourceClaimTemplateName` may be specified")
        elif not has_claim and not has_template:
            causes.append(f"{path}: Invalid value: {_q(_claim_ref(ref))}: must specify one of: "
                          "`resourceClaimName`, `resourceClaimTemplateName`")
        elif has_claim:
            direct.add(str(name))
    seen: set[str] = set()
    for i, entry in enumerate(_list(status, "resourceClaimStatuses")):
        path = f"status.resourceClaimStatuses[{i}].name"
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if name not in names:
            causes.append(f"{path}: Invalid value: {_q(name)}: must match the name of an "
                          "entry in `spec.resourceClaims`")
        elif name in direct:
            causes.append(f"{path}: Invalid value: {_q(name)}: names an entry of "
                          "`spec.resourceClaims` with a `resourceClaimName`: no controller "
                          "writes a status for a claim the pod names directly (the fake "
                          "refuses a state a real cluster never produces)")
        if name in seen:
            causes.append(f"{path}: Duplicate value: {_q(name)}")
        seen.add(str(name))
    extended = status.get("extendedResourceClaimStatus")
    if isinstance(extended, Mapping):
        causes += _extended_causes(extended, spec)
    return causes


def _extended_causes(extended: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    path = "status.extendedResourceClaimStatus"
    containers = {c.get("name"): c for key in ("initContainers", "containers")
                  for c in _list(spec, key) if isinstance(c, Mapping)}
    causes = []
    mappings = _list(extended, "requestMappings")
    if not mappings:
        causes.append(f"{path}.requestMappings: Required value: at least one request "
                      "mapping is required")
    for i, m in enumerate(mappings):
        m = m if isinstance(m, Mapping) else {}
        container = containers.get(m.get("containerName"))
        if container is None:
            causes.append(f"{path}.requestMappings[{i}].containerName: Invalid value: "
                          f"{_q(m.get('containerName'))}: must match the name of an entry in "
                          "spec.initContainers.name or spec.containers.name")
        elif m.get("resourceName") not in _map(_map(container, "resources"), "requests"):
            causes.append(f"{path}.requestMappings[{i}].resourceName: Invalid value: "
                          f"{_q(m.get('resourceName'))}: must match the extended resource "
                          "name of an entry in spec.initContainers.resources.requests or "
                          "spec.containers.resources.requests")
    if not extended.get("resourceClaimName"):
        causes.append(f"{path}.resourceClaimName: Required value")
    return causes


# -- claims -----------------------------------------------------------------------------------


def _device_key(entry: Mapping[str, Any]) -> str:
    """The real server's shared device id: ``driver/pool/device[/shareID]``."""
    key = f"{entry.get('driver', '')}/{entry.get('pool', '')}/{entry.get('device', '')}"
    share = entry.get("shareID")
    return f"{key}/{share}" if share else key


def _results(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    allocation = status.get("allocation")
    if not isinstance(allocation, Mapping):
        return []
    return [r for r in _list(_map(allocation, "devices"), "results") if isinstance(r, Mapping)]


def claim_status_causes(status: Mapping[str, Any]) -> list[str]:
    allocated = {_device_key(r) for r in _results(status)}
    causes: list[str] = []
    seen: set[str] = set()
    for i, entry in enumerate(_list(status, "devices")):
        path = f"status.devices[{i}]"
        entry = entry if isinstance(entry, Mapping) else {}
        key = _device_key(entry)
        if key not in allocated:
            causes.append(f"{path}: Invalid value: {_q(_device_id(entry))}: must be an "
                          "allocated device in the claim")
        if key in seen:
            causes.append(f"{path}: Duplicate value: {_q(_device_id(entry))}")
        seen.add(key)
        causes += _network_data_causes(entry.get("networkData"), f"{path}.networkData")
        causes += _condition_causes(entry.get("conditions"), f"{path}.conditions")
    return causes


def _network_data_causes(data: Any, path: str) -> list[str]:
    if not isinstance(data, Mapping):
        return []
    causes = []
    if len(str(data.get("interfaceName") or "").encode()) > MAX_IFNAME:
        causes.append(f"{path}.interfaceName: Too long: may not be more than {MAX_IFNAME} "
                      "bytes")
    if len(str(data.get("hardwareAddress") or "").encode()) > MAX_HWADDR:
        causes.append(f"{path}.hardwareAddress: Too long: may not be more than {MAX_HWADDR} "
                      "bytes")
    ips = _list(data, "ips")
    if len(ips) > MAX_IPS:
        causes.append(f"{path}.ips: Too many: {len(ips)}: must have at most {MAX_IPS} items")
    for i, value in enumerate(ips):
        try:
            iface = ipaddress.ip_interface(str(value))
        except ValueError:
            causes.append(f"{path}.ips[{i}]: Invalid value: {_q(value)}: must be a valid "
                          "address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)")
            continue
        canonical = f"{iface.ip}/{iface.network.prefixlen}"
        if "/" not in str(value):
            causes.append(f"{path}.ips[{i}]: Invalid value: {_q(value)}: must be a valid "
                          "address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)")
        elif value != canonical:
            causes.append(f"{path}.ips[{i}]: Invalid value: {_q(value)}: must be in canonical "
                          f"form ({_q(canonical)})")
    if len(set(map(str, ips))) != len(ips):
        causes.append(f"{path}.ips: Duplicate value")
    return causes


def _condition_causes(conditions: Any, path: str) -> list[str]:
    if not isinstance(conditions, list):
        return []
    causes = []
    if len(conditions) > MAX_CONDITIONS:
        causes.append(f"{path}: Too many: {len(conditions)}: must have at most "
                      f"{MAX_CONDITIONS} items")
    for i, c in enumerate(conditions):
        c = c if isinstance(c, Mapping) else {}
        where = f"{path}[{i}]"
        if not c.get("type"):
            causes.append(f"{where}.type: Required value")
        if c.get("status") not in ("True", "False", "Unknown"):
            causes.append(f"{where}.status: Unsupported value: {_q(c.get('status'))}: "
                          'supported values: "False", "True", "Unknown"')
        if not c.get("lastTransitionTime"):
            causes.append(f"{where}.lastTransitionTime: Required value: must be set")
        reason = str(c.get("reason") or "")
        if not reason:
            causes.append(f"{where}.reason: Required value")
        elif not _REASON.match(reason) or len(reason) > 1024:
            causes.append(f"{where}.reason: Invalid value: {_q(reason)}: a condition reason "
                          "must start with alphabetic character, optionally followed by a "
                          "string of alphanumeric characters or '_,:', and must end with an "
                          "alphanumeric character or '_'")
    return causes


def allocated_node(status: Mapping[str, Any]) -> str:
    """The node a claim is allocated on when its allocation's node selector names exactly
    one node by ``metadata.name`` (as the scheduler writes it for a node's devices); ""."""
    allocation = status.get("allocation")
    selector = _map(allocation, "nodeSelector")
    terms = _list(selector, "nodeSelectorTerms")
    if len(terms) != 1 or not isinstance(terms[0], Mapping):
        return ""
    term = terms[0]
    fields = _list(term, "matchFields")
    if _list(term, "matchExpressions") or len(fields) != 1 or not isinstance(fields[0], Mapping):
        return ""
    f = fields[0]
    values = _list(f, "values")
    if f.get("key") != "metadata.name" or f.get("operator") != "In" or len(values) != 1:
        return ""
    return str(values[0])


def changed_drivers(old: Sequence[Any], new: Sequence[Any]) -> list[str]:
    """The drivers whose ``status.devices`` entries were added, changed or removed."""
    before = {_device_key(d): d for d in old if isinstance(d, Mapping)}
    drivers = set()
    for d in new:
        if not isinstance(d, Mapping):
            continue
        if before.pop(_device_key(d), None) != d:
            drivers.add(str(d.get("driver", "")))
    drivers.update(str(d.get("driver", "")) for d in before.values())
    return sorted(drivers)


def device_status_authorization(old: Mapping[str, Any], new: Mapping[str, Any],
                                who: Requester, verb: str, namespace: str,
                                authorize: Authorize) -> list[str]:
    """The ``Forbidden`` causes of a status write ``verb`` (patch, update) by ``who`` that
    changes ``status.devices`` of drivers ``who`` may not change (module doc)."""
    if new.get("allocation") is None or who.admin:
        return []
    node = allocated_node(new)
    verbs = [ARBITRARY_NODE + verb]
    if node and who.user.startswith(SA_PREFIX) and who.node == node:
        verbs.insert(0, ASSOCIATED_NODE + verb)
    causes = []
    for driver in changed_drivers(_list(old, "devices"), _list(new, "devices")):
        if any(authorize(who, v, GROUP, DRIVER_SUBRESOURCE, driver) for v in verbs):
            continue
        listed = "[" + " ".join(verbs) + "]"
        causes.append(
            f'status.devices: Forbidden: changing status.devices requires resource='
            f'"{DRIVER_SUBRESOURCE}", verb="{listed}" permission: resourceclaims.{GROUP} '
            f'"{driver}" is forbidden: User "{who.user}" cannot {verbs[0]} resource '
            f'"{DRIVER_SUBRESOURCE}" in API group "{GROUP}" in the namespace "{namespace}"')
    return causes
