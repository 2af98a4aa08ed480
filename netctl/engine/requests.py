"""Requested addresses and MACs, checked before anything runs (code 7 naming the bad value;
docs/networks.md, "Requested addresses and MACs"). Pure."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from netctl.errors import INVALID_CONFIG, CNIError

_MAC_RE = re.compile(r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$")


def requested_ips(value: Any, where: str) -> list[str]:
    """Requested addresses (``ips``): a list of IP addresses (a ``/prefix`` allowed), or
    refused with code 7 naming the bad one."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(ip, str) for ip in value):
        raise CNIError(INVALID_CONFIG, f"{where}: 'ips' must be a list of addresses, not "
                       f"{str(value)[:60]!r}")
    for ip in value:
        try:
            ipaddress.ip_interface(ip.strip())
        except ValueError:
            raise CNIError(INVALID_CONFIG, f"{where}: requested address {ip[:60]!r} is not "
                           "an IP address") from None
    return value


def requested_mac(value: Any, where: str) -> str | None:
    """A requested MAC address (``mac``): six colon-separated hex octets, or code 7."""
    if value is None:
        return None
    if not isinstance(value, str) or not _MAC_RE.fullmatch(value):
        raise CNIError(INVALID_CONFIG, f"{where}: requested MAC {str(value)[:60]!r} is not a "
                       "MAC address (six hex octets separated by ':')")
    return value


def requested_addresses(runtime: dict[str, Any], args: dict[str, str]) -> list[str]:
    """The addresses a runtime asked for either way: ``runtimeConfig.ips`` or ``IP=`` in
    CNI_ARGS (comma-separated); both given and different: code 7."""
    ips = requested_ips(runtime.get("ips"), "runtimeConfig")
    if "IP" not in args:
        return ips
    from_args = requested_ips([ip for ip in args["IP"].split(",") if ip], "CNI_ARGS IP=")
    if ips and {_address(ip) for ip in ips} != {_address(ip) for ip in from_args}:
        raise CNIError(INVALID_CONFIG, f"the requested addresses disagree: CNI_ARGS "
                       f"IP={args['IP']} but runtimeConfig.ips {ips}")
    return ips or from_args


def runtime_requests(runtime: dict[str, Any], args: dict[str, str]) -> dict[str, Any]:
    """The cluster network's capability arguments: the runtime's ``runtimeConfig`` with
    the addresses and the MAC it asked for either way (``runtimeConfig.mac`` or ``MAC=``)."""
    caps = dict(runtime)
    ips = requested_addresses(runtime, args)
    if ips:
        caps["ips"] = ips
    mac = requested_mac(caps.get("mac"), "runtimeConfig")
    if "MAC" in args:
        from_args = requested_mac(args["MAC"], "CNI_ARGS MAC=")
        if mac and from_args and mac.lower() != from_args.lower():
            raise CNIError(INVALID_CONFIG, f"the requested MACs disagree: CNI_ARGS MAC="
                           f"{from_args} but runtimeConfig.mac {mac}")
        mac = mac or from_args
    if mac:
        caps["mac"] = mac
    return caps


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_interface(text.strip()).ip
