"""Start-up replay, before the socket accepts: every attachment left ``adding`` or
``removing`` is DELeted through its chain; then every operation still ``running`` is
closed (an ADD ``compensated`` or ``compensate_failed``, a DEL ``done``, anything else
``abandoned``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from netctl.engine.engine import Engine
from netctl.errors import CNIError
from netctl.journal.records import Attachment, OpStart
from netctl.journal.store import Journal

INTERRUPTED = "interrupted by a daemon stop; finished at start-up"


@dataclass
class ReplayReport:
    operations: int = 0
    attachments: int = 0
    containers: int = 0
    failed: list[str] = field(default_factory=list)


async def replay(journal: Journal, engine: Engine) -> ReplayReport:
    """Read what is unfinished from ``journal``; DEL it through ``engine``."""
    report = ReplayReport()
    ops = await journal.unfinished_operations()
    pending: dict[str, list[Attachment]] = {}
    for att in await journal.live_attachments():
        if att.state in ("adding", "removing"):
            pending.setdefault(att.container_id, []).append(att)
    left_over: set[int] = set()
    for container_id, atts in pending.items():
        report.containers += 1
        report.attachments += len(atts)
        try:
            await engine.delete_attachments(container_id, atts, OpStart(
                verb="DEL", container_id=container_id, netns=atts[0].netns, origin="replay",
                reason="start-up replay: an ADD or DEL of it was cut short (daemon stopped "
                "or killed)"),
                "replay")
        except CNIError as exc:
            report.failed.append(exc.msg)
            left_over.update(a.add_op for a in atts if a.add_op is not None)
    states = {"ADD": "compensated", "DEL": "done"}
    await journal.close_operations([
        (op.id, "compensate_failed" if op.id in left_over else states.get(op.verb, "abandoned"),
         INTERRUPTED) for op in ops])
    report.operations = len(ops)
    return report
