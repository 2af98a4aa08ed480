"""Where a pod's networks come from: the :class:`Selector` that finds a pod's
:class:`Choice` (standalone: :class:`ArgsSelector`; Kubernetes mode:
:class:`~netctl.kube.select.KubeSelector`) and the :class:`Resolver` that looks a network
up (:class:`~netctl.engine.networks.NetworkDir`; :class:`~netctl.kube.nads.NadResolver`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from netctl.cni.request import Invocation, Pod
from netctl.engine import selection
from netctl.engine.conf import NetctlConf
from netctl.engine.networks import Network
from netctl.engine.requests import requested_ips

SELECTION_ARG = "NETCTL_NETWORKS"


class Resolver(Protocol):
    def resolve(self, ref: str, namespace: str) -> Network:
        """The network ``ref`` names; :class:`~netctl.errors.NotListedYet` when its
        source has not been read yet (Kubernetes mode, before the first list of NADs)."""
        ...

    async def wait_listed(self) -> None:
        """After a :class:`~netctl.errors.NotListedYet`: wait, a bounded time, until
        :meth:`resolve` can answer."""
        ...


@dataclass(frozen=True)
class Choice:
    """A pod's network selection, as a :class:`Selector` found it."""

    networks: list[selection.Selection] = field(default_factory=list)  # the pod's own
    cluster: selection.Selection | None = None  # replaces clusterNetwork / the 1st delegate
    skip_defaults: bool = False  # no defaultNetworks (a pod of a system namespace)
    home: str | None = None  # namespace of clusterNetwork/defaultNetworks; None: the pod's
    pod: Pod | None = None  # Kubernetes mode: its networks' faults are refused as its
    identity: str = ""  # who owns sticky addresses (from annotations and labels); "": its name


class Selector(Protocol):
    async def select(self, conf: NetctlConf, inv: Invocation) -> Choice: ...


class ArgsSelector:
    """Standalone mode: ``NETCTL_NETWORKS=<annotation syntax>`` in CNI_ARGS, its
    requested addresses checked before anything runs."""

    async def select(self, conf: NetctlConf, inv: Invocation) -> Choice:
        chosen = selection.parse(inv.args.get(SELECTION_ARG, ""))
        for sel in chosen:
            requested_ips(sel.ips, f"{SELECTION_ARG}: network {ref(sel)!r}")
        return Choice(chosen)


def ref(chose: selection.Selection) -> str:
    return f"{chose.namespace}/{chose.name}" if chose.namespace else chose.name
