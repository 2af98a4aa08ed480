"""We test these aspects of what netctl keeps of Kubernetes objects:

- a pod as the API serves it reduced to its identity, node, resourceVersion,
  deletionTimestamp and only the annotations netctl reads; missing or mistyped parts
  read as empty, never as an error;
- static pods told by ``kubernetes.io/config.source``;
- a NetworkAttachmentDefinition reduced to its identity, ``spec.config`` and
  resourceVersion;
- :class:`~netctl.errors.Refusal`: a CNI error with an Event's reason and note, naming
  its pod once.
"""

from __future__ import annotations

from netctl.errors import INVALID_CONFIG, CNIError, Refusal
from netctl.kube.objects import (
    CONFIG_SOURCE,
    DEFAULT_NETWORK,
    NETWORKS,
    KubeNad,
    KubePod,
    nad_from_api,
    pod_from_api,
)


def test_pod_from_api_keeps_what_netctl_reads() -> None:
    pod = pod_from_api({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "shop", "name": "web-1", "uid": "u-1",
                     "resourceVersion": "42", "deletionTimestamp": "2026-11-30T10:00:00Z",
                     "labels": {"app": "web"}, "managedFields": [{"manager": "kubectl"}],
                     "annotations": {NETWORKS: "storage@s0", DEFAULT_NETWORK: "alt",
                                     "kubectl.kubernetes.io/last-applied-configuration":
                                         "{" + "x" * 5000 + "}"}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}})
    assert pod == KubePod(namespace="shop", name="web-1", uid="u-1", node_name="node-a",
                          annotations={NETWORKS: "storage@s0", DEFAULT_NETWORK: "alt"},
                          resource_version="42", deletion_timestamp="2026-11-30T10:00:00Z")
    assert pod.key == "shop/web-1" and not pod.is_static


def test_pod_from_api_tolerates_missing_and_mistyped_parts() -> None:
    assert pod_from_api({}) == KubePod(namespace="", name="", uid="")
    pod = pod_from_api({"metadata": {"name": "p", "namespace": "ns", "annotations": None,
                                     "uid": 7}, "spec": None})
    assert pod == KubePod(namespace="ns", name="p", uid="")
    pod = pod_from_api({"metadata": {"annotations": {NETWORKS: ["not", "a", "string"]}}})
    assert pod.annotations == {}


def test_static_pods() -> None:
    def pod(source: str | None) -> KubePod:
        annotations = {CONFIG_SOURCE: source} if source is not None else {}
        return pod_from_api({"metadata": {"annotations": annotations}})

    assert pod("file").is_static and pod("http").is_static
    assert not pod("api").is_static and not pod(None).is_static


def test_nad_from_api() -> None:
    config = '{"cniVersion": "1.0.0", "name": "storage", "type": "macvlan"}'
    nad = nad_from_api({"apiVersion": "k8s.cni.cncf.io/v1",
                        "kind": "NetworkAttachmentDefinition",
                        "metadata": {"namespace": "shop", "name": "storage",
                                     "resourceVersion": "7"}, "spec": {"config": config}})
    assert nad == KubeNad(namespace="shop", name="storage", config=config,
                          resource_version="7")
    assert nad.key == "shop/storage"
    assert nad_from_api({"metadata": {"namespace": "a", "name": "b"}}).config == ""


def test_refusal_names_its_pod_once() -> None:
    bad = Refusal("no NetworkAttachmentDefinition a/b", "NoNetworkFound", "a/b not found")
    assert isinstance(bad, CNIError) and bad.code == INVALID_CONFIG and bad.pod == ""
    named = bad.for_pod("shop/web-1")
    assert named.msg == "pod shop/web-1: no NetworkAttachmentDefinition a/b"
    assert (named.reason, named.note, named.pod) == ("NoNetworkFound", "a/b not found",
                                                     "shop/web-1")
    assert named.for_pod("other/x") is named and bad.for_pod("") is bad
    assert len(Refusal("m", "R", "n" * 5000).note) == 1024
