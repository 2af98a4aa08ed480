"""netctl's errors: one flat hierarchy, each error carrying its CNI code.

Every failure that reaches a runtime is a :class:`CNIError`, printed by the thin
plugin as the spec's error JSON ``{"cniVersion", "code", "msg", "details"}``.
Codes below 100 are the spec's; 100 and up are netctl's own and are listed in
docs/cni.md ("Error codes").
"""

from __future__ import annotations

from typing import Any, TypeVar

# The CNI spec's well-known codes.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENVIRONMENT = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50
NOT_AVAILABLE_LIMITED = 51

# netctl's own codes (documented in docs/cni.md).
POOL_EXHAUSTED = 100
DELEGATE_TIMEOUT = 101
DELEGATE_CRASHED = 102
DELEGATE_BAD_OUTPUT = 103
PERMISSION_DENIED = 104
REQUEST_TOO_LARGE = 105
CANCELLED = 106
DEL_INCOMPLETE = 107


class CNIError(Exception):
    """A failure with a CNI error code, a message naming what failed, and details."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str) -> dict[str, Any]:
        out: dict[str, Any] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out

    def __repr__(self) -> str:
        return f"CNIError({self.code}, {self.msg!r})"


class NotListedYet(CNIError):
    """A lookup in a watched cache before its first list (code 11): what it asks for is
    not known to be missing yet. The caller may wait for the list and ask again."""

    def __init__(self, msg: str) -> None:
        super().__init__(TRY_AGAIN_LATER, msg)


EVENT_NOTE_MAX = 1024  # the API server refuses an Event whose note is longer


class Refusal(CNIError):
    """A pod's networks refused for a reason its owner can fix: a malformed annotation,
    an unknown, broken or forbidden NetworkAttachmentDefinition.

    Besides the CNI error (``msg`` names the pod and the bad part), it carries what the
    Kubernetes client posts on the pod as a Warning Event: ``reason`` (CamelCase, as
    Multus' ``NoNetworkFound``) and ``note`` (short: the event is already on the pod).
    """

    def __init__(self, msg: str, reason: str, note: str, code: int = INVALID_CONFIG,
                 named: bool = False) -> None:
        super().__init__(code, msg)
        self.reason = reason
        self.note = note[:EVENT_NOTE_MAX]
        self.named = named  # the message names the pod

    def for_pod(self, pod: str) -> Refusal:
        """The same refusal with its message naming ``pod`` ("namespace/name")."""
        if self.named or not pod:
            return self
        return Refusal(f"pod {pod}: {self.msg}", self.reason, self.note, self.code, True)

    def __repr__(self) -> str:
        return f"Refusal({self.code}, {self.reason}, {self.msg!r})"


E = TypeVar("E", bound=BaseException)


def first_of(exc: BaseException, kind: type[E]) -> E | None:
    """The first ``kind`` a failure is: itself, or the first one a group of concurrent
    failures holds (the chains of a pod's networks run in one nursery)."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := first_of(inner, kind)) is not None:
                return found
    return None


def first_error(exc: BaseException) -> CNIError | None:
    """The CNI error a failure is (:func:`first_of`)."""
    return first_of(exc, CNIError)


def describe(exc: BaseException) -> str:
    """A failure in words, for a runtime, a log line or the journal: its type and message
    (a group's parts, each so), never a repr."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(describe(inner) for inner in exc.exceptions))
    if isinstance(exc, CNIError):
        return exc.msg
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
