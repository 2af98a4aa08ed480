"""The ``k8s.v1.cni.cncf.io/network-status`` annotation, byte for byte as Multus writes it. Pure.

After a successful ADD the pod's annotation lists what each attachment's final CNI
result says, attachments in plan order (the cluster network, ``defaultNetworks``, then
the pod's selection: the order Multus runs its delegates in). The rules are those of
the Network Plumbing WG client Multus builds it with (network-attachment-definition-client
v1.7.6, ``pkg/utils/net-attach-def.go``: ``CreateNetworkStatuses``), for results of every
cniVersion netctl serves (0.3.x and 0.4.0 carry the same fields as 1.x here):

- ``name``: the NAD's ``ns/name``; for a network from a file or an inline delegate,
  its CNI config's name;
- a result with **one** interface gives one entry: ``interface``, ``mac``, ``mtu`` of that
  interface when it is in the sandbox, every address in ``ips``, ``default`` for the
  cluster network. With **several**, one entry per sandbox interface, each address to
  the entry of its ``interface`` index (one without an index to the last entry), and
  ``default`` on the cluster network's entry whose interface the first address with a
  ``gateway`` points at — else on its first entry. With **none**, no entry;
- ``ips``: addresses without their prefix; ``gateway``: the gateways of the result's
  default routes (destination address 0.0.0.0 or ::), the same list on every entry of
  the result — a default route without a gateway is left out (Go prints ``<nil>``);
- ``dns``: always there, ``{}`` when the result has none; ``device-info``: the
  attachment's device-info file as the daemon read it, when there is one.

:func:`annotation_value` prints each entry as Go's ``json.MarshalIndent(entry, "",
"    ")`` does, joined by ``,`` inside ``[…]``; :func:`patch_body` wraps the value in the
JSON merge patch the Kubernetes client sends (``application/merge-patch+json``), with the pod's
UID as a precondition when it is known.

:func:`addresses` reads the annotation back: every address a pod's network-status names,
with its interface (the cluster IPAM adopts the addresses of the pods of a block it finds
this node's in the API but not in its journal).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from netctl.journal.records import Attachment
from netctl.kubeapi.objects import NETWORK_STATUS, Pod

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
               "\u2028": "\\u2028", "\u2029": "\\u2029"}


class _Entry(msgspec.Struct, forbid_unknown_fields=False):
    interface: str = ""
    ips: list[str] = []


def addresses(pod: Pod) -> list[tuple[str, str]] | None:
    """(interface, address) of every address ``pod``'s network-status names (in the order
    it names them; [] without the annotation); None when the annotation is malformed."""
    raw = pod.metadata.annotations.get(NETWORK_STATUS)
    if not raw:
        return []
    try:
        entries = msgspec.json.decode(raw, type=list[_Entry])
    except msgspec.MsgspecError:
        return None
    return [(e.interface, ip) for e in entries for ip in e.ips]


def status_name(att: Attachment) -> str:
    """``ns/name`` for a NAD's network; the CNI config's name for a file's (keyed by its
    path) or an inline delegate's (``delegate:<name>``)."""
    if att.network.startswith(("/", "delegate:")):
        return att.chain.name
    return att.network


def network_status(atts: Sequence[Attachment],
                   device_info: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> list[dict[str, Any]]:
    """The annotation's entries for the attachments of one ADD (those with a result);
    ``device_info`` by attachment interface name."""
    out: list[dict[str, Any]] = []
    for att in atts:
        if att.result is not None:
            dev = (device_info or {}).get(att.ifname)
            out.extend(_entries(att.result, status_name(att), att.is_default, dev))
    return out


def annotation_value(entries: Sequence[Mapping[str, Any]]) -> str:
    """The annotation's value: each entry indented as Go's MarshalIndent prints it."""
    return "[" + ",".join(_go_json(entry) for entry in entries) + "]"


def patch_body(value: str, uid: str = "") -> bytes:
    """The JSON merge patch that sets the annotation to ``value``; with ``uid``, only on the
    pod of that UID (the API server answers 409 for a pod replaced under the same name, as
    kubelet's own status patches are guarded)."""
    meta: dict[str, Any] = {"annotations": {NETWORK_STATUS: value}}
    if uid:
        meta = {"uid": uid, **meta}
    return msgspec.json.encode({"metadata": meta})


def _entries(result: Mapping[str, Any], name: str, default: bool,
             dev: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    interfaces = [i if isinstance(i, dict) else {} for i in _list(result.get("interfaces"))]
    ips = [ip for ip in _list(result.get("ips")) if isinstance(ip, dict)]
    gateways = [gw for gw in map(_default_gateway, _list(result.get("routes"))) if gw]
    dns = _dns(result.get("dns"))
    if len(interfaces) == 1:  # CreateNetworkStatus: every address, whatever its index
        iface = interfaces[0]
        entry = _entry(name, iface if iface.get("sandbox") else {},
                       [a for a in map(_address, ips) if a], default, dns, dev, gateways)
        return [entry]
    sandbox = [i for i, iface in enumerate(interfaces) if iface.get("sandbox")]
    if not sandbox:
        return []
    with_gateway = next((ip["interface"] for ip in ips if ip.get("gateway")
                         and isinstance(ip.get("interface"), int)), -1)
    if not default:
        marked = None
    elif with_gateway == -1:
        marked = sandbox[0]
    else:
        marked = with_gateway  # no entry is the default if that is no sandbox interface
    addresses: dict[int, list[str]] = {i: [] for i in sandbox}
    for ip in ips:
        index = ip.get("interface")
        address = _address(ip)
        if not address:
            continue
        if isinstance(index, int):
            if index in addresses:
                addresses[index].append(address)
        else:
            addresses[sandbox[-1]].append(address)
    return [_entry(name, interfaces[i], addresses[i], i == marked, dns, dev, gateways)
            for i in sandbox]


def _entry(name: str, iface: Mapping[str, Any], ips: list[str], default: bool,
           dns: dict[str, Any], dev: Mapping[str, Any] | None,
           gateways: list[str]) -> dict[str, Any]:
    """One entry, its keys in the order (and omitted when empty) as Go's struct prints."""
    entry: dict[str, Any] = {"name": name}
    for key, value in (("interface", iface.get("name")), ("ips", ips),
                       ("mac", iface.get("mac")), ("mtu", iface.get("mtu")),
                       ("default", default)):
        if value and (key != "mtu" or isinstance(value, int)):
            entry[key] = value
    entry["dns"] = dns
    if dev:
        entry["device-info"] = dict(dev)
    if gateways:
        entry["gateway"] = list(gateways)
    return entry


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ip_text(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """An address as Go prints it: an IPv4-mapped IPv6 address as IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _address(ip: Mapping[str, Any]) -> str:
    """A result's ``address`` (an address with its prefix) as Go prints the address; ""
    when it is not one."""
    text = str(ip.get("address", ""))
    host, _, prefix = text.partition("/")
    if prefix.isdigit() and int(prefix) <= 32 and prefix == str(int(prefix)):
        try:  # IPv4, by far the most common: the C parser (leading zeros refused, as here)
            return socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, host))
        except OSError:
            pass
    try:
        return _ip_text(ipaddress.ip_interface(text).ip)
    except ValueError:
        return ""


def _default_gateway(route: Any) -> str:
    """The gateway of a default route (its destination address is all zeros, as Go's
    ``isDefaultRoute`` tests it), else ""."""
    if not isinstance(route, dict):
        return ""
    return _gateway_of(str(route.get("dst", "")), str(route.get("gw", "")))


@functools.lru_cache(maxsize=256)
def _gateway_of(dst_text: str, gw_text: str) -> str:
    """:func:`_default_gateway` of a route's texts (kept: a network's routes repeat from
    pod to pod)."""
    try:
        dst = ipaddress.ip_network(dst_text, strict=False).network_address
        if _ip_text(dst) not in ("0.0.0.0", "::"):
            return ""
        return _ip_text(ipaddress.ip_address(gw_text))
    except ValueError:
        return ""


def _dns(value: Any) -> dict[str, Any]:
    dns = value if isinstance(value, dict) else {}
    out: dict[str, Any] = {}
    for key in ("nameservers", "domain", "search", "options"):
        item = dns.get(key)
        if key == "domain":
            if isinstance(item, str) and item:
                out[key] = item
        elif isinstance(item, list) and item:
            out[key] = [str(v) for v in item]
    return out


def _go_json(obj: Any) -> str:
    """``obj`` as Go's ``json.MarshalIndent(obj, "", "    ")`` prints it: UTF-8 kept,
    ``<``, ``>``, ``&``, U+2028 and U+2029 escaped."""
    text = msgspec.json.format(msgspec.json.encode(obj), indent=4).decode()
    for char, escaped in _GO_ESCAPES.items():
        text = text.replace(char, escaped)
    return text
