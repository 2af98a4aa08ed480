"""``netctl install-cni``: put the thin plugin into a CNI bin dir.

The plugin is a static executable built from ``plugin/`` (C, linked statically against
glibc; ``make plugin``, which ``make setup`` runs): it needs nothing of the host, no
shared libc and no interpreter, so it runs on container-optimized nodes too. It is
installed twice, as ``netctl-cni`` (the meta-plugin type) and ``netctl-ipam`` (the IPAM
type): one file, which knows by its name which it is.

Where the binary comes from (:func:`find_binary`): ``--plugin-binary``, else the
checkout's build output (``build/plugin/netctl-cni``), else ``/usr/lib/netctl/netctl-cni``
(where an image puts it). Before anything is written the binary must run here and
answer VERSION (:func:`check_binary`): install-cni never leaves a plugin that cannot
run. A missing binary, one built for another machine, a truncated copy: an error that
names the file and what to do, and the bin dir untouched.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

PLUGIN_NAMES = ("netctl-cni", "netctl-ipam")  # one executable; it knows its name
BUILT = Path(__file__).resolve().parents[2] / "build" / "plugin" / "netctl-cni"
SYSTEM_BINARY = Path("/usr/lib/netctl/netctl-cni")
CHECK_TIMEOUT = 10.0


class InstallError(Exception):
    """The plugin cannot be installed: the message says why and what to do."""


def find_binary(given: str | None = None) -> Path:
    """The plugin executable to install: ``given``, else the first of :data:`BUILT` and
    :data:`SYSTEM_BINARY` that exists."""
    if given:
        return Path(given)
    for candidate in (BUILT, SYSTEM_BINARY):
        if candidate.exists():
            return candidate
    raise InstallError(f"the plugin binary is not built: neither {BUILT} nor {SYSTEM_BINARY} "
                       "exists; build it with `make plugin` (gcc and a static libc, Debian's "
                       "gcc and libc6-dev) or name one with --plugin-binary FILE")


def check_binary(path: Path) -> None:
    """Run ``path`` as a runtime runs VERSION; InstallError unless it answers it."""
    what = f"the plugin binary {path}"
    if not path.is_file():
        raise InstallError(f"{what} does not exist or is not a file; build it with "
                           "`make plugin` or name another with --plugin-binary FILE")
    try:
        proc = subprocess.run([str(path)], input=b'{"cniVersion": "1.0.0"}',
                              env={"CNI_COMMAND": "VERSION"}, capture_output=True,
                              timeout=CHECK_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{what} did not answer VERSION within {CHECK_TIMEOUT:g}s; "
                           "rebuild it with `make plugin`") from exc
    except OSError as exc:
        why = {errno.ENOENT: "the interpreter or loader it names is not on this host",
               errno.ENOEXEC: "not an executable this machine runs: another architecture, "
                              "or a truncated copy",
               errno.EACCES: "not executable"}.get(exc.errno or 0, exc.strerror or str(exc))
        raise InstallError(f"{what} cannot run here ({why}); rebuild it for this machine "
                           "with `make plugin`") from exc
    try:
        answer = json.loads(proc.stdout)
        ok = proc.returncode == 0 and "1.0.0" in answer["supportedVersions"]
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        raise InstallError(f"{what} does not answer VERSION (exit {proc.returncode}: "
                           f"{(proc.stdout + proc.stderr)[-300:]!r}); rebuild it with "
                           "`make plugin`")


def install(bin_dir: str, binary: str | None = None) -> list[str]:
    """Check the plugin binary, then write it into ``bin_dir`` under both names; the
    paths written (or already in place)."""
    source = find_binary(binary)
    check_binary(source)
    data = source.read_bytes()
    os.makedirs(bin_dir, exist_ok=True)
    written = []
    for name in PLUGIN_NAMES:
        target = os.path.join(bin_dir, name)
        if not (holds(target, data) and os.access(target, os.X_OK)):
            # (a restarted init container rewrites nothing; a runtime never execs a
            # half-written file)
            replace_file(target, data, 0o755, f"{target}.tmp.{os.getpid()}")
        written.append(target)
    return written


def holds(path: str, data: bytes) -> bool:
    """Whether the file at ``path`` holds exactly ``data``."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(data) + 1) == data
    except OSError:
        return False


def replace_file(target: str, data: bytes, mode: int, tmp: str) -> None:
    """``data`` at ``target``, whole or not at all: written to ``tmp`` (in the same dir),
    fsynced, renamed over ``target``; ``tmp`` removed when anything fails."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        remove(os.path.dirname(tmp), [os.path.basename(tmp)])
        raise


def remove(directory: str, names: Iterable[str]) -> list[str]:
    """Remove these files of ``directory`` where they exist; the paths removed."""
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed


def uninstall(bin_dir: str) -> list[str]:
    """Remove the plugin's executables; the paths removed."""
    return remove(bin_dir, PLUGIN_NAMES)
