"""We test that ``netctl status`` without ``--json`` (:func:`netctl.commands.statusview.render`)
says what an operator looks for first: ready or not and why, the journal's size, what
the replay closed, stuck attachments, the events, and in Kubernetes mode the caches and
the cluster IPAM — and that it copes with a document missing the keys another version
does not send."""

from __future__ import annotations

from netctl.commands.statusview import ago, render, size

READY = {
    "ready": True, "reasons": [], "version": "0.1.0", "pid": 42, "in_flight": 1,
    "queued": 0, "served": 9, "uptime_seconds": 7200.0, "socket": "/run/netctl.sock",
    "journal": "/var/lib/netctl/journal.db", "journal_writes": 24, "journal_commits": 20,
    "journal_size": {"bytes": 3 * 1024 * 1024, "wal_bytes": 4096, "free_pages": 3},
    "retention": {"journal_retention": "7d", "allocation_retention": "90d",
                  "last_prune": 1000.0, "rounds": 2, "pruned": {"operations": 5, "steps": 7},
                  "vacuumed_pages": 12, "last_error": ""},
    "replay": {"operations": 2, "attachments": 3, "containers": 2, "failed": [],
               "recorded_dels": {"finished": 1}},
    "stuck": [{"attachment": 7, "container": "c1", "network": "default/br",
               "ifname": "eth0", "failures": 3, "error": "bridge DEL failed"}],
    "events": {"sources": ["netlink", "netns-dirs"], "batches": 4,
               "attachments_reconciled": 2, "allocations_released": 1, "events_lost": 0},
    "kubernetes": None,
}


def test_ready_daemon() -> None:
    lines = render(READY, [], now=1060.0)
    text = "\n".join(lines)
    assert lines[0].startswith("daemon") and "ready: pid 42" in lines[0] and "up 2.0 h" in lines[0]
    assert "9 served (CNI and admin), 1 in flight, 0 queued" in text
    assert "journal.db: 3.0 MiB (WAL 4.0 KiB, 3 free pages), 24 writes in 20 commits" in text
    assert "operations 7d, allocations 90d; last round 60 s ago, 2 rounds, 12 rows pruned" \
        in text
    assert "replay closed 2 unfinished operations, undid 3 attachments of 2 containers, " \
        "finished 1 DELs" in text
    assert "1 attachments whose DEL failed" in text
    assert "attachment 7 of c1 (default/br eth0): 3 failures, bridge DEL failed" in text
    assert "netlink, netns-dirs: 4 batches, 2 attachments reconciled" in text
    assert "NOT READY" not in text and "kubernetes" not in text


def test_not_ready_with_reasons_and_warnings() -> None:
    doc = {**READY, "ready": False, "reasons": ["the journal is not writable"],
           "stuck": [], "events": None}
    lines = render(doc, ["no conf has a netctl-cni plugin"], now=1060.0)
    assert "NOT READY" in lines[0]
    assert "not ready    the journal is not writable" in lines
    assert "warning      no conf has a netctl-cni plugin (netctl doctor)" in lines
    assert any("(none)" in line for line in lines)
    assert any(line.startswith("events") and "off" in line for line in lines)


def test_kubernetes_mode() -> None:
    doc = {**READY, "kubernetes": {
        "node": "node-a", "api_server": "https://10.0.0.1:6443",
        "pods": {"state": "watching", "objects": 12, "age_seconds": 3.0},
        "nads": {"state": "listing", "objects": 0, "age_seconds": None},
        "network_status_failures": 2, "network_status_required": True,
        "hotplug": {"rounds": 3, "attached": 4, "detached": 1, "failed": 1, "not_retried": 1,
                    "running": 0},
        "ipam": {"ready": False, "blocks_held": ["p 10.0.0.0/26", "p 10.0.0.64/26"],
                 "claims": 2, "releases": 0, "handovers": 1, "borrowed": 0, "lent": 1}}}
    text = "\n".join(render(doc, [], now=1060.0))
    assert "node node-a, API server https://10.0.0.1:6443" in text
    assert "pods: watching, 12 cached, heard from 3 s ago" in text
    assert "nads: listing, 0 cached, heard from never" in text
    assert "network-status failures 2 (required)" in text
    assert "hot-plug: 4 attached, 1 detached, 1 failed, 1 pods not retried until their " \
        "annotation changes" in text
    assert "cluster IPAM NOT ready: 2 blocks held, 2 claims, 0 releases, 1 hand-overs" in text


def test_a_sparse_document() -> None:
    """An older daemon's document: nothing but ready and pid; no exception, no retention."""
    lines = render({"ready": True, "pid": 1}, [])
    assert lines[0].startswith("daemon") and not any(line.startswith("retention")
                                                      for line in lines)


def test_units() -> None:
    assert [size(n) for n in (0, 1023, 1024, 5 * 1024 ** 3)] == \
        ["0 B", "1023 B", "1.0 KiB", "5.0 GiB"]
    assert [ago(s) for s in (5, 600, 7200, 3 * 86400)] == ["5 s", "10 min", "2.0 h", "3.0 d"]


def test_degraded_with_reasons_and_pools() -> None:
    doc = {**READY, "degraded": True, "pool_degraded_at": 0.9, "degraded_reasons": [
        "attachment 7 of container c1 (default/br eth0) is stuck: its clean-up failed 3 times",
        "pool tiny/10.236.0.0/29 is exhausted: 6 of its 6 addresses taken"],
        "pools": [{"pool": "big", "size": 254, "used": 3, "fraction": 0.0118},
                  {"pool": "tiny/10.236.0.0/29", "size": 6, "used": 6, "fraction": 1.0}]}
    lines = render(doc, [], now=1060.0)
    assert lines[0].startswith("daemon       degraded: pid 42"), lines[0]
    assert "degraded     attachment 7 of container c1 (default/br eth0) is stuck: its " \
        "clean-up failed 3 times" in lines
    assert "degraded     pool tiny/10.236.0.0/29 is exhausted: 6 of its 6 addresses taken" \
        in lines
    assert "pools        2 known, fullest tiny/10.236.0.0/29: 6 of 6 taken (100%); degraded " \
        "at 90%" in lines
    off = render({**doc, "degraded": False, "degraded_reasons": [], "pool_degraded_at": 0},
                 [], now=1060.0)
    assert off[0].startswith("daemon       ready:") and "pool check off" in "\n".join(off)
    assert not any(line.startswith("pools") for line in render(READY, [], now=1060.0))


def test_the_state_is_the_daemons_word_and_the_exit_code_follows_it() -> None:
    from netctl.commands.cli import status_code
    from netctl.commands.statusview import state_of

    # the daemon's document says its state; the commands take it as it is
    assert state_of({"state": "degraded", "ready": True, "degraded": True}) == "degraded"
    assert state_of({"state": "down", "ready": False}) == "down"
    # a daemon older than the field: derived the same way as the daemon decides it
    assert state_of({"ready": False, "degraded": True}) == "not ready"
    assert state_of({"ready": True, "degraded": True}) == "degraded"
    assert state_of({"ready": True}) == "ready"
    codes = [status_code({"state": s}) for s in ("ready", "not ready", "down", "degraded")]
    assert codes == [0, 1, 2, 3]
    assert status_code({"state": "degraded"}, degraded_ok=True) == 0
