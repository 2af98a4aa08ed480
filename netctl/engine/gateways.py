"""``default-route``: which network of a pod carries its default route. Pure.

A selection element may ask for the pod's default route through one of its networks'
gateways (``"default-route": ["10.243.0.1"]``). After every chain of the ADD has run,
:func:`plan` decides, per address family, what the pod's netns must look like, as Multus
does it (``CheckGatewayConfig``, then ``DeleteDefaultGW``/``SetDefaultGW`` per delegate):

- at most one gateway per family across the pod (no ECMP), refused with code 7 otherwise
  (Kubernetes mode refuses it earlier, as the pod's annotation: ``kubeselect``);
- the gateway must be reachable on the network that asks for it: inside the subnet of
  one of the addresses its result gave (its result's gateways are), or the kernel
  could not route through it — refused with code 7 naming the network, the gateway and
  the subnets, and the ADD is undone;
- then every default route of that family in the pod (the cluster network's, another
  network's) goes, and one default route via the gateway on that network's interface
  takes its place; the chains' results are rewritten to match (:func:`rewritten`), so
  the runtime's result, the journal and network-status (its ``gateway`` lists) say
  where the default route is.

Families nobody asks for are left alone: a pod asking for an IPv4 default route keeps
its IPv6 one where its delegates put it (Multus would also drop the IPv6 default routes
of every other network; that surprises dual-stack pods, so netctl does not).
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
    """The default routes the pod's ``default-route`` requests ask for (none: nothing to
    do), checked against the chains' results; :class:`CNIError` 7 when one cannot be."""
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
    """``result`` (of the attachment on ``ifname``) as the pod's routes now are: its
    default routes of each moved family dropped, the one via the chosen gateway added
    where it now is."""
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
