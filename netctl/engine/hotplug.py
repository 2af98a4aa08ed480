"""Hot-plug: one network plugged into, or unplugged from, a running container
(docs/standalone.md, "Plugging a network into a running container"). The new attachment
shares the netns, pod and runtime's call of the container's live ones (so the runtime's DEL
removes it too); it runs in the container's turn, journaled with origin ``hotplug``.
Kubernetes mode's hot-plug (:mod:`netctl.kube.hotplug`) takes the same steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
import trio

from netctl.cni.netns import link_names, netns_state
from netctl.cni.validate import ifname as valid_ifname
from netctl.engine import devices
from netctl.engine.chains import Run
from netctl.engine.choice import ref
from netctl.engine.engine import Engine
from netctl.engine.networks import Network, lookups
from netctl.engine.requests import requested_ips
from netctl.engine.selection import Selection, next_ifname
from netctl.errors import INVALID_CONFIG, UNKNOWN_CONTAINER, CNIError
from netctl.journal.records import Attachment, OpStart

ORIGIN = "hotplug"
T = TypeVar("T")


def addresses(att: Attachment) -> list[str]:
    """The addresses of an attachment's result (CIDR notation)."""
    return [str(ip.get("address")) for ip in (att.result or {}).get("ips") or []
            if isinstance(ip, dict) and ip.get("address")]


def describe(att: Attachment) -> dict[str, Any]:
    """An attachment as ``netctl attach``/``detach --json`` shows it."""
    return {"attachment": att.id, "container": att.container_id, "network": att.network,
            "ifname": att.ifname, "netns": att.netns, "addresses": addresses(att)}


def names_network(att: Attachment, ref: str) -> bool:
    """Whether ``ref`` names the attachment's network: its key, a bare NAD name looked up
    as for the pod, or its CNI name."""
    if ref == att.network:
        return True
    return "/" not in ref and (att.network in lookups(ref, att.pod.namespace or "default")
                               or att.chain.name == ref)


def base(container: str, live: list[Attachment]) -> Attachment:
    """The attachment a plugged one shares its netns, pod and runtime's call with: the
    attached cluster network, else any attached one; code 3 when there is none or its
    netns is gone."""
    of = next((a for a in live if a.is_default and a.state == "attached"),
              next((a for a in live if a.state == "attached"), None))
    if of is None:
        raise CNIError(UNKNOWN_CONTAINER, f"container {container} has no attached "
                       "network (its ADD failed, or a DEL is under way)")
    if netns_state(of.netns) != "ok":
        raise CNIError(UNKNOWN_CONTAINER, f"the netns of container {container} "
                       f"({of.netns}) is gone")
    return of


def target(live: list[Attachment], ifname: str = "", network: str = "") -> Attachment:
    """The live attachment ``netctl detach`` removes: the one on ``ifname``, else the one
    of ``network`` when it is attached exactly once; never the runtime's own interface
    (code 7)."""
    container = live[0].container_id if live else "?"
    found = [a for a in live if (not ifname or a.ifname == ifname)
             and (not network or names_network(a, network))]
    what = " and ".join(filter(None, (ifname and f"on interface {ifname}",
                                      network and f"of network {network!r}")))
    if not found:
        have = ", ".join(f"{a.ifname} ({a.network})" for a in live) or "none"
        raise CNIError(INVALID_CONFIG, f"container {container} has no live attachment "
                       f"{what}; it has: {have}")
    if len(found) > 1:
        raise CNIError(INVALID_CONFIG, f"network {network!r} is attached {len(found)} times "
                       f"to container {container} (interfaces "
                       f"{', '.join(a.ifname for a in found)}): name one with --ifname")
    (att,) = found
    if att.is_default:
        raise CNIError(INVALID_CONFIG, f"interface {att.ifname} of container {container} is "
                       f"its cluster network ({att.network}), which the runtime made: only "
                       "the runtime's DEL removes it")
    return att


@dataclass
class Hotplug:
    """``netctl attach`` and ``netctl detach``, carried out by the engine (module doc)."""

    engine: Engine

    async def attach(self, prefix: str, network: str, ifname: str = "",
                     ips: list[str] | None = None) -> dict[str, Any]:
        """Plug ``network`` into the container whose id starts with ``prefix``; what was
        attached (``existing``: it already was)."""
        engine = self.engine
        container = engine.journal.live.container(prefix, UNKNOWN_CONTAINER)
        if ifname:
            valid_ifname(ifname, "--ifname")
        chose = Selection(name=network, interface=ifname or None, ips=list(ips or []) or None)

        async def act(live: list[Attachment]) -> dict[str, Any]:
            of = base(container, live)
            net = engine.networks.resolve(network, of.pod.namespace or "default")
            same = [a for a in live if a.network == net.key and not a.is_default
                    and (a.ifname == ifname if ifname else True)]
            if same and same[0].state == "attached":
                wanted = chose.capability_args().get("ips")
                if wanted is None or wanted == same[0].capability_args.get("ips"):
                    return {**describe(same[0]), "existing": True}
                raise CNIError(INVALID_CONFIG, f"network {net.key} is already attached to "
                               f"container {container} as {same[0].ifname} with other "
                               "addresses: detach it first, or name another "
                               "interface (--ifname) to plug it once more")
            att, op_id = await self.plug(live, chose, network,
                                         f"netctl attach: network {net.key}")
            return {**describe(att), "existing": False, "operation": op_id}

        return await self.in_turn(container, act)

    async def in_turn(self, container: str,
                      act: Callable[[list[Attachment]], Awaitable[T]]) -> T:
        """``act`` on the container's live attachments, in its turn as an ADD."""
        async def turn() -> T:
            return await act(await self.engine.journal.live_attachments(container))

        return await self.engine.admission.serialized(container, "ADD", turn)

    async def plug(self, live: list[Attachment], chose: Selection, ref: str, reason: str,
                   origin: str = ORIGIN) -> tuple[Attachment, int]:
        """In the container's turn (``live``: its attachments): one more attachment, of
        network ``ref`` with what ``chose`` asks for, on ``chose.interface`` or the first
        free ``netN``, run as an ADD journaled with ``origin`` and ``reason``. The
        attachment and the operation's id."""
        engine = self.engine
        container = live[0].container_id if live else "?"
        of = base(container, live)
        net = engine.networks.resolve(ref, of.pod.namespace or "default")
        links = await trio.to_thread.run_sync(link_names, of.netns)
        taken = links | {a.ifname for a in live}
        ifname = chose.interface or ""
        if ifname and ifname in taken:
            raise CNIError(INVALID_CONFIG, f"interface {ifname} already exists in the netns "
                           f"of container {container} ({of.netns})")
        att = one_more(of, net, chose, ifname or next_ifname(taken))
        run = Run(att, engine.chains.served(att))
        await engine.chains.check_versions([run])
        await devices.give([att], engine.devices, engine.root,
                           held={a.device for a in live if a.device})
        op_id, attached = await engine.run_adds(OpStart(
            verb="ADD", container_id=container, netns=att.netns, ifname=att.ifname,
            caller_network=att.caller_network, pod=att.pod, origin=origin,
            request=msgspec.json.encode(msgspec.structs.asdict(chose)),
            reason=f"{reason} as {att.ifname}"), [run])
        return attached[0], op_id

    async def unplug(self, att: Attachment, reason: str, origin: str = ORIGIN) -> None:
        """In the container's turn: DEL the live attachment ``att`` (code 107 naming what
        could not be removed)."""
        await self.engine.delete_attachments(att.container_id, [att], OpStart(
            verb="DEL", container_id=att.container_id, netns=att.netns, ifname=att.ifname,
            caller_network=att.caller_network, pod=att.pod, origin=origin,
            reason=reason), "detach")

    async def detach(self, prefix: str, ifname: str = "", network: str = "") -> dict[str, Any]:
        """Unplug one network (:func:`target`) from the container whose id starts with
        ``prefix``; what was detached."""
        engine = self.engine
        if not ifname and not network:
            raise CNIError(INVALID_CONFIG, "detach: name the interface (--ifname) or the "
                           "network (--network)")
        container = engine.journal.live.container(prefix, UNKNOWN_CONTAINER)

        async def act() -> dict[str, Any]:
            att = target(await engine.journal.live_attachments(container), ifname, network)
            await self.unplug(att, f"netctl detach: network {att.network} on {att.ifname}")
            return describe(att)

        return await engine.admission.serialized(container, "DETACH", act)


def one_more(of: Attachment, net: Network, chose: Selection,
             ifname: str) -> Attachment:
    """One more attachment of a running container, sharing ``of``'s netns, pod and
    runtime's call: network ``net`` on ``ifname``, with what ``chose`` asks for."""
    requested_ips(chose.ips, f"network {ref(chose)!r}")
    return Attachment(container_id=of.container_id, ifname=ifname, network=net.key,
                      chain=net.chain, resource=net.resource,
                      caller_network=of.caller_network,
                      caller_ifname=of.caller_ifname, netns=of.netns, pod=of.pod,
                      capability_args=chose.capability_args(),
                      cni_args=dict(chose.cni_args or {}), identity=of.identity)
