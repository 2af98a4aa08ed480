"""We test these aspects of ``netctl.cni.netns``: a real network namespace (bind-mounted
by ``ip netns add``, reached directly or through a symlink, and /proc/self/ns/net) is
``ok``; another namespace type (/proc/self/ns/uts) and every other kind of file — an
empty or non-empty regular file, a directory, /dev/null, a FIFO, a Unix socket — are
``not-netns``, and the FIFO is refused without being opened (an open would block); a
missing path, a dangling symlink, an empty path and a path with a NUL byte are
``missing``; a namespace deleted after it was checked reads ``missing``; the links of a
netns are read by a thread that enters it (the caller's stays where it was), and a file
that is no netns is refused."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from netctl.cni.netns import in_netns, is_netns, link_names, netns_state
from tests.conftest import RUN_TAG


@pytest.fixture
def real_netns() -> Iterator[str]:
    name = f"nct{RUN_TAG}-nsunit"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        yield f"/var/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@pytest.mark.netns
def test_a_real_netns_is_ok_directly_and_through_a_symlink(real_netns: str,
                                                           tmp_path: Path) -> None:
    assert netns_state(real_netns) == "ok"
    assert is_netns(real_netns)
    link = tmp_path / "ns-link"
    link.symlink_to(real_netns)
    assert netns_state(str(link)) == "ok"
    subprocess.run(["ip", "netns", "del", os.path.basename(real_netns)], check=True)
    assert netns_state(real_netns) == "missing"
    assert netns_state(str(link)) == "missing"  # now a dangling symlink


def test_the_processes_own_net_namespace_is_ok() -> None:
    assert netns_state("/proc/self/ns/net") == "ok"
    assert is_netns(f"/proc/{os.getpid()}/ns/net")


def test_a_namespace_of_another_type_is_not_a_netns() -> None:
    for kind in ("uts", "ipc", "mnt"):
        assert netns_state(f"/proc/self/ns/{kind}") == "not-netns", kind
        assert not is_netns(f"/proc/self/ns/{kind}")


def test_regular_files_and_directories_are_not_a_netns(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.touch()  # stats like an nsfs file; only the ioctl tells them apart
    full = tmp_path / "full"
    full.write_text("not a namespace\n")
    for path in (empty, full, tmp_path, Path("/var/run")):
        assert netns_state(str(path)) == "not-netns", path
        assert not is_netns(str(path))
    assert full.read_text() == "not a namespace\n"


def test_devices_and_sockets_are_not_a_netns(tmp_path: Path) -> None:
    assert netns_state("/dev/null") == "not-netns"
    assert netns_state("/dev/zero") == "not-netns"
    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(sock_path))
        assert netns_state(str(sock_path)) == "not-netns"


def test_a_fifo_is_refused_without_being_opened(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the stat must decide."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    answer: list[str] = []
    worker = threading.Thread(target=lambda: answer.append(netns_state(str(fifo))), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock it before failing, so no thread is left hanging
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
        pytest.fail("netns_state blocked on a FIFO")
    assert answer == ["not-netns"]
    # Nobody opened it for reading: a non-blocking writer finds no reader.
    with pytest.raises(OSError) as info:
        os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    assert info.value.errno == errno.ENXIO


def test_missing_paths(tmp_path: Path) -> None:
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nothing-here")
    for path in (str(tmp_path / "nothing-here"), str(dangling), "",
                 "/var/run/netns/nct-no-such-netns", str(tmp_path / "empty" / "below"),
                 "bad\0path"):
        assert netns_state(path) == "missing", path
        assert not is_netns(path)


def test_a_file_below_a_regular_file_is_missing(tmp_path: Path) -> None:
    """ENOTDIR: the path cannot exist."""
    (tmp_path / "plain").touch()
    assert netns_state(str(tmp_path / "plain" / "net")) == "missing"


def test_a_path_too_long_is_not_a_netns() -> None:
    assert netns_state("/" + "x" * 5000) == "not-netns"  # ENAMETOOLONG: not "missing"


@pytest.mark.netns
def test_link_names_are_read_inside_the_netns_by_a_thread_of_its_own(real_netns: str) -> None:
    name = os.path.basename(real_netns)
    subprocess.run(["ip", "-n", name, "link", "add", "nsu0", "type", "veth", "peer", "name",
                    "nsu1"], check=True, capture_output=True)
    host_before = {n for _, n in socket.if_nameindex()}
    assert link_names(real_netns) == {"lo", "nsu0", "nsu1"}
    # the caller's thread, and the process's other threads, stayed in their netns
    assert {n for _, n in socket.if_nameindex()} == host_before
    assert not {"nsu0", "nsu1"} & host_before
    assert in_netns(real_netns, lambda: threading.current_thread().name) == "netns"


def test_in_netns_refuses_what_is_not_a_netns(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError) as exc:
        link_names(str(tmp_path / "file"))
    assert exc.value.errno == errno.EINVAL and "cannot enter netns" in str(exc.value)
    with pytest.raises(FileNotFoundError):
        link_names(str(tmp_path / "missing"))
