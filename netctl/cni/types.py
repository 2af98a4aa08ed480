"""The CNI result, as msgspec types: what a delegate's ADD must print to be used.

A result is validated against these types on the way in (a delegate printing JSON
of the wrong shape is a bad-output error naming the field, not a crash three
steps later), and kept as the plain dict it was, so fields this version of
netctl does not know pass through untouched to the next plugin and the runtime.
Covers every version netctl serves: ``ips[].version`` (0.3.x/0.4.0) is optional,
as are the 1.1.0 interface fields.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Interface(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    name: str
    mac: str = ""
    sandbox: str = ""
    mtu: int | None = None
    socketPath: str | None = None
    pciID: str | None = None


class IPConfig(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    address: str
    gateway: str | None = None
    interface: int | None = None
    version: str | None = None


class Route(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    dst: str
    gw: str | None = None


class DNS(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    nameservers: list[str] = []
    domain: str = ""
    search: list[str] = []
    options: list[str] = []


class Result(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    cniVersion: str = ""
    interfaces: list[Interface] = []
    ips: list[IPConfig] = []
    routes: list[Route] = []
    dns: DNS | None = None


def check_result(obj: dict[str, Any]) -> str | None:
    """None if ``obj`` has the shape of a CNI result, else what is wrong with it."""
    try:
        result = msgspec.convert(obj, Result)
    except msgspec.ValidationError as exc:
        return str(exc)
    for ip in result.ips:
        if ip.interface is not None and not 0 <= ip.interface < len(result.interfaces):
            return (f"ips entry {ip.address} names interface index {ip.interface}, but the "
                    f"result has {len(result.interfaces)} interfaces")
    return None


def host_interfaces(result: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(name, mac) of the interfaces a result puts on the host (no ``sandbox``)."""
    out = []
    for iface in (result or {}).get("interfaces") or []:
        if isinstance(iface, dict) and not iface.get("sandbox") and iface.get("name"):
            out.append((str(iface["name"]), str(iface.get("mac", "")).lower()))
    return out
