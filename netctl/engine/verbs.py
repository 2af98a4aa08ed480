"""The verbs as a table, and the checks both front doors make: the engine (netctl-cni) and
:mod:`netctl.engine.ipam_plugin` (netctl-ipam) each have a table of :class:`Verb`; they
:func:`admit` a request, then run its handler (a per-container verb in the container's
turn).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from netctl.cni import validate, versions
from netctl.cni.request import Invocation
from netctl.errors import INCOMPATIBLE_VERSION, CNIError

S = TypeVar("S")  # the front door serving the verb
R = TypeVar("R")  # what its handlers get


class Reply(msgspec.Struct, omit_defaults=True):
    """What a handler answers: the result to print (None: nothing), and a warning."""

    result: dict[str, Any] | None = None
    warning: str = ""


@dataclass(frozen=True)
class Verb(Generic[S, R]):
    min_version: tuple[int, int, int]  # the oldest cniVersion that has it
    per_container: bool  # names a container, and runs in its turn
    handler: Callable[[S, R], Awaitable[Reply]]
    gated: bool = True  # the conf's cniVersion is checked (DEL and VERSION need no conf)


ANY = (0, 0, 0)


def admit(verb: Verb[S, R], inv: Invocation, version: str | None, who: str = "") -> None:
    """The checks before ``verb``'s handler runs for ``inv`` (pure): code 1 when the
    conf's cniVersion (``version``; None when not gated) predates the verb; for a verb that
    names a container, an invalid container, interface or CNI_ARGS refused. ``who``
    prefixes the version refusal."""
    if verb.gated and version is not None and versions.parse(version) < verb.min_version:
        need = ".".join(map(str, verb.min_version))
        raise CNIError(INCOMPATIBLE_VERSION, f"{who}{inv.verb} needs cniVersion {need} "
                       f"or later, not {version}")
    if verb.per_container:
        validate.container_id(inv.container_id)
        validate.ifname(inv.ifname)
        if inv.args_error is not None:
            raise inv.args_error


def container_of(verb: Verb[S, R], inv: Invocation) -> str | None:
    """Whose turn ``verb`` runs in: ``inv``'s container, or None for a verb of none."""
    return inv.container_id if verb.per_container else None
