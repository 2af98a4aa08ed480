"""We test these aspects of ``default-route`` in a pod's network selection, on real netns
and the real bridge plugin (a cluster network whose bridge is the pod's default gateway,
and a second bridge network with a gateway of its own):

- asked for on the second network, the pod's one IPv4 default route goes via that
  gateway on that network's interface: the cluster network's default route is gone from
  the netns and from the result the runtime gets, and the second network's result, as the
  journal keeps it, carries it;
- not asked for, the default route stays where the cluster network's delegate put it;
- a gateway outside every subnet of the network that asks for it is refused with code 7
  naming the network and the gateway, and the ADD is undone: nothing left in the netns,
  no address held;
- two IPv4 gateways in one pod are refused (no ECMP) before anything runs;
- the pod's DEL removes everything as usual.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Daemon, ip, ipam_bridge, journal_results, live, netns_links

pytestmark = pytest.mark.netns


def default_routes(ns: str) -> list[tuple[str, str]]:
    routes = json.loads(ip("-n", ns, "-j", "route", "show", "default").stdout or "[]")
    return [(str(r.get("gateway")), str(r.get("dev"))) for r in routes]


def gateway_net(name: str, bridge: str, subnet: str, **flags: bool) -> dict[str, Any]:
    conf = ipam_bridge(name, bridge, {"type": "netctl-ipam", "range": subnet})
    conf["plugins"][0].update(isGateway=True, **flags)
    return conf


def result_defaults(result: dict[str, Any] | None) -> list[str]:
    return [r.get("gw", "") for r in (result or {}).get("routes", [])
            if r["dst"] in ("0.0.0.0/0", "::/0")]


@pytest.fixture
def two_gateways(daemon: Daemon) -> Daemon:
    daemon.add_network("cl", gateway_net("cl", daemon.name("d0"), "10.134.0.0/24",
                                         isDefaultGateway=True))
    daemon.add_network("blue", gateway_net("blue", daemon.name("d1"), "10.134.1.0/24"))
    daemon.add_network("green", gateway_net("green", daemon.name("d2"), "10.134.2.0/24"))
    daemon.start()
    return daemon


def test_default_route_moves_to_the_network_that_asks(two_gateways: Daemon, netns) -> None:
    daemon = two_gateways
    conf = daemon.conf("cl")
    plain, moved = netns(), netns()
    res = daemon.cni("ADD", "dr-plain", plain, conf, networks="blue")
    assert res.rc == 0, res.stdout + res.stderr
    assert default_routes(plain) == [("10.134.0.1", "eth0")]

    res = daemon.cni("ADD", "dr-moved", moved, conf,
                     networks='[{"name": "blue", "default-route": ["10.134.1.1"]}]')
    assert res.rc == 0, res.stdout + res.stderr
    assert default_routes(moved) == [("10.134.1.1", "net1")]
    assert res.out is not None and result_defaults(res.out) == []  # eth0's result
    results = {r.get("interfaces", [{}])[0].get("name"): r
               for r in journal_results(daemon, "dr-moved")}
    assert sorted(map(result_defaults, results.values())) == [[], ["10.134.1.1"]]

    for container, ns in (("dr-plain", plain), ("dr-moved", moved)):
        assert daemon.cni("DEL", container, ns, conf).rc == 0
        assert netns_links(ns) == ["lo"]
    assert live(daemon) == []


def test_unroutable_gateway_is_refused_and_undone(two_gateways: Daemon, netns) -> None:
    daemon = two_gateways
    ns = netns()
    res = daemon.cni("ADD", "dr-bad", ns, daemon.conf("cl"),
                     networks='[{"name": "blue", "default-route": ["10.99.0.1"]}]')
    assert res.rc == 1 and res.out is not None, res.stdout
    assert res.out["code"] == 7
    assert "default-route 10.99.0.1" in res.out["msg"]
    assert "blue" in res.out["msg"] and "10.134.1.0/24" in res.out["msg"]
    assert netns_links(ns) == ["lo"]
    assert live(daemon) == []


def test_two_ipv4_gateways_are_refused(two_gateways: Daemon, netns) -> None:
    daemon = two_gateways
    ns = netns()
    res = daemon.cni("ADD", "dr-two", ns, daemon.conf("cl"), networks=json.dumps([
        {"name": "blue", "default-route": ["10.134.1.1"]},
        {"name": "green", "default-route": ["10.134.2.1"]}]))
    assert res.rc == 1 and res.out is not None, res.stdout
    assert res.out["code"] == 7 and "no ECMP" in res.out["msg"], res.out
    assert netns_links(ns) == ["lo"]
    assert live(daemon) == []
