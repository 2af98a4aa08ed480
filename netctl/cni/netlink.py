"""What netctl takes from pyroute2, loaded without pyroute2's package ``__init__``.

``import pyroute2`` imports every socket family pyroute2 has (IPDB, NDB, ipset, ipvs,
nl80211, wireguard, ...); netctl needs :class:`IPRoute` and :class:`NetlinkError`, for a
pod's default routes (:mod:`netctl.cni.routes`, which imports this module when a pod asks
for one: the reconciler's two netlink calls need no pyroute2, :mod:`netctl.cni.rtnl`).
So ``pyroute2`` is imported without its ``__init__`` (:mod:`netctl.partialimport`) and
only ``pyroute2.iproute`` with what it imports is loaded: some 4 MiB less than the whole
package.
When pyroute2 is already imported, or the partial import fails (a release laid out
otherwise), the ordinary import serves. :data:`PARTIAL` says which way was taken.
"""

from __future__ import annotations

from netctl.partialimport import import_partly


def _imports() -> bool:
    """The whole partial import (:func:`netctl.partialimport.import_partly` catches a
    failure)."""
    import pyroute2.iproute
    import pyroute2.netlink.exceptions  # noqa: F401
    return True


PARTIAL = import_partly(("pyroute2",), _imports) is not None

# the same names either way: from their own modules
from pyroute2.iproute import IPRoute  # noqa: E402
from pyroute2.netlink.exceptions import NetlinkError  # noqa: E402

__all__ = ["PARTIAL", "IPRoute", "NetlinkError"]
