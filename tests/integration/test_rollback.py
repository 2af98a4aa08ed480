"""Rolling back to Multus and whereabouts (docs/migrating.md, "Rolling back to Multus and
whereabouts"): what netctl leaves, and handing its addresses back. A real daemon gives two
pods addresses from two netctl-ipam networks (one unnamed, one with a ``network_name``
and a narrowed range); the daemon is stopped; a DEL arrives while it is down and is
recorded by the plugin. We check:

- ``netctl ipam handback --dry-run`` lists what it would write and the recorded DEL, and
  writes nothing;
- ``netctl daemon --exit-after-replay`` carries the recorded DEL out (its addresses go)
  and exits 0 without serving; the recorded DEL is gone;
- ``netctl ipam handback`` writes the addresses still held into whereabouts' IPPools (the
  names, ranges, offsets and entries whereabouts writes) and overlapping-range
  reservations, and netctl's own reader of whereabouts' records
  (:mod:`netctl.kubeapi.whereabouts`, used for takeovers) reads every one back, owner and
  interface included;
- a second run writes nothing (every record ``present``), exit 0;
- an entry held there by another owner is a ``conflict``, not overwritten, exit 1.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from netctl_kit import harness
from netctl_kit.kubefake import IPPOOLS, RESERVATIONS, FakeKube
from netctl_kit.kubefake.real import RealKube

from netctl.kubeapi.handback import pool_name
from netctl.kubeapi.whereabouts import pool_holds, reservation_holds
from tests.conftest import NETCTL, Daemon, Kube, ipam_bridge, kube_server

pytestmark = [pytest.mark.netns, pytest.mark.servers("fake", "real")]

BLUE = "10.189.0.0/24"
GREEN = "10.189.1.10-10.189.1.20/24"  # a narrowed range, named: green-10.189.1.0-24


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> Iterator[Kube]:
    with kube_server(request, crds=[IPPOOLS, RESERVATIONS]) as server:
        yield server
        assert server.server_errors == []


def handback(daemon: Daemon, kube: FakeKube, tmp_path: Path, *extra: str
             ) -> tuple[int, dict[str, Any]]:
    # as an administrator runs it (docs/migrating.md): the fake's own token, the real server's
    # admin
    admin = {"token": kube.admin_token} if isinstance(kube, RealKube) else {}
    config = kube.kubeconfig(tmp_path / "kubeconfig", **admin)
    proc = subprocess.run([NETCTL, "ipam", "handback", "--kubeconfig", str(config),
                           "--state-dir", str(daemon.state_dir), "--socket", daemon.socket,
                           "--json", *extra], capture_output=True, text=True, timeout=120)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_rollback_hands_addresses_back_to_whereabouts(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    daemon.add_network("cluster", harness.bridge_conf("cluster", daemon.name("c"), {
        "type": "host-local", "subnet": "10.189.9.0/24", "dataDir": daemon.ipam_dir}))
    daemon.add_network("blue", ipam_bridge("blue", daemon.name("b"), {
        "type": "netctl-ipam", "range": BLUE}))
    daemon.add_network("green", ipam_bridge("green", daemon.name("g"), {
        "type": "netctl-ipam", "range": GREEN, "network_name": "green"}))
    daemon.start()
    conf = daemon.conf("cluster")
    pods = {"web-1": netns(), "web-2": netns()}
    for name, ns in pods.items():
        add = daemon.cni("ADD", f"ctr-{name}", f"{harness.NETNS_DIR}/{ns}", conf,
                         networks="blue,green", pod=f"shop/{name}")
        assert add.rc == 0, add.describe()
    held = {(a["container"], a["ifname"]): a["address"].split("/")[0]
            for a in harness.live_allocations(daemon.state_dir)}
    assert len(held) == 4, held

    # the daemon goes; a DEL comes while it is down: the plugin records it
    daemon.stop()
    gone = daemon.cni("DEL", "ctr-web-2", f"{harness.NETNS_DIR}/{pods['web-2']}", conf,
                      networks="blue,green", pod="shop/web-2")
    assert gone.rc == 0, gone.describe()

    code, dry = handback(daemon, kube, tmp_path, "--dry-run")
    assert code == 0 and len(dry["recorded_dels"]) == 1
    assert {r["outcome"] for r in dry["records"]} == {"would write"}
    assert kube.list("ippools") == [] and kube.list("overlappingrangeipreservations") == []

    # the recorded DEL carried out by a daemon that replays and exits
    replay = subprocess.run([*harness.netctl_argv("daemon", "--config",
                                                  str(daemon.root / "daemon.json")),
                             "--exit-after-replay"], capture_output=True, text=True,
                            timeout=120)
    assert replay.returncode == 0, replay.stderr[-2000:]
    assert not os.path.exists(daemon.socket)  # it never served
    left = {(a["container"], a["ifname"]): a["address"].split("/")[0]
            for a in harness.live_allocations(daemon.state_dir)}
    assert left == {k: v for k, v in held.items() if k[0] == "ctr-web-1"}

    code, report = handback(daemon, kube, tmp_path)
    assert code == 0, report
    assert report["recorded_dels"] == []
    # two pool entries and two reservations, all written
    assert sorted(r["outcome"] for r in report["records"]) == ["written"] * 4, report

    blue_net = ipaddress.ip_network(BLUE)
    green_net = ipaddress.ip_network("10.189.1.0/24")
    blue = kube.get("ippools", "kube-system", pool_name(blue_net))
    green = kube.get("ippools", "kube-system", pool_name(green_net, "green"))
    assert blue is not None and green is not None
    assert green["metadata"]["name"] == "green-10.189.1.0-24"
    assert (blue["spec"]["range"], green["spec"]["range"]) == (BLUE, "10.189.1.0/24")
    blue_ip, green_ip = held[("ctr-web-1", "net1")], held[("ctr-web-1", "net2")]
    assert blue["spec"]["allocations"] == {
        str(int(ipaddress.ip_address(blue_ip)) - int(blue_net.network_address)): {
            "id": "ctr-web-1", "podref": "shop/web-1", "ifname": "net1"}}
    # what netctl's takeover reads of whereabouts' records: the same owners and addresses
    holds = pool_holds(blue["metadata"]["name"], "kube-system",
                       msgspec.json.encode(blue["spec"])) + pool_holds(
        green["metadata"]["name"], "kube-system", msgspec.json.encode(green["spec"]))
    assert {(h.address, h.container_id, h.ifname, h.pod_namespace, h.pod_name)
            for h in holds} == {(blue_ip, "ctr-web-1", "net1", "shop", "web-1"),
                                (green_ip, "ctr-web-1", "net2", "shop", "web-1")}
    reservations = kube.list("overlappingrangeipreservations")
    assert {r["metadata"]["name"] for r in reservations} == {blue_ip, f"green-{green_ip}"}
    read = [h for r in reservations for h in reservation_holds(
        r["metadata"]["name"], "kube-system", msgspec.json.encode(r["spec"]),
        [blue_net, green_net])]
    assert {(h.address, h.pod_name, h.ifname) for h in read} == {
        (blue_ip, "web-1", "net1"), (green_ip, "web-1", "net2")}

    # again: nothing to write
    kube.reset_counts()
    code, again = handback(daemon, kube, tmp_path)
    assert code == 0 and {r["outcome"] for r in again["records"]} == {"present"}
    assert kube.count("create", "ippools") == kube.count("patch", "ippools") == 0

    # another owner at blue's address: a conflict, left as it is
    offset = next(iter(blue["spec"]["allocations"]))
    kube.patch("ippools", "kube-system", blue["metadata"]["name"], {"spec": {"allocations": {
        offset: {"id": "someone-else", "podref": "other/pod", "ifname": "eth0"}}}})
    code, clash = handback(daemon, kube, tmp_path)
    assert code == 1
    (conflict,) = [r for r in clash["records"] if r["outcome"] == "conflict"]
    assert conflict["address"] == blue_ip and "someone-else" in conflict["detail"]
    after = kube.get("ippools", "kube-system", blue["metadata"]["name"])
    assert after is not None and after["spec"]["allocations"][offset]["id"] == "someone-else"
