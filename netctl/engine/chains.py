"""Running one attachment's delegate chain: ADD forward, DEL in reverse, CHECK forward.

Every step is journaled before the plugin starts and after it ends (config
bytes, netns, ifname, result or error, stderr, seconds). ADD keeps the chain's
latest result and how many steps started on the :class:`ChainState`, which is
exactly what a DEL needs: the started steps, in reverse, with that result as
``prevResult`` — from memory during compensation, from the journal later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from aiosqlite import Connection

from netctl.cni.config import Chain, parse_chain, plugin_config
from netctl.cni.invoke import Cancellation, PluginError, run_plugin
from netctl.errors import CNIError
from netctl.ipam import ranges as ranges_mod
from netctl.ipam.backend import Backend, Owner, static_ipam
from netctl.ipam.sqlite import SqliteBackend
from netctl.journal.store import Attachment, Journal


@dataclass
class Runner:
    """What running a plugin needs from the daemon."""

    journal: Journal
    bin_dirs: Sequence[str]
    timeout: float = 60.0
    owner: str = ""  # marks every child, see netctl.cni.invoke.kill_orphans
    cancel_grace: float = 5.0  # a cancelled delegate may finish its step this long
    ipam_types: frozenset[str] = frozenset({"netctl-ipam"})  # IPAM types served in-process
    ipam: Backend = field(default_factory=SqliteBackend)  # where allocations live


@dataclass
class ChainState:
    att_id: int
    network: str
    container_id: str
    netns: str
    ifname: str
    chain: Chain
    capability_args: dict[str, Any] = field(default_factory=dict)
    cni_args: dict[str, Any] = field(default_factory=dict)
    steps_started: int = 0
    result: dict[str, Any] | None = None
    pod: tuple[str, str, str] = ("", "", "")

    @classmethod
    def from_journal(cls, att: Attachment) -> ChainState:
        return cls(att.id, att.network, att.container_id, att.netns, att.ifname,
                   parse_chain(att.chain, f"network {att.network}"), att.capability_args,
                   att.cni_args, att.steps_started, att.result,
                   (att.pod_namespace, att.pod_name, att.pod_uid))

    def where(self, index: int) -> str:
        return (f"network {self.network!r} (interface {self.ifname}), "
                f"plugin {self.chain.types[index]!r}")


class StepError(CNIError):
    """A delegate step failed; the message names the network, interface and plugin."""


def served_ipam(plugin: dict[str, Any], types: frozenset[str]) -> dict[str, Any] | None:
    """The plugin's ``ipam`` section when netctl allocates for it in-process, else None."""
    ipam = plugin.get("ipam")
    if isinstance(ipam, dict) and ipam.get("type") in types:
        return ipam
    return None


def _config_for(runner: Runner, op_id: int, st: ChainState, index: int, verb: str,
                prev: dict[str, Any] | None) -> bytes | Callable[[Connection], Awaitable[bytes]]:
    """The step's stdin; for a served IPAM, a function that allocates (ADD) or looks up
    (DEL, CHECK) its addresses inside the step's journal transaction and hands the
    delegate a ``static`` IPAM section holding them."""
    ipam = served_ipam(st.chain.plugins[index], runner.ipam_types)
    if ipam is None:
        return plugin_config(st.chain, index, prev, st.capability_args, st.cni_args)
    cfg, ranges = ranges_mod.parse_config(ipam)
    owner = Owner(st.container_id, st.ifname, st.netns, st.pod, st.att_id, op_id)
    wanted = [str(ip) for ip in st.capability_args.get("ips") or []]

    async def build(db: Connection) -> bytes:
        if verb == "ADD":
            leases = await runner.ipam.allocate(db, cfg, ranges, owner, wanted)
        else:
            leases = await runner.ipam.held_by(db, cfg, ranges, attachment_id=st.att_id)
        return plugin_config(st.chain, index, prev, st.capability_args, st.cni_args,
                             ipam=static_ipam(cfg, leases))

    return build


async def _step(runner: Runner, op_id: int, st: ChainState, index: int, verb: str,
                prev: dict[str, Any] | None) -> dict[str, Any] | None:
    ptype = st.chain.types[index]
    try:
        step_id, conf = await runner.journal.begin_step(
            op_id, st.att_id, index, verb, ptype,
            _config_for(runner, op_id, st, index, verb, prev), st.netns, st.ifname)
    except CNIError as exc:  # e.g. an exhausted pool: nothing ran, nothing to undo
        raise StepError(exc.code, f"{st.where(index)}: {verb} refused: {exc.msg}",
                        exc.details) from exc
    if verb == "ADD":
        st.steps_started = max(st.steps_started, index + 1)
    cancel = Cancellation()
    try:
        out = await run_plugin(runner.bin_dirs, ptype, verb, conf, container_id=st.container_id,
                               netns=st.netns, ifname=st.ifname, timeout=runner.timeout,
                               owner=runner.owner, cancel_grace=runner.cancel_grace,
                               cancellation=cancel)
    except CNIError as exc:
        stderr = exc.stderr if isinstance(exc, PluginError) else b""
        await runner.journal.end_step(step_id, att_id=st.att_id, verb=verb, result=None,
                                      code=exc.code, error=exc.msg, stderr=stderr, seconds=0.0)
        raise StepError(exc.code, f"{st.where(index)}: {verb} failed: {exc.msg}",
                        exc.details) from exc
    except BaseException:
        done = cancel.finished
        if done is not None:  # cancelled, but the plugin finished its step within the grace
            await runner.journal.end_step(step_id, att_id=st.att_id, verb=verb,
                                          result=done.result, code=None, error=None,
                                          stderr=done.stderr, seconds=done.seconds)
            if verb == "ADD":
                st.result = done.result
        else:
            await runner.journal.end_step(step_id, att_id=st.att_id, verb=verb, result=None,
                                          code=None, error=cancel.describe(runner.cancel_grace),
                                          stderr=b"", seconds=0.0)
        raise
    release = None
    if verb == "DEL" and served_ipam(st.chain.plugins[index], runner.ipam_types) is not None:
        release = partial(runner.ipam.release, op_id=op_id, attachment_id=st.att_id)
    await runner.journal.end_step(step_id, att_id=st.att_id, verb=verb, result=out.result,
                                  code=None, error=None, stderr=out.stderr, seconds=out.seconds,
                                  also=release)
    return out.result


async def add_chain(runner: Runner, op_id: int, st: ChainState) -> dict[str, Any] | None:
    """ADD every step in order, each getting the previous result; return the final result."""
    prev: dict[str, Any] | None = None
    for index in range(len(st.chain.plugins)):
        prev = await _step(runner, op_id, st, index, "ADD", prev)
        st.result = prev
    return prev


async def del_chain(runner: Runner, op_id: int, st: ChainState) -> list[str]:
    """DEL every started step in reverse with the latest result; go on past failures.

    Returns the failures (empty when all went); things already gone are the
    plugins' business to tolerate, as the spec asks of them.
    """
    errors: list[str] = []
    for index in reversed(range(st.steps_started)):
        try:
            await _step(runner, op_id, st, index, "DEL", st.result)
        except StepError as exc:
            errors.append(exc.msg)
    return errors


async def check_chain(runner: Runner, op_id: int, st: ChainState) -> None:
    """CHECK every step in order with the stored final result."""
    for index in range(len(st.chain.plugins)):
        await _step(runner, op_id, st, index, "CHECK", st.result)


async def del_all(runner: Runner, op_id: int, states: Sequence[ChainState],
                  outcome: dict[int, list[str]]) -> None:
    """DEL several chains concurrently; as each finishes, ``outcome[att_id]`` gets its
    errors (empty: all removed). Filled in as it goes, so a caller that is cancelled or
    runs out of time still knows which chains finished."""

    async def one(st: ChainState) -> None:
        outcome[st.att_id] = await del_chain(runner, op_id, st)

    async with trio.open_nursery() as nursery:
        for st in states:
            nursery.start_soon(one, st)
