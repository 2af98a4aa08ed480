"""Running one attachment's delegate chain: ADD forward, DEL in reverse, CHECK forward.

Every step is journaled before its plugin starts and after it ends. A chain runs as a
:class:`Run`, which keeps what a DEL needs: how many steps started, the latest result. A
delegate whose ``ipam.type`` netctl serves gets a ``static`` section holding the addresses
netctl allocated with the step. A DEL whose netns is gone passes an empty ``CNI_NETNS`` and
releases netctl's addresses even when the delegate fails (nothing can be using them).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import msgspec
import trio

from netctl import logs
from netctl.cni.config import Chain, plugin_config
from netctl.cni.hostroot import HostRoot
from netctl.cni.invoke import Cancellation, PluginError, PluginOutput, find_plugin, run_plugin
from netctl.cni.netns import is_netns
from netctl.cni.probe import check_delegate_version, supported_versions
from netctl.engine.devices import remove_device_info
from netctl.errors import INCOMPATIBLE_VERSION, INVALID_CONFIG, CNIError
from netctl.ipam import ranges as ranges_mod
from netctl.ipam.planner import Lease, pool_key, static_ipam
from netctl.ipam.store import Store, record
from netctl.journal.records import (
    Allocation,
    Attachment,
    OpEnd,
    OpStart,
    Owner,
    StepEnd,
    StepStart,
)
from netctl.journal.store import Journal
from netctl.metrics import Metrics

log = logging.getLogger("netctl.engine")
RETRY_BASE = 10.0  # the reconciler's back-off on a stuck attachment: 10 s, 20 s, … 1 h
RETRY_CAP = 3600.0

@dataclass(frozen=True)
class Delegates:
    bin_dirs: Sequence[str]
    timeout: float = 60.0
    owner: str = ""  # marks every child, see netctl.cni.invoke.kill_orphans
    cancel_grace: float = 5.0  # a cancelled delegate may finish its step this long
    ipam_types: frozenset[str] = frozenset({"netctl-ipam"})  # IPAM types served in-process
    root: HostRoot = field(default_factory=HostRoot)  # delegates run chrooted into it


class StepError(CNIError):
    """A delegate step failed; the message names the network, interface and plugin."""


@dataclass(frozen=True)
class Prepared:
    """A step worked out before it is journaled: its row, the addresses it is given (and
    their pools), and its id once begun."""

    start: StepStart
    new: list[Allocation]
    pools: dict[str, Any] | None
    step_id: int = 0


@dataclass
class Run:
    """One attachment's chain as an operation runs it: the attachment as journaled (never
    changed here), its parsed IPAM sections, the step begun with the operation
    (``opening``), and how far it got (steps started, the latest result)."""

    att: Attachment
    served: Served
    opening: Prepared | None = None
    started: int = 0
    result: dict[str, Any] | None = None

    def attachment(self) -> Attachment:
        """The attachment as this run left it."""
        return msgspec.structs.replace(self.att, steps_started=self.started,
                                       result=self.result)


@dataclass(frozen=True)
class Ended:
    """How a step ended (:func:`ended`): the row that closes it, whether it counts as
    started, whether netctl's addresses are freed with that row, its result, its error."""

    end: StepEnd
    started: bool = True
    frees: bool = False
    result: dict[str, Any] | None = None
    error: StepError | None = None


def ended(ready: Prepared, att: Attachment, out: PluginOutput | CNIError | Cancellation,
          grace: float) -> Ended:
    """How the step ``ready`` of ``att`` ended, given its plugin's output, its error, or
    what its cancellation left (the plugin may have finished within ``grace``)."""
    s = ready.start
    end = StepEnd(step_id=ready.step_id, attachment=att.id, verb=s.verb, position=s.position)
    if isinstance(out, PluginOutput):
        end.result, end.stderr, end.seconds = out.result, out.stderr, out.seconds
        return Ended(end, frees=s.verb == "DEL", result=out.result)
    if isinstance(out, Cancellation):
        done = out.finished
        if done is None:
            end.error = out.describe(grace)
            return Ended(end)
        end.result, end.stderr, end.seconds = done.result, done.stderr, done.seconds
        return Ended(end, result=done.result)
    end.code, end.error = out.code, out.msg
    end.stderr = out.stderr if isinstance(out, PluginError) else b""
    # refused for its version: it did nothing, and is never DELeted
    end.started = not (s.verb == "ADD" and out.code == INCOMPATIBLE_VERSION
                       and isinstance(out, PluginError))
    # a DEL that failed with the netns gone still frees netctl's addresses (module doc)
    return Ended(end, started=end.started, frees=s.verb == "DEL" and not s.netns,
                 error=StepError(out.code, f"{att.where(s.position)}: {s.verb} failed: "
                                 f"{out.msg}", out.details))


def requests_as_args(plugin: dict[str, Any], index: int, caps: dict[str, Any],
                     served: bool) -> dict[str, Any]:
    """The requested MAC and addresses for a delegate that does not declare the
    ``mac``/``ips`` capability, as the ``args.cni`` keys the reference plugins read."""
    declared = plugin.get("capabilities")
    declared = declared if isinstance(declared, dict) else {}
    out: dict[str, Any] = {}
    if "mac" in caps and index == 0 and not declared.get("mac"):
        out["mac"] = caps["mac"]
    if "ips" in caps and not served and isinstance(plugin.get("ipam"), dict) \
            and not declared.get("ips"):
        out["ips"] = caps["ips"]
    return out


def unhonoured(att: Attachment, result: dict[str, Any] | None) -> str | None:
    """What of the requested addresses and MAC the chain's result does not show, if any
    (the ADD is then refused: code 7)."""
    caps = att.capability_args
    if "ips" not in caps and "mac" not in caps:
        return None
    result = result or {}
    got = set()
    for entry in result.get("ips") or []:
        try:
            got.add(ipaddress.ip_interface(str(entry.get("address", ""))).ip)
        except ValueError:
            continue
    for want in caps.get("ips") or []:
        if ipaddress.ip_interface(want.strip()).ip not in got:
            return (f"the requested address {want} was not assigned (the result has "
                    f"{sorted(map(str, got)) or 'none'})")
    mac = caps.get("mac")
    if mac:
        macs = [str(i.get("mac", "")).lower() for i in result.get("interfaces") or []
                if i.get("sandbox") and i.get("name") == att.ifname]
        if mac.lower() not in macs:
            return (f"the requested MAC {mac} was not applied to {att.ifname} (the result "
                    f"has {macs or 'none'}); declare the 'mac' capability on a delegate "
                    "that supports it")
    return None


def served_ipam(plugin: dict[str, Any], types: frozenset[str]) -> dict[str, Any] | None:
    """The plugin's ``ipam`` section when netctl allocates for it in-process, else None."""
    ipam = plugin.get("ipam")
    if isinstance(ipam, dict) and ipam.get("type") in types:
        return ipam
    return None


def ipam_config(plugin: dict[str, Any], ipam: dict[str, Any]
                ) -> tuple[ranges_mod.IPAMConfig, list[ranges_mod.Range]]:
    """``plugin``'s ``ipam`` section parsed (code 7 when it is bad), with the gateway
    defaulted when the plugin takes one (a bridge with ``isGateway``)."""
    return ranges_mod.parse_config(ipam, default_gateway=ranges_mod.takes_gateway(plugin))


class Served:
    """The IPAM sections netctl serves in one attachment's chain, each parsed once: all of
    them when an ADD plans it (:meth:`Chains.served`), else each when a step first needs
    it (a DEL read back from the journal: a bad section refuses that step only)."""

    def __init__(self, chain: Chain, types: frozenset[str]) -> None:
        self.chain, self.types = chain, types
        self._parsed: dict[int, tuple[ranges_mod.IPAMConfig, list[ranges_mod.Range]] | None] \
            = {}

    def has(self, index: int) -> bool:
        """Whether netctl serves step ``index``'s IPAM (nothing parsed for that)."""
        return served_ipam(self.chain.plugins[index], self.types) is not None

    def section(self, index: int
                ) -> tuple[ranges_mod.IPAMConfig, list[ranges_mod.Range]] | None:
        """Step ``index``'s served section parsed (code 7 when it is bad); None: not served."""
        if index not in self._parsed:
            plugin = self.chain.plugins[index]
            ipam = served_ipam(plugin, self.types)
            self._parsed[index] = None if ipam is None else ipam_config(plugin, ipam)
        return self._parsed[index]


@dataclass
class Chains:
    journal: Journal
    delegates: Delegates
    ipam: Store
    metrics: Metrics = field(default_factory=Metrics)  # each plugin run's time

    def served(self, att: Attachment) -> Served:
        """``att``'s served IPAM sections, all parsed now (code 7 naming the network)."""
        served = Served(att.chain, self.delegates.ipam_types)
        for index in range(len(att.chain.plugins)):
            try:
                served.section(index)
            except CNIError as exc:
                raise CNIError(exc.code, f"network {att.network!r}: {exc.msg}") from None
        return served

    async def check_versions(self, runs: Sequence[Run]) -> None:
        """Refuse (code 1) a network whose cniVersion one of its delegates does not speak
        (each binary's VERSION answer is cached while it is unchanged)."""
        d = self.delegates
        checked: set[tuple[str, str]] = set()
        for run in runs:
            att, ipam = run.att, run.served
            for index, plugin in enumerate(att.chain.plugins):
                types = [str(plugin["type"])]
                section = plugin.get("ipam")
                if isinstance(section, dict) and isinstance(section.get("type"), str) \
                        and not ipam.has(index):
                    types.append(section["type"])
                for ptype in types:
                    if (ptype, att.chain.cni_version) in checked:
                        continue
                    checked.add((ptype, att.chain.cni_version))
                    path = find_plugin(d.bin_dirs, ptype, d.root)
                    supported = await supported_versions(path, d.root)
                    try:
                        check_delegate_version(ptype, path, att.chain.cni_version, supported)
                    except CNIError as exc:
                        raise CNIError(exc.code, f"network {att.network!r}: {exc.msg}") from None

    async def _config(self, att: Attachment, index: int, verb: str,
                      prev: dict[str, Any] | None, netns: str, ipam: Served
                      ) -> tuple[bytes, list[Allocation], Any]:
        """The step's stdin; for a served IPAM, the new addresses and the planner's decision."""
        plugin = att.chain.plugins[index]
        served = ipam.section(index)
        extra = requests_as_args(plugin, index, att.capability_args, served is not None)
        cni_args = {**extra, **att.cni_args} if extra else att.cni_args
        if served is None:
            return plugin_config(att.chain, index, prev, att.capability_args,
                                 cni_args, device=att.device), [], None
        cfg, ranges = served
        if verb == "ADD":
            owner = Owner(att.container_id, att.ifname, netns, att.pod, att.id, att.identity)
            wanted: list[str] = att.capability_args.get("ips") or []  # checked when planned
            decision = await self.ipam.allocate(cfg, ranges, owner, wanted, time.time())
            leases, new = decision.leases, decision.new
        else:
            gateways = {pool_key(cfg, rng): rng.gateway for rng in ranges}
            decision = None
            leases = [Lease(a.pool, a.cidr, gateways.get(a.pool))
                      for a in self.ipam.index.of_attachment(att.id)]
            new = []
        return plugin_config(att.chain, index, prev, att.capability_args, cni_args,
                             ipam=static_ipam(cfg, leases), device=att.device), new, decision

    async def prepare(self, run: Run, index: int, verb: str,
                      prev: dict[str, Any] | None) -> Prepared:
        """Step ``index`` worked out before it is journaled (``op_id`` left to the journal);
        :class:`StepError` when it cannot be."""
        att = run.att
        netns = att.netns if verb == "ADD" or is_netns(att.netns) else ""
        try:
            conf, new, decision = await self._config(att, index, verb, prev, netns,
                                                     run.served)
        except CNIError as exc:  # e.g. an exhausted pool: nothing ran, nothing to undo
            raise StepError(exc.code, f"{att.where(index)}: {verb} refused: {exc.msg}",
                            exc.details) from exc
        return Prepared(StepStart(op_id=0, attachment=att.id, position=index, verb=verb,
                                  plugin_type=att.chain.types[index], config=conf,
                                  netns=netns, ifname=att.ifname), new,
                        decision.pools if decision else None)

    async def prepare_first(self, runs: Sequence[Run], verb: str) -> None:
        """Each chain's first step (an ADD's first, a DEL's last started), to begin with
        the operation (:meth:`begin`). An ADD's are reserved all or none (when one cannot
        be, each chain works its steps out in turn, and that one fails the ADD); a DEL's
        that cannot be is left to its chain's own turn."""
        done: list[Run] = []
        try:
            for run in runs:
                if verb == "ADD":
                    run.opening = await self.prepare(run, 0, "ADD", None)
                elif run.started > 0:
                    with contextlib.suppress(StepError):
                        run.opening = await self.prepare(run, run.started - 1, "DEL",
                                                       run.result)
                done.append(run)
        except BaseException as exc:
            for run in done:
                self.ipam.unreserve(run.opening.new if run.opening else [])
                run.opening = None
            if isinstance(exc, StepError):
                return
            raise

    async def begin(self, op: OpStart, runs: Sequence[Run], *, adding: bool) -> int:
        """Journal ``op`` with its attachments (``adding``, else removing) and the first
        steps :meth:`prepare_first` worked out, in one transaction; the operation's id
        (each run's ``opening`` gets its step's)."""
        atts = [run.att for run in runs]
        begun = [run for run in runs if run.opening is not None]
        opening = [run.opening for run in begun if run.opening is not None]
        new = [a for ready in opening for a in ready.new]
        op_id, step_ids = await record(self.ipam, new, partial(
            self.journal.begin, op, adding=atts if adding else (),
            removing=() if adding else atts, first=[ready.start for ready in opening],
            new=new, pools={k: v for ready in opening for k, v in (ready.pools or {}).items()}))
        for run, step_id in zip(begun, step_ids, strict=True):
            assert run.opening is not None
            run.opening = replace(run.opening, step_id=step_id)
        return op_id

    async def _begin_step(self, op_id: int, run: Run, index: int, verb: str,
                          prev: dict[str, Any] | None) -> Prepared:
        """Step ``index`` worked out and journaled in its own transaction."""
        ready = await self.prepare(run, index, verb, prev)
        ready.start.op_id = op_id
        step_id = await record(self.ipam, ready.new, partial(
            self.journal.begin_step, ready.start, new=ready.new, pools=ready.pools))
        return replace(ready, step_id=step_id)

    async def step(self, op_id: int, run: Run, index: int, verb: str,
                   prev: dict[str, Any] | None) -> dict[str, Any] | None:
        """Journal step ``index`` (unless begun with the operation), run its plugin, journal
        how it ended, return its result."""
        opening = run.opening
        ready = opening if opening is not None and opening.start.position == index and \
            opening.start.verb == verb else await self._begin_step(op_id, run, index, verb, prev)
        att, d, start = run.att, self.delegates, ready.start
        if verb == "ADD":  # started from here on: a DEL is owed for it
            run.started = max(run.started, index + 1)
        cancel = Cancellation()
        began = time.monotonic()
        try:
            out: PluginOutput | CNIError | Cancellation = await run_plugin(
                d.bin_dirs, start.plugin_type, verb, start.config,
                container_id=att.container_id, netns=start.netns, ifname=att.ifname,
                timeout=d.timeout, owner=d.owner, cancel_grace=d.cancel_grace,
                cancellation=cancel, root=d.root)
        except CNIError as exc:
            out = exc
        except BaseException:
            how = ended(ready, att, cancel, d.cancel_grace)
            if verb == "ADD" and how.result is not None:
                run.result = how.result  # it finished within the grace: undone with it
            await self.journal.end_step(how.end, op_id=op_id)
            raise
        finally:
            self.metrics.plugin_exec(start.plugin_type, verb, time.monotonic() - began)
        how = ended(ready, att, out, d.cancel_grace)
        if verb == "ADD" and not how.started:
            run.started = min(run.started, index)
        gone = self.ipam.index.of_attachment(att.id) if how.frees and run.served.has(index) else []
        await self.journal.end_step(how.end, op_id=op_id, gone=gone)
        if how.error is not None:
            # the plugin's stderr is in the journal, never in the log
            log.debug("%s %s of %s failed (code %d): %s", start.plugin_type, verb, att.ifname,
                      how.error.code, how.end.error)
            raise how.error from out if isinstance(out, CNIError) else None
        log.debug("%s %s of %s done in %.3fs", start.plugin_type, verb, att.ifname,
                  how.end.seconds)
        return how.result

    async def add(self, op_id: int, run: Run) -> None:
        """ADD every step in order, each getting the previous result."""
        att = run.att
        with logs.bound(network=att.network):
            for index in range(len(att.chain.plugins)):
                run.result = await self.step(op_id, run, index, "ADD", run.result)
        missing = unhonoured(att, run.result)
        if missing:
            raise StepError(INVALID_CONFIG, f"network {att.network!r} interface {att.ifname}: "
                            f"{missing}")

    async def delete(self, op_id: int, run: Run) -> list[StepError]:
        """DEL every started step in reverse with the latest result, on past failures;
        the failures (empty when all went)."""
        errors: list[StepError] = []
        att = run.att
        with logs.bound(network=att.network):
            for index in reversed(range(run.started)):
                try:
                    await self.step(op_id, run, index, "DEL", run.result)
                except StepError as exc:
                    errors.append(exc)
        if not errors and att.device:  # the CNI's copy of its device-info file goes too
            await trio.to_thread.run_sync(remove_device_info, att, self.delegates.root)
        return errors

    async def check(self, op_id: int, att: Attachment) -> None:
        """CHECK every step in order with the stored final result."""
        (run,) = self.runs([att])
        with logs.bound(network=att.network):
            for index in range(len(att.chain.plugins)):
                await self.step(op_id, run, index, "CHECK", att.result)

    def runs(self, atts: Sequence[Attachment]) -> list[Run]:
        return [Run(att, Served(att.chain, self.delegates.ipam_types),
                    started=att.steps_started, result=att.result) for att in atts]

    async def delete_all(self, op_id: int, runs: Sequence[Run],
                         outcome: dict[int, list[StepError]]) -> None:
        """DEL several chains concurrently; as each finishes, ``outcome[att.id]`` gets its
        errors (a caller cancelled meanwhile still knows which chains finished)."""

        async def one(run: Run) -> None:
            outcome[run.att.id] = await self.delete(op_id, run)

        async with trio.open_nursery() as nursery:
            for run in runs:
                nursery.start_soon(one, run)


def retry_at(failures: int, now: float | None = None) -> float:
    """When the reconciler may next try an attachment whose clean-up failed ``failures``
    times (exponential back-off, capped)."""
    delay = min(RETRY_CAP, RETRY_BASE * 2.0 ** max(0, failures - 1))
    return (time.time() if now is None else now) + delay


def del_end(state: str, code: int | None, error: str | None, atts: list[Attachment],
             outcome: dict[int, list[StepError]]) -> OpEnd:
    """An operation's end after DELs: attachments whose chain DEL finished cleanly are
    removed; the others kept with their errors."""
    removed = [a for a in atts if a.id in outcome and not outcome[a.id]]
    kept = [(a, "; ".join(e.msg for e in outcome.get(a.id) or []) or "DEL did not finish")
            for a in atts if a.id not in outcome or outcome[a.id]]
    return OpEnd(state=state, code=code, error=error, removed=removed, kept=kept)


def names(atts: list[Attachment]) -> str:
    """``br as eth0, br2 as net1`` (``nothing`` for none), for a log line."""
    return ", ".join(f"{a.network} as {a.ifname}" for a in atts) or "nothing"
