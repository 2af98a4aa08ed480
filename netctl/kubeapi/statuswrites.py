"""The pod's network-status annotation written after a successful ADD: at once, and — when
the API server does not take it — again in the background until it does, so that a slow
control plane delays the annotation instead of losing it.

Each attempt is a JSON merge patch with the pod's UID as a precondition (a pod replaced
under the same name answers 409). A failed write is retried by one task per pod (a newer
write supersedes an older one), which asks before each attempt whether the container's
attachments are still live, and stops when the pod is written, gone or replaced. At
shutdown every pending write makes one last attempt; the journal keeps the failed ANNOTATE.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import trio

from netctl.cni.request import Pod
from netctl.kubeapi.api import PATCH_MERGE, Api, ApiError
from netctl.kubeapi.netstatus import patch_body
from netctl.kubeapi.pods import pod_path

log = logging.getLogger("netctl.kube")

FIRST_RETRY = 1.0  # seconds before the first background attempt
MAX_RETRY = 60.0  # the back-off's cap

Outcome = Literal["written", "gone", "replaced", "failed"]


def outcome_of(error: ApiError | None) -> Outcome:
    """What one patch's answer means for the write (a merge patch has no conflict but the
    UID precondition's)."""
    if error is None:
        return "written"
    if error.status == 404:
        return "gone"
    if error.status == 409:
        return "replaced"
    return "failed"


def retry_delay(attempt: int, first: float = FIRST_RETRY, cap: float = MAX_RETRY) -> float:
    """Seconds before background attempt ``attempt`` (0-based): ``first`` doubling, capped."""
    return float(min(cap, first * 2 ** min(attempt, 30)))


async def _always() -> bool:
    return True


async def _nothing() -> None:
    return None


@dataclass
class Write:
    """One pod's network-status to write, and what the retries need to know."""

    pod: Pod  # its uid the precondition ("" for none)
    value: str
    current: Callable[[], Awaitable[bool]] = _always  # the container's attachments live?
    on_written: Callable[[], Awaitable[None]] = _nothing
    attempts: int = 0
    error: str = ""  # the last failure
    retries: int = 0  # background attempts made

    @property
    def key(self) -> tuple[str, str]:
        """The pod's namespace and name: one pending write per pod (``netctl status``
        lists them so)."""
        return self.pod.namespace, self.pod.name

    @property
    def warning(self) -> str:
        return f"network-status of pod {self.pod.key} not written: {self.error}"


async def patch_status(api: Api, write: Write) -> Outcome:
    """One attempt; a failure's reason kept in ``write.error``."""
    write.attempts += 1
    error = None
    try:
        await api.request("patch", "PATCH", pod_path(write.pod.namespace, write.pod.name),
                          body=patch_body(write.value, write.pod.uid), content_type=PATCH_MERGE)
    except ApiError as exc:
        error = exc
        write.error = str(exc)
    return outcome_of(error)


class StatusWrites:
    """The writes the API server did not take at once, retried in the background."""

    def __init__(self, api: Api, *, on_failure: Callable[[], None] = lambda: None,
                 last_try: float = 10.0, first: float = FIRST_RETRY,
                 cap: float = MAX_RETRY) -> None:
        self.api = api
        self.on_failure = on_failure  # every failed attempt (the metric)
        self.last_try, self.first, self.cap = last_try, first, cap
        self.pending: dict[tuple[str, str], tuple[Write, trio.CancelScope]] = {}
        self.written = self.abandoned = self.unwritten_at_stop = 0
        self._nursery: trio.Nursery | None = None
        self._stopping = trio.Event()

    def status(self) -> dict[str, object]:
        return {"pending": sorted(self.pending), "written_later": self.written,
                "abandoned": self.abandoned, "unwritten_at_stop": self.unwritten_at_stop}

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Carry the retries until :meth:`stop`, then their last attempts (bounded)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._stopping.wait()
            nursery.cancel_scope.deadline = trio.current_time() + self.last_try
        self._nursery = None

    def stop(self) -> None:
        """No new retry; the pending ones try once more now, then end."""
        self._stopping.set()

    def retry(self, write: Write) -> bool:
        """Take ``write`` over (it failed once); False when the daemon is stopping."""
        if self._nursery is None or self._stopping.is_set():
            return False
        older = self.pending.pop(write.key, None)
        if older is not None:
            older[1].cancel()  # superseded by the newer ADD's status
        scope = trio.CancelScope()
        self.pending[write.key] = (write, scope)
        self._nursery.start_soon(self._retry, write, scope)
        return True

    async def _retry(self, write: Write, scope: trio.CancelScope) -> None:
        try:
            with scope:  # cancelled alone: superseded by a newer write for the pod
                await self._until_done(write)
        except trio.Cancelled:  # the last try's deadline, at shutdown
            if self._stopping.is_set():
                self.unwritten_at_stop += 1
                log.warning("%s; the daemon stopped before the API server took it",
                            write.warning)
            raise
        finally:
            if self.pending.get(write.key, (None,))[0] is write:
                del self.pending[write.key]

    async def _until_done(self, write: Write) -> None:
        while True:
            with trio.move_on_after(retry_delay(write.retries, self.first, self.cap)):
                await self._stopping.wait()
            write.retries += 1
            if not await write.current():
                self.abandoned += 1
                log.info("network-status of pod %s no longer retried: the container's "
                         "attachments were DELeted", write.pod.key)
                return
            outcome = await patch_status(self.api, write)
            if outcome == "written":
                self.written += 1
                log.info("network-status of pod %s written (attempt %d, in the background)",
                         write.pod.key, write.attempts)
                await write.on_written()
                return
            if outcome != "failed":
                self.abandoned += 1
                log.info("network-status of pod %s no longer retried: the pod is %s (%s)",
                         write.pod.key, "gone" if outcome == "gone" else
                         f"replaced (not uid {write.pod.uid})", write.error)
                return
            self.on_failure()
            if self._stopping.is_set():
                self.unwritten_at_stop += 1
                log.warning("%s; the daemon stops: not retried", write.warning)
                return
            log.warning("%s (attempt %d); retrying in %g s", write.warning, write.attempts,
                        retry_delay(write.retries, self.first, self.cap))
