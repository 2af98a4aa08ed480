"""The pure parts of ``netctl bench hotplug``: reading a link's flags in this netns, and
the hot network's entry in a pod's network-status."""

from __future__ import annotations

import ipaddress
import json
import socket

from netctl.cni.config import parse_chain
from netctl.kit.bench.common import BenchNet
from netctl.kit.bench.hotplug import IFF_UP, IFNAME, hot_status, link_flags
from netctl.kube.objects import NETWORK_STATUS

HOT = BenchNet("hot", "br-hot", ipaddress.IPv4Network("10.1.2.0/24"),
               parse_chain(json.dumps({"cniVersion": "1.0.0", "name": "hot",
                                       "plugins": [{"type": "bridge"}]}), "hot"), {})


def status(entries: object) -> dict[str, object]:
    return {"metadata": {"annotations": {NETWORK_STATUS: json.dumps(entries)}}}


def test_link_flags_of_lo_and_of_a_missing_link() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = link_flags(sock, "lo")
        assert flags is not None and flags & IFF_UP
        assert link_flags(sock, "no-such-link0") is None


def test_hot_status_names_the_address_of_the_hot_network_on_its_interface() -> None:
    eth0 = {"name": "kube-system/c", "interface": "eth0", "ips": ["10.0.0.2"]}
    hot = {"name": "bench/hot", "interface": IFNAME, "ips": ["10.1.2.5"]}
    assert hot_status(status([eth0, hot]), HOT) == "10.1.2.5"
    assert hot_status(status([eth0]), HOT) is None
    assert hot_status(status([eth0, {**hot, "interface": "net2"}]), HOT) is None
    assert hot_status(status([eth0, {**hot, "ips": []}]), HOT) is None
    assert hot_status({"metadata": {"annotations": {NETWORK_STATUS: "not json"}}}, HOT) is None
    assert hot_status({"metadata": {}}, HOT) is None and hot_status(None, HOT) is None
