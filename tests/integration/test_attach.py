"""We test these aspects: pods with 1, 2 and 3 networks (bridge, macvlan on a veth, ptp),
ADD/CHECK/DEL through the installed plugin at every caller cniVersion netctl serves, with
delegates at 1.0.0 and at 0.4.0; the result's shape per version; interfaces and addresses
inside the netns; CHECK refused at 0.3.1; repeated ADD returns the stored result; DEL
leaves only ``lo`` and nothing on the host; network selection (comma form with ``@ifname``,
the JSON-list form, ``defaultNetworks``) and interface naming; and the journal's record
of who held which address when (``netctl journal --pod/--ip/--at``).

Subnets: 10.101.1-4.0/24.
"""

from __future__ import annotations

import ipaddress
import time
from datetime import datetime
from typing import Any

import pytest
from netctl_kit import journaldb
from pyroute2 import NetNS

from netctl.journal import query
from tests.conftest import (
    Daemon,
    bridge_conf,
    bridge_ports,
    host_links,
    host_veths,
    ipam_held,
    journal_results,
    macvlan_conf,
    netns_addrs,
    netns_links,
    ptp_conf,
)

pytestmark = pytest.mark.netns

SUBNETS = {"br": "10.101.1.0/24", "br2": "10.101.2.0/24", "mv": "10.101.3.0/24",
           "pt": "10.101.4.0/24"}


def add_networks(daemon: Daemon, parent: str, version: str = "1.0.0") -> list[str]:
    """NADs br, br2 (bridges), mv (macvlan on ``parent``), pt (ptp); returns the bridges."""
    bridges = [daemon.name("b1"), daemon.name("b2")]
    ipam = daemon.ipam_dir
    daemon.add_network("br", bridge_conf("br", bridges[0], SUBNETS["br"], version, ipam))
    daemon.add_network("br2", bridge_conf("br2", bridges[1], SUBNETS["br2"], version, ipam))
    daemon.add_network("mv", macvlan_conf("mv", parent, SUBNETS["mv"], version, ipam))
    daemon.add_network("pt", ptp_conf("pt", SUBNETS["pt"], version, ipam))
    return bridges


def in_subnet(cidr: str, net: str) -> bool:
    return ipaddress.ip_interface(cidr).ip in ipaddress.ip_network(SUBNETS[net])


def pyroute_view(ns: str) -> dict[str, list[str]]:
    """Interface → global IPv4 addresses inside ``ns``, read with pyroute2 (netlink)."""
    with NetNS(ns) as nl:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in nl.get_links()}
        view: dict[str, list[str]] = {name: [] for name in names.values()}
        for addr in nl.get_addr(family=2):
            if addr["scope"] == 0:  # RT_SCOPE_UNIVERSE
                local = addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS")
                view[names[addr["index"]]].append(f"{local}/{addr['prefixlen']}")
    return view


def assert_result_shape(result: dict[str, Any], version: str, ns: str) -> str:
    """The result is in ``version``'s shape for eth0 in ``ns``; returns eth0's address."""
    assert result["cniVersion"] == version
    assert len(result["ips"]) == 1
    entry = result["ips"][0]
    if version.startswith("0."):
        assert entry["version"] == "4", result
    else:
        assert "version" not in entry, result
    iface = result["interfaces"][entry["interface"]]
    assert iface["name"] == "eth0"
    assert iface["sandbox"] == f"/var/run/netns/{ns}"
    assert in_subnet(entry["address"], "br")
    return str(entry["address"])


def assert_gone(daemon: Daemon, ns: str, container: str, bridges: list[str]) -> None:
    """After DEL: only lo in the netns, no ports, no host veths, no addresses held."""
    assert netns_links(ns) == ["lo"]
    for br in bridges:
        assert bridge_ports(br) == [], br
    veths = host_veths(journal_results(daemon, container))
    assert veths, "expected the journal to name the host-side veths"
    assert not set(veths) & set(host_links("veth"))
    assert ipam_held(daemon.ipam_dir) == []
    states = [a["state"] for a in daemon.read(query.attachments, container=container)]
    assert states and set(states) == {"removed"}


CASES = [(v, n, "1.0.0") for v in ("0.3.1", "0.4.0", "1.0.0", "1.1.0") for n in (1, 2, 3)]
CASES += [("1.1.0", 3, "0.4.0"), ("0.3.1", 3, "0.4.0"), ("0.4.0", 2, "0.4.0")]


@pytest.mark.parametrize(("version", "count", "delegate_version"), CASES,
                         ids=[f"caller{v}-{n}net-delegates{d}" for v, n, d in CASES])
def test_add_check_del(daemon: Daemon, netns, veth_parent: str, version: str, count: int,
                       delegate_version: str) -> None:
    bridges = add_networks(daemon, veth_parent, delegate_version)
    daemon.start()
    ns = netns()
    container = f"att-{count}"
    networks = {1: "", 2: "mv", 3: "mv@data0,pt"}[count]
    expected = {1: {"eth0": "br"}, 2: {"eth0": "br", "net1": "mv"},
                3: {"eth0": "br", "data0": "mv", "net2": "pt"}}[count]
    conf = daemon.conf("br", version)

    res = daemon.cni("ADD", container, ns, conf, networks=networks, pod="default/web")
    assert res.rc == 0, res.stdout + res.stderr
    assert res.out is not None
    addr = assert_result_shape(res.out, version, ns)

    view = pyroute_view(ns)
    assert set(view) == {"lo", *expected}
    for ifname, net in expected.items():
        assert len(view[ifname]) == 1, view
        assert in_subnet(view[ifname][0], net), (ifname, view)
    assert view["eth0"] == [addr]
    assert len(bridge_ports(bridges[0])) == 1

    again = daemon.cni("ADD", container, ns, conf, networks=networks, pod="default/web")
    assert again.rc == 0, again.stdout + again.stderr
    assert again.out == res.out
    assert pyroute_view(ns) == view
    adds = daemon.read(journaldb.operation_rows, verb="ADD", container=container)
    assert len(adds) == 1

    check = daemon.cni("CHECK", container, ns, conf)
    if version == "0.3.1":
        assert check.rc == 1
        assert check.out is not None and check.out["code"] == 1, check.stdout
        assert check.out["cniVersion"] == "0.3.1"
    else:
        assert check.rc == 0, check.stdout + check.stderr
        checked = [s["state"] for s in daemon.read(journaldb.step_rows, verb="CHECK")]
        assert (len(checked), checked.count("ok")) == (count, count)

    dele = daemon.cni("DEL", container, ns, conf)
    assert dele.rc == 0, dele.stdout + dele.stderr
    assert dele.stdout.strip() == ""
    assert_gone(daemon, ns, container, bridges)


def test_comma_selection_names_interfaces(daemon: Daemon, netns, veth_parent: str) -> None:
    bridges = add_networks(daemon, veth_parent)
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    res = daemon.cni("ADD", "comma", ns, conf, networks="br2,mv@data0", pod="default/c")
    assert res.rc == 0, res.stdout + res.stderr
    addrs = netns_addrs(ns)
    assert set(addrs) == {"lo", "eth0", "net1", "data0"}
    assert in_subnet(addrs["eth0"][0], "br")
    assert in_subnet(addrs["net1"][0], "br2")
    assert in_subnet(addrs["data0"][0], "mv")
    assert len(bridge_ports(bridges[0])) == 1 and len(bridge_ports(bridges[1])) == 1
    assert daemon.cni("DEL", "comma", ns, conf).rc == 0
    assert_gone(daemon, ns, "comma", bridges)


def test_json_selection(daemon: Daemon, netns, veth_parent: str) -> None:
    bridges = add_networks(daemon, veth_parent)
    daemon.start()
    ns = netns()
    conf = daemon.conf("br", "1.0.0")
    selection = '[{"name":"pt","interface":"p2p0"},{"name":"mv","namespace":"default"}]'
    res = daemon.cni("ADD", "jsonsel", ns, conf, networks=selection, pod="team-a/j")
    assert res.rc == 0, res.stdout + res.stderr
    addrs = netns_addrs(ns)
    assert set(addrs) == {"lo", "eth0", "p2p0", "net2"}
    assert in_subnet(addrs["p2p0"][0], "pt")
    assert in_subnet(addrs["net2"][0], "mv")
    atts = {a["ifname"]: a for a in daemon.journal("--container", "jsonsel")["attachments"]}
    assert atts["p2p0"]["network"] == "default/pt"
    assert atts["net2"]["network"] == "default/mv"
    assert daemon.cni("DEL", "jsonsel", ns, conf).rc == 0
    assert_gone(daemon, ns, "jsonsel", bridges)


def test_default_networks(daemon: Daemon, netns, veth_parent: str) -> None:
    bridges = add_networks(daemon, veth_parent)
    daemon.start()
    ns, bare = netns(), netns()
    conf = daemon.conf("br", defaultNetworks=["br2"])
    res = daemon.cni("ADD", "defnets", ns, conf, networks="pt", pod="default/d")
    assert res.rc == 0, res.stdout + res.stderr
    addrs = netns_addrs(ns)
    assert set(addrs) == {"lo", "eth0", "net1", "net2"}
    assert in_subnet(addrs["net1"][0], "br2")
    assert in_subnet(addrs["net2"][0], "pt")
    # A pod that selects nothing still gets the default networks.
    res = daemon.cni("ADD", "defbare", bare, conf, pod="default/e")
    assert res.rc == 0, res.stdout + res.stderr
    addrs = netns_addrs(bare)
    assert set(addrs) == {"lo", "eth0", "net1"}
    assert in_subnet(addrs["net1"][0], "br2")
    assert len(bridge_ports(bridges[1])) == 2
    assert daemon.cni("DEL", "defnets", ns, conf).rc == 0
    assert daemon.cni("DEL", "defbare", bare, conf).rc == 0
    assert_gone(daemon, ns, "defnets", bridges)
    assert_gone(daemon, bare, "defbare", bridges)


def test_journal_finds_pod_by_ip_and_time(daemon: Daemon, netns, veth_parent: str) -> None:
    add_networks(daemon, veth_parent)
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    res = daemon.cni("ADD", "jrn", ns, conf, networks="mv", pod="team-a/web-1")
    assert res.rc == 0, res.stdout + res.stderr
    during = time.time()
    addrs = netns_addrs(ns)

    atts = daemon.journal("--pod", "team-a/web-1")["attachments"]
    assert sorted((a["ifname"], a["network"]) for a in atts) == [
        ("eth0", "default/br"), ("net1", "default/mv")]
    for att in atts:
        assert att["container"] == "jrn"
        assert att["pod"] == "team-a/web-1"
        assert att["state"] == "attached"
        assert att["addresses"] == addrs[att["ifname"]]
    ops = daemon.journal("--container", "jrn")["operations"]
    assert [(o["verb"], o["state"]) for o in ops] == [("ADD", "done")]

    mv_addr = addrs["net1"][0].split("/")[0]
    found = daemon.journal("--ip", mv_addr, "--at", str(during))["attachments"]
    assert [(a["pod"], a["ifname"]) for a in found] == [("team-a/web-1", "net1")]

    assert daemon.cni("DEL", "jrn", ns, conf).rc == 0
    # Afterwards: still found at a time it was held (ISO 8601 too), not at the present.
    iso = datetime.fromtimestamp(during).isoformat()
    found = daemon.journal("--ip", mv_addr, "--at", iso)["attachments"]
    assert [(a["pod"], a["state"]) for a in found] == [("team-a/web-1", "removed")]
    assert found[0]["until"] > during
    assert daemon.journal("--ip", mv_addr, "--at", str(time.time()))["attachments"] == []
    assert daemon.journal("--ip", "10.101.9.9")["attachments"] == []
    ops = daemon.journal("--container", "jrn")["operations"]
    assert [(o["verb"], o["state"]) for o in ops] == [("ADD", "done"), ("DEL", "done")]
