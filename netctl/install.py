"""``netctl install-cni``: put the thin plugin into a CNI bin dir.

The plugin is written as a self-contained script run with ``python -I -S``
(isolated, no site-packages scan): it imports only the standard library, so it
starts in a few milliseconds on every pod's critical path.
"""

from __future__ import annotations

import os
import sys
from importlib import resources

PLUGIN_NAMES = ("netctl-cni", "netctl-ipam")  # one script; it knows its name


def plugin_source() -> str:
    return resources.files("netctl_plugin").joinpath("netctl_cni.py").read_text()


def install(bin_dir: str, python: str | None = None) -> list[str]:
    interpreter = python or os.path.realpath(sys.executable)
    body = plugin_source().split("\n", 1)[1]  # drop the development shebang
    script = f"#!{interpreter} -IS\n{body}"  # one shebang argument: -I and -S
    os.makedirs(bin_dir, exist_ok=True)
    written = []
    for name in PLUGIN_NAMES:
        target = os.path.join(bin_dir, name)
        tmp = f"{target}.tmp.{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(script)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: a runtime never execs a half-written file
        written.append(target)
    return written
