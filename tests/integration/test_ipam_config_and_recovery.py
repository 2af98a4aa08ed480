"""We test the central IPAM's (netctl-ipam) settings and its recovery on real netns and plugins:

- SIGKILL mid-ADD: the bridge step (netctl-ipam) has allocated, the ``hang`` step runs;
  the restarted daemon's replay DEL releases the allocation (``released_op`` is the
  replay's DEL), the interface is gone, and the next pod gets a fresh address.
- Overlapping ranges of one ``network_name``: unique across the networks with
  ``enable_overlapping_ranges`` (the default), even for a requested address; with it
  off, the same address is handed out in both.
- ``allocation_order: lowest`` reuses the lowest freed address at once.
- GC of plain-plugin allocations (netctl-ipam exec'd by bridge itself): the installed
  netctl-ipam with CNI_COMMAND=GC releases the allocations not in
  ``cni.dev/valid-attachments`` and leaves attachment-owned ones alone.
- A bad ``ipam`` section is code 7 naming the key, nothing runs or is journaled, and
  the daemon goes on serving.

Subnets: 10.151.0-9.0/24.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from netctl_kit import journaldb

from tests.conftest import (
    SYSTEM_CNI,
    Background,
    CNIResult,
    Daemon,
    add_hanging,
    bridge_ports,
    eth0_addr,
    exec_direct,
    hang_sleeps,
    ipam_bridge,
    live,
    netns_links,
)

pytestmark = pytest.mark.netns

NetnsFactory = Callable[[], str]


def ok(res: CNIResult) -> dict[str, Any] | None:
    """A success; the result for ADD (DEL prints nothing)."""
    assert res.rc == 0, res.stdout + res.stderr
    return res.out


def refused(res: CNIResult, code: int) -> str:
    assert res.rc == 1 and res.out is not None, res.stdout + res.stderr
    assert res.out["code"] == code, res.out
    return str(res.out["msg"])


# -- SIGKILL mid-ADD -------------------------------------------------------------------


def test_sigkill_mid_add_releases_the_allocation_at_restart(daemon: Daemon, netns: NetnsFactory,
                                                            background: Background) -> None:
    br = daemon.name("k")
    daemon.add_network("kbr", ipam_bridge("kbr", br, {
        "type": "netctl-ipam", "range": "10.151.0.0/24"}))
    call, ns = add_hanging(daemon, netns, background, "kbr", "ikill1", pod="default/ikill1")
    hang_sleeps(daemon)
    allocs = [(a["id"], a["address"], a["released_at"])
              for a in daemon.read(journaldb.allocation_rows, container="ikill1")]
    assert len(allocs) == 1 and allocs[0][2] is None, allocs
    alloc_id, address = allocs[0][0], allocs[0][1]
    assert address == "10.151.0.1"  # no gateway: .1 is assignable
    assert eth0_addr(ns) == "10.151.0.1/24"

    daemon.kill()

    res = call.result(timeout=30)
    assert refused(res, 11)
    # Dead mid-ADD: the address is still allocated and in use in the pod.
    assert [a["released_at"] for a in daemon.read(journaldb.allocation_rows,
                                                  alloc_id=alloc_id)] == [None]
    assert "eth0" in netns_links(ns)

    daemon.start()  # the same state dir; the replay has run once the socket accepts

    replay = [(o["id"], o["state"])
              for o in daemon.read(journaldb.operation_rows, origin="replay", verb="DEL")]
    assert len(replay) == 1 and replay[0][1] == "done", replay
    alloc = daemon.read(journaldb.allocation_rows, alloc_id=alloc_id)[0]
    assert alloc["released_at"] is not None
    assert alloc["released_op"] == replay[0][0]
    # The replay's bridge DEL was handed the address it had to remove (static IPAM).
    del_conf = [s["config"] for s in daemon.read(journaldb.step_rows, operation=replay[0][0],
                                                 plugin="bridge", verb="DEL")]
    assert len(del_conf) == 1
    assert json.loads(del_conf[0])["ipam"] == {
        "type": "static", "addresses": [{"address": "10.151.0.1/24"}]}
    assert [o["state"] for o in daemon.read(journaldb.operation_rows, verb="ADD",
                                            container="ikill1")] == ["compensated"]
    assert netns_links(ns) == ["lo"]
    assert bridge_ports(br) == []
    assert live(daemon) == []

    # A new pod: round-robin hands out the next address, not the released one.
    ns2 = netns()
    out = ok(daemon.cni("ADD", "ikill2", ns2, daemon.conf("kbr")))
    assert out is not None and out["ips"][0]["address"] == "10.151.0.2/24"
    assert eth0_addr(ns2) == "10.151.0.2/24"
    assert live(daemon) == [("ikill2", "eth0", "10.151.0.2")]
    ok(daemon.cni("DEL", "ikill2", ns2, daemon.conf("kbr")))
    assert live(daemon) == []
    assert bridge_ports(br) == []


# -- overlapping ranges ------------------------------------------------------------------


def overlapping_networks(daemon: Daemon, overlapping: bool) -> tuple[str, str]:
    """Two networks of network_name 'ov' whose ranges overlap on 10.151.1.10-20."""
    bra, brb = daemon.name("oa"), daemon.name("ob")
    daemon.add_network("ova", ipam_bridge("ova", bra, {
        "type": "netctl-ipam", "range": "10.151.1.0/24", "range_start": "10.151.1.10",
        "network_name": "ov", "enable_overlapping_ranges": overlapping}))
    daemon.add_network("ovb", ipam_bridge("ovb", brb, {
        "type": "netctl-ipam", "range": "10.151.1.0/25", "range_start": "10.151.1.10",
        "range_end": "10.151.1.20", "network_name": "ov",
        "enable_overlapping_ranges": overlapping}))
    return bra, brb


def test_overlapping_ranges_of_one_network_name_never_share_an_address(
        daemon: Daemon, netns: NetnsFactory) -> None:
    bra, brb = overlapping_networks(daemon, True)
    daemon.start()
    a, b, c = netns(), netns(), netns()
    ok(daemon.cni("ADD", "ov1", a, daemon.conf("ova")))
    assert eth0_addr(a) == "10.151.1.10/24"
    # ovb's range starts at the address ova handed out: it must skip it.
    ok(daemon.cni("ADD", "ov2", b, daemon.conf("ovb")))
    assert eth0_addr(b) == "10.151.1.11/25"

    # Asking for ova's address on ovb is refused, naming the holder; nothing is left.
    want = json.dumps([{"name": "ovb", "ips": ["10.151.1.10/25"]}])
    msg = refused(daemon.cni("ADD", "ov3", c, daemon.conf("ova"), networks=want), 7)
    assert "10.151.1.10" in msg and "ov1" in msg, msg
    assert netns_links(c) == ["lo"]
    assert live(daemon) == [("ov1", "eth0", "10.151.1.10"), ("ov2", "eth0", "10.151.1.11")]
    assert len(bridge_ports(bra)) == 1 and len(bridge_ports(brb)) == 1

    ok(daemon.cni("DEL", "ov1", a, daemon.conf("ova")))
    ok(daemon.cni("DEL", "ov2", b, daemon.conf("ovb")))
    assert live(daemon) == []


def test_overlapping_ranges_disabled_may_share_an_address(
        daemon: Daemon, netns: NetnsFactory) -> None:
    bra, brb = overlapping_networks(daemon, False)
    daemon.start()
    a, b = netns(), netns()
    ok(daemon.cni("ADD", "ovx1", a, daemon.conf("ova")))
    ok(daemon.cni("ADD", "ovx2", b, daemon.conf("ovb")))
    # Each pool is its own scope: both hand out 10.151.1.10.
    assert eth0_addr(a) == "10.151.1.10/24"
    assert eth0_addr(b) == "10.151.1.10/25"
    assert live(daemon) == [("ovx1", "eth0", "10.151.1.10"), ("ovx2", "eth0", "10.151.1.10")]
    scopes = {a["scope"] for a in daemon.read(journaldb.allocation_rows)}
    assert len(scopes) == 2, scopes
    ok(daemon.cni("DEL", "ovx1", a, daemon.conf("ova")))
    ok(daemon.cni("DEL", "ovx2", b, daemon.conf("ovb")))
    assert live(daemon) == []
    assert bridge_ports(bra) == [] and bridge_ports(brb) == []


# -- allocation_order: lowest ------------------------------------------------------------


def test_allocation_order_lowest_reuses_the_freed_address(
        daemon: Daemon, netns: NetnsFactory) -> None:
    br = daemon.name("lo")
    daemon.add_network("low", ipam_bridge("low", br, {
        "type": "netctl-ipam", "range": "10.151.3.0/24", "gateway": "10.151.3.1",
        "allocation_order": "lowest"}))
    daemon.start()
    conf = daemon.conf("low")
    pods = {f"lw{i}": netns() for i in range(3)}
    for cid, ns in pods.items():
        ok(daemon.cni("ADD", cid, ns, conf))
    assert [eth0_addr(ns) for ns in pods.values()] == [
        "10.151.3.2/24", "10.151.3.3/24", "10.151.3.4/24"]

    ok(daemon.cni("DEL", "lw0", pods["lw0"], conf))
    ok(daemon.cni("ADD", "lw3", pods["lw0"], conf))  # lowest: the freed .2 at once
    assert eth0_addr(pods["lw0"]) == "10.151.3.2/24"
    ok(daemon.cni("DEL", "lw1", pods["lw1"], conf))
    ok(daemon.cni("ADD", "lw4", pods["lw1"], conf))
    assert eth0_addr(pods["lw1"]) == "10.151.3.3/24"
    ns5 = netns()
    ok(daemon.cni("ADD", "lw5", ns5, conf))  # nothing free below: the next one up
    assert eth0_addr(ns5) == "10.151.3.5/24"
    assert sorted(a for _, _, a in live(daemon)) == [
        "10.151.3.2", "10.151.3.3", "10.151.3.4", "10.151.3.5"]
    # the released allocations stay as history
    assert [(a["container_id"], a["address"]) for a in daemon.read(journaldb.allocation_rows)
            if a["released_at"] is not None] == [("lw0", "10.151.3.2"), ("lw1", "10.151.3.3")]
    for cid, ns in (("lw2", pods["lw2"]), ("lw3", pods["lw0"]), ("lw4", pods["lw1"]),
                    ("lw5", ns5)):
        ok(daemon.cni("DEL", cid, ns, conf))
    assert live(daemon) == []
    assert bridge_ports(br) == []


# -- GC of plain-plugin allocations --------------------------------------------------------


def test_gc_releases_plain_plugin_allocations_not_listed(
        daemon: Daemon, netns: NetnsFactory) -> None:
    br, br2 = daemon.name("g"), daemon.name("h")
    ipam = {"type": "netctl-ipam", "socket": daemon.socket, "range": "10.151.4.0/24"}
    # An attachment-owned allocation in the same pool: GC of plain allocations leaves it.
    daemon.add_network("gcnet", ipam_bridge("gcnet", br2, dict(ipam)))
    daemon.settings["reconcile-grace"] = 0  # GC never collects what is younger than this
    daemon.start()
    conf = {"cniVersion": "1.0.0", "name": "plaingc", "type": "bridge", "bridge": br,
            "ipam": ipam}
    pods = {"gcp1": netns(), "gcp2": netns()}

    addrs = {}
    for cid, ns in pods.items():
        add = exec_direct(daemon, f"{SYSTEM_CNI}/bridge", "ADD", conf, container=cid, ns=ns)
        assert add.rc == 0 and add.out is not None, add.stdout + add.stderr
        addrs[cid] = add.out["ips"][0]["address"].split("/")[0]
        assert eth0_addr(ns) == f"{addrs[cid]}/24"
    nsa = netns()
    ok(daemon.cni("ADD", "gcatt", nsa, daemon.conf("gcnet")))
    attached = eth0_addr(nsa).split("/")[0]
    assert sorted(live(daemon)) == sorted([("gcp1", "eth0", addrs["gcp1"]),
                                           ("gcp2", "eth0", addrs["gcp2"]),
                                           ("gcatt", "eth0", attached)])

    gc_conf = {**conf, "cniVersion": "1.1.0",
               "cni.dev/valid-attachments": [{"containerID": "gcp1", "ifname": "eth0"}]}
    # GC came with CNI 1.1.0: an older config is refused (code 1), nothing is released.
    old = exec_direct(daemon, daemon.ipam_plugin, "GC", {**gc_conf, "cniVersion": "1.0.0"})
    assert old.rc == 1 and old.out is not None, old.stdout + old.stderr
    assert old.out["code"] == 1, old.stdout
    assert len(live(daemon)) == 3
    gc = exec_direct(daemon, daemon.ipam_plugin, "GC", gc_conf)
    assert gc.rc == 0, gc.stdout + gc.stderr

    assert sorted(live(daemon)) == sorted([("gcp1", "eth0", addrs["gcp1"]),
                                           ("gcatt", "eth0", attached)])
    gc_ops = [(o["id"], o["state"])
              for o in daemon.read(journaldb.operation_rows, verb="GC", origin="ipam")]
    assert len(gc_ops) == 1 and gc_ops[0][1] == "done", gc_ops
    assert [(a["container_id"], a["released_op"]) for a in daemon.read(journaldb.allocation_rows)
            if a["released_at"] is not None] == [("gcp2", gc_ops[0][0])]

    # The released address is free again (requested explicitly: round-robin would not
    # pick it next), and the plain DELs still work, the GC'd one included.
    ns3 = netns()
    add = exec_direct(daemon, f"{SYSTEM_CNI}/bridge", "ADD",
                      {**conf, "runtimeConfig": {"ips": [f"{addrs['gcp2']}/24"]},
                       "capabilities": {"ips": True}}, container="gcp3", ns=ns3)
    assert add.rc == 0, add.stdout + add.stderr
    assert eth0_addr(ns3) == f"{addrs['gcp2']}/24"
    for cid, ns in (*pods.items(), ("gcp3", ns3)):
        dele = exec_direct(daemon, f"{SYSTEM_CNI}/bridge", "DEL", conf, container=cid, ns=ns)
        assert dele.rc == 0, dele.stdout + dele.stderr
    ok_del = daemon.cni("DEL", "gcatt", nsa, daemon.conf("gcnet"))
    assert ok_del.rc == 0, ok_del.stdout + ok_del.stderr
    assert live(daemon) == []
    assert bridge_ports(br) == [] and bridge_ports(br2) == []


# -- bad ipam config -----------------------------------------------------------------------


BAD_IPAM: dict[str, tuple[dict[str, Any], list[str]]] = {
    "bad-cidr": ({"range": "10.151.9.0/33"}, ["range", "10.151.9.0/33"]),
    "start-after-end": ({"range": "10.151.9.0/24", "range_start": "10.151.9.200",
                         "range_end": "10.151.9.100"},
                        ["range_start 10.151.9.200", "range_end 10.151.9.100"]),
    "exclude-all": ({"range": "10.151.9.0/28",
                     "exclude": ["10.151.9.0/29", "10.151.9.8/29"]},
                    ["exclude", "10.151.9.0/28"]),
    "mixed-start": ({"range": "10.151.9.0/24", "range_start": "fd00:151:9::5"},
                    ["range_start fd00:151:9::5", "IPv6", "IPv4"]),
    "mixed-exclude": ({"range": "10.151.9.0/24", "exclude": ["fd00:151:9::/64"]},
                      ["exclude[0]", "fd00:151:9::/64", "IPv6"]),
}


@pytest.mark.parametrize("case", list(BAD_IPAM))
def test_bad_ipam_config_is_code_7_naming_the_key(daemon: Daemon, netns: NetnsFactory,
                                                  case: str) -> None:
    ipam, words = BAD_IPAM[case]
    br, brbad = daemon.name("v"), daemon.name("w")
    daemon.add_network("good", ipam_bridge("good", br, {
        "type": "netctl-ipam", "range": "10.151.8.0/24"}))
    daemon.add_network("bad", ipam_bridge("bad", brbad, {"type": "netctl-ipam", **ipam}))
    daemon.start()
    ns = netns()
    # As the cluster network, and as a secondary one next to a good one.
    for conf, networks in ((daemon.conf("bad"), ""), (daemon.conf("good"), "bad")):
        msg = refused(daemon.cni("ADD", "bad1", ns, conf, networks=networks), 7)
        assert "ipam" in msg and "bad" in msg, msg
        for word in words:
            assert word in msg, (word, msg)
    # Refused before anything ran: no attachment, no step, no allocation, no link.
    assert daemon.read(journaldb.row_counts, ("attachments", "steps", "ipam_allocations")) == {
        "attachments": 0, "steps": 0, "ipam_allocations": 0}
    assert netns_links(ns) == ["lo"]
    assert bridge_ports(br) == [] and bridge_ports(brbad) == []

    # The daemon still serves.
    ok(daemon.cni("ADD", "good1", ns, daemon.conf("good")))
    assert eth0_addr(ns) == "10.151.8.1/24"
    ok(daemon.cni("DEL", "good1", ns, daemon.conf("good")))
    assert live(daemon) == []
    assert netns_links(ns) == ["lo"]
