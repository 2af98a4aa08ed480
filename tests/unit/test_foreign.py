"""We test these aspects of reading what ran for a container netctl never saw
(``netctl.engine.foreign``): Multus' scratch cache as Multus writes it (a JSON list of
delegates; the config from ``CNINetworkConfigList`` where it holds the conflist libcni ran,
as Multus v4.2.1 and later keep a conflist cluster network — never their lossy top-level
``Bytes`` then — else from ``Bytes`` (base64, as Go encodes a byte slice: the whole config
in Multus v4.1, and for a NAD's delegate in every version), else ``ConfList`` with plugins,
else ``Conf``), both versions' caches of the same pod read alike, the cluster network on
CNI_IFNAME and the others
on their ``ifnameRequest`` or ``net<position>``; a file that is not such a list refused
(the caller falls back to the cluster network); container ids that are not plain names
never make a path; libcni's cached result read when it is there."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from netctl.engine import foreign

CLUSTER = {"cniVersion": "1.0.0", "name": "flannel",
           "plugins": [{"type": "flannel"}, {"type": "portmap",
                                             "capabilities": {"portMappings": True}}]}
BLUE = {"cniVersion": "0.3.1", "name": "blue", "type": "macvlan", "master": "eth1",
        "ipam": {"type": "whereabouts", "range": "10.9.0.0/24"}}


def b64(obj: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(obj).encode()).decode()


def test_multus_cache_in_its_three_shapes() -> None:
    raw = json.dumps([
        {"Conf": {"cniVersion": "", "name": "", "type": ""}, "ConfList": CLUSTER,
         "Name": "flannel", "Bytes": b64(CLUSTER)},
        {"Conf": BLUE, "ConfList": {"plugins": None}, "Name": "blue",
         "ifnameRequest": "data0"},  # no Bytes: the Conf
        {"Conf": {"type": ""}, "ConfList": CLUSTER, "Name": "again"},  # no Bytes: ConfList
        {"Conf": BLUE, "Name": "blue2", "Bytes": "not base64!"},  # bad Bytes: the Conf
    ]).encode()
    nets = foreign.multus_cache(raw, "eth0")
    assert [(n.name, n.ifname) for n in nets] == [
        ("flannel", "eth0"), ("blue", "data0"), ("again", "net2"), ("blue2", "net3")]
    assert nets[0].config == CLUSTER and nets[1].config == BLUE
    assert nets[2].config == CLUSTER and nets[3].config == BLUE


# the node's cluster network as a file, and what Multus v4.3.0 caches for it: the top-level
# Bytes re-encode its parsed form (Go's types.NetConfList: only the keys every config has),
# the conflist libcni ran is in CNINetworkConfigList (each plugin's bytes, the file's bytes)
PRIMARY = {"cniVersion": "1.0.0", "name": "primary", "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": True,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
              "dataDir": "/var/lib/cni/networks"}},
    {"type": "portmap", "capabilities": {"portMappings": True}}]}
LOSSY = {"cniVersion": "1.0.0", "name": "primary", "plugins": [
    {"ipam": {"type": "host-local"}, "type": "bridge"},
    {"capabilities": {"portMappings": True}, "type": "portmap"}]}


def v43_cluster(conflist: dict[str, Any], plugins: list[dict[str, Any]] | None = None,
                version: str | None = None) -> dict[str, Any]:
    """A conflist cluster network as Multus v4.3.0 caches it (DelegateNetConf, JSON)."""
    ran = conflist["plugins"] if plugins is None else plugins
    return {
        "Conf": {"dns": {}, "ipam": {}}, "ConfList": LOSSY,
        "CNINetworkConfigList": {
            "Name": conflist["name"], "CNIVersion": version or conflist["cniVersion"],
            "DisableCheck": False, "DisableGC": False, "LoadOnlyInlinedPlugins": False,
            "Plugins": [{"Network": {"type": p["type"]}, "Bytes": b64(p)} for p in ran],
            "Bytes": b64(conflist)},
        "Name": conflist["name"], "IsFilterV4Gateway": False, "IsFilterV6Gateway": False,
        "Bytes": b64(LOSSY)}


def v43_nad(conf: dict[str, Any], name: str) -> dict[str, Any]:
    """A NAD's delegate as Multus v4.3.0 caches it: its raw config in Bytes, and an empty
    CNINetworkConfigList."""
    return {"Conf": conf, "ConfList": {"plugins": None},
            "CNINetworkConfigList": {"Name": "", "CNIVersion": "", "DisableCheck": False,
                                     "DisableGC": False, "LoadOnlyInlinedPlugins": False,
                                     "Plugins": None, "Bytes": None},
            "Name": name, "IsFilterV4Gateway": False, "IsFilterV6Gateway": False,
            "Bytes": b64(conf)}


def v41_cluster(conflist: dict[str, Any]) -> dict[str, Any]:
    """The same cluster network as Multus v4.1.4 caches it: the file's bytes in Bytes."""
    return {"Conf": {"dns": {}, "ipam": {}}, "ConfList": LOSSY, "Name": conflist["name"],
            "IsFilterV4Gateway": False, "IsFilterV6Gateway": False, "Bytes": b64(conflist)}


def test_both_multus_versions_caches_give_the_config_that_ran() -> None:
    v43 = json.dumps([v43_cluster(PRIMARY), v43_nad(BLUE, "default/blue")]).encode()
    v41 = json.dumps([v41_cluster(PRIMARY), {**v43_nad(BLUE, "default/blue"),
                                             "CNINetworkConfigList": None}]).encode()
    for raw in (v43, v41):
        nets = foreign.multus_cache(raw, "eth0")
        assert [(n.name, n.ifname) for n in nets] == [("primary", "eth0"),
                                                      ("default/blue", "net1")]
        # the whole primary, host-local's ranges and dataDir with it (what its DEL needs)
        assert nets[0].config == PRIMARY, nets[0].config
        assert nets[1].config == BLUE


def test_v43_the_conflist_libcni_ran() -> None:
    """The plugins libcni ran, also those it loaded from ``<confdir>/<name>/`` (not in the
    file's bytes), named and versioned as libcni ran them (the version it chose from a
    ``cniVersions`` list); the file's other keys kept."""
    extra = {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}}
    conflist = {**PRIMARY, "cniVersion": "", "cniVersions": ["0.4.0", "1.0.0"],
                "disableGC": True}
    (net,) = foreign.multus_cache(json.dumps([v43_cluster(
        conflist, [*PRIMARY["plugins"], extra], version="1.0.0")]).encode(), "eth0")
    assert net.config == {**conflist, "cniVersion": "1.0.0",
                          "plugins": [*PRIMARY["plugins"], extra]}


def test_v43_an_unreadable_network_config_list_falls_back_to_bytes() -> None:
    entry = v43_cluster(PRIMARY)
    entry["CNINetworkConfigList"]["Plugins"][1]["Bytes"] = "not base64!"
    entry["Bytes"] = b64(PRIMARY)
    (net,) = foreign.multus_cache(json.dumps([entry]).encode(), "eth0")
    assert net.config == PRIMARY
    entry["CNINetworkConfigList"]["Plugins"] = []
    (net,) = foreign.multus_cache(json.dumps([entry]).encode(), "eth0")
    assert net.config == PRIMARY


@pytest.mark.parametrize("raw", [b"", b"{}", b"[]", b"[1]", b'[{"Name": "x"}]',
                                 b'[{"Conf": {"type": ""}}]', b'[{"Bytes": "e30="}]'])
def test_what_is_not_a_multus_cache(raw: bytes) -> None:
    with pytest.raises(ValueError):
        foreign.multus_cache(raw, "eth0")


def test_paths_and_cached_results(tmp_path: Path) -> None:
    assert foreign.cache_path("/var/lib/cni/multus", "abc") == "/var/lib/cni/multus/abc"
    for bad in ("", ".", "..", "../etc/passwd", "a/b"):
        assert foreign.cache_path("/var/lib/cni/multus", bad) is None
    result = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    (tmp_path / "flannel-abc-eth0").write_text(json.dumps({"kind": "cniCacheV1",
                                                            "result": result}))
    assert foreign.cached_result(str(tmp_path), "flannel", "abc", "eth0") == result
    assert foreign.cached_result(str(tmp_path), "flannel", "abc", "net1") is None
    (tmp_path / "broken-abc-eth0").write_text("{")
    assert foreign.cached_result(str(tmp_path), "broken", "abc", "eth0") is None
    assert foreign.cached_result(str(tmp_path), "a/b", "abc", "eth0") is None
