"""We test these aspects of the CNI_* environment checks: container ids, interface
names (the kernel's rules, as libcni applies them), commands and CNI_ARGS parsing.
Every refusal is CNI code 4 (invalid environment variables) and quotes the value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from netctl.cni import validate
from netctl.errors import INVALID_ENVIRONMENT, CNIError


def refused(fn: Callable[[Any], object], value: Any, what: str = "") -> CNIError:
    with pytest.raises(CNIError) as info:
        fn(value)
    assert info.value.code == INVALID_ENVIRONMENT
    assert what in info.value.msg
    return info.value


@pytest.mark.parametrize("cid", [
    "a", "0", "abc123", "f" * 64, "pod_1.sandbox-2", "A-b_C.d", "x" * 1024,
])
def test_container_id_accepted(cid: str) -> None:
    assert validate.container_id(cid) == cid


@pytest.mark.parametrize("cid", [
    "-abc", "_abc", ".abc", "a/b", "../x", "a b", "a:b", "a;b", "abc\n", "\nabc", "é",
    "x" * 1025,
])
def test_container_id_refused(cid: str) -> None:
    refused(validate.container_id, cid, "CNI_CONTAINERID")


@pytest.mark.parametrize("cid", [None, ""])
def test_container_id_missing(cid: str | None) -> None:
    refused(validate.container_id, cid, "CNI_CONTAINERID is missing")


@pytest.mark.parametrize("name", ["eth0", "net1", "a", "x" * 15, "eth0.100", "veth@1", "...",
                                  "é" * 7 + "x", "网" * 5])
def test_ifname_accepted(name: str) -> None:
    assert validate.ifname(name) == name


@pytest.mark.parametrize("name", [
    "x" * 16, "a/b", "/", "eth:0", "eth 0", " eth0", "eth0\t", "eth0\n", ".", "..",
    "é" * 8, "网" * 5 + "x", "eth0-🙂🙂🙂",  # 16, 16 and 17 bytes: the kernel counts bytes
])
def test_ifname_refused(name: str) -> None:
    refused(validate.ifname, name, "CNI_IFNAME")


def test_ifname_missing_and_named_by_caller() -> None:
    refused(validate.ifname, None, "CNI_IFNAME is missing")
    refused(validate.ifname, "", "CNI_IFNAME is missing")
    with pytest.raises(CNIError) as info:
        validate.ifname("a:b", "interface of network red")
    assert info.value.msg.startswith("interface of network red 'a:b' is invalid")


@pytest.mark.parametrize("verb", ["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"])
def test_command_accepted(verb: str) -> None:
    assert validate.command(verb) == verb


@pytest.mark.parametrize("verb", ["add", "Del", "UPDATE", "ADD ", "x" * 100])
def test_command_refused(verb: str) -> None:
    err = refused(validate.command, verb, "CNI_COMMAND")
    assert "ADD, DEL, CHECK, GC, STATUS, VERSION" in err.msg
    assert len(err.msg) < 120  # a long value is cut


def test_command_missing() -> None:
    refused(validate.command, None, "CNI_COMMAND is missing")
    refused(validate.command, "", "CNI_COMMAND is missing")


@pytest.mark.parametrize(("raw", "parsed"), [
    (None, {}),
    ("", {}),
    ("IgnoreUnknown=1", {"IgnoreUnknown": "1"}),
    ("K8S_POD_NAMESPACE=demo;K8S_POD_NAME=pod1;K8S_POD_UID=u-1",
     {"K8S_POD_NAMESPACE": "demo", "K8S_POD_NAME": "pod1", "K8S_POD_UID": "u-1"}),
    ("A=1;;B=;", {"A": "1", "B": ""}),
    ("NETCTL_NETWORKS=ns/a@x,b;EQ=a=b", {"NETCTL_NETWORKS": "ns/a@x,b", "EQ": "a=b"}),
    ("A=1;A=2", {"A": "2"}),
])
def test_parse_cni_args(raw: str | None, parsed: dict[str, str]) -> None:
    assert validate.parse_cni_args(raw) == parsed


@pytest.mark.parametrize("raw", ["novalue", "A=1;broken", "=x", "A=1;=2"])
def test_parse_cni_args_refused(raw: str) -> None:
    refused(validate.parse_cni_args, raw, "is not KEY=VALUE")
