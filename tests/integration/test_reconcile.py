"""We test these aspects of the reconciler on real netns, plugins and a real daemon: a pod
whose netns vanished without a DEL (node reboot, runtime crash) is found by
``netctl reconcile --dry-run`` (daemon up, and offline with the daemon down) and cleaned
by ``netctl reconcile`` and by the periodic reconcile: DEL through its chain from the
journal, its address released, the run journaled."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.journal import query
from tests.conftest import NETCTL, Daemon, attachment_states, bridge_ports, ip, wait_for

pytestmark = pytest.mark.netns


def reconcile(daemon: Daemon, *args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([NETCTL, "reconcile", "--socket", daemon.socket, "--state-dir",
                           str(daemon.state_dir), "--json", *args],
                          capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}


def setup_vanished_pod(daemon: Daemon, netns) -> tuple[str, str]:
    # the leak must stay until the reconciler is asked (or its round comes): no events
    daemon.settings["reconcile-events"] = False
    br = daemon.name("r0")
    daemon.add_network("recon", {"cniVersion": "1.0.0", "name": "recon", "plugins": [{
        "type": "bridge", "bridge": br,
        "ipam": {"type": "netctl-ipam", "range": "10.161.0.0/24"}}]})
    daemon.start()
    keep, gone = netns(), netns()
    conf = daemon.conf("recon")
    assert daemon.cni("ADD", "rc-keep", keep, conf).rc == 0
    assert daemon.cni("ADD", "rc-gone", gone, conf).rc == 0
    ip("netns", "del", gone)  # no DEL: the runtime crashed, the node rebooted
    return br, keep


def live_allocations(daemon: Daemon) -> list[str]:
    return [a["container_id"] for a in daemon.read(query.live_allocations)]


def test_reconcile_finds_and_cleans_a_vanished_pod(daemon: Daemon, netns) -> None:
    daemon.settings["reconcile-grace"] = 0
    br, keep = setup_vanished_pod(daemon, netns)
    rc, dry = reconcile(daemon, "--dry-run")
    assert rc == 0 and dry["dry_run"] is True
    assert [(a["container"], "is gone" in a["reason"]) for a in dry["plan"]["attachments"]] == [
        ("rc-gone", True)]
    assert live_allocations(daemon) == ["rc-keep", "rc-gone"]  # a dry run changes nothing

    rc, done = reconcile(daemon)
    assert rc == 0 and done["dry_run"] is False and done["errors"] == []
    assert attachment_states(daemon) == {"rc-keep": "attached", "rc-gone": "removed"}
    assert live_allocations(daemon) == ["rc-keep"]
    assert len(bridge_ports(br)) == 1
    ops = [(o["verb"], o["container_id"], o["origin"], o["state"])
           for o in daemon.read(journaldb.operation_rows, origin="reconcile")]
    assert ops == [("RECONCILE", "", "reconcile", "done"),
                   ("DEL", "rc-gone", "reconcile", "done")]
    rc, again = reconcile(daemon)
    assert rc == 0 and not any(again["plan"].values())
    assert daemon.cni("DEL", "rc-keep", keep, daemon.conf("recon")).rc == 0


def test_dry_run_plans_offline_with_the_daemon_down(daemon: Daemon, netns) -> None:
    setup_vanished_pod(daemon, netns)
    daemon.stop()
    rc, dry = reconcile(daemon, "--dry-run", "--grace", "0")
    assert rc == 0 and dry.get("offline") is True
    assert [a["container"] for a in dry["plan"]["attachments"]] == ["rc-gone"]
    rc, _ = reconcile(daemon)  # acting needs the daemon
    assert rc == 1


def test_periodic_reconcile_cleans_without_being_asked(daemon: Daemon, netns) -> None:
    daemon.settings.update({"reconcile-interval": 0.2, "reconcile-grace": 0})
    _, keep = setup_vanished_pod(daemon, netns)
    wait_for(lambda: attachment_states(daemon).get("rc-gone") == "removed", 20,
             "the periodic reconcile to DEL the pod")
    assert live_allocations(daemon) == ["rc-keep"]
    assert "attached" == attachment_states(daemon)["rc-keep"]
    assert daemon.cni("DEL", "rc-keep", keep, daemon.conf("recon")).rc == 0


def test_sigterm_stops_a_daemon_with_periodic_reconcile(daemon: Daemon) -> None:
    daemon.settings["reconcile-interval"] = 60
    daemon.start()
    assert daemon.stop(timeout=15) == 0
