"""CNI versions: parsing, negotiation and result conversion. Pure: no I/O.

Results change shape across the versions netctl serves:

- 0.3.0, 0.3.1, 0.4.0: every entry of ``ips`` carries ``"version": "4"|"6"``;
- 1.0.0 drops that field;
- 1.1.0 adds optional interface fields (``mtu``, ``socketPath``, ``pciID``).

:func:`convert_result` moves a result between any two of them, so a chain can
run at its own version and the caller still gets its own.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import msgspec

from netctl.errors import INCOMPATIBLE_VERSION, CNIError

SUPPORTED = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = "1.1.0"
_INTERFACE_FIELDS_1_1 = ("mtu", "socketPath", "pciID")


def parse(version: str) -> tuple[int, int, int]:
    """``"1.0.0"`` → ``(1, 0, 0)``; anything else is refused with code 1."""
    parts = version.split(".") if isinstance(version, str) else []
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise CNIError(INCOMPATIBLE_VERSION, f"invalid cniVersion {version!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def check_supported(version: str) -> str:
    parse(version)
    if version not in SUPPORTED:
        raise CNIError(
            INCOMPATIBLE_VERSION,
            f"cniVersion {version} is not supported; netctl serves {', '.join(SUPPORTED)}",
        )
    return version


def supports_check(version: str) -> bool:
    """CHECK exists from 0.4.0 on."""
    return parse(version) >= (0, 4, 0)


def convert_result(result: dict[str, Any], to_version: str) -> dict[str, Any]:
    """Return ``result`` rewritten for ``to_version`` (a new dict; the input is kept)."""
    check_supported(to_version)
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(result))  # a deep copy
    target = parse(to_version)
    ips = out.get("ips") or []
    if target >= (1, 0, 0):
        for ip in ips:
            ip.pop("version", None)
    else:
        for ip in ips:
            ip["version"] = _ip_family(ip.get("address", ""))
    if target < (1, 1, 0):
        for iface in out.get("interfaces") or []:
            for field in _INTERFACE_FIELDS_1_1:
                iface.pop(field, None)
    out["cniVersion"] = to_version
    return out


def _ip_family(address: str) -> str:
    try:
        return "6" if ipaddress.ip_interface(address).version == 6 else "4"
    except ValueError:
        return "4"
