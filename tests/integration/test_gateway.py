"""We test these aspects of netctl-ipam under a main plugin that takes a gateway, on real
netns and the real plugins, with no ``gateway`` in the IPAM section:

- bridge with ``isGateway`` (served in-process by the engine): the bridge gets the
  subnet's first address, the pods never do, and their result names it as gateway;
  with ``isDefaultGateway`` the pod's default route goes through it;
- the same bridge exec'd directly, exec'ing the installed netctl-ipam as a plain IPAM
  plugin (its stdin is the bridge's whole conf);
- ptp, whose host veth takes the gateway: it works and the pod is not the gateway;
- a bridge without ``isGateway`` keeps whereabouts' rule (no gateway: .1 is a pod's).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import (
    SYSTEM_CNI,
    Daemon,
    eth0_addr,
    exec_direct,
    ip,
    ipam_bridge,
    live,
    netns_links,
)

pytestmark = pytest.mark.netns


def host_addrs(link: str) -> list[str]:
    data = json.loads(ip("-j", "addr", "show", "dev", link).stdout or "[]")
    return [f"{a['local']}/{a['prefixlen']}" for d in data for a in d.get("addr_info", [])
            if a.get("scope") == "global"]


def default_route(ns: str) -> list[str]:
    routes = json.loads(ip("-n", ns, "-j", "route", "show", "default").stdout or "[]")
    return [str(r.get("gateway")) for r in routes]


def gateway_bridge(name: str, bridge: str, ipam: dict[str, Any], **flags: bool
                   ) -> dict[str, Any]:
    conf = ipam_bridge(name, bridge, ipam)
    conf["plugins"][0].update(flags)
    return conf


@pytest.mark.parametrize("flag", ["isGateway", "isDefaultGateway"])
def test_bridge_gateway_is_never_a_pods_address(daemon: Daemon, netns, flag: str) -> None:
    br = daemon.name("g0")
    daemon.add_network("gw", gateway_bridge("gw", br, {
        "type": "netctl-ipam", "range": "10.132.0.0/24"}, **{flag: True}))
    daemon.start()
    conf = daemon.conf("gw")
    pods = [netns(), netns()]
    for i, ns in enumerate(pods):
        res = daemon.cni("ADD", f"gw{i}", ns, conf)
        assert res.rc == 0, res.stdout + res.stderr
        assert res.out is not None
        assert res.out["ips"][0]["gateway"] == "10.132.0.1"
    assert [eth0_addr(ns) for ns in pods] == ["10.132.0.2/24", "10.132.0.3/24"]
    assert host_addrs(br) == ["10.132.0.1/24"]
    if flag == "isDefaultGateway":
        assert default_route(pods[0]) == ["10.132.0.1"]
    assert [a for _, _, a in live(daemon)] == ["10.132.0.2", "10.132.0.3"]
    for i, ns in enumerate(pods):
        assert daemon.cni("DEL", f"gw{i}", ns, conf).rc == 0
        assert netns_links(ns) == ["lo"]
    assert live(daemon) == []


def test_plain_ipam_plugin_under_a_gateway_bridge(daemon: Daemon, netns) -> None:
    br = daemon.name("g1")
    daemon.start()
    ns = netns()
    conf = {"cniVersion": "1.0.0", "name": "plaingw", "type": "bridge", "bridge": br,
            "isGateway": True, "ipam": {"type": "netctl-ipam", "socket": daemon.socket,
                                        "range": "10.132.1.0/24"}}
    add = exec_direct(daemon, f"{SYSTEM_CNI}/bridge", "ADD", conf, container="plaingw1", ns=ns)
    assert add.rc == 0 and add.out is not None, add.stdout + add.stderr
    assert add.out["ips"][0]["address"] == "10.132.1.2/24"
    assert add.out["ips"][0]["gateway"] == "10.132.1.1"
    assert eth0_addr(ns) == "10.132.1.2/24"
    assert host_addrs(br) == ["10.132.1.1/24"]
    assert exec_direct(daemon, f"{SYSTEM_CNI}/bridge", "DEL", conf, container="plaingw1",
                       ns=ns).rc == 0
    assert live(daemon) == []


def test_ptp_takes_the_gateway(daemon: Daemon, netns) -> None:
    daemon.add_network("pgw", {"cniVersion": "1.0.0", "name": "pgw", "plugins": [{
        "type": "ptp", "ipam": {"type": "netctl-ipam", "range": "10.132.2.0/24"}}]})
    daemon.start()
    ns = netns()
    conf = daemon.conf("pgw")
    res = daemon.cni("ADD", "pgw1", ns, conf)
    assert res.rc == 0 and res.out is not None, res.stdout + res.stderr
    assert eth0_addr(ns) == "10.132.2.2/24"
    host_veth = next(i["name"] for i in res.out["interfaces"] if not i.get("sandbox"))
    assert host_addrs(host_veth) == ["10.132.2.1/32"]
    assert daemon.cni("DEL", "pgw1", ns, conf).rc == 0
    assert live(daemon) == []


def test_bridge_without_is_gateway_has_no_default_gateway(daemon: Daemon, netns) -> None:
    br = daemon.name("g3")
    daemon.add_network("nogw", ipam_bridge("nogw", br, {
        "type": "netctl-ipam", "range": "10.132.3.0/24"}))
    daemon.start()
    ns = netns()
    res = daemon.cni("ADD", "nogw1", ns, daemon.conf("nogw"))
    assert res.rc == 0 and res.out is not None, res.stdout + res.stderr
    assert eth0_addr(ns) == "10.132.3.1/24"
    assert "gateway" not in res.out["ips"][0]
    assert host_addrs(br) == []
