"""We test these aspects: `netctl bench churn` runs both sides on real namespaces, reports
numbers for each, sees no failures, and leaves nothing with its prefix behind."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import NETCTL, host_links, ip

pytestmark = [pytest.mark.netns, pytest.mark.slow]


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

    prefix = report["prefix"]
    assert prefix.startswith("ncb")
    assert host_links(prefix) == []
    netns = [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line]
    assert [n for n in netns if n.startswith(prefix)] == []
    assert not os.path.exists(report["root"])
    assert not os.path.exists(f"/proc/{report['daemon']['pid']}")
