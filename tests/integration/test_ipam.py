"""We test these aspects of the central IPAM (netctl-ipam) on real netns and plugins:
addresses from the range, unique, never the gateway; a repeated ADD keeps its address;
DEL releases and round-robin does not hand the released address out at once; requested
addresses honoured or refused; an exhausted pool answers code 100 and loses nothing;
compensation releases; whereabouts configs served through ipamTakeover; dual-stack
ipRanges; and netctl-ipam exec'd as a plain IPAM plugin by a main plugin."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from netctl_kit import journaldb

from tests.conftest import (
    SYSTEM_CNI,
    CNIResult,
    Daemon,
    bridge_ports,
    eth0_addr,
    exec_direct,
    ipam_bridge,
    live,
    netns_addrs,
    netns_links,
)

pytestmark = pytest.mark.netns


def test_allocates_unique_addresses_and_releases_on_del(daemon: Daemon, netns) -> None:
    br = daemon.name("i0")
    daemon.add_network("blue", ipam_bridge("blue", br, {
        "type": "netctl-ipam", "range": "10.131.0.0/29", "gateway": "10.131.0.1"}))
    daemon.start()
    conf = daemon.conf("blue")
    pods = [netns() for _ in range(3)]
    addrs = []
    for i, ns in enumerate(pods):
        res = daemon.cni("ADD", f"ip{i}", ns, conf)
        assert res.rc == 0, res.stdout + res.stderr
        assert res.out is not None
        assert res.out["ips"][0]["address"] == eth0_addr(ns)
        assert res.out["ips"][0]["gateway"] == "10.131.0.1"
        addrs.append(eth0_addr(ns))
    assert addrs == ["10.131.0.2/29", "10.131.0.3/29", "10.131.0.4/29"]
    assert [a for _, _, a in live(daemon)] == ["10.131.0.2", "10.131.0.3", "10.131.0.4"]

    again = daemon.cni("ADD", "ip1", pods[1], conf)  # repeated ADD: same address
    assert again.rc == 0 and again.out is not None
    assert again.out["ips"][0]["address"] == "10.131.0.3/29"

    assert daemon.cni("DEL", "ip1", pods[1], conf).rc == 0
    assert netns_links(pods[1]) == ["lo"]
    assert [a for _, _, a in live(daemon)] == ["10.131.0.2", "10.131.0.4"]
    released = daemon.read(journaldb.allocation_rows, address="10.131.0.3")
    assert released[0]["released_at"] is not None  # kept, with its release time: history

    # round-robin: the next pod gets .5, not the just-released .3
    res = daemon.cni("ADD", "ip3", pods[1], conf)
    assert res.rc == 0, res.stdout
    assert eth0_addr(pods[1]) == "10.131.0.5/29"
    for i, ns in ((0, pods[0]), (2, pods[2]), (3, pods[1])):
        assert daemon.cni("DEL", f"ip{i}", ns, conf).rc == 0
    assert live(daemon) == []
    assert bridge_ports(br) == []


def test_exhausted_pool_is_code_100_and_loses_nothing(daemon: Daemon, netns) -> None:
    br = daemon.name("i1")
    daemon.add_network("tiny", ipam_bridge("tiny", br, {
        "type": "netctl-ipam", "range": "10.131.1.0/24", "range_start": "10.131.1.10",
        "range_end": "10.131.1.11"}))
    daemon.start()
    conf = daemon.conf("tiny")
    a, b, c = netns(), netns(), netns()
    assert daemon.cni("ADD", "t1", a, conf).rc == 0
    assert daemon.cni("ADD", "t2", b, conf).rc == 0
    res = daemon.cni("ADD", "t3", c, conf)
    assert res.rc == 1 and res.out is not None, res.stdout
    assert res.out["code"] == 100, res.out
    assert "10.131.1.10-10.131.1.11" in res.out["msg"] or "10.131.1.0/24" in res.out["msg"]
    assert "2 addresses" in res.out["msg"], res.out["msg"]
    assert netns_links(c) == ["lo"]
    ops = daemon.read(journaldb.operation_rows, container="t3")
    assert [(o["state"], o["code"]) for o in ops] == [("compensated", 100)]
    assert len(live(daemon)) == 2
    assert len(bridge_ports(br)) == 2
    # the daemon still serves: free one, the next ADD gets it
    assert daemon.cni("DEL", "t1", a, conf).rc == 0
    assert daemon.cni("ADD", "t3", c, conf).rc == 0
    assert eth0_addr(c) == "10.131.1.10/24"
    for cid, ns in (("t2", b), ("t3", c)):
        assert daemon.cni("DEL", cid, ns, conf).rc == 0


def test_requested_ips_honoured_or_refused(daemon: Daemon, netns) -> None:
    br, br2 = daemon.name("i2"), daemon.name("i3")
    daemon.add_network("cluster", ipam_bridge("cluster", br, {
        "type": "netctl-ipam", "range": "10.131.2.0/24"}))
    daemon.add_network("fixed", ipam_bridge("fixed", br2, {
        "type": "netctl-ipam", "range": "10.131.3.0/24"}))
    daemon.start()
    conf = daemon.conf("cluster")
    a, b, c = netns(), netns(), netns()
    want = json.dumps([{"name": "fixed", "ips": ["10.131.3.77/24"]}])
    res = daemon.cni("ADD", "r1", a, conf, networks=want)
    assert res.rc == 0, res.stdout + res.stderr
    assert netns_addrs(a)["net1"] == ["10.131.3.77/24"]

    taken = daemon.cni("ADD", "r2", b, conf, networks=want)
    assert taken.rc == 1 and taken.out is not None and taken.out["code"] == 7, taken.stdout
    assert "10.131.3.77" in taken.out["msg"] and "r1" in taken.out["msg"]
    assert netns_links(b) == ["lo"]

    outside = json.dumps([{"name": "fixed", "ips": ["10.99.0.5/24"]}])
    res = daemon.cni("ADD", "r3", c, conf, networks=outside)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.stdout
    assert "10.99.0.5" in res.out["msg"]
    assert netns_links(c) == ["lo"]
    assert sorted(a for _, _, a in live(daemon)) == ["10.131.2.1", "10.131.3.77"]  # no gateway
    assert daemon.cni("DEL", "r1", a, conf).rc == 0
    assert live(daemon) == []


def test_compensation_releases_the_allocation(daemon: Daemon, netns) -> None:
    br = daemon.name("i4")
    daemon.add_network("good", ipam_bridge("good", br, {
        "type": "netctl-ipam", "range": "10.131.4.0/24"}))
    daemon.add_network("bad", {"cniVersion": "1.0.0", "name": "bad", "type": "fail"})
    daemon.start()
    ns = netns()
    res = daemon.cni("ADD", "comp1", ns, daemon.conf("good"), networks="bad")
    assert res.rc == 1, res.stdout
    assert live(daemon) == []
    rows = daemon.read(journaldb.allocation_rows)
    assert [(a["address"], a["released_at"] is not None) for a in rows] == [
        ("10.131.4.1", True)]  # no gateway set: .1 is assignable
    assert netns_links(ns) == ["lo"]


def test_whereabouts_configs_are_served_through_takeover(daemon: Daemon, netns) -> None:
    br = daemon.name("i5")
    daemon.settings["ipam-takeover"] = ["whereabouts"]
    daemon.add_network("wb", ipam_bridge("wb", br, {
        "type": "whereabouts", "range": "10.131.5.0/24", "exclude": ["10.131.5.0/28"]}))
    daemon.start()
    ns = netns()
    conf = daemon.conf("wb")
    res = daemon.cni("ADD", "wb1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert eth0_addr(ns) == "10.131.5.16/24"
    assert daemon.cni("DEL", "wb1", ns, conf).rc == 0
    assert live(daemon) == []


def test_dual_stack_ip_ranges(daemon: Daemon, netns) -> None:
    br = daemon.name("i6")
    daemon.add_network("dual", ipam_bridge("dual", br, {
        "type": "netctl-ipam", "ipRanges": [
            {"range": "10.131.6.0/24"}, {"range": "fd00:131:6::/64"}]}))
    daemon.start()
    ns = netns()
    conf = daemon.conf("dual")
    res = daemon.cni("ADD", "ds1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert res.out is not None
    assert [ip["address"] for ip in res.out["ips"]] == ["10.131.6.1/24", "fd00:131:6::1/64"]
    v6 = json.loads(subprocess.run(["ip", "-n", ns, "-j", "-6", "addr", "show", "eth0"],
                                   capture_output=True, text=True, check=True).stdout)
    assert any(a["local"] == "fd00:131:6::1" for a in v6[0]["addr_info"])
    assert daemon.cni("DEL", "ds1", ns, conf).rc == 0
    assert live(daemon) == []


def test_netctl_ipam_as_a_plain_ipam_plugin(daemon: Daemon, netns) -> None:
    """bridge exec'd directly (no netctl-cni) execs the installed netctl-ipam itself."""
    br = daemon.name("i7")
    daemon.start()
    ns = netns()
    conf = {"cniVersion": "1.0.0", "name": "plain", "type": "bridge", "bridge": br,
            "ipam": {"type": "netctl-ipam", "socket": daemon.socket,
                     "range": "10.131.7.0/24", "gateway": "10.131.7.1"}}

    def bridge(command: str, **extra: Any) -> CNIResult:
        return exec_direct(daemon, f"{SYSTEM_CNI}/bridge", command, {**conf, **extra},
                           container="plain1", ns=ns)

    add = bridge("ADD")
    assert add.rc == 0 and add.out is not None, add.stdout + add.stderr
    assert add.out["ips"][0]["address"] == "10.131.7.2/24"
    assert eth0_addr(ns) == "10.131.7.2/24"
    assert live(daemon) == [("plain1", "eth0", "10.131.7.2")]
    check = bridge("CHECK", prevResult=add.out)
    assert check.rc == 0, check.stdout + check.stderr
    assert bridge("DEL").rc == 0
    assert live(daemon) == []
    assert daemon.read(journaldb.operation_states) == [
        ("ADD", "ipam", "done"), ("CHECK", "ipam", "done"), ("DEL", "ipam", "done")]
