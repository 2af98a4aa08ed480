"""We test the pure decisions of Kubernetes mode's network-status retries and node check
(issue 16): what a patch's answer means, the back-off, a pod of another node refused
naming both nodes, and the not-ready reason of a missing Node."""

from __future__ import annotations

import pytest

from netctl.engine.readiness import daemon_reasons
from netctl.errors import INVALID_CONFIG, Refusal
from netctl.kubeapi.api import ApiError
from netctl.kubeapi.netstatus import patch_body
from netctl.kubeapi.objects import Meta, Pod, PodSpec
from netctl.kubeapi.pods import check_node
from netctl.kubeapi.statuswrites import outcome_of, retry_delay


def test_a_patch_answer_decides_the_retry() -> None:
    assert outcome_of(None) == "written"
    assert outcome_of(ApiError(404, "not found")) == "gone"
    assert outcome_of(ApiError(409, "Precondition failed: UID in precondition")) == "replaced"
    for status in (0, 403, 429, 500, 503):
        assert outcome_of(ApiError(status, "x")) == "failed"


def test_the_back_off_doubles_to_its_cap() -> None:
    assert [retry_delay(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert retry_delay(10_000) == 60


def test_the_patch_carries_the_uid_as_a_precondition() -> None:
    assert patch_body("[]", "u-1") == (b'{"metadata":{"uid":"u-1","annotations":'
                                       b'{"k8s.v1.cni.cncf.io/network-status":"[]"}}}')
    assert b"uid" not in patch_body("[]")


def test_a_pod_of_another_node_is_refused_naming_both() -> None:
    def pod(node: str) -> Pod:
        return Pod(metadata=Meta(name="web-1", namespace="shop"), spec=PodSpec(nodeName=node))

    check_node(pod("n1"), "n1")
    check_node(pod(""), "n1")  # not bound yet: not this check's to refuse
    with pytest.raises(Refusal) as caught:
        check_node(pod("n1.example.com"), "n1")
    exc = caught.value
    assert exc.code == INVALID_CONFIG and exc.reason == "PodOfAnotherNode"
    assert exc.named  # the message names the pod: not prefixed again
    assert "'n1.example.com'" in exc.msg and "'n1'" in exc.msg and "shop/web-1" in exc.msg


def test_a_missing_node_is_a_reason_not_to_be_ready() -> None:
    assert daemon_reasons(journal_writable=True, node="n1", node_exists=True) == []
    assert daemon_reasons(journal_writable=True) == []  # standalone: no node
    (unread,) = daemon_reasons(journal_writable=True, node="n1", node_exists=None)
    assert "'n1'" in unread and "not been read" in unread
    (missing,) = daemon_reasons(journal_writable=True, node="n1", node_exists=False)
    assert "no Node named 'n1'" in missing and "--node-name" in missing


def test_why_the_api_server_was_not_reached_comes_first_while_a_cache_waits() -> None:
    why = "API server https://10.0.0.1:6443 not reachable: connecting to 10.0.0.1:6443: " \
          "ECONNREFUSED (Connection refused)"
    reasons = daemon_reasons(journal_writable=True, node="n1", node_exists=None,
                             pods_synced=False, nads_synced=False, unreachable=why)
    assert reasons[0] == why and len(reasons) == 4
    # once everything is listed, a passing failure is no reason not to be ready
    assert daemon_reasons(journal_writable=True, node="n1", node_exists=True,
                          pods_synced=True, nads_synced=True, unreachable=why) == []
