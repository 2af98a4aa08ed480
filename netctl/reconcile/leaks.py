"""The reconciler's acting shell: gather facts, plan (pure), carry the plan out, journal it
(docs/operating.md, "Reconcile"): a RECONCILE operation whose DELs run in each container's
turn (``parallel`` at once, a busy container left for later), each release a journaled
RELEASE, each host link deleted.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
import trio

from netctl.cni import rtnl
from netctl.cni.netns import is_netns
from netctl.cni.request import Pod
from netctl.engine.admission import Admission
from netctl.engine.engine import Engine
from netctl.errors import INVALID_CONFIG, CNIError, describe
from netctl.ipam.store import Store
from netctl.journal.records import OpEnd, OpStart
from netctl.journal.store import Journal
from netctl.metrics import Metrics
from netctl.reconcile.events import Hints, concerned, netns_to_check
from netctl.reconcile.facts import gather, netns_exist
from netctl.reconcile.pending import finish_pending
from netctl.reconcile.plan import AllocationFact, Facts, Plan, plan

log = logging.getLogger("netctl.reconcile")

PARALLEL = 16  # containers DELeted at once by a round, at most


def _unlink(name: str) -> str | None:
    try:
        rtnl.delete_link(name)  # one gone already is fine
    except OSError as exc:
        return f"{name}: {exc}"
    return None


@dataclass(frozen=True)
class Later:
    """What a round on events leaves to look at again: the containers left alone for a
    request in flight (soon), and those holding an allocation no one holds that is
    younger than the grace (when the grace ends: seconds, by container)."""

    busy: frozenset[str] = frozenset()
    ripening: dict[str, float] = field(default_factory=dict)


@dataclass
class Reconciler:
    journal: Journal  # what is live, and where the reconciler's operations are journaled
    admission: Admission  # the containers' turns
    engine: Engine  # DELs through the chains, journaled as the runtime's are
    ipam: Store
    grace: float = 30.0
    pending: str | None = None  # the plugin's recorded DELs (netctl.reconcile.pending)
    parallel: int = PARALLEL  # containers DELeted at once
    metrics: Metrics = field(default_factory=Metrics)  # what the rounds found, by reason

    async def run(self, *, dry_run: bool) -> dict[str, Any]:
        """A whole round: the operation ends the disk refused, the recorded DELs, then every
        leak the plan finds, the sweep of leftover host veths, the sticky expiries."""
        if not dry_run and (written := await self.journal.write_unwritten()):
            log.info("reconcile: the ends of %d operations written, refused before", written)
        if self.pending and not dry_run:
            recorded = await finish_pending(self.engine, self.admission, self.pending)
            if recorded.finished or recorded.failed:
                log.info("reconcile: %d recorded DELs finished, %d failed: %s",
                         recorded.finished, len(recorded.failed), "; ".join(recorded.failed))
        facts = await self._facts(sweep=True)
        report, _ = await self._act(facts, plan(facts, self.grace), dry_run=dry_run,
                                    origin="reconcile")
        if not dry_run:
            report["sticky_expired"] = await self.expire_sticky()
        return report

    async def expire_sticky(self, now: float | None = None) -> int:
        """End the sticky reservations whose time is up; how many."""
        ended = self.ipam.index.expired(time.time() if now is None else now)
        if not ended:
            return 0
        await self.journal.ipam.end_reservations(ended)  # the store is told by the journal
        log.info("sticky reservations expired: %s", ", ".join(
            f"{r.address} ({r.identity})" for r in ended))
        return len(ended)

    async def run_for(self, hints: Hints) -> tuple[dict[str, Any], Later]:
        """A round on kernel events: the same plan, over the facts of the containers
        ``hints`` concern only (none: no read). The report, and what to look at again
        (:class:`Later`)."""
        live = self.journal.live
        paths = netns_to_check(live, hints)
        exists = await trio.to_thread.run_sync(netns_exist, paths) if paths else {}
        mine = concerned(live, hints, exists)
        if not mine:
            return {"dry_run": False, "plan": Plan().to_json(), "errors": []}, Later()
        facts = await self._facts(sweep=False, containers=mine)
        todo = plan(facts, self.grace)
        report, deferred = await self._act(facts, todo, dry_run=False, origin="event",
                                           why=hints.describe())
        return report, Later(deferred | (mine & facts.busy), todo.ripening)

    async def _facts(self, *, sweep: bool, containers: frozenset[str] | None = None
                     ) -> Facts:
        return await trio.to_thread.run_sync(partial(
            gather, self.journal.path, self.admission.busy(), sweep=sweep,
            containers=containers))

    async def _act(self, facts: Facts, todo: Plan, *, dry_run: bool, origin: str,
                   why: str = "") -> tuple[dict[str, Any], frozenset[str]]:
        report: dict[str, Any] = {"dry_run": dry_run, "plan": todo.to_json(), "errors": []}
        if dry_run or todo.empty:
            return report, frozenset()
        self.metrics.reconciled(todo.found)
        op_id, _ = await self.journal.begin(OpStart(
            verb="RECONCILE", origin=origin, request=msgspec.json.encode(todo.to_json())))
        errors: list[str] = []
        deferred: set[str] = set()
        async with self.journal.running(op_id, lambda exc: OpEnd(
                state="failed", error="; ".join(errors) or describe(exc))) as closing:
            await self._carry_out(todo, facts.allocations, origin, errors, deferred)
            closing.end = OpEnd(state="failed" if errors else "done",
                                error="; ".join(errors) or None)
        report["errors"] = errors
        name = "reconcile" if origin == "reconcile" else f"reconcile on events ({why})"
        if errors:
            log.warning("%s: %s", name, "; ".join(errors))
        log.info("%s: %d attachments DELeted, %d allocations released, %d stuck attachments' "
                 "addresses released, %d links deleted%s", name, len(todo.delete),
                 len(todo.release), len(todo.free), len(todo.unlink),
                 f"; {len(deferred)} containers busy, left for later" if deferred else "")
        return report, frozenset(deferred)

    async def _carry_out(self, todo: Plan, allocations: list[AllocationFact], origin: str,
                         errors: list[str], deferred: set[str]) -> None:
        by_container: dict[str, set[int]] = {}
        whys: dict[str, list[str]] = {}  # the plan's reasons, journaled with each DEL
        for att_id, container, why in todo.delete:
            by_container.setdefault(container, set()).add(att_id)
            if why not in whys.setdefault(container, []):
                whys[container].append(why)
        limiter = trio.CapacityLimiter(self.parallel)

        async def delete(container: str, ids: set[int]) -> None:
            async with limiter:
                try:
                    if await self.admission.delete_in_turn(container, partial(
                            self._delete, container, ids, origin, "; ".join(whys[container])),
                            skip_busy=True) is None:
                        deferred.add(container)  # a request came meanwhile: never under it
                except CNIError as exc:
                    errors.append(exc.msg)
                except OSError as exc:
                    errors.append(f"DEL of container {container}: {exc}")

        async with trio.open_nursery() as nursery:
            for container, ids in by_container.items():
                nursery.start_soon(delete, container, ids)
        allocs = {a.id: a for a in allocations}
        for alloc_id, _, reason in todo.release:
            fact = allocs[alloc_id]
            addr = ipaddress.ip_address(fact.address)
            held = self.ipam.index.holder(fact.scope, addr.version, int(addr))
            if held is None or (held.owner.container_id, held.owner.ifname) != (
                    fact.container_id, fact.ifname):
                continue  # released (or taken again) since the facts were read
            await self.journal.one_transaction(OpStart(
                verb="RELEASE", container_id=fact.container_id, ifname=fact.ifname,
                netns=fact.netns, origin=origin, request=reason.encode(), reason=reason),
                gone=[held])
        async with trio.open_nursery() as nursery:
            for att_id, container, reason in todo.free:
                nursery.start_soon(self._free_stuck, container, att_id, reason, origin,
                                   errors, deferred)
        for name, _ in todo.unlink:
            failure = await trio.to_thread.run_sync(_unlink, name)
            if failure:
                errors.append(failure)

    async def _free_stuck(self, container: str, att_id: int, reason: str, origin: str,
                          errors: list[str], deferred: set[str]) -> None:
        """Release the addresses of a stuck attachment whose netns is gone, without its DEL,
        in its container's turn, while it is still live and its netns still gone."""
        if container in self.admission.busy():
            deferred.add(container)
            return

        async def free() -> None:
            att = next((a for a in await self.journal.live_attachments(container)
                        if a.id == att_id), None)
            if att is None or await trio.to_thread.run_sync(is_netns, att.netns):
                return
            held = self.ipam.index.of_attachment(att_id)
            if not held:
                return
            await self.journal.one_transaction(OpStart(
                verb="RELEASE", container_id=container, ifname=att.ifname, netns=att.netns,
                pod=att.pod, origin=origin, request=f"attachment {att_id}: {reason}".encode(),
                reason=reason), gone=held)
            log.info("released %s of stuck attachment %d (%s as %s): %s",
                     ", ".join(a.address for a in held), att_id, att.network, att.ifname,
                     reason)

        try:
            await self.admission.serialized(container, "RELEASE", free)
        except CNIError as exc:
            errors.append(exc.msg)

    async def _delete(self, container: str, ids: set[int], origin: str, reason: str) -> int:
        """DEL the planned attachments of ``container`` still live (read again in its turn,
        so a DEL that ran meanwhile is not repeated); how many."""
        atts = [a for a in await self.journal.live_attachments(container)
                if a.id in ids]
        if atts:
            await self.engine.delete_attachments(container, atts, OpStart(
                verb="DEL", container_id=container, netns=atts[0].netns, pod=atts[0].pod,
                origin=origin, reason=reason), origin)
        return len(atts)

    async def pod_deleted(self, pod: Pod) -> list[str]:
        """Kubernetes mode: ``pod`` is gone from the API. DEL its live attachments, matched
        by UID (a StatefulSet's next pod has the same name), each container in its turn,
        skipping one with a request in flight; the containers DELeted."""
        if not pod.uid:
            return []
        mine: dict[str, set[int]] = {}
        for container in sorted(self.journal.live.of_pod(pod.uid)):
            for att in await self.journal.live_attachments(container):
                if att.pod == pod:
                    mine.setdefault(att.container_id, set()).add(att.id)
        done = []
        for container, ids in mine.items():
            try:
                if await self.admission.delete_in_turn(container, partial(
                        self._delete, container, ids, "pod-deleted", "the pod was deleted "
                        "through the API (its UID matched)"), skip_busy=True) is not None:
                    done.append(container)
            except CNIError as exc:
                log.warning("pod %s deleted: %s", pod.key, exc.msg)
        return done

    async def forget(self, prefix: str, *, ifname: str = "", network: str = "",
                     force: bool = False, who: str = "", why: str = "") -> dict[str, Any]:
        """``netctl forget`` (docs/operating.md): a container's live attachments marked
        removed without a DEL, their addresses released, as one FORGET operation. Refused
        (code 7) while their netns still exists, unless ``force``."""
        container = self.journal.live.container(prefix)

        async def act() -> dict[str, Any]:
            atts = [a for a in await self.journal.live_attachments(container)
                    if (not ifname or ifname in (a.ifname, a.caller_ifname))
                    and (not network or network in (a.network, a.caller_network))]
            if not atts:
                raise CNIError(INVALID_CONFIG, f"container {container} has no live "
                               f"attachment{' on ' + ifname if ifname else ''}"
                               f"{' of network ' + network if network else ''}")
            paths = sorted({a.netns for a in atts if a.netns})
            exists = await trio.to_thread.run_sync(netns_exist, paths)
            alive = [p for p in paths if exists[p]]
            if alive and not force:
                raise CNIError(INVALID_CONFIG, f"the netns of container {container} "
                               f"({', '.join(alive)}) still exists: its interfaces may be in "
                               "use, so netctl will not forget them; delete the pod (or its "
                               "netns) first, or pass --force")
            gone = [alloc for a in atts for alloc in self.ipam.index.of_attachment(a.id)]
            rows = [{"attachment": a.id, "network": a.network, "ifname": a.ifname,
                     "state": a.state, "failures": a.del_failures, "error": a.error,
                     "netns": a.netns, "netns_exists": exists.get(a.netns, False),
                     "addresses": [g.address for g in gone
                                   if g.owner.attachment_id == a.id]} for a in atts]
            request = msgspec.json.encode({"who": who, "why": why, "force": force,
                                           "attachments": rows})
            op_id = await self.journal.forget(OpStart(
                verb="FORGET", container_id=container, netns=atts[0].netns,
                ifname=ifname, caller_network=network, pod=atts[0].pod, origin="admin",
                request=request, reason=f"forgotten by {who or 'an operator'}"
                + (f": {why}" if why else "") + (" (forced)" if alive else "")), atts, gone)
            log.warning("forgot %d attachments of container %s at the request of %s (%s)%s: "
                        "released %s", len(atts), container, who or "an operator",
                        why or "no reason given", " with --force" if alive else "",
                        ", ".join(g.address for g in gone) or "no address")
            return {"operation": op_id, "container": container, "forced": bool(alive),
                    "forgotten": rows}

        return await self.admission.serialized(container, "FORGET", act)

    async def every(self, interval: float) -> None:
        """The daemon's rounds: the first at once, then every ``interval`` seconds (0: the
        first only); a failing round is logged."""
        while True:
            try:
                await self.run(dry_run=False)
            except (CNIError, OSError) as exc:
                log.warning("reconcile round failed: %s", exc)
            if interval <= 0:
                return
            await trio.sleep(interval)
