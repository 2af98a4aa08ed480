"""We test these aspects of ``netctl journal``'s text (:mod:`netctl.commands.journalview`), pure:
times as RFC 3339 with milliseconds, UTC with ``Z`` or local with its offset; every row of
every list in the document is a line, with ``-`` for nothing and a multi-line error on one
line; sections without rows are left out except the attachments' header; the document's
notes and its "older ones exist" flags become stderr notes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from netctl.commands.journalview import render, rfc3339

T = 1_764_114_067.123  # 2025-11-25T23:41:07.123Z


def test_rfc3339_utc_and_local() -> None:
    assert rfc3339(T) == "2025-11-25T23:41:07.123Z"
    assert rfc3339(None) == "-"
    local = rfc3339(T, local=True)
    assert local == datetime.fromtimestamp(T, UTC).astimezone().isoformat(
        timespec="milliseconds")
    assert datetime.fromisoformat(local).timestamp() == T  # the same instant, its offset
    assert local[-6] in "+-" and not local.endswith("Z")


def doc(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "attachments": [{"container": "c1", "pod": "", "network": "default/blue",
                         "ifname": "eth0", "addresses": [], "state": "removed", "since": T,
                         "until": None}],
        "allocations": [], "blocks": [], "operations": [], "older_attachments": False,
        "older_operations": False, "notes": []}
    return {**base, **extra}


def test_every_row_and_nothing_else() -> None:
    lines, notes = render(doc())
    assert notes == [] and len(lines) == 2
    assert lines[1].split() == ["c1", "-", "default/blue", "eth0", "-", "removed",
                                "2025-11-25T23:41:07.123Z", "-"]
    ops = [{"id": 7, "verb": "DEL", "container_id": "c1", "pod": "shop/web",
            "origin": "event", "state": "failed", "code": 107, "started_at": T,
            "reason": "netns /run/netns/x is gone", "error": "first\nsecond"}]
    lines, _ = render(doc(operations=ops))
    assert lines[2] == "" and lines[3].split()[:4] == ["ID", "VERB", "CONTAINER", "POD"]
    assert "netns /run/netns/x is gone" in lines[4] and lines[4].endswith("first second")


def test_notes_and_older_flags_go_to_stderr() -> None:
    _, notes = render(doc(notes=["--at: read as UTC"], older_attachments=True,
                          older_operations=True))
    assert notes[0] == "--at: read as UTC"
    assert "--limit 0" in notes[1] and "--since" in notes[2]
