"""Where the real Kubernetes binaries are, by version, for the tests and benches that run a
real API server or a real node.

No registry these machines reach ships kube-apiserver or kubelet, and a binary built from
another project's source is never committed: whoever wants the real-server and real-node
tests builds the binaries outside the repository (``docs/testing.md`` says from which
public trees, with which Go) and puts each version's in a directory of its own:

- ``NETCTL_KUBE_ROOT`` (default ``/opt/netctl-kube``) holds one directory per version,
  named by the version: ``v1.24.0/``, ``v1.36.2/``, each with ``kube-apiserver``,
  ``kube-controller-manager``, ``kube-scheduler``, ``kubelet`` and ``kubectl``;
- ``NETCTL_KUBE_DIR`` names one such directory instead (its version read from
  ``kube-apiserver --version`` when its name does not say it).

:func:`found` lists the versions present, oldest first. Which of them a run uses:
``NETCTL_KUBE_VERSIONS`` — ``newest`` (the default: the suite stays within its time with
one node's modules), ``all`` (every version found, each real-node test module run once per
version), or versions by prefix (``v1.36``, ``v1.24.0,v1.36``). :func:`pick` gives the
newest selected version a single-version user (the real API server of the integration
tests, the benches) takes, optionally at least some minor version (DRA needs v1.34);
:func:`missing` says in one line what was looked for when none fits, for a skip.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/opt/netctl-kube")
SERVER_BINARIES = ("kube-apiserver",)
NODE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
                 "kubectl")
_VERSION = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True, order=True)
class KubeVersion:
    """One version's binaries: ``version`` (``v1.36.2``) and the directory holding them."""

    key: tuple[int, int, int]
    version: str
    dir: Path

    @property
    def minor(self) -> int:
        return self.key[1]

    def binary(self, name: str) -> Path | None:
        path = self.dir / name
        return path if os.access(path, os.X_OK) else None

    def lacks(self, names: tuple[str, ...] = NODE_BINARIES) -> list[str]:
        return [n for n in names if self.binary(n) is None]

    def __str__(self) -> str:
        return self.version


def root() -> Path:
    return Path(os.environ.get("NETCTL_KUBE_ROOT") or DEFAULT_ROOT)


@functools.cache
def _reported(apiserver: Path) -> str:
    """``kube-apiserver --version``'s version (``""`` when it does not say)."""
    try:
        out = subprocess.run([str(apiserver), "--version"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except OSError:
        return ""
    m = _VERSION.search(out)
    return m.group(0) if m else ""


def _version_of(d: Path) -> KubeVersion | None:
    m = _VERSION.fullmatch(d.name)
    if m is None and os.access(d / "kube-apiserver", os.X_OK):
        m = _VERSION.fullmatch(_reported(d / "kube-apiserver"))
    if m is None:
        return None
    return KubeVersion((int(m[1]), int(m[2]), int(m[3])), m.group(0), d)


def found() -> list[KubeVersion]:
    """Every version present (``NETCTL_KUBE_DIR``'s alone when it is set), oldest first;
    a directory counts when it holds an executable ``kube-apiserver``."""
    given = os.environ.get("NETCTL_KUBE_DIR")
    dirs = [Path(given)] if given else \
        sorted(p for p in root().iterdir() if p.is_dir()) if root().is_dir() else []
    versions = [v for v in map(_version_of, dirs)
                if v is not None and v.binary("kube-apiserver") is not None]
    return sorted(versions)


def named(versions: list[KubeVersion], want: str) -> list[KubeVersion]:
    """``versions`` that ``want`` names: ``all``, ``newest``, or versions by prefix
    (``v1.36``, ``v1.24.0,v1.36``)."""
    want = want.strip()
    if want == "all":
        return versions
    if want == "newest":
        return versions[-1:]
    prefixes = [w.strip() for w in want.split(",") if w.strip()]
    return [v for v in versions
            if any(v.version == p or v.version.startswith(p + ".") for p in prefixes)]


def selected() -> list[KubeVersion]:
    """The versions this run uses (``NETCTL_KUBE_VERSIONS``), oldest first."""
    return named(found(), os.environ.get("NETCTL_KUBE_VERSIONS") or "newest")


def pick(min_minor: int = 0, names: tuple[str, ...] = NODE_BINARIES) -> KubeVersion | None:
    """The newest selected version of at least v1.``min_minor`` that has ``names``."""
    fit = [v for v in selected() if v.minor >= min_minor and not v.lacks(names)]
    return fit[-1] if fit else None


def where() -> str:
    given = os.environ.get("NETCTL_KUBE_DIR")
    return f"NETCTL_KUBE_DIR={given}" if given else f"{root()}/vX.Y.Z/ (NETCTL_KUBE_ROOT)"


def missing(min_minor: int = 0, names: tuple[str, ...] = NODE_BINARIES) -> str:
    """Why no version fits, in one line (see :func:`pick`); "" when one does."""
    if pick(min_minor, names) is not None:
        return ""
    at_least = f" v1.{min_minor}+" if min_minor else ""
    have = ", ".join(f"{v} (lacks {', '.join(v.lacks(names))})" if v.lacks(names) else str(v)
                     for v in found())
    chosen = os.environ.get("NETCTL_KUBE_VERSIONS")
    return (f"no Kubernetes{at_least} binaries ({', '.join(names)}) in {where()}"
            + (f"; found {have}" if have else "")
            + (f"; NETCTL_KUBE_VERSIONS={chosen}" if chosen else "")
            + ": build them outside the repository as docs/testing.md says")
