"""Running one attachment's delegate chain: ADD forward, DEL in reverse, CHECK forward.

Every step is journaled before the plugin starts and after it ends (config
bytes, netns, ifname, result or error, stderr, seconds). A chain's first step (an
ADD's first, a DEL's last started) is worked out before its operation begins
(:meth:`Chains.prepare`) and journaled in the operation's own transaction; the others
each in one of their own. ADD keeps the chain's
latest result and how many steps started on the :class:`Attachment`, which is
exactly what a DEL needs: the started steps, in reverse, with that result as
``prevResult`` — from memory during compensation, from the journal later.

For a delegate whose ``ipam.type`` netctl serves (``netctl-ipam``, or a type
taken over), the ADD step allocates in-process — planned and reserved before
the step, recorded in the step's journal transaction — and the delegate runs
with a ``static`` IPAM section holding the addresses; the DEL step releases them
in its end transaction. Such a section is parsed once per attachment
(:class:`Served`): when the ADD plans it, and the ADD's steps and their
compensation use that; a DEL read back from the journal parses it when its step
first needs it. The addresses a runtime asked for were checked when the ADD was
planned (:mod:`netctl.engine.plan`) and are taken as they are here.

A DEL whose netns is gone (missing, or not a network namespace any more) gives
the delegates an empty ``CNI_NETNS``, as the spec allows, so their IPAM still
releases; and the addresses netctl allocated itself are released then even when the
delegate's DEL fails (nothing can be using them without the netns), so a broken
delegate never holds a pool's address for ever. A step whose ADD the plugin refused
with code 1 (incompatible version) did nothing, so it does not count as started and
is never DELeted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from netctl import logs
from netctl.cni.config import Chain, plugin_config
from netctl.cni.hostroot import HostRoot
from netctl.cni.invoke import Cancellation, PluginError, find_plugin, run_plugin
from netctl.cni.netns import is_netns
from netctl.cni.probe import check_delegate_version, supported_versions
from netctl.engine.devices import remove_device_info
from netctl.errors import INCOMPATIBLE_VERSION, INVALID_CONFIG, CNIError
from netctl.ipam import ranges as ranges_mod
from netctl.ipam.planner import Lease, pool_key, static_ipam
from netctl.ipam.store import Store, allocate, record
from netctl.journal.records import Allocation, Attachment, OpEnd, Owner, StepEnd, StepStart
from netctl.journal.store import Journal
from netctl.metrics import Metrics

log = logging.getLogger("netctl.engine")
RETRY_BASE = 10.0  # the reconciler's back-off on a stuck attachment: 10 s, 20 s, … 1 h
RETRY_CAP = 3600.0

@dataclass(frozen=True)
class Delegates:
    """How delegate plugins are run."""

    bin_dirs: Sequence[str]
    timeout: float = 60.0
    owner: str = ""  # marks every child, see netctl.cni.invoke.kill_orphans
    cancel_grace: float = 5.0  # a cancelled delegate may finish its step this long
    ipam_types: frozenset[str] = frozenset({"netctl-ipam"})  # IPAM types served in-process
    root: HostRoot = field(default_factory=HostRoot)  # delegates run chrooted into it


class StepError(CNIError):
    """A delegate step failed; the message names the network, interface and plugin."""


@dataclass
class Prepared:
    """A step worked out before it is journaled: its row, the addresses it is given (and
    their pools), the parsed IPAM sections it used, and its id once it is begun."""

    start: StepStart
    new: list[Allocation]
    pools: dict[str, Any] | None
    served: Served
    step_id: int = 0


def requests_as_args(plugin: dict[str, Any], index: int, caps: dict[str, Any],
                     served: bool) -> dict[str, Any]:
    """The requested MAC and addresses for a delegate that does not declare the
    ``mac``/``ips`` capability, as ``args.cni`` keys the reference plugins read too
    (bridge and macvlan ``mac`` on the chain's first plugin; host-local ``ips``)."""
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
    """What of the requested addresses and MAC the chain's result does not show, if any:
    a request is honoured or the ADD is refused (code 7), never silently ignored."""
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


def served_config(plugin: dict[str, Any], types: frozenset[str]
                  ) -> tuple[ranges_mod.IPAMConfig, list[ranges_mod.Range]] | None:
    """The plugin's served ``ipam`` section parsed (code 7 when it is bad), with the
    gateway defaulted when the plugin takes one (a bridge with ``isGateway``); else None."""
    ipam = served_ipam(plugin, types)
    return None if ipam is None else ipam_config(plugin, ipam)


def ipam_config(plugin: dict[str, Any], ipam: dict[str, Any]
                ) -> tuple[ranges_mod.IPAMConfig, list[ranges_mod.Range]]:
    """``plugin``'s ``ipam`` section parsed (code 7 when it is bad), with the gateway
    defaulted when the plugin takes one (a bridge with ``isGateway``)."""
    return ranges_mod.parse_config(ipam, default_gateway=ranges_mod.takes_gateway(plugin))


class Served:
    """The IPAM sections netctl serves in-process in one attachment's chain, each parsed
    once (:func:`served_config`) and kept: all of them when an ADD plans the attachment
    (:meth:`Chains.served`), else each when a step first needs it (a DEL read back from
    the journal: a bad section refuses that step only)."""

    def __init__(self, chain: Chain, types: frozenset[str]) -> None:
        self.chain, self.types = chain, types
        self._parsed: dict[int, tuple[ranges_mod.IPAMConfig, list[ranges_mod.Range]] | None] \
            = {}

    def has(self, index: int) -> bool:
        """Whether netctl serves step ``index``'s IPAM (nothing parsed for that)."""
        return served_ipam(self.chain.plugins[index], self.types) is not None

    def at(self, index: int) -> tuple[ranges_mod.IPAMConfig, list[ranges_mod.Range]] | None:
        """Step ``index``'s served section parsed (code 7 when it is bad); None: not served."""
        if index not in self._parsed:
            self._parsed[index] = served_config(self.chain.plugins[index], self.types)
        return self._parsed[index]


@dataclass
class Chains:
    """Runs chains with the journal, the delegates and the node's IPAM store."""

    journal: Journal
    delegates: Delegates
    ipam: Store
    metrics: Metrics = field(default_factory=Metrics)  # each plugin run's time

    def served(self, att: Attachment) -> Served:
        """``att``'s served IPAM sections, every one parsed now: code 7 naming the network
        when one is bad (an ADD refuses it before anything runs)."""
        served = Served(att.chain, self.delegates.ipam_types)
        for index in range(len(att.chain.plugins)):
            try:
                served.at(index)
            except CNIError as exc:
                raise CNIError(exc.code, f"network {att.network!r}: {exc.msg}") from None
        return served

    async def check_versions(self, atts: Sequence[Attachment],
                             served: Sequence[Served]) -> None:
        """Refuse (code 1) a network whose cniVersion one of its delegates does not speak,
        asking each binary once (its VERSION answer is cached while it is unchanged); a
        type and version seen for one network is not looked at again for the next."""
        d = self.delegates
        checked: set[tuple[str, str]] = set()
        for att, ipam in zip(atts, served, strict=True):
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
        """The step's stdin, and for a served IPAM the addresses it gets (new ones to
        record with the step, and the planner's decision)."""
        plugin = att.chain.plugins[index]
        served = ipam.at(index)
        extra = requests_as_args(plugin, index, att.capability_args, served is not None)
        cni_args = {**extra, **att.cni_args} if extra else att.cni_args
        if served is None:
            return plugin_config(att.chain, index, prev, att.capability_args,
                                 cni_args, device=att.device), [], None
        cfg, ranges = served
        if verb == "ADD":
            owner = Owner(att.container_id, att.ifname, netns, att.pod, att.id, att.identity)
            wanted: list[str] = att.capability_args.get("ips") or []  # checked when planned
            decision = await allocate(self.ipam, cfg, ranges, owner, wanted, time.time())
            leases, new = decision.leases, decision.new
        else:
            gateways = {pool_key(cfg, rng): rng.gateway for rng in ranges}
            decision = None
            leases = [Lease(a.pool, a.cidr, gateways.get(a.pool))
                      for a in self.ipam.of_attachment(att.id)]
            new = []
        return plugin_config(att.chain, index, prev, att.capability_args, cni_args,
                             ipam=static_ipam(cfg, leases), device=att.device), new, decision

    async def prepare(self, att: Attachment, index: int, verb: str,
                      prev: dict[str, Any] | None, ipam: Served) -> Prepared:
        """Step ``index``'s stdin and addresses, worked out before it is journaled (its
        ``op_id`` left for the journal to set); :class:`StepError` when it cannot be."""
        netns = att.netns if verb == "ADD" or is_netns(att.netns) else ""
        try:
            conf, new, decision = await self._config(att, index, verb, prev, netns, ipam)
        except CNIError as exc:  # e.g. an exhausted pool: nothing ran, nothing to undo
            raise StepError(exc.code, f"{att.where(index)}: {verb} refused: {exc.msg}",
                            exc.details) from exc
        return Prepared(StepStart(op_id=0, attachment=att.id, position=index, verb=verb,
                                  plugin_type=att.chain.types[index], config=conf,
                                  netns=netns, ifname=att.ifname), new,
                        decision.pools if decision else None, ipam)

    async def prepare_adds(self, atts: Sequence[Attachment], served: Sequence[Served]
                           ) -> list[Prepared]:
        """The first step of every chain of an ADD, to begin with the operation (their
        addresses reserved): [] when one cannot be (nothing is then held, and each chain
        works its steps out in turn, the one that cannot failing the ADD)."""
        done: list[Prepared] = []
        try:
            for att, ipam in zip(atts, served, strict=True):
                done.append(await self.prepare(att, 0, "ADD", None, ipam))
        except BaseException as exc:
            for ready in done:
                self.ipam.unreserve(ready.new)
            if isinstance(exc, StepError):
                return []
            raise
        return done

    async def prepare_dels(self, atts: Sequence[Attachment]) -> dict[int, Prepared]:
        """The first DEL step (the last started) of each chain that has one and can be
        worked out, by attachment id, to begin with the operation (a DEL gets no
        addresses: nothing is held)."""
        ready: dict[int, Prepared] = {}
        for att in atts:
            if att.steps_started > 0:
                with contextlib.suppress(StepError):  # its own turn fails it, as before
                    ready[att.id] = await self.prepare(
                        att, att.steps_started - 1, "DEL", att.result,
                        Served(att.chain, self.delegates.ipam_types))
        return ready

    async def step(self, op_id: int, att: Attachment, index: int, verb: str,
                   prev: dict[str, Any] | None, ipam: Served,
                   ready: Prepared | None = None) -> dict[str, Any] | None:
        """Journal step ``index`` (unless ``ready``: begun with the operation), run its
        plugin, journal how it ended."""
        if ready is None:
            ready = await self.prepare(att, index, verb, prev, ipam)
            ready.start.op_id = op_id
            ready.step_id = await record(self.ipam, ready.new, partial(
                self.journal.begin_step, ready.start, new=ready.new, pools=ready.pools))
        ptype, conf, netns, step_id = (ready.start.plugin_type, ready.start.config,
                                       ready.start.netns, ready.step_id)
        if verb == "ADD":
            att.steps_started = max(att.steps_started, index + 1)
        end = StepEnd(step_id=step_id, attachment=att.id, verb=verb, position=index)
        cancel = Cancellation()
        d = self.delegates
        began = time.monotonic()
        try:
            try:
                out = await run_plugin(d.bin_dirs, ptype, verb, conf,
                                       container_id=att.container_id, netns=netns,
                                       ifname=att.ifname, timeout=d.timeout, owner=d.owner,
                                       cancel_grace=d.cancel_grace, cancellation=cancel,
                                       root=d.root)
            finally:
                self.metrics.plugin_exec(ptype, verb, time.monotonic() - began)
        except CNIError as exc:
            end.code, end.error = exc.code, exc.msg
            end.stderr = exc.stderr if isinstance(exc, PluginError) else b""
            if verb == "ADD" and exc.code == INCOMPATIBLE_VERSION and isinstance(
                    exc, PluginError):
                end.started = False  # refused before it did anything
                att.steps_started = min(att.steps_started, index)
            # A DEL that failed with the netns gone still frees the addresses netctl gave
            # the step: no interface can be using them. The DEL itself is retried for what
            # the plugin may hold outside the netns; those retries get no addresses.
            gone = self._served_leases(att, index, ipam) if verb == "DEL" and not netns \
                else []
            await self.journal.end_step(end, op_id=op_id, gone=gone)
            self.ipam.released(gone)
            # the message only: what the plugin printed on stderr is the step's, in the
            # journal, never in the log
            log.debug("%s %s of %s failed (code %d): %s", ptype, verb, att.ifname, exc.code,
                      exc.msg)
            raise StepError(exc.code, f"{att.where(index)}: {verb} failed: {exc.msg}",
                            exc.details) from exc
        except BaseException:
            done = cancel.finished
            if done is not None:  # cancelled, but the plugin finished its step in the grace
                end.result, end.stderr, end.seconds = done.result, done.stderr, done.seconds
                if verb == "ADD":
                    att.result = done.result
            else:
                end.error = cancel.describe(d.cancel_grace)
            await self.journal.end_step(end, op_id=op_id)
            raise
        end.result, end.stderr, end.seconds = out.result, out.stderr, out.seconds
        gone = self._served_leases(att, index, ipam) if verb == "DEL" else []
        await self.journal.end_step(end, op_id=op_id, gone=gone)
        self.ipam.released(gone)
        log.debug("%s %s of %s done in %.3fs", ptype, verb, att.ifname, out.seconds)
        return out.result

    def _served_leases(self, att: Attachment, index: int, ipam: Served) -> list[Allocation]:
        """The addresses netctl allocated for step ``index`` of ``att`` (its DEL frees them)."""
        return self.ipam.of_attachment(att.id) if ipam.has(index) else []

    async def add(self, op_id: int, att: Attachment, ipam: Served,
                  first: Prepared | None = None) -> dict[str, Any] | None:
        """ADD every step in order, each getting the previous result; return the final.
        ``ipam``: the sections parsed when the ADD was planned (:meth:`served`); ``first``:
        its first step, begun with the operation."""
        prev: dict[str, Any] | None = None
        with logs.bound(network=att.network):
            for index in range(len(att.chain.plugins)):
                prev = await self.step(op_id, att, index, "ADD", prev, ipam,
                                       first if index == 0 else None)
                att.result = prev
        missing = unhonoured(att, prev)
        if missing:
            raise StepError(INVALID_CONFIG, f"network {att.network!r} interface {att.ifname}: "
                            f"{missing}")
        return prev

    async def delete(self, op_id: int, att: Attachment, ipam: Served | None = None,
                     first: Prepared | None = None) -> list[StepError]:
        """DEL every started step in reverse with the latest result; go on past failures.
        ``ipam``: the sections parsed when the ADD this undoes was planned; None for an
        attachment read back from the journal (its steps parse what they need); ``first``:
        its first DEL step, begun with the operation.

        Returns the failures (empty when all went); things already gone are the
        plugins' business to tolerate, as the spec asks of them.
        """
        errors: list[StepError] = []
        ipam = first.served if first else ipam or Served(att.chain, self.delegates.ipam_types)
        with logs.bound(network=att.network):
            for index in reversed(range(att.steps_started)):
                try:
                    await self.step(op_id, att, index, "DEL", att.result, ipam,
                                    first if first and index == first.start.position
                                    else None)
                except StepError as exc:
                    errors.append(exc)
        if not errors and att.device:  # the CNI's copy of its device-info file goes too
            await trio.to_thread.run_sync(remove_device_info, att, self.delegates.root)
        return errors

    async def check(self, op_id: int, att: Attachment) -> None:
        """CHECK every step in order with the stored final result."""
        ipam = Served(att.chain, self.delegates.ipam_types)
        with logs.bound(network=att.network):
            for index in range(len(att.chain.plugins)):
                await self.step(op_id, att, index, "CHECK", att.result, ipam)

    async def delete_all(self, op_id: int, atts: Sequence[Attachment],
                         outcome: dict[int, list[StepError]],
                         served: Sequence[Served] | None = None,
                         first: Mapping[int, Prepared] | None = None) -> None:
        """DEL several chains concurrently; as each finishes, ``outcome[att.id]`` gets
        its errors (empty: all removed). Filled in as it goes, so a caller that is
        cancelled or runs out of time still knows which chains finished. ``served``:
        each attachment's parsed sections, when an ADD that planned them is undone;
        ``first``: by attachment id, the first DEL steps begun with the operation."""

        async def one(att: Attachment, ipam: Served | None) -> None:
            outcome[att.id] = await self.delete(op_id, att, ipam,
                                                first.get(att.id) if first else None)

        async with trio.open_nursery() as nursery:
            parsed: Sequence[Served | None] = served or [None] * len(atts)
            for att, ipam in zip(atts, parsed, strict=True):
                nursery.start_soon(one, att, ipam)


def retry_at(failures: int, now: float | None = None) -> float:
    """When the reconciler may next try an attachment whose clean-up failed ``failures``
    times: exponential back-off, capped."""
    delay = min(RETRY_CAP, RETRY_BASE * 2.0 ** max(0, failures - 1))
    return (time.time() if now is None else now) + delay


def del_end(state: str, code: int | None, error: str | None, atts: list[Attachment],
             outcome: dict[int, list[StepError]]) -> OpEnd:
    """An operation's end after DELs: attachments whose chain DEL finished cleanly are
    removed; the others keep their state with their errors (or "not finished")."""
    removed = [a for a in atts if a.id in outcome and not outcome[a.id]]
    kept = [(a, "; ".join(e.msg for e in outcome.get(a.id) or []) or "DEL did not finish")
            for a in atts if a.id not in outcome or outcome[a.id]]
    return OpEnd(state=state, code=code, error=error, removed=removed, kept=kept)


def names(atts: list[Attachment]) -> str:
    """``br as eth0, br2 as net1`` (``nothing`` for none), for a log line."""
    return ", ".join(f"{a.network} as {a.ifname}" for a in atts) or "nothing"
