"""We test these aspects of ``netctl journal export`` and the daemon's ``journal-log``
(issue 21, item 2: history that outlives a node), on a real daemon, real netns and the real
bridge plugin with the central IPAM:

- after real ADDs, a DEL and a failed ADD, the export holds every operation once and
  every allocation and release once, field by field as the journal has them (times RFC
  3339 with a zone, to the millisecond; pod, uid, container, ifname, network, address,
  pool, origin, outcome, code and error), in time order, in both formats: JSON lines,
  and CSV with its header row and the same values;
- ``--since`` and ``--until`` cut the window; a time without a zone is read as UTC and
  said so;
- with ``journal-log: true`` and ``log-format: json`` every one of those events is a log
  line that parses, with the same fields as the export; with it off (the first run of the
  same journal) there is none;
- a large journal (the journal bench's simulated week) exports in bounded memory: the
  export process's peak RSS stays far below the database's size, and its first line
  arrives while it is still writing.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb
from netctl_kit.bench.journal import Simulation, write
from netctl_kit.harness import netctl_argv

from netctl.commands import cli
from netctl.journal.events import FIELDS
from netctl.journal.migrate import migrate
from netctl.journal.query import journal_path
from tests.conftest import Daemon

POOL = "10.143.0.0/27"
# runs ARGV… as its child and prints the child's peak RSS (its own small process forks it:
# a child forked by the test's process would count the test's memory as its own)
PEAK_RSS = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(f"peak-rss-kib={usage.ru_maxrss}", file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""
NODE = "node-a"


def utc(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def export(capsys: pytest.CaptureFixture[str], daemon: Daemon, *args: str
           ) -> tuple[str, str]:
    code = cli.main(["journal", "export", "--state-dir", str(daemon.state_dir),
                     "--node", NODE, *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out, out.err


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def expected(daemon: Daemon) -> list[dict[str, Any]]:
    """The events the journal's rows say happened, built from the tables themselves."""
    out: list[tuple[float, int, int, dict[str, Any]]] = []
    with daemon.read_only() as conn:
        ops = {o["id"]: o for o in journaldb.operation_rows(conn)}
        atts = journaldb.attachment_rows(conn)
        addresses = {a["id"]: journaldb.indexed_addresses(conn, a["id"]) for a in atts}
        allocations = journaldb.allocation_rows(conn)
    network_of = {a["id"]: a["network"] for a in atts}
    for op_id, op in ops.items():
        touched = [a for a in atts if op_id in (a["add_op"], a["del_op"])]
        addrs = [addr for a in touched for addr in addresses[a["id"]]]
        networks = list(dict.fromkeys(a["network"] for a in touched))
        name = op["pod_name"]
        out.append((op["started_at"], 0, op_id, {
            "node": NODE, "at": utc(op["started_at"]), "event": "operation", "op": op_id,
            "verb": op["verb"], "pod": f"{op['pod_namespace']}/{name}" if name else None,
            "uid": op["pod_uid"] or None, "container": op["container_id"] or None,
            "ifname": op["ifname"] or None,
            "network": ",".join(networks) or op["caller_network"] or None,
            "address": ",".join(addrs) or None, "pool": None, "origin": op["origin"],
            "state": op["state"], "code": op["code"], "error": op["error"],
            "reason": op["reason"], "finished": utc(op["finished_at"])}))
    for al in allocations:
        network = network_of[al["attachment_id"]]
        name = al["pod_name"]
        for rank, kind, op_id, at in ((1, "allocated", al["allocated_op"], al["allocated_at"]),
                                      (2, "released", al["released_op"], al["released_at"])):
            if at is None:
                continue
            out.append((at, rank, al["id"], {
                "node": NODE, "at": utc(at), "event": kind, "op": op_id,
                "verb": ops[op_id]["verb"],
                "pod": f"{al['pod_namespace']}/{name}" if name else None,
                "uid": al["pod_uid"] or None, "container": al["container_id"],
                "ifname": al["ifname"], "network": network, "address": al["address"],
                "pool": al["pool"], "origin": ops[op_id]["origin"], "state": None,
                "code": None, "error": None, "reason": ops[op_id]["reason"],
                "finished": None}))
    out.sort(key=lambda e: e[:3])
    return [e[3] for e in out]


def event_lines(daemon: Daemon) -> list[dict[str, Any]]:
    """The daemon's journal-event log lines (every line must parse as JSON)."""
    lines = [json.loads(line) for line in daemon.log().splitlines() if line.strip()]
    return [line for line in lines if line["logger"] == "netctl.journal.events"]


@pytest.mark.netns
def test_export_holds_every_operation_and_allocation_change_and_the_log_does_too(
        daemon: Daemon, netns: Callable[[], str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    daemon.add_network("blue", {"cniVersion": "1.0.0", "name": "blue", "plugins": [{
        "type": "bridge", "bridge": daemon.name("xb"), "isGateway": True, "ipam": {
            "type": "netctl-ipam", "range": POOL, "gateway": "10.143.0.1"}}]})
    daemon.add_network("broken", {"cniVersion": "1.0.0", "name": "broken",
                                  "plugins": [{"type": "fail"}]})
    daemon.settings["log-format"] = "json"
    daemon.start()  # journal-log off: no event lines
    blue = daemon.conf("blue")
    spaces = {k: netns() for k in ("quiet", "web", "job", "bad")}
    assert daemon.cni("ADD", "xquiet-1", spaces["quiet"], blue, pod="shop/quiet-1").rc == 0
    daemon.stop()
    assert event_lines(daemon) == []
    quiet_ops = {o["id"] for o in daemon.read(journaldb.operation_rows)}

    monkeypatch.setenv("NODE_NAME", NODE)  # the daemon's node, without Kubernetes mode
    daemon.settings["journal-log"] = True
    daemon.start()
    assert daemon.cni("ADD", "xweb-1", spaces["web"], blue, pod="shop/web-1",
                      args=("K8S_POD_UID=uid-web-1",)).rc == 0
    assert daemon.cni("ADD", "xjob-1", spaces["job"], blue, pod="ops/job-1").rc == 0
    assert daemon.cni("DEL", "xjob-1", spaces["job"], blue, pod="ops/job-1").rc == 0
    failed = daemon.cni("ADD", "xbad-1", spaces["bad"], daemon.conf("broken"),
                        pod="ops/bad-1")
    assert failed.rc != 0
    daemon.stop()

    want = expected(daemon)
    # the journal has what the test did: 4 ADDs and a DEL of the runtime, 3 addresses
    # allocated, 1 released
    kinds = [(e["event"], e["verb"], e["container"]) for e in want]
    assert sorted(k for k in kinds if k[0] == "operation") == sorted([
        ("operation", "ADD", "xquiet-1"), ("operation", "ADD", "xweb-1"),
        ("operation", "ADD", "xjob-1"), ("operation", "DEL", "xjob-1"),
        ("operation", "ADD", "xbad-1")])
    assert sorted(k for k in kinds if k[0] != "operation") == sorted([
        ("allocated", "ADD", "xquiet-1"), ("allocated", "ADD", "xweb-1"),
        ("allocated", "ADD", "xjob-1"), ("released", "DEL", "xjob-1")])

    got, _ = export(capsys, daemon)
    events = jsonl(got)
    assert events == want
    assert all(list(e) == list(FIELDS) for e in events)  # every field, in a stable order
    by = {(e["event"], e["verb"], e["container"]): e for e in events}
    web = by[("operation", "ADD", "xweb-1")]
    assert (web["pod"], web["uid"], web["ifname"], web["network"], web["state"],
            web["origin"]) == ("shop/web-1", "uid-web-1", "eth0", "default/blue", "done",
                               "runtime")
    assert web["address"] == by[("allocated", "ADD", "xweb-1")]["address"]
    assert web["address"].startswith("10.143.0.")
    bad = by[("operation", "ADD", "xbad-1")]
    assert bad["state"] != "done" and bad["code"] and bad["error"]
    released = by[("released", "DEL", "xjob-1")]
    assert released["address"] == by[("allocated", "ADD", "xjob-1")]["address"]
    assert released["pool"] == POOL
    times = [datetime.fromisoformat(e["at"]) for e in events]
    assert all(t.tzinfo is not None and t.utcoffset().total_seconds() == 0 for t in times)
    assert times == sorted(times)

    # CSV: the header, then the same events, empty for none
    text, _ = export(capsys, daemon, "--format", "csv")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == list(FIELDS)
    assert rows[1:] == [["" if e[k] is None else str(e[k]) for k in FIELDS] for e in want]

    # --since / --until: the events of the window only (a time without a zone: UTC, said)
    dels = [e for e in want if e["event"] == "operation" and e["verb"] == "DEL"]
    since = dels[0]["at"]
    got, err = export(capsys, daemon, "--since", since)
    assert jsonl(got) == [e for e in want if e["at"] >= since] and err == ""
    got, _ = export(capsys, daemon, "--until", since)
    assert jsonl(got) == [e for e in want if e["at"] < since]
    got, err = export(capsys, daemon, "--since", since.rstrip("Z"), "--format", "csv")
    assert "has no time zone: read as UTC" in err
    assert len(list(csv.reader(io.StringIO(got)))) == 1 + len(
        [e for e in want if e["at"] >= since])
    got, _ = export(capsys, daemon, "--since", "1h")
    assert jsonl(got) == want

    # the log: every event of the second run, one JSON line each, the export's fields
    logged = event_lines(daemon)
    assert [{k: line[k] for k in FIELDS} for line in logged] == [
        e for e in want if e["op"] not in quiet_ops]
    assert all({"time", "level", "msg"} <= line.keys() for line in logged)
    assert {line["level"] for line in logged} == {"info"}
    assert all(line["node"] == NODE for line in logged)


@pytest.mark.slow
def test_a_large_journal_exports_in_bounded_memory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = str(journal_path(state))
    migrate(path)
    week = Simulation(30_000).build()  # a file of ~115 MB; the export's RSS is ~26 MB
    write(path, week)
    size = os.path.getsize(path)
    events = len(week.ops) + len(week.allocs) + sum(
        1 for a in week.allocs if a.released is not None)

    fmt = "jsonl"  # CSV is the same stream through another writer (checked above)
    out = tmp_path / f"export.{fmt}"
    with open(out, "wb") as sink, subprocess.Popen(
            [sys.executable, "-c", PEAK_RSS, *netctl_argv(
                "journal", "export", "--state-dir", str(state), "--format", fmt)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        # the first event is out while the export still runs: it streams
        assert proc.poll() is None
        sink.write(first)
        while chunk := proc.stdout.read(1 << 16):
            sink.write(chunk)
        err = proc.stderr.read().decode()
    assert proc.wait() == 0, err
    lines = out.read_bytes().count(b"\n")
    assert lines == events
    peak = int(err.split("peak-rss-kib=")[1]) * 1024
    # the export holds a page of rows, never the journal: far below the file's size
    assert peak < size / 3, (peak, size)
