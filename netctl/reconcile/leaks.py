"""The reconciler's acting shell: gather facts, plan (pure), carry the plan out, journal it.

Runs on demand (``netctl reconcile``), right after the start-up replay, and every
``reconcile-interval`` seconds in the daemon. A round first finishes the DELs the
plugin recorded while the daemon was down (:mod:`netctl.reconcile.pending`).
A run that finds work is an operation of its own (verb RECONCILE, origin
reconcile): begun with the plan as
its request, then finished with its outcome and errors. Each attachment is
DELeted through its own chain from the journal, serialized with the runtime's
requests for that container; allocations are released through the IPAM store
(one journaled RELEASE each); host links are deleted with pyroute2. A clean-up
that fails counts a failure on its attachment, and the next rounds leave it be
until its back-off passes (see :func:`netctl.engine.engine.retry_at`).
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import msgspec
import trio
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from netctl.engine.engine import Engine
from netctl.errors import CNIError
from netctl.ipam.store import IndexStore
from netctl.journal.records import OpEnd, OpStart
from netctl.reconcile.facts import gather
from netctl.reconcile.pending import finish_pending
from netctl.reconcile.plan import AllocationFact, Plan, plan

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


@dataclass
class Reconciler:
    engine: Engine
    ipam: IndexStore
    grace: float = 30.0
    pending: str | None = None  # the plugin's recorded DELs (netctl.reconcile.pending)

    async def run(self, *, dry_run: bool) -> dict[str, Any]:
        engine = self.engine
        if self.pending and not dry_run:
            recorded = await finish_pending(engine, self.pending)
            if recorded.finished or recorded.failed:
                log.info("reconcile: %d recorded DELs finished, %d failed: %s",
                         recorded.finished, len(recorded.failed), "; ".join(recorded.failed))
        facts = await trio.to_thread.run_sync(partial(
            gather, engine.journal.path, engine.admission.busy()))
        todo = plan(facts, self.grace)
        report: dict[str, Any] = {"dry_run": dry_run, "plan": todo.to_json(), "errors": []}
        if dry_run or todo.empty:
            return report
        op_id = await engine.journal.begin(OpStart(
            verb="RECONCILE", origin="reconcile", request=msgspec.json.encode(todo.to_json())))
        errors: list[str] = []
        try:
            errors = await self._carry_out(todo, facts.allocations)
        finally:
            with trio.CancelScope(shield=True):
                await engine.journal.finish(op_id, OpEnd(
                    state="failed" if errors else "done", error="; ".join(errors) or None))
        report["errors"] = errors
        if errors:
            log.warning("reconcile: %s", "; ".join(errors))
        log.info("reconcile: %d attachments DELeted, %d allocations released, %d links deleted",
                 len(todo.delete), len(todo.release), len(todo.unlink))
        return report

    async def _carry_out(self, todo: Plan, allocations: list[AllocationFact]) -> list[str]:
        engine = self.engine
        errors: list[str] = []
        by_id = {a.id: a for a in await engine.journal.live_attachments()}
        by_container: dict[str, list[Any]] = {}
        for att_id, container, _ in todo.delete:
            if att_id in by_id:
                by_container.setdefault(container, []).append(by_id[att_id])
        for container, atts in by_container.items():
            try:
                await engine.admission.serialized(container, "DEL", partial(
                    engine.delete_attachments, container, atts, OpStart(
                        verb="DEL", container_id=container, netns=atts[0].netns,
                        origin="reconcile"), "reconcile"))
            except CNIError as exc:
                errors.append(exc.msg)
        allocs = {a.id: a for a in allocations}
        for alloc_id, _, reason in todo.release:
            fact = allocs[alloc_id]
            addr = ipaddress.ip_address(fact.address)
            held = self.ipam.holder(fact.scope, addr.version, int(addr))
            if held is None or (held.owner.container_id, held.owner.ifname) != (
                    fact.container_id, fact.ifname):
                continue  # released (or taken again) since the facts were read
            await engine.journal.one_transaction(OpStart(
                verb="RELEASE", container_id=fact.container_id, ifname=fact.ifname,
                netns=fact.netns, origin="reconcile", request=reason.encode()), gone=[held])
            self.ipam.released([held])
        for name, _ in todo.unlink:
            failure = await trio.to_thread.run_sync(_unlink, name)
            if failure:
                errors.append(failure)
        return errors

    async def every(self, interval: float) -> None:
        """The daemon's reconcile rounds: the first at once (the daemon starts this right
        after its start-up replay, so what vanished while it was down is released within
        seconds), then every ``interval`` seconds (0: the first only). A failing round is
        logged and retried later."""
        while True:
            try:
                await self.run(dry_run=False)
            except (CNIError, OSError) as exc:
                log.warning("reconcile round failed: %s", exc)
            if interval <= 0:
                return
            await trio.sleep(interval)
