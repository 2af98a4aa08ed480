"""We test these aspects of ``netctl status`` with a real daemon: it reports the daemon's
networks dir, and summarizes ``netctl doctor``'s warnings about the runtime's conf dir —
checked against that networks dir — without failing: a netctl conflist missing the
``portMappings`` its cluster network's portmap declares is named; once declared, no
warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from netctl_kit.harness import netctl_json, wait_for

from tests.conftest import Daemon, ipam_bridge

pytestmark = pytest.mark.netns


def test_status_summarizes_the_doctor(daemon: Daemon, tmp_path: Path) -> None:
    net = ipam_bridge("web", daemon.name("s0"), {"type": "netctl-ipam", "range": "10.133.0.0/24"})
    net["plugins"].append({"type": "portmap", "capabilities": {"portMappings": True}})
    daemon.add_network("web", net)
    daemon.start()
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    conf = daemon.conf("web", version="1.0.0")
    (conf_dir / "10-netctl.conf").write_text(json.dumps(conf))

    health = netctl_json("status", "--socket", daemon.socket, "--cni-conf-dir", str(conf_dir))
    assert health["ready"] is True and health["networks_dir"] == str(daemon.networks_dir)
    (warning,) = health["warnings"]
    assert "capability 'portMappings' is declared by portmap of clusterNetwork default/web" \
        in warning

    conf["capabilities"] = {"portMappings": True}
    (conf_dir / "10-netctl.conf").write_text(json.dumps(conf))
    health = netctl_json("status", "--socket", daemon.socket, "--cni-conf-dir", str(conf_dir))
    assert health["warnings"] == []


def test_status_shows_the_journals_size_and_retention(daemon: Daemon) -> None:
    """The journal's file, WAL, pages and free pages; the retention settings as configured
    (durations, ``off``) and the pruner's state once its first round (at start) ran."""
    daemon.settings.update({"journal-retention": "12h", "allocation-retention": "off"})
    daemon.start()
    health = wait_for(lambda: (h := netctl_json("status", "--socket", daemon.socket))
                      ["retention"]["last_prune"] is not None and h, what="the first prune round")
    size = health["journal_size"]
    assert size["bytes"] == size["file_bytes"] + size["wal_bytes"] > 0
    assert size["pages"] > 0 and size["free_pages"] >= 0 and size["page_size"] > 0
    assert size["auto_vacuum"] == "incremental"
    retention = health["retention"]
    assert (retention["journal_retention"], retention["allocation_retention"]) == ("12h", "off")
    assert retention["rounds"] >= 1 and retention["last_error"] == ""
    assert set(retention["pruned"]) == {"operations", "steps", "attachments", "allocations",
                                        "blocks"}
