"""We test a full disk under the journal: the state dir on a small tmpfs the test fills.
An ADD that cannot be journaled fails at once naming the cause and starts nothing; a DEL
is never lost (kept beside the socket, in ``pending-del/``, and carried out once the
journal can be written again); the status says degraded with the reason meanwhile, and
the metric says so; no answer carries a Python repr; once space returns nothing is left
running or stranded.

Subnet: 10.186.0.0/24."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from netctl_kit import journaldb

from tests.conftest import Daemon, bridge_conf, bridge_ports, ipam_held, wait_for

pytestmark = pytest.mark.netns

SIZE = "12m"  # the state dir's filesystem


@pytest.fixture
def small_disk(daemon: Daemon) -> Iterator[Path]:
    """The daemon's state dir on a tmpfs of :data:`SIZE`; unmounted after the daemon."""
    state = daemon.state_dir
    state.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700",
                    f"{daemon.prefix}-state", str(state)], check=True)
    try:
        yield state
    finally:
        try:
            daemon.shut_down()
        finally:
            subprocess.run(["umount", "-l", str(state)], check=False)


def fill(where: Path) -> Path:
    """Fill ``where``'s filesystem to the last byte; the file that holds the space."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            while True:
                try:
                    if os.write(fd, chunk) < size:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


def no_repr(text: str) -> bool:
    """An error text a runtime can show: no Python repr of an exception in it."""
    return not any(marker in text for marker in (
        "ExceptionGroup(", "Error(", "Exception(", "Traceback", "<class "))


def _start(daemon: Daemon) -> str:
    br = daemon.name("f0")
    daemon.settings.update({"reconcile-interval": 0, "reconcile-grace": 0})
    daemon.add_network("fd", bridge_conf("fd", br, "10.186.0.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    return br


def test_a_full_disk_refuses_adds_keeps_dels_and_recovers(
        daemon: Daemon, small_disk: Path, netns: Callable[[], str]) -> None:
    br = _start(daemon)
    conf = daemon.conf("fd", "1.0.0")
    pods = {f"up{i}": netns() for i in range(3)}
    for container, ns in pods.items():
        assert daemon.cni("ADD", container, ns, conf).rc == 0
    filler = fill(small_disk)

    # an ADD that cannot be journaled: refused at once, naming the cause; nothing started
    late = netns()
    res = daemon.cni("ADD", "late", late, conf)
    assert res.rc != 0 and res.out is not None, res.describe()
    assert res.out["code"] == 5, res.out
    msg = f"{res.out['msg']} {res.out.get('details', '')}"
    assert "full" in msg and daemon.journal_path in msg and no_repr(msg), msg
    assert len(bridge_ports(br)) == 3 and len(ipam_held(daemon.ipam_dir)) == 3

    # degraded, with the reason, while the journal cannot be written
    status = daemon.status()
    assert status["degraded"] is True
    assert any("journal" in r and "full" in r for r in status["degraded_reasons"]), status

    # a DEL is kept, not lost: it succeeds, its record is beside the socket
    res = daemon.cni("DEL", "up0", pods["up0"], conf)
    assert res.rc == 0, res
    pending = Path(daemon.socket).parent / "pending-del"
    assert len(os.listdir(pending)) == 1

    # space returns: the kept DEL is carried out by the next round, nothing left over
    filler.unlink()
    daemon.reconcile()
    assert os.listdir(pending) == []
    assert daemon.live_attachments_of(["up0"]) == 0
    assert len(bridge_ports(br)) == 2 and len(ipam_held(daemon.ipam_dir)) == 2
    assert wait_for(lambda: daemon.status()["degraded"] is False, 10)
    assert daemon.cni("ADD", "late", late, conf).rc == 0
    for container in ("up1", "up2", "late"):
        assert daemon.cni("DEL", container, pods.get(container, late), conf).rc == 0
    assert bridge_ports(br) == [] and ipam_held(daemon.ipam_dir) == []
    assert daemon.read(journaldb.operation_rows, state="running") == []


def test_a_disk_filled_during_a_churn_loses_no_del_and_strands_nothing(
        daemon: Daemon, small_disk: Path, netns: Callable[[], str]) -> None:
    br = _start(daemon)
    conf = daemon.conf("fd", "1.0.0")
    sandboxes = [netns() for _ in range(4)]
    failures: list[str] = []  # answers a runtime could not show, or a DEL refused
    adds = {"ok": 0, "refused": 0}
    full = threading.Event()

    def churn(worker: int) -> None:
        for turn in range(60):
            container = f"w{worker}t{turn}"
            res = daemon.cni("ADD", container, sandboxes[worker], conf)
            if res.rc == 0:
                adds["ok"] += 1
            else:
                adds["refused"] += 1
                text = res.stdout + res.stderr
                if res.out is None or res.out.get("code") != 5 or not no_repr(text):
                    failures.append(f"ADD {container}: {res.describe()}")
            res = daemon.cni("DEL", container, sandboxes[worker], conf)
            if res.rc != 0 or not no_repr(res.stdout + res.stderr):
                failures.append(f"DEL {container}: {res.describe()}")
            if full.is_set() and turn >= 40:
                return

    workers = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    wait_for(lambda: adds["ok"] >= 12, 60, "a dozen ADDs before the disk fills")
    filler = fill(small_disk)
    full.set()
    for w in workers:
        w.join(timeout=300)
    assert not any(w.is_alive() for w in workers)
    assert failures == []
    assert adds["refused"] > 0  # the disk did fill under the churn
    filler.unlink()
    daemon.reconcile()
    pending = Path(daemon.socket).parent / "pending-del"
    assert not pending.exists() or os.listdir(pending) == []
    assert daemon.read(journaldb.operation_rows, state="running") == []
    assert daemon.read(journaldb.live_counts) == (0, 0)  # attachments, allocations
    assert bridge_ports(br) == [] and ipam_held(daemon.ipam_dir) == []
    assert daemon.status()["degraded"] is False
