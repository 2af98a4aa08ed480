"""We test these aspects of result conversion between CNI versions:

- every ordered pair of 0.3.1, 0.4.0, 1.0.0 and 1.1.0, for IPv4 and IPv6 addresses;
- ``ips[].version`` present below 1.0.0 and absent from 1.0.0 on;
- the 1.1-only interface fields dropped when going below 1.1.0, kept at 1.1.0;
- everything else carried over unchanged, and the input never mutated;
- invalid and unsupported versions refused with CNI code 1.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from netctl.cni import versions
from netctl.errors import INCOMPATIBLE_VERSION, CNIError

VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
EXTRAS_1_1 = {"mtu": 1400, "socketPath": "/run/vhost.sock", "pciID": "0000:00:1f.6"}


def result_at(version: str, *, extras: bool) -> dict[str, Any]:
    """A dual-stack result as a plugin of ``version`` prints it."""
    eth0: dict[str, Any] = {"name": "eth0", "mac": "0a:58:0a:f4:00:05",
                            "sandbox": "/var/run/netns/pod"}
    if extras:
        eth0.update(EXTRAS_1_1)
    ips: list[dict[str, Any]] = [
        {"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 1},
        {"address": "fd00:10::5/64", "gateway": "fd00:10::1", "interface": 1},
    ]
    if versions.parse(version) < (1, 0, 0):
        ips[0]["version"] = "4"
        ips[1]["version"] = "6"
    return {
        "cniVersion": version,
        "interfaces": [{"name": "cni0", "mac": "0a:58:0a:f4:00:01"}, eth0],
        "ips": ips,
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.0.1"}, {"dst": "::/0"}],
        "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
    }


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(VERSIONS, VERSIONS)))
def test_convert_every_pair(src: str, dst: str) -> None:
    source = result_at(src, extras=src == "1.1.0")
    before = copy.deepcopy(source)
    out = versions.convert_result(source, dst)
    assert out == result_at(dst, extras=src == "1.1.0" and dst == "1.1.0")
    assert source == before, "the input result was mutated"
    assert out is not source


@pytest.mark.parametrize("dst", ["0.3.1", "0.4.0"])
def test_version_field_follows_the_address_family(dst: str) -> None:
    result = {"cniVersion": "1.0.0", "ips": [
        {"address": "2001:db8::7/128"}, {"address": "192.0.2.7/32"},
        {"address": "::ffff:1.2.3.4/96"},
    ]}
    out = versions.convert_result(result, dst)
    assert [ip["version"] for ip in out["ips"]] == ["6", "4", "6"]


def test_version_field_removed_going_up() -> None:
    result = {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "192.0.2.7/24"}]}
    out = versions.convert_result(result, "1.0.0")
    assert out["ips"] == [{"address": "192.0.2.7/24"}]


def test_interface_fields_dropped_only_below_1_1() -> None:
    result = result_at("1.1.0", extras=True)
    for dst in ("0.3.1", "0.4.0", "1.0.0"):
        eth0 = versions.convert_result(result, dst)["interfaces"][1]
        assert not set(EXTRAS_1_1) & set(eth0), dst
        assert eth0["name"] == "eth0" and eth0["sandbox"] == "/var/run/netns/pod"
    eth0 = versions.convert_result(result, "1.1.0")["interfaces"][1]
    assert {k: eth0[k] for k in EXTRAS_1_1} == EXTRAS_1_1


def test_round_trip_down_and_up_keeps_everything_but_1_1_fields() -> None:
    result = result_at("1.1.0", extras=True)
    back = versions.convert_result(versions.convert_result(result, "0.3.1"), "1.1.0")
    assert back == result_at("1.1.0", extras=False)


def test_result_without_ips_or_interfaces() -> None:
    assert versions.convert_result({"cniVersion": "1.1.0"}, "0.3.1") == {"cniVersion": "0.3.1"}
    out = versions.convert_result({"cniVersion": "0.3.1", "ips": [], "dns": {}}, "1.0.0")
    assert out == {"cniVersion": "1.0.0", "ips": [], "dns": {}}


@pytest.mark.parametrize("bad", ["", "1", "1.0", "1.0.0.0", "v1.0.0", "1.0.x", "abc", None, 1.0])
def test_invalid_versions_refused(bad: Any) -> None:
    with pytest.raises(CNIError) as info:
        versions.convert_result({"cniVersion": "1.0.0"}, bad)
    assert info.value.code == INCOMPATIBLE_VERSION
    assert "invalid cniVersion" in info.value.msg
    with pytest.raises(CNIError) as info:
        versions.parse(bad)
    assert info.value.code == INCOMPATIBLE_VERSION


@pytest.mark.parametrize("unsupported", ["0.1.0", "0.2.0", "0.5.0", "1.2.0", "2.0.0"])
def test_unsupported_versions_refused(unsupported: str) -> None:
    with pytest.raises(CNIError) as info:
        versions.convert_result({"cniVersion": "1.0.0"}, unsupported)
    assert info.value.code == INCOMPATIBLE_VERSION
    assert unsupported in info.value.msg and "1.1.0" in info.value.msg


def test_parse_and_supported() -> None:
    assert versions.parse("1.1.0") == (1, 1, 0)
    assert versions.parse("0.3.1") < versions.parse("0.4.0") < versions.parse("1.0.0")
    for v in (*VERSIONS, "0.3.0"):
        assert versions.check_supported(v) == v


def test_verbs_by_version() -> None:
    assert [versions.supports_check(v) for v in VERSIONS] == [False, True, True, True]
