"""DELs the plugin recorded while the daemon was down (docs/cni.md), and those the daemon
kept when its journal's disk refused them (:func:`keep`), finished in the start-up replay
and at every reconcile round. A record removes only attachments created before it was
written.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import msgspec
import trio

from netctl.cni.request import DEL_CEILING, PROTO, Request, decode, protocol_refusal
from netctl.engine.admission import Admission
from netctl.engine.conf import Call
from netctl.engine.engine import Engine
from netctl.errors import CNIError

log = logging.getLogger("netctl.reconcile")

PENDING_DIR = "pending-del"  # the plugin's name for it (plugin/main.c)
STALE_TMP = 60.0  # a temporary record this old is a plugin that died writing it


def pending_dir(socket_path: str) -> str:
    return os.path.join(os.path.dirname(socket_path) or ".", PENDING_DIR)


@dataclass
class PendingReport:
    finished: int = 0  # recorded DELs carried out
    dropped: int = 0  # for containers with nothing live (or only newer attachments)
    corrupt: int = 0  # undecodable or not a DEL: logged and removed
    failed: list[str] = field(default_factory=list)  # kept for the next round


@dataclass(frozen=True)
class Record:
    path: str
    written_at: float  # seconds since the epoch, from the record's name
    request: Request | None  # None: corrupt
    problem: str = ""


def read_records(directory: str, now: float | None = None) -> list[Record]:
    """Every whole record in ``directory``, oldest first; stale temporary files removed."""
    now = time.time() if now is None else now
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    records = []
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith("."):
            try:
                if now - os.lstat(path).st_mtime > STALE_TMP:
                    os.unlink(path)
            except OSError:
                pass
            continue
        records.append(_read(path, name))
    return records


def _read(path: str, name: str) -> Record:
    stem = name.removesuffix(".del").split("-", 1)[0]
    written = int(stem) / 1e9 if stem.isdigit() else 0.0
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as fh:
            data = fh.read(DEL_CEILING + 1)  # a longer one is cut: corrupt
        req = msgspec.json.decode(data, type=Request)
    except (OSError, msgspec.MsgspecError) as exc:
        return Record(path, written, None, f"unreadable: {exc}")
    if not name.endswith(".del") or not written:
        return Record(path, written, None, "not named <time_ns>-<pid>.del")
    if req.command != "DEL":
        return Record(path, written, None, f"command {req.command[:20]!r}, not DEL")
    return Record(path, written, req)


def keep(directory: str, frame: bytes) -> str:
    """Record a DEL the daemon could not journal as the plugin records one; the record's
    path (OSError when there is no room there either)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    name = f"{time.time_ns()}-{os.getpid()}.del"
    tmp = os.path.join(directory, f".{name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(frame)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    os.close(fd)
    os.rename(tmp, os.path.join(directory, name))
    return os.path.join(directory, name)


async def finish_pending(engine: Engine, admission: Admission,
                         directory: str) -> PendingReport:
    """Carry out every recorded DEL in ``directory``, each in its container's turn."""
    report = PendingReport()
    for rec in await trio.to_thread.run_sync(read_records, directory):
        if rec.request is None:
            log.warning("pending DEL record %s ignored and removed: %s", rec.path, rec.problem)
            report.corrupt += 1
            await trio.to_thread.run_sync(partial(Path(rec.path).unlink, missing_ok=True))
            continue
        if protocol_refusal(rec.request) is not None:
            report.failed.append(f"{os.path.basename(rec.path)}: written by a plugin of frame "
                                 f"protocol {rec.request.proto}, newer than this daemon's "
                                 f"{PROTO}: kept for the upgraded daemon")
            continue
        try:
            inv = decode(rec.request)
            targets = await engine.targets_of_del(inv, before=rec.written_at)
            if targets:
                reply = await admission.delete_in_turn(inv.container_id, partial(
                    engine.delete, Call(inv), "plugin-record", rec.written_at))
                if reply is not None and reply.warning:
                    log.warning("recorded DEL of %s: %s", inv.container_id, reply.warning)
                report.finished += 1
            else:
                report.dropped += 1
        except CNIError as exc:
            report.failed.append(f"{os.path.basename(rec.path)}: {exc.msg}")
            continue
        await trio.to_thread.run_sync(partial(Path(rec.path).unlink, missing_ok=True))
    return report
