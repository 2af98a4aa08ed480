"""``netctl install-cni --auto-config``: put netctl in front of the node's primary CNI, as
Multus' ``multusConfigFile: auto`` does (docs/kubernetes.md, "What the init container
does", has the rules).

The decision is pure (:func:`decide` over the dir's files as
:func:`netctl.cni.confdir.read_conf_dir` gives them; :func:`render` the bytes): the
primary is the first file in the runtime's load order that is not netctl's; a file not
(yet) a JSON object there means wait; a loaded file that sorts before
``00-netctl.conflist`` is refused — unless it is Multus' and ``replace_multus`` says to
take its place: then netctl's file is written first and Multus' renamed away after it
(:func:`take_place`: one rename, so some meta-plugin's config is in front at every
moment), from where ``--uninstall`` puts it back (:func:`restore_replaced`).

The I/O is thin: the file is written only when its bytes change, renamed in from a hidden
name inside the conf dir (containerd 1.6 reloads on events in the dir only; a file renamed
in from elsewhere goes unnoticed). :func:`run` waits for a primary (inotify, with a rescan
as the back-stop) and with ``watch`` keeps the file in step. Only :func:`remove_conf`
(``--uninstall``) removes it: while the daemon is down, ADD answers code 11 and the
runtime retries, where a removed file would let pods come up on the primary alone.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from netctl.cni import inotify
from netctl.cni.confdir import ConfFile, capabilities, read_conf_dir
from netctl.cni.config import parse_chain
from netctl.cni.install import holds, remove, replace_file
from netctl.cni.request import POD_ANNOTATIONS
from netctl.errors import CNIError

CONF_NAME = "00-netctl.conflist"
NETWORK_NAME = "netctl"
PLUGIN_TYPE = "netctl-cni"
RESCAN_INTERVAL = 5.0  # seconds: the back-stop for events inotify does not give
MULTUS_TYPES = frozenset({"multus", "multus-shim"})
REPLACED = ".netctl-replaced"  # a replaced config's suffix: not a name libcni loads


@dataclass(frozen=True)
class Generated:
    """Write this conflist: ``primary`` is the cluster network's file."""

    primary: str
    conflist: dict[str, Any]
    skipped: tuple[tuple[str, str], ...] = ()  # (path, why) passed over before it
    replaces: tuple[str, ...] = ()  # Multus' configs in front, renamed away once it is written


@dataclass(frozen=True)
class Waiting:
    """No usable primary config yet; ``reason`` says what is missing."""

    reason: str


@dataclass(frozen=True)
class Refused:
    """The dir cannot be served as it is; ``reason`` says why and what to do."""

    reason: str


Decision = Generated | Waiting | Refused


def _has_type(conf: dict[str, Any] | None, types: Collection[str]) -> bool:
    """Whether a plugin of the conf (or conflist) is of one of ``types``."""
    plugins = conf.get("plugins") if conf and "plugins" in conf else [conf]
    return isinstance(plugins, list) and any(
        isinstance(p, dict) and p.get("type") in types for p in plugins)


def decide(files: Sequence[ConfFile], socket: str, replace_multus: bool = False) -> Decision:
    """What ``00-netctl.conflist`` should be, from the conf dir's files in load order
    (with ``replace_multus``, Multus' configs in front of it are to be renamed away)."""
    skipped: list[tuple[str, str]] = []
    replaces: list[str] = []
    for f in files:
        name = os.path.basename(f.path)
        if name == CONF_NAME:
            continue
        if name < CONF_NAME:
            if _has_type(f.conf, MULTUS_TYPES):
                if replace_multus:
                    replaces.append(f.path)
                    continue
                return Refused(f"{f.path} sorts before {CONF_NAME} and is Multus' config: "
                               "the runtime would go on using Multus; pass --replace-multus "
                               "to take its place in one rename (with Multus still running, "
                               "then delete its DaemonSet: docs/migrating.md), or uninstall "
                               "Multus first")
            return Refused(f"{f.path} sorts before {CONF_NAME}: the runtime uses the first "
                           f"config of the dir, so it would use {name} and never netctl; "
                           "remove or rename it (Multus' 00-multus.conf: uninstall Multus "
                           "first, or --replace-multus)")
        if f.conf is None:
            return Waiting(f"{f.path} {f.error}: waiting for it to be complete")
        if _has_type(f.conf, (PLUGIN_TYPE,)):
            skipped.append((f.path, "a netctl config (netctl cannot be its own cluster "
                                    "network)"))
            continue
        try:
            chain = parse_chain(f.conf, f.path)
        except CNIError as exc:
            why = exc.msg.removeprefix(f"{f.path}: ")
            return Refused(f"the primary CNI config {f.path}: {why}: netctl cannot run it "
                           "as its cluster network")
        caps = set().union(*(capabilities(p) for p in chain.plugins)) | {POD_ANNOTATIONS}
        entry = {"type": PLUGIN_TYPE, "socket": socket, "clusterNetwork": f.path,
                 "capabilities": {cap: True for cap in sorted(caps)}}
        conflist = {"cniVersion": chain.cni_version, "name": NETWORK_NAME,
                    "plugins": [entry]}
        return Generated(f.path, conflist, tuple(skipped), tuple(replaces))
    also = f" ({len(skipped)} netctl config(s) passed over)" if skipped else ""
    return Waiting(f"no primary CNI config yet{also}: waiting for the node's network "
                   "plugin to write one")


def render(conflist: dict[str, Any]) -> bytes:
    return (json.dumps(conflist, indent=2) + "\n").encode()


# --- the thin I/O -------------------------------------------------------------------


def conf_path(conf_dir: str) -> str:
    return os.path.join(conf_dir, CONF_NAME)


def tmp_name(pid: int) -> str:
    """The writer's temporary file: in the conf dir, under a name no runtime loads."""
    return f".{CONF_NAME}.{pid}.tmp"


def write_conf(conf_dir: str, data: bytes) -> bool:
    """Put ``data`` at ``00-netctl.conflist`` unless it is there already (no event for
    the runtime then); True when written."""
    target = conf_path(conf_dir)
    if holds(target, data):
        return False
    replace_file(target, data, 0o644, os.path.join(conf_dir, tmp_name(os.getpid())))
    _fsync_dir(conf_dir)
    return True


def _fsync_dir(conf_dir: str) -> None:
    dir_fd = os.open(conf_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def take_place(paths: Sequence[str]) -> list[tuple[str, str]]:
    """Rename Multus' configs (already behind netctl's, which is written) to hidden names
    no runtime loads: (from, to) of each."""
    moved = []
    for path in paths:
        directory, name = os.path.split(path)
        target = os.path.join(directory, f".{name}{REPLACED}")
        os.replace(path, target)
        _fsync_dir(directory)
        moved.append((path, target))
    return moved


def restore_replaced(conf_dir: str) -> list[str]:
    """Put back the configs :func:`take_place` renamed away (unless one of that name is
    there again); the paths restored. ``--uninstall`` runs it before it removes netctl's
    file, so a config stays in front."""
    try:
        names = sorted(os.listdir(conf_dir))
    except FileNotFoundError:
        return []
    restored = []
    for name in names:
        if name.startswith(".") and name.endswith(REPLACED):
            target = os.path.join(conf_dir, name[1:-len(REPLACED)])
            if not os.path.exists(target):
                os.replace(os.path.join(conf_dir, name), target)
                restored.append(target)
    if restored:
        _fsync_dir(conf_dir)
    return restored


def remove_conf(conf_dir: str) -> list[str]:
    """Remove ``00-netctl.conflist`` and temporary files a killed writer left; the
    paths removed."""
    try:
        names = sorted(os.listdir(conf_dir))
    except FileNotFoundError:
        return []
    return remove(conf_dir, [n for n in names if n == CONF_NAME or (
        n.startswith(f".{CONF_NAME}.") and n.endswith(".tmp"))])


class DirEvents:
    """Wake-ups for changes in one directory: an inotify watch, re-armed at every wait (so
    a dir created or replaced later is watched too); plain timeouts where inotify is not
    to be had."""

    _MASK = (inotify.IN_MODIFY | inotify.IN_CLOSE_WRITE | inotify.IN_MOVED_FROM
             | inotify.IN_MOVED_TO | inotify.IN_CREATE | inotify.IN_DELETE
             | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF)

    def __init__(self, directory: str) -> None:
        self.directory = directory
        try:
            self._fd = inotify.init()
        except OSError:
            self._fd = -1

    def wait(self, timeout: float) -> None:
        """Return after a change in the dir, or after ``timeout`` seconds."""
        try:
            watched = self._fd >= 0 and inotify.add_watch(
                self._fd, self.directory, self._MASK) is not None
        except OSError:
            watched = False
        if not watched:
            time.sleep(timeout)
            return
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if ready:
            time.sleep(0.05)  # let a burst of events (a write in pieces) arrive together
            try:
                while os.read(self._fd, 65536):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def run(conf_dir: str, socket: str, *, wait_timeout: float = 0, watch: bool = False,
        say: Callable[[str], None] = print, rescan: float = RESCAN_INTERVAL,
        replace_multus: bool = False) -> int:
    """Generate ``00-netctl.conflist`` once a primary config is there (waiting up to
    ``wait_timeout`` seconds, 0: for ever), and with ``watch`` keep it in step with the
    dir until the process is stopped. 0 when written (or up to date), 1 when refused
    or timed out (without ``watch``)."""
    conf_dir = os.path.abspath(conf_dir)  # clusterNetwork is the primary's absolute path
    os.makedirs(conf_dir, exist_ok=True)
    events = DirEvents(conf_dir)
    deadline = time.monotonic() + wait_timeout if wait_timeout > 0 else None
    said = ""
    try:
        while True:
            decision = decide(read_conf_dir(conf_dir), socket, replace_multus)
            if isinstance(decision, Generated):
                wrote = write_conf(conf_dir, render(decision.conflist))
                line = (f"{'wrote' if wrote else 'up to date:'} {conf_path(conf_dir)}: "
                        f"clusterNetwork {decision.primary}, cniVersion "
                        f"{decision.conflist['cniVersion']}")
                for path, why in decision.skipped:
                    line += f"\n  passed over {path}: {why}"
                for path, target in take_place(decision.replaces):
                    wrote = True
                    line += f"\n  took the place of Multus' {path} (renamed to {target})"
                if not watch:
                    say(line)
                    return 0
                if wrote:
                    say(line)
                    said = line
            elif isinstance(decision, Refused):
                line = f"refused: {decision.reason}"
                if not watch:
                    say(line)
                    return 1
                line += f" ({conf_path(conf_dir)} left as it is)"
            else:
                line = decision.reason
                if not watch and deadline is not None and time.monotonic() >= deadline:
                    say(f"gave up after {wait_timeout:g}s: {line}")
                    return 1
            if line != said:
                say(line)
                said = line
            timeout = rescan if deadline is None or watch else \
                max(0.0, min(rescan, deadline - time.monotonic()))
            events.wait(timeout)
    finally:
        events.close()
