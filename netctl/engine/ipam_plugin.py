"""``netctl-ipam`` run as a plain IPAM plugin: a main plugin execs it, it forwards to the
daemon, and the daemon allocates from the engine's planner and store, owned by (container
id, ifname). Each request is one journal transaction; the verbs are a table like the
engine's, each run in the container's turn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

from netctl.cni import versions
from netctl.cni.request import GCList, Invocation, conf_as
from netctl.engine.admission import Admission
from netctl.engine.chains import ipam_config, served_ipam
from netctl.engine.requests import requested_addresses
from netctl.engine.verbs import ANY, Reply, Verb, admit, container_of
from netctl.errors import INVALID_CONFIG, UNKNOWN_CONTAINER, CNIError
from netctl.ipam import sticky
from netctl.ipam.planner import ipam_result, pool_key
from netctl.ipam.ranges import IPAMConfig, Range
from netctl.ipam.store import Store, record
from netctl.journal.records import OpStart, Owner
from netctl.journal.store import Journal


class _Conf(GCList, kw_only=True, forbid_unknown_fields=False):
    cniVersion: str
    name: str = ""
    ipam: dict[str, object] | None = None
    runtimeConfig: dict[str, object] = {}


@dataclass(frozen=True)
class _Request:
    inv: Invocation
    conf: _Conf
    cfg: IPAMConfig
    ranges: list[Range]

    @property
    def pools(self) -> set[str]:
        return {pool_key(self.cfg, r) for r in self.ranges}

    def op(self, origin: str = "ipam") -> OpStart:
        inv = self.inv
        return OpStart(verb=inv.verb, container_id=inv.container_id, netns=inv.netns,
                       ifname=inv.ifname, caller_network=self.conf.name,
                       caller_version=self.conf.cniVersion, pod=inv.pod, request=inv.stdin,
                       origin=origin)


@dataclass
class IpamPlugin:
    journal: Journal
    store: Store
    admission: Admission
    ipam_types: frozenset[str]
    gc_grace: float = 30.0

    async def handle(self, inv: Invocation) -> Reply:
        conf = conf_as(inv, _Conf, "netctl-ipam: the network config")
        plugin = inv.conf or {}  # the whole conf of the main plugin that exec'd us
        ipam = served_ipam(plugin, self.ipam_types)
        if ipam is None:
            raise CNIError(INVALID_CONFIG, "netctl-ipam: the config has no 'ipam' section of "
                           "type netctl-ipam")
        verb = IPAM_VERBS[inv.verb]
        admit(verb, inv, conf.cniVersion, who="netctl-ipam: ")
        req = _Request(inv, conf, *ipam_config(plugin, ipam))
        async with self.admission.turn(container_of(verb, inv), inv.verb):
            return await verb.handler(self, req)
        raise AssertionError("unreachable: a turn ends in its body or raises")

    async def add(self, req: _Request) -> Reply:
        inv = req.inv
        wanted = requested_addresses(req.conf.runtimeConfig, inv.args)
        # a plain plugin sees no annotations: the pod's name is its identity
        owner = Owner(inv.container_id, inv.ifname, inv.netns, inv.pod, None,
                      sticky.identity(inv.pod))
        try:
            decision = await self.store.allocate(req.cfg, req.ranges, owner, wanted,
                                      time.time())
        except CNIError as exc:
            await self.journal.one_transaction(req.op(), failure=exc)
            raise
        await record(self.store, decision.new, partial(
            self.journal.one_transaction, req.op(), new=decision.new, pools=decision.pools))
        result = ipam_result(req.cfg, decision.leases, req.conf.cniVersion)
        return Reply(versions.convert_result(result, req.conf.cniVersion))

    async def delete(self, req: _Request) -> Reply:
        gone = self.store.index.of_owner(req.inv.container_id, req.inv.ifname, req.pools)
        await self.journal.one_transaction(req.op(), gone=gone)
        return Reply()

    async def check(self, req: _Request) -> Reply:
        if not self.store.index.of_owner(req.inv.container_id, req.inv.ifname, req.pools):
            exc = CNIError(UNKNOWN_CONTAINER, f"netctl-ipam: container {req.inv.container_id} "
                           f"ifname {req.inv.ifname} holds no address in "
                           f"{', '.join(sorted(req.pools))}")
            await self.journal.one_transaction(req.op(), failure=exc)
            raise exc
        await self.journal.one_transaction(req.op())
        return Reply()

    async def gc(self, req: _Request) -> Reply:
        """Release this config's plain-plugin allocations the valid list does not name."""
        valid = req.conf.valid_list()
        if valid is None:
            return Reply(warning="netctl-ipam GC carried no cni.dev/valid-attachments list: "
                         "nothing collected")
        young = time.time() - self.gc_grace
        stale = [a for a in self.store.index.live() if a.pool in req.pools
                 and a.owner.attachment_id is None and a.allocated_at <= young
                 and (a.owner.container_id, a.owner.ifname) not in valid]
        await self.journal.one_transaction(req.op(), gone=stale)
        return Reply()

    async def status(self, req: _Request) -> Reply:
        return Reply()


IPAM_VERBS: dict[str, Verb[IpamPlugin, _Request]] = {
    "ADD": Verb(ANY, per_container=True, handler=IpamPlugin.add),
    "DEL": Verb(ANY, per_container=True, handler=IpamPlugin.delete),
    "CHECK": Verb((0, 4, 0), per_container=True, handler=IpamPlugin.check),
    "GC": Verb((1, 1, 0), per_container=False, handler=IpamPlugin.gc),
    "STATUS": Verb((1, 1, 0), per_container=False, handler=IpamPlugin.status),
}
