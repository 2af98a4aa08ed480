"""We test these aspects of planning a request:

- ``decode_conf`` refusals: malformed JSON (6), no cluster network nor delegates (7),
  both at once (7), a bad cniVersion (1);
- ``plan()`` with a cluster network, default networks and the pod's own selection,
  resolved through an in-memory resolver with the same lookup rules as the networks dir;
- the Multus-style ``delegates`` form;
- ``runtimeConfig`` reaching the cluster attachment, selection values the others;
- ``NetworkDir`` on real NAD files: lookups by ns/name, by name in the pod's namespace
  then ``default``, by chain name, by absolute path; broken files named in the error;
  re-reading the directory when files change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from netctl.cni.config import parse_chain
from netctl.engine.networks import Network, NetworkDir
from netctl.engine.plan import AttachmentPlan, decode_conf, plan
from netctl.errors import DECODE_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG, CNIError


def conflist(name: str, ptype: str = "bridge", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name,
            "plugins": [{"type": ptype, **extra}, {"type": "portmap",
                                                   "capabilities": {"portMappings": True}}]}


class MemoryNetworks:
    """Networks held in a dict, looked up by the same rules as :class:`NetworkDir`."""

    def __init__(self, nads: dict[str, dict[str, Any]]) -> None:
        self.nets = {key: Network(key, parse_chain(conf, f"network {key}"))
                     for key, conf in nads.items()}
        self.lookups: list[tuple[str, str]] = []

    def resolve(self, ref: str, namespace: str) -> Network:
        self.lookups.append((ref, namespace))
        keys = [ref] if "/" in ref else [f"{namespace}/{ref}", f"default/{ref}"]
        for key in keys:
            if key in self.nets:
                return self.nets[key]
        raise CNIError(INVALID_CONFIG, f"network {ref!r} not found")


NETS = MemoryNetworks({
    "default/cluster": conflist("cluster"),
    "default/monitor": conflist("monitor", "macvlan"),
    "default/red": conflist("red-default"),
    "team/red": conflist("red-team"),
    "other/blue": conflist("blue", "ipvlan"),
})


def conf(**fields: Any) -> str:
    return json.dumps({"cniVersion": "1.1.0", "name": "netctl", "type": "netctl-cni",
                       "socket": "/run/netctl/netctl.sock", **fields})


def summary(plans: list[AttachmentPlan]) -> list[tuple[str, str, str, bool]]:
    return [(p.network, p.ifname, p.chain.name, p.is_default) for p in plans]


# decode_conf


def test_decode_conf_fields() -> None:
    c = decode_conf(conf(clusterNetwork="cluster", defaultNetworks=["monitor"],
                         runtimeConfig={"mac": "0a:00:00:00:00:01"}, extra={"kept": 1}))
    assert c.clusterNetwork == "cluster" and c.defaultNetworks == ["monitor"]
    assert c.runtimeConfig == {"mac": "0a:00:00:00:00:01"}
    assert c.socket == "/run/netctl/netctl.sock" and c.delegates == []


@pytest.mark.parametrize("raw", ['{"cniVersion": "1.1.0",', "not json", ""])
def test_decode_conf_malformed(raw: str) -> None:
    with pytest.raises(CNIError) as info:
        decode_conf(raw)
    assert info.value.code == DECODE_FAILURE
    assert "not valid JSON" in info.value.msg


def test_decode_conf_needs_cluster_network_or_delegates() -> None:
    for raw in (conf(), conf(defaultNetworks=["monitor"]), conf(clusterNetwork="")):
        with pytest.raises(CNIError) as info:
            decode_conf(raw)
        assert info.value.code == INVALID_CONFIG
        assert "'clusterNetwork' or 'delegates'" in info.value.msg


@pytest.mark.parametrize("fields", [
    {"clusterNetwork": "cluster", "delegates": [conflist("d")]},
    {"defaultNetworks": ["monitor"], "delegates": [conflist("d")]},
])
def test_decode_conf_delegates_exclusive(fields: dict[str, Any]) -> None:
    with pytest.raises(CNIError) as info:
        decode_conf(conf(**fields))
    assert info.value.code == INVALID_CONFIG
    assert "cannot be combined" in info.value.msg


def test_decode_conf_wrong_types_and_versions() -> None:
    with pytest.raises(CNIError) as info:
        decode_conf(conf(clusterNetwork=["cluster"]))
    assert info.value.code == INVALID_CONFIG and "clusterNetwork" in info.value.msg
    with pytest.raises(CNIError) as info:
        decode_conf(json.dumps({"name": "netctl", "clusterNetwork": "cluster"}))
    assert info.value.code == INVALID_CONFIG and "cniVersion" in info.value.msg
    with pytest.raises(CNIError) as info:
        decode_conf(conf(cniVersion="0.2.0", clusterNetwork="cluster"))
    assert info.value.code == INCOMPATIBLE_VERSION


# plan()


def test_plan_cluster_default_and_selection() -> None:
    c = decode_conf(conf(clusterNetwork="cluster", defaultNetworks=["monitor"]))
    args = "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p;NETCTL_NETWORKS=other/blue@fast0,red"
    plans = plan(c, "eth0", args, NETS)
    assert summary(plans) == [
        ("default/cluster", "eth0", "cluster", True),
        ("default/monitor", "net1", "monitor", False),
        ("other/blue", "fast0", "blue", False),
        ("team/red", "net3", "red-team", False),   # the pod's namespace wins
    ]
    assert plans[1].chain.types == ["macvlan", "portmap"]


def test_plan_without_pod_namespace_uses_default() -> None:
    c = decode_conf(conf(clusterNetwork="cluster"))
    plans = plan(c, "eth0", "NETCTL_NETWORKS=red", NETS)
    assert summary(plans)[1] == ("default/red", "net1", "red-default", False)
    assert plan(c, "eth0", "", NETS)[0].network == "default/cluster"


def test_plan_runtime_config_reaches_the_cluster_attachment() -> None:
    ports = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    c = decode_conf(conf(clusterNetwork="cluster", defaultNetworks=["monitor"],
                         runtimeConfig={"portMappings": ports}))
    sel = json.dumps([{"name": "red", "ips": ["10.9.0.5/24"], "cni-args": {"k": "v"},
                       "bandwidth": {"ingressRate": 10}}])
    plans = plan(c, "eth0", f"NETCTL_NETWORKS={sel}", NETS)
    assert plans[0].capability_args == {"portMappings": ports}
    assert plans[0].cni_args == {}
    assert plans[1].capability_args == {} and plans[1].cni_args == {}
    assert plans[2].capability_args == {"ips": ["10.9.0.5/24"], "bandwidth": {"ingressRate": 10}}
    assert plans[2].cni_args == {"k": "v"}
    plans[0].capability_args["mac"] = "x"
    assert c.runtimeConfig == {"portMappings": ports}, "the plan shares the conf's dict"


def test_plan_delegates_form() -> None:
    c = decode_conf(conf(delegates=[conflist("first"), conflist("second", "macvlan")],
                         runtimeConfig={"mac": "0a:00:00:00:00:09"}))
    plans = plan(c, "eth0", "NETCTL_NETWORKS=red@r0", NETS)
    assert summary(plans) == [
        ("delegate:first", "eth0", "first", True),
        ("delegate:second", "net1", "second", False),
        ("default/red", "r0", "red-default", False),
    ]
    assert plans[0].capability_args == {"mac": "0a:00:00:00:00:09"}


def test_plan_bad_delegate_refused() -> None:
    c = decode_conf(conf(delegates=[{"cniVersion": "1.0.0", "name": "d", "type": "../sh"}]))
    with pytest.raises(CNIError) as info:
        plan(c, "eth0", "", NETS)
    assert info.value.code == INVALID_CONFIG and "delegates[0]" in info.value.msg


@pytest.mark.parametrize(("args", "words"), [
    ("NETCTL_NETWORKS=nowhere", "'nowhere' not found"),
    ("NETCTL_NETWORKS=red@eth0", "'eth0' is requested twice"),
    ("NETCTL_NETWORKS=Red", "DNS-1123"),
])
def test_plan_refusals(args: str, words: str) -> None:
    c = decode_conf(conf(clusterNetwork="cluster"))
    with pytest.raises(CNIError) as info:
        plan(c, "eth0", args, NETS)
    assert info.value.code == INVALID_CONFIG
    assert words in info.value.msg


def test_plan_unknown_cluster_network() -> None:
    with pytest.raises(CNIError) as info:
        plan(decode_conf(conf(clusterNetwork="missing")), "eth0", "", NETS)
    assert "'missing' not found" in info.value.msg


# NetworkDir on real files


def nad_json(name: str, config: dict[str, Any], namespace: str | None = None) -> str:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return json.dumps({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                       "metadata": meta, "spec": {"config": json.dumps(config)}})


def nad_yaml(name: str, config: dict[str, Any], namespace: str = "default") -> str:
    return (f"apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n"
            f"metadata:\n  name: {name}\n  namespace: {namespace}\n"
            f"spec:\n  config: '{json.dumps(config)}'\n")


@pytest.fixture
def netdir(tmp_path: Path) -> Path:
    d = tmp_path / "networks.d"
    d.mkdir()
    (d / "team-blue.yaml").write_text(nad_yaml("blue", conflist("blue-team"), "team"))
    (d / "blue.json").write_text(nad_json("blue", conflist("blue-default")))
    (d / "red.yml").write_text(nad_yaml("red", conflist("red-chain", "macvlan")))
    (d / "notes.txt").write_text("not a network")
    return d


def test_networkdir_lookups(netdir: Path) -> None:
    nets = NetworkDir(str(netdir))
    assert nets.resolve("team/blue", "elsewhere").chain.name == "blue-team"
    assert nets.resolve("default/blue", "team").chain.name == "blue-default"
    assert nets.resolve("blue", "team").key == "team/blue"
    assert nets.resolve("blue", "elsewhere").key == "default/blue"
    by_chain = nets.resolve("red-chain", "team")
    assert by_chain.key == "default/red" and by_chain.chain.types == ["macvlan", "portmap"]
    assert sorted(n.key for n in nets.all()) == ["default/blue", "default/red", "team/blue"]


def test_networkdir_not_found(netdir: Path) -> None:
    nets = NetworkDir(str(netdir))
    cases = [("team/red", "'team/red' not found"), ("green", "team/green or default/green")]
    for ref, words in cases:
        with pytest.raises(CNIError) as info:
            nets.resolve(ref, "team")
        assert info.value.code == INVALID_CONFIG
        assert words in info.value.msg and str(netdir) in info.value.msg
    # a chain name is not a namespace-qualified name
    with pytest.raises(CNIError):
        nets.resolve("default/red-chain", "team")


def test_networkdir_absolute_path(tmp_path: Path, netdir: Path) -> None:
    path = tmp_path / "extra.conflist"
    path.write_text(json.dumps(conflist("from-file", "ptp")))
    net = NetworkDir(str(netdir)).resolve(str(path), "team")
    assert net.key == str(path) and net.chain.name == "from-file"
    with pytest.raises(CNIError) as info:
        NetworkDir(str(netdir)).resolve(str(tmp_path / "absent.conf"), "team")
    assert info.value.code == INVALID_CONFIG
    assert "absent.conf" in info.value.msg and "No such file" in info.value.msg
    path.write_text('{"cniVersion": "1.0.0", "name": "x", "type": "/bin/sh"}')
    with pytest.raises(CNIError) as info:
        NetworkDir(str(netdir)).resolve(str(path), "team")
    assert str(path) in info.value.msg and "not a bare plugin name" in info.value.msg


def test_networkdir_broken_files_named(netdir: Path) -> None:
    (netdir / "evil.yaml").write_text(nad_yaml("evil", conflist("evil", "../../bin/sh")))
    (netdir / "garbled.json").write_text("{ this is not json")
    (netdir / "empty.yaml").write_text(nad_yaml("empty", {}).replace("'{}'", "''"))
    nets = NetworkDir(str(netdir))
    assert nets.resolve("blue", "team").key == "team/blue"  # the good ones still work
    with pytest.raises(CNIError) as info:
        nets.resolve("evil", "default")
    msg = info.value.msg
    assert "evil.yaml: network default/evil plugins[0]: plugin type '../../bin/sh'" in msg
    assert "garbled.json:" in msg
    assert "empty.yaml: spec.config is empty" in msg


def test_networkdir_missing_directory(tmp_path: Path) -> None:
    nets = NetworkDir(str(tmp_path / "nowhere"))
    assert nets.all() == []
    with pytest.raises(CNIError):
        nets.resolve("blue", "default")


def test_networkdir_rescans_when_files_change(netdir: Path) -> None:
    nets = NetworkDir(str(netdir))
    assert nets.resolve("red", "default").chain.types == ["macvlan", "portmap"]
    with pytest.raises(CNIError):
        nets.resolve("green", "default")
    # a changed file, a new file and a removed file are all seen on the next lookup
    (netdir / "red.yml").write_text(nad_yaml("red", conflist("red-chain-v2", "bridge",
                                                             bridge="br-red")))
    (netdir / "green.json").write_text(nad_json("green", conflist("green")))
    os.unlink(netdir / "blue.json")
    red = nets.resolve("red", "default")
    assert red.chain.name == "red-chain-v2" and red.chain.plugins[0]["bridge"] == "br-red"
    assert nets.resolve("green", "team").key == "default/green"
    with pytest.raises(CNIError):
        nets.resolve("default/blue", "team")
    # a file that breaks takes its network away, and fixing it brings it back
    (netdir / "green.json").write_text("{")
    with pytest.raises(CNIError) as info:
        nets.resolve("green", "default")
    assert "green.json" in info.value.msg
    (netdir / "green.json").write_text(nad_json("green", conflist("green-fixed")))
    assert nets.resolve("green", "default").chain.name == "green-fixed"
