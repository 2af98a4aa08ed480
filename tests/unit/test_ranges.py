"""We test the IPAM range maths (:mod:`netctl.ipam.ranges`), pure, without an event loop:

- ``range`` as a CIDR (host bits dropped) and as ``a-b/nn``; ``range_start``/``range_end``;
  ``ipRanges`` (dual-stack, ``range`` first); the pool keys;
- sizes per prefix length, IPv4 and IPv6 (network/broadcast skipping, /31, /127, /128);
- ``exclude`` intervals and the gateway never handed out; the gateway defaulted to the
  subnet's first address under a plugin that takes one (bridge with isGateway, ptp);
- ``next_free``: round-robin with wrap-around, lowest, skipping used and excluded addresses,
  exhaustion, and speed on huge IPv6 ranges;
- ``requested``: accepted and refused addresses;
- every refusal is code 7 and names the key and the value.
"""

from __future__ import annotations

import ipaddress
import re
import time
from typing import Any

import pytest

from netctl.errors import INVALID_CONFIG, CNIError
from netctl.ipam.ranges import (
    IPAMConfig,
    Range,
    next_free,
    parse_config,
    requested,
    takes_gateway,
)


def ip(text: str) -> int:
    return int(ipaddress.ip_address(text))


def one(**ipam: Any) -> Range:
    cfg, ranges = parse_config({"type": "whereabouts", **ipam})
    assert isinstance(cfg, IPAMConfig)
    (rng,) = ranges
    return rng


def refused(ipam: dict[str, Any], *fragments: str) -> str:
    with pytest.raises(CNIError) as info:
        parse_config({"type": "whereabouts", **ipam})
    assert info.value.code == INVALID_CONFIG
    assert info.value.msg.startswith("ipam: ")
    for fragment in fragments:
        assert fragment in info.value.msg, info.value.msg
    return info.value.msg


# --- config ---------------------------------------------------------------------------------

def test_config_defaults_and_unknown_keys() -> None:
    cfg, _ = parse_config({"type": "whereabouts", "range": "10.0.0.0/24",
                           "kubernetes": {"kubeconfig": "/x"}, "log_level": "debug"})
    assert cfg.type == "whereabouts"
    assert cfg.allocation_order == "round-robin"
    assert cfg.enable_overlapping_ranges is True
    assert cfg.network_name == ""
    assert cfg.exclude == [] and cfg.ipRanges == [] and cfg.routes == []
    assert cfg.dns is None and cfg.gateway is None


def test_config_keeps_routes_dns_network_name() -> None:
    cfg, _ = parse_config({
        "type": "netctl-ipam", "range": "10.0.0.0/24", "network_name": "blue",
        "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["10.0.0.53"]},
        "enable_overlapping_ranges": False, "allocation_order": "lowest"})
    assert cfg.network_name == "blue"
    assert cfg.routes == [{"dst": "0.0.0.0/0"}]
    assert cfg.dns == {"nameservers": ["10.0.0.53"]}
    assert cfg.enable_overlapping_ranges is False
    assert cfg.allocation_order == "lowest"


# --- ranges and keys ------------------------------------------------------------------------

def test_cidr_range() -> None:
    rng = one(range="10.1.0.0/24")
    assert rng.cidr == ipaddress.ip_network("10.1.0.0/24")
    assert (rng.first, rng.last) == (ip("10.1.0.1"), ip("10.1.0.254"))
    assert rng.key == "10.1.0.0/24"
    assert rng.version == 4
    assert rng.excluded == () and rng.gateway is None


def test_host_bits_mean_the_subnet() -> None:
    rng = one(range="10.1.0.77/24")
    assert rng.cidr == ipaddress.ip_network("10.1.0.0/24")
    assert rng.key == "10.1.0.0/24"
    assert rng.first == ip("10.1.0.1")


def test_dash_form() -> None:
    rng = one(range="192.168.2.225-192.168.2.230/28")
    assert rng.cidr == ipaddress.ip_network("192.168.2.224/28")
    assert (rng.first, rng.last) == (ip("192.168.2.225"), ip("192.168.2.230"))
    assert rng.size == 6
    assert rng.key == "192.168.2.225-192.168.2.230/28"


def test_dash_form_ipv6() -> None:
    rng = one(range="fd00::10-fd00::20/64")
    assert (rng.first, rng.last) == (ip("fd00::10"), ip("fd00::20"))
    assert rng.size == 17
    assert rng.key == "fd00::10-fd00::20/64"


def test_range_start_and_end() -> None:
    rng = one(range="10.1.0.0/24", range_start="10.1.0.10", range_end="10.1.0.50")
    assert (rng.first, rng.last) == (ip("10.1.0.10"), ip("10.1.0.50"))
    assert rng.size == 41
    assert rng.key == "10.1.0.10-10.1.0.50/24"
    only_start = one(range="10.1.0.0/24", range_start="10.1.0.200")
    assert (only_start.first, only_start.last) == (ip("10.1.0.200"), ip("10.1.0.254"))
    assert only_start.key == "10.1.0.200-10.1.0.254/24"
    only_end = one(range="10.1.0.0/24", range_end="10.1.0.9")
    assert only_end.size == 9


def test_key_is_canonical() -> None:
    # Spelling the natural bounds out, or in the dash form, is the same pool.
    assert one(range="10.1.0.0/24", range_start="10.1.0.1", range_end="10.1.0.254").key \
        == "10.1.0.0/24"
    assert one(range="10.1.0.1-10.1.0.254/24").key == "10.1.0.0/24"
    assert one(range="10.1.0.10-10.1.0.50/24").key \
        == one(range="10.1.0.0/24", range_start="10.1.0.10", range_end="10.1.0.50").key
    assert one(range="FD00:0:0::/64").key == "fd00::/64"
    # exclude and gateway do not change the pool.
    assert one(range="10.1.0.0/24", exclude=["10.1.0.0/28"], gateway="10.1.0.1").key \
        == "10.1.0.0/24"


def test_start_end_on_network_and_broadcast_are_clamped() -> None:
    rng = one(range="10.1.0.0/24", range_start="10.1.0.0", range_end="10.1.0.255")
    assert (rng.first, rng.last) == (ip("10.1.0.1"), ip("10.1.0.254"))
    assert rng.key == "10.1.0.0/24"


def test_empty_strings_mean_unset() -> None:
    rng = one(range="10.1.0.0/24", range_start="", range_end="", gateway="")
    assert rng.key == "10.1.0.0/24" and rng.gateway is None


def test_ip_ranges_dual_stack() -> None:
    _, ranges = parse_config({"type": "whereabouts", "ipRanges": [
        {"range": "10.2.0.0/24", "exclude": ["10.2.0.0/28"]},
        {"range": "fd00:2::/64", "range_start": "fd00:2::100", "range_end": "fd00:2::1ff"},
    ]})
    v4, v6 = ranges
    assert (v4.version, v6.version) == (4, 6)
    assert v4.size == 254 - 15
    assert v6.size == 256
    assert v6.key == "fd00:2::100-fd00:2::1ff/64"


def test_range_comes_before_ip_ranges() -> None:
    _, ranges = parse_config({"type": "whereabouts", "range": "10.3.0.0/24",
                              "range_start": "10.3.0.100", "exclude": ["10.3.0.128/25"],
                              "ipRanges": [{"range": "fd00:3::/120"}]})
    assert [r.key for r in ranges] == ["10.3.0.100-10.3.0.254/24", "fd00:3::/120"]
    assert ranges[0].size == 28
    assert ranges[1].excluded == ()


# --- sizes ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("cidr", "size"), [
    ("10.0.0.0/8", 2**24 - 2),
    ("10.0.0.0/24", 254),
    ("10.0.0.0/30", 2),
    ("10.0.0.0/31", 2),
    ("10.0.0.7/32", 1),
    ("fd00::/64", 2**64 - 1),
    ("fd00::/96", 2**32 - 1),
    ("fd00::/120", 255),
    ("fd00::/126", 3),
    ("fd00::/127", 2),
    ("fd00::1/128", 1),
    ("::/0", 2**128 - 1),
])
def test_sizes(cidr: str, size: int) -> None:
    assert one(range=cidr).size == size


def test_small_prefixes_bounds() -> None:
    r30 = one(range="10.0.0.4/30")
    assert (r30.first, r30.last) == (ip("10.0.0.5"), ip("10.0.0.6"))
    r31 = one(range="10.0.0.4/31")
    assert (r31.first, r31.last) == (ip("10.0.0.4"), ip("10.0.0.5"))
    r32 = one(range="10.0.0.4/32")
    assert r32.first == r32.last == ip("10.0.0.4")
    r64 = one(range="fd00::/64")
    assert r64.first == ip("fd00::1")
    assert r64.last == ip("fd00::ffff:ffff:ffff:ffff")  # no broadcast in IPv6
    r127 = one(range="fd00::/127")
    assert (r127.first, r127.last) == (ip("fd00::"), ip("fd00::1"))
    r128 = one(range="fd00::5/128")
    assert r128.first == r128.last == ip("fd00::5")


# --- exclude and gateway --------------------------------------------------------------------

def test_exclude_intervals() -> None:
    rng = one(range="10.0.0.0/24",
              exclude=["10.0.0.0/28", "10.0.0.8/29", "10.0.0.16/30", "10.0.0.200/32",
                       "10.0.0.201", "10.0.0.252/30", "192.168.0.0/16", "10.0.0.100/31"])
    assert rng.excluded == (
        (ip("10.0.0.1"), ip("10.0.0.19")),    # /28, /29 inside it and the adjacent /30, merged
        (ip("10.0.0.100"), ip("10.0.0.101")),
        (ip("10.0.0.200"), ip("10.0.0.201")),  # a /32 and a bare address, adjacent
        (ip("10.0.0.252"), ip("10.0.0.254")),  # clipped at the broadcast address
    )
    assert rng.size == 254 - 19 - 2 - 2 - 3
    assert not rng.contains(ip("10.0.0.5"))
    assert rng.contains(ip("10.0.0.20"))
    assert not rng.contains(ip("10.0.0.201"))
    assert rng.contains(ip("10.0.0.202"))
    assert not rng.contains(ip("10.0.0.255"))
    assert not rng.contains(ip("10.0.1.1"))


def test_exclude_with_host_bits_and_outside_range() -> None:
    rng = one(range="10.0.0.0/24", range_start="10.0.0.100", exclude=["10.0.0.5/28",
                                                                         "10.0.1.0/24"])
    assert rng.excluded == ()
    assert rng.size == 155


def test_exclude_ipv6_huge() -> None:
    rng = one(range="fd00::/64", exclude=["fd00::/65"])
    assert rng.size == 2**63
    assert rng.excluded == ((ip("fd00::1"), ip("fd00::7fff:ffff:ffff:ffff")),)


def test_gateway_is_excluded() -> None:
    rng = one(range="10.0.0.0/24", gateway="10.0.0.1")
    assert rng.gateway == "10.0.0.1"
    assert rng.excluded == ((ip("10.0.0.1"), ip("10.0.0.1")),)
    assert rng.size == 253
    assert not rng.contains(ip("10.0.0.1"))
    assert next_free(rng, set(), None, "round-robin") == ip("10.0.0.2")


def test_gateway_outside_the_assignable_part() -> None:
    rng = one(range="10.0.0.0/24", range_start="10.0.0.100", gateway="10.0.0.1")
    assert rng.gateway == "10.0.0.1" and rng.excluded == ()
    assert rng.size == 155


def test_gateway_inside_exclude_merged() -> None:
    rng = one(range="10.0.0.0/24", gateway="10.0.0.17", exclude=["10.0.0.16/30"])
    assert rng.excluded == ((ip("10.0.0.16"), ip("10.0.0.19")),)
    rng = one(range="10.0.0.0/24", gateway="10.0.0.20", exclude=["10.0.0.16/30"])
    assert rng.excluded == ((ip("10.0.0.16"), ip("10.0.0.20")),)


def test_gateway_dual_stack() -> None:
    _, (v4, v6) = parse_config({"type": "whereabouts", "gateway": "10.2.0.1", "ipRanges": [
        {"range": "10.2.0.0/24"}, {"range": "fd00:2::/64", "gateway": "fd00:2::1"}]})
    assert v4.gateway == "10.2.0.1" and v4.size == 253
    assert v6.gateway == "fd00:2::1" and v6.size == 2**64 - 2
    _, (v4, v6) = parse_config({"type": "whereabouts", "gateway": "fd00:2::1", "ipRanges": [
        {"range": "10.2.0.0/24"}, {"range": "fd00:2::/64"}]})
    assert v4.gateway is None and v6.gateway == "fd00:2::1"


def test_entry_gateway_wins() -> None:
    _, (rng,) = parse_config({"type": "whereabouts", "gateway": "10.2.0.1",
                              "ipRanges": [{"range": "10.2.0.0/24", "gateway": "10.2.0.254"}]})
    assert rng.gateway == "10.2.0.254"
    assert rng.contains(ip("10.2.0.1")) and not rng.contains(ip("10.2.0.254"))


def defaulted(**ipam: Any) -> list[Range]:
    return parse_config({"type": "netctl-ipam", **ipam}, default_gateway=True)[1]


def test_default_gateway_is_the_subnets_first_address_never_handed_out() -> None:
    (rng,) = defaulted(range="10.0.0.0/24")
    assert rng.gateway == "10.0.0.1" and not rng.contains(ip("10.0.0.1"))
    assert rng.size == 253
    assert next_free(rng, set(), None, "round-robin") == ip("10.0.0.2")
    with pytest.raises(CNIError, match="is the gateway"):
        requested(rng, "10.0.0.1")
    # the subnet decides, not range_start or the a-b form: .1 is what the bridge takes
    (rng,) = defaulted(range="10.0.0.0/24", range_start="10.0.0.100")
    assert rng.gateway == "10.0.0.1" and rng.excluded == () and rng.size == 155
    (rng,) = defaulted(range="10.0.0.10-10.0.0.20/24")
    assert rng.gateway == "10.0.0.1" and rng.size == 11
    assert one(range="10.0.0.0/24").gateway is None  # not under a gateway-taking plugin


def test_default_gateway_never_overrides_a_given_one() -> None:
    (rng,) = defaulted(range="10.0.0.0/24", gateway="10.0.0.254")
    assert rng.gateway == "10.0.0.254" and rng.contains(ip("10.0.0.1"))
    v4, v6 = defaulted(gateway="10.2.0.1", ipRanges=[
        {"range": "10.2.0.0/24"}, {"range": "fd00:2::/64"}, ])
    assert v4.gateway == "10.2.0.1"
    assert v6.gateway == "fd00:2::1" and not v6.contains(ip("fd00:2::1"))
    v4, v6 = defaulted(ipRanges=[{"range": "10.2.0.0/24", "gateway": "10.2.0.9"},
                                 {"range": "fd00:2::/120"}])
    assert v4.gateway == "10.2.0.9" and v4.contains(ip("10.2.0.1"))
    assert v6.gateway == "fd00:2::1" and v6.size == 254


def test_default_gateway_on_tiny_subnets() -> None:
    (rng,) = defaulted(range="10.0.0.4/31")
    assert rng.gateway == "10.0.0.5" and rng.size == 1
    (rng,) = defaulted(range="10.0.0.4/32")  # no second address: no gateway to take
    assert rng.gateway is None and rng.size == 1
    with pytest.raises(CNIError) as info:
        defaulted(range="10.0.0.0/31", range_start="10.0.0.1")
    assert info.value.code == INVALID_CONFIG
    assert "gateway 10.0.0.1 is the only address" in info.value.msg
    assert "no gateway is given" in info.value.msg


@pytest.mark.parametrize(("plugin", "takes"), [
    ({"type": "bridge", "isGateway": True}, True),
    ({"type": "bridge", "isDefaultGateway": True}, True),
    ({"type": "bridge", "isGateway": False, "isDefaultGateway": False}, False),
    ({"type": "bridge"}, False),
    ({"type": "bridge", "isGateway": "true"}, False),  # the bridge itself refuses a string
    ({"type": "ptp"}, True),
    ({"type": "macvlan", "isGateway": True}, False),
    ({}, False),
])
def test_takes_gateway(plugin: dict[str, Any], takes: bool) -> None:
    assert takes_gateway(plugin) is takes


def test_address_forms() -> None:
    rng = one(range="10.1.0.0/24")
    assert rng.address(ip("10.1.0.5")) == "10.1.0.5/24"
    assert rng.host(ip("10.1.0.5")) == "10.1.0.5"
    low6 = one(range="::/120")  # small ints must still print as IPv6
    assert low6.address(5) == "::5/120"
    assert one(range="fd00::/64").address(ip("fd00::abcd")) == "fd00::abcd/64"


# --- next_free ------------------------------------------------------------------------------

def test_round_robin_from_start_and_after() -> None:
    rng = one(range="10.0.0.0/29")  # .1 .. .6
    assert next_free(rng, set(), None, "round-robin") == ip("10.0.0.1")
    assert next_free(rng, set(), ip("10.0.0.1"), "round-robin") == ip("10.0.0.2")
    # Strictly after, even when "after" itself is free again (released).
    assert next_free(rng, set(), ip("10.0.0.3"), "round-robin") == ip("10.0.0.4")


def test_round_robin_wraps_around() -> None:
    rng = one(range="10.0.0.0/29")
    assert next_free(rng, set(), ip("10.0.0.6"), "round-robin") == ip("10.0.0.1")
    used = {ip("10.0.0.1"), ip("10.0.0.2")}
    assert next_free(rng, used, ip("10.0.0.5"), "round-robin") == ip("10.0.0.6")
    used.add(ip("10.0.0.6"))
    assert next_free(rng, used, ip("10.0.0.5"), "round-robin") == ip("10.0.0.3")
    # The only free address is the cursor itself: found after wrapping.
    used = {ip(f"10.0.0.{i}") for i in (1, 2, 3, 5, 6)}
    assert next_free(rng, used, ip("10.0.0.4"), "round-robin") == ip("10.0.0.4")


def test_round_robin_skips_used_and_excluded() -> None:
    rng = one(range="10.0.0.0/24", gateway="10.0.0.11",
              exclude=["10.0.0.12/30", "10.0.0.20/30"])
    used = {ip("10.0.0.10"), ip("10.0.0.16"), ip("10.0.0.17"), ip("10.0.0.24")}
    assert next_free(rng, used, ip("10.0.0.9"), "round-robin") == ip("10.0.0.18")
    used |= {ip("10.0.0.18"), ip("10.0.0.19")}
    assert next_free(rng, used, ip("10.0.0.9"), "round-robin") == ip("10.0.0.25")


def test_cursor_outside_the_range() -> None:
    rng = one(range="10.0.0.0/24", range_start="10.0.0.100", range_end="10.0.0.110")
    assert next_free(rng, set(), ip("10.0.0.5"), "round-robin") == ip("10.0.0.100")
    assert next_free(rng, set(), ip("10.0.0.110"), "round-robin") == ip("10.0.0.100")
    assert next_free(rng, set(), ip("10.0.0.200"), "round-robin") == ip("10.0.0.100")


def test_lowest() -> None:
    rng = one(range="10.0.0.0/24", gateway="10.0.0.1", allocation_order="lowest")
    used = frozenset({ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.5")})
    assert next_free(rng, used, ip("10.0.0.100"), "lowest") == ip("10.0.0.4")
    assert next_free(rng, used, None, "lowest") == ip("10.0.0.4")


def test_exhaustion() -> None:
    rng = one(range="10.0.0.0/29", exclude=["10.0.0.4/31"])  # .1 .2 .3 .6
    used = {ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.6")}
    assert next_free(rng, used, None, "round-robin") is None
    assert next_free(rng, used, ip("10.0.0.3"), "round-robin") is None
    assert next_free(rng, used, None, "lowest") is None
    single = one(range="10.9.9.9/32")
    assert next_free(single, set(), ip("10.9.9.9"), "round-robin") == ip("10.9.9.9")
    assert next_free(single, {ip("10.9.9.9")}, None, "round-robin") is None


def test_used_addresses_outside_the_range_do_not_matter() -> None:
    rng = one(range="10.0.0.0/30")
    used = {ip("10.0.1.1"), ip("10.0.0.1")}
    assert next_free(rng, used, None, "lowest") == ip("10.0.0.2")


def test_next_free_unknown_order() -> None:
    rng = one(range="10.0.0.0/24")
    with pytest.raises(CNIError) as info:
        next_free(rng, set(), None, "random")
    assert info.value.code == INVALID_CONFIG and "'random'" in info.value.msg


def test_next_free_huge_ipv6_is_fast() -> None:
    rng = one(range="fd00::/64", exclude=["fd00::ffff:ffff:ffff:f000/116", "fd00::/96"])
    last = rng.last
    assert last == ip("fd00::ffff:ffff:ffff:ffff")
    # 1000 used addresses around a cursor near the end (left of the excluded tail),
    # and the first 1000 addresses after the excluded head: the next free one wraps.
    cursor = ip("fd00::ffff:ffff:ffff:efff") - 500
    used = {cursor - 500 + i for i in range(1001)}
    head = ip("fd00::1:0:0")
    used |= {head + i for i in range(1000)}
    t0 = time.perf_counter()
    assert next_free(rng, used, cursor, "round-robin") == head + 1000
    assert next_free(rng, used, None, "round-robin") == head + 1000
    assert next_free(rng, used, cursor - 600, "round-robin") == cursor - 599
    assert next_free(rng, used, None, "lowest") == head + 1000
    assert time.perf_counter() - t0 < 0.5
    # All but the last 1000 addresses excluded (about 60 CIDRs), and those 1000 used.
    cidrs = ipaddress.summarize_address_range(ipaddress.IPv6Address(rng.first),
                                              ipaddress.IPv6Address(last - 1000))
    full = one(range="fd00::/64", exclude=[str(c) for c in cidrs])
    assert full.size == 1000
    tail = {last - i for i in range(1000)}
    t0 = time.perf_counter()
    assert next_free(full, tail, None, "round-robin") is None
    assert next_free(full, tail, last - 10, "round-robin") is None
    assert next_free(full, tail, None, "lowest") is None
    assert next_free(full, tail - {last}, last - 1, "round-robin") == last
    assert next_free(full, tail - {last - 999}, last, "round-robin") == last - 999
    assert time.perf_counter() - t0 < 0.5


def test_next_free_huge_ranges_every_prefix() -> None:
    for cidr in ("fd00::/64", "fd00::/96", "fd00::/120", "fd00::/127", "fd00::/128", "::/0"):
        rng = one(range=cidr)
        assert next_free(rng, {rng.first}, None, "round-robin") == (
            rng.first + 1 if rng.size > 1 else None)
        assert next_free(rng, set(), rng.last, "round-robin") == rng.first


# --- requested ------------------------------------------------------------------------------

def test_requested_in_range() -> None:
    rng = one(range="10.1.0.0/24", gateway="10.1.0.1")
    assert requested(rng, "10.1.0.7") == ip("10.1.0.7")
    assert requested(rng, "10.1.0.7/24") == ip("10.1.0.7")
    assert requested(rng, " 10.1.0.254 ") == ip("10.1.0.254")
    v6 = one(range="fd00::/64")
    assert requested(v6, "fd00::7/64") == ip("fd00::7")
    assert requested(v6, "fd00::ffff:ffff:ffff:ffff") == ip("fd00::ffff:ffff:ffff:ffff")


@pytest.mark.parametrize(("text", "fragment"), [
    ("10.1.1.7", "outside range 10.1.0.10-10.1.0.50/24"),
    ("10.1.0.60", "outside range 10.1.0.10-10.1.0.50/24 (assignable: 10.1.0.10 to 10.1.0.50)"),
    ("10.1.0.9/24", "outside range"),
    ("10.1.0.20", "is the gateway of range 10.1.0.10-10.1.0.50/24"),
    ("10.1.0.33", "is excluded from range 10.1.0.10-10.1.0.50/24"),
    ("10.1.0.7/16", "has prefix length /16 but range 10.1.0.10-10.1.0.50/24 is /24"),
    ("fd00::7", "is IPv6 but range 10.1.0.10-10.1.0.50/24 is IPv4"),
    ("10.1.0", "'10.1.0' is not a valid IP address"),
    ("", "'' is not a valid IP address"),
])
def test_requested_refused(text: str, fragment: str) -> None:
    rng = one(range="10.1.0.0/24", range_start="10.1.0.10", range_end="10.1.0.50",
              gateway="10.1.0.20", exclude=["10.1.0.32/30"])
    with pytest.raises(CNIError) as info:
        requested(rng, text)
    assert info.value.code == INVALID_CONFIG
    assert fragment in info.value.msg, info.value.msg
    assert "requested address" in info.value.msg


def test_requested_network_and_broadcast() -> None:
    rng = one(range="10.1.0.0/24")
    msg = "10.1.0.0 is the network address of range 10.1.0.0/24"
    with pytest.raises(CNIError, match=re.escape(msg)):
        requested(rng, "10.1.0.0")
    with pytest.raises(CNIError, match=re.escape("10.1.0.255 is the broadcast address")):
        requested(rng, "10.1.0.255")
    with pytest.raises(CNIError, match="fd00:: is the network address"):
        requested(one(range="fd00::/64"), "fd00::")
    assert requested(one(range="fd00::/127"), "fd00::") == ip("fd00::")
    assert requested(one(range="10.1.0.0/31"), "10.1.0.0") == ip("10.1.0.0")


# --- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize(("ipam", "fragments"), [
    ({"range": "10.0.0.0/33"}, ["range '10.0.0.0/33' is not a valid CIDR"]),
    ({"range": "10.0.0.0"}, ["range '10.0.0.0' is not a valid CIDR"]),
    ({"range": "banana/24"}, ["range 'banana/24' is not a valid CIDR"]),
    ({"range": "fe80::/64%eth0"}, ["range 'fe80::/64%eth0' is not a valid CIDR"]),
    ({"range": "10.0.0.x-10.0.0.9/24"}, ["range '10.0.0.x-10.0.0.9/24': start '10.0.0.x'"]),
    ({"range": "10.0.0.1-10.0.0.9"}, ["range '10.0.0.1-10.0.0.9': end '10.0.0.9'",
                                      "not a valid CIDR"]),
    ({"range": "10.0.1.1-10.0.0.9/24"}, ["start 10.0.1.1 is outside 10.0.0.0/24"]),
    ({"range": "fd00::1-10.0.0.9/24"}, ["start fd00::1 is outside 10.0.0.0/24"]),
    ({"range": "10.0.0.9-10.0.0.1/24"}, ["start 10.0.0.9 is after end 10.0.0.1"]),
    ({"range": "10.0.0.1-10.0.0.9/24", "range_start": "10.0.0.2"},
     ["range_start 10.0.0.2 conflicts", "'10.0.0.1-10.0.0.9/24'"]),
    ({"range": "10.0.0.1-10.0.0.9/24", "range_end": "10.0.0.5"},
     ["range_end 10.0.0.5 conflicts"]),
    ({"range": "10.0.0.0/24", "range_start": "10.0.0.50", "range_end": "10.0.0.10"},
     ["range_start 10.0.0.50 is after range_end 10.0.0.10"]),
    ({"range": "10.0.0.0/24", "range_start": "10.0.1.5"},
     ["range_start 10.0.1.5 is outside range '10.0.0.0/24'"]),
    ({"range": "10.0.0.0/24", "range_end": "10.0.0.256"},
     ["range_end '10.0.0.256' is not a valid IP address"]),
    ({"range": "10.0.0.0/24", "range_start": "fd00::1"},
     ["range_start fd00::1 is IPv6 but range '10.0.0.0/24' is IPv4"]),
    ({"range": "fd00::/64", "range_end": "10.0.0.1"},
     ["range_end 10.0.0.1 is IPv4 but range 'fd00::/64' is IPv6"]),
    ({"range": "10.0.0.0/24", "range_start": "10.0.0.255"},
     ["range '10.0.0.0/24' has no assignable address"]),
    ({"range": "10.0.0.0/24", "exclude": ["fd00::/64"]},
     ["exclude[0] 'fd00::/64' is IPv6 but range '10.0.0.0/24' is IPv4"]),
    ({"range": "10.0.0.0/24", "exclude": ["10.0.0.0/28", "nope"]},
     ["exclude[1] 'nope' is not a valid CIDR"]),
    ({"range": "10.0.0.0/24", "exclude": ["10.0.0.0/25", "10.0.0.128/25"]},
     ["exclude covers every address of range 10.0.0.0/24"]),
    ({"range": "10.0.0.0/24", "range_start": "10.0.0.10", "range_end": "10.0.0.12",
      "exclude": ["10.0.0.8/29"]}, ["exclude covers every address of range 10.0.0.10-"]),
    ({"range": "10.0.0.0/24", "exclude": ["0.0.0.0/0"]}, ["exclude covers every address"]),
    ({"range": "10.0.0.0/24", "exclude": "10.0.0.0/28"},
     ["Expected `array`, got `str` - at `exclude`"]),
    ({"ipRanges": [{"range": "10.0.0.0/24", "exclude": [5]}]},
     ["Expected `str`, got `int` - at `ipRanges[0].exclude[0]`"]),
    ({"range": "10.0.0.0/24", "gateway": "fd00::1"},
     ["gateway fd00::1 is IPv6 but no range is", "10.0.0.0/24"]),
    ({"range": "10.0.0.0/24", "gateway": "10.0.0.1/24"},
     ["gateway '10.0.0.1/24' is not a valid IP address"]),
    ({"range": "10.0.0.0/24", "gateway": "gw"}, ["gateway 'gw' is not a valid IP address"]),
    ({"range": "10.0.0.5/32", "gateway": "10.0.0.5"},
     ["gateway 10.0.0.5 is the only address of range 10.0.0.5/32"]),
    ({}, ["neither range nor ipRanges is set"]),
    ({"range": ""}, ["neither range nor ipRanges is set"]),
    ({"range_start": "10.0.0.5", "ipRanges": [{"range": "10.0.0.0/24"}]},
     ["range_start 10.0.0.5 is given without range"]),
    ({"exclude": ["10.0.0.0/28"], "ipRanges": [{"range": "10.0.0.0/24"}]},
     ["exclude ['10.0.0.0/28'] is given without range"]),
    ({"range": "10.0.0.0/24", "allocation_order": "random"},
     ["allocation_order 'random' is not one of 'round-robin', 'lowest'"]),
    ({"range": 10}, ["Expected `str | null`, got `int` - at `range`"]),
    ({"range": "10.0.0.0/24", "enable_overlapping_ranges": "yes"},
     ["enable_overlapping_ranges"]),
    ({"ipRanges": [{"range": "10.0.0.0/24"}, {"range_start": "10.0.1.1"}]},
     ["Object missing required field `range` - at `ipRanges[1]`"]),
    ({"ipRanges": [{"range": ""}]}, ["ipRanges[0].range is empty"]),
    ({"ipRanges": ["10.0.0.0/24"]}, ["ipRanges", "Expected `object`"]),
    ({"ipRanges": [{"range": "10.0.0.0/24"}, {"range": "10.0.1.0/33"}]},
     ["ipRanges[1].range '10.0.1.0/33' is not a valid CIDR"]),
    ({"ipRanges": [{"range": "10.0.0.0/24", "range_start": "fd00::1"}]},
     ["ipRanges[0].range_start fd00::1 is IPv6 but ipRanges[0].range '10.0.0.0/24' is IPv4"]),
    ({"ipRanges": [{"range": "10.0.0.0/24", "range_start": "10.0.0.9",
                    "range_end": "10.0.0.3"}]},
     ["ipRanges[0].range_start 10.0.0.9 is after ipRanges[0].range_end 10.0.0.3"]),
    ({"ipRanges": [{"range": "fd00::/64", "exclude": ["10.0.0.0/8"]}]},
     ["ipRanges[0].exclude[0] '10.0.0.0/8' is IPv4"]),
    ({"ipRanges": [{"range": "fd00::/120", "exclude": ["fd00::/121", "fd00::80/121"]}]},
     ["ipRanges[0].exclude covers every address of ipRanges[0].range fd00::/120"]),
    ({"ipRanges": [{"range": "fd00::/64", "gateway": "10.0.0.1"}]},
     ["ipRanges[0].gateway 10.0.0.1 is IPv4 but ipRanges[0].range 'fd00::/64' is IPv6"]),
    ({"ipRanges": [{"range": "10.0.0.0/24"}, {"range": "fd00::/64", "gateway": "x"}]},
     ["ipRanges[1].gateway 'x' is not a valid IP address"]),
    ({"range": "10.0.0.0/24", "ipRanges": [{"range": "10.0.0.9/24"}]},
     ["range 10.0.0.0/24 is given twice"]),
])
def test_refusals(ipam: dict[str, Any], fragments: list[str]) -> None:
    refused(ipam, *fragments)


def test_missing_type_refused() -> None:
    with pytest.raises(CNIError) as info:
        parse_config({"range": "10.0.0.0/24"})
    assert info.value.code == INVALID_CONFIG and "`type`" in info.value.msg


def test_not_an_object_refused() -> None:
    with pytest.raises(CNIError) as info:
        parse_config("10.0.0.0/24")  # type: ignore[arg-type]
    assert info.value.code == INVALID_CONFIG
