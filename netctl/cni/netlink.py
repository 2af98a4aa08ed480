"""What netctl takes from pyroute2, loaded without pyroute2's package ``__init__``.

``import pyroute2`` imports every socket family pyroute2 has (IPDB, NDB, ipset, ipvs,
nl80211, wireguard, ...); netctl needs :class:`IPRoute` (:mod:`netctl.reconcile.leaks`,
:mod:`netctl.reconcile.facts`), :class:`NetlinkError` and a few netlink constants
(:mod:`netctl.reconcile.watch`, :mod:`netctl.reconcile.events`). So ``pyroute2`` is
made hollow (:mod:`netctl.hollow`) and only ``pyroute2.iproute`` with what it imports is
loaded: some 4 MiB less resident memory in every daemon, and a second less to start.
When pyroute2 is already imported, or the lean load fails (a release laid out
otherwise), the ordinary import serves. :data:`LEAN` says which way was taken.
"""

from __future__ import annotations

from netctl.hollow import lean


def _imports() -> bool:
    """The whole lean load, where :func:`netctl.hollow.lean` catches a failure."""
    import pyroute2.iproute
    import pyroute2.netlink.exceptions  # noqa: F401
    return True


LEAN = lean(("pyroute2",), _imports) is not None

# the same names either way: from their own modules
from pyroute2.iproute import IPRoute  # noqa: E402
from pyroute2.netlink import NETLINK_ADD_MEMBERSHIP, NETLINK_ROUTE, SOL_NETLINK  # noqa: E402
from pyroute2.netlink.exceptions import NetlinkError  # noqa: E402
from pyroute2.netlink.rtnl import RTM_DELLINK, RTM_DELNSID, RTNLGRP_LINK, RTNLGRP_NSID  # noqa: E402

__all__ = ["LEAN", "NETLINK_ADD_MEMBERSHIP", "NETLINK_ROUTE", "RTM_DELLINK", "RTM_DELNSID",
           "RTNLGRP_LINK", "RTNLGRP_NSID", "SOL_NETLINK", "IPRoute", "NetlinkError"]
