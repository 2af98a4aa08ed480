"""What is leaked, decided from facts alone. Pure: no I/O, tested without an event loop.

The facts are what the journal says netctl made (attachments, allocations, the
host-side interfaces in their results) and what the node has now (which netns
paths exist, which host links exist with their kind and MAC). The plan lists
three kinds of clean-up, each with its reason:

- attachments to DEL through their chain: attached ones whose netns is gone
  (node reboot, runtime crash, a DEL that never came), and ``adding`` or
  ``removing`` ones whose operation is no longer running (a failed ADD that
  could not be undone, a DEL that failed half-way);
- allocations to release: live ones whose attachment is removed or missing,
  and plain-plugin ones whose netns is gone — older than the grace period, so
  an allocation a runtime is still setting up is never taken;
- host links to delete: the host end of a pod's veth, named in the result of an
  attachment that is removed, still present with the same MAC and kind veth,
  and named by no live attachment. Bridges and other shared links are never
  touched.

Containers with a request in flight are left alone this round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AttachmentFact:
    id: int
    container_id: str
    network: str
    ifname: str
    netns: str
    state: str
    op_running: bool  # its ADD (adding) or DEL (removing) operation is still running
    result: dict[str, Any] | None


@dataclass(frozen=True)
class AllocationFact:
    id: int
    pool: str
    address: str
    container_id: str
    ifname: str
    netns: str
    attachment_id: int | None
    attachment_state: str | None  # None: no such attachment (or a plain-plugin allocation)
    age: float  # seconds since it was allocated


@dataclass(frozen=True)
class Link:
    kind: str
    mac: str


@dataclass(frozen=True)
class Facts:
    attachments: list[AttachmentFact]  # live ones (not removed)
    removed_results: list[tuple[int, dict[str, Any] | None]]  # (attachment id, last result)
    allocations: list[AllocationFact]  # live ones
    netns_exists: dict[str, bool]
    host_links: dict[str, Link]
    busy: frozenset[str] = frozenset()  # containers with a request in flight


@dataclass
class Plan:
    delete: list[tuple[int, str, str]] = field(default_factory=list)  # (att, container, why)
    release: list[tuple[int, str, str]] = field(default_factory=list)  # (alloc, address, why)
    unlink: list[tuple[str, str]] = field(default_factory=list)  # (link name, why)

    @property
    def empty(self) -> bool:
        return not (self.delete or self.release or self.unlink)

    def to_json(self) -> dict[str, Any]:
        return {
            "attachments": [{"attachment": a, "container": c, "reason": r}
                            for a, c, r in self.delete],
            "allocations": [{"allocation": a, "address": ad, "reason": r}
                            for a, ad, r in self.release],
            "links": [{"link": n, "reason": r} for n, r in self.unlink],
        }


def host_interfaces(result: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(name, mac) of the interfaces a result puts on the host (no ``sandbox``)."""
    out = []
    for iface in (result or {}).get("interfaces") or []:
        if isinstance(iface, dict) and not iface.get("sandbox") and iface.get("name"):
            out.append((str(iface["name"]), str(iface.get("mac", "")).lower()))
    return out


def plan(facts: Facts, grace: float) -> Plan:
    out = Plan()
    for att in facts.attachments:
        if att.container_id in facts.busy:
            continue
        if att.state == "attached" and att.netns and not facts.netns_exists.get(att.netns, True):
            out.delete.append((att.id, att.container_id, f"netns {att.netns} is gone"))
        elif att.state in ("adding", "removing") and not att.op_running:
            what = "a failed ADD could not undo it" if att.state == "adding" \
                else "a DEL did not finish"
            out.delete.append((att.id, att.container_id, what))
    deleting = {a for a, _, _ in out.delete}
    for alloc in facts.allocations:
        if alloc.container_id in facts.busy or alloc.age < grace:
            continue
        if alloc.attachment_id is not None:
            if alloc.attachment_id in deleting:
                continue  # its attachment's DEL releases it
            if alloc.attachment_state is None:
                out.release.append((alloc.id, alloc.address,
                                    f"attachment {alloc.attachment_id} is not in the journal"))
            elif alloc.attachment_state == "removed":
                out.release.append((alloc.id, alloc.address,
                                    f"attachment {alloc.attachment_id} was removed"))
        elif alloc.netns and not facts.netns_exists.get(alloc.netns, True):
            out.release.append((alloc.id, alloc.address, f"netns {alloc.netns} is gone"))
    live_names = {name for att in facts.attachments for name, _ in host_interfaces(att.result)}
    for att_id, result in facts.removed_results:
        for name, mac in host_interfaces(result):
            link = facts.host_links.get(name)
            if link is None or name in live_names or link.kind != "veth":
                continue
            if mac and link.mac.lower() != mac:
                continue  # the name was reused by something else
            out.unlink.append((name, f"host end of removed attachment {att_id}"))
    return out
