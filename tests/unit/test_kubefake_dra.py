"""We test that the fake API server refuses DRA writes as the real v1.36 server does
(``netctl/kit/kubefake/dra.py``), over real HTTP, in these aspects:

- a claim's ``status.devices`` entry for a device its allocation does not hold: 422 "must be
  an allocated device in the claim" (finding 4: the fake took it), the message in the real
  server's shape (``ResourceClaim.resource.k8s.io "…" is invalid: …``); networkData
  addresses not in canonical CIDR form; a condition without a reason;
- a pod's ``status.resourceClaimStatuses`` entry that names no ``spec.resourceClaims``
  entry (finding 4), and one for an entry that names its claim directly (a state no real
  cluster produces); a spec entry naming neither a claim nor a template; a malformed
  ``extendedResourceClaimStatus``; what a real cluster writes is taken;
- the synthetic authorization of ``status.devices`` (finding 1): a ServiceAccount token
  bound to a pod of the claim's node needs ``associated-node:patch`` (or
  ``arbitrary-node:patch``) on ``resourceclaims/driver``, another token
  ``arbitrary-node:patch``; refused, a 422 Forbidden cause naming the verbs as the real
  server does; granted per driver (resourceNames); the admin always; a write that leaves
  ``status.devices`` as it is needs nothing.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from netctl_kit.kubefake import ApiError, FakeKube, claim_allocation, pod, resource_claim
from netctl_kit.kubefake.objects import (
    claim_ref,
    extended_claim_status,
    template_claim_status,
)

NODE, DRIVER = "node-a", "net.example.com"
SA = "system:serviceaccount:kube-system:netctl"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        yield k


def allocated_claim(kube: FakeKube, name: str = "c1", devices: tuple[str, ...] = ("vf0",),
                    node: str | None = NODE) -> None:
    kube.create("resourceclaims", resource_claim(name, "default", "vf"))
    kube.patch("resourceclaims", "default", name, {
        "status": claim_allocation(DRIVER, NODE, list(devices), node=node)},
        subresource="status")


def entry(device: str = "vf0", driver: str = DRIVER, **more: Any) -> dict[str, Any]:
    return {"driver": driver, "pool": NODE, "device": device, **more}


def invalid(call: Any) -> str:
    with pytest.raises(ApiError) as refused:
        call()
    assert refused.value.code == 422 and refused.value.reason == "Invalid"
    return refused.value.message


def patch_status(kube: FakeKube, token: str, name: str, status: dict[str, Any]
                 ) -> tuple[int, dict[str, Any]]:
    """A merge patch of the claim's status over HTTP with ``token``: status, body."""
    req = urllib.request.Request(
        f"{kube.url}{CLAIMS}/{name}/status", method="PATCH",
        data=json.dumps({"status": status}).encode(),
        headers={"Authorization": f"Bearer {token}",
                 "Content-Type": "application/merge-patch+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_device_status_for_a_device_not_allocated_is_refused(kube: FakeKube) -> None:
    allocated_claim(kube)
    msg = invalid(lambda: kube.patch("resourceclaims", "default", "c1", {"status": {
        "devices": [entry("gpu0", "gpu.example.com")]}}, subresource="status"))
    assert msg == ('ResourceClaim.resource.k8s.io "c1" is invalid: status.devices[0]: Invalid '
                   'value: {"Driver":"gpu.example.com","Pool":"node-a","Device":"gpu0",'
                   '"ShareID":""}: must be an allocated device in the claim')
    msg = invalid(lambda: kube.patch("resourceclaims", "default", "c1", {"status": {
        "devices": [entry(networkData={"interfaceName": "net1", "ips": ["10.1.0.5"]},
                          conditions=[{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2026-12-06T00:00:00Z"}])]}},
        subresource="status"))
    assert 'networkData.ips[0]: Invalid value: "10.1.0.5": must be a valid address in CIDR' \
        in msg and "conditions[0].reason: Required value" in msg
    # not allocated at all: no device status
    kube.create("resourceclaims", resource_claim("c2", "default", "vf"))
    assert "must be an allocated device" in invalid(lambda: kube.patch(
        "resourceclaims", "default", "c2", {"status": {"devices": [entry()]}},
        subresource="status"))
    written = kube.patch("resourceclaims", "default", "c1", {"status": {"devices": [entry(
        networkData={"interfaceName": "net1", "ips": ["10.1.0.5/24", "fd00::5/64"]})]}},
        subresource="status")
    assert written["status"]["devices"][0]["networkData"]["interfaceName"] == "net1"


def test_pod_claim_statuses_a_real_cluster_never_writes_are_refused(kube: FakeKube) -> None:
    kube.create("pods", pod("p0", node=NODE))
    msg = invalid(lambda: kube.patch("pods", "default", "p0", {
        "status": template_claim_status("net", "c1")}, subresource="status"))
    assert msg == ('Pod "p0" is invalid: status.resourceClaimStatuses[0].name: Invalid value: '
                   '"net": must match the name of an entry in `spec.resourceClaims`')
    kube.create("pods", pod("p1", node=NODE, resource_claims=[
        claim_ref("direct", claim="c1"), claim_ref("made", template="t1")]))
    assert "no controller writes a status for a claim the pod names directly" in invalid(
        lambda: kube.patch("pods", "default", "p1", {
            "status": template_claim_status("direct", "c1")}, subresource="status"))
    done = kube.patch("pods", "default", "p1", {"status": template_claim_status(
        "made", "p1-made-x7k2p")}, subresource="status")
    assert done["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == "p1-made-x7k2p"
    assert "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`" in invalid(
        lambda: kube.create("pods", pod("p2", resource_claims=[{"name": "x"}])))


def test_an_extended_resource_claim_status_must_map_a_requested_resource(
        kube: FakeKube) -> None:
    kube.create("pods", pod("p1", node=NODE, requests={"netctl.test/vf": "1"}))
    msg = invalid(lambda: kube.patch("pods", "default", "p1", {
        "status": extended_claim_status("p1-extended", "netctl.test/other", "r0")},
        subresource="status"))
    assert "requestMappings[0].resourceName: Invalid value: \"netctl.test/other\"" in msg
    done = kube.patch("pods", "default", "p1", {"status": extended_claim_status(
        "p1-extended", "netctl.test/vf", "container-0-request-0")}, subresource="status")
    assert done["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == "p1-extended"


def test_device_status_needs_the_driver_permission_of_the_requesters_node(
        kube: FakeKube) -> None:
    allocated_claim(kube, "c1")
    allocated_claim(kube, "elsewhere", node="node-b")
    kube.add_token("on-a", SA, node=NODE)
    kube.add_token("controller", "system:serviceaccount:kube-system:ctl")
    status = {"devices": [entry(networkData={"interfaceName": "net1"})]}

    code, body = patch_status(kube, "on-a", "c1", status)
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'ResourceClaim.resource.k8s.io "c1" is invalid: status.devices: Forbidden: changing '
        'status.devices requires resource="resourceclaims/driver", '
        'verb="[associated-node:patch arbitrary-node:patch]" permission: '
        f'resourceclaims.resource.k8s.io "{DRIVER}" is forbidden: User "{SA}" cannot '
        'associated-node:patch resource "resourceclaims/driver" in API group '
        '"resource.k8s.io" in the namespace "default"')
    # a token not bound to a pod of the claim's node is only asked for arbitrary-node
    code, body = patch_status(kube, "controller", "c1", status)
    assert code == 422 and 'verb="[arbitrary-node:patch]"' in body["message"]

    kube.grant(SA, "associated-node:patch", "resourceclaims/driver",
               api_group="resource.k8s.io")
    code, body = patch_status(kube, "on-a", "c1", status)
    assert code == 200, body
    assert body["status"]["devices"][0]["networkData"] == {"interfaceName": "net1"}
    # … on its own node's claims only
    code, body = patch_status(kube, "on-a", "elsewhere", status)
    assert code == 422 and 'verb="[arbitrary-node:patch]"' in body["message"]
    # a write that leaves status.devices as it is needs no permission
    code, _ = patch_status(kube, "controller", "c1", status)
    assert code == 200
    # granted per driver: resourceNames are driver names
    kube.grant("system:serviceaccount:kube-system:ctl", "arbitrary-node:patch",
               "resourceclaims/driver", api_group="resource.k8s.io", names=["other.example"])
    code, _ = patch_status(kube, "controller", "elsewhere", status)
    assert code == 422
    kube.grant("system:serviceaccount:kube-system:ctl", "arbitrary-node:patch",
               "resourceclaims/driver", api_group="resource.k8s.io", names=[DRIVER])
    code, _ = patch_status(kube, "controller", "elsewhere", status)
    assert code == 200
    # the cluster's admin (the fake's own token, or none) may
    code, _ = patch_status(kube, "", "c1", {"devices": []})
    assert code == 200
