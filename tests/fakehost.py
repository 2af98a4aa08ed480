"""A node's root file system for tests of the host's context: a directory that looks like
a host to whatever runs chrooted into it, without touching the machine's own ``/etc``,
``/opt`` or ``/var``.

:class:`FakeHost` makes ``<dir>/`` with the machine's ``/usr``, ``/proc``, ``/sys``
and ``/dev`` bind-mounted recursively (programs, libraries, processes and their
namespaces, devices), ``/run/netns`` bound to the machine's (pods' netns files, made
by ``ip netns`` and runtimes, appear in it as they are made), the usual merged-``/usr``
links (``/bin`` → ``usr/bin``, …, ``/var/run`` → ``/run``), and empty ``/etc``,
``/opt``, ``/var``, ``/run``, ``/tmp`` of its own: what a test writes there is the fake
host's alone. Every bind is made a slave (``--make-rslave``): the machine's mounts
propagate in, nothing propagates back, so unmounting them never unmounts the
machine's.

:meth:`FakeHost.close` unmounts everything under the root (deepest first, lazily when
busy) and removes the directory only once ``/proc/self/mountinfo`` shows no mount under
it: a bind of ``/usr`` is never deleted through.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from types import TracebackType

BINDS = ("usr", "proc", "sys", "dev")
LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64",
         "var/run": "/run"}
DIRS = ("etc", "opt/cni/bin", "var/lib", "run/netns", "tmp", "root")
NETNS = Path("/run/netns")
CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's
HOSTFILE = Path(__file__).resolve().parent / "plugins" / "hostfile"
MARKER = "/etc/netctl-test-host-marker"  # a file only the fake host has
PRIMARY = "/etc/cni/net.d/10-primary.conflist"  # its primary CNI's config


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if point == str(root) or point.startswith(prefix):
                found.append(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def shared_netns_dir() -> None:
    """Make ``/run/netns`` a shared mount point, as ``ip netns add`` does: netns files
    bound there later then appear in every bind of it."""
    name = f"fakehost-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=30)
    subprocess.run(["ip", "netns", "del", name], check=True, capture_output=True, timeout=30)


class FakeHost:
    """A host root at ``root`` (made by :meth:`open`, removed by :meth:`close`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, host_path: str) -> Path:
        """Where the fake host's absolute ``host_path`` is on the machine."""
        return self.root / host_path.lstrip("/")

    def open(self) -> FakeHost:
        self.root.mkdir(parents=True)
        try:
            for d in DIRS:
                (self.root / d).mkdir(parents=True, exist_ok=True)
            for name, target in LINKS.items():
                if os.path.lexists(f"/{name}"):
                    (self.root / name).symlink_to(target)
            for d in BINDS:
                (self.root / d).mkdir(exist_ok=True)
                _mount("--rbind", f"/{d}", str(self.root / d))
                _mount("--make-rslave", str(self.root / d))
            shared_netns_dir()
            _mount("--bind", str(NETNS), str(self.root / "run/netns"))
            _mount("--make-rslave", str(self.root / "run/netns"))
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for point in mounts_under(self.root):
            proc = subprocess.run(["umount", point], capture_output=True, timeout=30)
            if proc.returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)
        left = mounts_under(self.root)
        if left:
            raise RuntimeError(f"fake host {self.root}: still mounted, not removed: {left}")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> FakeHost:
        return self.open()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def furnish(host: FakeHost, bridge: str, subnet: str, data_dir: str = "") -> None:
    """A node before netctl: Debian's plugins linked into its /opt/cni/bin (absolute links,
    as a package makes them), the test delegate ``netctl-test-hostfile`` only there, its
    primary CNI's config (:data:`PRIMARY`: a bridge with host-local on ``subnet``, whose
    ``dataDir`` is host-local's default unless ``data_dir`` is given) and :data:`MARKER`,
    whose first line is ``the node's own file``."""
    bin_dir = host.path("/opt/cni/bin")
    for plugin in sorted(os.listdir(CNI_PLUGINS)):
        (bin_dir / plugin).symlink_to(CNI_PLUGINS / plugin)
    shutil.copy(HOSTFILE, bin_dir / "netctl-test-hostfile")
    host.path(MARKER).write_text("the node's own file\n")
    conf = host.path(PRIMARY)
    conf.parent.mkdir(parents=True)
    conf.write_text(json.dumps({"cniVersion": "1.0.0", "name": "primary", "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                 **({"dataDir": data_dir} if data_dir else {})}}]}))
