"""The host's context, for a daemon that runs in a container (``host-root``;
docs/kubernetes.md, "Delegates in the host's context").

A runtime execs CNI plugins on the host, with the host's root, ``/run``, iptables and the
plugins' own state; netctl's daemon execs them from a container whose root is its image.
With ``host-root`` set to where the host's ``/`` is mounted, delegates run chrooted into
it (:meth:`HostRoot.argv`), their binaries are found in the bin dirs as the host sees
them (:func:`resolve`: symlinks followed inside the root, as the kernel follows them for
the chrooted exec), and the files the daemon reads on the host's behalf are read there
(:meth:`HostRoot.host`). Empty (a daemon run on the host), everything runs as is. Pure
but for ``stat``/``readlink``.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
from dataclasses import dataclass

from netctl.errors import INVALID_CONFIG, CNIError

# the PATH every child netctl execs gets (delegates, their VERSION probe), and where the
# chroot binary is looked for
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_LINKS = 40  # symlinks followed in one lookup, as the kernel's ELOOP limit


def host_path(root: str, path: str) -> str:
    """Where the daemon reads the host's absolute ``path`` when the host's root is
    mounted at ``root`` ("" : the daemon's root is the host's)."""
    if not root:
        return path
    return posixpath.join(root, posixpath.normpath("/" + path).lstrip("/"))


def resolve(root: str, path: str) -> str:
    """The host's ``path`` as the daemon reaches it, its symlinks followed inside
    ``root`` (an absolute link target is the host's, so it is taken from ``root``, and
    ``..`` never climbs above it): what a chrooted exec of ``path`` runs. Components that
    do not exist are kept as they are; ``stat`` of the answer tells."""
    if not root:
        return path
    parts = [p for p in posixpath.normpath("/" + path).split("/") if p]
    done: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        if part == ".":
            continue
        here = host_path(root, "/" + "/".join([*done, part]))
        try:
            st = os.lstat(here)
        except OSError:
            done.append(part)
            continue
        if not stat.S_ISLNK(st.st_mode):
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            return here  # a loop: stat of it fails, as the kernel's lookup would
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        parts = [p for p in target.split("/") if p] + parts
    return host_path(root, "/" + "/".join(done))


@dataclass(frozen=True)
class HostRoot:
    """Where the host's root is mounted (``path`` "" : the daemon's own root is the
    host's) and the ``chroot`` binary that runs delegates in it."""

    path: str = ""
    chroot: str = ""

    @classmethod
    def at(cls, path: str) -> HostRoot:
        """The host root mounted at ``path`` ("" : as is), checked: a config error naming
        what is missing when ``path`` is no directory with a ``/proc``, or no ``chroot``
        binary exists to run delegates in it."""
        if not path:
            return cls()
        path = posixpath.normpath(path)
        if not os.path.isdir(path):
            raise CNIError(INVALID_CONFIG, f"host-root {path}: not a directory (the host's "
                           "/ mounted in the daemon's container; empty for a daemon run on "
                           "the host)")
        if not os.path.isdir(host_path(path, "/proc/self")):
            raise CNIError(INVALID_CONFIG, f"host-root {path}: has no /proc/self (mount the "
                           "host's root recursively, its /proc included, with the host's "
                           "PID namespace)")
        found = shutil.which("chroot", path=SAFE_PATH)
        if found is None:
            raise CNIError(INVALID_CONFIG, f"host-root {path}: no chroot binary (coreutils) "
                           f"on {SAFE_PATH} to run delegates in it")
        return cls(path, found)

    def host(self, path: str) -> str:
        """Where the daemon reads the host's ``path`` (:func:`host_path`)."""
        return host_path(self.path, path)

    def resolve(self, path: str) -> str:
        """The host's ``path``, symlinks followed inside the root (:func:`resolve`)."""
        return resolve(self.path, path)

    def argv(self, path: str) -> list[str]:
        """The command line that execs the host's ``path``: chrooted into the root when
        one is set, else ``path`` itself."""
        return [self.chroot, self.path, path] if self.path else [path]

    def describe(self, path: str) -> str:
        """``path`` for a message: the host's path, and where the daemon read it."""
        return f"{path} (read at {self.host(path)})" if self.path else path
