"""We test these aspects of the CNI 1.1 GC verb: it removes exactly the attachments not
listed as valid — read from ``cni.dev/valid-attachments`` or, from runtimes built on an
older libcni, ``cni.dev/attachments``; a GC that carries no list at all removes nothing
and says so, while an explicit empty list collects everything; attachments younger than
``reconcile-grace`` are never collected; STATUS answers while the daemon serves."""

from __future__ import annotations

from typing import Any

import pytest
from netctl_kit import journaldb

from tests.conftest import Daemon, attachment_states, bridge_conf, bridge_ports, netns_links

pytestmark = pytest.mark.netns


def two_pods(daemon: Daemon, netns: Any, grace: float = 0) -> tuple[str, str, str, dict]:
    br = daemon.name("g0")
    daemon.add_network("gcnet", bridge_conf("gcnet", br, "10.121.0.0/24",
                                            ipam_dir=daemon.ipam_dir))
    daemon.settings["reconcile-grace"] = grace
    daemon.start()
    keep, drop = netns(), netns()
    conf = daemon.conf("gcnet")
    assert daemon.cni("ADD", "gc-keep", keep, conf).rc == 0
    assert daemon.cni("ADD", "gc-drop", drop, conf).rc == 0
    assert len(bridge_ports(br)) == 2
    return br, keep, drop, conf


@pytest.mark.parametrize("key", ["cni.dev/valid-attachments", "cni.dev/attachments"])
def test_gc_removes_only_attachments_not_listed(daemon: Daemon, netns: Any, key: str) -> None:
    br, keep, drop, conf = two_pods(daemon, netns)
    gc_conf = dict(conf, **{key: [{"containerID": "gc-keep", "ifname": "eth0"}]})
    res = daemon.cni("GC", "", None, gc_conf, ifname="")
    assert res.rc == 0, res.stdout + res.stderr

    assert "eth0" in netns_links(keep)
    assert netns_links(drop) == ["lo"]
    assert len(bridge_ports(br)) == 1
    assert attachment_states(daemon) == {"gc-keep": "attached", "gc-drop": "removed"}
    origins = [(o["origin"], o["state"]) for o in daemon.read(journaldb.operation_rows,
                                                               verb="DEL")]
    assert origins == [("gc", "done")]


def test_gc_without_a_list_removes_nothing_and_an_empty_list_everything(
        daemon: Daemon, netns: Any) -> None:
    br, keep, drop, conf = two_pods(daemon, netns)
    res = daemon.cni("GC", "", None, conf, ifname="")
    assert res.rc == 0, res.stdout + res.stderr
    assert "nothing collected" in res.stderr
    assert len(bridge_ports(br)) == 2
    assert len(daemon.read(journaldb.attachment_rows, state="attached")) == 2

    res = daemon.cni("GC", "", None, dict(conf, **{"cni.dev/valid-attachments": []}),
                     ifname="")
    assert res.rc == 0, res.stdout + res.stderr
    assert bridge_ports(br) == []
    assert netns_links(keep) == ["lo"] and netns_links(drop) == ["lo"]
    assert daemon.live_counts()[0] == 0  # attachments not removed


def test_gc_never_collects_attachments_younger_than_the_grace(
        daemon: Daemon, netns: Any) -> None:
    br, keep, drop, conf = two_pods(daemon, netns, grace=3600)
    res = daemon.cni("GC", "", None, dict(conf, **{"cni.dev/valid-attachments": []}),
                     ifname="")
    assert res.rc == 0, res.stdout + res.stderr
    assert len(bridge_ports(br)) == 2
    assert "eth0" in netns_links(keep) and "eth0" in netns_links(drop)
    assert daemon.read(journaldb.operation_rows, verb="DEL") == []


def test_gc_and_status_need_cni_1_1(daemon: Daemon) -> None:
    daemon.add_network("gcnet", bridge_conf("gcnet", daemon.name("g1"), "10.121.1.0/24",
                                            ipam_dir=daemon.ipam_dir))
    daemon.start()
    res = daemon.cni("STATUS", "", None, daemon.conf("gcnet"), ifname="")
    assert res.rc == 0 and res.out is None, res.stdout
    for verb in ("GC", "STATUS"):
        old = daemon.cni(verb, "", None, daemon.conf("gcnet", version="1.0.0"), ifname="")
        assert old.rc == 1 and old.out is not None and old.out["code"] == 1, old.stdout
