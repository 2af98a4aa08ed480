"""We test these aspects of ``--metrics-addr`` with a real daemon, real network namespaces
and the real bridge plugin, the scrape parsed with prometheus-client's own parser:

- ADD, DEL and a failed ADD move ``netctl_requests_total`` by verb and code, the request
  histogram, the plugin-exec histogram per plugin type and verb, the compensations, the
  pool gauges, and the journal's counters; other paths answer 404;
- 1,000 containers served by the plain ``netctl-ipam`` plugin leave every label set as
  small as it was: no container id ever becomes a label value;
- with ``--metrics-addr 127.0.0.1:0`` the log names the port the kernel chose, and the
  endpoint answers there;
- ``netctl status`` exits 0 when ready, 2 when the daemon is down, 1 when it is not ready
  (Kubernetes mode with the API server down before the first list), and STATUS then
  answers code 50 naming why.
"""

from __future__ import annotations

import http.client
import json
import re
import secrets
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from netctl_kit.harness import SYSTEM_CNI, exec_plugin, netctl_argv
from netctl_kit.kubefake import nad, node
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Daemon, Kube, free_port, ipam_bridge, wait_for

pytestmark = pytest.mark.netns

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(port: int, path: str = "/metrics") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def scrape(port: int) -> Samples:
    status, text = get(port)
    assert status == 200, text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for n, labels in samples if n == name]


def with_metrics(daemon: Daemon) -> int:
    port = free_port()
    daemon.settings["metrics-addr"] = f"127.0.0.1:{port}"
    return port


def test_requests_plugin_runs_and_compensations_are_counted(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    port = with_metrics(daemon)
    web = ipam_bridge("web", daemon.name("m0"), {"type": "netctl-ipam",
                                                 "range": "10.141.0.0/24"})
    broken = ipam_bridge("broken", daemon.name("m1"), {"type": "netctl-ipam",
                                                       "range": "10.141.1.0/24"})
    broken["plugins"].append({"type": "fail"})
    daemon.add_network("web", web)
    daemon.add_network("broken", broken)
    daemon.start()
    before = scrape(port)
    assert value(before, "netctl_requests_in_flight") == 0
    assert value(before, "netctl_requests_queued") == 0
    assert series(before, "netctl_requests_total") == []

    ns = netns()
    assert daemon.cni("ADD", "m1", ns, daemon.conf("web")).rc == 0
    during = scrape(port)
    pool = next(p["pool"] for p in series(during, "netctl_ipam_pool_used"))
    assert value(during, "netctl_ipam_pool_used", pool=pool) == 1
    assert value(during, "netctl_ipam_pool_size", pool=pool) == 254
    assert daemon.cni("DEL", "m1", ns, daemon.conf("web")).rc == 0
    failed = daemon.cni("ADD", "m2", netns(), daemon.conf("broken"))
    assert failed.rc == 1 and failed.out is not None and failed.out["code"] == 7

    after = scrape(port)
    assert value(after, "netctl_requests_total", verb="ADD", code="0") == 1
    assert value(after, "netctl_requests_total", verb="DEL", code="0") == 1
    assert value(after, "netctl_requests_total", verb="ADD", code="7") == 1
    assert value(after, "netctl_request_duration_seconds_count", verb="ADD") == 2
    assert value(after, "netctl_request_duration_seconds_count", verb="DEL") == 1
    assert value(after, "netctl_request_duration_seconds_bucket", verb="ADD", le="+Inf") == 2
    # bridge: ADD of web and broken; DEL of web, and broken's compensation
    assert value(after, "netctl_plugin_exec_duration_seconds_count",
                 plugin="bridge", verb="ADD") == 2
    assert value(after, "netctl_plugin_exec_duration_seconds_count",
                 plugin="bridge", verb="DEL") == 2
    assert value(after, "netctl_plugin_exec_duration_seconds_count",
                 plugin="fail", verb="ADD") == 1
    assert value(after, "netctl_plugin_exec_duration_seconds_sum",
                 plugin="bridge", verb="ADD") > 0
    assert value(after, "netctl_compensations_total", outcome="compensated") == 1
    assert value(after, "netctl_ipam_pool_used", pool=pool) == 0
    assert value(after, "netctl_stuck_attachments") == 0
    assert value(after, "netctl_journal_writes_total") > value(before,
                                                                "netctl_journal_writes_total")
    assert 0 < value(after, "netctl_journal_commits_total") <= value(
        after, "netctl_journal_writes_total")
    assert value(after, "netctl_journal_size_bytes") > 0
    assert series(after, "netctl_kube_watch_up") == []  # standalone: no Kubernetes series
    assert get(port, "/")[0] == 404


@pytest.mark.slow
def test_label_sets_stay_bounded_over_a_thousand_containers(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    """1,000 ADD+DEL pairs through the plain netctl-ipam plugin, 8 at a time: the
    series are the same few before and after, and no container id is a label value."""
    port = with_metrics(daemon)
    daemon.start()
    ns = netns()
    conf = {"cniVersion": "1.0.0", "name": "plain", "type": "bridge",
            "ipam": {"type": "netctl-ipam", "socket": daemon.socket,
                     "range": "10.142.0.0/16"}}
    containers = [f"bounded-{i:04d}-{secrets.token_hex(4)}" for i in range(1000)]

    def one(container: str) -> tuple[int, int]:
        add = exec_plugin(daemon.ipam_plugin, "ADD", conf, container=container, netns=ns,
                          cni_path=SYSTEM_CNI, timeout=60)
        rm = exec_plugin(daemon.ipam_plugin, "DEL", conf, container=container, netns=ns,
                         cni_path=SYSTEM_CNI, timeout=60)
        return add.rc, rm.rc

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(one, containers[:10]))
        first = scrape(port)
        codes += list(pool.map(one, containers[10:]))
    assert codes == [(0, 0)] * 1000
    after = scrape(port)
    assert value(after, "netctl_requests_total", verb="ADD", code="0") == 1000
    assert value(after, "netctl_requests_total", verb="DEL", code="0") == 1000
    assert set(after) ^ set(first) == set(), "the label sets grew with the containers"
    assert len(after) < 200, len(after)
    values = {v for (_, labels) in after for _, v in labels}
    assert not any(c in v for c in containers for v in values)


def test_the_log_names_the_bound_port(daemon: Daemon) -> None:
    daemon.settings["metrics-addr"] = "127.0.0.1:0"  # the kernel picks the port
    daemon.start()
    found = wait_for(lambda: re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics",
                                       daemon.log()), what="the metrics log line")
    port = int(found.group(1))
    assert port != 0, found.group(0)
    samples = scrape(port)
    assert value(samples, "netctl_requests_in_flight") == 0
    assert series(samples, "netctl_requests_in_flight") == [{}]


def status(daemon: Daemon) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(netctl_argv("status", "--socket", daemon.socket, "--json"),
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_status_exit_codes_standalone(daemon: Daemon) -> None:
    daemon.start()
    rc, doc = status(daemon)
    assert (rc, doc["ready"], doc["reasons"]) == (0, True, [])
    daemon.stop()
    rc, doc = status(daemon)
    assert rc == 2 and doc["ready"] is False
    assert "not reachable" in doc["reasons"][0], doc


@pytest.mark.servers("fake", "real")
def test_status_not_ready_while_the_api_server_was_never_listed(
        daemon: Daemon, tmp_path: Path, kube: Kube) -> None:
    """Kubernetes mode, the API server down before the first list: status exits 1 with
    the caches as reasons, STATUS answers 50; once the API server is back, 0."""
    kube.create("network-attachment-definitions", nad("cluster", "kube-system", ipam_bridge(
        "cluster", daemon.name("k0"), {"type": "netctl-ipam", "range": "10.143.0.0/24"})))
    port = with_metrics(daemon)
    daemon.settings.update({"kubeconfig": str(kube.kubeconfig(tmp_path / "kubeconfig")),
                            "node-name": "node-a", "api-timeout": 2})
    kube.create("nodes", node("node-a"))
    kube.stop()
    daemon.start()
    rc, doc = status(daemon)
    assert rc == 1 and doc["ready"] is False, doc
    assert any("pods cache" in r for r in doc["reasons"]), doc
    assert any("NetworkAttachmentDefinitions" in r for r in doc["reasons"]), doc
    res = daemon.cni("STATUS", "", None, daemon.conf("cluster"), ifname="")
    assert res.rc == 1 and res.out is not None and res.out["code"] == 50, res.stdout
    assert "pods cache" in res.out["msg"]
    down = scrape(port)
    assert value(down, "netctl_kube_watch_up", resource="pods") == 0
    assert value(down, "netctl_kube_api_responses_total", verb="list", resource="pods",
                 code="0") >= 1  # no answer: the API server is down
    assert value(down, "netctl_ready") == 0

    kube.start()
    wait_for(lambda: status(daemon)[0] == 0, 30, "status ready once the API server is back")
    assert daemon.cni("STATUS", "", None, daemon.conf("cluster"), ifname="").rc == 0
    up = scrape(port)
    assert value(up, "netctl_kube_watch_up", resource="pods") == 1
    assert value(up, "netctl_kube_watch_up", resource="network-attachment-definitions") == 1
    assert value(up, "netctl_kube_cache_age_seconds", resource="pods") >= 0
    assert value(up, "netctl_kube_api_requests_total", verb="list", resource="pods") >= 1
    daemon.stop()

