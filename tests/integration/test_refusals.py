"""We test these aspects of what netctl refuses, and of DELs that cannot succeed:

- an ADD whose CNI_NETNS exists but is not a network namespace (a regular file, a
  directory, a device) is refused with code 4 before anything is journaled or allocated;
- a network whose cniVersion one of its delegates does not speak (Debian's bridge stops
  at 1.0.0) is refused with code 1 while planning: nothing journaled, nothing held, and
  the runtime's DEL of that container succeeds;
- a delegate whose DEL keeps failing: the runtime's DEL fails (code 107) only while a
  retry may help — at once it succeeds, with a warning, when the delegate refuses for
  good (code 7), and after three failures otherwise — and the attachment is shown as
  stuck in ``netctl status`` and the reconciler's plan; the reconciler backs off on it,
  so a second round right after the first journals no new DEL.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.journal import query
from tests.conftest import NETCTL, Daemon, bridge_conf

pytestmark = pytest.mark.netns


def counts(daemon: Daemon) -> tuple[int, int, int]:
    n = daemon.read(journaldb.row_counts, ("operations", "attachments", "ipam_allocations"))
    return n["operations"], n["attachments"], n["ipam_allocations"]


def ipam_net(daemon: Daemon, name: str, version: str = "1.0.0") -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": [{
        "type": "bridge", "bridge": daemon.name("r"),
        "ipam": {"type": "netctl-ipam", "range": "10.123.0.0/24"}}]}


@pytest.mark.parametrize("kind", ["file", "directory", "device"])
def test_a_netns_that_is_not_one_is_code_4_before_anything_is_journaled(
        daemon: Daemon, tmp_path: Path, kind: str) -> None:
    daemon.add_network("rnet", ipam_net(daemon, "rnet"))
    daemon.start()
    path = {"file": tmp_path / "plain", "directory": tmp_path, "device": Path("/dev/null")}[kind]
    if kind == "file":
        path.write_text("")
    res = daemon.cni("ADD", "notns", str(path), daemon.conf("rnet"))
    assert res.rc == 1 and res.out is not None, res.stdout + res.stderr
    assert res.out["code"] == 4 and "is not a network namespace" in res.out["msg"], res.out
    assert counts(daemon) == (0, 0, 0)
    assert daemon.cni("DEL", "notns", str(path), daemon.conf("rnet")).rc == 0


def test_a_delegate_that_does_not_speak_the_version_is_code_1_while_planning(
        daemon: Daemon, netns: Any) -> None:
    daemon.add_network("newnet", ipam_net(daemon, "newnet", version="1.1.0"))
    daemon.start()
    ns = netns()
    res = daemon.cni("ADD", "toonew", ns, daemon.conf("newnet"))
    assert res.rc == 1 and res.out is not None, res.stdout + res.stderr
    assert res.out["code"] == 1, res.out
    assert "'bridge'" in res.out["msg"] and "1.1.0" in res.out["msg"], res.out
    assert counts(daemon) == (0, 0, 0)
    assert daemon.cni("DEL", "toonew", ns, daemon.conf("newnet")).rc == 0


def faildel_net(daemon: Daemon, delcode: int) -> None:
    daemon.add_network("fd", {"cniVersion": "1.0.0", "name": "fd", "plugins": [
        {"type": "faildel", "delcode": delcode}]})
    daemon.add_network("br", bridge_conf("br", daemon.name("b"), "10.124.0.0/24",
                                         ipam_dir=daemon.ipam_dir))


def netctl_json(daemon: Daemon, *args: str, rc: int = 0) -> dict[str, Any]:
    proc = subprocess.run([NETCTL, *args, "--json"], capture_output=True, text=True,
                          env={**os.environ}, check=False)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_a_del_refused_for_good_succeeds_at_once_and_the_attachment_is_stuck(
        daemon: Daemon, netns: Any) -> None:
    faildel_net(daemon, delcode=7)
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    assert daemon.cni("ADD", "stuck1", ns, conf, networks="fd").rc == 0
    res = daemon.cni("DEL", "stuck1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert "left to the reconciler" in res.stderr
    states = {a["network"]: a["state"] for a in daemon.read(query.attachments)}
    assert states == {"default/br": "removed", "default/fd": "removing"}
    status = netctl_json(daemon, "status", "--socket", daemon.socket, rc=3)  # degraded
    assert [(s["network"], s["failures"]) for s in status["stuck"]] == [("default/fd", 1)]

    # the reconciler leaves it alone until its back-off passes: no new DEL is journaled
    before = len(daemon.read(journaldb.operation_rows, verb="DEL"))
    for _ in range(2):
        report = netctl_json(daemon, "reconcile", "--socket", daemon.socket)
        assert report["plan"]["attachments"] == [], report
        assert [s["network"] for s in report["plan"]["stuck"]] == ["default/fd"]
    assert len(daemon.read(journaldb.operation_rows, verb="DEL")) == before


def test_a_del_that_keeps_failing_stops_failing_after_three_tries(
        daemon: Daemon, netns: Any) -> None:
    faildel_net(daemon, delcode=0)  # a crash: a retry might help
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    assert daemon.cni("ADD", "stuck2", ns, conf, networks="fd").rc == 0
    for attempt in (1, 2):
        res = daemon.cni("DEL", "stuck2", ns, conf)
        assert res.rc == 1 and res.out is not None and res.out["code"] == 107, (attempt, res)
    res = daemon.cni("DEL", "stuck2", ns, conf)
    assert res.rc == 0 and "left to the reconciler" in res.stderr, res.stdout + res.stderr
    assert [a["del_failures"] for a in daemon.read(journaldb.attachment_rows,
                                                   network="default/fd")] == [3]
