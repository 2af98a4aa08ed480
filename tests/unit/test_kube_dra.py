"""We test :class:`netctl.kubeapi.dra.ClaimDevices` against the fake API server through
the real client, as the daemon's ServiceAccount (a token bound to a pod of the node):

- a claim's networkData written once; a second report with nothing new makes no write (the
  Ready condition's transition time kept, finding 3);
- the write refused (v1.36's ``resourceclaims/driver`` check, finding 1): the warning says
  why, a Warning Event ``NetworkDataNotWritten`` on the pod names the missing grant, the
  metric ``netctl_dra_network_data_writes_failed_total`` counts it;
- every call it made is one the ClusterRole grants (access.RULES).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import trio
import trio_asyncio
from netctl_kit.kubefake import FakeKube, claim_allocation, pod, resource_claim, resource_slice
from netctl_kit.kubefake.objects import claim_ref

from netctl.cni.config import parse_chain
from netctl.cni.request import Pod as PodRef
from netctl.journal.records import Attachment
from netctl.kubeapi.api import Api, KubeSettings
from netctl.kubeapi.dra import ClaimDevices
from netctl.kubeapi.objects import Pod
from netctl.metrics import Metrics
from tests import access

NODE, DRIVER, RES = "node-a", "net.example.com", "example.com/vf"
SA, TOKEN = "system:serviceaccount:kube-system:netctl", "daemonset-token"
T = TypeVar("T")


def cluster(kube: FakeKube, *, driver_grant: bool) -> Pod:
    kube.create("resourceslices", resource_slice("s", NODE, DRIVER, {"vf0": {
        "k8s.cni.cncf.io/resourceName": RES, "k8s.cni.cncf.io/deviceID": "0000:3b:02.0"}}))
    kube.create("resourceclaims", resource_claim("vf", "default", "vf"))
    kube.patch("resourceclaims", "default", "vf", {"status": claim_allocation(
        DRIVER, NODE, ["vf0"], node=NODE)}, subresource="status")
    made = kube.create("pods", pod("p", node=NODE, resource_claims=[claim_ref("net", claim="vf")]))
    kube.add_token(TOKEN, SA, node=NODE)
    for rule in access.RULES:
        if rule.resource != "resourceclaims/driver" or driver_grant:
            for verb in rule.verbs:
                kube.grant(SA, verb, rule.resource, api_group=rule.api_group)
    return msgspec.convert(made, Pod)


def attached() -> Attachment:
    chain = parse_chain({"cniVersion": "1.0.0", "name": "vf", "plugins": [{"type": "x"}]}, "t")
    return Attachment(container_id="c1", ifname="net1", network="default/vf", chain=chain,
                      pod=PodRef(namespace="default", name="p", uid="u"), resource=RES,
                      device="0000:3b:02.0",
                      result={"interfaces": [{"name": "net1", "sandbox": "/ns",
                                              "mac": "02:00:00:00:00:01"}],
                              "ips": [{"address": "10.1.0.5/24", "interface": 0}]})


def run(kube: FakeKube, tmp_path: Path, fn: Callable[[ClaimDevices], Awaitable[T]],
        on_failure: Callable[[], None] | None = None) -> T:
    """``fn(claims)`` on trio with the claims' slices watch running, through the real
    client as the daemon's ServiceAccount; every call checked against access.RULES."""
    config = kube.kubeconfig(tmp_path / "kubeconfig", token=TOKEN)
    out: list[T] = []

    async def main() -> None:
        async with trio_asyncio.open_loop():
            api = await Api.connect(KubeSettings(kubeconfig=str(config), api_timeout=5))
            try:
                claims = ClaimDevices(api, NODE, 5, on_failure=on_failure)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(claims.run)
                    out.append(await fn(claims))
                    nursery.cancel_scope.cancel()
                groups = {r.resource: r.api_group for r in access.RULES}
                for verb, resource in api.calls:  # counted without the subresource
                    assert any(access.allowed(groups.get(resource, "?"), r, verb)
                               for r in (resource, f"{resource}/status")), (verb, resource)
            finally:
                await api.close()
    trio.run(main)
    return out[0]


def test_network_data_is_written_once_and_not_again_when_nothing_changes(
        tmp_path: Path) -> None:
    with FakeKube() as kube:
        p = cluster(kube, driver_grant=True)

        async def twice(claims: ClaimDevices) -> tuple[str, str, Any]:
            first = await claims.report(p, [attached()])
            before = kube.get("resourceclaims", "default", "vf")
            second = await claims.report(p, [attached()])
            return first, second, before
        first, second, before = run(kube, tmp_path, twice)
        assert (first, second) == ("", "")
        after = kube.get("resourceclaims", "default", "vf")
        assert after == before  # the second report wrote nothing
        (entry,) = after["status"]["devices"]
        assert entry["networkData"] == {"interfaceName": "net1", "ips": ["10.1.0.5/24"],
                                        "hardwareAddress": "02:00:00:00:00:01"}
        assert kube.count("patch", "resourceclaims/status") == 1
        assert not kube.list("events", "default")


def test_a_refused_write_is_a_warning_an_event_and_a_metric(tmp_path: Path) -> None:
    metrics = Metrics()
    with FakeKube() as kube:
        p = cluster(kube, driver_grant=False)
        warning = run(kube, tmp_path, lambda claims: claims.report(p, [attached()]),
                      metrics.network_data_write_failed)
        assert warning.startswith("ResourceClaim default/vf: ")
        assert 'requires resource="resourceclaims/driver"' in warning
        (event,) = kube.list("events", "default")
        assert (event["type"], event["reason"]) == ("Warning", "NetworkDataNotWritten")
        assert event["involvedObject"]["name"] == "p"
        assert "associated-node:patch on resourceclaims/driver" in event["message"]
        assert "devices" not in kube.get("resourceclaims", "default", "vf")["status"]
    assert b"netctl_dra_network_data_writes_failed_total 1.0" in metrics.render()
