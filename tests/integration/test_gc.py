"""We test these aspects: the CNI 1.1 GC verb removes exactly the attachments
not listed in ``cni.dev/valid-attachments``, and STATUS answers while the daemon serves."""

from __future__ import annotations

import pytest

from tests.conftest import Daemon, bridge_conf, bridge_ports, netns_links

pytestmark = pytest.mark.netns


def test_gc_removes_only_attachments_not_listed(daemon: Daemon, netns) -> None:
    br = daemon.name("g0")
    daemon.add_network("gcnet", bridge_conf("gcnet", br, "10.121.0.0/24",
                                            ipam_dir=daemon.ipam_dir))
    daemon.start()
    keep, drop = netns(), netns()
    conf = daemon.conf("gcnet")
    assert daemon.cni("ADD", "gc-keep", keep, conf).rc == 0
    assert daemon.cni("ADD", "gc-drop", drop, conf).rc == 0
    assert len(bridge_ports(br)) == 2

    gc_conf = dict(conf, **{"cni.dev/valid-attachments": [
        {"containerID": "gc-keep", "ifname": "eth0"}]})
    res = daemon.cni("GC", "", None, gc_conf, ifname="")
    assert res.rc == 0, res.stdout + res.stderr

    assert "eth0" in netns_links(keep)
    assert netns_links(drop) == ["lo"]
    assert len(bridge_ports(br)) == 1
    states = dict(daemon.db("SELECT container_id, state FROM attachments"))
    assert states == {"gc-keep": "attached", "gc-drop": "removed"}
    origins = daemon.db("SELECT origin, state FROM operations WHERE verb='DEL'")
    assert origins == [("gc", "done")]


def test_gc_and_status_need_cni_1_1(daemon: Daemon) -> None:
    daemon.add_network("gcnet", bridge_conf("gcnet", daemon.name("g1"), "10.121.1.0/24",
                                            ipam_dir=daemon.ipam_dir))
    daemon.start()
    res = daemon.cni("STATUS", "", None, daemon.conf("gcnet"), ifname="")
    assert res.rc == 0 and res.out is None, res.stdout
    for verb in ("GC", "STATUS"):
        old = daemon.cni(verb, "", None, daemon.conf("gcnet", version="1.0.0"), ifname="")
        assert old.rc == 1 and old.out is not None and old.out["code"] == 1, old.stdout
