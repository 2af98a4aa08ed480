"""We test these aspects of reading what ran for a container netctl never saw
(``netctl.engine.foreign``): Multus' scratch cache as Multus writes it (a JSON list of
delegates; the config from ``Bytes`` — base64, as Go encodes a byte slice — else from
``ConfList`` with plugins, else ``Conf``), the cluster network on CNI_IFNAME and the others
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
