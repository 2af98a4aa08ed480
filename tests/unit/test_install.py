"""We test ``netctl install-cni`` putting the plugin binary into a bin dir, the real command:

- it installs the static binary as ``netctl-cni`` and ``netctl-ipam``, both executable,
  each the built file byte for byte, each answering VERSION; a second run rewrites
  nothing (a restarted init container);
- it never leaves a plugin that cannot run: a missing binary, a file that does not run
  here (a script whose interpreter is not there, garbage) is an error naming the file
  and ``make plugin``, and the bin dir is left untouched;
- ``--python`` (the interpreter of the old Python plugin) is an error that says why;
- ``--uninstall`` removes both.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import NETCTL, PLUGIN_BINARY


def install_cni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NETCTL, "install-cni", *args], capture_output=True, text=True,
                          timeout=60)


def test_installs_the_binary_under_both_names(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    proc = install_cni("--bin-dir", str(bin_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == [f"installed {bin_dir}/netctl-cni",
                                           f"installed {bin_dir}/netctl-ipam"]
    built = PLUGIN_BINARY.read_bytes()
    inodes = []
    for name in ("netctl-cni", "netctl-ipam"):
        path = bin_dir / name
        assert path.read_bytes() == built and os.access(path, os.X_OK)
        inodes.append(path.stat().st_ino)
        out = subprocess.run([str(path)], input=b'{"cniVersion": "0.4.0"}', env={
            "CNI_COMMAND": "VERSION"}, capture_output=True, timeout=10)
        assert json.loads(out.stdout)["cniVersion"] == "0.4.0", out
    assert sorted(os.listdir(bin_dir)) == ["netctl-cni", "netctl-ipam"]  # no leftovers
    assert install_cni("--bin-dir", str(bin_dir)).returncode == 0
    assert [(bin_dir / n).stat().st_ino for n in ("netctl-cni", "netctl-ipam")] == inodes
    proc = install_cni("--bin-dir", str(bin_dir), "--uninstall")
    assert proc.returncode == 0 and os.listdir(bin_dir) == [], proc


@pytest.mark.parametrize("content", [
    None,  # missing
    b"#!/nonexistent/python3 -IS\nprint('hi')\n",  # its interpreter is not on this host
    b"\x7fELF\x02\x01\x01garbage",  # not an executable this kernel runs
    b"#!/bin/sh\necho not-json\n",  # runs, but does not answer VERSION
])
def test_never_leaves_a_plugin_that_cannot_run(tmp_path: Path, content: bytes | None) -> None:
    binary = tmp_path / "netctl-cni"
    if content is not None:
        binary.write_bytes(content)
        binary.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    proc = install_cni("--bin-dir", str(bin_dir), "--plugin-binary", str(binary))
    assert proc.returncode == 1, proc
    assert str(binary) in proc.stderr and "make plugin" in proc.stderr, proc.stderr
    assert f"nothing installed in {bin_dir}" in proc.stderr, proc.stderr
    assert os.listdir(bin_dir) == []


def test_python_is_refused_saying_why(tmp_path: Path) -> None:
    """``--python=/nonexistent/python3`` used to exit 0 and leave a script that could
    not run."""
    proc = install_cni("--bin-dir", str(tmp_path), "--python=/nonexistent/python3")
    assert proc.returncode == 2, proc
    assert "--python is gone" in proc.stderr and "static executable" in proc.stderr
    assert os.listdir(tmp_path) == []
