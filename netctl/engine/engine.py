"""The engine: one CNI request → journaled, concurrent, compensated delegate chains.

- ADD journals the operation with all its attachments, then runs every
  attachment's chain in one nursery. Any failure or cancellation cancels the
  siblings (a delegate already running gets the runner's ``cancel_grace`` to
  finish its step), and every step that started is DELeted again in reverse
  (shielded, with its own deadline).
- DEL needs nothing but the journal; CHECK replays the stored results.
- Requests for one container are serialized; a DEL cancels a running ADD of
  the same container (which compensates) and runs after it. Different
  containers run concurrently up to ``max_concurrent``; beyond that requests
  wait, and when ``max_queue`` are waiting, ADD and CHECK get code 11.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import msgspec
import trio

from netctl.cni import validate, versions
from netctl.cni.config import decode_json_object
from netctl.cni.request import Request
from netctl.engine.chains import (
    ChainState,
    Runner,
    add_chain,
    check_chain,
    del_all,
    served_ipam,
)
from netctl.engine.networks import NetworkDir
from netctl.engine.plan import AttachmentPlan, NetctlConf, Pod, decode_conf, plan
from netctl.errors import (
    CANCELLED,
    DEL_INCOMPLETE,
    INCOMPATIBLE_VERSION,
    INVALID_CONFIG,
    INVALID_ENVIRONMENT,
    TRY_AGAIN_LATER,
    UNKNOWN_CONTAINER,
    CNIError,
)
from netctl.ipam.backend import Owner, ipam_result, pool_key
from netctl.ipam.ranges import parse_config as parse_ipam
from netctl.journal.store import Attachment

T = TypeVar("T")


@dataclass
class Limits:
    max_concurrent: int = 32
    max_queue: int = 256
    compensate_timeout: float = 30.0


@dataclass
class _Gate:
    lock: trio.Lock = field(default_factory=trio.Lock)
    adds: set[trio.CancelScope] = field(default_factory=set)
    users: int = 0


def first_error(exc: BaseException) -> CNIError | None:
    """The first CNIError inside an exception (group), if any."""
    if isinstance(exc, CNIError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = first_error(inner)
            if found is not None:
                return found
    return None


class Engine:
    def __init__(self, runner: Runner, networks: NetworkDir, limits: Limits | None = None) -> None:
        self.runner = runner
        self.journal = runner.journal
        self.networks = networks
        self.limits = limits or Limits()
        self._limiter = trio.CapacityLimiter(self.limits.max_concurrent)
        self._waiting = 0
        self._gates: dict[str, _Gate] = {}

    @property
    def in_flight(self) -> int:
        return int(self._limiter.borrowed_tokens)

    @property
    def queued(self) -> int:
        return self._waiting

    def busy_containers(self) -> set[str]:
        """Containers with a request running or waiting (the reconciler leaves them be)."""
        return set(self._gates)

    async def serialized_del(self, container_id: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` as a DEL of ``container_id``: after (and cancelling) its ADDs."""
        return await self._serialized(container_id, "DEL", fn)

    # -- entry point -------------------------------------------------------------

    async def handle(self, req: Request) -> dict[str, Any] | None:
        """Serve one request; return the result to print (None for none) or raise CNIError."""
        command = validate.command(req.command)
        if req.plugin == "netctl-ipam" and command != "VERSION":
            return await self.ipam_plugin(command, req)
        if command == "STATUS":
            conf = decode_conf(req.stdin)
            if not versions.supports_gc(conf.cniVersion):
                raise CNIError(INCOMPATIBLE_VERSION,
                               f"STATUS needs cniVersion 1.1.0 or later, not {conf.cniVersion}")
            return None
        if command == "GC":
            await self.gc(decode_conf(req.stdin))
            return None
        if command == "VERSION":
            return {"cniVersion": versions.LATEST, "supportedVersions": list(versions.SUPPORTED)}
        container_id = validate.container_id(req.container_id)
        validate.ifname(req.ifname)
        validate.parse_cni_args(req.args)
        if command == "ADD":
            conf = decode_conf(req.stdin)
            return await self._serialized(container_id, command,
                                          lambda: self.add(req, conf))
        if command == "DEL":
            await self._serialized(container_id, command, partial(self.delete, req))
            return None
        conf = decode_conf(req.stdin)
        return await self._serialized(container_id, command, lambda: self.check(req, conf))

    async def _serialized(self, container_id: str, verb: str,
                          fn: Callable[[], Awaitable[T]]) -> T:
        gate = self._gates.setdefault(container_id, _Gate())
        gate.users += 1
        try:
            if verb == "DEL":
                for scope in gate.adds:
                    scope.cancel()
            with trio.CancelScope() as scope:
                if verb == "ADD":
                    gate.adds.add(scope)
                try:
                    async with gate.lock:
                        return await self._admitted(verb, fn)
                finally:
                    gate.adds.discard(scope)
            raise CNIError(CANCELLED, f"ADD of container {container_id} was cancelled by a DEL "
                           "for the same container; what it had done was undone")
        finally:
            gate.users -= 1
            if gate.users == 0:
                self._gates.pop(container_id, None)

    async def _admitted(self, verb: str, fn: Callable[[], Awaitable[T]]) -> T:
        if self._limiter.available_tokens == 0 and verb != "DEL" \
                and self._waiting >= self.limits.max_queue:
            raise CNIError(TRY_AGAIN_LATER, f"daemon busy: {self.in_flight} requests running and "
                           f"{self._waiting} queued (max_queue {self.limits.max_queue}); "
                           "try again later")
        self._waiting += 1
        try:
            await self._limiter.acquire()
        finally:
            self._waiting -= 1
        try:
            return await fn()
        finally:
            self._limiter.release()

    # -- ADD ---------------------------------------------------------------------

    async def add(self, req: Request, conf: NetctlConf) -> dict[str, Any]:
        if not req.netns:
            raise CNIError(INVALID_ENVIRONMENT, "CNI_NETNS is missing")
        if not os.path.exists(req.netns):  # noqa: ASYNC240 - one stat of a local path
            raise CNIError(INVALID_ENVIRONMENT, f"CNI_NETNS {req.netns} does not exist")
        plans = plan(conf, req.ifname, req.args, self.networks)
        self._check_ipam(plans)
        mine = [a for a in await self.journal.live_attachments(req.container_id)
                if a.caller_ifname == req.ifname and a.caller_network == conf.name]
        if mine:
            same = self._repeat_of(mine, plans, req.netns)
            if same is not None:
                return versions.convert_result(same, conf.cniVersion)
            # leftovers of an ADD that failed and could not be undone: remove them first
            await self.delete_attachments(req.container_id, mine, "ADD")
        pod = Pod.from_args(validate.parse_cni_args(req.args))
        op_id, att_ids = await self.journal.begin_operation(
            "ADD", req.container_id, netns=req.netns, ifname=req.ifname,
            caller_network=conf.name, caller_version=conf.cniVersion,
            pod=(pod.namespace, pod.name, pod.uid), request=req.stdin.encode(),
            attachments=[{
                "container_id": req.container_id, "ifname": p.ifname, "network": p.network,
                "network_name": p.chain.name, "is_default": p.is_default,
                "caller_network": conf.name, "caller_ifname": req.ifname, "netns": req.netns,
                "pod_namespace": pod.namespace, "pod_name": pod.name, "pod_uid": pod.uid,
                "cni_version": p.chain.cni_version, "chain": p.chain.raw,
                "capability_args": p.capability_args, "cni_args": p.cni_args} for p in plans])
        states = [ChainState(att_id, p.network, req.container_id, req.netns, p.ifname, p.chain,
                             p.capability_args, p.cni_args,
                             pod=(pod.namespace, pod.name, pod.uid))
                  for att_id, p in zip(att_ids, plans, strict=True)]
        try:
            async with trio.open_nursery() as nursery:
                for st in states:
                    nursery.start_soon(add_chain, self.runner, op_id, st)
        except BaseException as exc:
            cause = first_error(exc)
            outcome, finished = await self._compensate(op_id, states)
            failures = [e for errs in outcome.values() for e in errs]
            state = "compensated" if finished and not failures else "compensate_failed"
            msg = cause.msg if cause else "cancelled"
            if failures:
                msg += "; compensation incomplete: " + "; ".join(failures)
            elif not finished:
                msg += "; compensation ran out of time"
            await self.journal.finish_operation(
                op_id, state, cause.code if cause else CANCELLED, msg,
                removed=[(att_id, "; ".join(errs) or None) for att_id, errs in outcome.items()])
            if cause is None:
                raise
            raise CNIError(cause.code, msg, cause.details) from None
        await self.journal.finish_operation(op_id, "done",
                                            attached=[(s.att_id, s.result) for s in states])
        return versions.convert_result(states[0].result or {}, conf.cniVersion)  # cluster

    def _check_ipam(self, plans: list[AttachmentPlan]) -> None:
        """Refuse a bad netctl-ipam section before anything runs (code 7, naming the key)."""
        for p in plans:
            for plugin in p.chain.plugins:
                ipam = served_ipam(plugin, self.runner.ipam_types)
                if ipam is not None:
                    try:
                        parse_ipam(ipam)
                    except CNIError as exc:
                        raise CNIError(exc.code, f"network {p.network!r}: {exc.msg}") from None

    @staticmethod
    def _repeat_of(mine: list[Attachment], plans: list[AttachmentPlan],
                   netns: str) -> dict[str, Any] | None:
        """The stored result when an ADD repeats a completed one exactly, else None."""
        if any(a.state != "attached" or a.netns != netns for a in mine):
            return None
        if sorted((a.network, a.ifname) for a in mine) != sorted(
                (p.network, p.ifname) for p in plans):
            return None
        return next((a.result for a in mine if a.is_default), None)

    async def _compensate(self, op_id: int,
                          states: list[ChainState]) -> tuple[dict[int, list[str]], bool]:
        """DEL what the failed ADD started, shielded, within ``compensate_timeout``.

        Returns the errors of every chain whose DEL finished, and whether all did."""
        outcome: dict[int, list[str]] = {}
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.limits.compensate_timeout) as scope:
                await del_all(self.runner, op_id, states, outcome)
        return outcome, not scope.cancelled_caught

    # -- DEL ---------------------------------------------------------------------

    async def delete(self, req: Request) -> None:
        name = _conf_name(req.stdin)
        mine = [a for a in await self.journal.live_attachments(req.container_id)
                if a.caller_ifname == req.ifname and (name is None or a.caller_network == name)]
        await self.delete_attachments(req.container_id, mine, "DEL", netns=req.netns,
                                      ifname=req.ifname, caller_network=name or "",
                                      request=req.stdin.encode())

    async def delete_attachments(self, container_id: str, atts: list[Attachment], why: str,
                      origin: str = "runtime", **op: Any) -> None:
        op_id, _ = await self.journal.begin_operation("DEL", container_id, origin=origin,
                                                      removing=[a.id for a in atts], **op)
        outcome: dict[int, list[str]] = {}
        try:
            await del_all(self.runner, op_id, [ChainState.from_journal(a) for a in atts],
                          outcome)
        except BaseException as exc:
            await self.journal.finish_operation(  # journal writes are shielded
                op_id, "failed", CANCELLED, repr(exc),
                removed=[(i, "; ".join(e) or None) for i, e in outcome.items()])
            raise
        removed = [(att_id, "; ".join(errs) or None) for att_id, errs in outcome.items()]
        failures = [e for errs in outcome.values() for e in errs]
        if failures:
            msg = (f"{why} of container {container_id}: could not remove everything; "
                   "a later DEL or the reconciler retries: " + "; ".join(failures))
            await self.journal.finish_operation(op_id, "failed", DEL_INCOMPLETE, msg,
                                                removed=removed)
            raise CNIError(DEL_INCOMPLETE, msg)
        await self.journal.finish_operation(op_id, "done", removed=removed)

    # -- CHECK -------------------------------------------------------------------

    async def check(self, req: Request, conf: NetctlConf) -> None:
        if not versions.supports_check(conf.cniVersion):
            raise CNIError(INCOMPATIBLE_VERSION,
                           f"CHECK needs cniVersion 0.4.0 or later, not {conf.cniVersion}")
        mine = [a for a in await self.journal.live_attachments(req.container_id)
                if a.caller_ifname == req.ifname and a.caller_network == conf.name
                and a.state == "attached"]
        if not mine:
            raise CNIError(UNKNOWN_CONTAINER, f"no attachments of container {req.container_id} "
                           f"interface {req.ifname} in the journal")
        op_id, _ = await self.journal.begin_operation(
            "CHECK", req.container_id, netns=req.netns, ifname=req.ifname,
            caller_network=conf.name, caller_version=conf.cniVersion)
        try:
            async with trio.open_nursery() as nursery:
                for att in mine:
                    st = ChainState.from_journal(att)
                    if versions.supports_check(st.chain.cni_version):
                        nursery.start_soon(check_chain, self.runner, op_id, st)
        except BaseException as exc:
            cause = first_error(exc)
            await self.journal.finish_operation(op_id, "failed", cause.code if cause else None,
                                                cause.msg if cause else "cancelled")
            if cause is None:
                raise
            raise CNIError(cause.code, cause.msg, cause.details) from None
        await self.journal.finish_operation(op_id, "done")

    # -- netctl-ipam as a plain IPAM plugin --------------------------------------

    async def ipam_plugin(self, command: str, req: Request) -> dict[str, Any] | None:
        """ADD/DEL/CHECK/GC for a main plugin that execs ``netctl-ipam`` itself: the same
        allocator and journal, with the allocation owned by (container id, ifname)."""
        conf = decode_json_object(req.stdin.encode(), "the network config on stdin")
        version = versions.check_supported(str(conf.get("cniVersion")))
        ipam = conf.get("ipam")
        if not isinstance(ipam, dict) or ipam.get("type") not in self.runner.ipam_types:
            raise CNIError(INVALID_CONFIG, "netctl-ipam: the config has no 'ipam' section of "
                           "type netctl-ipam")
        cfg, ranges = parse_ipam(ipam)
        pools = [pool_key(cfg, r) for r in ranges]
        name = str(conf.get("name", ""))
        backend = self.runner.ipam
        if command in ("STATUS", "GC") and not versions.supports_gc(version):
            raise CNIError(INCOMPATIBLE_VERSION, f"netctl-ipam: {command} needs cniVersion "
                           f"1.1.0 or later, not {version}")
        if command == "STATUS":
            return None
        if command == "GC":
            valid = {(str(v.get("containerID")), str(v.get("ifname")))
                     for v in conf.get("cni.dev/valid-attachments") or []}
            await self.journal.whole_operation(
                "GC", "", lambda db, op_id: backend.release_stale(db, pools, valid, op_id),
                caller_network=name, origin="ipam")
            return None
        container_id = validate.container_id(req.container_id)
        ifname = validate.ifname(req.ifname)
        pod = Pod.from_args(validate.parse_cni_args(req.args))
        fields = {"netns": req.netns, "ifname": ifname, "caller_network": name,
                  "caller_version": version, "pod": (pod.namespace, pod.name, pod.uid),
                  "request": req.stdin.encode(), "origin": "ipam"}
        wanted = [str(ip) for ip in (conf.get("runtimeConfig") or {}).get("ips") or []]

        async def body(db: Any, op_id: int) -> dict[str, Any] | None:
            """The whole request in one journal transaction: no crash can split it."""
            if command == "ADD":
                owner = Owner(container_id, ifname, req.netns,
                              (pod.namespace, pod.name, pod.uid), None, op_id)
                leases = await backend.allocate(db, cfg, ranges, owner, wanted)
                return versions.convert_result(ipam_result(cfg, leases, version), version)
            if command == "DEL":
                await backend.release(db, op_id=op_id, container_id=container_id, ifname=ifname,
                                   pools=pools)
                return None
            if not await backend.held_by(db, cfg, ranges, container_id=container_id,
                                      ifname=ifname):
                raise CNIError(UNKNOWN_CONTAINER, f"netctl-ipam: container {container_id} "
                               f"ifname {ifname} holds no address in {', '.join(pools)}")
            return None

        async def serve() -> dict[str, Any] | None:
            return await self.journal.whole_operation(command, container_id, body, **fields)

        return await self._serialized(container_id, command, serve)

    # -- GC ----------------------------------------------------------------------

    async def gc(self, conf: NetctlConf) -> None:
        """DEL every attachment of this netctl network not in ``cni.dev/valid-attachments``."""
        if not versions.supports_gc(conf.cniVersion):
            raise CNIError(INCOMPATIBLE_VERSION,
                           f"GC needs cniVersion 1.1.0 or later, not {conf.cniVersion}")
        valid = {(str(v.get("containerID")), str(v.get("ifname")))
                 for v in conf.valid_attachments or []}
        stale: dict[str, list[Attachment]] = {}
        for att in await self.journal.live_attachments():
            if att.caller_network == conf.name and \
                    (att.container_id, att.caller_ifname) not in valid:
                stale.setdefault(att.container_id, []).append(att)
        errors = []
        for container_id, atts in stale.items():
            try:
                await self._serialized(container_id, "DEL", partial(
                    self.delete_attachments, container_id, atts, "GC", origin="gc",
                    caller_network=conf.name))
            except CNIError as exc:
                errors.append(exc.msg)
        if errors:
            raise CNIError(DEL_INCOMPLETE, "GC: " + "; ".join(errors))


def _conf_name(stdin: str) -> str | None:
    """The netctl conf's ``name`` if stdin decodes; DEL must work without it."""
    try:
        obj = msgspec.json.decode(stdin.encode())
    except msgspec.DecodeError:
        return None
    name = obj.get("name") if isinstance(obj, dict) else None
    return name if isinstance(name, str) else None
