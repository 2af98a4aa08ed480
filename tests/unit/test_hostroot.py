"""Paths in the host's root (netctl/cni/hostroot.py): symlinks are followed inside it, as a
chrooted exec follows them, never out of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from netctl.cni.hostroot import HostRoot, host_path, resolve
from netctl.errors import CNIError


def test_host_path_without_and_with_a_root() -> None:
    assert host_path("", "/opt/cni/bin/bridge") == "/opt/cni/bin/bridge"
    assert host_path("/host", "/opt/cni/bin/bridge") == "/host/opt/cni/bin/bridge"
    assert host_path("/host", "/../etc/x") == "/host/etc/x"  # never above the root
    assert host_path("/host", "run/flannel") == "/host/run/flannel"


def test_links_are_followed_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "usr/lib/cni").mkdir(parents=True)
    (root / "usr/lib/cni/bridge").write_text("")
    (root / "opt/cni").mkdir(parents=True)
    # an absolute link is the host's: /usr/lib/cni inside the root, not this machine's
    (root / "opt/cni/bin").symlink_to("/usr/lib/cni")
    assert resolve(str(root), "/opt/cni/bin/bridge") == str(root / "usr/lib/cni/bridge")
    # relative links, and .. that would climb above the root
    (root / "lib").symlink_to("usr/lib")
    (root / "up").symlink_to("../../../../../usr")
    assert resolve(str(root), "/lib/cni/bridge") == str(root / "usr/lib/cni/bridge")
    assert resolve(str(root), "/up/lib/cni/bridge") == str(root / "usr/lib/cni/bridge")
    # a missing path stays as it is (stat tells), a loop does not hang
    assert resolve(str(root), "/opt/cni/bin/nope") == str(root / "usr/lib/cni/nope")
    (root / "a").symlink_to("/b")
    (root / "b").symlink_to("/a")
    assert not os.path.exists(resolve(str(root), "/a/x"))
    assert resolve("", "/opt/cni/bin/bridge") == "/opt/cni/bin/bridge"


def test_host_root_checks_and_argv(tmp_path: Path) -> None:
    assert HostRoot.at("").argv("/opt/cni/bin/bridge") == ["/opt/cni/bin/bridge"]
    with pytest.raises(CNIError, match="not a directory"):
        HostRoot.at(str(tmp_path / "missing"))
    with pytest.raises(CNIError, match="has no /proc/self"):
        HostRoot.at(str(tmp_path))
    root = HostRoot.at("/")  # this machine's root has a /proc
    assert root.argv("/usr/lib/cni/bridge")[1:] == ["/", "/usr/lib/cni/bridge"]
    assert os.path.basename(root.argv("/x")[0]) == "chroot"
    assert root.describe("/run/x") == "/run/x (read at /run/x)"
