"""We test these aspects: `netctl bench churn` (host-local, and netctl-ipam on the netctl
side) and `netctl bench ipam` run both sides on real namespaces, report numbers for each,
see no failures (every address distinct, none held after the DELs), and leave nothing with
their prefix behind; `netctl bench journal` fills a journal made by the real migrations with
the rows it promises and times every read path, each answer right, and with `--lifecycles`
keeps the journal's file flat once the retention age is reached; `netctl bench crash`
SIGKILLs the daemon in each iteration, vanishes sandboxes, and finds nothing left behind;
`netctl bench events` times vanished sandboxes released on kernel events, beside the periodic
round, and leaves nothing; `netctl bench podman` times podman runs on each side and leaves
no podman state behind; `netctl bench kube` counts the kube daemon's API requests per ADD
and DEL (none but the network-status patch with a warm cache, one GET more when the watch
lags), times ADDs beside standalone mode, measures the daemon's and its delegates' memory,
and leaves nothing; `netctl bench cluster` runs nodes sharing one pool, netctl daemons and
whereabouts' protocol, counts their requests per pod and the live addresses held twice (with
the sqlite backend, pools per node: some; whereabouts: none), and leaves nothing; `netctl
bench query` asks every node who held an address, beside one node's local journal, each
answer right, one TokenReview per node, and leaves nothing."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from tests.conftest import NETCTL, RealNodes, host_links, ip

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def assert_left_nothing(report: dict[str, Any]) -> None:
    """No link or netns with the bench's prefix, no temp dir, no daemon process."""
    prefix = report["prefix"]
    assert host_links(prefix) == []
    netns = [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line]
    assert [n for n in netns if n.startswith(prefix)] == []
    assert not os.path.exists(report["root"])
    assert not os.path.exists(f"/proc/{report['daemon']['pid']}")


def test_churn_small_json() -> None:
    proc = subprocess.run([NETCTL, "bench", "churn", "--pods", "6", "--concurrency", "2",
                           "--networks", "2", "--json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    for side in ("netctl", "direct"):
        rep = report[side]
        assert rep["pods"] == 6
        assert rep["failures"] == 0 and rep["errors"] == [] and rep["leftovers"] == []
        assert rep["pods_per_s"] > 0 and rep["wall_s"] > 0
        for verb in ("add_ms", "del_ms"):
            assert all(rep[verb][q] > 0 for q in ("p50", "p95", "p99"))
    assert all(v is not None and v > 0 for v in report["ratio"].values())
    assert report["daemon"]["peak_rss_kib"] > 0
    assert report["plugin"]["version_ms"]["p50"] > 0
    assert report["breakdown"]["operations_not_done"] == []
    assert report["breakdown"]["operations"] == {"ADD": 7, "DEL": 7}  # with the warm-up pod
    # not a terminal: the progress is plain lines, no bar drawn
    assert "\x1b[" not in proc.stderr
    assert "netctl bench: netctl: 6 pods, concurrency 2" in proc.stderr.splitlines()

    assert report["prefix"].startswith("ncb")
    assert_left_nothing(report)


def test_churn_with_netctl_ipam_json() -> None:
    """The netctl side allocates in the daemon (mode a); the direct side keeps host-local."""
    proc = subprocess.run([NETCTL, "bench", "churn", "--pods", "6", "--concurrency", "2",
                           "--networks", "2", "--ipam", "netctl-ipam", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["params"]["ipam_by_side"] == {"netctl": "netctl-ipam", "direct": "host-local"}
    for side in ("netctl", "direct"):
        rep = report[side]
        assert rep["pods"] == 6 and rep["failures"] == 0 and rep["leftovers"] == []
        assert rep["pods_per_s"] > 0
        assert all(rep[verb]["p50"] > 0 for verb in ("add_ms", "del_ms"))
    b = report["breakdown"]
    assert b["operations_not_done"] == []
    assert b["ipam_allocations"] == 7 * 2  # every pod (and the warm-up) on both networks
    assert b["steps"] == 7 * 2 * 2  # bridge alone, ADD and DEL: no IPAM exec
    assert host_links(report["prefix"]) == []
    assert not os.path.exists(report["root"])


def test_ipam_small_json() -> None:
    proc = subprocess.run([NETCTL, "bench", "ipam", "--allocations", "20", "--concurrency", "4",
                           "--fill", "2000", "--json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    for side in ("netctl", "host_local"):
        rep = report[side]
        assert rep["allocations"] == 20 and rep["distinct_addresses"] == 20
        assert rep["failures"] == 0 and rep["errors"] == [] and rep["duplicates"] == []
        assert rep["held_after"] == []
        assert rep["allocations_per_s"] > 0 and rep["releases_per_s"] > 0
        for verb in ("add_ms", "del_ms"):
            assert all(rep[verb][q] > 0 for q in ("p50", "p95", "p99"))
    assert report["netctl"]["pool_size"] == report["host_local"]["pool_size"]
    assert all(v is not None and v > 0 for v in report["ratio"].values())
    assert report["daemon"]["peak_rss_kib"] > 0
    b = report["breakdown"]
    assert b["operations_not_done"] == []
    assert b["operations"] == {"ADD": 21, "DEL": 21}  # with the warm-up
    assert b["ADD"]["allocations"] == 20 and b["DEL"]["allocations"] == 20
    a = report["allocator"]  # the engine's path, no exec
    assert a["allocations"] == a["distinct"] == 2000 and a["pool_size"] >= 2000
    assert a["allocations_per_s"] > 0 and a["first_tenth_ms"] > 0 and a["last_tenth_ms"] > 0

    assert_left_nothing(report)


def test_journal_small_json() -> None:
    """A simulated week of 2000 attachments and 2000 allocations; every read path timed, every
    answer checked against the simulation."""
    from netctl.journal.migrate import available

    proc = subprocess.run([NETCTL, "bench", "journal", "--rows", "2000", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    j = report["journal"]
    assert j["rows"]["attachments"] == 2000 and j["rows"]["ipam_allocations"] == 2000
    assert j["rows"]["ipam_pools"] == 4
    assert j["rows"]["operations"] > 2000 and j["rows"]["steps"] > 2000  # ADD and DEL each
    assert 0 < j["live"]["attachments"] < 2000 and 0 < j["live"]["ipam_allocations"] < 2000
    assert j["db_bytes"] > 0
    churn = j["churn"]  # 2000 rows, below bench journal's BUSY_ROWS: 3-hour lives, as always
    assert churn["mean_lifetime_s"] == 3 * 3600 and churn["never_removed"] == 0.03
    assert len(churn["pools"]) == 5  # the four IPAM pools and host-local's subnet
    assert all(0 < p["peak_live"] <= p["handed_out"] and p["peak_live"] < p["size"]
               for p in churn["pools"].values())
    assert j["schema_version"] == available()[-1][0]  # the real migrations, all of them
    assert "attachment_addresses_address" in j["indexes"]
    queries = report["queries"]
    assert set(queries) == {
        "attachments_ip_at", "attachments_ip", "attachments_pod", "attachments_pod_all",
        "attachments_container",
        "attachments_since", "allocations_at", "pools", "pool_allocations", "leaks",
        "operations_container", "cli_journal_ip_at"}
    for key, q in queries.items():
        assert q["wrong"] == 0, key
        assert q["n"] == (5 if key == "cli_journal_ip_at" else 50), key
        assert 0 < q["p50"] <= q["p95"] <= q["p99"] <= q["max"], key
    assert queries["attachments_ip_at"]["rows_mean"] >= 1
    assert queries["pools"]["rows_mean"] == 4
    assert "daemon" not in report  # no daemon in this bench
    assert not os.path.exists(report["root"])


def test_journal_lifecycles_small_json() -> None:
    """800 pod lifecycles over simulated time with retention on: the file is flat once the
    retention age is reached, far below the same lifecycles with retention off; no write
    failed or passed its deadline; ADD latency reported for both."""
    proc = subprocess.run([NETCTL, "bench", "journal", "--lifecycles", "800", "--retention",
                           "2h", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["params"]["journal_retention"] == "2h"
    assert report["params"]["allocation_retention"] == "4h"
    r = report["retention"]
    assert r["lifecycles"] == 800 and len(r["samples"]) >= 20
    assert abs(r["spread"]) <= 0.15 and r["trend"] <= 0.075
    assert r["deadline"] == {"late": 0, "failed": 0}
    pruned = r["pruner"]["pruned"]
    assert pruned["attachments"] > 0 and pruned["operations"] > 0 and pruned["steps"] > 0
    assert pruned["allocations"] > 0
    assert r["samples"][-1]["rows"] < 0.75 * report["baseline"]["samples"][-1]["rows"]
    assert set(r["add_ms"]) == {"retention on, before", "retention on, pruning",
                                "retention off (baseline)"}
    assert not os.path.exists(report["root"])


def test_crash_small_json() -> None:
    """Two iterations of 16 pods: the daemon SIGKILLed mid-churn each time (after 6 to 10
    pods started), sandboxes vanished, restart, reconcile, the runtime's DELs; nothing left,
    everything cleaned up."""
    proc = subprocess.run([NETCTL, "bench", "crash", "--iterations", "2", "--pods", "16",
                           "--reboot-pods", "12", "--json"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["iterations_run"] == 2 and len(report["iterations"]) == 2
    assert report["params"]["pods_per_iteration"] == 16
    f = report["faults"]
    assert f["kills"] >= 2
    assert f["vanished_sandboxes"] >= 2  # one or two per iteration
    assert len(f["operations_running_per_kill"]) == 2
    assert set(report["leftovers"]) == {
        "operations_running", "attachments_live", "allocations_live", "host_local_leases",
        "bridge_ports", "host_veths", "delegates", "netns"}
    assert all(n == 0 for n in report["leftovers"].values()), report["leftover_items"]
    assert report["failures"] == 0
    assert report["reconcile"]["errors"] == [] and report["replay"]["failed"] == []
    # every vanished sandbox's attachments are DELeted by the daemon's own first reconcile
    # round, right after its start-up replay (timed from the restart's exec)
    assert report["vanished_released_ms"]["n"] == 2
    assert all(it["vanished_released_ms"] is not None for it in report["iterations"])
    assert report["recovery_ms"]["n"] == 2 and report["recovery_ms"]["p50"] > 0
    for it in report["iterations"]:
        assert it["exit_code"] == 0 and it["failures"] == []
        assert all(n == 0 for n in it["leftovers"].values())
    assert report["daemon"]["peak_rss_kib"] > 0
    # then a node reboot with 12 attachments: the kernel's teardown waited for before the
    # kill, every attachment released after the restart, the CPU it took, nothing left
    r = report["rebooted_start"]
    assert r["pods"] == 12 and r["live_attachments_at_kill"] == 12 and r["failures"] == []
    assert r["kernel_teardown_ms"] >= 0 and 0 < r["accepting_ms"] <= r["released_ms"]
    assert r["released_cpu_s"]["daemon"] > 0 and r["released_cpu_s"]["delegates"] > 0
    assert all(n == 0 for n in r["leftovers"].values())
    # not a terminal: one plain line per iteration, no bar drawn
    assert "\x1b[" not in proc.stderr
    # (a random iteration may be a node reboot: "iteration 1 (reboot): killed …")
    assert [line.split(":")[1].split(" (")[0] for line in proc.stderr.splitlines()
            if line.startswith("netctl bench: iteration ")] == [" iteration 1", " iteration 2"]

    assert_left_nothing(report)


def test_events_small_json() -> None:
    """Two rounds of each kind: a vanished bridge and macvlan-only sandbox released on events
    (the periodic round off), a stuck one's address released without its DEL, the periodic
    round's wait beside it, nothing left (the stuck ones forgotten)."""
    proc = subprocess.run([NETCTL, "bench", "events", "--rounds", "2", "--interval", "60",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == [] and report["leftovers"] == []
    for kind in ("bridge", "macvlan"):
        rep = report[kind]
        assert rep["rounds"] == 2 and rep["failures"] == []
        released, noticed = rep["released_ms"], rep["noticed_ms"]
        assert released["n"] == 2 and 0 < released["p50"] <= released["max"]
        assert 0 < noticed["p50"] <= released["max"]  # noticed before it is released
        assert all(v is not None and v > 0 for v in report["ratio"][kind].values())
    stuck = report["stuck"]  # a DEL that fails: the address released without it
    assert stuck["rounds"] == 2 and stuck["failures"] == []
    assert stuck["released_ms"]["n"] == 2 and 0 < stuck["released_ms"]["p50"]
    assert report["baseline"] == {"interval_s": 60.0, "median_ms": 30000.0, "max_ms": 60000.0}
    assert report["events"]["attachments_reconciled"] >= 6  # with the warm-up's two
    assert report["daemon"]["exit_code"] == 0

    assert_left_nothing(report)


def test_podman_small_json() -> None:
    """`podman run --rm` on a netctl network, on podman's own network and without one: every
    run has its network's address; podman, its storage and its networks are gone after."""
    from netctl_kit import harness_podman

    why = harness_podman.preflight()
    if why:
        pytest.skip(why)
    proc = subprocess.run([NETCTL, "bench", "podman", "--runs", "2", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    for side in ("netctl", "podman", "none"):
        rep = report[side]
        assert rep["runs"] == 2 and rep["failures"] == 0
        assert 0 < rep["min_ms"] <= rep["median_ms"] <= rep["max_ms"]
    assert report["ratio"]["median"] > 0
    assert report["daemon_operations_ms"]["ADD"]["n"] == 3  # with the warm-up run
    assert report["daemon_operations_ms"]["DEL"]["n"] == 3
    assert report["daemon"]["peak_rss_kib"] > 0
    assert not os.path.exists(report["podman_root"])
    assert_left_nothing(report)


def test_kube_small_json() -> None:
    """A small cache, two rounds' worth of churn per side beside two standing pods, each
    pod on the cluster network and two more (each one's network-status checked by the
    bench), the churned pods deleted through the API, two misses of each kind, a burst
    of five: the request counts are the design's (exact: they are counts, not timings),
    every number is there (the floor's and the time outside the delegates too), nothing is
    left."""
    proc = subprocess.run([NETCTL, "bench", "kube", "--pods", "20", "--nads", "5", "--churn",
                           "8", "--misses", "2", "--concurrency", "2", "--burst", "5",
                           "--standing", "2", "--networks", "2", "--delete-pods", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    # every churned pod deleted through the API once its DEL was done (and made again)
    assert report["params"]["deleted_through_api"] == 8
    assert report["params"]["standing"] == 2
    assert report["params"]["networks_per_pod"] == 3
    req = report["requests"]
    warm = req["warm_cache"]
    assert warm["ADD"]["pods"] == 8 and warm["ADD"]["requests"] == {"patch pods": 8}
    assert warm["DEL"]["requests"] == {}  # a DEL never asks the API
    assert req["created_with_add"]["ADD"]["reads_per_pod"] <= 1  # at most one GET each
    assert req["created_with_add"]["ADD"]["per_pod"]["patch pods"] == 1
    assert req["watch_lagging"]["ADD"]["requests"] == {"get pods": 2, "patch pods": 2}
    for side in ("kube", "standalone"):
        rep = report[side]
        assert rep["pods"] == 8 and rep["failures"] == 0 and rep["leftovers"] == []
        assert all(rep[verb]["p50"] > 0 for verb in ("add_ms", "del_ms"))
        assert rep["cpu_ms_per_pod"] > 0 and rep["cpu_s"]["daemon"] > 0
    assert all(v is not None and v > 0 for v in report["ratio"].values())
    # the floor: the same pods exec'd directly, every one done, nothing held by host-local
    direct = report["direct"]
    assert direct["pods"] == 8 and direct["failures"] == 0 and direct["leftovers"] == []
    assert direct["cpu_s"]["delegates"] > 0
    assert all(v is not None and v > 0 for v in report["ratio_direct"].values())
    # what netctl adds outside the delegates: one figure per kube ADD and DEL, each the
    # exec less a critical path that is itself part of the exec
    outside = report["outside_delegates_ms"]
    assert outside["add"]["n"] == 8 and outside["del"]["n"] == 8
    assert 0 < outside["add"]["p50"] < report["kube"]["add_ms"]["p99"]
    assert report["misses"]["watch_lagging"]["add_ms"]["n"] == 2
    burst = report["burst"]
    assert burst["pods"] == 5 and burst["failures"] == 0 and burst["add_ms"]["n"] == 5
    assert burst["sampled"]["samples"] > 0
    mem = report["memory"]
    assert 0 < mem["empty_kib"] <= mem["lifetime_peak_kib"]
    assert mem["filled_by_watch_kib"] > 0 and mem["filled_by_list_kib"] > 0
    assert 0 < mem["burst_peak_kib"] <= mem["lifetime_peak_kib"]
    d = mem["delegate"]
    assert d["bridge_add_kib"] > 0 and d["static_kib"] > 0 and d["bridge_binary_kib"] > 0
    c = mem["container"]
    assert c["delegates_at_once"] == c["max_concurrent"] * c["networks_per_pod"]
    assert c["networks_per_pod"] == 3
    assert c["bound_kib"] > c["once_kib"] > mem["burst_peak_kib"]
    assert report["daemon"]["exit_code"] == 0

    assert_left_nothing(report)
    assert not os.path.exists(f"/proc/{report['standalone']['daemon_pid']}")


def test_hotplug_small_json() -> None:
    """Four changes of a running pod's annotation (add, remove, add, remove): each applied
    and journaled, both latencies measured for each, one network-status patch and one
    Event written per hot-plug, nothing left."""
    proc = subprocess.run([NETCTL, "bench", "hotplug", "--changes", "4", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    h = report["hotplug"]
    assert (h["changes"], h["adds"], h["removes"], h["not_applied"]) == (4, 2, 2, 0)
    assert h["interface_ms"]["n"] == 4 and h["status_ms"]["n"] == 4
    assert 0 < h["interface_ms"]["p50"] and 0 < h["status_ms"]["p50"]
    assert report["operations"] == {"ADD done": 2, "DEL done": 2}
    per = h["requests_per_hotplug"]
    assert per["patch pods"] == 1.0
    assert per.get("create events", 0) + per.get("patch events", 0) == 1.0
    assert set(per) <= {"patch pods", "create events", "patch events"}  # no read at all
    assert report["daemon"]["exit_code"] == 0
    assert_left_nothing(report)


def test_devices_small_json() -> None:
    """Three pods with a veth network, three with a device network: each ADD timed and
    split (its delegate, what is outside the chains), the kubelet's stand-in asked once per
    device pod only, the daemon's RSS before and after the gRPC client, every device back on
    the host, nothing left."""
    proc = subprocess.run([NETCTL, "bench", "devices", "--pods", "3", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    for side in ("veth", "vf"):
        assert report[side]["add_ms"]["n"] == 3 and report[side]["delegate_ms"]["n"] == 3
        assert 0 < report[side]["delegate_ms"]["p50"] < report[side]["add_ms"]["p50"]
    assert report["pod_resources_calls"] == 3
    rss = report["rss_kib"]
    assert rss["after_devices"] - rss["before_devices"] == rss["grpc_client"]
    assert report["daemon"]["exit_code"] == 0
    assert_left_nothing(report)


def test_sticky_small_json() -> None:
    """Two sticky pods, each recreated on its node, then on a second and a third node: each
    gets its first address back (the bench fails otherwise), every ADD is timed, the three
    daemons exit 0, nothing is left."""
    proc = subprocess.run([NETCTL, "bench", "sticky", "--runs", "2", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert {k: v["n"] for k, v in report["add_ms"].items()} == {
        "first": 2, "same_node": 2, "other_node": 2, "third_node": 2}
    assert all(v["p50"] > 0 for v in report["add_ms"].values())
    assert report["ratio_p50"]["first"] == 1.0
    assert [(d["node"], d["exit_code"]) for d in report["daemons"]] == [
        ("node-1", 0), ("node-2", 0), ("node-3", 0)]
    prefix = report["prefix"]
    assert host_links(prefix) == []
    assert not [n for n in ip("netns", "list").stdout.split() if n.startswith(prefix)]
    assert not os.path.exists(report["root"])
    assert not any(os.path.exists(f"/proc/{d['pid']}") for d in report["daemons"])


@pytest.mark.parametrize("backend", ["kubernetes", "sqlite"])
def test_cluster_small_json(backend: str) -> None:
    """Two nodes x 6 pods on one pool, whereabouts' protocol beside them. The kubernetes
    backend hands out no address twice, writing one block claim per node and nothing in
    the churn; sqlite (a pool per node) is the counter's own check: both nodes hand out
    the same first addresses."""
    proc = subprocess.run([NETCTL, "bench", "cluster", "--nodes", "2", "--pods", "6",
                           "--concurrency", "2", "--api-latency-ms", "1", "--backend", backend,
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["params"]["backend"] == backend and report["params"]["churn"] == 3
    n, w = report["netctl"], report["whereabouts"]
    for rep in (n, n["single_node"], w):
        assert rep["adds"] == rep["adds_planned"] and rep["failures"] == 0
        assert rep["dels"] == 3 * rep["nodes"]
        assert all(rep[key]["p50"] > 0 for key in ("add_ms", "del_ms"))
        assert rep["wall_s"]["total"] > 0
        assert set(rep["requests"]) == {"add", "churn"}
        assert rep["addresses"]["live"] == 6 * rep["nodes"]
    assert n["nodes"] == 2 and n["single_node"]["nodes"] == 1
    assert n["single_node"]["addresses"]["held_twice"] == 0
    loaded = n["single_node_same_load"]  # one node, both nodes' pods at both's concurrency
    assert (loaded["nodes"], loaded["adds"], loaded["failures"]) == (1, 12 + 6, 0)
    assert loaded["addresses"]["held_twice"] == 0 and loaded["addresses"]["live"] == 12
    assert set(n["cluster_over_same_load"]) == {"p50", "p99"}
    if backend == "kubernetes":
        assert n["addresses"]["held_twice"] == 0
        assert n["blocks"] == {"total": 2, "per_node": {"node-1": 1, "node-2": 1}}
        # a claim: one read of the pool's blocks (by label, from the server's cache), then
        # the create — nobody watches every block any more
        assert n["requests"]["add"]["requests"] == {"create ipamblocks": 2,
                                                    "list ipamblocks": 2}
    else:
        assert n["addresses"]["held_twice"] > 0
        assert n["blocks"] == {"total": 0, "per_node": {}}
        assert n["requests"]["add"]["requests"] == {}  # the caches synced before the count
    assert n["requests"]["churn"]["ipam_writes_per_pod"] == 0
    assert [d["exit_code"] for d in n["daemons"]] == [0, 0]
    # whereabouts: every ADD and DEL takes the lease and writes the pool
    assert w["addresses"]["held_twice"] == 0 and w["ippool_allocations"] == 12
    assert w["requests"]["add"]["per_pod"]["update ippools"] == 1
    assert w["requests"]["churn"]["per_pod"]["update ippools"] == 2  # the DEL and the ADD
    assert w["requests"]["add"]["ipam_writes_per_pod"] >= 3  # lease, pool, lease released
    assert w["invocations"] == 12 + 6 + 6
    assert report["ratio"]["writes_per_pod_add"] < 0.1
    assert set(report["ratio"]) >= {"writes_per_pod_add", "writes_per_pod_churn", "add_p50",
                                    "add_p99"}

    assert report["prefix"].startswith("ncb")
    netns = [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line]
    assert [x for x in netns if x.startswith(report["prefix"])] == []
    assert not os.path.exists(report["root"])
    for d in n["daemons"] + n["single_node"]["daemons"] + loaded["daemons"]:
        assert not os.path.exists(f"/proc/{d['pid']}")


def test_query_small_json() -> None:
    proc = subprocess.run([NETCTL, "bench", "query", "--nodes", "2", "--pods", "3",
                           "--queries", "3", "--cli-runs", "1", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["failures"] == []
    assert report["local_ms"]["n"] == report["cluster_ms"]["n"] == 3
    assert report["cli_ms"]["n"] == 1
    assert report["token_reviews"] == 2  # once per node, then kept
    assert not os.path.exists(report["root"])
    assert len(report["daemon_pids"]) == 2
    assert not any(os.path.exists(f"/proc/{pid}") for pid in report["daemon_pids"])


@pytest.mark.realnode
def test_node_density_small_json(real_nodes: RealNodes) -> None:
    """`netctl bench node-density --pods 4 --nads 1 --nodes 2 --ipam-backend kubernetes` on
    a real cluster of two nodes (make image, the cluster, netctl installed: about a minute
    here with the image built, 3 minutes when make image rebuilds it; run it under the
    machine's real-cluster lock): the floor and a netctl run, every pod Ready and timed
    both ways, both daemons' cgroups measured, netctl's ADDs journaled on the nodes, its
    API requests and block claims counted from the audit log, nothing held after each
    run, the cluster gone."""
    from netctl_kit import realnode

    reason = realnode.unavailable()
    if reason:
        pytest.skip(f"real node: {reason}")
    real_nodes.release()  # the bench's cluster is its own: one on a machine at a time
    proc = subprocess.run([NETCTL, "bench", "node-density", "--pods", "4", "--nads", "1",
                           "--nodes", "2", "--ipam-backend", "kubernetes", "--idle", "2",
                           "--json"], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert [(r["label"], r["nads"]) for r in report["runs"]] == [("floor", None), ("1nad", 1)]
    assert report["params"]["nodes"] == 2
    for run in report["runs"]:
        assert run["ready"] == 4 and run["failed"] == 0 and run["left"] == []
        assert run["ready_ms"]["n"] == run["api_ready_s"]["n"] == 4
        assert 0 < run["ready_ms"]["p50"] <= run["ready_ms"]["max"]
        assert run["delete"]["gone_ms"]["n"] == 4
        assert run["cpu"]["add"]["machine_s"] > 0
    for run in report["runs"][1:]:
        assert run["held"] == {} and run["daemon_restarts"] == 0
        assert len(run["daemon_pids"]) == 2
        assert run["journal"]["add_count"] == 4 and run["journal"]["add_ms"]["n"] == 4
        # the pools shared: blocks claimed through the API, among netctl's requests
        assert 1 <= run["api"]["ipam_writes"] <= run["api"]["requests"]
        assert run["api"]["by_request"].get("create ipamblocks", 0) >= 1
        assert run["cpu"]["add"]["daemon_cpu_s"] > 0
        assert run["memory"]["run"]["peak_usage_mib"] > 0
    cg = report["params"]["daemon_cgroup"]
    assert cg["cpu_limit_cores"] is None  # the manifest's: no CPU quota on the cgroup
    assert "cpu" not in report["params"]["manifest_resources"]["limits"]
    assert report["params"]["manifest_resources"]["requests"]["cpu"] == "500m"
    assert host_links(report["prefix"]) == []
    assert not os.path.exists(report["root"])


def test_scale_small_json() -> None:
    """`netctl bench scale` with two sizes of a few simulated nodes on the real API server:
    every pod ADDed, no address twice, one block claim per node; only the holder of the
    gone-nodes Lease receives Node events (the mean is the holder's share); a node's
    block events do not grow with the cluster; a sticky pod keeps its address on another
    node; a stopped node's blocks are taken over; after the API server's restart every
    cache watches again; nothing left."""
    from netctl_kit.kubefake.real import unavailable

    reason = unavailable()
    if reason:
        pytest.skip(f"real API server: {reason}")
    proc = subprocess.run([NETCTL, "bench", "scale", "--nodes", "3,6", "--pods", "2",
                           "--measure", "5", "--status-every", "2", "--churn-every", "2",
                           "--block-check", "1", "--gone-grace", "2", "--json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert [s["nodes"] for s in report["sizes"]] == [3, 6]
    for size in report["sizes"]:
        n = size["nodes"]
        assert size["failures"] == 0 and size["duplicates"]["addresses"] == 0
        assert size["pods_added"] >= 2 * n
        assert size["ipam_writes"] == n  # one block each, none in the churn
        nodes = size["per_node"]["nodes events"]
        assert nodes["max_per_h"] > 0  # the holder: every node's status updates
        # it alone (each figure rounded to 0.1)
        assert nodes["mean_per_h"] * n == pytest.approx(nodes["max_per_h"], abs=0.1 * n)
        assert size["relist"]["all_watching_after_start_s"] > 0
        assert size["apiserver"]["peak_rss_mib"] > 0
        # correctness at N: a sticky pod recreated on another node gets its address back;
        # a stopped node's blocks are taken over after the grace, by the Lease's holder
        assert size["sticky"]["same_on_another_node"] is True
        gone = size["gone_node"]
        assert gone["taken_over_after_s"] >= gone["grace_s"] and gone["blocks"] >= 1
        assert gone["by"] == gone["lease_holder"] and len(gone["by"]) == 1
    # a node's own block events (its watch's bookmarks): the same at 6 nodes as at 3
    grown = report["sizes"][1]["per_node_vs_smallest"]["ipamblocks events"]
    assert grown is None or grown < 1.5
    assert not os.path.exists(report["root"])
