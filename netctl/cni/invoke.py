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


def find_plugin(bin_dirs: Sequence[str], ptype: str, root: HostRoot = HostRoot()) -> str:
    """The path of plugin ``ptype``: the first regular executable of that name in
    ``bin_dirs``. With a host ``root``, the dirs are the host's and so is the answer (the
    daemon looks for it inside the root, as the chrooted exec will)."""
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


async def _read_capped(stream: trio.abc.ReceiveStream, cap: int, what: str,
                       buf: bytearray | None = None) -> bytes:
    """Read to EOF into ``buf`` (kept by the caller if this is cancelled half-way)."""
    buf = bytearray() if buf is None else buf
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return bytes(buf)
        buf += data
        if len(buf) > cap:
            raise PluginError(DELEGATE_BAD_OUTPUT, f"printed more than {cap} bytes on {what}")


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
    proc = await trio.lowlevel.open_process(
        root.argv(path),
        stdin=-1,  # subprocess.PIPE
        stdout=-1,
        stderr=-1,
        env=env,
        start_new_session=True,
    )
    out = b""
    out_buf = bytearray()
    err = b""
    cancel = cancellation if cancellation is not None else Cancellation()
    try:
        assert proc.stdin and proc.stdout and proc.stderr
        with trio.fail_after(timeout):

            async def feed() -> None:
                assert proc.stdin
                try:
                    await proc.stdin.send_all(config)
                except trio.BrokenResourceError:
                    pass  # the plugin stopped reading; its exit status tells
                await proc.stdin.aclose()
                cancel.fed = True

            async def drain_err() -> None:
                nonlocal err
                assert proc.stderr
                try:
                    err = await _read_capped(proc.stderr, MAX_STDERR, "stderr")
                except PluginError:
                    err = b"(stderr over the cap)"

            async with trio.open_nursery() as nursery:
                nursery.start_soon(feed)
                nursery.start_soon(drain_err)
                out = await _read_capped(proc.stdout, MAX_STDOUT, "stdout", out_buf)
            await proc.wait()
    except trio.TooSlowError:
        kill_group(proc)
        with trio.CancelScope(shield=True):
            await proc.wait()
        raise PluginError(
            DELEGATE_TIMEOUT, f"did not finish {command} within {timeout:g}s and was killed"
        ) from None
    except BaseException:
        # Cancelled (a sibling failed, a DEL came, shutdown). A plugin that has its whole
        # config is in the middle of netlink work and is not written to be killed there
        # (a bridge killed before it sets the bridge's MAC leaves a bridge no later ADD
        # can use; a macvlan killed before its rename leaves a link no DEL knows): let it
        # finish for up to ``cancel_grace`` seconds, then kill it. Compensation follows.
        with trio.CancelScope(shield=True):
            if cancel.fed:
                with trio.move_on_after(cancel_grace):
                    try:
                        assert proc.stdout is not None
                        out = await _read_capped(proc.stdout, MAX_STDOUT, "stdout", out_buf)
                        await proc.wait()
                        if proc.returncode == 0:
                            cancel.finished = PluginOutput(
                                result=interpret(command, 0, out, err), stderr=err,
                                seconds=time.monotonic() - started)
                    except PluginError:
                        pass  # it finished, but badly: nothing to record as done
            kill_group(proc)
            await proc.wait()
        raise
    seconds = time.monotonic() - started
    assert proc.returncode is not None  # waited for above
    return PluginOutput(result=interpret(command, proc.returncode, out, err), stderr=err,
                        seconds=seconds)


def kill_group(proc: trio.Process) -> None:
    """SIGKILL a child started in its own session, and its process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.kill()
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
