"""DELs of containers netctl never saw (:mod:`netctl.engine.foreign`): :class:`ForeignDels`
finds what ran for one and DELs it as one journaled DEL, tried once, never an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from netctl.cni.config import Chain, parse_chain
from netctl.engine import foreign
from netctl.engine.chains import Chains, StepError, del_end, names, retry_at
from netctl.engine.choice import Resolver
from netctl.engine.conf import Call
from netctl.engine.networks import inline
from netctl.engine.verbs import Reply
from netctl.errors import CANCELLED, DEL_INCOMPLETE, CNIError, describe
from netctl.journal.records import Attachment, OpEnd, OpStart
from netctl.journal.store import Journal

log = logging.getLogger("netctl.engine")


@dataclass(frozen=True)
class Cutover:
    """Where a DEL for a container netctl never saw finds what ran for it; ``enabled``
    False answers such a DEL "nothing"."""

    enabled: bool = True
    multus_cache: str = foreign.DEFAULT_MULTUS_CACHE
    results_cache: str = foreign.DEFAULT_RESULTS_CACHE


@dataclass(frozen=True)
class Found:
    """What ran for a container netctl never saw, (network, interface, chain) each, and where."""

    chains: list[tuple[str, str, Chain]]
    source: str

    def nothing(self, container_id: str) -> str:
        """The warning of a DEL with nothing to run."""
        return f"container {container_id} is unknown to netctl and {self.source}: " \
            "nothing DELeted"


@dataclass
class ForeignDels:
    """The DEL of a container netctl never saw (module doc)."""

    where: Cutover
    journal: Journal
    chains: Chains
    networks: Resolver

    async def delete(self, call: Call, origin: str, found: Found) -> Reply:
        """DEL what ``found`` names, journaled as one DEL whose attachments are those
        networks; Multus' cache goes once they are all DELeted. One try, never an error: a
        failing delegate is named in the warning and its attachment ends all the same
        (netctl cannot tell a pod that had that network from one whose ADD it refused)."""
        inv = call.inv
        chains, source = found.chains, found.source
        results = await trio.to_thread.run_sync(lambda: [foreign.cached_result(
            self.where.results_cache, chain.name, inv.container_id, ifname)
            for _, ifname, chain in chains])
        atts = [Attachment(
            container_id=inv.container_id, ifname=ifname, network=name, chain=chain,
            is_default=i == 0, caller_network=inv.conf_name, caller_ifname=inv.ifname,
            netns=inv.netns, pod=inv.pod, steps_started=len(chain.plugins), result=result)
            for i, ((name, ifname, chain), result) in enumerate(zip(chains, results,
                                                                    strict=True))]
        reason = f"a container netctl never saw (created before the switch): {source}"
        op_id, _ = await self.journal.begin(OpStart(
            verb="DEL", container_id=inv.container_id, netns=inv.netns, ifname=inv.ifname,
            caller_network=inv.conf_name, pod=inv.pod, request=inv.stdin, origin=origin,
            reason=reason), adding=atts)
        outcome: dict[int, list[StepError]] = {}
        async with self.journal.running(op_id, lambda exc: del_end(
                "failed", CANCELLED, describe(exc), atts, outcome), retry_at) as closing:
            await self.chains.delete_all(op_id, self.chains.runs(atts), outcome)
            failures = [e.msg for errs in outcome.values() for e in errs]
            closing.end = OpEnd(state="failed" if failures else "done",
                                code=DEL_INCOMPLETE if failures else None,
                                error="; ".join(failures) or None, removed=atts)
        log.info("DEL of container %s, unknown to netctl (%s): %s%s", inv.container_id,
                 source, names(atts), f"; failed: {'; '.join(failures)}" if failures else "")
        if failures:
            return Reply(warning=f"{reason}: tried once, not everything went: "
                         + "; ".join(failures))
        path = foreign.cache_path(self.where.multus_cache, inv.container_id)
        if path is not None and source.startswith("Multus' cache"):
            await trio.to_thread.run_sync(partial(Path(path).unlink, missing_ok=True))
        return Reply()

    async def find(self, call: Call) -> Found:
        """What ran for an unknown container: Multus' cache of it, else the cluster network."""
        inv = call.inv
        path = foreign.cache_path(self.where.multus_cache, inv.container_id)
        why = ""
        if path is not None:
            try:
                raw = await trio.Path(path).read_bytes()
                source = f"Multus' cache {path}"
                out = []
                for cached in foreign.multus_cache(raw, inv.ifname):
                    try:
                        out.append((cached.name, cached.ifname, parse_chain(
                            cached.config, f"{source}: network {cached.name!r}")))
                    except CNIError as exc:
                        log.warning("DEL of unknown container %s: %s; skipped",
                                    inv.container_id, exc.msg)
                return Found(out, source)
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as exc:
                why = f" (Multus' cache {path} unreadable: {exc})"
        try:
            conf = call.conf
            if conf.delegates:
                net = inline(conf.delegates[0], 0)
            else:
                # where Multus (and Kubernetes mode) look the cluster network up
                net = self.networks.resolve(conf.clusterNetwork, conf.multusNamespace)
        except CNIError as exc:
            return Found([], f"its cluster network cannot be read ({exc.msg}){why}")
        return Found([(net.key, inv.ifname, net.chain)], f"its cluster network {net.key}{why}")
