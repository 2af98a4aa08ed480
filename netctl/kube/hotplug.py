"""Kubernetes mode's hot-plug: a running pod's ``k8s.v1.cni.cncf.io/networks`` annotation
followed in its sandbox. What it does for a user is in docs/networks.md ("Hot-plug in
Kubernetes mode"); here, how.

- What is there is the journal's live attachments (:meth:`KubeHotplug._sandbox`), never
  network-status; what is wanted is the annotation as :func:`~netctl.kube.select.choose`
  reads it at ADD, with the conf of the sandbox's ADD from the journal; :func:`changes`
  is the pure diff. It is carried out in the container's turn
  (:meth:`~netctl.engine.hotplug.Hotplug.in_turn`), through the same path as
  ``netctl attach``/``detach``.
- When: a cached pod whose :func:`fingerprint` differs from the one last looked at; every
  pod after the pods' first list; a pod again after its sandbox's ADD, unless the ADD
  chose from the same fingerprint. One task per pod (a change meanwhile runs it once
  more), at most :data:`PARALLEL` pods in their turn at once. Whether there is anything to
  do is decided first outside the turn, from the journal, so a pod already as its
  annotation says costs no turn and no API request.
- No retry loop: an attach that failed is not tried again until the annotation changes
  (remembered per pod UID, in memory): a back-off would re-run, and warn about, a delegate
  that fails for a reason only the pod's owner can fix.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import msgspec
import trio

from netctl.cni import request
from netctl.engine.conf import NetctlConf, decode_conf
from netctl.engine.hotplug import Hotplug, addresses, base
from netctl.engine.selection import Selection
from netctl.errors import CNIError, Refusal
from netctl.journal.records import Attachment, OpStart
from netctl.kube.select import choose
from netctl.kubeapi.objects import (
    HOTPLUG_REPLACE,
    NETWORKS,
    REASON_ATTACH_FAILED,
    REASON_ATTACHED,
    REASON_DETACH_FAILED,
    REASON_DETACHED,
    REASON_HOTPLUG_REFUSED,
    Pod,
    PodChanged,
    PodChosen,
    PodEvent,
)

if TYPE_CHECKING:  # the client is imported in Kubernetes mode only (netctl.kube.mode)
    from netctl.kubeapi.events import EventRecorder
    from netctl.kubeapi.informer import Informer

log = logging.getLogger("netctl.hotplug")

# the pod's network-status from all its container's live attachments (KubeMode's)
StatusWriter = Callable[[request.Pod, OpStart, list[Attachment]], Awaitable[str]]

PARALLEL = 4  # pods changed at once (each holds one of the admission's places meanwhile)
CONFS_KEPT = 1024  # netctl confs of sandboxes' ADDs kept in memory
CHOSEN_KEPT = 4096  # ADDs in flight whose choice is remembered (one entry each)
# the annotation's names of the capability arguments (Selection.capability_args)
_ATTRIBUTES = {"infinibandGUID": "infiniband-guid"}


def network_of(sel: Selection) -> str:
    """The network key of a selection as :func:`choose` returns it (its namespace set):
    ``ns/name``, the key of its NetworkAttachmentDefinition."""
    return f"{sel.namespace}/{sel.name}"


def differences(sel: Selection, att: Attachment) -> list[str]:
    """The attributes of ``att`` that ``sel`` asks otherwise (annotation names)."""
    wanted, have = sel.capability_args(), att.capability_args
    out = [_ATTRIBUTES.get(k, k) for k in sorted(wanted.keys() | have.keys())
           if wanted.get(k) != have.get(k)]
    if dict(sel.cni_args or {}) != att.cni_args:
        out.append("cni-args")
    return out


@dataclass
class Changes:
    """What to do to a sandbox: detach, then attach; and the changes refused."""

    detach: list[Attachment] = field(default_factory=list)
    attach: list[Selection] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.detach or self.attach)


def changes(desired: list[Selection], live: list[Attachment], replace: bool) -> Changes:
    """The diff of the annotation's selections (``desired``) against the annotation's live
    attachments of the sandbox (``live``). Pure.

    A selection with an interface matches the attachment of its network on that interface,
    one without the first unmatched attachment of its network; unmatched selections are
    attached, unmatched attachments detached. A matched attachment whose attributes differ
    is replaced when ``replace`` (the pod's opt-in), else the change is refused."""
    free = list(live)

    def take(sel: Selection) -> Attachment | None:
        key = network_of(sel)
        att = next((a for a in free if a.network == key
                    and (sel.interface is None or a.ifname == sel.interface)), None)
        if att is not None:
            free.remove(att)
        return att

    # selections naming their interface are matched first: theirs is that one alone
    order = sorted(range(len(desired)), key=lambda i: desired[i].interface is None)
    found = {i: take(desired[i]) for i in order}
    out = Changes()
    for i, sel in enumerate(desired):
        att = found[i]
        if att is None:
            out.attach.append(sel)
            continue
        differ = differences(sel, att)
        if not differ:
            continue
        if replace:
            out.detach.append(att)
            out.attach.append(msgspec.structs.replace(sel, interface=att.ifname))
        else:
            out.refused.append(
                f"network {att.network} on {att.ifname}: its {', '.join(differ)} changed in "
                f"the annotation; an attached network is not changed in place: annotate the "
                f"pod {HOTPLUG_REPLACE}=\"true\" to have it detached and attached again, or "
                "remove it and add it back")
    out.detach[:0] = free  # the removed ones, before the replaced ones
    return out


def defaults_count(conf: NetctlConf, skip_defaults: bool) -> int:
    """How many networks the config gives every pod besides the cluster network: they are
    the sandbox ADD's ``net1`` … ``netN`` (:func:`~netctl.engine.plan.plan` names them
    first), not the annotation's."""
    if conf.delegates:
        return len(conf.delegates) - 1
    return 0 if skip_defaults else len(conf.defaultNetworks)


def annotations_own(live: list[Attachment], of: Attachment, defaults: int) -> list[Attachment]:
    """The sandbox's attached attachments that the annotation made or hot-plugged: not the
    cluster network ``of``, not the config's ``defaults`` networks of its ADD."""
    theirs = {f"net{i}" for i in range(1, defaults + 1)}
    return [a for a in live if a.state == "attached" and not a.is_default
            and not (a.add_op == of.add_op and a.ifname in theirs)]


def conf_of(stdin: bytes) -> NetctlConf:
    """The netctl conf of a runtime's ADD, from the request the journal kept."""
    return decode_conf(request.decode(request.Request(command="ADD",
                                                      config=msgspec.Raw(stdin))))


def fingerprint(pod: Pod) -> tuple[str, str, bool]:
    """What a pod's hot-plug depends on: its networks, its opt-in, its hostNetwork."""
    notes = pod.metadata.annotations
    return notes.get(NETWORKS, ""), notes.get(HOTPLUG_REPLACE, ""), pod.spec.hostNetwork


@dataclass
class _Outcome:
    """What one round did, for its Events (posted after the container's turn)."""

    normal: list[tuple[str, str]] = field(default_factory=list)  # reason, message
    warning: list[tuple[str, str]] = field(default_factory=list)
    doing: str = ""  # the step under way (named if a DEL cancels it)
    failed: bool = False  # an attach failed: not retried until the annotation changes


class KubeHotplug:
    """The hot-plug of this node's pods (module docstring); :meth:`run` until cancelled."""

    def __init__(self, hotplug: Hotplug, pods: Informer[Pod], events: EventRecorder,
                 write_status: StatusWriter,
                 pod_events: trio.MemoryReceiveChannel[PodEvent] | None = None) -> None:
        self.hotplug, self.pods, self.events = hotplug, pods, events
        self.write_status = write_status
        self.pod_events = pod_events  # the pod source's, followed while it runs
        self.journal = hotplug.engine.journal
        self.seen: dict[str, tuple[str, str, bool]] = {}  # pod UID → fingerprint looked at
        self.failed: dict[str, str] = {}  # pod UID → networks annotation an attach failed
        self.counts: Counter[str] = Counter()  # rounds, attached, detached, failed
        self.limiter = trio.CapacityLimiter(PARALLEL)
        self._confs: dict[int, NetctlConf] = {}  # the conf of an ADD operation, by its id
        self._nursery: trio.Nursery | None = None
        self._running: set[tuple[str, str]] = set()
        self._again: set[tuple[str, str]] = set()
        # container → the fingerprint of the pod its ADD chose its networks from
        self._chosen: dict[str, tuple[str, str, bool]] = {}

    def status(self) -> dict[str, object]:
        """``netctl status``: the rounds that changed a sandbox, the networks attached and
        detached, the failures, the pods not retried until their annotation changes."""
        return {**{k: self.counts[k] for k in ("rounds", "attached", "detached", "failed")},
                "not_retried": len(self.failed), "running": len(self._running)}

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """After the pods' first list every cached pod once, then each one that changes."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.pod_events is not None:
                    nursery.start_soon(self._follow, self.pod_events)
                task_status.started()
                await self.pods.synced.wait()
                for key in list(self.pods.cache):
                    self._start(key)
                await trio.sleep_forever()
        finally:
            self._nursery = None  # the daemon stops: an ADD finishing now starts nothing

    async def _follow(self, pod_events: trio.MemoryReceiveChannel[PodEvent]) -> None:
        """The pod source's events, in the order they happened."""
        async for event in pod_events:
            if isinstance(event, PodChanged):
                self.changed(event.pod)
            elif isinstance(event, PodChosen):
                self.chosen(event.container_id, event.pod)
            else:
                self.added(event.pod, event.container_id)

    def changed(self, pod: Pod) -> None:
        """The pod informer's ``on_put``: a pod listed or changed. Looked at when what its
        hot-plug depends on differs from what was last looked at."""
        if not self.pods.synced.is_set():
            return  # every pod is looked at once the first list is in
        if self.seen.get(pod.metadata.uid) != fingerprint(pod):
            self._start((pod.metadata.namespace, pod.metadata.name))

    def chosen(self, container_id: str, pod: Pod) -> None:
        """A runtime's ADD of ``container_id`` chose its networks from ``pod`` (the cache's
        copy then)."""
        self._chosen[container_id] = fingerprint(pod)
        if len(self._chosen) > CHOSEN_KEPT:  # ADDs that never finished
            del self._chosen[next(iter(self._chosen))]

    def added(self, pod: request.Pod, container_id: str) -> None:
        """A runtime's ADD of the pod's sandbox succeeded: look at the pod again, unless
        the pod's networks are still what the ADD chose them from."""
        if not self.pods.synced.is_set():
            return
        key = (pod.namespace, pod.name)
        chose, now = self._chosen.pop(container_id, None), self.pods.cache.get(key)
        if chose is not None and now is not None and fingerprint(now) == chose:
            self.seen[now.metadata.uid] = chose
            return
        self._start(key)

    def forget(self, uid: str) -> None:
        """The pod is deleted."""
        self.seen.pop(uid, None)
        self.failed.pop(uid, None)

    def _start(self, key: tuple[str, str]) -> None:
        if self._nursery is None:
            return
        if key in self._running:
            self._again.add(key)
            return
        self._running.add(key)
        self._nursery.start_soon(self._pod_task, key)

    async def _pod_task(self, key: tuple[str, str]) -> None:
        try:
            while True:
                self._again.discard(key)
                pod = self.pods.cache.get(key)
                if pod is not None:
                    try:
                        await self.evaluate(pod)
                    except Exception:  # a bug: logged, the daemon goes on
                        log.exception("hot-plug of pod %s/%s failed", *key)
                if key not in self._again:
                    return
        finally:
            self._running.discard(key)

    async def evaluate(self, pod: Pod) -> None:
        """One round for ``pod``: its sandbox's networks made the annotation's."""
        ref, value = pod.ref, pod.metadata.annotations.get(NETWORKS, "")
        self.seen[ref.uid] = fingerprint(pod)
        if self.failed.get(ref.uid) == value:
            return  # failed with this very annotation: only a change of it retries
        self.failed.pop(ref.uid, None)
        if pod.spec.hostNetwork:
            if value.strip():
                await self.events.warn(ref, REASON_HOTPLUG_REFUSED, (
                    "networks not hot-plugged: the pod uses the host's network "
                    "(hostNetwork), it has no network namespace of its own"))
            return
        found = await self._sandbox(ref.uid)
        if found is None:
            return  # no sandbox attached yet: its ADD reads the annotation itself
        container, live = found
        outcome = _Outcome()
        decided = await self._decide(pod, live, outcome)
        if decided is not None and decided[1]:  # something to do: decided again in turn
            outcome = _Outcome()
            async with self.limiter:
                try:
                    await self.hotplug.in_turn(container, partial(self._round, pod, outcome))
                except CNIError as exc:
                    what = f" ({outcome.doing})" if outcome.doing else ""
                    outcome.warning.append((REASON_ATTACH_FAILED,
                                            f"hot-plug{what} stopped: {exc.msg}"))
                    outcome.failed = outcome.failed or bool(outcome.doing)
        if outcome.failed:
            self.failed[ref.uid] = value
        for reason, message in outcome.normal:
            await self.events.normal(ref, reason, message)
        for reason, message in outcome.warning:
            await self.events.warn(ref, reason, message)

    async def _sandbox(self, uid: str) -> tuple[str, list[Attachment]] | None:
        """The pod's current sandbox and its live attachments: of its containers with an
        attached network, the one whose cluster network (else any network) was attached
        last."""
        newest: tuple[float, str, list[Attachment]] | None = None
        for container in self.journal.live.of_pod(uid):
            live = await self.journal.live_attachments(container)
            attached = [a for a in live if a.state == "attached" and a.pod.uid == uid]
            if attached:
                when = max(a.created_at for a in attached if a.is_default
                           or not any(b.is_default for b in attached))
                if newest is None or when > newest[0]:
                    newest = (when, container, live)
        return newest[1:] if newest else None

    async def _conf(self, op_id: int) -> NetctlConf:
        """The netctl conf of the ADD operation ``op_id`` (kept: it never changes)."""
        conf = self._confs.get(op_id)
        if conf is None:
            conf = conf_of(await self.journal.operation_request(op_id) or b"")
            self._confs[op_id] = conf
            if len(self._confs) > CONFS_KEPT:
                del self._confs[next(iter(self._confs))]
        return conf

    async def _decide(self, pod: Pod, live: list[Attachment], outcome: _Outcome
                      ) -> tuple[Attachment, Changes] | None:
        """The sandbox's attachment the plugged ones go beside, and what to change; None
        when nothing can be done (a refusal's Event in ``outcome``)."""
        ref = pod.ref
        try:
            of = base(live[0].container_id if live else "?", live)
        except CNIError:
            return None  # nothing attached (the ADD failed, a DEL is under way), no netns
        try:
            conf = await self._conf(of.add_op or 0)
            choice = choose(conf, ref, pod.metadata.annotations, of.caller_ifname)
        except Refusal as exc:
            outcome.warning.append((exc.reason, exc.note or exc.msg))
            return None
        except CNIError as exc:
            log.warning("hot-plug of pod %s: the netctl conf of container %s: %s", ref.key,
                        of.container_id, exc.msg)
            return None
        replace = pod.metadata.annotations.get(HOTPLUG_REPLACE, "").lower() == "true"
        todo = changes(choice.networks, annotations_own(
            live, of, defaults_count(conf, choice.skip_defaults)), replace)
        outcome.warning += [(REASON_HOTPLUG_REFUSED, msg) for msg in todo.refused]
        return of, todo

    async def _round(self, pod: Pod, outcome: _Outcome, live: list[Attachment]) -> None:
        """In the container's turn: the diff, carried out; network-status written."""
        ref = pod.ref
        decided = await self._decide(pod, live, outcome)
        if decided is None or not decided[1]:
            return
        of, todo = decided
        self.counts["rounds"] += 1
        why = f"pod {ref.key}: annotation {NETWORKS}"
        for att in todo.detach:
            outcome.doing = f"detaching network {att.network} from {att.ifname}"
            try:
                await self.hotplug.unplug(att, f"{why}: network {att.network} on {att.ifname} "
                                          "removed")
            except CNIError as exc:
                self.counts["failed"] += 1
                outcome.warning.append((REASON_DETACH_FAILED, f"network {att.network} on "
                                        f"{att.ifname} not detached: {exc.msg}"))
                continue
            self.counts["detached"] += 1
            outcome.normal.append((REASON_DETACHED, f"network {att.network} detached from "
                                   f"{att.ifname}"))
        for sel in todo.attach:
            key = network_of(sel)
            outcome.doing = f"attaching network {key}"
            try:
                now = await self.journal.live_attachments(of.container_id)
                att, _ = await self.hotplug.plug(now, sel, key, f"{why}: network {key} added")
            except CNIError as exc:  # a Refusal (no such NAD …) keeps its reason
                self.counts["failed"] += 1
                outcome.failed = True
                outcome.warning.append((exc.reason if isinstance(exc, Refusal) else
                                        REASON_ATTACH_FAILED, (
                    f"network {key} not attached: {exc.msg}; not tried again until the "
                    f"annotation {NETWORKS} changes")))
                continue
            self.counts["attached"] += 1
            got = ", ".join(addresses(att)) or "no address"
            outcome.normal.append((REASON_ATTACHED, f"network {key} attached as "
                                   f"{att.ifname} ({got})"))
        outcome.doing = ""
        now = [a for a in await self.journal.live_attachments(of.container_id)
               if a.state == "attached"]
        await self.write_status(ref, OpStart(
            verb="ANNOTATE", container_id=of.container_id, netns=of.netns,
            ifname=of.caller_ifname,
            caller_network=of.caller_network, pod=of.pod, origin="hotplug"), now)
