"""The journal's typed records: what callers hand to :class:`~netctl.journal.store.Journal`
and get back from it, the IPAM's too (:mod:`netctl.ipam`, a layer above, decides them; the
journal keeps them). :class:`Attachment` is the one shape of "one network of one
container", from plan to journal to DEL. No I/O here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import msgspec

from netctl.cni.config import Chain
from netctl.cni.request import Pod


class Attachment(msgspec.Struct, kw_only=True):
    """One network of one container, from plan to journal to DEL."""

    container_id: str
    ifname: str
    network: str  # the network's key: ns/name of its NAD, or a file path
    chain: Chain
    is_default: bool = False
    caller_network: str = ""  # the netctl conf's name the runtime called
    caller_ifname: str = ""  # CNI_IFNAME of that call
    netns: str = ""
    pod: Pod = Pod()
    capability_args: dict[str, Any] = {}
    cni_args: dict[str, Any] = {}
    identity: str = ""  # who owns its sticky addresses (netctl/ipam/sticky.py)
    default_route: list[str] = []  # the gateways it asks for (netctl/engine/gateways.py)
    resource: str = ""  # a device network's resource and device (netctl/engine/devices.py)
    device: str = ""
    # filled in by the journal and the chain as the attachment lives:
    id: int = 0
    steps_started: int = 0
    result: dict[str, Any] | None = None
    state: str = "planned"  # planned | adding | attached | removing | removed
    add_op: int | None = None
    del_op: int | None = None
    error: str | None = None
    del_failures: int = 0  # DELs of it that failed (the reconciler backs off on these)
    retry_at: float | None = None  # the reconciler leaves it be until then
    created_at: float = 0.0

    def where(self, index: int) -> str:
        return (f"network {self.network!r} (interface {self.ifname}), "
                f"plugin {self.chain.types[index]!r}")


class OpStart(msgspec.Struct, kw_only=True):
    """An operation as it begins: who asked for what."""

    verb: str
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    caller_network: str = ""
    caller_version: str = ""
    pod: Pod = Pod()
    request: bytes | None = None
    origin: str = "runtime"  # runtime | replay | reconcile | event | pod-deleted | gc | …
    reason: str | None = None  # why netctl began it when no runtime asked (a DEL, a RELEASE)


class OpEnd(msgspec.Struct, kw_only=True):
    """How an operation ended, and what became of its attachments."""

    state: str  # done | failed | compensated | compensate_failed | abandoned
    code: int | None = None
    error: str | None = None
    attached: list[Attachment] = []  # now live, with their final results
    removed: list[Attachment] = []  # DELeted completely
    kept: list[tuple[Attachment, str]] = []  # not (fully) removed: the error, for a retry


class StepStart(msgspec.Struct, kw_only=True):
    op_id: int
    attachment: int
    position: int
    verb: str
    plugin_type: str
    config: bytes  # the exact stdin the plugin gets
    netns: str
    ifname: str


class StepEnd(msgspec.Struct, kw_only=True):
    step_id: int
    attachment: int
    verb: str
    position: int
    result: dict[str, Any] | None = None
    code: int | None = None
    error: str | None = None
    stderr: bytes = b""
    seconds: float = 0.0
    started: bool = True  # False: the plugin refused before doing anything (no undo needed)


class Operation(msgspec.Struct, kw_only=True):
    id: int
    verb: str
    container_id: str
    netns: str
    ifname: str
    state: str
    origin: str


class BlockRecord(msgspec.Struct, kw_only=True):
    """A block of the cluster-wide IPAM as the journal keeps it (``ipam_blocks``)."""

    name: str
    pool: str
    scope: str
    cidr: str
    node: str
    state: str = "claiming"  # claiming | held | released | lost | taken | seen
    id: int = 0
    since: float = 0.0
    until: float | None = None


@dataclass(frozen=True, slots=True)
class Owner:
    """Who an allocation is for; it is released only by the same owner."""

    container_id: str
    ifname: str
    netns: str = ""
    pod: Pod = Pod()  # noqa: RUF009 - frozen, shared safely
    attachment_id: int | None = None
    identity: str = ""  # who owns a sticky address (netctl/ipam/sticky.py); "": nobody


@dataclass(frozen=True, slots=True)
class Allocation:
    """One address held by an owner (live until released)."""

    pool: str
    scope: str
    ip: int
    version: int
    prefix: int
    owner: Owner
    allocated_at: float = 0.0
    sticky: str = ""  # the identity it is reserved for once released ("": not sticky)
    sticky_for: float = 0.0  # for how long (seconds)

    @property
    def address(self) -> str:
        """The address alone, canonical text."""
        return str(_address(self.version, self.ip))

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefix}"


def _address(version: int, ip: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.IPv4Address(ip) if version == 4 else ipaddress.IPv6Address(ip)


@dataclass(frozen=True, slots=True)
class PoolInfo:
    """A pool as the journal's ``ipam_pools`` describes it."""

    network_name: str
    range: str
    family: int
    size: int


@dataclass(frozen=True, slots=True)
class Reservation:
    """A released sticky address, kept for ``identity`` until ``until`` (wall clock)."""

    pool: str
    scope: str
    version: int
    ip: int
    identity: str
    ifname: str
    until: float
    address: str  # the address alone, canonical text
    container_id: str  # the holder that released it

    @property
    def key(self) -> tuple[str, str, str]:
        return self.pool, self.identity, self.ifname
