"""What netctl takes from pyroute2 (:class:`IPRoute` and :class:`NetlinkError`, for a pod's
default routes: :mod:`netctl.cni.routes`), loaded without pyroute2's package ``__init__``
(:mod:`netctl.partialimport`), which imports every socket family pyroute2 has: some 4 MiB
less. :data:`PARTIAL` says whether that way was taken.
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
