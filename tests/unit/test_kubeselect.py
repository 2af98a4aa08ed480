"""We test these aspects of Kubernetes mode's selection (``choose``, ``KubeSelector``),
planned through ``plan()`` over a :class:`NadResolver` on an in-memory NAD cache:

- ``k8s.v1.cni.cncf.io/networks`` in both forms reaches the right NADs and interfaces,
  a bare name in the pod's namespace only; every JSON field reaches the attachment;
- ``v1.multus-cni.io/default-network`` replaces the cluster network (or the first
  delegate), its namespace defaulting to ``multusNamespace``; one network only, on the
  runtime's interface;
- ``multusNamespace`` for ``clusterNetwork``/``defaultNetworks``; ``systemNamespaces``
  without ``defaultNetworks``;
- ``namespaceIsolation`` with and without ``globalNamespaces``, for both annotations;
- every malformed annotation refused with code 7 naming the pod and the bad part, with
  an Event reason and note; generated annotations never do anything else (hypothesis);
- the kube client's caches (``PodSource``, ``NadSource``) fit the lookups the decisions
  take;
- the annotations from ``runtimeConfig["io.kubernetes.cri.pod-annotations"]`` win over
  the API's and spare the API read; the pod's UID checked against ``K8S_POD_UID`` (ADD
  refused, DEL warned, static pods exempt);
- the readiness indicator: which file, and the answers while it is missing.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from netctl.cni.request import Invocation, Request, decode
from netctl.cni.request import Pod as PodRef
from netctl.engine import readiness
from netctl.engine.choice import Choice
from netctl.engine.conf import NetctlConf, decode_conf
from netctl.engine.plan import plan
from netctl.errors import (
    INVALID_CONFIG,
    INVALID_ENVIRONMENT,
    NOT_AVAILABLE,
    TRY_AGAIN_LATER,
    CNIError,
    Refusal,
)
from netctl.journal.records import Attachment
from netctl.kube.nads import NadLookup, NadResolver
from netctl.kube.select import KubeSelector, PodLookup, check_pod, choose
from netctl.kubeapi.objects import (
    CONFIG_SOURCE,
    DEFAULT_NETWORK,
    NETWORKS,
    RUNTIME_ANNOTATIONS,
    Meta,
    Nad,
    NadSpec,
    Pod,
)
from netctl.kubeapi.pods import NadSource, PodSource

NETNS = "/run/netns/pod"


def nad(key: str, ptype: str = "bridge") -> Nad:
    ns, name = key.split("/")
    conf = {"cniVersion": "1.0.0", "name": f"{name}-{ns}", "plugins": [
        {"type": ptype, "capabilities": {"ips": True, "mac": True}}]}
    return Nad(metadata=Meta(namespace=ns, name=name, resourceVersion="1"),
               spec=NadSpec(config=json.dumps(conf)))


class Nads:
    """The kube client's NAD cache, in a dict."""

    def __init__(self, *keys: str) -> None:
        self.nads = {key: nad(key) for key in keys}

    def get(self, namespace: str, name: str) -> Nad | None:
        return self.nads.get(f"{namespace}/{name}")


NADS = NadResolver(Nads("kube-system/cluster", "kube-system/monitor", "kube-system/alt",
                        "nets/cluster", "nets/monitor", "shop/storage", "shop/backend",
                        "default/shared", "default/storage", "other/blue", "global/fast"),
                   conf_dir="/nonexistent")


def meta_conf(**fields: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "netctl", "type": "netctl-cni",
            "clusterNetwork": "cluster", "defaultNetworks": ["monitor"], **fields}


def invocation(conf: dict[str, Any] | None = None, ns: str = "shop", name: str = "web-1",
               uid: str = "uid-1", verb: str = "ADD") -> Invocation:
    args = ";".join(f"{k}={v}" for k, v in (("K8S_POD_NAMESPACE", ns), ("K8S_POD_NAME", name),
                                            ("K8S_POD_UID", uid)) if v)
    return decode(Request(command=verb, container_id="c1", netns=NETNS, ifname="eth0",
                          args=args, stdin=json.dumps(conf or meta_conf())))


def chosen(annotations: dict[str, Any], conf: dict[str, Any] | None = None,
           ns: str = "shop") -> Choice:
    inv = invocation(conf, ns)
    return choose(decode_conf(inv), inv.pod, annotations, inv.ifname)


def planned(annotations: dict[str, Any], conf: dict[str, Any] | None = None,
            ns: str = "shop") -> list[Attachment]:
    inv = invocation(conf, ns)
    c = decode_conf(inv)
    return plan(c, inv, choose(c, inv.pod, annotations, inv.ifname), NADS)


def summary(atts: list[Attachment]) -> list[tuple[str, str, bool]]:
    return [(a.network, a.ifname, a.is_default) for a in atts]


def refusal(annotations: dict[str, Any], conf: dict[str, Any] | None = None,
            ns: str = "shop") -> Refusal:
    with pytest.raises(Refusal) as info:
        planned(annotations, conf, ns)
    assert info.value.code == INVALID_CONFIG
    assert info.value.msg.startswith(f"pod {ns}/web-1: ") and info.value.named
    assert info.value.reason and info.value.note and len(info.value.note) <= 1024
    return info.value


# the networks annotation, both forms


def test_comma_form() -> None:
    atts = planned({NETWORKS: "storage, other/blue@blue0 ,default/shared"})
    assert summary(atts) == [
        ("kube-system/cluster", "eth0", True), ("kube-system/monitor", "net1", False),
        ("shop/storage", "net2", False), ("other/blue", "blue0", False),
        ("default/shared", "net4", False)]
    assert atts[2].chain.name == "storage-shop", "the pod's namespace, not default's"


def test_json_form_every_field() -> None:
    ports = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    value = json.dumps([
        {"name": "storage", "interface": "st0", "ips": ["10.9.0.5/24", "fd00::5"],
         "mac": "0a:58:00:00:00:05", "cni-args": {"vlan": 7}, "portMappings": ports,
         "bandwidth": {"ingressRate": 100, "ingressBurst": 10}, "deviceID": "0000:03:00.1",
         "infiniband-guid": "00:11:22:33:44:55:66:77", "default-route": ["10.9.0.1"]},
        {"name": "blue", "namespace": "other"}])
    atts = planned({NETWORKS: value})
    assert summary(atts)[2:] == [("shop/storage", "st0", False), ("other/blue", "net3", False)]
    assert atts[2].capability_args == {
        "ips": ["10.9.0.5/24", "fd00::5"], "mac": "0a:58:00:00:00:05", "portMappings": ports,
        "bandwidth": {"ingressRate": 100, "ingressBurst": 10}, "deviceID": "0000:03:00.1",
        "infinibandGUID": "00:11:22:33:44:55:66:77"}
    assert atts[2].cni_args == {"vlan": 7}
    assert atts[3].capability_args == {} and atts[3].cni_args == {}


def test_no_annotations() -> None:
    assert summary(planned({})) == [("kube-system/cluster", "eth0", True),
                                    ("kube-system/monitor", "net1", False)]
    assert summary(planned({NETWORKS: "  "})) == summary(planned({}))


def test_bare_name_is_in_the_pods_namespace_only() -> None:
    bad = refusal({NETWORKS: "shared"})
    assert bad.reason == "NoNetworkFound"
    assert bad.msg == "pod shop/web-1: no NetworkAttachmentDefinition shop/shared"


# the default-network annotation


@pytest.mark.parametrize(("value", "network"), [
    ("alt", "kube-system/alt"),
    ("other/blue", "other/blue"),
    ('[{"name": "alt", "cni-args": {"k": "v"}, "ips": ["10.0.0.9"]}]', "kube-system/alt"),
    ("alt@eth0", "kube-system/alt"),
])
def test_default_network_replaces_the_cluster_network(value: str, network: str) -> None:
    atts = planned({DEFAULT_NETWORK: value, NETWORKS: "storage"})
    assert summary(atts) == [(network, "eth0", True), ("kube-system/monitor", "net1", False),
                             ("shop/storage", "net2", False)]
    assert atts[0].capability_args == {}, "capability fields ignored, as Multus does"
    assert atts[0].cni_args == ({"k": "v"} if "cni-args" in value else {})


def test_default_network_replaces_the_first_delegate() -> None:
    delegates = [{"cniVersion": "1.0.0", "name": "d1", "type": "bridge"},
                 {"cniVersion": "1.0.0", "name": "d2", "type": "macvlan"}]
    conf = meta_conf(clusterNetwork="", defaultNetworks=[], delegates=delegates)
    assert summary(planned({}, conf)) == [("delegate:d1", "eth0", True),
                                          ("delegate:d2", "net1", False)]
    assert summary(planned({DEFAULT_NETWORK: "alt"}, conf)) == [
        ("kube-system/alt", "eth0", True), ("delegate:d2", "net1", False)]


@pytest.mark.parametrize(("value", "words"), [
    ("", "is empty: name one network"),
    ("alt,other/blue", "names 2 networks: the cluster network is one"),
    ("[]", "names 0 networks"),
    ("alt@net0", "asks for interface 'net0': the cluster network is on the runtime's "
                 "interface 'eth0'"),
    ("Alt", "name 'Alt' is not a DNS-1123 name"),
])
def test_default_network_refusals(value: str, words: str) -> None:
    bad = refusal({DEFAULT_NETWORK: value})
    assert bad.reason == "InvalidNetworkAnnotation"
    assert f"annotation {DEFAULT_NETWORK} " in bad.msg and words in bad.msg
    assert words in bad.note


def test_default_network_missing() -> None:
    bad = refusal({DEFAULT_NETWORK: "nowhere"})
    assert bad.reason == "NoNetworkFound" and "kube-system/nowhere" in bad.msg


# multusNamespace, systemNamespaces


def test_multus_namespace_holds_the_conf_networks() -> None:
    atts = planned({DEFAULT_NETWORK: "monitor"}, meta_conf(multusNamespace="nets"))
    assert summary(atts) == [("nets/monitor", "eth0", True), ("nets/monitor", "net1", False)]
    assert summary(planned({}, meta_conf(multusNamespace="nets")))[0][0] == "nets/cluster"


@pytest.mark.parametrize(("ns", "system", "defaults"), [
    ("kube-system", None, False), ("shop", None, True),
    ("shop", ["shop", "infra"], False), ("kube-system", ["infra"], True),
])
def test_system_namespaces_get_no_default_networks(ns: str, system: list[str] | None,
                                                   defaults: bool) -> None:
    conf = meta_conf() if system is None else meta_conf(systemNamespaces=system)
    atts = planned({NETWORKS: "other/blue"}, conf, ns)
    expected = [("kube-system/cluster", "eth0", True)]
    if defaults:
        expected.append(("kube-system/monitor", "net1", False))
    expected.append(("other/blue", f"net{len(expected)}", False))
    assert summary(atts) == expected


# namespaceIsolation


ISOLATED = meta_conf(namespaceIsolation=True)


def test_isolation_allows_own_and_global_namespaces() -> None:
    atts = planned({NETWORKS: "storage,default/shared"}, ISOLATED)
    assert [a.network for a in atts[2:]] == ["shop/storage", "default/shared"]
    conf = meta_conf(namespaceIsolation=True, globalNamespaces="global, other")
    atts = planned({NETWORKS: "other/blue,global/fast,shop/backend"}, conf)
    assert [a.network for a in atts[2:]] == ["other/blue", "global/fast", "shop/backend"]
    assert [a.network for a in planned({NETWORKS: "other/blue"})[2:]] == ["other/blue"]


def test_isolation_refusals() -> None:
    bad = refusal({NETWORKS: "storage,other/blue"}, ISOLATED)
    assert bad.reason == "NetworkNotAllowed"
    assert bad.msg == (f"pod shop/web-1: annotation {NETWORKS} refers to "
                       "NetworkAttachmentDefinition other/blue, outside the pod's namespace: "
                       "with namespaceIsolation a pod may use those of shop, default only")
    conf = meta_conf(namespaceIsolation=True, globalNamespaces="global")
    assert "default/shared" in refusal({NETWORKS: "default/shared"}, conf).msg


def test_isolation_for_the_default_network() -> None:
    assert planned({DEFAULT_NETWORK: "alt"}, ISOLATED)[0].network == "kube-system/alt"
    bad = refusal({DEFAULT_NETWORK: "other/blue"}, ISOLATED)
    assert bad.reason == "NetworkNotAllowed" and DEFAULT_NETWORK in bad.msg
    assert "shop, default, kube-system only" in bad.msg


# malformed annotations


@pytest.mark.parametrize(("annotations", "words"), [
    ({NETWORKS: "Storage"}, f"annotation {NETWORKS} is malformed: name 'Storage' is not a "
                            "DNS-1123 name"),
    ({NETWORKS: "shop_x/storage"}, "namespace 'shop_x' is not a DNS-1123 name"),
    ({NETWORKS: "storage@a/b"}, "interface of network 'storage'"),
    ({NETWORKS: "storage@" + "x" * 16}, "at most 15 bytes"),
    ({NETWORKS: "storage@" + "é" * 8}, "interface of network 'storage' 'éééééééé' is invalid: "
                                       "at most 15 bytes"),
    ({NETWORKS: "storage@a@b"}, f"annotation {NETWORKS} is malformed: 'storage@a@b' has "
                                "more than one '@'"),
    ({NETWORKS: '{"name": "storage"}'}, f"annotation {NETWORKS} is malformed: it is a JSON "
                                        "object; it must be a JSON list of objects"),
    ({DEFAULT_NETWORK: '{"name": "storage"}'}, f"annotation {DEFAULT_NETWORK} is malformed: "
                                               "it is a JSON object"),
    ({NETWORKS: '[{"name": "storage"'}, "not valid JSON"),
    ({NETWORKS: '[{"interface": "x"}]'}, "missing required field `name`"),
    ({NETWORKS: '[{"name": "storage", "ips": "10.0.0.1"}]'},
     "is malformed: Expected `array | null`, got `str`"),
    ({NETWORKS: '[{"name": "storage", "ips": ["10.0.0.300"]}]'},
     "network shop/storage: requested address '10.0.0.300' is not an IP address"),
    ({NETWORKS: '[{"name": "storage", "mac": "0a:58:00"}]'}, "requested MAC '0a:58:00'"),
    ({NETWORKS: '[{"name": "storage", "infiniband-guid": "xyz"}]'},
     "infiniband-guid 'xyz' is not a hardware address"),
    ({NETWORKS: '[{"name": "storage", "default-route": ["gw"]}]'},
     "default-route 'gw' is not an IP address"),
    ({NETWORKS: '[{"name": "storage", "default-route": ["10.0.0.1"]}, '
                '{"name": "backend", "default-route": ["10.1.0.1", "fd00::1"]}]'},
     "asks for 2 IPv4 default routes (shop/storage: 10.0.0.1; shop/backend: 10.1.0.1)"),
    ({NETWORKS: "storage@eth0"}, "'eth0' is requested twice"),
    ({NETWORKS: "storage@st0,backend@st0"}, "'st0' is requested twice"),
    ({NETWORKS: ["storage"]}, f"annotation {NETWORKS} is not a string but list"),
])
def test_malformed_annotations_refused(annotations: dict[str, Any], words: str) -> None:
    bad = refusal(annotations)
    assert bad.reason == "InvalidNetworkAnnotation"
    assert words in bad.msg and words in bad.note


_FIELDS = ["name", "namespace", "interface", "ips", "mac", "default-route", "cni-args",
           "portMappings", "bandwidth", "deviceID", "infiniband-guid", "interfaceRequest"]
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_element = st.dictionaries(st.sampled_from(_FIELDS), _json | st.sampled_from(
    ["storage", "other", "blue", "eth0", "net1", "10.0.0.1", "fd00::1/64", "0a:58:00:00:00:01"]))
_annotation = st.one_of(
    st.text(max_size=60),
    st.text(alphabet="abc-/@, eth0[]{}\"", max_size=40),
    st.lists(_element, max_size=4).map(json.dumps),
    _json.map(json.dumps))


@settings(max_examples=400, deadline=None)
@given(networks=st.none() | _annotation, default=st.none() | _annotation,
       isolated=st.booleans())
def test_generated_annotations_select_or_refuse(networks: str | None, default: str | None,
                                                isolated: bool) -> None:
    annotations = {k: v for k, v in ((NETWORKS, networks), (DEFAULT_NETWORK, default))
                   if v is not None}
    conf = meta_conf(namespaceIsolation=isolated)
    try:
        atts = planned(annotations, conf)
    except Refusal as exc:
        assert exc.code == INVALID_CONFIG and exc.msg.startswith("pod shop/web-1: ")
        assert exc.reason and exc.note
        return
    assert atts[0].is_default and atts[0].ifname == "eth0"
    assert len({a.ifname for a in atts}) == len(atts)


# where the annotations come from


class Pods:
    """The kube client's pod cache, in a dict; counts the lookups."""

    def __init__(self, *pods: Pod) -> None:
        self.pods = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in pods}
        self.asked: list[tuple[str, str]] = []
        self.chosen: list[tuple[str, str]] = []  # (container, pod) of each ADD's choice
        self.down = False

    async def lookup(self, namespace: str, name: str) -> Pod | None:
        self.asked.append((namespace, name))
        if self.down:
            raise CNIError(TRY_AGAIN_LATER, "the API server https://api:6443 is unreachable")
        return self.pods.get(f"{namespace}/{name}")

    def cached(self, namespace: str, name: str) -> Pod | None:
        return self.pods.get(f"{namespace}/{name}")

    def chosen_for_add(self, container_id: str, pod: Pod) -> None:
        self.chosen.append((container_id, pod.metadata.name))


def pod(annotations: dict[str, str], uid: str = "uid-1", ns: str = "shop") -> Pod:
    return Pod(metadata=Meta(namespace=ns, name="web-1", uid=uid, annotations=annotations))


def test_the_kube_clients_caches_fit() -> None:
    for impl, proto in ((PodSource.lookup, PodLookup.lookup), (PodSource.cached, PodLookup.cached),
                        (NadSource.get, NadLookup.get)):
        assert inspect.signature(impl) == inspect.signature(proto)
        assert inspect.iscoroutinefunction(impl) == inspect.iscoroutinefunction(proto)


def select(pods: Pods, inv: Invocation) -> Choice:
    return trio.run(KubeSelector(pods).select, decode_conf(inv), inv)


def test_selection_from_the_api_pod() -> None:
    pods = Pods(pod({NETWORKS: "storage@st0", DEFAULT_NETWORK: "alt"}))
    choice = select(pods, invocation())
    assert pods.asked == [("shop", "web-1")]
    assert [name for _, name in pods.chosen] == ["web-1"], "the hot-plug is told the choice"
    assert [(s.namespace, s.name, s.interface) for s in choice.networks] == [
        ("shop", "storage", "st0")]
    assert choice.cluster is not None and choice.cluster.name == "alt"
    assert (choice.home, choice.pod, choice.skip_defaults) == (
        "kube-system", PodRef(namespace="shop", name="web-1", uid="uid-1"), False)


def test_runtime_annotations_win_and_spare_the_api() -> None:
    pods = Pods(pod({NETWORKS: "storage"}))
    conf = meta_conf(runtimeConfig={RUNTIME_ANNOTATIONS: {NETWORKS: "other/blue@b0",
                                                          "unrelated": "x"}})
    choice = select(pods, invocation(conf))
    assert pods.asked == [], "no API read at all"
    assert [(s.namespace, s.name, s.interface) for s in choice.networks] == [
        ("other", "blue", "b0")]
    empty = select(pods, invocation(meta_conf(runtimeConfig={RUNTIME_ANNOTATIONS: {}})))
    assert empty.networks == [] and pods.asked == [], "the runtime's (empty) copy wins"
    assert pods.chosen == [], "not chosen from the cache's pod: the hot-plug looks again"


def test_the_sticky_identity_from_the_pods_annotations_and_labels() -> None:
    """The identity owning sticky addresses: the API pod's sticky-key annotation, else
    its KubeVirt VM label, else its name; with the runtime's annotations, the label comes
    from the cache (no wait, no request)."""
    vm = Pod(metadata=Meta(namespace="shop", name="web-1", uid="uid-1",
                           labels={"vm.kubevirt.io/name": "vm-7", "app": "x"}))
    assert vm.metadata.labels == {"vm.kubevirt.io/name": "vm-7"}  # the others dropped
    assert select(Pods(pod({})), invocation()).identity == "pod:shop/web-1"
    assert select(Pods(vm), invocation()).identity == "vm:shop/vm-7"
    keyed = pod({"netctl.dev/sticky-key": "ledger"})
    assert select(Pods(keyed), invocation()).identity == "key:ledger"
    pods = Pods(vm)
    runtime = meta_conf(runtimeConfig={RUNTIME_ANNOTATIONS: {}})
    assert select(pods, invocation(runtime)).identity == "vm:shop/vm-7"
    assert pods.asked == []
    runtime = meta_conf(runtimeConfig={RUNTIME_ANNOTATIONS: {"netctl.dev/sticky-key": "k"}})
    assert select(pods, invocation(runtime)).identity == "key:k"


def test_runtime_annotations_malformed() -> None:
    inv = invocation(meta_conf(runtimeConfig={RUNTIME_ANNOTATIONS: ["a"]}))
    with pytest.raises(CNIError) as info:
        select(Pods(), inv)
    assert info.value.code == INVALID_CONFIG and RUNTIME_ANNOTATIONS in info.value.msg
    inv = invocation(meta_conf(runtimeConfig={RUNTIME_ANNOTATIONS: {NETWORKS: 5}}))
    with pytest.raises(Refusal, match="is not a string but int"):
        select(Pods(), inv)


def test_no_pod_named_means_the_conf_alone() -> None:
    pods = Pods()
    choice = select(pods, invocation(ns="", name=""))
    assert pods.asked == [] and choice == Choice(home="kube-system")


def test_api_unreachable_is_passed_on() -> None:
    pods = Pods()
    pods.down = True
    with pytest.raises(CNIError) as info:
        select(pods, invocation())
    assert info.value.code == TRY_AGAIN_LATER


def test_uid_mismatch_refuses_add() -> None:
    pods = Pods(pod({NETWORKS: "storage"}, uid="uid-2"))
    with pytest.raises(CNIError) as info:
        select(pods, invocation())
    assert info.value.code == INVALID_ENVIRONMENT and not isinstance(info.value, Refusal)
    assert info.value.msg == ("pod shop/web-1: the runtime's K8S_POD_UID is uid-1 but the "
                              "API server's pod of that name has uid uid-2: the pod was "
                              "replaced")
    with pytest.raises(CNIError, match="is not in the API server") as info:
        select(Pods(), invocation())
    assert info.value.code == INVALID_ENVIRONMENT


def test_uid_checks() -> None:
    runtime = PodRef(namespace="shop", name="web-1", uid="uid-1")
    assert check_pod("ADD", runtime, pod({})) == ""
    assert check_pod("ADD", PodRef(namespace="shop", name="web-1"), pod({}, uid="x")) == ""
    assert check_pod("ADD", runtime, pod({}, uid="")) == ""
    assert check_pod("ADD", runtime, pod({CONFIG_SOURCE: "file"}, uid="mirror")) == "", \
        "a static pod's mirror has its own UID"
    warning = check_pod("DEL", runtime, pod({}, uid="uid-2"))
    assert "K8S_POD_UID is uid-1" in warning and "uid uid-2" in warning
    assert "not in the API server" in check_pod("DEL", runtime, None)
    with pytest.raises(CNIError):
        check_pod("ADD", runtime, pod({CONFIG_SOURCE: "api"}, uid="uid-2"))


def test_selection_is_plain_data() -> None:
    choice = chosen({NETWORKS: '[{"name": "storage", "cni-args": {"a": [1]}}]'})
    assert msgspec.json.decode(msgspec.json.encode(choice.networks)) == [
        {"name": "storage", "namespace": "shop", "cni-args": {"a": [1]}}]


# readinessindicatorfile


def test_readiness_indicator() -> None:
    def conf(path: str) -> NetctlConf:
        return decode_conf(invocation(meta_conf(readinessindicatorfile=path)))

    assert readiness.indicator(conf("")) is None
    assert readiness.indicator(conf("/run/flannel//subnet.env")) == "/run/flannel/subnet.env"
    assert readiness.indicator(conf("etc/cni/net.d/../10-calico.conflist")) == \
        "/etc/cni/10-calico.conflist"
    status = readiness.not_ready("/run/flannel/subnet.env", "STATUS")
    assert status.code == NOT_AVAILABLE and "/run/flannel/subnet.env" in status.msg
    add = readiness.not_ready("/run/flannel/subnet.env", "ADD", waited=45)
    assert add.code == TRY_AGAIN_LATER
    assert "did not appear within 45 s" in add.msg and "/run/flannel/subnet.env" in add.msg
