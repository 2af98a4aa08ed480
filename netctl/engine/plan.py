"""From one invocation to the list of attachments it needs. Pure but for network lookup.

The netctl conf names the pod's cluster network (``clusterNetwork`` on
CNI_IFNAME), networks every pod gets (``defaultNetworks``), or Multus-style
inline ``delegates`` (the first on CNI_IFNAME); the pod's own selection adds
more. The selection comes in as data, a :class:`Choice` — from CNI_ARGS in
standalone mode (:class:`ArgsSelector`), from the pod in Kubernetes mode
(:class:`~netctl.kube.select.KubeSelector`, which may also replace the
cluster network, skip ``defaultNetworks`` and look them up in ``multusNamespace``)
— and each network becomes an :class:`~netctl.journal.records.Attachment` with its
interface name, chain and arguments, ready to be journaled.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from netctl.cni.request import GCList, Invocation, Pod, conf_as
from netctl.engine import selection
from netctl.engine.networks import Network, inline
from netctl.errors import INVALID_CONFIG, CNIError, NotListedYet, Refusal
from netctl.ipam import sticky
from netctl.journal.records import Attachment
from netctl.kube.client.objects import REASON_BAD_ANNOTATION

SELECTION_ARG = "NETCTL_NETWORKS"
_MAC_RE = re.compile(r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$")


class NetctlConf(GCList, kw_only=True, forbid_unknown_fields=False):
    """The meta-plugin's own network config, as the runtime passes it.

    Multus' keys keep Multus' names and defaults (its ``pkg/types/conf.go``) and, as
    Multus reads them, match in any letter case (:data:`MULTUS_KEYS`)."""

    cniVersion: str
    name: str
    type: str = "netctl-cni"
    socket: str = ""
    clusterNetwork: str = ""
    defaultNetworks: list[str] = []
    delegates: list[dict[str, Any]] = []
    runtimeConfig: dict[str, Any] = {}
    prevResult: dict[str, Any] | None = None
    # Kubernetes mode (Multus' keys):
    multusNamespace: str = "kube-system"  # where clusterNetwork/defaultNetworks NADs live
    systemNamespaces: list[str] = msgspec.field(  # their pods get no defaultNetworks
        default_factory=lambda: ["kube-system"])
    namespaceIsolation: bool = False  # a pod may use NADs of its namespace (and global ones)
    globalNamespaces: str | list[str] = ""  # Multus: comma-separated; "" means ["default"]
    readinessindicatorfile: str = ""  # ADD waits for this file; STATUS not ready without it

    def global_namespaces(self) -> list[str]:
        """The namespaces any pod may take NADs from under ``namespaceIsolation``:
        ``globalNamespaces`` (comma-separated, or a list), or only ``default`` when it is
        not set — set, it replaces ``default``, as in Multus."""
        raw = self.globalNamespaces
        names = raw.split(",") if isinstance(raw, str) else raw
        names = [n.strip() for n in names if n.strip()]
        return names or ["default"]


MULTUS_KEYS = ("clusterNetwork", "defaultNetworks", "delegates", "multusNamespace",
               "systemNamespaces", "namespaceIsolation", "globalNamespaces",
               "readinessindicatorfile")


def decode_conf(inv: Invocation) -> NetctlConf:
    conf = conf_as(inv, NetctlConf, "netctl config", any_case=MULTUS_KEYS)
    if conf.delegates and (conf.clusterNetwork or conf.defaultNetworks):
        raise CNIError(INVALID_CONFIG, "netctl config: 'delegates' cannot be combined with "
                       "'clusterNetwork' or 'defaultNetworks'")
    if not conf.delegates and not conf.clusterNetwork:
        raise CNIError(INVALID_CONFIG, "netctl config: set 'clusterNetwork' or 'delegates'")
    return conf


@dataclass
class Call:
    """One invocation of netctl-cni and its netctl conf, each decoded once: what the
    engine's handlers get. The conf is decoded when first asked for — by the version
    gate, for every verb that has one — and kept; a DEL, which needs none, never asks
    unless its container is unknown (:mod:`netctl.engine.foreign`)."""

    inv: Invocation
    _conf: NetctlConf | None = None

    @property
    def conf(self) -> NetctlConf:
        if self._conf is None:
            self._conf = decode_conf(self.inv)
        return self._conf


def requested_ips(value: Any, where: str) -> list[str]:
    """Requested addresses (``ips``): a list of IP addresses (a ``/prefix`` allowed), or
    refused with code 7 naming the bad one."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(ip, str) for ip in value):
        raise CNIError(INVALID_CONFIG, f"{where}: 'ips' must be a list of addresses, not "
                       f"{str(value)[:60]!r}")
    for ip in value:
        try:
            ipaddress.ip_interface(ip.strip())
        except ValueError:
            raise CNIError(INVALID_CONFIG, f"{where}: requested address {ip[:60]!r} is not "
                           "an IP address") from None
    return value


def requested_mac(value: Any, where: str) -> str | None:
    """A requested MAC address (``mac``): six colon-separated hex octets, or code 7."""
    if value is None:
        return None
    if not isinstance(value, str) or not _MAC_RE.fullmatch(value):
        raise CNIError(INVALID_CONFIG, f"{where}: requested MAC {str(value)[:60]!r} is not a "
                       "MAC address (six hex octets separated by ':')")
    return value


def requested_addresses(runtime: dict[str, Any], args: dict[str, str]) -> list[str]:
    """The addresses a runtime asked for either way: ``runtimeConfig.ips`` (CRI-O,
    containerd, podman with the capability declared) or ``IP=`` in CNI_ARGS (podman's
    ``--ip`` and ``network reload``; comma-separated for several). Both given and
    different: refused with code 7."""
    ips = requested_ips(runtime.get("ips"), "runtimeConfig")
    if "IP" not in args:
        return ips
    from_args = requested_ips([ip for ip in args["IP"].split(",") if ip], "CNI_ARGS IP=")
    if ips and {_address(ip) for ip in ips} != {_address(ip) for ip in from_args}:
        raise CNIError(INVALID_CONFIG, f"the requested addresses disagree: CNI_ARGS "
                       f"IP={args['IP']} but runtimeConfig.ips {ips}")
    return ips or from_args


def runtime_requests(runtime: dict[str, Any], args: dict[str, str]) -> dict[str, Any]:
    """The cluster network's capability arguments: the runtime's ``runtimeConfig`` with
    the address (:func:`requested_addresses`) and the MAC it asked for either way —
    ``runtimeConfig.mac`` or ``MAC=`` in CNI_ARGS (podman's ``--mac-address``)."""
    caps = dict(runtime)
    ips = requested_addresses(runtime, args)
    if ips:
        caps["ips"] = ips
    mac = requested_mac(caps.get("mac"), "runtimeConfig")
    if "MAC" in args:
        from_args = requested_mac(args["MAC"], "CNI_ARGS MAC=")
        if mac and from_args and mac.lower() != from_args.lower():
            raise CNIError(INVALID_CONFIG, f"the requested MACs disagree: CNI_ARGS MAC="
                           f"{from_args} but runtimeConfig.mac {mac}")
        mac = mac or from_args
    if mac:
        caps["mac"] = mac
    return caps


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_interface(text.strip()).ip


class Resolver(Protocol):
    def resolve(self, ref: str, namespace: str) -> Network:
        """The network ``ref`` names; :class:`~netctl.errors.NotListedYet` when its
        source has not been read yet (Kubernetes mode, before the first list of NADs)."""
        ...

    async def wait_listed(self) -> None:
        """After a :class:`~netctl.errors.NotListedYet`: wait, a bounded time, until
        :meth:`resolve` can answer (it says why when it still cannot)."""
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
    """Where a pod's network selection comes from."""

    async def select(self, conf: NetctlConf, inv: Invocation) -> Choice: ...


class ArgsSelector:
    """Standalone mode: ``NETCTL_NETWORKS=<annotation syntax>`` in CNI_ARGS; the
    addresses a network asks for are checked here, before anything runs, as
    Kubernetes mode checks the annotation's."""

    async def select(self, conf: NetctlConf, inv: Invocation) -> Choice:
        chosen = selection.parse(inv.args.get(SELECTION_ARG, ""))
        for sel in chosen:
            requested_ips(sel.ips, f"{SELECTION_ARG}: network {_ref(sel)!r}")
        return Choice(chosen)


def _ref(chose: selection.Selection) -> str:
    return f"{chose.namespace}/{chose.name}" if chose.namespace else chose.name


def plan(conf: NetctlConf, inv: Invocation, choice: Choice,
         networks: Resolver) -> list[Attachment]:
    namespace = inv.pod.namespace or "default"
    home = choice.home or namespace

    def resolve(ref: str, where: str) -> Network:
        try:
            return networks.resolve(ref, where)
        except CNIError as exc:
            raise _as_pods(exc, choice) from None

    # each: the network, is it the cluster network, its capability and CNI args, its
    # interface, the default-route it asks for
    planned: list[tuple[Network, bool, dict[str, Any], dict[str, Any], str | None,
                        list[str] | None]] = []
    extra: list[tuple[Network, selection.Selection | None]]
    cluster_caps = runtime_requests(conf.runtimeConfig, inv.args)
    override = resolve(_ref(choice.cluster), home) if choice.cluster else None
    cluster_args = dict(choice.cluster.cni_args or {}) if choice.cluster else {}
    cluster_route = choice.cluster.default_route if choice.cluster else None
    if conf.delegates:
        first, *rest = [inline(d, i) for i, d in enumerate(conf.delegates)]
        planned.append((override or first, True, cluster_caps, cluster_args, inv.ifname,
                        cluster_route))
        extra = [(net, None) for net in rest]
    else:
        cluster = override or resolve(conf.clusterNetwork, home)
        planned.append((cluster, True, cluster_caps, cluster_args, inv.ifname,
                        cluster_route))
        extra = [] if choice.skip_defaults else [
            (resolve(ref, home), None) for ref in conf.defaultNetworks]
    for chose in choice.networks:
        extra.append((resolve(_ref(chose), namespace), chose))
    try:
        names = selection.assign_ifnames(inv.ifname,
                                         [s.interface if s else None for _, s in extra])
    except CNIError as exc:
        raise _as_pods(exc, choice) from None
    for (net, sel), name in zip(extra, names, strict=True):
        planned.append((net, False, sel.capability_args() if sel else {},
                        dict(sel.cni_args) if sel and sel.cni_args else {}, name,
                        sel.default_route if sel else None))
    return [Attachment(container_id=inv.container_id, ifname=str(ifname), network=net.key,
                       chain=net.chain, resource=net.resource, is_default=default,
                       caller_network=conf.name,
                       caller_ifname=inv.ifname, netns=inv.netns, pod=inv.pod,
                       capability_args=caps, cni_args=cni_args,
                       identity=choice.identity or sticky.identity(inv.pod),
                       default_route=list(gateways or []))
            for net, default, caps, cni_args, ifname, gateways in planned]


def _as_pods(exc: CNIError, choice: Choice) -> CNIError:
    """In Kubernetes mode a network the pod cannot have is refused as the pod's: the
    message names the pod, and the pod gets an Event (:class:`~netctl.errors.Refusal`)."""
    if choice.pod is None or isinstance(exc, NotListedYet):  # not the pod's fault: no Event
        return exc
    if isinstance(exc, Refusal):
        return exc.for_pod(choice.pod.key)
    return Refusal(exc.msg, REASON_BAD_ANNOTATION, exc.msg, exc.code).for_pod(choice.pod.key)


def one_more(of: Attachment, net: Network, chose: selection.Selection,
             ifname: str) -> Attachment:
    """One more attachment of a running container, beside ``of`` (one of its live ones:
    the netns, the pod and the runtime's call it shares, so the runtime's DEL of the
    container removes it too): network ``net`` on ``ifname``, with what ``chose`` asks
    for, as a ``NETCTL_NETWORKS`` element would (``netctl attach``)."""
    requested_ips(chose.ips, f"network {_ref(chose)!r}")
    return Attachment(container_id=of.container_id, ifname=ifname, network=net.key,
                      chain=net.chain, resource=net.resource,
                      caller_network=of.caller_network,
                      caller_ifname=of.caller_ifname, netns=of.netns, pod=of.pod,
                      capability_args=chose.capability_args(),
                      cni_args=dict(chose.cni_args or {}), identity=of.identity)
