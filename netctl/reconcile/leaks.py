"""The reconciler's acting shell: gather facts, plan (pure), carry the plan out, journal it.

Runs on demand (``netctl reconcile``) and every ``reconcile-interval`` seconds in
the daemon. Each attachment is DELeted through its own chain from the journal,
serialized with the runtime's requests for that container; allocations are
released through the IPAM backend; host links are deleted with pyroute2. The
run is an operation of its own (verb RECONCILE, origin reconcile) whose request
column holds the plan, and each DEL or release is journaled as usual.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import msgspec
import trio
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from netctl.engine.engine import Engine
from netctl.errors import CNIError
from netctl.reconcile.facts import gather
from netctl.reconcile.plan import Plan, plan

log = logging.getLogger("netctl.reconcile")


def _unlink(name: str) -> str | None:
    try:
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=name)
            if found:
                ipr.link("del", index=found[0])
    except NetlinkError as exc:
        return f"{name}: {exc}"
    return None


async def reconcile(engine: Engine, *, dry_run: bool, grace: float) -> dict[str, Any]:
    facts = await trio.to_thread.run_sync(partial(gather, engine.journal.path,
                                                  engine.busy_containers()))
    todo = plan(facts, grace)
    report: dict[str, Any] = {"dry_run": dry_run, "plan": todo.to_json(), "errors": []}
    if dry_run or todo.empty:
        return report
    await engine.journal.whole_operation(
        "RECONCILE", "", _nothing, origin="reconcile", request=msgspec.json.encode(
            todo.to_json()))
    report["errors"] = await _carry_out(engine, todo, facts.allocations)
    if report["errors"]:
        log.warning("reconcile: %s", "; ".join(report["errors"]))
    log.info("reconcile: %d attachments DELeted, %d allocations released, %d links deleted",
             len(todo.delete), len(todo.release), len(todo.unlink))
    return report


async def _nothing(db: Any, op_id: int) -> None:
    return None


async def _carry_out(engine: Engine, todo: Plan, allocations: list[Any]) -> list[str]:
    errors: list[str] = []
    by_id = {a.id: a for a in await engine.journal.live_attachments()}
    by_container: dict[str, list[Any]] = {}
    for att_id, container, _ in todo.delete:
        if att_id in by_id:
            by_container.setdefault(container, []).append(by_id[att_id])
    for container, atts in by_container.items():
        try:
            await engine.serialized_del(container, partial(
                engine.delete_attachments, container, atts, "reconcile", origin="reconcile"))
        except CNIError as exc:
            errors.append(exc.msg)
    allocs = {a.id: a for a in allocations}
    backend = engine.runner.ipam
    for alloc_id, _, reason in todo.release:
        alloc = allocs[alloc_id]

        async def release(db: Any, op_id: int, alloc: Any = alloc) -> None:
            if alloc.attachment_id is not None:
                await backend.release(db, op_id=op_id, attachment_id=alloc.attachment_id)
            else:
                await backend.release(db, op_id=op_id, container_id=alloc.container_id,
                                      ifname=alloc.ifname, pools=[alloc.pool])

        await engine.journal.whole_operation("RELEASE", alloc.container_id, release,
                                             ifname=alloc.ifname, netns=alloc.netns,
                                             origin="reconcile", request=reason.encode())
    for name, _ in todo.unlink:
        failure = await trio.to_thread.run_sync(_unlink, name)
        if failure:
            errors.append(failure)
    return errors


async def reconcile_every(engine: Engine, interval: float, grace: float) -> None:
    """The daemon's periodic reconcile; a failing round is logged and retried next time."""
    while True:
        await trio.sleep(interval)
        try:
            await reconcile(engine, dry_run=False, grace=grace)
        except (CNIError, OSError) as exc:
            log.warning("periodic reconcile failed: %s", exc)
