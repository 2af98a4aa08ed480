"""The verbs as a table, and the one sequence both front doors put a request through.

Both the engine (netctl-cni) and :mod:`netctl.engine.ipam_plugin` (netctl-ipam run as
a plain IPAM plugin) serve CNI verbs the same way: a :class:`Verb` names the oldest
cniVersion that has it, whether it names a container (then CNI_CONTAINERID,
CNI_IFNAME and CNI_ARGS must be valid and it runs in the container's turn, see
:class:`~netctl.engine.admission.Admission`), and its handler. :func:`dispatch` applies
the table; the handlers only do the work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import msgspec

from netctl.cni import validate, versions
from netctl.cni.request import Invocation
from netctl.engine.admission import Admission
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


async def dispatch(table: Mapping[str, Verb[S, R]], serve: S, inv: Invocation,
                   admission: Admission, *, version: Callable[[], str],
                   request: Callable[[], R], who: str = "") -> Reply:
    """Serve ``inv`` with ``serve``'s handler from ``table``: refuse (code 1) a conf
    whose cniVersion (``version()``) predates the verb, build the handler's argument
    (``request()``: what a front door parses once the version passed), refuse an
    invalid container, interface or CNI_ARGS, and run a per-container verb in the
    container's turn. ``who`` prefixes the version refusal."""
    verb = table[inv.verb]
    if verb.gated:
        have = version()
        if versions.parse(have) < verb.min_version:
            need = ".".join(map(str, verb.min_version))
            raise CNIError(INCOMPATIBLE_VERSION, f"{who}{inv.verb} needs cniVersion {need} "
                           f"or later, not {have}")
    req = request()
    if not verb.per_container:
        return await verb.handler(serve, req)
    validate.container_id(inv.container_id)
    validate.ifname(inv.ifname)
    if inv.args_error is not None:
        raise inv.args_error
    return await admission.serialized(inv.container_id, inv.verb,
                                      partial(verb.handler, serve, req))
