"""We test the fake Kubernetes API server (``netctl/kit/kubefake``) through the real
kubernetes-asyncio client over real HTTP, in these aspects:

- create/get/list with server-set metadata; 404 NotFound, 409 AlreadyExists (the IPAM
  block claim), 422 for names and pods the real server refuses, all as ``Status`` bodies;
- optimistic concurrency: a stale resourceVersion on update, patch or delete
  preconditions is 409; a CRD update without one is 422; a no-op write keeps the
  resourceVersion; the status subresource;
- patches: strategic (the client's default for a dict on core kinds), merge with null
  removal, JSON patch with ``test``; the client's JSON-patch content type for a dict on
  custom objects is refused as by the real server; an Event's count merge-patched, and
  404 for an Event that is gone;
- selectors on list and watch (``spec.nodeName``, labels), with objects moving in and out
  of a selector arriving as ADDED/DELETED; two nodes' watches side by side;
- watches: from a list's resourceVersion in order; from nothing with the current state;
  bookmarks when allowed; 410 after ``compact()`` as the client surfaces it;
  ``drop_watches()`` clean or cut, and a resume that loses nothing; ``watches_held()``
  (a lagging watch: GETs see a change its stream sends only after the block), every
  stream or, ``from_event``, only those from the event named on (the others flowing);
- an outage (``stop``/``start`` on the same port) and a new etcd (``restart(new_history)``);
- finalizers and graceful pod deletion; request counts per verb and resource; latency;
- a kubeconfig with a token (401 without it) used by another process;
- the pure parts: label/field selector grammar, merge and JSON patch.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException
from netctl_kit.kubefake import IPAMBLOCKS, ApiError, FakeKube, nad, node, patching, pod, selectors
from netctl_kit.kubefake.resources import PODS

T = TypeVar("T")
BLOCK = ("ipam.netctl.dev", "v1", "ipamblocks")
NAD = ("k8s.cni.cncf.io", "v1", "network-attachment-definitions")
MERGE = "application/merge-patch+json"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(crds=[IPAMBLOCKS], bookmark_interval=60) as fake:
        yield fake
        assert fake.server_errors == []


def run(kube: FakeKube, body: Callable[[client.ApiClient], Awaitable[T]],
        token: str | None = None) -> T:
    """Run ``body`` with a client of the fake, in a fresh asyncio loop."""
    async def main() -> T:
        cfg = client.Configuration(host=kube.url)
        if token is not None:
            cfg.api_key["BearerToken"] = f"Bearer {token}"
        async with client.ApiClient(cfg) as api:
            return await body(api)
    return asyncio.run(main())


def core(api: client.ApiClient) -> Any:
    """kubernetes-asyncio's stubs type request bodies as models and leave out
    ``_content_type``; the client itself sends dicts as they are and honours it."""
    return client.CoreV1Api(api)


def custom_objects(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


def status_of(exc: ApiException) -> dict[str, Any]:
    assert exc.body is not None
    body: dict[str, Any] = json.loads(exc.body)
    assert body["kind"] == "Status" and body["code"] == exc.status
    return body


async def in_thread(fn: Callable[[], Any]) -> Any:
    """Change the cluster from the test's side without blocking the client's loop."""
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def collect(stream: Any, n: int, on_first: Callable[[], Any] | None = None,
                  seen: list[tuple[str, str, str]] | None = None,
                  ) -> list[tuple[str, str, str]]:
    """The first ``n`` events as (type, name, resourceVersion), appended to ``seen`` as
    they come; ``on_first`` runs (in a thread) once the first one has arrived."""
    seen = [] if seen is None else seen
    count = 0
    async for event in stream:
        meta = event["raw_object"]["metadata"]
        seen.append((event["type"], meta.get("name", ""), meta["resourceVersion"]))
        count += 1
        if count == 1 and on_first is not None:
            await in_thread(on_first)
        if count == n:
            break
    return seen


# -- objects, errors and concurrency ---------------------------------------------------


def test_create_get_list_and_status_errors(kube: FakeKube) -> None:
    async def body(api: client.ApiClient) -> None:
        v1, custom = core(api), custom_objects(api)
        made = await v1.create_namespaced_pod("ns1", pod("a", "ns1", node="n1"))
        assert made.metadata.namespace == "ns1" and made.metadata.uid
        assert made.metadata.generation == 1 and made.metadata.creation_timestamp
        assert made.metadata.resource_version == kube.resource_version
        got = await v1.read_namespaced_pod("a", "ns1")
        assert got.metadata.uid == made.metadata.uid
        listed = await v1.list_namespaced_pod("ns1")
        assert [p.metadata.name for p in listed.items] == ["a"]
        assert listed.metadata.resource_version == kube.resource_version

        with pytest.raises(ApiException) as missing:
            await v1.read_namespaced_pod("a", "ns2")
        assert status_of(missing.value)["reason"] == "NotFound"
        assert missing.value.status == 404
        with pytest.raises(ApiException) as twice:
            await v1.create_namespaced_pod("ns1", pod("a", "ns1"))
        assert (twice.value.status, status_of(twice.value)["reason"]) == (409, "AlreadyExists")

        # cluster-scoped custom objects: create is the claim, AlreadyExists means taken
        block = {"apiVersion": "ipam.netctl.dev/v1", "kind": "IPAMBlock",
                 "metadata": {"name": "pool-10.0.0.0-26"}, "spec": {"node": "n1"}}
        await custom.create_cluster_custom_object(*BLOCK, block)
        with pytest.raises(ApiException) as taken:
            await custom.create_cluster_custom_object(*BLOCK, {**block, "spec": {"node": "n2"}})
        assert status_of(taken.value)["details"] == {
            "name": "pool-10.0.0.0-26", "group": "ipam.netctl.dev", "kind": "ipamblocks"}
        claimed = await custom.get_cluster_custom_object(*BLOCK, "pool-10.0.0.0-26")
        assert claimed["spec"] == {"node": "n1"}

        # what the real server refuses: a CIDR in a name, a pod without containers
        with pytest.raises(ApiException) as bad_name:
            await custom.create_cluster_custom_object(
                *BLOCK, {**block, "metadata": {"name": "10.0.0.0/26"}})
        assert (bad_name.value.status, status_of(bad_name.value)["reason"]) == (422, "Invalid")
        with pytest.raises(ApiException) as no_containers:
            await v1.create_namespaced_pod("ns1", {"metadata": {"name": "b"}, "spec": {}})
        assert no_containers.value.status == 422
        with pytest.raises(ApiException) as not_strings:
            await v1.create_namespaced_pod("ns1", {**pod("c"), "metadata": {
                "name": "c", "namespace": "ns1",
                "annotations": {"k8s.v1.cni.cncf.io/network-status": [1]}}})
        assert not_strings.value.status == 400
        # a custom object without kind or apiVersion: the real server cannot decode it
        for missing in ("kind", "apiVersion"):
            bare = {k: v for k, v in block.items() if k != missing}
            bare["metadata"] = {"name": f"no-{missing.lower()}"}
            with pytest.raises(ApiException) as undecodable:
                await custom.create_cluster_custom_object(*BLOCK, bare)
            assert undecodable.value.status == 400
            assert "is missing in" in status_of(undecodable.value)["message"]
    run(kube, body)


def test_update_needs_the_current_resource_version(kube: FakeKube) -> None:
    async def body(api: client.ApiClient) -> None:
        v1, custom = core(api), custom_objects(api)
        first = await v1.create_namespaced_pod("default", pod("a"))
        first.metadata.labels = {"app": "x"}
        second = await v1.replace_namespaced_pod("a", "default", first)
        assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
        first.metadata.labels = {"app": "y"}
        with pytest.raises(ApiException) as stale:
            await v1.replace_namespaced_pod("a", "default", first)
        assert (stale.value.status, status_of(stale.value)["reason"]) == (409, "Conflict")
        assert "the object has been modified" in status_of(stale.value)["message"]

        # a write that changes nothing takes no resourceVersion
        again = await v1.replace_namespaced_pod("a", "default", second)
        assert again.metadata.resource_version == second.metadata.resource_version
        # status is a subresource: the main resource keeps it, the subresource sets it
        second.status = {"podIP": "10.0.0.5"}
        kept = await v1.replace_namespaced_pod("a", "default", second)
        assert kept.status is None or kept.status.pod_ip is None
        with_ip = await v1.patch_namespaced_pod_status(
            "a", "default", {"status": {"podIP": "10.0.0.5"}})
        assert with_ip.status.pod_ip == "10.0.0.5"
        assert with_ip.metadata.generation == 1  # status is not the spec

        block = await custom.create_cluster_custom_object(
            *BLOCK, {"apiVersion": "ipam.netctl.dev/v1", "kind": "IPAMBlock",
                     "metadata": {"name": "b1"}, "spec": {"node": "n1"}})
        unconditional = {**block, "metadata": {"name": "b1"}}
        with pytest.raises(ApiException) as no_rv:
            await custom.replace_cluster_custom_object(*BLOCK, "b1", unconditional)
        assert no_rv.value.status == 422  # a CRD update must carry a resourceVersion
        moved = await custom.replace_cluster_custom_object(
            *BLOCK, "b1", {**block, "spec": {"node": "n2"}})
        assert moved["metadata"]["generation"] == 2
        with pytest.raises(ApiException) as lost_race:
            await custom.replace_cluster_custom_object(*BLOCK, "b1", {**block, "spec": {}})
        assert lost_race.value.status == 409
    run(kube, body)


def test_patches_on_pod_annotations(kube: FakeKube) -> None:
    async def body(api: client.ApiClient) -> None:
        v1, custom = core(api), custom_objects(api)
        made = await v1.create_namespaced_pod("default", pod("a", annotations={"keep": "1"}))
        # a dict goes as a strategic merge patch for core kinds: maps merge
        status = json.dumps([{"name": "net1", "ips": ["10.1.0.2"]}])
        merged = await v1.patch_namespaced_pod("a", "default", {"metadata": {"annotations": {
            "k8s.v1.cni.cncf.io/network-status": status}}})
        assert merged.metadata.annotations == {
            "keep": "1", "k8s.v1.cni.cncf.io/network-status": status}
        # merge patch: null removes
        removed = await v1.patch_namespaced_pod(
            "a", "default", {"metadata": {"annotations": {"keep": None}}}, _content_type=MERGE)
        assert removed.metadata.annotations == {"k8s.v1.cni.cncf.io/network-status": status}
        # a list goes as a JSON patch; "test" guards it
        patched = await v1.patch_namespaced_pod("a", "default", [
            {"op": "test", "path": "/metadata/uid", "value": made.metadata.uid},
            {"op": "add", "path": "/metadata/annotations/x~1y", "value": "z"}])
        assert patched.metadata.annotations["x/y"] == "z"
        with pytest.raises(ApiException) as failed_test:
            await v1.patch_namespaced_pod("a", "default", [
                {"op": "test", "path": "/metadata/uid", "value": "another-pod"},
                {"op": "remove", "path": "/metadata/annotations"}])
        assert failed_test.value.status == 422
        # a resourceVersion in a patch is a precondition
        with pytest.raises(ApiException) as stale:
            await v1.patch_namespaced_pod("a", "default", {"metadata": {
                "resourceVersion": made.metadata.resource_version, "annotations": {"a": "b"}}})
        assert stale.value.status == 409
        current = kube.get("pods", "default", "a")
        assert current is not None and "a" not in current["metadata"]["annotations"]
        ok = await v1.patch_namespaced_pod("a", "default", {"metadata": {
            "resourceVersion": current["metadata"]["resourceVersion"],
            "annotations": {"a": "b"}}})
        assert ok.metadata.annotations["a"] == "b"

        # custom objects: kubernetes-asyncio sends a dict as a JSON patch unless told
        await custom.create_namespaced_custom_object(*NAD[:2], "default", NAD[2], nad("n1"))
        with pytest.raises(ApiException) as wrong_type:
            await custom.patch_namespaced_custom_object(
                *NAD[:2], "default", NAD[2], "n1", {"metadata": {"labels": {"a": "b"}}})
        assert wrong_type.value.status == 400
        labelled = await custom.patch_namespaced_custom_object(
            *NAD[:2], "default", NAD[2], "n1", {"metadata": {"labels": {"a": "b"}}},
            _content_type=MERGE)
        assert labelled["metadata"]["labels"] == {"a": "b"}
        with pytest.raises(ApiException) as strategic:
            await custom.patch_namespaced_custom_object(
                *NAD[:2], "default", NAD[2], "n1", {"metadata": {"labels": {"a": "c"}}},
                _content_type="application/strategic-merge-patch+json")
        assert strategic.value.status == 415
    run(kube, body)


def test_a_repeated_event_is_counted_by_a_merge_patch(kube: FakeKube) -> None:
    """How a recorder counts a repeat: a merge patch of count and lastTimestamp keeps the
    rest of the Event; a patch of an Event that is not there is 404 and creates nothing
    (events allow create-on-update, but only an apply patch creates)."""
    event = {"metadata": {"name": "p.17f0", "namespace": "default"},
             "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
             "reason": "R", "message": "m", "type": "Warning", "count": 1,
             "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:00Z"}

    async def body(api: client.ApiClient) -> None:
        v1 = core(api)
        await v1.create_namespaced_event("default", event)
        counted = await v1.patch_namespaced_event("p.17f0", "default", {
            "count": 2, "lastTimestamp": "2024-01-01T00:00:05Z"}, _content_type=MERGE)
        assert (counted.count, counted.message, counted.reason) == (2, "m", "R")
        assert counted.first_timestamp < counted.last_timestamp
        with pytest.raises(ApiException) as missing:
            await v1.patch_namespaced_event("p.0", "default", {"count": 2},
                                            _content_type=MERGE)
        assert (missing.value.status, status_of(missing.value)["reason"]) == (404, "NotFound")
        listed = await v1.list_namespaced_event("default")
        assert [e.metadata.name for e in listed.items] == ["p.17f0"]
    run(kube, body)


def test_delete_preconditions_finalizers_and_graceful_pods(kube: FakeKube) -> None:
    async def body(api: client.ApiClient) -> None:
        v1 = core(api)
        made = await v1.create_namespaced_pod("default", pod("a"))
        await v1.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"v": "2"}}})
        stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(
            resource_version=made.metadata.resource_version))
        with pytest.raises(ApiException) as conflict:
            await v1.delete_namespaced_pod("a", "default", body=stale)
        assert conflict.value.status == 409
        other = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-it"))
        with pytest.raises(ApiException) as wrong_uid:
            await v1.delete_namespaced_pod("a", "default", body=other)
        assert "Precondition failed: UID" in status_of(wrong_uid.value)["message"]
        right = client.V1DeleteOptions(preconditions=client.V1Preconditions(
            uid=made.metadata.uid))
        gone = await v1.delete_namespaced_pod("a", "default", body=right)
        assert gone.metadata.uid == made.metadata.uid
        with pytest.raises(ApiException) as twice:
            await v1.delete_namespaced_pod("a", "default")
        assert twice.value.status == 404

        # finalizers: the delete marks, the write that empties them deletes
        held = pod("b")
        held["metadata"]["finalizers"] = ["netctl.dev/ipam"]
        await v1.create_namespaced_pod("default", held)
        marked = await v1.delete_namespaced_pod("b", "default")
        assert marked.metadata.deletion_timestamp is not None
        await v1.patch_namespaced_pod("b", "default", {"metadata": {"finalizers": None}},
                                      _content_type=MERGE)
        assert kube.get("pods", "default", "b") is None
    run(kube, body)

    with FakeKube(graceful_pod_deletion=True) as graceful:
        graceful.create("pods", pod("c", node="n1"))
        marked = graceful.delete("pods", "default", "c")
        assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
        assert graceful.get("pods", "default", "c") is not None  # until the kubelet says 0
        graceful.delete("pods", "default", "c", grace_period=0)
        assert graceful.get("pods", "default", "c") is None


def test_selectors_on_lists(kube: FakeKube) -> None:
    kube.create("pods", pod("a", node="n1", labels={"app": "web", "tier": "1"}))
    kube.create("pods", pod("b", node="n2", labels={"app": "db"}))
    kube.create("pods", pod("c", "other", node="n1"))

    async def names(api: client.ApiClient, **kw: Any) -> list[str]:
        found = await core(api).list_pod_for_all_namespaces(**kw)
        return [p.metadata.name for p in found.items]

    async def body(api: client.ApiClient) -> None:
        assert await names(api, field_selector="spec.nodeName=n1") == ["a", "c"]
        assert await names(api, field_selector="spec.nodeName=n1,metadata.namespace!=other"
                           ) == ["a"]
        assert await names(api, field_selector="metadata.name==b") == ["b"]
        assert await names(api, label_selector="app=web") == ["a"]
        assert await names(api, label_selector="app!=web") == ["b", "c"]
        assert await names(api, label_selector="app in (web, db),!tier") == ["b"]
        assert await names(api, label_selector="app notin (web)") == ["b", "c"]
        assert await names(api, label_selector="tier") == ["a"]
        with pytest.raises(ApiException) as unsupported:
            await names(api, field_selector="spec.hostname=x")
        assert unsupported.value.status == 400
    run(kube, body)
    assert [p["metadata"]["name"] for p in kube.list("pods", "default")] == ["a", "b"]


# -- watches ---------------------------------------------------------------------------


def test_watch_from_a_list_sees_later_changes_in_order(kube: FakeKube) -> None:
    kube.create("pods", pod("old", node="n1"))

    def changes() -> None:
        kube.create("pods", pod("elsewhere", node="n2"))
        kube.create("pods", pod("a", node="n1"))
        kube.patch("pods", "default", "a", {"metadata": {"annotations": {"x": "1"}}})
        kube.delete("pods", "default", "a")

    async def body(api: client.ApiClient) -> list[tuple[str, str, str]]:
        v1 = core(api)
        listed = await v1.list_namespaced_pod("default", field_selector="spec.nodeName=n1")
        await in_thread(changes)
        async with watch.Watch() as w:
            return await collect(w.stream(
                v1.list_namespaced_pod, "default", field_selector="spec.nodeName=n1",
                resource_version=listed.metadata.resource_version, timeout_seconds=5), 3)
    seen = run(kube, body)
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert [int(rv) for *_, rv in seen] == sorted(int(rv) for *_, rv in seen)
    assert seen[-1][2] == kube.resource_version  # a deletion takes a resourceVersion too


def test_watch_without_a_resource_version_starts_with_the_current_state(
        kube: FakeKube) -> None:
    kube.create("nodes", node("n1"))
    kube.create("network-attachment-definitions", nad("net1", "ns1"))
    kube.create("network-attachment-definitions", nad("net2", "ns2"))

    async def body(api: client.ApiClient) -> list[tuple[str, str, str]]:
        custom = custom_objects(api)
        async with watch.Watch() as w:  # NADs cluster-wide
            return await collect(w.stream(custom.list_cluster_custom_object, *NAD,
                                          timeout_seconds=5), 3,
                                 lambda: kube.create("network-attachment-definitions",
                                                     nad("net3", "ns1")))
    seen = run(kube, body)
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "net1"), ("ADDED", "net2"),
                                            ("ADDED", "net3")]


def test_objects_moving_out_of_a_selector_are_deleted_from_the_watch(kube: FakeKube) -> None:
    kube.create("pods", pod("a", labels={"net": "yes"}))

    def relabel() -> None:
        kube.patch("pods", "default", "a", {"metadata": {"labels": {"net": "no"}}})
        kube.patch("pods", "default", "a", {"metadata": {"labels": {"net": "yes"}}})

    async def body(api: client.ApiClient) -> list[tuple[str, str, str]]:
        v1 = core(api)
        async with watch.Watch() as w:
            return await collect(w.stream(v1.list_namespaced_pod, "default",
                                          label_selector="net=yes", timeout_seconds=5),
                                 3, relabel)
    assert [t for t, _, _ in run(kube, body)] == ["ADDED", "DELETED", "ADDED"]


def test_nodes_watch_their_own_pods_side_by_side(kube: FakeKube) -> None:
    def schedule() -> None:
        kube.wait_watches(2, "pods")
        for i in range(6):
            kube.create("pods", pod(f"p{i}", f"ns{i % 3}", node=f"n{i % 2}"))

    async def body(api: client.ApiClient) -> list[list[str]]:
        async def node_watch(name: str) -> list[str]:
            async with watch.Watch() as w:
                seen = await collect(w.stream(
                    core(api).list_pod_for_all_namespaces, timeout_seconds=5,
                    field_selector=f"spec.nodeName={name}", resource_version=rv), 3)
            return [n for _, n, _ in seen]
        rv = kube.resource_version
        scheduled = asyncio.ensure_future(in_thread(schedule))
        found = await asyncio.gather(node_watch("n0"), node_watch("n1"))
        await scheduled
        return list(found)
    assert run(kube, body) == [["p0", "p2", "p4"], ["p1", "p3", "p5"]]
    assert kube.count("watch", "pods") == 2


def test_bookmarks_arrive_when_allowed(kube: FakeKube) -> None:
    rv = kube.resource_version
    kube.create("pods", pod("a"))

    async def body(api: client.ApiClient) -> None:
        v1 = core(api)

        def change_then_bookmark() -> None:
            kube.create("pods", pod("elsewhere", "other"))
            assert kube.send_bookmarks() == 1

        async with watch.Watch() as w:
            stream = w.stream(v1.list_namespaced_pod, "default", resource_version=rv,
                              allow_watch_bookmarks=True, timeout_seconds=5)
            first = await stream.__anext__()
            assert first["type"] == "ADDED"
            await in_thread(change_then_bookmark)
            bookmark = await stream.__anext__()
            assert bookmark["type"] == "BOOKMARK"
            assert bookmark["raw_object"]["metadata"]["resourceVersion"] == kube.resource_version
            assert w.resource_version == kube.resource_version  # the client resumes from it
        async with watch.Watch() as w:  # not asked for: none sent
            stream = w.stream(v1.list_namespaced_pod, "default", resource_version=rv,
                              timeout_seconds=5)
            await stream.__anext__()
            assert kube.watches("pods") == 1 and kube.send_bookmarks() == 0
    run(kube, body)

    with FakeKube(bookmark_interval=0.05) as ticking:  # and periodically, as the server does
        async def periodic(api: client.ApiClient) -> str:
            async with watch.Watch() as w:
                async for event in w.stream(core(api).list_node,
                                            allow_watch_bookmarks=True, timeout_seconds=5):
                    return str(event["type"])
            return ""
        assert run(ticking, periodic) == "BOOKMARK"


def test_resume_from_a_compacted_resource_version_is_410(kube: FakeKube) -> None:
    kube.create("pods", pod("a"))
    rv = kube.resource_version
    kube.create("pods", pod("b"))
    kube.compact()

    async def raw(api: client.ApiClient) -> tuple[int, list[dict[str, Any]]]:
        # as the real server: 200, then one ERROR event carrying a 410 Status
        async with aiohttp.ClientSession() as http, http.get(
                f"{kube.url}/api/v1/namespaces/default/pods",
                params={"watch": "1", "resourceVersion": rv}) as resp:
            return resp.status, [json.loads(line) for line in (await resp.read()).splitlines()]
    status, events = run(kube, raw)
    assert status == 200 and [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"

    async def client_sees(api: client.ApiClient, **kw: Any) -> int:
        async with watch.Watch() as w:
            with pytest.raises(ApiException) as gone:
                await w.stream(core(api).list_namespaced_pod, "default",
                               resource_version=rv, **kw).__anext__()
        return gone.value.status
    kube.reset_counts()
    assert run(kube, lambda api: client_sees(api, timeout_seconds=5)) == 410
    assert kube.count("watch", "pods") == 1
    # without timeout_seconds the client's Watch retries a 410 once, from the same rv
    assert run(kube, client_sees) == 410
    assert kube.count("watch", "pods") == 3


def test_dropped_watches_resume_without_loss(kube: FakeKube) -> None:
    kube.create("pods", pod("a"))
    rv = kube.resource_version

    def drop_and_add(name: str, abort: bool = False) -> Callable[[], None]:
        def act() -> None:
            kube.wait_watches(1)  # the previous stream's end has reached the server
            assert kube.drop_watches(abort=abort) == 1
            kube.create("pods", pod(name))
        return act

    async def forever(api: client.ApiClient) -> list[tuple[str, str, str]]:
        # without timeout_seconds, the client's Watch reconnects from its last rv itself
        v1 = core(api)
        async with watch.Watch() as w:
            return await collect(w.stream(v1.list_namespaced_pod, "default",
                                          resource_version="1"), 2, drop_and_add("b"))
    kube.reset_counts()
    assert [n for _, n, _ in run(kube, forever)] == ["a", "b"]
    assert kube.count("watch", "pods") == 2

    async def bounded(api: client.ApiClient) -> list[str]:
        # with timeout_seconds, a dropped stream ends the iteration; resume by hand
        v1 = core(api)
        async with watch.Watch() as w:
            seen = await collect(w.stream(v1.list_namespaced_pod, "default",
                                          resource_version=rv, timeout_seconds=5),
                                 99, drop_and_add("c"))
            last = w.resource_version
        async with watch.Watch() as w:
            seen += await collect(w.stream(v1.list_namespaced_pod, "default",
                                           resource_version=last, timeout_seconds=5), 1)
        return [n for _, n, _ in seen]
    assert run(kube, bounded) == ["b", "c"]

    async def cut(api: client.ApiClient) -> list[str]:
        # a connection cut mid-stream surfaces as aiohttp's ClientPayloadError
        v1 = core(api)
        seen: list[tuple[str, str, str]] = []
        async with watch.Watch() as w:
            with pytest.raises(aiohttp.ClientPayloadError):
                await collect(w.stream(v1.list_namespaced_pod, "default", resource_version=rv),
                              99, drop_and_add("d", True), seen)
            last = w.resource_version
        assert last == seen[-1][2]
        async with watch.Watch() as w:
            await collect(w.stream(v1.list_namespaced_pod, "default", resource_version=last,
                                   timeout_seconds=5), 3 - len(seen), None, seen)
        return [n for _, n, _ in seen]
    assert run(kube, cut) == ["b", "c", "d"]


def test_outage_then_back_on_the_same_port_and_a_new_etcd(kube: FakeKube) -> None:
    start = kube.resource_version
    kube.create("pods", pod("a"))
    port, rv = kube.port, kube.resource_version

    async def outage(api: client.ApiClient) -> list[str]:
        v1 = core(api)
        async with watch.Watch() as w:
            with pytest.raises(aiohttp.ClientError):
                await collect(w.stream(v1.list_namespaced_pod, "default",
                                       resource_version=start), 99, kube.stop)
        started = time.monotonic()
        with pytest.raises(aiohttp.ClientConnectorError):
            await v1.list_namespaced_pod("default")
        assert time.monotonic() - started < 1  # refused, not hanging
        await in_thread(lambda: kube.create("pods", pod("during")))  # the cluster lives on
        await in_thread(kube.start)
        async with watch.Watch() as w:  # resume from before the outage: nothing lost
            seen = await collect(w.stream(v1.list_namespaced_pod, "default",
                                          resource_version=rv, timeout_seconds=5), 1)
        return [n for _, n, _ in seen]
    assert run(kube, outage) == ["during"]
    assert kube.port == port

    before = kube.get("pods", "default", "a")
    kube.restart(new_history=True)
    after = kube.get("pods", "default", "a")
    assert before is not None and after is not None and before["metadata"]["uid"] == after[
        "metadata"]["uid"] and before["metadata"]["resourceVersion"] != after["metadata"][
        "resourceVersion"]

    async def old_rv(api: client.ApiClient) -> int:
        async with watch.Watch() as w:
            with pytest.raises(ApiException) as gone:
                await w.stream(core(api).list_namespaced_pod, "default",
                               resource_version=rv, timeout_seconds=5).__anext__()
        return gone.value.status
    assert run(kube, old_rv) == 410


# -- counts, latency, credentials, processes ---------------------------------------------


def test_held_watches_send_their_changes_in_order_after_the_block(kube: FakeKube) -> None:
    async def body(api: client.ApiClient) -> tuple[list[tuple[str, str, str]], int, str]:
        v1 = core(api)
        listed = await v1.list_namespaced_pod("default")
        seen: list[tuple[str, str, str]] = []
        async with watch.Watch() as w:
            stream = w.stream(v1.list_namespaced_pod, "default", timeout_seconds=10,
                              resource_version=listed.metadata.resource_version)
            await in_thread(lambda: kube.create("pods", pod("a")))
            await collect(stream, 1, seen=seen)  # the stream is open
            with kube.watches_held():
                await in_thread(lambda: kube.create("pods", pod("b")))
                await in_thread(lambda: kube.create("pods", pod("c")))
                got = await v1.read_namespaced_pod("c", "default")  # requests go on
                later = asyncio.ensure_future(collect(stream, 2, seen=seen))
                await asyncio.wait({later}, timeout=0.3)
                sent_within = len(seen) - 1
            await later
        return seen, sent_within, got.metadata.resource_version
    seen, sent_within, rv = run(kube, body)
    assert sent_within == 0
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert seen[-1][2] == rv == kube.resource_version


def test_watches_held_from_an_event_hold_only_the_streams_that_carry_it(
        kube: FakeKube) -> None:
    """``watches_held(from_event=…)``: a stream sends on until the event the test names,
    then holds it and what follows until the block ends; a stream that does not carry
    that event goes on sending."""
    def from_b(kind: str, obj: dict[str, Any]) -> bool:
        return kind == "ADDED" and obj["metadata"]["name"] == "b"

    async def body(api: client.ApiClient) -> tuple[list[tuple[str, str, str]],
                                                   list[tuple[str, str, str]], int]:
        v1 = core(api)
        listed = await v1.list_namespaced_pod("default")
        every: list[tuple[str, str, str]] = []
        other: list[tuple[str, str, str]] = []
        async with watch.Watch() as w1, watch.Watch() as w2:
            all_pods = w1.stream(v1.list_namespaced_pod, "default", timeout_seconds=10,
                                 resource_version=listed.metadata.resource_version)
            labelled = w2.stream(v1.list_namespaced_pod, "default", timeout_seconds=10,
                                 label_selector="app=other",
                                 resource_version=listed.metadata.resource_version)
            await in_thread(lambda: kube.create("pods", pod("a", labels={"app": "other"})))
            await collect(all_pods, 1, seen=every)
            await collect(labelled, 1, seen=other)  # both streams are open
            with kube.watches_held(from_event=from_b):
                await in_thread(lambda: kube.create("pods", pod("b")))
                await in_thread(lambda: kube.create("pods", pod("c", labels={"app": "other"})))
                await collect(labelled, 1, seen=other)  # the other stream goes on: c
                await v1.read_namespaced_pod("b", "default")  # requests go on
                later = asyncio.ensure_future(collect(all_pods, 2, seen=every))
                await asyncio.wait({later}, timeout=0.3)
                sent_within = len(every) - 1
            await later
        return every, other, sent_within
    every, other, sent_within = run(kube, body)
    assert sent_within == 0
    assert [(t, n) for t, n, _ in every] == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert [(t, n) for t, n, _ in other] == [("ADDED", "a"), ("ADDED", "c")]


def test_request_counts_per_verb_and_resource(kube: FakeKube) -> None:
    async def body(api: client.ApiClient) -> None:
        v1 = core(api)
        await v1.create_namespaced_pod("default", pod("a"))
        await v1.read_namespaced_pod("a", "default")
        await v1.list_namespaced_pod("default")
        await v1.list_pod_for_all_namespaces()
        await v1.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"a": "b"}}})
        await v1.patch_namespaced_pod_status("a", "default", {"status": {"phase": "Running"}})
        await v1.create_namespaced_event("default", {
            "metadata": {"name": "a.1"}, "involvedObject": {"kind": "Pod", "name": "a"},
            "reason": "NetworkNotFound", "message": "no such NAD", "type": "Warning"})
        await v1.delete_namespaced_pod("a", "default")
        await v1.delete_collection_namespaced_event("default", field_selector="reason=Other")
        async with watch.Watch() as w:
            async for _ in w.stream(v1.list_namespaced_pod, "default", timeout_seconds=0.1):
                pass
    run(kube, body)
    assert kube.request_counts == {
        ("create", "pods"): 1, ("get", "pods"): 1, ("list", "pods"): 2, ("patch", "pods"): 1,
        ("patch", "pods/status"): 1, ("create", "events"): 1, ("delete", "pods"): 1,
        ("deletecollection", "events"): 1, ("watch", "pods"): 1}
    assert kube.list("events", "default", field_selector="reason=NetworkNotFound")
    kube.reset_counts()
    assert kube.count("get", "pods") == 0 and not kube.request_counts


def test_latency_is_added_to_every_request(kube: FakeKube) -> None:
    kube.latency_ms = 200

    async def body(api: client.ApiClient) -> float:
        v1 = core(api)
        started = time.monotonic()
        await asyncio.gather(*(v1.list_node() for _ in range(4)))
        return time.monotonic() - started
    elapsed = run(kube, body)
    assert 0.2 <= elapsed < 0.7  # side by side, as on a network (one after another: 0.8)


def test_kubeconfig_token_and_401(tmp_path: Path) -> None:
    with FakeKube(token="s3cret") as kube:
        kube.create("pods", pod("a", node="n1"))
        kube.create("pods", pod("b", node="n2"))
        path = kube.kubeconfig(tmp_path / "kubeconfig")

        async def with_kubeconfig() -> list[str]:
            cfg = client.Configuration()
            await config.load_kube_config(config_file=str(path), client_configuration=cfg)
            async with client.ApiClient(cfg) as api:
                found = await core(api).list_pod_for_all_namespaces()
            return [p.metadata.name for p in found.items]
        assert asyncio.run(with_kubeconfig()) == ["a", "b"]
        (tmp_path / "token").write_text("s3cret")
        path = kube.kubeconfig(tmp_path / "kubeconfig", token_file=tmp_path / "token")
        assert asyncio.run(with_kubeconfig()) == ["a", "b"]

        async def anonymous(api: client.ApiClient) -> None:
            with pytest.raises(ApiException) as refused:
                await core(api).list_node()
            assert (refused.value.status, status_of(refused.value)["reason"]) == (
                401, "Unauthorized")
            version = await client.VersionApi(api).get_code()  # public, as on a real server
            assert version.major == "1"
        run(kube, anonymous)
        kube.token = "rotated"  # a rotated token: the old one is refused
        run(kube, anonymous, token="s3cret")
        assert kube.count("list", "nodes") == 2

        # another process, as a daemon on node n2 would: its own client, over TCP
        kube.token = "s3cret"
        script = (
            "import asyncio, sys\n"
            "from kubernetes_asyncio import client, config\n"
            "async def main():\n"
            "    cfg = client.Configuration()\n"
            "    await config.load_kube_config(config_file=sys.argv[1], "
            "client_configuration=cfg)\n"
            "    async with client.ApiClient(cfg) as api:\n"
            "        pods = await client.CoreV1Api(api).list_pod_for_all_namespaces("
            "field_selector='spec.nodeName=n2')\n"
            "    print(*[p.metadata.name for p in pods.items])\n"
            "asyncio.run(main())\n")
        out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                             text=True, timeout=60, check=True, cwd=REPO)
        assert out.stdout.split() == ["b"]


def test_discovery(kube: FakeKube) -> None:
    async def body(api: client.ApiClient) -> None:
        groups = await client.ApisApi(api).get_api_versions()
        assert {g.name for g in groups.groups} == {"coordination.k8s.io", "k8s.cni.cncf.io",
                                                   "ipam.netctl.dev", "resource.k8s.io"}
        leases = await custom_objects(api).get_api_resources("coordination.k8s.io", "v1")
        assert (leases.resources[0].name, leases.resources[0].namespaced) == ("leases", True)
        v1 = await core(api).get_api_resources()
        assert {"pods", "pods/status", "events", "nodes"} <= {r.name for r in v1.resources}
        blocks = await custom_objects(api).get_api_resources("ipam.netctl.dev", "v1")
        assert (blocks.resources[0].name, blocks.resources[0].namespaced) == ("ipamblocks", False)
    run(kube, body)


# -- the pure parts ----------------------------------------------------------------------


def _obj(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": labels or {}},
            "spec": spec}


@pytest.mark.parametrize(("selector", "matches"), [
    ("", True), ("a=1", True), ("a==1", True), ("a!=1", False), ("missing!=1", True),
    ("a in (1, 2)", True), ("a notin (1,2)", False), ("missing notin (1)", True),
    ("a", True), ("!a", False), ("!missing", True), ("a=1,b=x", True), ("a=1,b=y", False),
    ("n>3", True), ("n<3", False), ("example.com/k=v", True),
])
def test_label_selectors(selector: str, matches: bool) -> None:
    obj = _obj({"a": "1", "b": "x", "n": "5", "example.com/k": "v"})
    assert selectors.parse(selector, None, PODS.fields).matches(obj) is matches


@pytest.mark.parametrize("selector", ["a in 1", "!a=1", "a=(", "=x", "a b"])
def test_malformed_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as refused:
        selectors.parse(selector, None, PODS.fields)
    assert refused.value.code == 400


def test_field_selectors() -> None:
    obj = _obj(nodeName="n1", hostNetwork=True)
    assert selectors.parse(None, "spec.nodeName=n1", PODS.fields).matches(obj)
    assert selectors.parse(None, "spec.hostNetwork=true", PODS.fields).matches(obj)
    assert selectors.parse(None, "status.podIP=", PODS.fields).matches(obj)  # missing: ""
    assert not selectors.parse(None, "spec.nodeName!=n1", PODS.fields).matches(obj)
    escaped = _obj(nodeName="a,b=c")
    assert selectors.parse(None, r"spec.nodeName=a\,b\=c", PODS.fields).matches(escaped)
    for bad in ("spec.nodeName", "spec.containers=x"):
        with pytest.raises(ApiError):
            selectors.parse(None, bad, PODS.fields)


def test_merge_and_json_patch() -> None:
    doc = {"a": {"b": 1, "c": [1, 2]}, "d": "x"}
    assert patching.merge(doc, {"a": {"b": None, "c": [3]}, "e": {"f": 1}}) == {
        "a": {"c": [3]}, "d": "x", "e": {"f": 1}}
    assert doc == {"a": {"b": 1, "c": [1, 2]}, "d": "x"}  # the target is not changed
    assert patching.json_patch(doc, [
        {"op": "add", "path": "/a/c/-", "value": 3},
        {"op": "add", "path": "/a/c/0", "value": 0},
        {"op": "remove", "path": "/a/c/1"},
        {"op": "move", "from": "/d", "path": "/g"},
        {"op": "copy", "from": "/a/b", "path": "/h"},
        {"op": "replace", "path": "/a/b", "value": 2},
        {"op": "test", "path": "/a/c", "value": [0, 2, 3]},
    ]) == {"a": {"b": 2, "c": [0, 2, 3]}, "g": "x", "h": 1}
    for ops, code in [({"op": "add"}, 400), ([{"op": "replace", "path": "/zz", "value": 1}], 422),
                      ([{"op": "remove", "path": "/a/c/5"}], 422),
                      ([{"op": "test", "path": "/d", "value": "y"}], 422),
                      ([{"op": "frobnicate", "path": "/d"}], 400)]:
        with pytest.raises(ApiError) as refused:
            patching.json_patch(doc, ops)
        assert refused.value.code == code
