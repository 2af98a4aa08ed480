"""Running one CNI plugin binary as a child process, the way a runtime would.

- The plugin is found by its bare ``type`` name as a regular executable in the
  daemon's own bin dirs; ``CNI_PATH`` is set to those dirs, never the client's.
- The child gets a clean environment: the ``CNI_*`` variables and a fixed PATH.
- A per-call timeout bounds it; on timeout or cancellation the child is killed
  (SIGKILL) and reaped inside a shielded scope, so no process outlives the call.
- stdout is capped; stderr is kept (capped too) for the journal.
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
from netctl.errors import (
    DELEGATE_BAD_OUTPUT,
    DELEGATE_CRASHED,
    DELEGATE_TIMEOUT,
    INVALID_CONFIG,
    CNIError,
)

MAX_STDOUT = 1 << 20
MAX_STDERR = 64 << 10
_SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OWNER_VAR = "NETCTL_OWNER"


def kill_orphans(owner: str) -> list[int]:
    """SIGKILL every process still carrying ``NETCTL_OWNER=<owner>`` in its environment.

    Delegates a previous daemon started (and their children, which inherit the
    environment) survive a SIGKILL of that daemon; the next one calls this before
    its start-up replay, so no orphan goes on adding after the replay undid it.
    """
    marker = f"{OWNER_VAR}={owner}".encode() + b"\0"
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read() + b"\0"
        except OSError:
            continue
        if marker in environ:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
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


def find_plugin(bin_dirs: Sequence[str], ptype: str) -> str:
    validate_plugin_type(ptype, "plugin")
    for directory in bin_dirs:
        path = os.path.join(directory, ptype)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isfile(path) and st.st_mode & 0o111:
            return path
    raise CNIError(
        INVALID_CONFIG,
        f"plugin type {ptype!r} not found as an executable in {':'.join(bin_dirs)}",
    )


async def _read_capped(stream: trio.abc.ReceiveStream, cap: int, what: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return b"".join(chunks)
        size += len(data)
        if size > cap:
            raise PluginError(DELEGATE_BAD_OUTPUT, f"printed more than {cap} bytes on {what}")
        chunks.append(bytes(data))


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
) -> PluginOutput:
    """Run ``ptype`` with ``command``; return its decoded result or raise :class:`PluginError`."""
    path = find_plugin(bin_dirs, ptype)
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_ARGS": cni_args,
        "CNI_PATH": ":".join(bin_dirs),
        "PATH": _SAFE_PATH,
        OWNER_VAR: owner,
    }
    started = time.monotonic()
    proc = await trio.lowlevel.open_process(
        [path],
        stdin=-1,  # subprocess.PIPE
        stdout=-1,
        stderr=-1,
        env=env,
        start_new_session=True,
    )
    out = b""
    err = b""
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
                out = await _read_capped(proc.stdout, MAX_STDOUT, "stdout")
            await proc.wait()
    except trio.TooSlowError:
        _kill(proc)
        with trio.CancelScope(shield=True):
            await proc.wait()
        raise PluginError(
            DELEGATE_TIMEOUT, f"did not finish {command} within {timeout:g}s and was killed"
        ) from None
    except BaseException:
        _kill(proc)
        with trio.CancelScope(shield=True):
            await proc.wait()
        raise
    seconds = time.monotonic() - started
    assert proc.returncode is not None  # waited for above
    return PluginOutput(result=interpret(command, proc.returncode, out, err), stderr=err,
                        seconds=seconds)


def _kill(proc: trio.Process) -> None:
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
        raise PluginError(DELEGATE_CRASHED, f"{how} without a CNI error"
                          + (f"; stderr: {tail}" if tail else ""), stderr=err)
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
    return obj
