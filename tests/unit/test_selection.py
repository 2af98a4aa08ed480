"""We test these aspects of network selection (the ``k8s.v1.cni.cncf.io/networks`` syntax):

- the comma form with ``ns/`` and ``@ifname``, white space and empty items;
- the JSON list form with every field, and the capability arguments it gives delegates;
- invalid names, namespaces and interfaces refused with code 7;
- interface numbering by position (``net1``, ``net2``, …) and clash detection.
"""

from __future__ import annotations

import json

import pytest

from netctl.engine.selection import Selection, assign_ifnames, parse
from netctl.errors import INVALID_CONFIG, CNIError


def names(value: str) -> list[tuple[str | None, str, str | None]]:
    return [(s.namespace, s.name, s.interface) for s in parse(value)]


def test_empty() -> None:
    assert parse("") == []
    assert parse("   ") == []
    assert parse("[]") == []


def test_comma_form() -> None:
    assert names("blue") == [(None, "blue", None)]
    assert names("team/blue") == [("team", "blue", None)]
    assert names("blue@eth5") == [(None, "blue", "eth5")]
    assert names("team/blue@eth5, red ,,other/green") == [
        ("team", "blue", "eth5"), (None, "red", None), ("other", "green", None)]
    assert names("a-1,a-1") == [(None, "a-1", None), (None, "a-1", None)]


def test_comma_form_has_no_capability_args() -> None:
    (sel,) = parse("team/blue@eth5")
    assert sel.capability_args() == {}
    assert sel.cni_args is None


def test_json_form_every_field() -> None:
    value = json.dumps([{
        "name": "blue", "namespace": "team", "interface": "fast0",
        "ips": ["10.9.0.5/24", "fd00::5/64"], "mac": "0a:00:00:00:00:05",
        "default-route": ["10.9.0.1"], "cni-args": {"vlan": 7, "mode": "x"},
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1000, "ingressBurst": 100},
        "deviceID": "0000:03:00.1", "infiniband-guid": "c2:11:22:33:44:55:66:77",
        "unknown-future-field": True,
    }, {"name": "red"}])
    blue, red = parse(value)
    assert (blue.namespace, blue.name, blue.interface) == ("team", "blue", "fast0")
    assert blue.default_route == ["10.9.0.1"]
    assert blue.cni_args == {"vlan": 7, "mode": "x"}
    assert blue.capability_args() == {
        "ips": ["10.9.0.5/24", "fd00::5/64"],
        "mac": "0a:00:00:00:00:05",
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1000, "ingressBurst": 100},
        "deviceID": "0000:03:00.1",
        "infinibandGUID": "c2:11:22:33:44:55:66:77",
    }
    assert red == Selection(name="red")
    assert red.capability_args() == {}


def test_json_form_leading_white_space() -> None:
    assert names('  [{"name": "red", "interface": "r0"}]') == [(None, "red", "r0")]


@pytest.mark.parametrize("value", [
    "Blue", "blue_net", "-blue", "blue-", "b" * 254, "team/Blue", "Team/blue", "a/b/c",
    "blue.net", "@eth0", "/blue", "team/", '[{"name": "Blue"}]', '[{"name": "blue\\n"}]',
    '[{"name": "blue", "namespace": "Team"}]', '[{"name": ""}]',
])
def test_invalid_names_refused(value: str) -> None:
    with pytest.raises(CNIError) as info:
        parse(value)
    assert info.value.code == INVALID_CONFIG
    assert "DNS-1123" in info.value.msg


def test_longest_name_accepted() -> None:
    assert parse("b" * 253)[0].name == "b" * 253


@pytest.mark.parametrize("value", [
    "blue@" + "x" * 16, "blue@a:b", "blue@a/b", "blue@..", "blue@", "blue@a b",
    '[{"name": "blue", "interface": "x:y"}]', "blue@" + "é" * 8,
    '[{"name": "blue", "interface": "' + "é" * 8 + '"}]',
])
def test_invalid_interface_refused(value: str) -> None:
    with pytest.raises(CNIError) as info:
        parse(value)
    assert info.value.code == INVALID_CONFIG
    assert "interface of network 'blue'" in info.value.msg


def test_interface_names_are_counted_in_bytes() -> None:
    assert names("blue@" + "é" * 7 + "x") == [(None, "blue", "é" * 7 + "x")]  # 15 bytes
    with pytest.raises(CNIError) as info:
        parse("blue@" + "é" * 8)  # 8 characters, 16 bytes
    assert "at most 15 bytes" in info.value.msg


@pytest.mark.parametrize("value", ["mv@a@b", "team/mv@a@b", "red, mv@@b"])
def test_more_than_one_at_refused(value: str) -> None:
    """Multus refuses it; taking the rest as the interface made one named 'a@b'."""
    with pytest.raises(CNIError) as info:
        parse(value)
    assert info.value.code == INVALID_CONFIG
    element = value.split(",")[-1].strip()
    assert f"{element!r} has more than one '@'" in info.value.msg


@pytest.mark.parametrize(("value", "what"), [
    ('{"name": "mv"}', "a JSON object"), (' {"name":"mv","interface":"a"} ', "a JSON object"),
    ('"mv"', "a JSON string"),
])
def test_json_that_is_not_a_list_is_named(value: str, what: str) -> None:
    with pytest.raises(CNIError) as info:
        parse(value)
    assert info.value.code == INVALID_CONFIG
    assert f"it is {what}; it must be a JSON list of objects" in info.value.msg
    assert "DNS-1123" not in info.value.msg


@pytest.mark.parametrize(("value", "words"), [
    ('[{"name": "blue"', "not valid JSON"),
    ('[{"namespace": "x"}]', "name"),
    ('[{"name": 5}]', "Expected `str`"),
    ('[{"name": "blue", "ips": "10.0.0.1/24"}]', "ips"),
    ('["blue"]', "Expected `object`"),
])
def test_malformed_json_form(value: str, words: str) -> None:
    with pytest.raises(CNIError) as info:
        parse(value)
    assert info.value.code == INVALID_CONFIG
    assert words in info.value.msg


def test_assign_ifnames_by_position() -> None:
    assert assign_ifnames("eth0", []) == []
    assert assign_ifnames("eth0", [None, None, None]) == ["net1", "net2", "net3"]
    assert assign_ifnames("eth0", [None, "fast0", None]) == ["net1", "fast0", "net3"]
    assert assign_ifnames("eth0", ["net2", "net1"]) == ["net2", "net1"]


@pytest.mark.parametrize(("primary", "requested", "clash"), [
    ("eth0", ["eth0"], "eth0"),
    ("eth0", ["a0", "a0"], "a0"),
    ("eth0", [None, "net1"], "net1"),   # position 0 is net1 already
    ("eth0", ["net2", None], "net2"),   # position 1 becomes net2
    ("net1", [None], "net1"),
])
def test_assign_ifnames_clash(primary: str, requested: list[str | None], clash: str) -> None:
    with pytest.raises(CNIError) as info:
        assign_ifnames(primary, requested)
    assert info.value.code == INVALID_CONFIG
    assert repr(clash) in info.value.msg
