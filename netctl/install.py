"""``netctl install-cni``: put the thin plugin into a CNI bin dir.

The plugin is written as a self-contained script run with ``python -I -S``
(isolated, no site-packages scan): it imports only the standard library, so it
starts in a few milliseconds on every pod's critical path. It needs no package
of the venv, so by default it runs on the system's ``/usr/bin/python3`` when that
is 3.9 or newer: distributions build it with PGO/LTO, and it starts faster than
a self-built interpreter (7.6 against 9.0 ms for ``-IS -c pass`` on the test
machine). ``--python`` chooses another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from importlib import resources

PLUGIN_NAMES = ("netctl-cni", "netctl-ipam")  # one script; it knows its name
SYSTEM_PYTHON = "/usr/bin/python3"


def plugin_source() -> str:
    return resources.files("netctl_plugin").joinpath("netctl_cni.py").read_text()


def default_interpreter() -> str:
    """The system Python when it can run the plugin, else the one running netctl."""
    try:
        ok = subprocess.run([SYSTEM_PYTHON, "-IS", "-c",
                             "import sys, _json, _socket; sys.exit(sys.version_info < (3, 9))"],
                            capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return os.path.realpath(SYSTEM_PYTHON) if ok else os.path.realpath(sys.executable)


def install(bin_dir: str, python: str | None = None) -> list[str]:
    interpreter = python or default_interpreter()
    body = plugin_source().split("\n", 1)[1]  # drop the development shebang
    script = f"#!{interpreter} -IS\n{body}"  # one shebang argument: -I and -S
    os.makedirs(bin_dir, exist_ok=True)
    written = []
    for name in PLUGIN_NAMES:
        target = os.path.join(bin_dir, name)
        if _same(target, script):
            written.append(target)  # a restarted init container rewrites nothing
            continue
        tmp = f"{target}.tmp.{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(script)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: a runtime never execs a half-written file
        written.append(target)
    return written


def _same(path: str, script: str) -> bool:
    try:
        with open(path) as fh:
            return fh.read(len(script) + 1) == script and os.access(path, os.X_OK)
    except (OSError, UnicodeDecodeError):
        return False


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
