"""We test these aspects: one pod, one bridge network, ADD/CHECK/DEL through the plugin."""

from __future__ import annotations

import pytest

from tests.conftest import Daemon, bridge_conf, bridge_ports, netns_addrs

pytestmark = pytest.mark.netns


def test_add_check_del_one_bridge(daemon: Daemon, netns) -> None:
    br = daemon.name("b0")
    daemon.add_network("br", bridge_conf("br", br, "10.91.0.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    res = daemon.cni("ADD", "smoke1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert res.out is not None and res.out["cniVersion"] == "1.1.0"
    assert netns_addrs(ns)["eth0"][0].startswith("10.91.0.")
    assert len(bridge_ports(br)) == 1
    assert daemon.cni("CHECK", "smoke1", ns, conf).rc == 0
    assert daemon.cni("DEL", "smoke1", ns, conf).rc == 0
    assert "eth0" not in netns_addrs(ns)
    assert bridge_ports(br) == []
