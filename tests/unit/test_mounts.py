"""We test :mod:`netctl.cni.mounts`: which mount holds a directory, and whether it
propagates the host's new mounts (shared or slave) or not (private)."""

from __future__ import annotations

from netctl.cni import mounts

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 0:25 / /run rw,nosuid master:7 - tmpfs tmpfs rw
31 30 0:4 / /run/netns rw shared:9 master:3 - tmpfs tmpfs rw
40 22 8:1 /srv /host rw,relatime - ext4 /dev/vda rw
41 40 0:4 / /host/run/my\\040netns rw master:3 - tmpfs tmpfs rw
42 22 8:1 /var /host/var rw - ext4 /dev/vda rw
43 42 8:1 /var /host/var rw master:4 - ext4 /dev/vda rw
"""


def test_the_mount_holding_a_directory_and_its_propagation() -> None:
    table = mounts.parse(MOUNTINFO)
    assert [(m.point, m.propagation) for m in table][:3] == [
        ("/", "private"), ("/run", "slave"), ("/run/netns", "shared and slave")]
    assert mounts.holding("/run/netns", table).point == "/run/netns"  # type: ignore[union-attr]
    assert mounts.holding("/run/netnsx", table).point == "/run"  # type: ignore[union-attr]
    assert mounts.holding("/host/run/my netns/a", table).propagation == "slave"  # type: ignore[union-attr]
    # two mounts on one point: the later is on top
    assert mounts.holding("/host/var/run", table).propagation == "slave"  # type: ignore[union-attr]


def test_only_private_mounts_are_problems() -> None:
    table = mounts.parse(MOUNTINFO)
    assert mounts.problems(["/run/netns", "/host/run/my netns", "/host/var/run"], table) == []
    (problem,) = mounts.problems(["/host/run/netns"], table)
    assert problem.startswith("/host/run/netns is on a private mount (/host)")
    assert "mount --make-rshared /" in problem
