"""The daemon's log lines: one per event, in text, JSON or logfmt (docs/operating.md,
"Logs"), with the context of the operation they belong to.

Context: :data:`FIELDS` live in one :class:`~contextvars.ContextVar`. The server binds the
request's fields, the journal an operation's (putting the outer ones back when it finishes
it), a chain its network. trio gives every task a copy of its starter's context, so the
concurrent chains of one pod each carry their own ``network`` and share the pod's ``op``.
The formatters read the bound fields (an empty one is left out); nothing else passes them.
A journal event's line (``journal-log: true``) carries the event's fields instead.

Levels: ``--log-level LEVEL[,LOGGER=LEVEL…]``: ``LEVEL`` is for ``netctl.*``; every other
logger stays at WARNING unless named.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import IO, Any, Final

FIELDS: Final = ("op", "verb", "container", "pod", "network")
# the record attribute of a journal event's line (netctl/journal/events.py): its fields,
# in place of the task's context
EVENT: Final = "netctl_event"
FORMATS: Final = ("text", "json", "logfmt")
LIBRARIES_LEVEL: Final = logging.WARNING  # loggers outside netctl, unless named

Context = Mapping[str, str | int]
_EMPTY: Context = {}
_context: ContextVar[Context] = ContextVar("netctl_log_context", default=_EMPTY)


# -- context -------------------------------------------------------------------------------


def current() -> Context:
    """The fields bound in this task now."""
    return _context.get()


def bind(**fields: str | int | None) -> Token[Context]:
    """Add ``fields`` (those not empty) to this task's context, for every line logged
    from now on in this task and the tasks it starts; the token undoes it."""
    merged = dict(_context.get())
    merged.update({k: v for k, v in fields.items() if v not in (None, "")})
    return _context.set(merged)


def replace(fields: Context) -> None:
    """Make ``fields`` this task's whole context (the journal puts back the context an
    operation was begun in, when it finishes)."""
    _context.set(fields)


@contextlib.contextmanager
def bound(**fields: str | int | None) -> Iterator[None]:
    """``fields`` bound while the block runs."""
    token = bind(**fields)
    try:
        yield
    finally:
        _context.reset(token)


def pod_name(namespace: str, name: str) -> str:
    """``namespace/name``, or empty when the container has no pod (podman)."""
    return f"{namespace}/{name}" if name else ""


# -- formats ---------------------------------------------------------------------------------


def rfc3339(created: float) -> str:
    """``2026-11-23T07:28:19.123Z``."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def ordered(ctx: Context) -> dict[str, str | int]:
    """The context in :data:`FIELDS`' order."""
    return {k: ctx[k] for k in FIELDS if k in ctx}


def context_of(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record carries after its message: a journal event's (every one, empty
    ones too: :data:`EVENT`), else the context of the task that logged it."""
    event = getattr(record, EVENT, None)
    if event is not None:
        return dict(event)
    return ordered(getattr(record, "netctl_context", None) or _context.get())


def fields_of(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    """A record as the ordered keys of the structured formats."""
    out: dict[str, Any] = {"time": rfc3339(record.created), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()}
    out.update(context_of(record))
    if record.exc_info:
        record.exc_text = record.exc_text or formatter.formatException(record.exc_info)
    if record.exc_text:
        out["exc"] = record.exc_text
    if record.stack_info:
        out["stack"] = formatter.formatStack(record.stack_info)
    return out


def logfmt_value(value: object) -> str:
    """One logfmt value: bare when it can be, else quoted with ``\\``, ``"`` and control
    characters escaped."""
    text = str(value)
    if text and not any(c in text for c in ' ="\\') and text.isprintable():
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
        .replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def logfmt(pairs: Mapping[str, object]) -> str:
    """``key=value`` pairs; a key whose value is None is left out."""
    return " ".join(f"{k}={logfmt_value(v)}" for k, v in pairs.items() if v is not None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(fields_of(record, self), ensure_ascii=False, default=str)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return logfmt(fields_of(record, self))


class TextFormatter(logging.Formatter):
    """The daemon's historical line, the context appended as logfmt pairs."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = context_of(record)
        if not ctx:
            return line
        head, sep, rest = line.partition("\n")  # a traceback stays below the line
        return f"{head} {logfmt(ctx)}{sep}{rest}"


class ContextFilter(logging.Filter):
    """Stamps every record with the context of the task that logs it (a handler may
    format it later, elsewhere)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.netctl_context = _context.get()
        return True


FORMATTERS: Final[Mapping[str, type[logging.Formatter]]] = {
    "text": TextFormatter, "json": JsonFormatter, "logfmt": LogfmtFormatter}


# -- levels and set-up -----------------------------------------------------------------------


def parse_levels(spec: str) -> tuple[int, dict[str, int]]:
    """``LEVEL[,LOGGER=LEVEL…]`` → netctl's level and the named loggers' levels."""
    own: int | None = None
    named: dict[str, int] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, eq, level = part.rpartition("=")
        number = logging.getLevelName(level.strip().upper())
        if not isinstance(number, int):
            raise ValueError(f"log level {level.strip()!r}: not one of debug, info, warning, "
                             "error, critical")
        if eq:
            named[name.strip()] = number
        else:
            own = number
    return (logging.INFO if own is None else own), named


def configure(level: str = "info", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """One handler on the root logger, writing ``fmt`` lines to ``stream`` (stderr);
    netctl's loggers at ``level``'s own level, the others at WARNING unless named."""
    if fmt not in FORMATTERS:
        raise ValueError(f"log format {fmt!r}: not one of {', '.join(FORMATS)}")
    own, named = parse_levels(level)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LIBRARIES_LEVEL)
    logging.getLogger("netctl").setLevel(own)
    for name, number in named.items():
        logging.getLogger(name).setLevel(number)
