"""Network selection: the ``k8s.v1.cni.cncf.io/networks`` syntax (docs/networks.md), its
comma form and its JSON form (a list of :class:`Selection`); ``NETCTL_NETWORKS`` in
standalone mode. Pure.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from netctl.cni.validate import ifname as validate_ifname
from netctl.errors import INVALID_CONFIG, CNIError

_DNS1123_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Selection(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=False):
    name: str
    namespace: str | None = None
    interface: str | None = None
    ips: list[str] | None = None
    mac: str | None = None
    default_route: list[str] | None = msgspec.field(default=None, name="default-route")
    cni_args: dict[str, Any] | None = msgspec.field(default=None, name="cni-args")
    portMappings: list[dict[str, Any]] | None = None
    bandwidth: dict[str, Any] | None = None
    deviceID: str | None = None
    infiniband_guid: str | None = msgspec.field(default=None, name="infiniband-guid")

    def capability_args(self) -> dict[str, Any]:
        """The values that reach delegates through ``runtimeConfig``, by capability name."""
        caps: dict[str, Any] = {}
        for key, value in (("ips", self.ips), ("mac", self.mac),
                           ("portMappings", self.portMappings), ("bandwidth", self.bandwidth),
                           ("deviceID", self.deviceID), ("infinibandGUID", self.infiniband_guid)):
            if value is not None:
                caps[key] = value
        return caps


def _check_name(value: str, what: str) -> str:
    if len(value) > 253 or not _DNS1123_RE.fullmatch(value):
        raise CNIError(INVALID_CONFIG, f"network selection: {what} {value!r} is not a DNS-1123 "
                       "name (lower-case letters, digits and '-')")
    return value


def parse(value: str) -> list[Selection]:
    text = value.strip()
    if not text:
        return []
    if text[0] in '{"':
        what = "a JSON object" if text[0] == "{" else "a JSON string"
        raise CNIError(INVALID_CONFIG, f"network selection: it is {what}; it must be a JSON "
                       'list of objects ([{"name": …}, …]) or the comma form '
                       "([namespace/]name[@interface], …)")
    if text.startswith("["):
        try:
            items = msgspec.json.decode(text.encode(), type=list[Selection])
        except msgspec.ValidationError as exc:
            raise CNIError(INVALID_CONFIG, f"network selection: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise CNIError(INVALID_CONFIG, f"network selection is not valid JSON: {exc}") from exc
    else:
        items = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            namespace: str | None = None
            iface: str | None = None
            if part.count("@") > 1:
                raise CNIError(INVALID_CONFIG, f"network selection: {part[:80]!r} has more "
                               "than one '@' (the form is [namespace/]name[@interface])")
            if "@" in part:
                part, iface = part.split("@", 1)
            if "/" in part:
                namespace, part = part.split("/", 1)
            items.append(Selection(name=part, namespace=namespace, interface=iface))
    for item in items:
        _check_name(item.name, "name")
        if item.namespace is not None:
            _check_name(item.namespace, "namespace")
        if item.interface is not None:
            try:
                validate_ifname(item.interface, f"interface of network {item.name!r}")
            except CNIError as exc:
                raise CNIError(INVALID_CONFIG, exc.msg) from None
    return items


def assign_ifnames(primary: str, requested: list[str | None]) -> list[str]:
    """Interface names for additional networks: as requested, else ``net<position>``, as
    Multus does; any clash is refused."""
    names = [req if req else f"net{i + 1}" for i, req in enumerate(requested)]
    seen = {primary}
    for name in names:
        if name in seen:
            raise CNIError(INVALID_CONFIG,
                           f"interface {name!r} is requested twice for one pod")
        seen.add(name)
    return names


def next_ifname(taken: Iterable[str]) -> str:
    """The first of ``net1``, ``net2``, … that is not ``taken``."""
    used = set(taken)
    return next(name for n in itertools.count(1) if (name := f"net{n}") not in used)
