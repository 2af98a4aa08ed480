"""``default-route``: which network of a pod carries its default route (docs/networks.md,
"The pod's default route"). Pure: :func:`plan` checks the requests against the chains'
results, :func:`rewritten` makes the results say where the default route is. Families
nobody asks for are left alone (Multus would drop the other networks' IPv6 defaults too).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from netctl.errors import INVALID_CONFIG, CNIError
from netctl.journal.records import Attachment

DEFAULT_DST = {4: "0.0.0.0/0", 6: "::/0"}


@dataclass(frozen=True)
class DefaultRoute:
    """The pod's one default route of IP ``version``: via ``gateway`` on ``ifname``."""

    version: int
    ifname: str
    gateway: str


def plan(atts: list[Attachment]) -> list[DefaultRoute]:
    """The default routes the pod's ``default-route`` requests ask for, checked against the
    chains' results (code 7)."""
    moves = []
    for version in (4, 6):
        asked = [(att, gw) for att in atts for gw in att.default_route
                 if _version(att, gw) == version]
        if not asked:
            continue
        if len(asked) > 1:
            raise CNIError(INVALID_CONFIG, f"{len(asked)} IPv{version} default routes asked "
                           f"for ({'; '.join(f'network {a.network!r}: {gw}' for a, gw in asked)})"
                           ": at most one (no ECMP)")
        att, gateway = asked[0]
        subnets = [ipaddress.ip_interface(ip["address"]).network
                   for ip in (att.result or {}).get("ips") or []
                   if isinstance(ip, dict) and isinstance(ip.get("address"), str)
                   and ipaddress.ip_interface(ip["address"]).version == version]
        if not any(ipaddress.ip_address(gateway) in net for net in subnets):
            have = ", ".join(map(str, subnets)) or f"no IPv{version} address"
            raise CNIError(INVALID_CONFIG, f"network {att.network!r} (interface "
                           f"{att.ifname}): default-route {gateway} is not in its subnets "
                           f"({have}): the pod could not route through it")
        moves.append(DefaultRoute(version, att.ifname, gateway))
    return moves


def rewritten(result: dict[str, Any] | None, ifname: str, moves: list[DefaultRoute]
              ) -> dict[str, Any] | None:
    """``result`` (of the attachment on ``ifname``) as the pod's routes now are."""
    if result is None or not moves:
        return result
    versions = {m.version for m in moves}
    routes = [r for r in result.get("routes") or []
              if not (_is_default(r) and _route_version(r) in versions)]
    routes += [{"dst": DEFAULT_DST[m.version], "gw": m.gateway} for m in moves
               if m.ifname == ifname]
    out = dict(result)
    if routes:
        out["routes"] = routes
    else:
        out.pop("routes", None)
    return out


def _version(att: Attachment, gateway: str) -> int:
    try:
        return ipaddress.ip_address(gateway).version
    except ValueError:
        raise CNIError(INVALID_CONFIG, f"network {att.network!r}: default-route "
                       f"{gateway[:60]!r} is not an IP address") from None


def _is_default(route: Any) -> bool:
    try:
        return ipaddress.ip_network(route["dst"], strict=False).prefixlen == 0
    except (KeyError, TypeError, ValueError):
        return False


def _route_version(route: dict[str, Any]) -> int:
    return ipaddress.ip_network(route["dst"], strict=False).version
