"""Running one CNI plugin binary as a child process, the way a runtime would.

- The plugin is found by its bare ``type`` name as a regular executable in the
  daemon's own bin dirs; ``CNI_PATH`` is set to those dirs, never the client's.
- The child gets a clean environment: the ``CNI_*`` variables and a fixed PATH.
- A per-call timeout bounds it: then the child is killed (SIGKILL). On
  cancellation a child that has its config gets ``cancel_grace`` seconds to
  finish what it is doing before it is killed (plugins are not written to be
  killed half-way through their netlink work). Either way it is reaped inside a
  shielded scope, so no process outlives the call.
- stdout is capped; stderr is kept (capped too) for the journal, and its tail is
  the ``details`` of a crash's error: never in a message the daemon logs.
- Each child runs in its own session (a timeout kills its whole process group)
  and carries ``NETCTL_OWNER`` in its environment, so the next daemon can find
  and kill what a SIGKILLed one left running (:func:`kill_orphans`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

from netctl.cni.config import validate_plugin_type
from netctl.cni.hostroot import SAFE_PATH, HostRoot
from netctl.cni.types import check_result
from netctl.errors import (
    DELEGATE_BAD_OUTPUT,
    DELEGATE_CRASHED,
    DELEGATE_TIMEOUT,
    INVALID_CONFIG,
    CNIError,
)

MAX_STDOUT = 1 << 20
MAX_STDERR = 64 << 10
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
OWNER_VAR = "NETCTL_OWNER"


def owned_processes(owner: str) -> list[int]:
    """Live (not zombie) processes carrying ``NETCTL_OWNER=<owner>`` in their environment."""
    marker = f"{OWNER_VAR}={owner}".encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read() + b"\0"
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in environ and state not in ("Z", "X"):  # a zombie does nothing more
            found.append(int(entry))
    return found


def kill_orphans(owner: str) -> list[int]:
    """SIGKILL every process a previous daemon on this journal left running.

    Delegates a previous daemon started (and their children, which inherit the
    environment) survive a SIGKILL of that daemon; the next one calls this before
    its start-up replay, so no orphan goes on adding after the replay undid it.
    """
    killed = []
    for pid in owned_processes(owner):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed


class PluginError(CNIError):
    """A plugin run that failed; carries what the plugin printed on stderr."""

    def __init__(self, code: int, msg: str, details: str = "", stderr: bytes = b"") -> None:
        super().__init__(code, msg, details)
        self.stderr = stderr


class PluginOutput(msgspec.Struct):
    result: dict[str, Any] | None
    stderr: bytes
    seconds: float


class Cancellation(msgspec.Struct):
    """What happened to a plugin run that was cancelled (filled in before re-raising)."""

    fed: bool = False  # it had its whole config, so it may have started side effects
    finished: PluginOutput | None = None  # it finished successfully within the grace

    def describe(self, grace: float) -> str:
        if not self.fed:
            return "cancelled before the plugin had its config; killed"
        return f"cancelled; still running after {grace:g}s of grace, killed"


FOUND_FOR = 2.0  # seconds a plugin's path, once found, is used without looking again
_found: dict[tuple[tuple[str, ...], str, str], tuple[str, float]] = {}


def find_plugin(bin_dirs: Sequence[str], ptype: str, root: HostRoot = HostRoot()) -> str:
    """The path of plugin ``ptype``: the first regular executable of that name in
    ``bin_dirs``. With a host ``root``, the dirs are the host's and so is the answer (the
    daemon looks for it inside the root, as the chrooted exec will).

    An answer is used for :data:`FOUND_FOR` seconds without looking again (two stats per
    dir per exec, otherwise): a plugin installed meanwhile in an earlier dir is found
    after that; one removed fails its exec, which forgets the answer
    (:func:`forget_plugin`) and looks again."""
    key = (tuple(bin_dirs), ptype, root.path)
    now = time.monotonic()
    hit = _found.get(key)
    if hit is not None and now - hit[1] < FOUND_FOR:
        return hit[0]
    path = _look_for(bin_dirs, ptype, root)
    if len(_found) > 256:
        _found.clear()
    _found[key] = (path, now)
    return path


def forget_plugin(bin_dirs: Sequence[str], ptype: str, root: HostRoot = HostRoot()) -> None:
    _found.pop((tuple(bin_dirs), ptype, root.path), None)


def _look_for(bin_dirs: Sequence[str], ptype: str, root: HostRoot) -> str:
    validate_plugin_type(ptype, "plugin")
    for directory in bin_dirs:
        path = os.path.join(directory, ptype)
        seen = root.resolve(path)
        try:
            st = os.stat(seen)
        except OSError:
            continue
        if os.path.isfile(seen) and st.st_mode & 0o111:
            return path
    where = f" (the host's, under host-root {root.path})" if root.path else ""
    raise CNIError(
        INVALID_CONFIG,
        f"plugin type {ptype!r} not found as an executable in {':'.join(bin_dirs)}{where}",
    )


class Child:
    """One plugin process, started with as little work in the daemon as a child can take:
    ``posix_spawn`` from the daemon's own thread (no helper thread, no fork of the
    daemon's memory), in a session of its own, with

    - stdin: a memfd already holding the whole config (nothing to feed, no task for it:
      the plugin has its config from its first instruction on);
    - stdout: a pipe, read to EOF (:meth:`read_out`, capped);
    - stderr: a pipe sized for more than :data:`MAX_STDERR`, read once when the plugin
      is done (:meth:`stderr`): a plugin that prints past it blocks there, and the
      timeout ends it, as one that never exits;

    and its exit waited for on a pidfd. Every descriptor the daemon holds is close-on-exec
    (Python's default), so the plugin inherits exactly these three."""

    __slots__ = ("_err", "_out", "_stderr", "pid", "returncode")

    def __init__(self, argv: list[str], env: dict[str, str], stdin: bytes) -> None:
        conf = os.memfd_create("cni-config", os.MFD_CLOEXEC)
        out_r = out_w = err_r = err_w = -1
        try:
            _write_all(conf, stdin)
            os.lseek(conf, 0, os.SEEK_SET)
            out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            with contextlib.suppress(OSError):  # the default (64 KiB) is the cap: then it
                fcntl.fcntl(err_r, F_SETPIPE_SZ, 2 * MAX_STDERR)  # reads as over the cap
            os.set_blocking(out_w, True)  # the plugin's ends block, as a runtime's pipes do
            os.set_blocking(err_w, True)
            self.pid = os.posix_spawn(argv[0], argv, env, setsid=True, setsigmask=(),
                                      setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                                      file_actions=[(os.POSIX_SPAWN_DUP2, conf, 0),
                                                    (os.POSIX_SPAWN_DUP2, out_w, 1),
                                                    (os.POSIX_SPAWN_DUP2, err_w, 2)])
        except BaseException:
            for fd in (out_r, err_r):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            for fd in (conf, out_w, err_w):
                if fd >= 0:
                    os.close(fd)
        self._out, self._err = out_r, err_r
        self._stderr: bytes | None = None
        self.returncode: int | None = None

    async def read_out(self, cap: int, buf: bytearray) -> bytes:
        """stdout to EOF into ``buf`` (kept by the caller if this is cancelled half-way);
        :class:`PluginError` past ``cap`` bytes."""
        while True:
            try:
                data = os.read(self._out, 65536)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._out)
                continue
            if not data:
                return bytes(buf)
            buf += data
            if len(buf) > cap:
                raise PluginError(DELEGATE_BAD_OUTPUT, f"printed more than {cap} bytes on "
                                  "stdout")

    async def wait(self) -> int:
        """Its exit status, once it has exited (reaped here)."""
        while self.returncode is None:
            if self._reap():
                break
            try:
                pidfd = os.pidfd_open(self.pid)
            except OSError:  # a kernel without pidfds: poll
                await trio.sleep(0.005)
                continue
            try:
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                trio.lowlevel.notify_closing(pidfd)
                os.close(pidfd)
        assert self.returncode is not None
        return self.returncode

    def _reap(self) -> bool:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.returncode = os.waitstatus_to_exitcode(status)
        return True

    def kill(self) -> None:
        """SIGKILL it and its process group (unless it was reaped: its pid may be another's
        by now)."""
        if self.returncode is None:
            kill_group(self.pid)

    def stderr(self) -> bytes:
        """What it printed on stderr (read once it is done): up to :data:`MAX_STDERR`."""
        if self._stderr is not None:
            return self._stderr
        chunks, size = [], 0
        with contextlib.suppress(BlockingIOError, OSError):
            while size <= MAX_STDERR:
                data = os.read(self._err, 65536)
                if not data:
                    break
                chunks.append(data)
                size += len(data)
        self._stderr = b"(stderr over the cap)" if size > MAX_STDERR else b"".join(chunks)
        return self._stderr

    def close(self) -> None:
        if self._out >= 0:  # waited on through trio
            trio.lowlevel.notify_closing(self._out)
            os.close(self._out)
        if self._err >= 0:  # only ever read once it is done
            os.close(self._err)
        self._out = self._err = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


async def run_plugin(
    bin_dirs: Sequence[str],
    ptype: str,
    command: str,
    config: bytes,
    *,
    container_id: str,
    netns: str,
    ifname: str,
    cni_args: str = "",
    timeout: float = 60.0,
    owner: str = "",
    cancel_grace: float = 5.0,
    cancellation: Cancellation | None = None,
    root: HostRoot = HostRoot(),
) -> PluginOutput:
    """Run ``ptype`` with ``command``; return its decoded result or raise :class:`PluginError`.

    If the call is cancelled, ``cancellation`` is filled in before the
    cancellation goes on (did the plugin have its config, did it finish within
    ``cancel_grace``), so the caller can record what really happened. With a host
    ``root`` the plugin runs chrooted into it (:mod:`netctl.cni.hostroot`).
    """
    path = find_plugin(bin_dirs, ptype, root)
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_ARGS": cni_args,
        "CNI_PATH": ":".join(bin_dirs),
        "PATH": SAFE_PATH,
        OWNER_VAR: owner,
    }
    started = time.monotonic()
    cancel = cancellation if cancellation is not None else Cancellation()
    try:
        child = Child(root.argv(path), env, config)
    except OSError:  # gone (or replaced) since it was found: look again, once
        forget_plugin(bin_dirs, ptype, root)
        path = find_plugin(bin_dirs, ptype, root)
        try:
            child = Child(root.argv(path), env, config)
        except OSError as exc:
            raise PluginError(DELEGATE_CRASHED, f"{path} could not be started: "
                              f"{exc.strerror or exc}") from None
    cancel.fed = True  # its stdin holds the whole config from the start
    out = b""
    out_buf = bytearray()
    try:
        try:
            with trio.fail_after(timeout):
                out = await child.read_out(MAX_STDOUT, out_buf)
                await child.wait()
        except trio.TooSlowError:
            child.kill()
            with trio.CancelScope(shield=True):
                await child.wait()
            raise PluginError(
                DELEGATE_TIMEOUT, f"did not finish {command} within {timeout:g}s and was killed"
            ) from None
        except PluginError as exc:  # stdout over the cap
            child.kill()
            with trio.CancelScope(shield=True):
                await child.wait()
            exc.stderr = child.stderr()
            raise
        except BaseException:
            # Cancelled (a sibling failed, a DEL came, shutdown). A plugin that has its
            # whole config is in the middle of netlink work and is not written to be killed
            # there (a bridge killed before it sets the bridge's MAC leaves a bridge no
            # later ADD can use; a macvlan killed before its rename leaves a link no DEL
            # knows): let it finish for up to ``cancel_grace`` seconds, then kill it.
            # Compensation follows.
            with trio.CancelScope(shield=True):
                with trio.move_on_after(cancel_grace):
                    try:
                        out = await child.read_out(MAX_STDOUT, out_buf)
                        if await child.wait() == 0:
                            cancel.finished = PluginOutput(
                                result=interpret(command, 0, out, child.stderr()),
                                stderr=child.stderr(), seconds=time.monotonic() - started)
                    except PluginError:
                        pass  # it finished, but badly: nothing to record as done
                child.kill()
                await child.wait()
            raise
        err = child.stderr()
    finally:
        child.close()
    seconds = time.monotonic() - started
    assert child.returncode is not None  # waited for above
    return PluginOutput(result=interpret(command, child.returncode, out, err), stderr=err,
                        seconds=seconds)


def kill_group(pid: int) -> None:
    """SIGKILL a child started in its own session, and its process group."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def interpret(command: str, returncode: int, out: bytes, err: bytes) -> dict[str, Any] | None:
    """Turn a finished plugin run into its result, or the :class:`PluginError` it means."""
    tail = err.decode(errors="replace").strip()[-400:]
    if returncode != 0:
        try:
            obj = msgspec.json.decode(out) if out.strip() else None
        except msgspec.DecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("code"), int) and "msg" in obj:
            raise PluginError(int(obj["code"]), str(obj["msg"]), str(obj.get("details") or ""),
                              stderr=err)
        how = (f"was killed by signal {-returncode}" if returncode < 0
               else f"exited with status {returncode}")
        # stderr's tail goes to the caller in ``details``, never into the message (which
        # the daemon may log): a delegate's stderr is the journal's, not the log's
        raise PluginError(DELEGATE_CRASHED, f"{how} without a CNI error",
                          f"stderr: {tail}" if tail else "", stderr=err)
    if command != "ADD" and not out.strip():
        return None
    try:
        obj = msgspec.json.decode(out)
    except msgspec.DecodeError as exc:
        raise PluginError(DELEGATE_BAD_OUTPUT,
                          f"printed malformed JSON on {command}: {exc}; stdout starts "
                          f"{out[:60]!r}", stderr=err) from None
    if not isinstance(obj, dict):
        raise PluginError(DELEGATE_BAD_OUTPUT, f"printed a JSON {type(obj).__name__} "
                          f"on {command}, not an object", stderr=err)
    if command == "ADD" and isinstance(obj.get("code"), int) and "msg" in obj:
        raise PluginError(int(obj["code"]), str(obj["msg"]), str(obj.get("details") or ""),
                          stderr=err)
    if command == "ADD":
        problem = check_result(obj)
        if problem is not None:
            raise PluginError(DELEGATE_BAD_OUTPUT, f"printed a result that is not a CNI "
                              f"result: {problem}", stderr=err)
    return obj
