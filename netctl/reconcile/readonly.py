"""The read-only answers about one node (its journal, pools, leaks), one function each, for
the local commands and the daemon's query endpoint (:mod:`netctl.kube.queryserver`) alike."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

from netctl.journal import query
from netctl.journal.query import Filters


def journal(state_dir: str | Path, filters: Filters) -> dict[str, Any]:
    """``netctl journal``'s document (:func:`netctl.journal.query.journal`)."""
    with closing(query.connect(state_dir)) as conn:
        return query.journal(conn, filters)


def pools(state_dir: str | Path) -> dict[str, Any]:
    """``netctl ipam pools``: every pool with its size, use and blocks."""
    with closing(query.connect(state_dir)) as conn:
        return {"pools": query.pools(conn)}


def leaks(state_dir: str | Path, grace: float = 0.0) -> dict[str, Any]:
    """``netctl ipam leaks``: the live addresses nothing live holds (the reconciler's
    plan, from the journal alone: no host link is read)."""
    from netctl.reconcile.facts import gather
    from netctl.reconcile.plan import leaks as leaked
    from netctl.reconcile.plan import plan

    facts = gather(query.existing_journal(state_dir), links={})
    return {"leaks": leaked(facts, plan(facts, grace))}
