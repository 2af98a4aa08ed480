"""The read-only answers about one node: its journal, its pools, its leaks — one function
each, used by the local commands (``netctl journal``, ``netctl ipam pools|leaks``) and by
the daemon's query endpoint (:mod:`netctl.kube.queryserver`, what ``kubectl netctl`` asks)
alike, so the two cannot answer differently. Each opens the journal read-only (plain
sqlite3: it works while the daemon writes and while it is down), answers one document, and
closes it; nothing here writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from netctl.journal import query
from netctl.journal.query import Filters


def journal(state_dir: str | Path, filters: Filters) -> dict[str, Any]:
    """``netctl journal``'s document (:func:`netctl.journal.query.journal`)."""
    conn = query.connect(state_dir)
    try:
        return query.journal(conn, filters)
    finally:
        conn.close()


def pools(state_dir: str | Path) -> dict[str, Any]:
    """``netctl ipam pools``: every pool with its size, use and blocks."""
    conn = query.connect(state_dir)
    try:
        return {"pools": query.pools(conn)}
    finally:
        conn.close()


def leaks(state_dir: str | Path, grace: float = 0.0) -> dict[str, Any]:
    """``netctl ipam leaks``: the live addresses nothing live holds (the reconciler's
    plan, from the journal alone: no host link is read)."""
    from netctl.reconcile.facts import gather
    from netctl.reconcile.plan import leaks as leaked
    from netctl.reconcile.plan import plan

    path = query.journal_path(state_dir)
    if not path.exists():
        raise FileNotFoundError(f"no journal at {path}")
    facts = gather(path, links={})
    return {"leaks": leaked(facts, plan(facts, grace))}
