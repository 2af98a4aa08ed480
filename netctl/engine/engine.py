"""The engine: one CNI invocation → journaled, concurrent, compensated delegate chains
(docs/cni.md). The verbs are a table (:data:`VERBS`); :meth:`Engine.handle` runs the handler
in the container's turn. A failed ADD DELs every step that started, shielded, within its
own deadline. A runtime's DEL fails (code 107) only while retrying can help: not after a
delegate refused for good (:data:`PERMANENT`) nor after ``MAX_DEL_FAILURES``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio

from netctl.cni import versions
from netctl.cni.hostroot import HostRoot
from netctl.cni.netns import netns_state
from netctl.cni.request import Invocation
from netctl.cni.routes import set_default_routes
from netctl.engine import devices, gateways, readiness
from netctl.engine.admission import Admission
from netctl.engine.chains import Chains, Run, StepError, del_end, names, retry_at
from netctl.engine.choice import Resolver, Selector
from netctl.engine.conf import Call, NetctlConf
from netctl.engine.cutover import Cutover, ForeignDels
from netctl.engine.devices import DeviceSource
from netctl.engine.plan import plan
from netctl.engine.verbs import ANY, Reply, Verb, admit, container_of
from netctl.errors import (
    CANCELLED,
    DEL_INCOMPLETE,
    INCOMPATIBLE_VERSION,
    INVALID_CONFIG,
    INVALID_ENVIRONMENT,
    IO_FAILURE,
    TRY_AGAIN_LATER,
    UNKNOWN_CONTAINER,
    UNSUPPORTED_FIELD,
    CNIError,
    NotListedYet,
    Refusal,
    describe,
    first_error,
)
from netctl.journal.records import Attachment, OpEnd, OpStart
from netctl.journal.store import Journal
from netctl.metrics import Metrics

log = logging.getLogger("netctl.engine")
MAX_DEL_FAILURES = 3  # a runtime's DEL of one attachment fails at most this often
PERMANENT = frozenset({INCOMPATIBLE_VERSION, UNSUPPORTED_FIELD, INVALID_ENVIRONMENT,
                       INVALID_CONFIG})  # no retry repairs these


@dataclass
class Limits:
    compensate_timeout: float = 30.0
    gc_grace: float = 30.0  # GC never collects attachments younger than this
    readiness_wait: float = 45.0  # an ADD waits this long for readinessindicatorfile


class DelIncomplete(CNIError):
    """A DEL that could not remove everything: what was kept, and what a retry cannot help."""

    def __init__(self, msg: str, kept: list[Attachment], permanent: set[int],
                 details: str = "") -> None:
        super().__init__(DEL_INCOMPLETE, msg, details)
        self.kept, self.permanent = kept, permanent


def failed_end(exc: BaseException) -> OpEnd:
    """An operation's end when it raised ``exc``: failed, or cancelled."""
    cause = first_error(exc)
    return OpEnd(state="failed", code=cause.code if cause else None,
                 error=cause.msg if cause else "cancelled")


def interrupted_del(op: OpStart, atts: list[Attachment], outcome: dict[int, list[StepError]],
                    exc: BaseException) -> OpEnd:
    """A DEL's end when ``exc`` interrupted it: what finished removed, the rest kept."""
    log.warning("DEL (%s) interrupted: %s", op.origin, describe(exc))
    cause = first_error(exc)
    return del_end("failed", cause.code if cause else CANCELLED, describe(exc), atts, outcome)


AfterAdd = Callable[[Invocation, list[Attachment]], Awaitable[str]]
Refused = Callable[[Invocation, Refusal], Awaitable[None]]  # told to the refused pod
Health = Callable[[], list[str]]  # why the daemon cannot serve ADDs now (empty: ready)


DEL_REASONS = {  # the reason journaled with a runtime's DEL that did not come straight
    "plugin-record": "the runtime's DEL, recorded by the plugin while the daemon was down",
}


class Engine:
    def __init__(self, journal: Journal, chains: Chains, root: HostRoot, networks: Resolver,
                 selector: Selector, admission: Admission, limits: Limits | None = None,
                 after_add: AfterAdd | None = None, health: Health | None = None,
                 metrics: Metrics | None = None, cutover: Cutover | None = None,
                 netns_unseen: str = "", devices: DeviceSource | None = None,
                 refused: Refused | None = None) -> None:
        self.journal = journal
        self.chains = chains
        self.root = root  # where the host's files are seen
        self.networks = networks
        self.selector = selector
        self.admission = admission
        self.limits = limits or Limits()
        self.after_add = after_add  # Kubernetes mode writes the pod's network-status
        self.health = health  # the daemon's readiness, for the STATUS verb
        self.metrics = metrics or Metrics()
        self.cutover = cutover or Cutover()
        self.foreign = ForeignDels(self.cutover, journal, chains, networks)  # cutover.py
        self.netns_unseen = netns_unseen  # why a netns may be missing (netctl.cni.mounts)
        self.devices = devices  # a pod's allocated devices (Kubernetes mode)
        self.refused = refused  # Kubernetes mode gives a refused pod a Warning Event

    # -- entry point ------------------------------------------------------------------------

    async def handle(self, inv: Invocation) -> Reply:
        """Serve one invocation of netctl-cni; raise CNIError to refuse it. A refusal that
        names a pod is told to the pod too (``refused``)."""
        call = Call(inv)
        verb = VERBS[inv.verb]
        admit(verb, inv, call.conf.cniVersion if verb.gated else None)
        try:
            async with self.admission.turn(container_of(verb, inv), inv.verb):
                return await verb.handler(self, call)
        except Refusal as exc:
            if self.refused is not None and inv.pod.name:
                await self.refused(inv, exc)
            raise
        raise AssertionError("unreachable: a turn ends in its body or raises")

    # -- ADD --------------------------------------------------------------------------------

    async def add(self, call: Call) -> Reply:
        inv, conf = call.inv, call.conf
        if not inv.netns:
            raise CNIError(INVALID_ENVIRONMENT, "CNI_NETNS is missing")
        found = netns_state(inv.netns)
        if found != "ok":
            what = "does not exist" if found == "missing" else "is not a network namespace"
            if found == "missing" and self.netns_unseen:
                what += f" here (the daemon's mounts: {self.netns_unseen})"
            raise CNIError(INVALID_ENVIRONMENT, f"CNI_NETNS {inv.netns} {what}")
        await self._wait_ready(conf)
        choice = await self.selector.select(conf, inv)
        try:
            atts = plan(conf, inv, choice, self.networks)
        except NotListedYet:  # a NAD before the first list: wait for it, within pod-wait
            await self.networks.wait_listed()
            atts = plan(conf, inv, choice, self.networks)  # code 11 if still not listed
        # a bad netctl-ipam section is refused before anything runs (code 7)
        runs = [Run(att, self.chains.served(att)) for att in atts]
        await self.chains.check_versions(runs)
        live = await self.journal.live_attachments(inv.container_id)
        mine = [a for a in live
                if a.caller_ifname == inv.ifname and a.caller_network == conf.name]
        if mine:
            same = _repeat_of(_of_the_add(mine), atts, inv.netns)
            if same is not None:
                return Reply(versions.convert_result(same, conf.cniVersion))
            # leftovers of an ADD that failed and could not be undone: remove them first
            await self.delete_attachments(inv.container_id, mine, OpStart(
                verb="DEL", container_id=inv.container_id, origin="runtime",
                reason="leftovers of an earlier ADD that failed and was not undone, "
                "removed before this ADD"), "ADD")
        gone = {a.id for a in mine}
        await devices.give(atts, self.devices, self.root,
                           held={a.device for a in live if a.device and a.id not in gone})
        _, attached = await self.run_adds(OpStart(
            verb="ADD", container_id=inv.container_id, netns=inv.netns, ifname=inv.ifname,
            caller_network=conf.name, caller_version=conf.cniVersion, pod=inv.pod,
            request=inv.stdin), runs)
        warning = await self._after_add(inv, attached)
        return Reply(versions.convert_result(attached[0].result or {}, conf.cniVersion),
                     warning)

    async def run_adds(self, op: OpStart, runs: list[Run]) -> tuple[int, list[Attachment]]:
        """Journal the ADD ``op`` with its attachments, then run their chains in one
        nursery; the operation's id and the attachments as they ended. On any failure every
        step that started is DELeted again (:meth:`_compensate`) and the first error raised,
        naming what could not be undone. A runtime's ADD and hot-plug both come here."""
        started = time.monotonic()
        # each chain's first step is begun with the operation, in its commit (numbered first:
        # the addresses name their attachment)
        self.journal.number([run.att for run in runs])
        await self.chains.prepare_first(runs, "ADD")
        op_id = await self.chains.begin(op, runs, adding=True)
        # a compensation itself interrupted leaves the operation running, for the replay
        async with self.journal.running(op_id, lambda exc: None) as closing:
            try:
                async with trio.open_nursery() as nursery:
                    for run in runs:
                        nursery.start_soon(self.chains.add, op_id, run)
                attached = [run.attachment() for run in runs]
                await self._default_routes(attached)
            except BaseException as exc:
                cause = first_error(exc)
                outcome, finished = await self._compensate(op_id, runs)
                failures = [e.msg for errs in outcome.values() for e in errs]
                state = "compensated" if finished and not failures else "compensate_failed"
                self.metrics.compensation("failed" if failures else "compensated" if finished
                                          else "timed_out")
                msg = cause.msg if cause else "cancelled"
                if failures:
                    msg += "; compensation incomplete: " + "; ".join(failures)
                elif not finished:
                    msg += "; compensation ran out of time"
                log.warning("ADD%s failed (code %d), %s: %s", _origin(op),
                            cause.code if cause else CANCELLED, state, msg)
                closing.end = del_end(state, cause.code if cause else CANCELLED, msg,
                                      [run.attachment() for run in runs], outcome)
                if cause is None:
                    raise
                raise CNIError(cause.code, msg, cause.details) from None
            log.info("ADD%s done in %.3fs: %s", _origin(op), time.monotonic() - started,
                     names(attached))
            closing.end = OpEnd(state="done", attached=attached)
        return op_id, attached

    async def _default_routes(self, atts: list[Attachment]) -> None:
        """The pod's default routes where its ``default-route`` asks, once every chain has
        run (:mod:`netctl.engine.gateways`), and each result rewritten to say so."""
        moves = gateways.plan(atts)
        if not moves:
            return
        try:
            await trio.to_thread.run_sync(set_default_routes, atts[0].netns,
                                          [(m.version, m.ifname, m.gateway) for m in moves])
        except OSError as exc:
            raise CNIError(IO_FAILURE, f"default-route: {exc}") from None
        for att in atts:
            att.result = gateways.rewritten(att.result, att.ifname, moves)
        log.info("default route%s: %s", "s" if len(moves) > 1 else "",
                 ", ".join(f"via {m.gateway} on {m.ifname}" for m in moves))

    async def _after_add(self, inv: Invocation, atts: list[Attachment]) -> str:
        """Run the after-ADD hook. What it could not do is journaled as a failed ANNOTATE;
        a refusal from it undoes the ADD and fails it with the hook's code."""
        if self.after_add is None:
            return ""
        try:
            warning = await self.after_add(inv, atts)
        except CNIError as exc:
            await self._journal_annotate(inv, exc)
            try:
                await self.delete_attachments(inv.container_id, atts, OpStart(
                    verb="DEL", container_id=inv.container_id, netns=inv.netns,
                    ifname=inv.ifname, caller_network=inv.conf_name, pod=inv.pod,
                    origin="compensate", reason=f"undoing the ADD: {exc.msg}"), "ADD")
            except CNIError as undo:
                raise CNIError(exc.code, f"{exc.msg}; undoing the ADD: {undo.msg}") from None
            raise CNIError(exc.code, f"{exc.msg}; the ADD was undone") from None
        if warning:
            await self._journal_annotate(inv, CNIError(TRY_AGAIN_LATER, warning))
        return warning

    async def _journal_annotate(self, inv: Invocation, failure: CNIError) -> None:
        await self.journal.one_transaction(OpStart(
            verb="ANNOTATE", container_id=inv.container_id, netns=inv.netns, ifname=inv.ifname,
            caller_network=inv.conf_name, pod=inv.pod, origin="kubernetes"), failure=failure)

    async def _compensate(self, op_id: int, runs: list[Run]
                          ) -> tuple[dict[int, list[StepError]], bool]:
        """DEL what the failed ADD started, shielded, within ``compensate_timeout``: the
        errors of every chain whose DEL finished, and whether all did."""
        outcome: dict[int, list[StepError]] = {}
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.limits.compensate_timeout) as scope:
                await self.chains.delete_all(op_id, runs, outcome)
        return outcome, not scope.cancelled_caught

    # -- DEL --------------------------------------------------------------------------------

    async def targets_of_del(self, inv: Invocation, before: float | None = None
                             ) -> list[Attachment]:
        """The live attachments a runtime's DEL removes: the container's on its interface
        and network (any, when the DEL's config has no name); with ``before``, only those
        that existed then (a recorded DEL never removes what a later ADD made)."""
        name = inv.conf_name or None
        return [a for a in await self.journal.live_attachments(inv.container_id)
                if a.caller_ifname == inv.ifname and (name is None or a.caller_network == name)
                and (before is None or a.created_at <= before)]

    async def delete(self, call: Call, origin: str = "runtime",
                     before: float | None = None) -> Reply:
        inv = call.inv
        mine = await self.targets_of_del(inv, before)
        unknown = ""
        if not mine and self.cutover.enabled and \
                not await self.journal.seen(inv.container_id):
            found = await self.foreign.find(call)
            if found.chains:
                return await self.foreign.delete(call, origin, found)
            unknown = found.nothing(inv.container_id)  # journaled as a DEL of nothing
        try:
            await self.delete_attachments(inv.container_id, mine, OpStart(
                verb="DEL", container_id=inv.container_id, netns=inv.netns, ifname=inv.ifname,
                caller_network=inv.conf_name, pod=inv.pod, request=inv.stdin, origin=origin,
                reason=DEL_REASONS.get(origin)), "DEL")
        except DelIncomplete as exc:
            if not all(a.del_failures >= MAX_DEL_FAILURES or a.id in exc.permanent
                       for a in exc.kept):
                raise
            return Reply(warning=f"{exc.msg}; left to the reconciler (netctl status shows "
                         "stuck attachments), so this DEL does not fail for ever")
        return Reply(warning=unknown)

    async def delete_attachments(self, container_id: str, atts: list[Attachment],
                                 op: OpStart, why: str) -> None:
        """DEL ``atts`` through their chains as one operation; CNIError 107 naming what
        could not be removed (those keep their state, one more failure counted)."""
        started = time.monotonic()
        runs = self.chains.runs(atts)
        await self.chains.prepare_first(runs, "DEL")
        op_id = await self.chains.begin(op, runs, adding=False)
        outcome: dict[int, list[StepError]] = {}
        async with self.journal.running(op_id, partial(interrupted_del, op, atts, outcome),
                                        retry_at) as closing:
            await self.chains.delete_all(op_id, runs, outcome)
            failures = [e.msg for errs in outcome.values() for e in errs]
            if failures:
                msg = (f"{why} of container {container_id}: could not remove everything; "
                       "a later DEL or the reconciler retries: " + "; ".join(failures))
                end = closing.end = del_end("failed", DEL_INCOMPLETE, msg, atts, outcome)
                log.warning("DEL (%s) failed: %s", op.origin, msg)
                raise DelIncomplete(msg, [a for a, _ in end.kept], {
                    att_id for att_id, errs in outcome.items()
                    if any(e.code in PERMANENT for e in errs)},
                    "; ".join(e.details for errs in outcome.values() for e in errs
                              if e.details))
            log.info("DEL (%s) done in %.3fs: %s", op.origin, time.monotonic() - started,
                     names(atts))
            closing.end = del_end("done", None, None, atts, outcome)


    # -- CHECK ------------------------------------------------------------------------------

    async def check(self, call: Call) -> Reply:
        inv, conf = call.inv, call.conf
        mine = [a for a in await self.journal.live_attachments(inv.container_id)
                if a.caller_ifname == inv.ifname and a.caller_network == conf.name
                and a.state == "attached"]
        if not mine:
            raise CNIError(UNKNOWN_CONTAINER, f"no attachments of container {inv.container_id} "
                           f"interface {inv.ifname} in the journal")
        op_id, _ = await self.journal.begin(OpStart(
            verb="CHECK", container_id=inv.container_id, netns=inv.netns, ifname=inv.ifname,
            caller_network=conf.name, caller_version=conf.cniVersion, pod=inv.pod))
        async with self.journal.running(op_id, failed_end):
            try:
                async with trio.open_nursery() as nursery:
                    for att in mine:
                        if versions.supports_check(att.chain.cni_version):
                            nursery.start_soon(self.chains.check, op_id, att)
            except BaseException as exc:
                cause = first_error(exc)
                if cause is None:
                    raise
                raise CNIError(cause.code, cause.msg, cause.details) from None
        return Reply()

    # -- GC, STATUS, VERSION ----------------------------------------------------------------

    async def gc(self, call: Call) -> Reply:
        """DEL every attachment of this netctl network the valid list does not name."""
        conf = call.conf
        valid = conf.valid_list()
        if valid is None:
            return Reply(warning="GC carried no cni.dev/valid-attachments (nor "
                         "cni.dev/attachments) list: nothing collected")
        young = time.time() - self.limits.gc_grace
        stale: dict[str, list[Attachment]] = {}
        for att in await self.journal.live_attachments():
            if att.caller_network == conf.name and att.created_at <= young and \
                    (att.container_id, att.caller_ifname) not in valid:
                stale.setdefault(att.container_id, []).append(att)
        errors = []
        for container_id, atts in stale.items():
            try:
                await self.admission.delete_in_turn(container_id, partial(
                    self.delete_attachments, container_id, atts, OpStart(
                        verb="DEL", container_id=container_id, caller_network=conf.name,
                        origin="gc", reason=f"GC of network {conf.name}: not in the "
                        "runtime's list of valid attachments"), "GC"))
            except CNIError as exc:
                errors.append(exc.msg)
        if errors:
            raise CNIError(DEL_INCOMPLETE, "GC: " + "; ".join(errors))
        return Reply()

    async def status(self, call: Call) -> Reply:
        """Code 50 while the daemon cannot serve ADDs or the cluster network's readiness
        indicator is missing."""
        reasons = self.health() if self.health is not None else []
        if reasons:
            raise readiness.daemon_not_ready(reasons)
        path = readiness.indicator(call.conf)
        root = self.root
        if path is not None and not await trio.Path(root.host(path)).exists():
            raise readiness.not_ready(root.describe(path), "STATUS")
        return Reply()

    async def _wait_ready(self, conf: NetctlConf) -> None:
        """Wait up to ``readiness_wait`` for the conf's readiness indicator file (code 11)."""
        path = readiness.indicator(conf)
        if path is None:
            return
        root = self.root
        with trio.move_on_after(self.limits.readiness_wait):
            while not await trio.Path(root.host(path)).exists():  # noqa: ASYNC110 - a file, no event to wait on
                await trio.sleep(0.25)
            return
        raise readiness.not_ready(root.describe(path), "ADD", self.limits.readiness_wait)

    async def version(self, call: Call) -> Reply:
        return Reply({"cniVersion": versions.LATEST,
                      "supportedVersions": list(versions.SUPPORTED)})


def _origin(op: OpStart) -> str:
    """How an ADD's log lines name its origin: "" for a runtime's, else " (hotplug)"."""
    return "" if op.origin == "runtime" else f" ({op.origin})"


def _of_the_add(mine: list[Attachment]) -> list[Attachment]:
    """The attachments the runtime's ADD made (its default attachment's operation), not
    what was hot-plugged later."""
    first = next((a.add_op for a in mine if a.is_default), None)
    return mine if first is None else [a for a in mine if a.add_op == first]


def _repeat_of(mine: list[Attachment], planned: list[Attachment],
               netns: str) -> dict[str, Any] | None:
    """The stored result when an ADD repeats a completed one exactly, else None."""
    if any(a.state != "attached" or a.netns != netns for a in mine):
        return None
    def wants(a: Attachment) -> tuple[str, str, str, str]:
        caps = a.capability_args
        return (a.network, a.ifname, ",".join(caps.get("ips") or []),
                str(caps.get("mac") or "").lower())

    if sorted(map(wants, mine)) != sorted(map(wants, planned)):
        return None  # another network set, or another address or MAC asked for
    return next((a.result for a in mine if a.is_default), None)


VERBS: dict[str, Verb[Engine, Call]] = {
    "ADD": Verb(ANY, per_container=True, handler=Engine.add),
    "DEL": Verb(ANY, per_container=True, handler=Engine.delete, gated=False),
    "CHECK": Verb((0, 4, 0), per_container=True, handler=Engine.check),
    "GC": Verb((1, 1, 0), per_container=False, handler=Engine.gc),
    "STATUS": Verb((1, 1, 0), per_container=False, handler=Engine.status),
    "VERSION": Verb(ANY, per_container=False, handler=Engine.version, gated=False),
}
