"""Which CNI versions a delegate binary supports: asked once, remembered.

A delegate refuses a config whose ``cniVersion`` it does not know (Debian's bridge 1.1.1
stops at 1.0.0), and it refuses the DEL that would undo it the same way. So the version is
checked while planning, before anything is journaled or run
(:func:`check_delegate_version`, code 1).

The versions are learnt as libcni's ``GetVersionInfo`` does: the binary exec'd with
``CNI_COMMAND=VERSION`` (:func:`exec_version`), its ``supportedVersions`` parsed
(:func:`parse_supported`), the answer remembered per ``(realpath, mtime_ns, size)``: once
per daemon life while the binary is unchanged, concurrent askers sharing one exec. A binary
whose VERSION fails is **unknown**, the empty set, which refuses nothing and leaves the
verdict to the real call; it is remembered too (a broken binary stays broken until it
changes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import msgspec
import trio

from netctl.cni import versions
from netctl.cni.hostroot import SAFE_PATH, HostRoot
from netctl.cni.invoke import Child, PluginError
from netctl.errors import INCOMPATIBLE_VERSION, CNIError

UNKNOWN: frozenset[str] = frozenset()
MAX_OUTPUT = 64 << 10

Stamp = tuple[str, int, int]  # realpath, mtime_ns, size


def parse_supported(out: bytes) -> frozenset[str]:
    """The ``supportedVersions`` of a VERSION answer; :data:`UNKNOWN` for anything else."""
    try:
        obj = msgspec.json.decode(out)
    except msgspec.DecodeError:
        return UNKNOWN
    listed = obj.get("supportedVersions") if isinstance(obj, dict) else None
    if not isinstance(listed, list) or not all(isinstance(v, str) and v for v in listed):
        return UNKNOWN
    return frozenset(listed)


def _order(version: str) -> tuple[int, tuple[int, int, int] | str]:
    try:
        return (0, versions.parse(version))
    except CNIError:
        return (1, version)


def check_delegate_version(ptype: str, path: str, version: str,
                           supported: frozenset[str]) -> None:
    """Refuse (code 1) a ``version`` the plugin ``ptype`` at ``path`` does not list.

    ``supported`` empty means unknown (its VERSION failed): nothing is refused."""
    if not supported or version in supported:
        return
    listed = ", ".join(sorted(supported, key=_order))
    raise CNIError(INCOMPATIBLE_VERSION,
                   f"plugin {ptype!r} ({path}) does not support cniVersion {version}; "
                   f"it supports {listed}")


def binary_stamp(path: str, root: HostRoot = HostRoot()) -> Stamp | None:
    """``(realpath, mtime_ns, size)`` of the binary, or None when it cannot be stat'ed
    (with a host ``root``: the host's path, its symlinks followed inside the root)."""
    real = root.resolve(path) if root.path else os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return real, st.st_mtime_ns, st.st_size


async def exec_version(path: str, *, timeout: float, probe_version: str,
                       root: HostRoot = HostRoot()) -> bytes | None:
    """Run ``path`` (chrooted into a host ``root``) with CNI_COMMAND=VERSION; its stdout,
    or None when it failed."""
    env = {"CNI_COMMAND": "VERSION", "PATH": SAFE_PATH}
    try:
        child = Child(root.argv(path), env, msgspec.json.encode({"cniVersion": probe_version}))
    except OSError:
        return None
    out = bytearray()
    try:
        with trio.move_on_after(timeout):
            await child.read_out(MAX_OUTPUT, out)
            await child.wait()
    except PluginError:
        pass  # more than MAX_OUTPUT
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(timeout):
            child.kill()
            await child.wait()
        child.close()
    if child.returncode != 0 or len(out) > MAX_OUTPUT:
        return None
    return bytes(out)


@dataclass
class VersionProbe:
    """The per-daemon memory of which versions each delegate binary supports."""

    timeout: float = 5.0
    probe_version: str = versions.LATEST
    execs: int = 0  # how many VERSION execs ran (for tests and metrics)
    _known: dict[str, tuple[Stamp, frozenset[str]]] = field(default_factory=dict)
    _pending: dict[Stamp, trio.Event] = field(default_factory=dict)

    def cached(self, path: str, root: HostRoot = HostRoot()) -> frozenset[str] | None:
        """What is remembered for the binary as it is now; None when it must be asked."""
        stamp = binary_stamp(path, root)
        known = self._known.get(stamp[0]) if stamp else None
        return known[1] if known and known[0] == stamp else None

    async def supported_versions(self, path: str,
                                 root: HostRoot = HostRoot()) -> frozenset[str]:
        """The versions ``path`` supports; :data:`UNKNOWN` when its VERSION failed."""
        while True:
            stamp = binary_stamp(path, root)
            if stamp is None:
                return UNKNOWN
            known = self._known.get(stamp[0])
            if known is not None and known[0] == stamp:
                return known[1]
            pending = self._pending.get(stamp)
            if pending is None:
                break
            await pending.wait()  # someone else asks it; then look again
        done = self._pending[stamp] = trio.Event()
        try:
            self.execs += 1
            # as is, the resolved path; in a host root, the host's path (the chrooted
            # exec follows its links there)
            out = await exec_version(path if root.path else stamp[0], timeout=self.timeout,
                                     probe_version=self.probe_version, root=root)
            supported = UNKNOWN if out is None else parse_supported(out)
            self._known[stamp[0]] = (stamp, supported)
            return supported
        finally:
            del self._pending[stamp]
            done.set()


_default = VersionProbe()


async def supported_versions(path: str, root: HostRoot = HostRoot()) -> frozenset[str]:
    """The versions the delegate binary at ``path`` supports, asked once per daemon life
    while it is unchanged; :data:`UNKNOWN` (empty) when its VERSION fails."""
    return await _default.supported_versions(path, root)
