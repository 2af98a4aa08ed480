"""Pure range maths for the central IPAM, configured with whereabouts' keys. No I/O.

A network's ``ipam`` section becomes an :class:`IPAMConfig` and a list of
:class:`Range`: ``range`` (with the top-level ``range_start``, ``range_end``,
``exclude``) gives the first, each ``ipRanges`` entry one more; an attachment
gets one address from each (dual-stack). Addresses are Python ints
throughout, so every prefix length works, IPv6 /64 to /128 included.

Rules (whereabouts' where it has one, stricter where it silently misbehaves):

- ``range`` is a CIDR (``10.0.0.0/24``; host bits are dropped, ``10.0.0.5/24``
  means ``10.0.0.0/24``) or ``a-b/nn`` (start ``a``, end ``b``, subnet
  ``b/nn``). A prefix length is required: a bare address is refused.
- ``range_start`` / ``range_end`` narrow the range; they must lie in the
  subnet, be of its family, and not be crossed. ``a-b/nn`` together with
  ``range_start``/``range_end`` is refused (two starts or two ends).
- Never assigned: IPv4's network and broadcast addresses up to /30 (/31 and
  /32 use every address, RFC 3021); IPv6's subnet-router anycast address (the
  all-zero host part, RFC 4291 2.6.1) up to /126 (/127, RFC 6164, and /128 use
  every address). IPv6 has no broadcast, so its top address is assignable.
  ``range_start``/``range_end`` on such an address are clamped, not refused.
- ``exclude``: CIDRs (a bare address means that one address) removed from the
  range; parts outside the range are ignored, a different family is refused,
  and an exclude list that leaves nothing is refused.
- ``gateway`` is never handed out. The top-level gateway belongs to every range
  of its family (refused when no range has its family). An ``ipRanges`` entry
  may carry its own ``gateway`` (netctl's extension, for dual-stack), which
  wins over the top-level one for that entry.
- A range with no gateway under a main plugin that takes one (:func:`takes_gateway`:
  ``bridge`` with ``isGateway``/``isDefaultGateway``, ``ptp``) gets the subnet's first
  address as its gateway, as host-local does: that is the address the plugin would
  put on the host anyway, so it must never go to a pod (``parse_config(…,
  default_gateway=True)``). Elsewhere, as in whereabouts, no gateway means none.
- The top-level ``range_start``/``range_end``/``exclude`` without a top-level
  ``range`` are refused (whereabouts drops them silently, which hands out
  addresses the user meant to exclude). Two ranges with one key are refused.
- ``allocation_order``: ``round-robin`` (whereabouts' behaviour: continue after
  the last address handed out) or ``lowest``.
- ``sticky``, ``sticky_for`` (netctl's own): addresses owned by the pod's identity
  (:mod:`netctl.ipam.sticky`); ``sticky_for`` is a duration greater than 0 and needs
  ``sticky: true``.

Every refusal is ``CNIError(7, "ipam: …")`` naming the key and the value.
"""

from __future__ import annotations

import ipaddress
from bisect import bisect_right
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import msgspec

from netctl.errors import INVALID_CONFIG, CNIError
from netctl.ipam.sticky import sticky_seconds

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOCATION_ORDERS = ("round-robin", "lowest")


class IPAMConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """A whereabouts-style ``ipam`` section (unknown keys, e.g. ``kubernetes``, ignored)."""

    type: str
    range: str | None = None
    range_start: str | None = None
    range_end: str | None = None
    exclude: list[str] = []
    ipRanges: list[dict[str, Any]] = []  # each: range, range_start, range_end, exclude, gateway
    gateway: str | None = None
    routes: list[dict[str, Any]] = []
    dns: dict[str, Any] | None = None
    network_name: str = ""
    enable_overlapping_ranges: bool = True
    allocation_order: str = "round-robin"  # or "lowest" (netctl's own option)
    block_size: int | None = None  # prefix length of a block (ipam-backend: kubernetes)
    sticky: bool = False  # addresses owned by the pod's identity (netctl/ipam/sticky.py)
    sticky_for: str | float | None = None  # how long a released one stays reserved


def sticky_for(cfg: IPAMConfig) -> float | None:
    """How long ``cfg``'s released addresses stay reserved for their identity (None: not
    sticky); checked by :func:`parse_config`."""
    return sticky_seconds(cfg.sticky, cfg.sticky_for)


class _RangeSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """One ``ipRanges`` entry."""

    range: str
    range_start: str | None = None
    range_end: str | None = None
    exclude: list[str] = []
    gateway: str | None = None


@dataclass(frozen=True, slots=True)
class Range:
    """One pool's assignable addresses, as ints.

    ``first..last`` minus ``excluded`` (sorted, disjoint, inclusive intervals
    inside ``first..last``: the ``exclude`` CIDRs and the gateway).
    """

    cidr: IPNetwork
    first: int
    last: int
    excluded: tuple[tuple[int, int], ...]
    gateway: str | None
    key: str

    @property
    def version(self) -> int:
        return self.cidr.version

    @property
    def size(self) -> int:
        """The number of assignable addresses (exact; 2**64 - 1 for an IPv6 /64)."""
        return self.last - self.first + 1 - sum(hi - lo + 1 for lo, hi in self.excluded)

    def contains(self, ip: int) -> bool:
        """Whether ``ip`` may be handed out: in ``first..last`` and not excluded."""
        return self.first <= ip <= self.last and _excluded_end(self.excluded, ip) is None

    def host(self, ip: int) -> str:
        """The address alone, e.g. ``"10.1.0.5"`` (of this range's family, even for small ints)."""
        return str(_address(self.version, ip))

    def address(self, ip: int) -> str:
        """The address in CIDR form with the range's prefix length, e.g. ``"10.1.0.5/24"``."""
        return f"{self.host(ip)}/{self.cidr.prefixlen}"


def _invalid(msg: str) -> CNIError:
    return CNIError(INVALID_CONFIG, f"ipam: {msg}")


def _address(version: int, ip: int) -> IPAddress:
    return ipaddress.IPv4Address(ip) if version == 4 else ipaddress.IPv6Address(ip)


def _family(version: int) -> str:
    return f"IPv{version}"


def _excluded_end(excluded: tuple[tuple[int, int], ...], ip: int) -> int | None:
    """The end of the excluded interval holding ``ip``, or None."""
    i = bisect_right(excluded, ip, key=lambda iv: iv[0]) - 1
    if i >= 0 and excluded[i][1] >= ip:
        return excluded[i][1]
    return None


def _parse_ip(text: str, key: str) -> IPAddress:
    value = text.strip()
    try:
        if "%" in value:  # a scoped IPv6 address names an interface, not a pool address
            raise ValueError(value)
        return ipaddress.ip_address(value)
    except ValueError:
        raise _invalid(f"{key} {text!r} is not a valid IP address") from None


def _parse_cidr(text: str, key: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """An address with its prefix length; ``.network`` is the subnet (host bits dropped)."""
    value = text.strip()
    try:
        if "/" not in value or "%" in value:
            raise ValueError(value)
        return ipaddress.ip_interface(value)
    except ValueError:
        raise _invalid(f"{key} {text!r} is not a valid CIDR") from None


def _natural_bounds(net: IPNetwork) -> tuple[int, int]:
    """The subnet's assignable span before narrowing (see the module docstring)."""
    lo, hi = int(net.network_address), int(net.broadcast_address)
    if net.version == 4 and net.prefixlen <= 30:
        return lo + 1, hi - 1
    if net.version == 6 and net.prefixlen <= 126:
        return lo + 1, hi
    return lo, hi


def merge_intervals(intervals: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def _build_range(where: str, spec: _RangeSpec, top_gateway: IPAddress | None,
                 default_gateway: bool) -> Range:
    """One :class:`Range`; ``where`` prefixes key names (``""`` or ``"ipRanges[1]."``).
    An empty string is "not set", as whereabouts reads it."""
    k_range, k_start, k_end = f"{where}range", f"{where}range_start", f"{where}range_end"
    k_exclude, gateway_key = f"{where}exclude", f"{where}gateway"
    range_text = spec.range
    range_start, range_end = spec.range_start or None, spec.range_end or None
    gateway = _parse_ip(spec.gateway, gateway_key) if spec.gateway else None
    start_ip: IPAddress | None = None
    end_ip: IPAddress | None = None
    if "-" in range_text:
        a_text, b_text = range_text.split("-", 1)
        start_ip = _parse_ip(a_text, f"{k_range} {range_text!r}: start")
        iface = _parse_cidr(b_text, f"{k_range} {range_text!r}: end")
        net: IPNetwork = iface.network
        end_ip = iface.ip
        if start_ip.version != net.version or start_ip not in net:
            raise _invalid(f"{k_range} {range_text!r}: start {start_ip} is outside {net}")
        if int(start_ip) > int(end_ip):
            raise _invalid(f"{k_range} {range_text!r}: start {start_ip} is after end {end_ip}")
        if range_start is not None:
            raise _invalid(f"{k_start} {range_start} conflicts with the start in {k_range} "
                           f"{range_text!r}; give one or the other")
        if range_end is not None:
            raise _invalid(f"{k_end} {range_end} conflicts with the end in {k_range} "
                           f"{range_text!r}; give one or the other")
    else:
        net = _parse_cidr(range_text, k_range).network
    family = _family(net.version)

    def same_family(key: str, value: object, version: int) -> None:
        if version != net.version:
            raise _invalid(f"{key} {value} is {_family(version)} but {k_range} "
                           f"{range_text!r} is {family}")

    def inside(text: str, key: str) -> IPAddress:
        ip = _parse_ip(text, key)
        same_family(key, ip, ip.version)
        if ip not in net:
            raise _invalid(f"{key} {ip} is outside {k_range} {range_text!r} ({net})")
        return ip

    if range_start is not None:
        start_ip = inside(range_start, k_start)
    if range_end is not None:
        end_ip = inside(range_end, k_end)
    if start_ip is not None and end_ip is not None and int(start_ip) > int(end_ip):
        raise _invalid(f"{k_start} {start_ip} is after {k_end} {end_ip}")

    lo, hi = _natural_bounds(net)
    first = max(lo, int(start_ip) if start_ip is not None else lo)
    last = min(hi, int(end_ip) if end_ip is not None else hi)
    if first > last:
        raise _invalid(f"{k_range} {range_text!r} has no assignable address (the network "
                       "and broadcast addresses are never assigned)")
    if (first, last) == (lo, hi):
        key = net.with_prefixlen
    else:
        key = f"{_address(net.version, first)}-{_address(net.version, last)}/{net.prefixlen}"

    intervals: list[tuple[int, int]] = []
    for i, text in enumerate(spec.exclude):
        item = f"{k_exclude}[{i}]"
        value = text.strip()
        try:
            if "%" in value:
                raise ValueError(value)
            ex = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise _invalid(f"{item} {text!r} is not a valid CIDR") from None
        same_family(item, repr(text), ex.version)
        ex_lo, ex_hi = max(first, int(ex.network_address)), min(last, int(ex.broadcast_address))
        if ex_lo <= ex_hi:
            intervals.append((ex_lo, ex_hi))
    excluded = merge_intervals(intervals)
    if excluded and sum(b - a + 1 for a, b in excluded) == last - first + 1:
        raise _invalid(f"{k_exclude} covers every address of {k_range} {key}")

    gw = gateway
    if gw is not None:
        same_family(gateway_key, gw, gw.version)
    if gw is None and top_gateway is not None and top_gateway.version == net.version:
        gw = top_gateway
    defaulted = ""
    if gw is None and default_gateway and net.num_addresses > 1:
        gw = _address(net.version, int(net.network_address) + 1)
        defaulted = (" (no gateway is given, and the plugin takes the subnet's first address "
                     "as its gateway)")
    if gw is not None and first <= int(gw) <= last:
        excluded = merge_intervals([*excluded, (int(gw), int(gw))])
    rng = Range(cidr=net, first=first, last=last, excluded=excluded,
                gateway=str(gw) if gw is not None else None, key=key)
    if rng.size == 0:
        raise _invalid(f"gateway {gw} is the only address of {k_range} {key} left to "
                       f"assign{defaulted}")
    return rng


def _validation(exc: msgspec.ValidationError, root: str = "") -> CNIError:
    """msgspec's message with its ``$`` path spelled as the config's keys."""
    text = str(exc)
    if root:
        text = text.replace("`$", f"`{root}") if "`$" in text else f"{text} - at `{root}`"
    else:
        text = text.replace("`$.", "`").replace("`$`", "`ipam`")
    return _invalid(text)


def _check_order(order: str) -> None:
    if order not in ALLOCATION_ORDERS:
        raise _invalid(f"allocation_order {order!r} is not one of "
                       f"{', '.join(repr(o) for o in ALLOCATION_ORDERS)}")


def takes_gateway(plugin: Mapping[str, Any]) -> bool:
    """Whether the main plugin whose conf this is puts its IPAM result's gateway on the
    host, taking the subnet's first address when the result names none: ``bridge`` with
    ``isGateway`` or ``isDefaultGateway``, and ``ptp`` (its host veth gets the gateway)."""
    ptype = plugin.get("type")
    if ptype == "bridge":
        return plugin.get("isGateway") is True or plugin.get("isDefaultGateway") is True
    return ptype == "ptp"


def parse_config(ipam: dict[str, Any], *, default_gateway: bool = False
                 ) -> tuple[IPAMConfig, list[Range]]:
    """Validate and return the config and its ranges: `range` (+range_start/range_end/exclude)
    gives one; `ipRanges` gives one per entry (one address from each: dual-stack). Both `range`
    and `ipRanges` may appear (then `range` first). With ``default_gateway`` (the section
    sits in a plugin that :func:`takes_gateway`), a range without a gateway gets its
    subnet's first address as gateway, never handed out.

    A node sees the same few sections over and over (every step of every attachment of a
    network): the last :data:`PARSED_KEPT` parsed ones are kept, by their JSON, and shared
    — callers never change what they get. A bad section is parsed (and refused) each
    time."""
    key = (msgspec.json.encode(ipam), default_gateway)
    parsed = _parsed.get(key)
    if parsed is None:
        parsed = _parse_config(ipam, default_gateway)
        if len(_parsed) >= PARSED_KEPT:
            del _parsed[next(iter(_parsed))]
        _parsed[key] = parsed
    return parsed


PARSED_KEPT = 512
_parsed: dict[tuple[bytes, bool], tuple[IPAMConfig, list[Range]]] = {}


def _parse_config(ipam: dict[str, Any], default_gateway: bool
                  ) -> tuple[IPAMConfig, list[Range]]:
    try:
        cfg = msgspec.convert(ipam, IPAMConfig)
    except msgspec.ValidationError as exc:
        raise _validation(exc) from None
    _check_order(cfg.allocation_order)
    sticky_for(cfg)
    if cfg.block_size is not None and not 1 <= cfg.block_size <= 128:
        raise _invalid(f"block_size {cfg.block_size} is not a prefix length (1 to 32 for "
                       "IPv4, to 128 for IPv6)")
    top_gateway = _parse_ip(cfg.gateway, "gateway") if cfg.gateway else None

    ranges: list[Range] = []
    if cfg.range:
        ranges.append(_build_range("", _RangeSpec(
            range=cfg.range, range_start=cfg.range_start, range_end=cfg.range_end,
            exclude=cfg.exclude), top_gateway, default_gateway))
    else:
        for key, value in (("range_start", cfg.range_start or None),
                           ("range_end", cfg.range_end or None),
                           ("exclude", cfg.exclude or None)):
            if value is not None:
                raise _invalid(f"{key} {value} is given without range (inside ipRanges, give "
                               f"{key} in each entry)")
    for i, entry in enumerate(cfg.ipRanges):
        where = f"ipRanges[{i}]."
        try:
            spec = msgspec.convert(entry, _RangeSpec)
        except msgspec.ValidationError as exc:
            raise _validation(exc, f"ipRanges[{i}]") from None
        if not spec.range:
            raise _invalid(f"{where}range is empty")
        ranges.append(_build_range(where, spec, top_gateway, default_gateway))

    if not ranges:
        raise _invalid("neither range nor ipRanges is set: no address to allocate from")
    seen: set[str] = set()
    for rng in ranges:
        if rng.key in seen:
            raise _invalid(f"range {rng.key} is given twice (range and ipRanges entries must "
                           "differ)")
        seen.add(rng.key)
    if top_gateway is not None and not any(r.version == top_gateway.version for r in ranges):
        raise _invalid(f"gateway {top_gateway} is {_family(top_gateway.version)} but no range "
                       f"is ({', '.join(r.key for r in ranges)})")
    return cfg, ranges


def _scan(rng: Range, used: AbstractSet[int], lo: int, hi: int) -> int | None:
    """The lowest free assignable address in ``lo..hi``.

    Each step either returns, steps over one used address, or jumps past one
    excluded interval: at most ``len(used) + len(excluded) + 1`` steps,
    whatever the size of the range.
    """
    ip = lo
    while ip <= hi:
        end = _excluded_end(rng.excluded, ip)
        if end is not None:
            ip = end + 1
        elif ip in used:
            ip += 1
        else:
            return ip
    return None


def next_free(rng: Range, used: AbstractSet[int], after: int | None,
              order: str) -> int | None:
    """round-robin: the first free assignable address strictly after `after` (wrapping around to
    first), or from first when after is None; lowest: the lowest free. None if the range is
    exhausted. Never enumerates the range: cost grows with `used` and the excluded intervals.

    An `after` outside first..last (the range was narrowed since) is fine: below first starts
    at first, at or above last wraps to first.
    """
    _check_order(order)
    if order == "lowest" or after is None:
        return _scan(rng, used, rng.first, rng.last)
    start = min(max(after + 1, rng.first), rng.last + 1)
    found = _scan(rng, used, start, rng.last)
    if found is None:
        found = _scan(rng, used, rng.first, start - 1)
    return found


def requested(rng: Range, ip_text: str) -> int:
    """The int of a requested address (``"10.1.0.7"`` or ``"10.1.0.7/24"``) after checking that
    the range may hand it out; CNIError(7) naming the address and the range otherwise.

    A prefix length, when given, must be the range's: the pod would get the range's anyway.
    Whether the address is free is the caller's question.
    """
    text = ip_text.strip()
    prefix: int | None = None
    try:
        if "%" in text:
            raise ValueError(text)
        if "/" in text:
            iface = ipaddress.ip_interface(text)
            ip: IPAddress = iface.ip
            prefix = iface.network.prefixlen
        else:
            ip = ipaddress.ip_address(text)
    except ValueError:
        raise _invalid(f"requested address {ip_text!r} is not a valid IP address") from None
    if ip.version != rng.version:
        raise _invalid(f"requested address {ip_text} is {_family(ip.version)} but range "
                       f"{rng.key} is {_family(rng.version)}")
    if prefix is not None and prefix != rng.cidr.prefixlen:
        raise _invalid(f"requested address {ip_text} has prefix length /{prefix} but range "
                       f"{rng.key} is /{rng.cidr.prefixlen}")
    value = int(ip)
    if ip not in rng.cidr:
        raise _invalid(f"requested address {ip_text} is outside range {rng.key}")
    if not rng.first <= value <= rng.last:
        lo, hi = _natural_bounds(rng.cidr)
        if not lo <= value <= hi:
            what = "network" if value == int(rng.cidr.network_address) else "broadcast"
            raise _invalid(f"requested address {ip_text} is the {what} address of range "
                           f"{rng.key}, never assigned")
        raise _invalid(f"requested address {ip_text} is outside range {rng.key} (assignable: "
                       f"{rng.host(rng.first)} to {rng.host(rng.last)})")
    if rng.gateway is not None and value == int(ipaddress.ip_address(rng.gateway)):
        raise _invalid(f"requested address {ip_text} is the gateway of range {rng.key}")
    if _excluded_end(rng.excluded, value) is not None:
        raise _invalid(f"requested address {ip_text} is excluded from range {rng.key}")
    return value
