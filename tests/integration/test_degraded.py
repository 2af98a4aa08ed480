"""We test these aspects of *degraded* with a real daemon, real network namespaces and the
real plugins (the metrics scraped and parsed with prometheus-client's own parser):

- an attachment stuck (its delegate refuses DEL for good: ``tests/plugins/faildel``) makes
  ``netctl status`` exit 3 naming the attachment, in text and in JSON, while the daemon
  stays ready: the STATUS verb succeeds, ``netctl_ready`` is 1 and ``netctl_degraded`` 1;
  ``--degraded-ok`` exits 0 (the probe's flag);
- a small pool filled to ``pool-degraded-at`` makes it degraded naming the pool and its
  usage; one address freed, it is ready again (exit 0, the gauge 0);
- Kubernetes mode against the fake API server: a scrape has ``process_*``,
  ``netctl_build_info`` and the API's answers by code (2xx for the lists and watches, 404
  for the GET of a pod the API does not have).

Subnets: 10.237.0.0/24, 10.237.1.0/29, 10.237.2.0/24."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import harness, journaldb
from netctl_kit.harness import CNIResult, netctl_argv
from netctl_kit.kubefake import nad, node

from netctl import __version__
from tests.conftest import Daemon, Kube, free_port, ipam_bridge, wait_for
from tests.integration.test_metrics import scrape, value

pytestmark = pytest.mark.netns


def status(daemon: Daemon, *flags: str) -> tuple[int, str]:
    proc = subprocess.run(netctl_argv("status", "--socket", daemon.socket, *flags),
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout


def status_json(daemon: Daemon) -> tuple[int, dict[str, Any]]:
    rc, out = status(daemon, "--json")
    return rc, json.loads(out)


def with_metrics(daemon: Daemon) -> int:
    port = free_port()
    daemon.settings["metrics-addr"] = f"127.0.0.1:{port}"
    return port


def test_a_stuck_attachment_is_degraded_and_still_ready(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    port = with_metrics(daemon)
    daemon.add_network("fd", {"cniVersion": "1.0.0", "name": "fd", "plugins": [
        {"type": "faildel", "delcode": 7}]})
    daemon.add_network("br", ipam_bridge("br", daemon.name("d0"), {
        "type": "netctl-ipam", "range": "10.237.0.0/24"}))
    daemon.start()
    rc, doc = status_json(daemon)
    assert (rc, doc["state"], doc["degraded"], doc["degraded_reasons"]) == (
        0, "ready", False, [])
    assert value(scrape(port), "netctl_degraded") == 0

    ns = netns()
    conf = daemon.conf("br")
    assert daemon.cni("ADD", "stuck-c1", ns, conf, networks="fd").rc == 0
    res = daemon.cni("DEL", "stuck-c1", ns, conf)  # refused for good: left stuck
    assert res.rc == 0, res.describe()
    (att,) = [a["id"] for a in daemon.read(journaldb.attachment_rows, network="default/fd")
              if a["del_failures"] > 0]

    rc, doc = status_json(daemon)
    assert rc == 3, doc
    assert (doc["ready"], doc["reasons"], doc["state"], doc["degraded"]) == (
        True, [], "degraded", True)
    (reason,) = doc["degraded_reasons"]
    assert f"attachment {att} of container stuck-c1 (default/fd net1) is stuck" in reason
    assert "faildel" in reason, reason
    rc, text = status(daemon)
    assert rc == 3
    lines = text.splitlines()
    assert lines[0].startswith("daemon       degraded: pid "), lines[0]
    assert f"degraded     {reason}" in lines
    assert status(daemon, "--degraded-ok")[0] == 0

    ok = daemon.cni("STATUS", "", None, conf, ifname="")  # the CNI verb: still serving
    assert ok.rc == 0, ok.describe()
    got = scrape(port)
    assert value(got, "netctl_ready") == 1 and value(got, "netctl_degraded") == 1
    assert value(got, "netctl_stuck_attachments") == 1


def ipam(daemon: Daemon, verb: str, container: str) -> CNIResult:
    conf = {"cniVersion": "1.0.0", "name": "tiny", "type": "bridge", "ipam": {
        "type": "netctl-ipam", "socket": daemon.socket, "range": "10.237.1.0/29"}}
    return harness.exec_plugin(daemon.ipam_plugin, verb, conf, container=container,
                               timeout=60)


def test_a_pool_filled_to_the_threshold_is_degraded_until_freed(daemon: Daemon) -> None:
    """A /29 holds 6 assignable addresses; at 0.5 the third makes the daemon degraded."""
    port = with_metrics(daemon)
    daemon.settings["pool-degraded-at"] = 0.5
    daemon.start()
    for i in range(2):
        assert ipam(daemon, "ADD", f"tiny-{i}").rc == 0
    rc, doc = status_json(daemon)
    (pool,) = doc["pools"]
    assert (rc, doc["degraded"], pool["size"], pool["used"], doc["pool_degraded_at"]) == (
        0, False, 6, 2, 0.5)
    assert "10.237.1.0/29" in pool["pool"]

    assert ipam(daemon, "ADD", "tiny-2").rc == 0
    rc, doc = status_json(daemon)
    assert (rc, doc["ready"], doc["state"]) == (3, True, "degraded"), doc
    assert doc["degraded_reasons"] == [
        f"pool {pool['pool']} is nearly exhausted: 3 of its 6 addresses taken (50%; "
        "pool-degraded-at 0.5); an ADD on it gets code 100 once none is left"]
    rc, text = status(daemon)
    assert rc == 3 and f"pools        1 known, fullest {pool['pool']}: 3 of 6 taken (50%); " \
        "degraded at 50%" in text.splitlines(), text
    assert value(scrape(port), "netctl_degraded") == 1

    # a restart knows the pool from the journal (its size stored as text): the same answer
    daemon.stop()
    daemon.start()
    rc, doc = status_json(daemon)
    assert (rc, doc["state"], doc["pools"]) == (3, "degraded", [pool | {"used": 3,
                                                                        "fraction": 0.5}]), doc

    assert ipam(daemon, "DEL", "tiny-2").rc == 0
    rc, doc = status_json(daemon)
    assert (rc, doc["state"], doc["degraded_reasons"]) == (0, "ready", [])
    assert value(scrape(port), "netctl_degraded") == 0


@pytest.mark.servers("fake", "real")
def test_a_kubernetes_scrape_has_the_process_the_build_and_api_answers_by_code(
        daemon: Daemon, netns: Callable[[], str], tmp_path: Path, kube: Kube) -> None:
    kube.create("nodes", node("node-a"))  # the daemon is not ready without its Node
    kube.create("network-attachment-definitions", nad("cluster", "kube-system", ipam_bridge(
        "cluster", daemon.name("k0"), {"type": "netctl-ipam", "range": "10.237.2.0/24"})))
    port = with_metrics(daemon)
    daemon.settings.update({"kubeconfig": str(kube.kubeconfig(tmp_path / "kubeconfig")),
                            "node-name": "node-a", "api-timeout": 3, "pod-wait": 0.2})
    daemon.start()
    kube.wait_watches(3)
    wait_for(lambda: status_json(daemon)[0] == 0, 30, "ready")
    # a pod the API does not have: the ADD waits pod-wait, GETs it, and hears 404
    res = daemon.cni("ADD", "ghost-c1", netns(), daemon.conf("cluster", "1.0.0"),
                     pod="default/ghost")
    assert res.rc == 1, res.describe()
    got = scrape(port)
    assert value(got, "netctl_build_info", version=__version__) == 1
    assert value(got, "process_resident_memory_bytes") > 0
    assert value(got, "process_open_fds") > 0
    assert value(got, "process_start_time_seconds") > 0
    assert value(got, "process_cpu_seconds_total") > 0
    assert value(got, "netctl_ready") == 1 and value(got, "netctl_degraded") == 0
    answers = "netctl_kube_api_responses_total"
    assert value(got, answers, verb="list", resource="pods", code="2xx") >= 1
    assert value(got, answers, verb="watch", resource="pods", code="2xx") >= 1
    assert value(got, answers, verb="get", resource="pods", code="404") == 1
    assert kube.count("get", "pods") == 1
    daemon.stop()

