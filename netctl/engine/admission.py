"""Admission (docs/cni.md): requests for one container one at a time (a DEL cancels a running
ADD of it), different containers up to ``max_concurrent``; with ``max_queue`` waiting,
everything but DEL gets code 11.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import trio

from netctl.errors import CANCELLED, TRY_AGAIN_LATER, CNIError

T = TypeVar("T")


async def _take(lock: trio.Lock | trio.CapacityLimiter) -> None:
    """Acquire ``lock`` without a turn of the scheduler when it is free, else wait in line."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


@dataclass
class _Gate:
    lock: trio.Lock = field(default_factory=trio.Lock)
    adds: set[trio.CancelScope] = field(default_factory=set)
    users: int = 0


class Admission:
    def __init__(self, max_concurrent: int = 32, max_queue: int = 256) -> None:
        self.max_queue = max_queue
        self._limiter = trio.CapacityLimiter(max_concurrent)
        self._waiting = 0
        self._gates: dict[str, _Gate] = {}

    @property
    def in_flight(self) -> int:
        return int(self._limiter.borrowed_tokens)

    @property
    def queued(self) -> int:
        return self._waiting

    def busy(self) -> frozenset[str]:
        """Containers with a request running or waiting (the reconciler leaves them be)."""
        return frozenset(self._gates)

    @asynccontextmanager
    async def turn(self, container_id: str | None, verb: str) -> AsyncIterator[None]:
        """The body runs as ``verb`` of ``container_id``, after that container's other
        requests and within ``max_concurrent``; a DEL first cancels the container's running
        ADDs (code 9). ``container_id`` None (GC, STATUS, VERSION) runs at once."""
        if container_id is None:
            yield
            return
        gate = self._gates.setdefault(container_id, _Gate())
        gate.users += 1
        try:
            if verb == "DEL":
                for scope in gate.adds:
                    scope.cancel()
            with trio.CancelScope() as scope:
                if verb == "ADD":
                    gate.adds.add(scope)
                try:
                    await _take(gate.lock)
                    try:
                        async with self._admitted(verb):
                            yield
                            return
                    finally:
                        gate.lock.release()
                finally:
                    gate.adds.discard(scope)
            raise CNIError(CANCELLED, f"ADD of container {container_id} was cancelled by a DEL "
                           "for the same container; what it had done was undone")
        finally:
            gate.users -= 1
            if gate.users == 0:
                self._gates.pop(container_id, None)

    async def serialized(self, container_id: str, verb: str,
                         fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()`` in the container's turn (:meth:`turn`)."""
        async with self.turn(container_id, verb):
            return await fn()
        raise AssertionError("unreachable: a turn ends in its body or raises")

    async def delete_in_turn(self, container_id: str, fn: Callable[[], Awaitable[T]], *,
                             skip_busy: bool = False) -> T | None:
        """Run the DEL ``fn`` in the container's turn; with ``skip_busy`` (the reconciler), a
        container with a request running or waiting is left alone: None."""
        # no checkpoint between this test and serialized() registering the container
        if skip_busy and container_id in self._gates:
            return None
        return await self.serialized(container_id, "DEL", fn)

    @asynccontextmanager
    async def _admitted(self, verb: str) -> AsyncIterator[None]:
        """Within ``max_concurrent``; code 11 when the queue is full (never a DEL)."""
        if self._limiter.available_tokens == 0 and verb != "DEL" \
                and self._waiting >= self.max_queue:
            raise CNIError(TRY_AGAIN_LATER, f"daemon busy: {self.in_flight} requests running and "
                           f"{self._waiting} queued (max_queue {self.max_queue}); "
                           "try again later")
        self._waiting += 1
        try:
            await _take(self._limiter)
        finally:
            self._waiting -= 1
        try:
            yield
        finally:
            self._limiter.release()
