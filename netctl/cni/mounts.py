"""Does a pod's network namespace, mounted on the host after the daemon started, reach
the daemon? The mount propagation of the netns directories, read from
``/proc/self/mountinfo`` (docs/kubernetes.md). Pure but for reading that file.

A daemon in a container sees the runtime's later netns mounts only when the directories
come from a shared host mount with HostToContainer propagation; from a private one (``/``
where PID 1 is not systemd) every new pod's ADD fails with "CNI_NETNS … does not exist".
:func:`check` reports each directory whose mount (the last one mounted on the longest
matching mount point) is neither shared nor a slave, with what to change.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True)
class Mount:
    point: str
    tags: tuple[str, ...]  # the optional fields: shared:N, master:N, propagate_from:N

    @property
    def propagation(self) -> str:
        shared = any(t.startswith("shared:") for t in self.tags)
        slave = any(t.startswith("master:") for t in self.tags)
        return ("shared and slave" if shared and slave else "shared" if shared
                else "slave" if slave else "private")


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and i + 3 < len(field):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse(text: str) -> list[Mount]:
    """The mounts of a mountinfo text, in its order (later ones on top)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 7:
            continue
        optional = fields[6:fields.index("-")]
        mounts.append(Mount(_unescape(fields[4]), tuple(optional)))
    return mounts


def holding(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount ``path`` lies on: the longest mount point above it, the last mounted."""
    best: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        if path == point or path.startswith(point if point == "/" else point + "/"):
            if best is None or len(point) >= len(best.point.rstrip("/") or "/"):
                best = mount
    return best


def problems(dirs: Iterable[str], mounts: list[Mount]) -> list[str]:
    """One message per directory whose mount does not propagate the host's new mounts."""
    out = []
    for path in dirs:
        mount = holding(path, mounts)
        if mount is None or mount.propagation != "private":
            continue
        out.append(
            f"{path} is on a private mount ({mount.point}): network namespaces the runtime "
            "mounts on the host after the daemon started do not appear here, so ADDs of "
            "new pods fail with \"CNI_NETNS … does not exist\". Make the host's / a "
            "shared mount (`mount --make-rshared /`: systemd does it at boot) so that the "
            "DaemonSet's HostToContainer mounts receive them, then restart the daemon")
    return out


def check(dirs: Iterable[str], mountinfo: str = MOUNTINFO) -> list[str]:
    """:func:`problems` of the directories that exist (their symlinks resolved by the
    caller), from this process's mounts; nothing when the mount table cannot be read."""
    try:
        with open(mountinfo) as fh:
            mounts = parse(fh.read())
    except OSError:
        return []
    return problems(dict.fromkeys(d for d in dirs if os.path.isdir(d)), mounts)
