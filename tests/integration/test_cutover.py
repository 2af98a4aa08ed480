"""We test these aspects of a node switched from Multus to netctl: a pod created before the
switch — its delegates run the way Multus runs them (the cluster network on eth0, a
secondary on net1, each exec'd directly, and Multus' scratch cache of the container
written as Multus writes it: as v4.1.4 does, and as v4.3.0 does, whose top-level ``Bytes``
of a conflist cluster network lose its bridge, subnet and ``dataDir`` and whose
``CNINetworkConfigList`` holds the conflist that ran) — releases everything when it is
deleted after the switch:
netctl DELs each network from Multus' cache (interfaces gone, host-local reservations
released, the cache file removed), journals it as a DEL with its reason, and a repeated DEL
changes nothing; without a Multus cache the cluster network alone is DELeted; a container
netctl ADDed itself never takes that path; a truncated cache falls back to the cluster
network; with ``cutover-dels: false`` such a DEL does nothing.

Addresses: 10.238.0.0/24 (cluster), 10.238.1.0/24 (blue)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from netctl_kit import journaldb
from netctl_kit.harness import bridge_conf, exec_plugin, host_local, host_local_leases

from netctl.journal import query
from tests.conftest import Daemon, netns_links

pytestmark = pytest.mark.netns


def networks(daemon: Daemon, veth_parent: str) -> tuple[dict[str, Any], dict[str, Any]]:
    cluster = bridge_conf("cluster", daemon.name("br"), host_local("10.238.0.0/24",
                                                                   daemon.ipam_dir))
    blue = {"cniVersion": "1.0.0", "name": "blue", "type": "macvlan", "master": veth_parent,
            "mode": "bridge", "ipam": host_local("10.238.1.0/24", daemon.ipam_dir)}
    daemon.add_network("cluster", cluster)
    daemon.add_network("blue", blue)
    return cluster, blue


def b64(obj: Any) -> str:
    return base64.b64encode(json.dumps(obj).encode()).decode()


def multus_entries(cluster: dict[str, Any], blue: dict[str, Any] | None,
                   multus: str) -> list[dict[str, Any]]:
    """Multus' scratch cache of a pod (Go's JSON of its delegates), as ``multus`` writes it.
    Both keep in ``ConfList`` a re-encoding of the conflist's parsed form (of each plugin,
    only ``type`` and ``ipam.type`` here); v4.1.4 keeps the conflist's own bytes in
    ``Bytes``, v4.3.0 that re-encoding, and the conflist libcni ran in
    ``CNINetworkConfigList`` (each plugin's bytes, the file's bytes) — empty for a NAD's
    delegate, whose ``Bytes`` hold its config in both."""
    lossy = {"cniVersion": cluster["cniVersion"], "name": cluster["name"], "plugins": [
        {"ipam": {"type": p["ipam"]["type"]}, "type": p["type"]} for p in cluster["plugins"]]}
    flags = {"IsFilterV4Gateway": False, "IsFilterV6Gateway": False}
    first = {"Conf": {"dns": {}, "ipam": {}}, "ConfList": lossy, "Name": cluster["name"],
             **flags, "Bytes": b64(cluster)}
    nad = [{"Conf": blue, "ConfList": {"plugins": None}, "Name": "blue", **flags,
            "Bytes": b64(blue)}] if blue is not None else []
    if multus == "v4.1.4":
        return [first, *nad]
    assert multus == "v4.3.0", multus
    first["Bytes"] = b64(lossy)
    first["CNINetworkConfigList"] = {
        "Name": cluster["name"], "CNIVersion": cluster["cniVersion"], "DisableCheck": False,
        "DisableGC": False, "LoadOnlyInlinedPlugins": False,
        "Plugins": [{"Network": {"type": p["type"]}, "Bytes": b64(p)}
                    for p in cluster["plugins"]],
        "Bytes": b64(cluster)}
    for entry in nad:
        entry["CNINetworkConfigList"] = {
            "Name": "", "CNIVersion": "", "DisableCheck": False, "DisableGC": False,
            "LoadOnlyInlinedPlugins": False, "Plugins": None, "Bytes": None}
    return [first, *nad]


def as_multus(daemon: Daemon, container: str, ns: str, cluster: dict[str, Any],
              blue: dict[str, Any] | None, multus: str = "v4.1.4") -> None:
    """ADD the pod's networks the way Multus does (each delegate exec'd, the cluster network
    on eth0, the secondary on net1), then write Multus' scratch cache of the container as
    that version of Multus writes it."""
    plugins = [(cluster["plugins"][0], "eth0", cluster)]
    if blue is not None:
        plugins.append((blue, "net1", blue))
    for plugin, ifname, net in plugins:
        conf = {"cniVersion": net["cniVersion"], "name": net["name"], **plugin}
        res = exec_plugin(f"/usr/lib/cni/{plugin['type']}", "ADD", conf, container=container,
                          netns=ns, ifname=ifname)
        assert res.rc == 0, res.describe()
    directory = daemon.root / "multus"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / container).write_text(json.dumps(multus_entries(cluster, blue, multus)))


def dels_of(daemon: Daemon, container: str) -> list[tuple[str, str, str]]:
    return [(o["verb"], o["state"], o["reason"] or "")
            for o in daemon.read(journaldb.operation_rows, container=container)]


@pytest.mark.parametrize("multus", ["v4.1.4", "v4.3.0"])
def test_a_pod_from_before_the_switch_releases_everything(
        daemon: Daemon, netns: Callable[[], str], veth_parent: str, multus: str) -> None:
    cluster, blue = networks(daemon, veth_parent)
    daemon.start()
    ns, cid = netns(), "multus0123456789"
    as_multus(daemon, cid, ns, cluster, blue, multus)
    assert sorted(netns_links(ns)) == ["eth0", "lo", "net1"]
    assert len(host_local_leases(daemon.ipam_dir)) == 2

    conf = daemon.conf("cluster")
    res = daemon.cni("DEL", cid, ns, conf, pod="default/old")
    assert res.rc == 0, res.describe()
    assert netns_links(ns) == ["lo"]
    assert host_local_leases(daemon.ipam_dir) == []
    assert not (daemon.root / "multus" / cid).exists()
    ops = dels_of(daemon, cid)
    assert len(ops) == 1 and ops[0][:2] == ("DEL", "done"), ops
    assert "never saw" in ops[0][2] and "Multus' cache" in ops[0][2]
    steps = daemon.read(journaldb.step_rows, container=cid)
    assert sorted((s["plugin_type"], s["ifname"], s["state"]) for s in steps) == [
        ("bridge", "eth0", "ok"), ("macvlan", "net1", "ok")]
    assert [(a["network"], a["ifname"], a["state"])
            for a in daemon.read(query.attachments, container=cid)] == [
        ("cluster", "eth0", "removed"), ("blue", "net1", "removed")]
    # containerd's second DEL (RemovePodSandbox): known now, nothing runs again
    assert daemon.cni("DEL", cid, "", conf, pod="default/old").rc == 0
    assert len(dels_of(daemon, cid)) == 2
    assert len(daemon.read(journaldb.step_rows, container=cid)) == 2


def test_without_a_multus_cache_the_cluster_network_is_deleted(
        daemon: Daemon, netns: Callable[[], str], veth_parent: str) -> None:
    cluster, _ = networks(daemon, veth_parent)
    daemon.start()
    ns, cid = netns(), "nocache0123456789"
    as_multus(daemon, cid, ns, cluster, None)
    (daemon.root / "multus" / cid).unlink()  # no record of it (or Multus never had one)
    assert len(host_local_leases(daemon.ipam_dir)) == 1
    res = daemon.cni("DEL", cid, ns, daemon.conf("cluster"), pod="default/old")
    assert res.rc == 0, res.describe()
    assert host_local_leases(daemon.ipam_dir) == [] and netns_links(ns) == ["lo"]
    assert "cluster network default/cluster" in dels_of(daemon, cid)[0][2]

    # a truncated cache: the cluster network all the same, named in the reason
    ns2, cid2 = netns(), "truncated0123456"
    as_multus(daemon, cid2, ns2, cluster, None)
    path = daemon.root / "multus" / cid2
    path.write_text(path.read_text()[:40])
    assert daemon.cni("DEL", cid2, ns2, daemon.conf("cluster")).rc == 0
    assert host_local_leases(daemon.ipam_dir) == []
    assert "unreadable" in dels_of(daemon, cid2)[0][2]


def test_a_container_netctl_added_never_takes_that_path(
        daemon: Daemon, netns: Callable[[], str], veth_parent: str) -> None:
    networks(daemon, veth_parent)
    daemon.start()
    ns, conf = netns(), daemon.conf("cluster")
    assert daemon.cni("ADD", "mine0123", ns, conf).rc == 0
    assert daemon.cni("DEL", "mine0123", ns, conf).rc == 0
    assert daemon.cni("DEL", "mine0123", ns, conf).rc == 0
    assert [v for v, _, _ in dels_of(daemon, "mine0123")] == ["ADD", "DEL", "DEL"]
    assert all(r == "" for _, _, r in dels_of(daemon, "mine0123"))


def test_cutover_dels_off(daemon: Daemon, netns: Callable[[], str], veth_parent: str) -> None:
    cluster, _ = networks(daemon, veth_parent)
    daemon.settings["cutover-dels"] = False
    daemon.start()
    ns, cid = netns(), "off0123456789"
    as_multus(daemon, cid, ns, cluster, None)
    res = daemon.cni("DEL", cid, ns, daemon.conf("cluster"))
    assert res.rc == 0, res.describe()
    assert len(host_local_leases(daemon.ipam_dir)) == 1  # left, as the setting asks
    exec_plugin("/usr/lib/cni/bridge", "DEL", {"cniVersion": "1.0.0", "name": "cluster",
                                               **cluster["plugins"][0]},
                container=cid, netns=ns)  # clean up as Multus would have


def test_a_delegate_that_fails_is_tried_once_and_warned(
        daemon: Daemon, netns: Callable[[], str], veth_parent: str) -> None:
    """A cached delegate that cannot be DELeted (its plugin is gone from the node): the
    DEL succeeds with a warning naming it, journaled as failed; nothing is left stuck (netctl
    cannot tell whether the pod ever had it) and the cache file stays for an operator."""
    cluster, _ = networks(daemon, veth_parent)
    daemon.start()
    ns, cid = netns(), "gone0123456789"
    as_multus(daemon, cid, ns, cluster, None)
    path = daemon.root / "multus" / cid
    cache = json.loads(path.read_text())
    gone = {"cniVersion": "1.0.0", "name": "gone", "type": "no-such-plugin"}
    cache.append({"Conf": gone, "Name": "gone", "Bytes": b64(gone)})
    path.write_text(json.dumps(cache))
    res = daemon.cni("DEL", cid, ns, daemon.conf("cluster"))
    assert res.rc == 0, res.describe()
    assert "tried once" in res.stderr and "no-such-plugin" in res.stderr, res.stderr
    assert host_local_leases(daemon.ipam_dir) == []  # the cluster network went
    assert [o["state"] for o in daemon.read(journaldb.operation_rows, container=cid)] == [
        "failed"]
    assert daemon.live_counts()[0] == 0  # attachments not removed
    assert path.exists()
