"""We test :mod:`netctl.engine.gateways`, the pure decision behind ``default-route``:
which default routes the pod gets, what is refused, and the results rewritten."""

from __future__ import annotations

from typing import Any

import pytest

from netctl.cni.config import parse_chain
from netctl.engine import gateways
from netctl.errors import CNIError
from netctl.journal.records import Attachment

CHAIN = parse_chain(b'{"cniVersion": "1.0.0", "name": "n", "type": "bridge"}', "n")


def att(ifname: str, address: str, routes: list[dict[str, Any]],
        asks: tuple[str, ...] = ()) -> Attachment:
    return Attachment(container_id="c", ifname=ifname, network=f"ns/{ifname}", chain=CHAIN,
                      default_route=list(asks), result={
                          "cniVersion": "1.0.0", "ips": [{"address": address}],
                          "routes": routes})


def test_nothing_asked_nothing_moves() -> None:
    eth0 = att("eth0", "10.0.0.2/24", [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}])
    assert gateways.plan([eth0]) == []
    assert gateways.rewritten(eth0.result, "eth0", []) is eth0.result


def test_ipv4_moves_and_ipv6_stays() -> None:
    eth0 = att("eth0", "10.0.0.2/24", [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"},
                                       {"dst": "::/0", "gw": "fd00::1"}])
    net1 = att("net1", "10.1.0.5/24", [{"dst": "10.9.0.0/16"}], ("10.1.0.1",))
    moves = gateways.plan([eth0, net1])
    assert moves == [gateways.DefaultRoute(4, "net1", "10.1.0.1")]
    assert gateways.rewritten(eth0.result, "eth0", moves)["routes"] == [  # type: ignore[index]
        {"dst": "::/0", "gw": "fd00::1"}]
    assert gateways.rewritten(net1.result, "net1", moves)["routes"] == [  # type: ignore[index]
        {"dst": "10.9.0.0/16"}, {"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]


def test_a_gateway_outside_the_networks_subnets_is_refused() -> None:
    net1 = att("net1", "10.1.0.5/24", [], ("10.2.0.1",))
    with pytest.raises(CNIError) as info:
        gateways.plan([att("eth0", "10.0.0.2/24", []), net1])
    assert info.value.code == 7
    assert "default-route 10.2.0.1 is not in its subnets (10.1.0.0/24)" in info.value.msg


def test_two_gateways_of_one_family_are_refused() -> None:
    with pytest.raises(CNIError, match="at most one"):
        gateways.plan([att("net1", "10.1.0.5/24", [], ("10.1.0.1",)),
                       att("net2", "10.2.0.5/24", [], ("10.2.0.1",))])
