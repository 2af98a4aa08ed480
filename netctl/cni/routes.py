"""A pod's default routes set in its network namespace (``default-route``, planned by
:mod:`netctl.engine.gateways`).

One thread of its own enters the netns (:func:`netctl.cni.netns.in_netns`) and, over one
netlink socket opened there, for each address family asked for: deletes every default
route of the main table (whichever interface a delegate put it on), then adds the one
via the gateway on the interface named. Blocking: call it from a worker thread.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from netctl.cni.netns import in_netns

if TYPE_CHECKING:
    from netctl.cni.netlink import IPRoute

MAIN_TABLE = 254
FAMILIES = {4: socket.AF_INET, 6: socket.AF_INET6}
DEFAULT_DST = {4: "0.0.0.0/0", 6: "::/0"}


def set_default_routes(netns: str, routes: Sequence[tuple[int, str, str]]) -> None:
    """In the netns at ``netns``, for each ``(ip_version, ifname, gateway)``: the default
    routes of that version replaced by one via ``gateway`` on ``ifname``. ``OSError``
    naming the interface, the gateway and the kernel's reason when it cannot be."""

    # pyroute2, loaded by the first pod that asks for a default route elsewhere than eth0
    from netctl.cni.netlink import IPRoute, NetlinkError

    def run() -> None:
        with IPRoute() as ipr:
            for version, ifname, gateway in routes:
                family = FAMILIES[version]
                found = ipr.link_lookup(ifname=ifname)
                if not found:
                    raise OSError(f"no interface {ifname} in the pod for its default route")
                for route in ipr.get_routes(family=family, table=MAIN_TABLE):
                    if route["dst_len"] == 0:
                        _quietly(ipr, family, route)
                try:
                    ipr.route("add", family=family, dst=DEFAULT_DST[version],
                              gateway=gateway, oif=found[0], table=MAIN_TABLE)
                except NetlinkError as exc:
                    raise OSError(f"default route via {gateway} on {ifname}: "
                                  f"{exc}") from None

    in_netns(netns, run)


def _quietly(ipr: IPRoute, family: int, route: Any) -> None:
    """Delete one default route as the kernel listed it (a pyroute2 ``rtmsg``); one
    already gone is fine."""
    from netctl.cni.netlink import NetlinkError

    try:
        ipr.route("del", family=family, dst_len=0, table=MAIN_TABLE,
                  oif=route.get_attr("RTA_OIF"), gateway=route.get_attr("RTA_GATEWAY"),
                  priority=route.get_attr("RTA_PRIORITY"))
    except NetlinkError as exc:
        if exc.code != 3:  # ESRCH: no such route any more
            raise OSError(f"removing a default route: {exc}") from None
