"""The journal's typed records: what callers hand to :class:`~netctl.journal.store.Journal`
and get back from it. No I/O here.

:class:`Attachment` is the one shape of "one network of one container": the
engine plans it, the journal stores it (and fills in its id), chains run on
it, and a later DEL, the replay and the reconciler read it back from the journal.
"""

from __future__ import annotations

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
    # the selection's default-route: the pod's default route goes via this gateway on
    # this interface once the ADD's chains have run (netctl/engine/gateways.py)
    default_route: list[str] = []
    # a device network's (netctl/engine/devices.py): the resource its NAD names and the
    # device of it the attachment holds (journaled with its first write)
    resource: str = ""
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
