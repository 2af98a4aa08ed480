"""The runtime's CNI config dir, as a runtime's libcni reads it.

libcni (``ConfFiles``) lists the dir's files ending in ``.conf``, ``.conflist`` or
``.json`` — hidden ones too, directories never — and the runtimes take them in byte
order of their names: containerd loads the first (``max_conf_num`` 1), CRI-O the first
valid one. :func:`read_conf_dir` gives them in that order, each decoded or with the
reason it is not a JSON object; :func:`capabilities` reads what a plugin entry declares.
``netctl doctor`` and ``netctl install-cni --auto-config`` both read the dir through here.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any

import msgspec

CONF_SUFFIXES = (".conf", ".conflist", ".json")  # what libcni reads from a conf dir
MAX_CONF_BYTES = 1 << 20  # a conf or network file larger than this is refused, never read


@dataclass(frozen=True)
class ConfFile:
    """One file of the runtime's conf dir: its JSON object, or why there is none."""

    path: str
    conf: dict[str, Any] | None
    error: str = ""


def loaded(name: str) -> bool:
    """Whether a runtime loads a file of this name from its conf dir."""
    return name.endswith(CONF_SUFFIXES)


def capabilities(plugin: dict[str, Any]) -> set[str]:
    """The capabilities a plugin entry declares (``true`` only)."""
    caps = plugin.get("capabilities")
    if not isinstance(caps, dict):
        return set()
    return {str(name) for name, on in caps.items() if on is True}


def read_conf_dir(directory: str) -> list[ConfFile]:
    """The dir's ``*.conf``, ``*.conflist`` and ``*.json`` files in name order (as libcni
    lists them; directories skipped), each decoded; FileNotFoundError when the dir is
    missing."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no CNI config dir at {directory}")
    out: list[ConfFile] = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not loaded(name) or os.path.isdir(path):
            continue
        out.append(read_conf_file(path))
    return out


def read_conf_file(path: str) -> ConfFile:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONF_BYTES:
            return ConfFile(path, None, f"not a regular file of at most {MAX_CONF_BYTES} bytes")
        with open(path, "rb") as fh:
            obj = msgspec.json.decode(fh.read(MAX_CONF_BYTES + 1))
    except OSError as exc:
        return ConfFile(path, None, f"cannot be read: {exc.strerror}")
    except msgspec.DecodeError as exc:
        return ConfFile(path, None, f"is not valid JSON: {exc}")
    if not isinstance(obj, dict):
        return ConfFile(path, None, "is not a JSON object")
    return ConfFile(path, obj)
