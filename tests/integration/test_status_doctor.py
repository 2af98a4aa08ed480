"""We test these aspects of ``netctl status`` with a real daemon: it reports the daemon's
networks dir, and summarizes ``netctl doctor``'s warnings about the runtime's conf dir —
checked against that networks dir — without failing: a netctl conflist missing the
``portMappings`` its cluster network's portmap declares is named; once declared, no
warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netctl.harness import netctl_json
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
