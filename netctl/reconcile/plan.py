"""What is leaked, decided from facts alone (docs/operating.md, "Reconcile"). Pure. Busy
containers and attachments backing off are left alone; each item counts under a reason of
:data:`REASONS`. The same plan answers ``netctl ipam leaks`` (:func:`leaks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from netctl.cni.types import host_interfaces


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
    del_failures: int = 0  # failed DELs of it so far
    retry_at: float | None = None  # left alone until then (back-off)
    error: str | None = None  # its last DEL's error


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
    scope: str = ""
    pod: str = ""  # ns/name, or ""
    prefix: int = 0
    since: float = 0.0  # when it was allocated


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
    now: float = 0.0


REASONS = ("netns-gone", "add-not-undone", "del-unfinished", "attachment-removed",
           "attachment-missing", "allocation-netns-gone", "stuck-netns-gone", "orphan-link")


@dataclass
class Plan:
    delete: list[tuple[int, str, str]] = field(default_factory=list)  # (att, container, why)
    release: list[tuple[int, str, str]] = field(default_factory=list)  # (alloc, address, why)
    unlink: list[tuple[str, str]] = field(default_factory=list)  # (link name, why)
    # stuck attachments whose netns is gone: their addresses are released, no DEL run
    free: list[tuple[int, str, str]] = field(default_factory=list)  # (att, container, why)
    stuck: list[AttachmentFact] = field(default_factory=list)  # clean-up failed before
    found: dict[str, int] = field(default_factory=dict)  # reason (REASONS) → items
    # containers with an allocation no one holds that is younger than the grace: the
    # seconds until the first of them is old enough to release
    ripening: dict[str, float] = field(default_factory=dict)

    def count(self, reason: str) -> None:
        self.found[reason] = self.found.get(reason, 0) + 1

    @property
    def empty(self) -> bool:
        return not (self.delete or self.release or self.unlink or self.free)

    def to_json(self) -> dict[str, Any]:
        return {
            "attachments": [{"attachment": a, "container": c, "reason": r}
                            for a, c, r in self.delete],
            "allocations": [{"allocation": a, "address": ad, "reason": r}
                            for a, ad, r in self.release],
            "links": [{"link": n, "reason": r} for n, r in self.unlink],
            "freed": [{"attachment": a, "container": c, "reason": r}
                      for a, c, r in self.free],
            "stuck": [stuck_json(a) for a in self.stuck],
        }


def _unheld(alloc: AllocationFact, facts: Facts) -> tuple[str, str] | None:
    """Why no one holds ``alloc`` any more (its reason of :data:`REASONS`, and the words),
    or None: it is held."""
    if alloc.attachment_id is not None:
        if alloc.attachment_state is None:
            return "attachment-missing", f"attachment {alloc.attachment_id} is not in the journal"
        if alloc.attachment_state == "removed":
            return "attachment-removed", f"attachment {alloc.attachment_id} was removed"
        return None
    if alloc.netns and not facts.netns_exists.get(alloc.netns, True):
        return "allocation-netns-gone", f"netns {alloc.netns} is gone"
    return None


def stuck_json(att: AttachmentFact) -> dict[str, Any]:
    return {"attachment": att.id, "container": att.container_id, "network": att.network,
            "ifname": att.ifname, "state": att.state, "failures": att.del_failures,
            "retry_at": att.retry_at, "error": att.error}


def plan(facts: Facts, grace: float) -> Plan:
    out = Plan()
    holding = {a.attachment_id for a in facts.allocations}
    for att in facts.attachments:
        if att.del_failures and att.state != "attached":
            out.stuck.append(att)
        if att.container_id in facts.busy:
            continue
        gone = bool(att.netns) and not facts.netns_exists.get(att.netns, True)
        if att.retry_at is not None and att.retry_at > facts.now:
            # backing off: its last clean-up failed; but with its netns gone, what
            # netctl allocated for it is no one's any more
            if gone and att.id in holding:
                out.free.append((att.id, att.container_id, f"netns {att.netns} is gone; "
                                 f"its DEL failed {att.del_failures} times and is retried "
                                 "later"))
                out.count("stuck-netns-gone")
            continue
        if att.state == "attached" and gone:
            out.delete.append((att.id, att.container_id, f"netns {att.netns} is gone"))
            out.count("netns-gone")
        elif att.state in ("adding", "removing") and not att.op_running:
            what = "a failed ADD could not undo it" if att.state == "adding" \
                else "a DEL did not finish"
            out.delete.append((att.id, att.container_id, what))
            out.count("add-not-undone" if att.state == "adding" else "del-unfinished")
    deleting = {a for a, _, _ in out.delete} | {a for a, _, _ in out.free}
    for alloc in facts.allocations:
        if alloc.container_id in facts.busy or (
                alloc.attachment_id is not None and alloc.attachment_id in deleting):
            continue  # left to its request, or to its attachment's DEL
        found = _unheld(alloc, facts)
        if found is None:
            continue
        reason, why = found
        if alloc.age < grace:
            wait = grace - alloc.age
            out.ripening[alloc.container_id] = min(
                wait, out.ripening.get(alloc.container_id, wait))
            continue
        out.release.append((alloc.id, alloc.address, why))
        out.count(reason)
    live_names = {name for att in facts.attachments for name, _ in host_interfaces(att.result)}
    for att_id, result in facts.removed_results:
        for name, mac in host_interfaces(result):
            link = facts.host_links.get(name)
            if link is None or name in live_names or link.kind != "veth":
                continue
            if mac and link.mac.lower() != mac:
                continue  # the name was reused by something else
            out.unlink.append((name, f"host end of removed attachment {att_id}"))
            out.count("orphan-link")
    return out


def leaks(facts: Facts, todo: Plan) -> list[dict[str, Any]]:
    """The live addresses ``todo`` frees or cannot free yet, each with its reason:
    ``attachment-removed``, ``attachment-missing``, ``netns-gone``, ``failed-add``,
    ``unfinished-del``, ``stuck`` (held by an attachment backing off)."""
    by_att: dict[int, list[AllocationFact]] = {}
    for alloc in facts.allocations:
        if alloc.attachment_id is not None:
            by_att.setdefault(alloc.attachment_id, []).append(alloc)
    atts = {a.id: a for a in facts.attachments}
    out: list[dict[str, Any]] = []
    for alloc_id, _, why in todo.release:
        alloc = next(a for a in facts.allocations if a.id == alloc_id)
        if alloc.attachment_id is None:
            reason = "netns-gone"
        elif alloc.attachment_state is None:
            reason = "attachment-missing"
        else:
            reason = "attachment-removed"
        out.append(_leak(alloc, reason, why))
    stuck = {a.id for a in todo.stuck}
    for att_id, _, why in todo.delete:
        att = atts[att_id]
        reason = ("stuck" if att_id in stuck else "netns-gone" if att.state == "attached"
                  else "failed-add" if att.state == "adding" else "unfinished-del")
        for alloc in by_att.get(att_id, []):
            out.append(_leak(alloc, reason, f"attachment {att_id}: {why}"))
    for att_id, _, why in todo.free:
        for alloc in by_att.get(att_id, []):
            out.append(_leak(alloc, "netns-gone", f"attachment {att_id}: {why}"))
    deleting = {a for a, _, _ in todo.delete} | {a for a, _, _ in todo.free}
    for att in todo.stuck:
        if att.id not in deleting:
            for alloc in by_att.get(att.id, []):
                out.append(_leak(alloc, "stuck", f"attachment {att.id}: clean-up failed "
                                 f"{att.del_failures} times ({att.error}); retried later"))
    return sorted(out, key=lambda row: int(row["allocation"]))


def _leak(alloc: AllocationFact, reason: str, detail: str) -> dict[str, Any]:
    return {"allocation": alloc.id, "pool": alloc.pool,
            "address": f"{alloc.address}/{alloc.prefix}" if alloc.prefix else alloc.address,
            "container": alloc.container_id, "pod": alloc.pod, "ifname": alloc.ifname,
            "netns": alloc.netns, "attachment": alloc.attachment_id, "since": alloc.since,
            "reason": reason, "detail": detail}
