"""We test these aspects of what netctl keeps of Kubernetes objects:

- a pod and a NetworkAttachmentDefinition as the API serves them, decoded into the
  structs the kube client caches: the fields and annotations netctl reads kept, the rest
  dropped;
- static pods told by ``kubernetes.io/config.source``;
- :class:`~netctl.errors.Refusal`: a CNI error with an Event's reason and note, naming
  its pod once.
"""

from __future__ import annotations

import json

import msgspec

from netctl.errors import INVALID_CONFIG, CNIError, Refusal
from netctl.kubeapi.objects import CONFIG_SOURCE, NETWORKS, Meta, Nad, Pod, is_static, key


def test_pod_as_the_api_serves_it() -> None:
    pod = msgspec.json.decode(json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "shop", "name": "web-1", "uid": "u-1",
                     "resourceVersion": "42", "deletionTimestamp": "2026-11-30T10:00:00Z",
                     "labels": {"app": "web"}, "managedFields": [{"manager": "kubectl"}],
                     "annotations": {
                         NETWORKS: "storage@s0",
                         "kubectl.kubernetes.io/last-applied-configuration": "{}" * 2000,
                         "k8s.v1.cni.cncf.io/network-status": "[]"}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}}), type=Pod)
    assert (pod.metadata.uid, pod.metadata.resourceVersion, pod.spec.nodeName) == (
        "u-1", "42", "node-a")
    assert pod.metadata.annotations == {NETWORKS: "storage@s0"}  # only what is read
    assert pod.metadata.deletionTimestamp == "2026-11-30T10:00:00Z"
    assert key(pod) == "shop/web-1" and not is_static(pod)


def test_nad_as_the_api_serves_it() -> None:
    config = '{"cniVersion": "1.0.0", "name": "storage", "type": "macvlan"}'
    nad = msgspec.json.decode(json.dumps({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"namespace": "shop", "name": "storage", "resourceVersion": "7"},
        "spec": {"config": config}}), type=Nad)
    assert (key(nad), nad.metadata.resourceVersion, nad.spec.config) == (
        "shop/storage", "7", config)
    assert msgspec.json.decode(b'{"metadata": {"name": "b"}}', type=Nad).spec.config == ""


def test_static_pods() -> None:
    def pod(source: str | None) -> Pod:
        annotations = {CONFIG_SOURCE: source} if source is not None else {}
        return Pod(metadata=Meta(annotations=annotations))

    assert is_static(pod("file")) and is_static(pod("http"))
    assert not is_static(pod("api")) and not is_static(pod(None))


def test_refusal_names_its_pod_once() -> None:
    bad = Refusal("no NetworkAttachmentDefinition a/b", "NoNetworkFound", "a/b not found")
    assert isinstance(bad, CNIError) and bad.code == INVALID_CONFIG and not bad.named
    named = bad.for_pod("shop/web-1")
    assert named.msg == "pod shop/web-1: no NetworkAttachmentDefinition a/b"
    assert (named.reason, named.note, named.named) == ("NoNetworkFound", "a/b not found",
                                                       True)
    assert named.for_pod("other/x") is named and bad.for_pod("") is bad
    assert len(Refusal("m", "R", "n" * 5000).note) == 1024


def test_a_block_body_carries_its_api_version_and_kind() -> None:
    """The claim's and the update's body: a custom resource without apiVersion and kind is
    refused by the real API server, and omit_defaults would drop their default values."""
    from netctl.kubeapi import blocks
    from netctl.kubeapi.objects import Block, BlockSpec, Meta

    body = msgspec.json.decode(blocks._body(Block(metadata=Meta(name="b"),
                                                  spec=BlockSpec(node="n1"))))
    assert (body["apiVersion"], body["kind"]) == ("ipam.netctl.dev/v1", "IPAMBlock")
    assert body["metadata"] == {"name": "b"} and body["spec"]["node"] == "n1"
