"""The cluster-wide IPAM store (``ipam-backend: kubernetes``): a node allocates inside the
address blocks it claimed through the API, from its own journal, so steady-state churn
writes nothing to the API (docs/ipam.md has the rules).

The package, by concern: :mod:`~netctl.ipam.cluster.blocks` (the arithmetic of blocks,
pure), :mod:`~netctl.ipam.cluster.state` (what the parts share),
:mod:`~netctl.ipam.cluster.lifecycle` (a block's states, one table),
:mod:`~netctl.ipam.cluster.claims` (claims, releases, settling),
:mod:`~netctl.ipam.cluster.borrow` (requested addresses in other nodes' blocks),
:mod:`~netctl.ipam.cluster.adopt` (a wiped state dir), :mod:`~netctl.ipam.cluster.takeover`
(whereabouts), :mod:`~netctl.ipam.cluster.gone` (the gone nodes' blocks, by the Lease's
holder), :mod:`~netctl.ipam.cluster.maintain`, and :mod:`~netctl.ipam.cluster.store` (the
:class:`~netctl.ipam.store.Store`). :func:`cluster_store` builds it complete.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Set as AbstractSet

import trio

from netctl.ipam.cluster.adopt import Adoption
from netctl.ipam.cluster.borrow import Borrows, asks
from netctl.ipam.cluster.claims import Claims
from netctl.ipam.cluster.gone import LEASE_NAME, LEASE_NAMESPACE, GoneNodes, lease_duration
from netctl.ipam.cluster.maintain import Maintenance
from netctl.ipam.cluster.state import Cluster, ClusterSettings, Holdings
from netctl.ipam.cluster.store import ClusterStore
from netctl.ipam.cluster.takeover import WhereaboutsHolds
from netctl.ipam.store import IndexStore, Loaded
from netctl.journal.store import Journal
from netctl.kubeapi.api import Api
from netctl.kubeapi.blocks import BLOCKS, LENDER_LABEL, NODE_LABEL, NODES
from netctl.kubeapi.informer import Informer
from netctl.kubeapi.leases import LeaseHold
from netctl.kubeapi.objects import Block as IPAMBlock
from netctl.kubeapi.objects import Borrow, Node, decode_block

__all__ = ["ClusterSettings", "ClusterStore", "cluster_store"]


def cluster_store(api: Api, journal: Journal, settings: ClusterSettings,
                  live: Loaded,
                  live_pods: Callable[[], AbstractSet[str] | None]) -> ClusterStore:
    """The cluster store over ``api``, its allocations ``live`` (the journal's live
    allocations and cursors); ``live_pods`` gives this node's pod UIDs (None until
    known). Its caches and loops run in :meth:`~ClusterStore.run`."""
    holdings = Holdings(IndexStore.of(*live))
    ask, asked = trio.open_memory_channel[Borrow](math.inf)

    def on_block(obj: IPAMBlock) -> None:
        if asks(obj, holdings):  # another node asks for an address of one of ours
            ask.send_nowait(obj)

    def watched(label: str) -> Informer[IPAMBlock]:
        """The blocks and borrows labelled ``label`` this node's name."""
        return Informer(api, IPAMBlock, BLOCKS, [("labelSelector", f"{label}={settings.node}")],
                        on_put=on_block, decode=decode_block)

    cluster = Cluster(api, journal, settings, watched(NODE_LABEL), watched(LENDER_LABEL))
    claims = Claims(cluster, holdings)
    borrows = Borrows(cluster, holdings, claims, asked)
    adoption = Adoption(cluster, holdings, claims, live_pods)
    whereabouts = WhereaboutsHolds(api, holdings)
    gone = GoneNodes(cluster, claims, LeaseHold(
        api, LEASE_NAMESPACE, LEASE_NAME, settings.node,
        lease_duration(settings.node_gone_grace)),
        Informer(api, Node, NODES, [], metadata_only=True),
        Informer(api, IPAMBlock, BLOCKS, [], metadata_only=True))
    maintenance = Maintenance(cluster, holdings, claims, gone)
    store = ClusterStore(cluster, holdings, claims, borrows, adoption, whereabouts, maintenance)
    journal.ipam.follower = store  # told of each allocation and release the journal commits
    return store
