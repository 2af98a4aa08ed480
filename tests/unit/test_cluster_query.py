"""We test the pure parts of the cluster-wide queries (``kubectl netctl``): the merge of the
nodes' answers (rows named by node, time order, flags and notes, the nodes that did not
answer), the query string, the daemons found from the DaemonSet's pods, the owner of an
address's block at a time, the endpoint's request parsing and routing, the reviews'
decision, and the fake API server's review semantics."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from netctl_kit.kubefake.reviews import Grant, Reviews

from netctl.commands.journalview import render
from netctl.httpserver import request_of
from netctl.journal.query import Filters
from netctl.kube import clusterquery as cq
from netctl.kube import queryserver as qs
from netctl.kubeapi import review
from netctl.kubeapi.daemons import NodeDaemon, daemons_of, owners_at
from netctl.kubeapi.objects import Block, BlockOwner, BlockSpec


def alloc(pod: str, since: float, until: float | None = None) -> dict[str, Any]:
    return {"pool": "p", "address": "10.0.0.5/24", "container": f"c-{pod}", "pod": pod,
            "ifname": "eth0", "since": since, "until": until}


def doc(**lists: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"attachments": [], "allocations": [], "operations": [],
                            "blocks": [], "older_attachments": False,
                            "older_operations": False, "notes": []}
    return base | lists


def test_merge_names_each_row_by_its_node_in_time_order() -> None:
    answers = [
        cq.Answer("node-b", doc(allocations=[alloc("ns/new", 20.0)],
                                blocks=[{"block": "10.0.0.0/26", "node": "node-b",
                                         "since": 15.0}])),
        cq.Answer("node-a", doc(allocations=[alloc("ns/old", 10.0, 19.0)],
                                older_operations=True, notes=["a note"])),
        cq.Answer("node-c", error="no answer from 10.0.0.3:9470 within 10s"),
        cq.Answer("node-d", status=403, error="bob may not"),
    ]
    merged = cq.merge("journal", answers, notes=["--at: read as UTC"],
                      owners=[{"block": "10.0.0.0/26", "pool": "p", "node": "node-c",
                               "borrowed": False}])
    assert [(a["node"], a["pod"]) for a in merged["allocations"]] == [
        ("node-a", "ns/old"), ("node-b", "ns/new")]
    # a block's row keeps its owner; the node whose journal had it is seen_by
    assert merged["blocks"] == [{"block": "10.0.0.0/26", "node": "node-b", "since": 15.0,
                                 "seen_by": "node-b"}]
    assert merged["nodes"] == ["node-a", "node-b"]
    assert merged["unanswered"] == [
        {"node": "node-c", "status": 0, "error": "no answer from 10.0.0.3:9470 within 10s"},
        {"node": "node-d", "status": 403, "error": "bob may not"}]
    assert merged["older_operations"] and not merged["older_attachments"]
    assert merged["notes"] == ["--at: read as UTC", "node-a: a note"]
    assert merged["block_owners"] == [{"block": "10.0.0.0/26", "pool": "p", "node": "node-c",
                                       "borrowed": False, "answered": False}]
    assert cq.incomplete(merged) == [
        "node node-c did not answer: no answer from 10.0.0.3:9470 within 10s",
        "node node-d refused the query (403): bob may not",
        "node node-c, whose block 10.0.0.0/26 holds the address, did not answer: who held "
        "it may be missing"]
    lines, _ = render(merged)
    assert lines[0].split() == ["NODE", "CONTAINER", "POD", "NETWORK", "IFNAME", "ADDRESSES",
                                "STATE", "SINCE", "UNTIL"]
    assert [line.split()[:1] for line in lines if "ns/" in line] == [["node-a"], ["node-b"]]
    assert any(line.split()[:2] == ["SEEN_BY", "BLOCK"] for line in lines)


def test_merge_of_pools_leaks_and_status() -> None:
    pools = cq.merge("pools", [cq.Answer("n2", {"pools": [{"key": "b"}, {"key": "a"}]}),
                               cq.Answer("n1", {"pools": [{"key": "a"}]})])
    assert [(p["key"], p["node"]) for p in pools["pools"]] == [("a", "n1"), ("a", "n2"),
                                                              ("b", "n2")]
    status = cq.merge("status", [cq.Answer("n2", {"ready": True}), cq.Answer("n1", None,
                                                                              error="gone")])
    assert status["statuses"] == [{"node": "n2", "ready": True}]
    assert [u["node"] for u in status["unanswered"]] == ["n1"]
    leaks = cq.merge("leaks", [])
    assert leaks == {"leaks": [], "nodes": [], "unanswered": []}


def test_the_journal_query_string_carries_every_filter_given() -> None:
    f = Filters(pod="team-a/*", ip="10.0.0.5", at=1764200000.25, running=True, limit=0)
    assert cq.journal_query(f) == "pod=team-a%2F%2A&ip=10.0.0.5&at=1764200000.25&running=1" \
        "&limit=0"
    asked = qs.route(request_of("GET", f"/v1/journal?{cq.journal_query(f)}",
                                {"Authorization": "Bearer abc"}))
    assert asked.filters == f  # what the node reads is what the caller meant


def pod(name: str, node: str | None, phase: str = "Running", ip: str = "",
        annotation: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "kube-system"}
    if annotation:
        meta["annotations"] = {"netctl.dev/query-addr": annotation}
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, **({"podIP": ip} if ip else {})}}


def test_the_daemons_of_the_daemonsets_pods() -> None:
    found = daemons_of([
        pod("netctl-b", "node-b", ip="10.0.0.2"),
        pod("netctl-a", "node-a", annotation="127.0.0.1:4001"),
        pod("netctl-c", "node-c", phase="Pending"),
        pod("netctl-x", None),  # not scheduled: no node
        pod("netctl-d-old", "node-d", phase="Succeeded", ip="10.0.0.4"),
        pod("netctl-d", "node-d", ip="10.0.0.9"),
        pod("netctl-e", "node-e", annotation="[fd00::1]:4002"),
    ], 9470)
    assert found == [
        NodeDaemon("node-a", "127.0.0.1", 4001, "kube-system/netctl-a"),
        NodeDaemon("node-b", "10.0.0.2", 9470, "kube-system/netctl-b"),
        NodeDaemon("node-c", pod="kube-system/netctl-c",
                   missing="pod kube-system/netctl-c has no address yet (phase Pending)"),
        NodeDaemon("node-d", "10.0.0.9", 9470, "kube-system/netctl-d"),
        NodeDaemon("node-e", "fd00::1", 4002, "kube-system/netctl-e"),
    ]


def test_the_owner_of_an_addresss_block_at_a_time() -> None:
    block = Block(spec=BlockSpec(pool="p", cidr="10.0.0.0/26", node="node-b",
                                 claimedAt="2026-11-27T10:00:00Z", history=[
                                     BlockOwner("node-a", "2026-11-27T08:00:00Z",
                                                "2026-11-27T09:00:00Z")]))
    other = Block(spec=BlockSpec(pool="p", cidr="10.0.1.0/26", node="node-c"))
    t = datetime(2026, 11, 27, 8, 30, tzinfo=UTC).timestamp()
    assert owners_at([block, other], "10.0.0.5", None)[0]["node"] == "node-b"
    assert owners_at([block, other], "10.0.0.5/24", t)[0]["node"] == "node-a"
    assert owners_at([block], "10.0.0.5", t + 3600)[0]["node"] == ""  # 09:30: unknown
    assert owners_at([block, other], "10.0.2.1", None) == []
    assert owners_at([block], "not an address", None) == []


def test_the_endpoint_routes_reads_only() -> None:
    req = request_of("GET", "/v1/ipam/leaks?grace=30", {"authorization": " Bearer  t0k "})
    assert qs.bearer(req.authorization) == "t0k"
    assert qs.route(req) == qs.Ask("leaks", grace=30.0)
    assert qs.route(request_of("GET", "/v1/status")).what == "status"
    assert qs.bearer("Basic dXNlcjpwdw==") == qs.bearer(None) == ""
    for method, target, status in (("POST", "/v1/journal", 405),
                                   ("DELETE", "/v1/status", 405),
                                   ("GET", "/v1/reconcile", 404),
                                   ("GET", "/v1/journal?at=yesterday", 400)):
        with pytest.raises(qs.Refused) as refused:
            qs.route(request_of(method, target))
        assert refused.value.status == status
    out = qs.answer(403, {"node": "n", "error": "no"})
    assert (out.status, out.content_type, out.body) == (
        403, "application/json", b'{"node": "n", "error": "no"}')


def test_the_reviews_decision() -> None:
    user = review.authenticated(b'{"status": {"authenticated": true, "user": {"username": '
                                b'"alice", "groups": ["platform"]}}}')
    assert user is not None and (user.username, user.groups) == ("alice", ["platform"])
    assert review.authenticated(b'{"status": {"authenticated": false}}') is None
    assert review.authenticated(b'{"kind": "TokenReview"}') is None
    assert review.verdict(user, b'{"status": {"allowed": true}}', "n1") == review.Verdict(
        200, "alice")
    no = review.verdict(user, b'{"status": {"allowed": false, "reason": "no rule"}}', "n1")
    assert no.status == 403 and "alice may not get nodes/netctl-journal of node n1: no rule" \
        in no.reason and "netctl-journal-reader" in no.reason
    # an explicit deny wins over an allow (the API's rule for chained authorizers)
    assert review.verdict(user, b'{"status": {"allowed": true, "denied": true}}',
                          "n1").status == 403
    body = msgspec.json.decode(review.access_review("alice", ["platform"], "u1", "n1"))
    assert body["spec"]["resourceAttributes"] == {
        "group": "", "resource": "nodes", "subresource": "netctl-journal", "name": "n1",
        "verb": "get"}


def test_the_fakes_reviews() -> None:
    r = Reviews(tokens={"t-alice": ("alice", ("platform",)), "t-bob": ("bob", ())},
                grants=[Grant("group:platform", "get", "nodes/netctl-journal"),
                        Grant("carol", "get", "nodes/netctl-journal", names=("n2",))])
    assert r.token_review({"spec": {"token": "t-alice"}})["status"] == {
        "authenticated": True, "user": {"username": "alice", "uid": "uid-alice",
                                        "groups": ["platform", "system:authenticated"]}}
    assert r.token_review({"spec": {"token": "nope"}})["status"] == {"authenticated": False}

    def may(user: str, groups: list[str], node: str, verb: str = "get",
            sub: str = "netctl-journal") -> bool:
        return bool(r.access_review({"spec": {"user": user, "groups": groups,
                                              "resourceAttributes": {
                                                  "group": "", "resource": "nodes",
                                                  "subresource": sub, "name": node,
                                                  "verb": verb}}})["status"]["allowed"])
    assert may("alice", ["platform"], "n1")
    assert not may("alice", ["platform"], "n1", verb="update")
    assert not may("alice", ["platform"], "n1", sub="proxy")
    assert not may("bob", [], "n1")
    assert may("carol", [], "n2") and not may("carol", [], "n1")
