"""We test Kubernetes mode end to end: a real daemon with ``--kubeconfig`` against an API
server (``netctl/kit/kubefake``, real HTTP, real kubernetes-asyncio), real netns and real
plugins. Pods' annotations in both forms reach the right NADs, interfaces and addresses;
network-status is written on the pod; a warm cache costs no pod GET or LIST per ADD; a
malformed annotation is refused (code 7) with an Event on the pod, its repeats counted on
that one Event; a pod deleted through the API has its attachments DELeted; a replaced pod
(UID mismatch) is refused; with the API server down an ADD for an unseen pod answers code
11 at once — also one that was already waiting for it when the server stopped — and a
DEL completes; an ADD before the first list of NADs waits for it, while STATUS says not
ready. Each runs against the fake API server and a real kube-apiserver (``[real]``), but
those marked ``servers("fake")``.

Subnets: 10.184.0.0/24 (cluster), 10.184.1.0/24 (blue), 10.184.2.0/24 (green)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb
from netctl_kit.kubefake import FakeKube, nad, node, pod
from netctl_kit.kubefake.real import RealKube

from netctl.journal import query
from tests.conftest import (
    Background,
    Daemon,
    Kube,
    bridge_ports,
    free_port,
    ipam_bridge,
    netns_addrs,
    netns_links,
    step_states,
    wait_for,
)

pytestmark = [pytest.mark.netns, pytest.mark.servers("fake", "real")]

NODE = "node-a"
STATUS = "k8s.v1.cni.cncf.io/network-status"
IN_CLUSTER = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster config reads



def _net(daemon: Daemon, name: str, suffix: str, subnet: str) -> dict[str, Any]:
    return ipam_bridge(name, daemon.name(suffix), {
        "type": "netctl-ipam", "range": subnet})


def start(daemon: Daemon, kube: FakeKube, tmp_path: Path, watches: int = 3,
          **settings: Any) -> None:
    kube.create("network-attachment-definitions", nad(
        "cluster", "kube-system", _net(daemon, "cluster", "k0", "10.184.0.0/24")))
    kube.create("network-attachment-definitions", nad(
        "blue", "default", _net(daemon, "blue", "k1", "10.184.1.0/24")))
    kube.create("network-attachment-definitions", nad(
        "green", "default", _net(daemon, "green", "k2", "10.184.2.0/24")))
    if kube.get("nodes", None, NODE) is None:  # a daemon without its Node is not ready
        kube.create("nodes", node(NODE))
    daemon.settings.update({"kubeconfig": str(kube.kubeconfig(tmp_path / "kubeconfig")),
                            "node-name": NODE, "pod-deleted-grace": 0.2, "api-timeout": 3,
                            "pod-wait": 0.5, **settings})
    daemon.start()
    kube.wait_watches(watches)  # its Node, its pods and the NADs


def add_pod(kube: FakeKube, name: str, annotations: dict[str, str] | None = None) -> str:
    return str(kube.create("pods", pod(name, node=NODE, annotations=annotations))
               ["metadata"]["uid"])


def cni(daemon: Daemon, verb: str, container: str, ns: str, name: str, uid: str,
        **kw: Any) -> Any:
    return daemon.cni(verb, container, ns, daemon.conf("cluster", "1.0.0"),
                      pod=f"default/{name}", args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"),
                      **kw)


def test_annotations_in_both_forms_reach_their_networks_and_status_is_written(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    start(daemon, kube, tmp_path)
    uid1 = add_pod(kube, "p1", {"k8s.v1.cni.cncf.io/networks": "blue,green@data0"})
    uid2 = add_pod(kube, "p2", {"k8s.v1.cni.cncf.io/networks": json.dumps(
        [{"name": "blue", "interface": "b0", "ips": ["10.184.1.50/24"]}])})
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 2, 10,
             "both pods in the cache")
    kube.reset_counts()
    ns1, ns2 = netns(), netns()

    res = cni(daemon, "ADD", "c1", ns1, "p1", uid1)
    assert res.rc == 0, res.describe()
    addrs = netns_addrs(ns1)
    assert set(netns_links(ns1)) == {"lo", "eth0", "net1", "data0"}
    assert addrs["eth0"][0].startswith("10.184.0.") and addrs["net1"][0].startswith(
        "10.184.1.") and addrs["data0"][0].startswith("10.184.2.")
    res = cni(daemon, "ADD", "c2", ns2, "p2", uid2)
    assert res.rc == 0, res.describe()
    assert netns_addrs(ns2)["b0"] == ["10.184.1.50/24"]

    status = json.loads(kube.get("pods", "default", "p1")["metadata"]["annotations"][STATUS])
    by_iface = {e["interface"]: e for e in status}
    assert set(by_iface) == {"eth0", "net1", "data0"}
    assert by_iface["eth0"].get("default") is True
    assert by_iface["net1"]["name"] == "default/blue" and by_iface["data0"]["name"] == \
        "default/green"
    for iface, entry in by_iface.items():
        assert entry["ips"] == [a.split("/")[0] for a in addrs[iface]]
        assert entry["mac"]
    # a warm cache: no pod read at all, one write (the status patch) per ADD
    assert kube.count("get", "pods") == 0 and kube.count("list", "pods") == 0
    assert kube.count("patch", "pods") == 2

    for container, ns, name, uid in (("c1", ns1, "p1", uid1), ("c2", ns2, "p2", uid2)):
        assert cni(daemon, "DEL", container, ns, name, uid).rc == 0
        assert netns_links(ns) == ["lo"]
    assert all(bridge_ports(daemon.name(s)) == [] for s in ("k0", "k1", "k2"))


def requests_but_watches(kube: Kube) -> dict[tuple[str, str], int]:
    return {k: n for k, n in kube.request_counts.items() if k[0] != "watch"}


def test_a_hundred_adds_against_a_warm_cache_read_nothing(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    """100 pods ADDed (8 at a time) once the watch has them: not one pod GET or LIST, one
    network-status patch each; and their DELs write nothing."""
    start(daemon, kube, tmp_path)
    pods = [(f"w{i}", add_pod(kube, f"w{i}"), netns()) for i in range(100)]
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 100, 20,
             "the 100 pods in the cache")
    kube.reset_counts()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        added = list(pool.map(lambda p: cni(daemon, "ADD", f"c{p[0]}", p[2], p[0], p[1]),
                              pods))
        assert [r.rc for r in added] == [0] * 100, next(r.describe() for r in added if r.rc)
        # every request but a watch's renewal: on the real server, from its audit log
        assert requests_but_watches(kube) == {("patch", "pods"): 100}
        deleted = list(pool.map(lambda p: cni(daemon, "DEL", f"c{p[0]}", p[2], p[0], p[1]),
                                pods))
    assert [r.rc for r in deleted] == [0] * 100
    assert requests_but_watches(kube) == {("patch", "pods"): 100}  # a DEL asks nothing
    assert daemon.live_attachments_of([f"c{name}" for name, _, _ in pods]) == 0
    assert bridge_ports(daemon.name("k0")) == []


def test_a_malformed_annotation_is_refused_with_an_event_on_the_pod(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    start(daemon, kube, tmp_path)
    uid = add_pod(kube, "bad", {"k8s.v1.cni.cncf.io/networks": '[{"name": "Blue!"}'})
    ns = netns()
    res = cni(daemon, "ADD", "cbad", ns, "bad", uid)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.describe()
    assert "default/bad" in res.out["msg"]
    assert netns_links(ns) == ["lo"]
    events = wait_for(lambda: [e for e in kube.list("events", "default")
                               if e["involvedObject"]["name"] == "bad"], 10, "the Event")
    assert events[0]["type"] == "Warning" and events[0]["involvedObject"]["uid"] == uid
    assert cni(daemon, "DEL", "cbad", ns, "bad", uid).rc == 0


def test_repeated_refusals_of_a_pod_count_on_one_event(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    """A sandbox the runtime ADDs again and again (new sandbox IDs, the same refusal)
    leaves one Event, its count the number of refusals, not one Event per ADD."""
    start(daemon, kube, tmp_path)
    uid = add_pod(kube, "loop", {"k8s.v1.cni.cncf.io/networks": '[{"name": "Blue!"}'})
    ns = netns()
    for i in range(5):
        res = cni(daemon, "ADD", f"cloop{i}", ns, "loop", uid)
        assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.describe()
        assert cni(daemon, "DEL", f"cloop{i}", ns, "loop", uid).rc == 0

    def of_pod() -> list[dict[str, Any]]:
        return [e for e in kube.list("events", "default")
                if e["involvedObject"]["name"] == "loop"]
    wait_for(lambda: sum(e.get("count", 1) for e in of_pod()) >= 5, 10, "five refusals")
    (event,) = of_pod()
    assert event["count"] == 5 and event["involvedObject"]["uid"] == uid
    assert event["type"] == "Warning" and event["metadata"]["name"].startswith("loop.")
    assert event["lastTimestamp"] >= event["firstTimestamp"]


def test_a_pod_deleted_through_the_api_has_its_attachments_deleted(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    start(daemon, kube, tmp_path)
    uid = add_pod(kube, "gone", {"k8s.v1.cni.cncf.io/networks": "blue"})
    keep_uid = add_pod(kube, "kept")
    ns, keep_ns = netns(), netns()
    assert cni(daemon, "ADD", "cgone", ns, "gone", uid).rc == 0
    assert cni(daemon, "ADD", "ckept", keep_ns, "kept", keep_uid).rc == 0
    kube.delete("pods", "default", "gone")  # no DEL from the runtime
    wait_for(lambda: daemon.live_attachments_of(["cgone"]) == 0, 20,
             "the deleted pod's attachments DELeted")
    assert netns_links(ns) == ["lo"]
    assert daemon.live_attachments_of(["ckept"]) == 1
    assert dels_origins(daemon, "cgone") == {"pod-deleted"}
    assert cni(daemon, "DEL", "ckept", keep_ns, "kept", keep_uid).rc == 0


def test_a_replaced_pod_and_an_api_outage(daemon: Daemon, kube: FakeKube,
                                          netns: Callable[[], str], tmp_path: Path) -> None:
    start(daemon, kube, tmp_path)
    uid = add_pod(kube, "p")
    ns = netns()
    stale = cni(daemon, "ADD", "cstale", ns, "p", "0000-not-the-uid")
    assert stale.rc == 1 and stale.out is not None, stale.describe()
    assert stale.out["code"] == 4 and uid in stale.out["msg"], stale.out
    assert netns_links(ns) == ["lo"]

    assert cni(daemon, "ADD", "cp", ns, "p", uid).rc == 0
    kube.stop()  # the API server is down
    unseen = cni(daemon, "ADD", "cnew", netns(), "unseen", "u-1")
    assert unseen.rc == 1 and unseen.out is not None and unseen.out["code"] == 11, \
        unseen.describe()
    assert "API server" in unseen.out["msg"]
    assert cni(daemon, "DEL", "cp", ns, "p", uid).rc == 0  # DEL never needs the API
    assert netns_links(ns) == ["lo"] and daemon.live_attachments_of(["cp"]) == 0
    kube.start()
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["state"] == "watching", 30,
             "the watches back")


def test_a_pod_deleted_while_the_daemon_was_down_is_cleaned_after_the_restart(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    start(daemon, kube, tmp_path)
    uid = add_pod(kube, "left", {"k8s.v1.cni.cncf.io/networks": "blue"})
    keep_uid = add_pod(kube, "stays")
    ns, keep_ns = netns(), netns()
    assert cni(daemon, "ADD", "cleft", ns, "left", uid).rc == 0
    assert cni(daemon, "ADD", "cstays", keep_ns, "stays", keep_uid).rc == 0
    daemon.kill()
    kube.delete("pods", "default", "left")
    kube.compact()  # and the history is gone: only the relist can tell
    daemon.start()
    wait_for(lambda: daemon.live_attachments_of(["cleft"]) == 0, 20,
             "the attachments of the pod deleted while the daemon was down DELeted")
    assert netns_links(ns) == ["lo"]
    assert daemon.live_attachments_of(["cstays"]) == 1
    assert cni(daemon, "DEL", "cstays", keep_ns, "stays", keep_uid).rc == 0


def test_the_readiness_indicator_holds_adds_and_status(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    start(daemon, kube, tmp_path, **{"readiness-wait": 0.5})
    flag = tmp_path / "primary-ready"
    uid = add_pod(kube, "r1")
    conf = daemon.conf("cluster", "1.1.0", readinessindicatorfile=str(flag))
    ns = netns()
    args = ("IgnoreUnknown=1", f"K8S_POD_UID={uid}")
    res = daemon.cni("ADD", "cr1", ns, conf, pod="default/r1", args=args)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 11, res.describe()
    assert str(flag) in res.out["msg"] and netns_links(ns) == ["lo"]
    status = daemon.cni("STATUS", "", None, conf)
    assert status.rc == 1 and status.out is not None and status.out["code"] == 50
    flag.write_text("")
    assert daemon.cni("STATUS", "", None, conf).rc == 0
    res = daemon.cni("ADD", "cr1", ns, conf, pod="default/r1", args=args)
    assert res.rc == 0, res.describe()
    assert daemon.cni("DEL", "cr1", ns, conf, pod="default/r1", args=args).rc == 0


def test_sigterm_drains_an_inflight_add_and_closes_the_client(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], background: Background,
        tmp_path: Path) -> None:
    """SIGTERM in Kubernetes mode as in standalone mode: the socket goes at once, an ADD
    in flight finishes (its network-status written) and the daemon exits 0 — the watches
    are stopped, not the server — with its API client closed."""
    gate = tmp_path / "gate"
    start(daemon, kube, tmp_path)
    kube.create("network-attachment-definitions", nad("held", "default", {
        "cniVersion": "1.0.0", "name": "held", "plugins": [{"type": "gate", "gate": str(gate)}]}))
    uid = add_pod(kube, "p", {"k8s.v1.cni.cncf.io/networks": "held"})
    wait_for(lambda: daemon.status()["kubernetes"]["nads"]["objects"] == 4, 10, "the NAD")
    ns = netns()
    call = background("ADD", "cheld", ns, daemon.conf("cluster", "1.0.0"), pod="default/p",
                      args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))
    wait_for(lambda: step_states(daemon, "cheld") == {"bridge": "ok", "gate": "running"}, 20,
             "the bridge step done and the gate step running")
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: not os.path.exists(daemon.socket), 10, "the socket removed")
    assert not call.done()
    gate.touch()
    res = call.result(timeout=30)
    assert res.rc == 0, res.describe()
    assert daemon.proc.wait(30) == 0
    assert STATUS in kube.get("pods", "default", "p")["metadata"]["annotations"]
    assert "Unclosed client session" not in daemon.log(), daemon.log()[-2000:]


@pytest.mark.servers("fake")  # a refused patch on demand: forbid()
@pytest.mark.parametrize("required", [False, True])
def test_a_network_status_the_api_refuses(daemon: Daemon, kube: FakeKube,
                                          netns: Callable[[], str], tmp_path: Path,
                                          required: bool) -> None:
    """The API server refuses the network-status patch (403). By default the ADD succeeds
    with a warning; with ``network-status-required`` it fails with code 11 and is undone.
    Either way the failure is journaled (a failed ANNOTATE of the container) and counted in
    ``netctl status``."""
    start(daemon, kube, tmp_path, **{"network-status-required": required})
    uid = add_pod(kube, "p", {"k8s.v1.cni.cncf.io/networks": "blue"})
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
    kube.forbid("patch", "pods")
    ns = netns()
    res = cni(daemon, "ADD", "cp", ns, "p", uid)
    if required:
        assert res.rc == 1 and res.out is not None and res.out["code"] == 11, res.describe()
        assert "network-status" in res.out["msg"] and "undone" in res.out["msg"]
        assert netns_links(ns) == ["lo"] and daemon.live_attachments_of(["cp"]) == 0
        assert all(bridge_ports(daemon.name(s)) == [] for s in ("k0", "k1"))
    else:
        assert res.rc == 0, res.describe()
        assert "network-status" in res.stderr and "403" in res.stderr
        assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    ops = daemon.read(journaldb.operation_rows, container="cp", verb="ANNOTATE")
    assert [(o["verb"], o["state"], o["code"]) for o in ops] == [("ANNOTATE", "failed", 11)]
    assert "403" in ops[0]["error"]
    kstatus = daemon.status()["kubernetes"]
    assert kstatus["network_status_failures"] == 1 and kstatus["network_status_required"] \
        is required
    kube.forbid("patch", "pods", 0)
    res = cni(daemon, "ADD", "cp", ns, "p", uid)  # the runtime's retry, or a repeated ADD
    assert res.rc == 0, res.describe()
    if required:  # a new ADD, its network-status written this time
        assert STATUS in kube.get("pods", "default", "p")["metadata"]["annotations"]
    assert cni(daemon, "DEL", "cp", ns, "p", uid).rc == 0
    assert netns_links(ns) == ["lo"]


@pytest.mark.servers("fake")  # a deletion while the server is down, and a new etcd
def test_an_api_server_back_with_a_new_history_loses_no_deletion(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    """The API server restarts on a new etcd (every resourceVersion the daemon knows is
    too old: 410) and a pod was deleted meanwhile: the relist finds it gone, its
    attachments are DELeted; the other pod's stay."""
    start(daemon, kube, tmp_path)
    uid = add_pod(kube, "left", {"k8s.v1.cni.cncf.io/networks": "blue"})
    keep_uid = add_pod(kube, "stays")
    ns, keep_ns = netns(), netns()
    assert cni(daemon, "ADD", "cleft", ns, "left", uid).rc == 0
    assert cni(daemon, "ADD", "cstays", keep_ns, "stays", keep_uid).rc == 0
    kube.stop()
    kube.delete("pods", "default", "left")
    kube.restart(new_history=True)
    wait_for(lambda: daemon.live_attachments_of(["cleft"]) == 0, 30,
             "the attachments of the pod deleted during the outage DELeted")
    assert netns_links(ns) == ["lo"]
    assert daemon.live_attachments_of(["cstays"]) == 1
    assert dels_origins(daemon, "cleft") == {"pod-deleted"}
    assert cni(daemon, "DEL", "cstays", keep_ns, "stays", keep_uid).rc == 0


def served_with_the_new_token(daemon: Daemon, kube: Kube, netns: Callable[[], str]) -> None:
    """After a token rotation: a new pod reaches the daemon through a watch renewed with
    the new token, its ADD is served and its network-status written, the credentials were
    read again, and its DEL works."""
    uid = add_pod(kube, "p")
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 30,
             "the pod, through a watch renewed with the new token")
    ns = netns()
    assert cni(daemon, "ADD", "cp", ns, "p", uid).rc == 0
    assert STATUS in kube.get("pods", "default", "p")["metadata"]["annotations"]
    status = daemon.status()["kubernetes"]
    assert status["credential_reloads"] >= 1
    assert status["api_configuration"] == "netctl"  # the 401 and the reload: netctl's own
    assert status["api_connections"] >= 1
    assert cni(daemon, "DEL", "cp", ns, "p", uid).rc == 0


def test_a_rotated_token_is_read_again(daemon: Daemon, netns: Callable[[], str],
                                       tmp_path: Path) -> None:
    """The kubeconfig's ``tokenFile`` is rewritten and the API server accepts only the new
    token: the next request answered 401 makes the daemon read the credentials again and
    retry — the watches come back, an ADD is served and its network-status written."""
    token = tmp_path / "token"
    token.write_text("first-token")
    with FakeKube(token="first-token", bookmark_interval=0.5) as kube:
        start(daemon, kube, tmp_path, kubeconfig=str(
            kube.kubeconfig(tmp_path / "kubeconfig-file", token_file=token)))
        token.write_text("second-token")
        kube.token = "second-token"  # the old one is refused from now on
        kube.drop_watches()  # the watches reconnect: 401, then the new token
        served_with_the_new_token(daemon, kube, netns)
        assert kube.server_errors == []


@pytest.mark.servers("real")
def test_in_cluster_a_rotated_token_is_read_again_after_an_api_server_restart(
        daemon: Daemon, kube: Kube, netns: Callable[[], str], tmp_path: Path) -> None:
    """In-cluster configuration, as in a pod: the ServiceAccount's token and the CA where
    in-cluster configuration reads them (a private mount namespace), the server in
    ``KUBERNETES_SERVICE_HOST``/``PORT``. The token, bound to a Secret, is rotated (the file
    rewritten) and revoked (its Secret deleted); the API server restarts, so no cached
    check keeps the old token alive: the daemon's relists get 401, it reads the token
    again, and an ADD is served with its network-status written."""
    assert isinstance(kube, RealKube)
    secrets_dir = tmp_path / "serviceaccount"
    secrets_dir.mkdir()
    shutil.copy(kube.ca_file, secrets_dir / "ca.crt")
    (secrets_dir / "namespace").write_text("kube-system")

    def bound_token(secret: str) -> str:
        kube.request("POST", "/api/v1/namespaces/kube-system/secrets", {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "labels": {"netctl-test": "true"}}})
        return kube.token_for("kube-system", "netctl", bound_secret=secret)

    (secrets_dir / "token").write_text(bound_token("netctl-first"))
    daemon.launcher = [
        "env", "KUBERNETES_SERVICE_HOST=127.0.0.1", f"KUBERNETES_SERVICE_PORT={kube.port}",
        "unshare", "--mount", "--propagation", "slave", "sh", "-ec",
        f'mkdir -p {IN_CLUSTER}; mount --bind "$0" {IN_CLUSTER}; exec "$@"',
        str(secrets_dir)]
    made = [p for p in (Path("/run/secrets/kubernetes.io/serviceaccount"),
                        Path("/run/secrets/kubernetes.io"), Path("/run/secrets"))
            if not p.exists()]
    try:
        start(daemon, kube, tmp_path, kubeconfig="", **{"in-cluster": True})
        (secrets_dir / "token").write_text(bound_token("netctl-second"))
        kube.request("DELETE", "/api/v1/namespaces/kube-system/secrets/netctl-first")
        kube.restart()  # the old token's cached check is gone with the process
        served_with_the_new_token(daemon, kube, netns)
    finally:
        daemon.shut_down()
        for p in made:  # what the private namespace's mkdir left on the host
            with contextlib.suppress(OSError):
                p.rmdir()


# -- the node's name (issue 16, defect 3) -----------------------------------------------------


def test_a_node_name_the_api_server_has_no_node_of_is_not_ready_until_it_has(
        daemon: Daemon, kube: FakeKube, tmp_path: Path) -> None:
    """``--node-name`` names no Node (the short hostname where kubelet registered the FQDN):
    the daemon says it is not ready — ``netctl status`` and the STATUS verb (code 50) name
    the node and the setting — and logs it; once a Node of that name exists, it is ready."""
    wrong = "nct-node-short"
    start(daemon, kube, tmp_path, **{"node-name": wrong})
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["synced"], 10, "the pods listed")

    def missing() -> dict[str, Any] | None:
        doc = daemon.status()
        return doc if any(f"no Node named {wrong!r}" in r for r in doc["reasons"]) else None

    doc = wait_for(missing, 10, "not ready, for want of a Node of its name")
    assert doc["ready"] is False and doc["kubernetes"]["node_object"]["exists"] is False, doc
    assert [r for r in doc["reasons"] if "--node-name" in r], doc["reasons"]
    res = daemon.cni("STATUS", "", None, daemon.conf("cluster", "1.1.0"), ifname="")
    assert res.rc == 1 and res.out is not None and res.out["code"] == 50, res.describe()
    assert wrong in res.out["msg"] and "--node-name" in res.out["msg"]
    assert f"no Node named {wrong}" in daemon.log()

    kube.create("nodes", node(wrong))
    wait_for(lambda: daemon.status()["ready"], 10, "ready once its Node exists")
    assert daemon.cni("STATUS", "", None, daemon.conf("cluster", "1.1.0"), ifname="").rc == 0
    kube.delete("nodes", None, wrong)  # and not ready again when it goes
    wait_for(lambda: not daemon.status()["ready"], 10, "not ready once its Node is deleted")


def test_an_add_for_a_pod_of_another_node_is_refused_naming_both_nodes(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    """The pod the ADD names is bound to another node (the GET finds it; this node's cache
    never has it): refused with code 7 naming both nodes, an Event on the pod; nothing
    attached or journaled as attached, no network-status written on another node's pod."""
    start(daemon, kube, tmp_path)
    other = "nct-node-b"
    uid = str(kube.create("pods", pod("far", node=other, annotations={
        "k8s.v1.cni.cncf.io/networks": "blue"}))["metadata"]["uid"])
    ns = netns()
    res = cni(daemon, "ADD", "cfar", ns, "far", uid)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7, res.describe()
    assert "default/far" in res.out["msg"] and repr(other) in res.out["msg"] \
        and repr(NODE) in res.out["msg"], res.out["msg"]
    assert netns_links(ns) == ["lo"]
    assert daemon.read(query.attachments, container="cfar") == []
    assert daemon.read(journaldb.operation_rows, container="cfar") == []
    assert STATUS not in kube.get("pods", "default", "far")["metadata"].get("annotations", {})
    assert kube.count("patch", "pods") == 0
    events = wait_for(lambda: [e for e in kube.list("events", "default")
                               if e["involvedObject"]["name"] == "far"], 10, "the Event")
    assert events[0]["reason"] == "PodOfAnotherNode" and other in events[0]["message"]
    assert cni(daemon, "DEL", "cfar", ns, "far", uid).rc == 0


# -- network-status when the API server does not take it (issue 16, defect 4) ----------------


def _metric(port: int, name: str) -> float:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def annotate_ops(daemon: Daemon, container: str) -> list[tuple[str, int | None]]:
    return [(o["state"], o["code"]) for o in daemon.read(
        journaldb.operation_rows, container=container, verb="ANNOTATE")]


def dels_origins(daemon: Daemon, container: str) -> set[str]:
    """Who began the container's DELs."""
    return {o["origin"]
            for o in daemon.read(journaldb.operation_rows, container=container, verb="DEL")}


@pytest.mark.servers("fake")  # a refused patch on demand: forbid()
def test_a_network_status_the_api_does_not_take_at_once_is_written_later(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    """The API server refuses the network-status patch for a while: the ADD answers at once
    with the warning, and the status is written in the background once the API server
    takes it — no other request from the runtime — journaled (a failed ANNOTATE, then a
    done one), counted in ``netctl status`` and the metric of failed writes."""
    port = free_port()
    start(daemon, kube, tmp_path, **{"metrics-addr": f"127.0.0.1:{port}"})
    uid = add_pod(kube, "slow", {"k8s.v1.cni.cncf.io/networks": "blue"})
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
    kube.forbid("patch", "pods")
    ns = netns()
    res = cni(daemon, "ADD", "cslow", ns, "slow", uid)
    assert res.rc == 0, res.describe()
    assert "network-status" in res.stderr, res.stderr
    assert STATUS not in kube.get("pods", "default", "slow")["metadata"].get("annotations", {})
    wait_for(lambda: kube.count("patch", "pods") >= 2, 20, "a retry refused too")
    assert "background" in res.stderr, res.stderr
    assert daemon.status()["kubernetes"]["network_status_retries"]["pending"] == [
        ["default", "slow"]]
    kube.forbid("patch", "pods", 0)  # the API server takes it now

    annotations = wait_for(lambda: kube.get("pods", "default", "slow")["metadata"].get(
        "annotations", {}).get(STATUS), 30, "the network-status written in the background")
    assert {e["interface"] for e in json.loads(annotations)} == {"eth0", "net1"}
    wait_for(lambda: annotate_ops(daemon, "cslow") == [("failed", 11), ("done", None)], 10,
             "the eventual success journaled after the failure")
    kstatus = daemon.status()["kubernetes"]
    assert kstatus["network_status_retries"]["written_later"] == 1
    assert kstatus["network_status_retries"]["pending"] == []
    assert _metric(port, "netctl_network_status_writes_failed_total") >= 2
    assert cni(daemon, "DEL", "cslow", ns, "slow", uid).rc == 0


@pytest.mark.servers("fake")  # a refused patch on demand: forbid()
def test_a_network_status_left_unwritten_by_a_killed_daemon_is_written_by_the_next(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    """The API server refuses the patch, and the daemon is replaced (kill -9, as a crash,
    a rollout or a node restart) before it took: the runtime sends no second ADD for a
    running pod, so the next daemon writes the status from the journal (its last ANNOTATE
    failed, the attachments are live), and journals it done. A container DELeted meanwhile
    gets nothing written."""
    start(daemon, kube, tmp_path, **{"pod-deleted-grace": 600})
    uid = add_pod(kube, "lost", {"k8s.v1.cni.cncf.io/networks": "blue"})
    gone_uid = add_pod(kube, "gone", {"k8s.v1.cni.cncf.io/networks": "blue"})
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 2, 10, "the pods")
    kube.forbid("patch", "pods")
    ns, gone_ns = netns(), netns()
    res = cni(daemon, "ADD", "clost", ns, "lost", uid)
    assert res.rc == 0 and "background" in res.stderr, res.describe()
    res = cni(daemon, "ADD", "cgone", gone_ns, "gone", gone_uid)
    assert res.rc == 0 and "background" in res.stderr, res.describe()
    assert cni(daemon, "DEL", "cgone", gone_ns, "gone", gone_uid).rc == 0
    daemon.kill()
    kube.forbid("patch", "pods", 0)  # the API server takes it now: nobody asks

    daemon.start()
    annotations = wait_for(lambda: kube.get("pods", "default", "lost")["metadata"].get(
        "annotations", {}).get(STATUS), 30, "the network-status written by the next daemon")
    status = json.loads(annotations)
    assert {e["interface"] for e in status} == {"eth0", "net1"}
    live = {a["addresses"][0] for a in daemon.read(query.attachments, container="clost")}
    assert {ip for e in status for ip in e["ips"]} == {a.split("/")[0] for a in live}
    wait_for(lambda: annotate_ops(daemon, "clost") == [("failed", 11), ("done", None)], 10,
             "the write journaled after the failure")
    assert STATUS not in kube.get("pods", "default", "gone")["metadata"].get("annotations", {})
    assert annotate_ops(daemon, "cgone") == [("failed", 11)]
    assert cni(daemon, "DEL", "clost", ns, "lost", uid).rc == 0


@pytest.mark.servers("fake")  # a refused patch on demand: forbid()
@pytest.mark.parametrize("meanwhile", ["pod deleted", "pod replaced", "attachments DELeted"])
def test_a_network_status_retry_ends_when_its_pod_or_attachments_go(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path,
        meanwhile: str) -> None:
    """While the status is retried, the pod is deleted, or replaced under its name (another
    UID), or the runtime DELetes the container: once the API server answers again, the
    retry ends without writing anything (not on the replacement either) — not retried for
    ever."""
    start(daemon, kube, tmp_path, **{"pod-deleted-grace": 600})
    uid = add_pod(kube, "p", {"k8s.v1.cni.cncf.io/networks": "blue"})
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
    kube.forbid("patch", "pods")
    ns = netns()
    res = cni(daemon, "ADD", "cp", ns, "p", uid)
    assert res.rc == 0 and "background" in res.stderr, res.describe()
    if meanwhile == "attachments DELeted":
        assert cni(daemon, "DEL", "cp", ns, "p", uid).rc == 0
    else:
        kube.delete("pods", "default", "p")
        if meanwhile == "pod replaced":
            add_pod(kube, "p", {"k8s.v1.cni.cncf.io/networks": "blue"})
    kube.forbid("patch", "pods", 0)
    wait_for(lambda: daemon.status()["kubernetes"]["network_status_retries"]["abandoned"]
             == 1, 30, "the retry ended")
    retries = daemon.status()["kubernetes"]["network_status_retries"]
    assert retries["pending"] == [] and retries["written_later"] == 0
    after = kube.get("pods", "default", "p")
    assert after is None or STATUS not in after["metadata"].get("annotations", {})
    assert annotate_ops(daemon, "cp") == [("failed", 11)]
    if meanwhile != "attachments DELeted":
        assert cni(daemon, "DEL", "cp", ns, "p", uid).rc == 0


@pytest.mark.servers("fake")  # a refused patch on demand: forbid()
def test_sigterm_with_a_network_status_pending_exits_cleanly(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], tmp_path: Path) -> None:
    """SIGTERM while a network-status is retried: one last attempt, the write left unwritten
    named in the log, exit 0 without a traceback."""
    start(daemon, kube, tmp_path)
    uid = add_pod(kube, "p")
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
    kube.forbid("patch", "pods")
    assert cni(daemon, "ADD", "cp", netns(), "p", uid).rc == 0
    patches = kube.count("patch", "pods")
    assert daemon.stop() == 0
    assert kube.count("patch", "pods") >= patches + 1  # the last attempt, at least
    log = daemon.log()
    assert "network-status of pod default/p not written" in log and "the daemon stop" in log
    assert "Traceback" not in log, log[-3000:]


# -- SIGTERM right after deletions through the API (issue 16, defect 9) ----------------------


@pytest.mark.servers("fake")  # watch events held back: watches_held()
def test_sigterm_right_after_pods_deleted_through_the_api_exits_cleanly(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], background: Background,
        tmp_path: Path) -> None:
    """Pods deleted through the API, their DELETED events reaching the daemon as SIGTERM
    does, with an ADD in flight — a few times over: each time the daemon drains the ADD
    (its network-status written) and exits 0, with no traceback."""
    gate = tmp_path / "gate"
    start(daemon, kube, tmp_path)
    kube.create("network-attachment-definitions", nad("held", "default", {
        "cniVersion": "1.0.0", "name": "held", "plugins": [{"type": "gate", "gate": str(gate)}]}))
    for round_ in range(4):
        if round_:
            gate.unlink()
            daemon.start()
            kube.wait_watches(3)
        doomed = [f"d{round_}-{i}" for i in range(1500)]
        for name in doomed:
            add_pod(kube, name)
        uid = add_pod(kube, f"busy{round_}", {"k8s.v1.cni.cncf.io/networks": "held"})
        cached = 1501 + round_  # the busy pods of the rounds before stay
        wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == cached  # noqa: B023
                 and daemon.status()["kubernetes"]["nads"]["objects"] == 4, 20,
                 "the pods and the NAD in the caches")
        container = f"cbusy{round_}"
        call = background("ADD", container, netns(), daemon.conf("cluster", "1.0.0"),
                          pod=f"default/busy{round_}",
                          args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"))
        wait_for(lambda: step_states(daemon, container).get("gate") == "running",  # noqa: B023
                 20, "the ADD in flight")
        with kube.watches_held():  # the deletions reach the daemon all at once, as it stops
            for name in doomed:
                kube.delete("pods", "default", name)
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: not os.path.exists(daemon.socket), 10, "the socket removed")
        gate.touch()
        res = call.result(timeout=30)
        assert res.rc == 0, res.describe()
        assert daemon.proc.wait(30) == 0, daemon.log()[-3000:]
        log = daemon.log()
        assert "Traceback" not in log and "ClosedResourceError" not in log, log[-3000:]
        assert STATUS in kube.get("pods", "default", f"busy{round_}")["metadata"]["annotations"]


# -- an API server that stops (issue 18, defect 4) -------------------------------------------


def test_an_add_waiting_for_an_unseen_pod_ends_when_the_api_server_stops(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], background: Background,
        tmp_path: Path) -> None:
    """``pod-wait`` is 60 s and the plugin is given 20: an ADD for a pod the watch has not
    brought is waiting for it when the API server stops. The wait ends as soon as the
    daemon's watch fails to reconnect, and the ADD answers code 11 naming the server and
    why (had it waited ``pod-wait``, the plugin would time out). An ADD sent after that,
    for another unseen pod, answers at once the same way; one for a pod the cache has
    is served."""
    start(daemon, kube, tmp_path, **{"pod-wait": 60})
    uid = add_pod(kube, "seen")
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
    waiting = background("ADD", "cwait", netns(), daemon.conf("cluster", "1.0.0"),
                         pod="default/unseen", args=("IgnoreUnknown=1", "K8S_POD_UID=u-1"),
                         timeout=20)
    wait_for(lambda: daemon.status()["in_flight"] == 1, 10, "the ADD waiting for its pod")
    kube.stop()
    res = waiting.result(timeout=30)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 11, res.describe()
    assert "default/unseen" in res.out["msg"] and kube.url in res.out["msg"], res.out["msg"]
    assert "cannot be reached" in res.out["msg"], res.out["msg"]

    res = cni(daemon, "ADD", "cnew", netns(), "unseen2", "u-2", timeout=20)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 11, res.describe()
    assert "default/unseen2" in res.out["msg"] and kube.url in res.out["msg"], res.out["msg"]
    ns = netns()
    res = cni(daemon, "ADD", "cseen", ns, "seen", uid, timeout=20)
    assert res.rc == 0, res.describe()  # from the cache (its network-status written later)
    assert cni(daemon, "DEL", "cseen", ns, "seen", uid).rc == 0
    kube.start()
    wait_for(lambda: daemon.status()["kubernetes"]["pods"]["state"] == "watching", 30,
             "the watches back")


# -- an ADD before the NADs are listed (issue 18, defect 6) ----------------------------------


@pytest.mark.servers("fake")  # the list's answer held back: answers_held()
def test_an_add_before_the_first_list_of_nads_waits_for_it(
        daemon: Daemon, kube: FakeKube, netns: Callable[[], str], background: Background,
        tmp_path: Path) -> None:
    """The first list of NADs takes long (its answer held): meanwhile the daemon is not
    ready — STATUS answers code 50 and ``netctl status`` exits 1, both naming the NAD
    cache — and an ADD for a pod whose networks are NADs waits for the list (up to
    ``pod-wait``, 60 s here) instead of answering code 11: once the list is answered, it
    is served. Then STATUS succeeds."""
    conf = daemon.conf("cluster", "1.1.0")
    with kube.answers_held("list", "network-attachment-definitions"):
        start(daemon, kube, tmp_path, watches=2, **{"pod-wait": 60})
        uid = add_pod(kube, "early", {"k8s.v1.cni.cncf.io/networks": "blue"})
        wait_for(lambda: daemon.status()["kubernetes"]["pods"]["objects"] == 1, 10, "the pod")
        status = daemon.cni("STATUS", "", None, conf, ifname="")
        assert status.rc == 1 and status.out is not None and status.out["code"] == 50, \
            status.describe()
        assert "NetworkAttachmentDefinitions" in status.out["msg"], status.out["msg"]
        doc = daemon.status()
        assert doc["ready"] is False and any(
            "NetworkAttachmentDefinitions" in r for r in doc["reasons"]), doc["reasons"]
        ns = netns()
        call = background("ADD", "cearly", ns, daemon.conf("cluster", "1.0.0"),
                          pod="default/early", args=("IgnoreUnknown=1", f"K8S_POD_UID={uid}"),
                          timeout=30)
        wait_for(lambda: call.done() or daemon.status()["in_flight"] == 1, 10,
                 "the ADD in flight")
        assert not call.done(), call.result().describe()  # not answered while held
        assert kube.held_answers == 1
    res = call.result(timeout=30)
    assert res.rc == 0, res.describe()
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    wait_for(lambda: daemon.cni("STATUS", "", None, conf, ifname="").rc == 0, 10,
             "STATUS ready once the NADs are listed")
    assert kube.list("events", "default") == []  # nothing was refused
    assert cni(daemon, "DEL", "cearly", ns, "early", uid).rc == 0
