"""We test that the operator's tour (``deploy/tour.sh``: docs/operating.md's "Operating
netctl: a guide" is its output) runs on a real daemon and shows what the guide says it shows:
``netctl status`` exits 2 while the daemon is down and 0 when it is ready; the pools and
the allocations; the journal naming the pod that held an address at a past time; a
sandbox gone without a DEL found as a leak, planned by ``reconcile --dry-run``, DELeted by
``netctl reconcile`` and no longer a leak; a NAD with a typo making a stuck attachment:
``status`` degraded (3), ``forget`` refused while its netns exists, its address released
once it is gone, then forgotten and ready again; the metrics counting the requests; logfmt log
lines carrying the operation's identifiers. Its trap leaves nothing behind."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def blocks(out: str) -> dict[str, list[str]]:
    """The output of each `$ command`, by command (the last one of a repeated command
    under its own key with a counter)."""
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for line in out.splitlines():
        if line.startswith("$ "):
            key = line[2:]
            n = 1
            while key in found:
                n += 1
                key = f"{line[2:]} #{n}"
            current = found.setdefault(key, [])
        else:
            current.append(line)
    return found


def one(found: dict[str, list[str]], prefix: str) -> str:
    keys = [k for k in found if k.startswith(prefix)]
    assert keys, f"no `{prefix}` in the tour"
    return "\n".join(found[keys[0]])


def test_tour() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(["bash", str(REPO / "deploy" / "tour.sh")], capture_output=True,
                          text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = blocks(proc.stdout)
    statuses = [k for k in found if k.startswith("netctl status")]
    # down before the start and after SIGTERM (2), ready in between (0)
    exits = [next(line for line in found[k] if line.startswith("(exit")) for k in statuses]
    # … and degraded (3) while db-1's attachment is stuck, ready again once forgotten
    assert exits == ["(exit 2)", "(exit 0)", "(exit 0)", "(exit 3)", "(exit 0)", "(exit 2)"]
    degraded = found[statuses[3]]
    assert any(line.startswith("degraded") and "tour-db-1" in line for line in degraded)
    forgets = [k for k in found if k.startswith("netctl forget")]
    assert "still exists" in "\n".join(found[forgets[0]]) and "(exit 1)" in found[forgets[0]]
    assert "forgot 1 attachments of container tour-db-1" in "\n".join(found[forgets[1]])
    assert "did release the addresses of stuck attachment" in "\n".join(
        found["netctl reconcile --socket $TOUR/run/netctl.sock #2"])
    assert "FORGET" in one(found, "netctl journal --state-dir $TOUR/state --container")
    assert "ready: pid" in one(found, "netctl status --socket $TOUR/run/netctl.sock --cni")
    assert re.search(r"10\.251\.0\.0/28\s+10\.251\.0\.0/28\s+4\s+14\s+2\s+0\s+12",
                     one(found, "netctl ipam pools"))
    ip = one(found, "netctl journal --state-dir $TOUR/state --ip")
    assert "tour/web-2" in ip and "removed" in ip
    leaks = [k for k in found if k.startswith("netctl ipam leaks")]
    assert "netns-gone" in "\n".join(found[leaks[0]]) and "tour/web-3" in "\n".join(
        found[leaks[0]])
    assert "would DEL attachment" in one(found, "netctl reconcile --socket $TOUR/run/netctl"
                                         ".sock --dry-run")
    did = [k for k in found if k.startswith("netctl reconcile") and "dry-run" not in k]
    assert "did DEL attachment" in "\n".join(found[did[0]])
    assert "netns-gone" not in "\n".join(found[leaks[1]])  # cleaned
    assert 'netctl_requests_total{code="0",verb="ADD"} 3.0' in proc.stdout
    assert 'netctl_reconcile_findings_total{reason="netns-gone"} 1.0' in proc.stdout
    assert "_created" not in proc.stdout  # no creation-time series beside the counters
    log = [line for line in proc.stdout.splitlines() if line.startswith("time=")]
    assert any("verb=DEL" in line and "pod=tour/web-3" in line and "reconcile" in line
               for line in log)
    assert all(re.match(r"time=\S+ level=\w+ logger=\S+ msg=", line) for line in log)
    # the trap removed the daemon's namespaces, its bridge and its temp dir
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "ntour-" not in netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "ntour-br0" not in links
