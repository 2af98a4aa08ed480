"""We test these aspects of planning a request:

- ``decode_conf`` over an :class:`~netctl.cni.request.Invocation` decoded from a
  :class:`~netctl.cni.request.Request`: malformed JSON or a stdin that is not a JSON
  object (6), no cluster network nor delegates (7), both at once (7), wrong types (7),
  a bad cniVersion (1);
- ``plan()`` with a cluster network, default networks and the pod's own selection
  (``NETCTL_NETWORKS`` parsed by ``selection.parse`` / ``ArgsSelector``), resolved
  through an in-memory resolver with the same lookup rules as the networks dir; each
  returned ``Attachment`` carries the invocation's container, netns, pod, caller
  network and caller ifname, ready to be journaled;
- the Multus-style ``delegates`` form;
- ``runtimeConfig`` reaching the cluster attachment, selection values the others;
- a :class:`~netctl.engine.choice.Choice` beyond the selection (Kubernetes mode): the
  cluster network (or first delegate) replaced, ``defaultNetworks`` skipped, the conf's
  networks looked up in another namespace, and a pod's faults refused as the pod's
  (:class:`~netctl.errors.Refusal` naming it);
- Multus' keys on the conf: defaults, ``globalNamespaces`` both ways, any letter case;
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
import trio

from netctl.cni.config import parse_chain
from netctl.cni.request import Invocation, Pod, Request, decode
from netctl.engine import selection
from netctl.engine.choice import SELECTION_ARG, ArgsSelector, Choice
from netctl.engine.conf import NetctlConf, decode_conf
from netctl.engine.networks import Network, NetworkDir
from netctl.engine.plan import plan
from netctl.errors import DECODE_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG, CNIError, Refusal
from netctl.journal.records import Attachment


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

NETNS = "/var/run/netns/pod"


def conf(**fields: Any) -> str:
    return json.dumps({"cniVersion": "1.1.0", "name": "netctl", "type": "netctl-cni",
                       "socket": "/run/netctl/netctl.sock", **fields})


def invocation(stdin: str, args: str = "", ifname: str = "eth0",
               container: str = "c1") -> Invocation:
    """What the server hands the engine: a runtime's ADD, decoded once."""
    return decode(Request(command="ADD", container_id=container, netns=NETNS, ifname=ifname,
                          args=args, stdin=stdin))


def decode_raw(raw: str) -> NetctlConf:
    return decode_conf(invocation(raw))


def plan_for(raw: str, ifname: str, args: str,
             networks: MemoryNetworks = NETS) -> list[Attachment]:
    """Decode, select (standalone mode: NETCTL_NETWORKS in CNI_ARGS) and plan."""
    inv = invocation(raw, args, ifname)
    assert inv.args_error is None
    chosen = Choice(selection.parse(inv.args.get(SELECTION_ARG, "")))
    return plan(decode_conf(inv), inv, chosen, networks)


def summary(plans: list[Attachment]) -> list[tuple[str, str, str, bool]]:
    return [(p.network, p.ifname, p.chain.name, p.is_default) for p in plans]


# decode_conf


def test_decode_conf_fields() -> None:
    c = decode_raw(conf(clusterNetwork="cluster", defaultNetworks=["monitor"],
                        runtimeConfig={"mac": "0a:00:00:00:00:01"}, extra={"kept": 1}))
    assert c.clusterNetwork == "cluster" and c.defaultNetworks == ["monitor"]
    assert c.runtimeConfig == {"mac": "0a:00:00:00:00:01"}
    assert c.socket == "/run/netctl/netctl.sock" and c.delegates == []


@pytest.mark.parametrize("raw", ['{"cniVersion": "1.1.0",', "not json", "", "[1, 2]", '"x"'])
def test_decode_conf_malformed(raw: str) -> None:
    inv = invocation(raw)
    assert inv.conf is None and inv.conf_error
    with pytest.raises(CNIError) as info:
        decode_conf(inv)
    assert info.value.code == DECODE_FAILURE
    assert "not valid JSON" in info.value.msg


def test_decode_conf_needs_cluster_network_or_delegates() -> None:
    for raw in (conf(), conf(defaultNetworks=["monitor"]), conf(clusterNetwork="")):
        with pytest.raises(CNIError) as info:
            decode_raw(raw)
        assert info.value.code == INVALID_CONFIG
        assert "'clusterNetwork' or 'delegates'" in info.value.msg


@pytest.mark.parametrize("fields", [
    {"clusterNetwork": "cluster", "delegates": [conflist("d")]},
    {"defaultNetworks": ["monitor"], "delegates": [conflist("d")]},
])
def test_decode_conf_delegates_exclusive(fields: dict[str, Any]) -> None:
    with pytest.raises(CNIError) as info:
        decode_raw(conf(**fields))
    assert info.value.code == INVALID_CONFIG
    assert "cannot be combined" in info.value.msg


def test_decode_conf_wrong_types_and_versions() -> None:
    with pytest.raises(CNIError) as info:
        decode_raw(conf(clusterNetwork=["cluster"]))
    assert info.value.code == INVALID_CONFIG and "clusterNetwork" in info.value.msg
    with pytest.raises(CNIError) as info:
        decode_raw(json.dumps({"name": "netctl", "clusterNetwork": "cluster"}))
    assert info.value.code == INVALID_CONFIG and "cniVersion" in info.value.msg
    with pytest.raises(CNIError) as info:
        decode_raw(conf(cniVersion="0.2.0", clusterNetwork="cluster"))
    assert info.value.code == INCOMPATIBLE_VERSION


# plan()


def test_plan_cluster_default_and_selection() -> None:
    raw = conf(clusterNetwork="cluster", defaultNetworks=["monitor"])
    args = "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p;NETCTL_NETWORKS=other/blue@fast0,red"
    plans = plan_for(raw, "eth0", args)
    assert summary(plans) == [
        ("default/cluster", "eth0", "cluster", True),
        ("default/monitor", "net1", "monitor", False),
        ("other/blue", "fast0", "blue", False),
        ("team/red", "net3", "red-team", False),   # the pod's namespace wins
    ]
    assert plans[1].chain.types == ["macvlan", "portmap"]


def test_plan_attachments_carry_the_invocation() -> None:
    raw = conf(clusterNetwork="cluster", defaultNetworks=["monitor"])
    args = "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p;K8S_POD_UID=u1;NETCTL_NETWORKS=red"
    plans = plan_for(raw, "eth9", args)
    assert len(plans) == 3
    for att in plans:
        assert att.container_id == "c1" and att.netns == NETNS
        assert att.pod == Pod(namespace="team", name="p", uid="u1")
        assert (att.caller_network, att.caller_ifname) == ("netctl", "eth9")
        # not journaled yet: the journal fills these in
        assert (att.id, att.state, att.steps_started, att.result) == (0, "planned", 0, None)
        assert (att.add_op, att.del_op, att.del_failures, att.retry_at) == (None, None, 0, None)
    assert [a.ifname for a in plans] == ["eth9", "net1", "net2"]


def test_plan_without_pod_namespace_uses_default() -> None:
    raw = conf(clusterNetwork="cluster")
    plans = plan_for(raw, "eth0", "NETCTL_NETWORKS=red")
    assert summary(plans)[1] == ("default/red", "net1", "red-default", False)
    assert plans[0].pod == Pod()
    assert plan_for(raw, "eth0", "")[0].network == "default/cluster"


def test_args_selector_reads_netctl_networks_from_cni_args() -> None:
    raw = conf(clusterNetwork="cluster")
    inv = invocation(raw, "K8S_POD_NAMESPACE=team;NETCTL_NETWORKS=other/blue@fast0,red")
    chosen = trio.run(ArgsSelector().select, decode_conf(inv), inv)
    assert [(s.namespace, s.name, s.interface) for s in chosen.networks] == [
        ("other", "blue", "fast0"), (None, "red", None)]
    assert summary(plan(decode_conf(inv), inv, chosen, NETS)) == summary(
        plan_for(raw, "eth0", "K8S_POD_NAMESPACE=team;NETCTL_NETWORKS=other/blue@fast0,red"))
    bare = invocation(raw, "K8S_POD_NAME=p")
    assert trio.run(ArgsSelector().select, decode_conf(bare), bare) == Choice()


def test_plan_runtime_config_reaches_the_cluster_attachment() -> None:
    ports = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    raw = conf(clusterNetwork="cluster", defaultNetworks=["monitor"],
               runtimeConfig={"portMappings": ports})
    sel = json.dumps([{"name": "red", "ips": ["10.9.0.5/24"], "cni-args": {"k": "v"},
                       "bandwidth": {"ingressRate": 10}}])
    inv = invocation(raw, f"NETCTL_NETWORKS={sel}")
    c = decode_conf(inv)
    plans = plan(c, inv, Choice(selection.parse(inv.args[SELECTION_ARG])), NETS)
    assert plans[0].capability_args == {"portMappings": ports}
    assert plans[0].cni_args == {}
    assert plans[1].capability_args == {} and plans[1].cni_args == {}
    assert plans[2].capability_args == {"ips": ["10.9.0.5/24"], "bandwidth": {"ingressRate": 10}}
    assert plans[2].cni_args == {"k": "v"}
    plans[0].capability_args["mac"] = "x"
    assert c.runtimeConfig == {"portMappings": ports}, "the plan shares the conf's dict"


def test_plan_delegates_form() -> None:
    raw = conf(delegates=[conflist("first"), conflist("second", "macvlan")],
               runtimeConfig={"mac": "0a:00:00:00:00:09"})
    plans = plan_for(raw, "eth0", "NETCTL_NETWORKS=red@r0")
    assert summary(plans) == [
        ("delegate:first", "eth0", "first", True),
        ("delegate:second", "net1", "second", False),
        ("default/red", "r0", "red-default", False),
    ]
    assert plans[0].capability_args == {"mac": "0a:00:00:00:00:09"}


def test_plan_bad_delegate_refused() -> None:
    raw = conf(delegates=[{"cniVersion": "1.0.0", "name": "d", "type": "../sh"}])
    with pytest.raises(CNIError) as info:
        plan_for(raw, "eth0", "")
    assert info.value.code == INVALID_CONFIG and "delegates[0]" in info.value.msg


@pytest.mark.parametrize(("args", "words"), [
    ("NETCTL_NETWORKS=nowhere", "'nowhere' not found"),
    ("NETCTL_NETWORKS=red@eth0", "'eth0' is requested twice"),
    ("NETCTL_NETWORKS=Red", "DNS-1123"),
    ("NETCTL_NETWORKS=red@a@b", "'red@a@b' has more than one '@'"),
    ("NETCTL_NETWORKS=red@" + "é" * 8, "at most 15 bytes"),
    ('NETCTL_NETWORKS={"name":"red"}', "it is a JSON object"),
])
def test_plan_refusals(args: str, words: str) -> None:
    with pytest.raises(CNIError) as info:
        plan_for(conf(clusterNetwork="cluster"), "eth0", args)
    assert info.value.code == INVALID_CONFIG
    assert words in info.value.msg


def test_plan_unknown_cluster_network() -> None:
    with pytest.raises(CNIError) as info:
        plan_for(conf(clusterNetwork="missing"), "eth0", "")
    assert "'missing' not found" in info.value.msg


# plan() with a Kubernetes-mode Choice


def test_plan_cluster_network_replaced() -> None:
    raw = conf(clusterNetwork="cluster", defaultNetworks=["monitor"],
               runtimeConfig={"portMappings": [{"hostPort": 1, "containerPort": 2}]})
    inv = invocation(raw, "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p")
    blue = selection.Selection(name="blue", namespace="other", cni_args={"k": "v"})
    nets = MemoryNetworks({"other/blue": conflist("blue"), "default/monitor":
                           conflist("monitor")})
    plans = plan(decode_conf(inv), inv, Choice(cluster=blue), nets)
    assert summary(plans) == [("other/blue", "eth0", "blue", True),
                              ("default/monitor", "net1", "monitor", False)]
    assert plans[0].cni_args == {"k": "v"}
    assert plans[0].capability_args == {"portMappings": [{"hostPort": 1, "containerPort": 2}]}
    assert nets.lookups == [("other/blue", "team"), ("monitor", "team")]


def test_plan_first_delegate_replaced() -> None:
    raw = conf(delegates=[conflist("first"), conflist("second", "macvlan")])
    inv = invocation(raw)
    plans = plan(decode_conf(inv), inv, Choice(cluster=selection.Selection(
        name="blue", namespace="other")), NETS)
    assert summary(plans) == [("other/blue", "eth0", "blue", True),
                              ("delegate:second", "net1", "second", False)]


def test_plan_defaults_skipped_and_looked_up_at_home() -> None:
    raw = conf(clusterNetwork="red", defaultNetworks=["red", "monitor"])
    inv = invocation(raw, "K8S_POD_NAMESPACE=other;NETCTL_NETWORKS=red")
    chosen = selection.parse("team/red")
    nets = MemoryNetworks({"team/red": conflist("red-team"), "default/monitor":
                           conflist("monitor"), "other/red": conflist("red-other")})
    plans = plan(decode_conf(inv), inv, Choice(chosen, home="team"), nets)
    assert summary(plans) == [("team/red", "eth0", "red-team", True),
                              ("team/red", "net1", "red-team", False),
                              ("default/monitor", "net2", "monitor", False),
                              ("team/red", "net3", "red-team", False)]
    assert nets.lookups == [("red", "team"), ("red", "team"), ("monitor", "team"),
                            ("team/red", "other")]
    plans = plan(decode_conf(inv), inv, Choice(chosen, skip_defaults=True), NETS)
    assert summary(plans) == [("default/red", "eth0", "red-default", True),
                              ("team/red", "net1", "red-team", False)]


@pytest.mark.parametrize(("chosen", "words"), [
    ("nowhere", "'nowhere' not found"),
    ("red@eth0", "'eth0' is requested twice"),
])
def test_plan_refuses_as_the_pods(chosen: str, words: str) -> None:
    inv = invocation(conf(clusterNetwork="cluster"), "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p")
    c = decode_conf(inv)
    with pytest.raises(CNIError) as plain:
        plan(c, inv, Choice(selection.parse(chosen)), NETS)
    assert not isinstance(plain.value, Refusal), "standalone: the error as it was"
    with pytest.raises(Refusal) as info:
        plan(c, inv, Choice(selection.parse(chosen), pod=inv.pod), NETS)
    assert info.value.code == INVALID_CONFIG and info.value.named \
        and info.value.msg.startswith("pod team/p: ")
    assert info.value.msg == f"pod team/p: {plain.value.msg}" and words in info.value.msg
    assert info.value.reason == "InvalidNetworkAnnotation" and words in info.value.note


# Multus' keys


def test_decode_conf_multus_keys() -> None:
    c = decode_raw(conf(clusterNetwork="cluster"))
    assert (c.multusNamespace, c.systemNamespaces, c.namespaceIsolation) == (
        "kube-system", ["kube-system"], False)
    assert (c.global_namespaces(), c.readinessindicatorfile) == (["default"], "")
    assert decode_raw(conf(clusterNetwork="c", globalNamespaces=" a, b ,")
                      ).global_namespaces() == ["a", "b"]
    assert decode_raw(conf(clusterNetwork="c", globalNamespaces=["x"])
                      ).global_namespaces() == ["x"]


def test_decode_conf_multus_keys_in_any_case() -> None:
    c = decode_raw(conf(clusternetwork="cluster", ReadinessIndicatorFile="/run/ready",
                        MultusNamespace="nets", namespaceisolation=True))
    assert (c.clusterNetwork, c.readinessindicatorfile) == ("cluster", "/run/ready")
    assert (c.multusNamespace, c.namespaceIsolation) == ("nets", True)
    c = decode_raw(conf(clusterNetwork="exact", CLUSTERNETWORK="other"))
    assert c.clusterNetwork == "exact", "the exact spelling wins"


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


def test_networkdir_not_found_says_once_what_and_where(netdir: Path) -> None:
    nets = NetworkDir(str(netdir))
    with pytest.raises(CNIError) as info:
        nets.resolve("green", "default")  # the pod's namespace is default: one lookup
    assert info.value.msg == (
        f"network 'green' not found in {netdir}: no NetworkAttachmentDefinition default/green"
        " and no network whose CNI name is 'green'")
    with pytest.raises(CNIError) as info:
        nets.resolve("team/green", "default")  # qualified: no CNI-name lookup
    assert info.value.msg == (
        f"network 'team/green' not found in {netdir}: no NetworkAttachmentDefinition "
        "team/green")


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
