"""Delegates in the host's context (``host-root``, netctl/cni/hostroot.py), on a daemon run
on this machine with a fake host root (:class:`tests.fakehost.FakeHost`: the machine's
``/usr``, ``/proc``, ``/sys``, ``/dev`` and ``/run/netns``, and ``/etc``, ``/opt``,
``/var``, ``/run`` of its own). The containerized daemon is tested the same way in
test_daemonset.py. We check, with ``host-root`` set to the fake host:

- the delegates are the host's: found in the host's ``/opt/cni/bin`` (symlinks to
  ``/usr/lib/cni`` followed inside the host root), one of them existing nowhere else;
- they run chrooted into it: a delegate reads a file that exists only in the host root
  and writes one there; host-local's leases land in the host's ``/var/lib/cni``;
- ``clusterNetwork`` as a path and ``readinessindicatorfile`` are the host's files:
  STATUS says 50 naming the indicator until the host has it;
- DEL undoes both (the lease and the record go), and nothing is left;
- the same configuration without ``host-root`` fails: the host's plugin is not found;
- a ``host-root`` that is no directory stops the daemon with a message naming it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from netctl_kit import harness

from tests.conftest import NETCTL, Daemon, netns_addrs
from tests.fakehost import MARKER, PRIMARY, FakeHost, furnish

pytestmark = [pytest.mark.netns]

RECORD = "/var/lib/netctl-test/hostfile.log"
INDICATOR = "/run/netctl-test-primary/ready"
SUBNET = "10.187.0.0/24"


@pytest.fixture
def host(tmp_path: Path) -> Iterator[FakeHost]:
    with FakeHost(tmp_path / "host") as fake:
        yield fake


def test_delegates_run_in_the_host_root(daemon: Daemon, host: FakeHost,
                                        netns: Callable[[], str]) -> None:
    furnish(host, daemon.name("hb"), SUBNET)
    daemon.bin_dirs = ["/opt/cni/bin"]  # the host's
    daemon.settings["host-root"] = str(host.root)
    daemon.add_network("hosted", {"cniVersion": "1.0.0", "name": "hosted", "plugins": [{
        "type": "netctl-test-hostfile", "hostFile": MARKER, "record": RECORD}]})
    daemon.start()
    conf = daemon.conf(PRIMARY, readinessindicatorfile=INDICATOR)

    # the indicator is the host's: not ready until the host has it (the machine never does)
    status = daemon.cni("STATUS", "", None, conf)
    assert status.rc == 1 and status.out is not None and status.out["code"] == 50, \
        status.describe()
    assert INDICATOR in status.out["msg"] and str(host.path(INDICATOR)) in status.out["msg"]
    host.path(INDICATOR).parent.mkdir()
    host.path(INDICATOR).touch()
    assert daemon.cni("STATUS", "", None, conf).rc == 0

    ns = netns()
    add = daemon.cni("ADD", "hostroot-1", f"{harness.NETNS_DIR}/{ns}", conf, networks="hosted")
    assert add.rc == 0, add.describe() + daemon.log()[-2000:]
    address = netns_addrs(ns)["eth0"][0].split("/")[0]
    assert address.startswith("10.187.0.")

    # what the delegates wrote is the host's: host-local's lease, the hostfile record
    leases = host.path("/var/lib/cni/networks/primary")
    assert (leases / address).read_text().startswith("hostroot-1")
    assert not Path("/var/lib/cni/networks/primary", address).exists()
    assert host.path(RECORD).read_text() == "the node's own file hostroot-1\n"
    assert not Path(RECORD).exists() and not Path(MARKER).exists()

    delete = daemon.cni("DEL", "hostroot-1", f"{harness.NETNS_DIR}/{ns}", conf,
                        networks="hosted")
    assert delete.rc == 0, delete.describe()
    assert not (leases / address).exists() and not host.path(RECORD).exists()
    assert harness.live_allocations(daemon.state_dir) == []
    assert daemon.live_attachments_of(["hostroot-1"]) == 0


def test_without_host_root_the_host_plugin_is_not_found(
        daemon: Daemon, host: FakeHost, netns: Callable[[], str]) -> None:
    # run as is, host-local would write this machine's /var/lib/cni: the fake host's
    furnish(host, daemon.name("hb"), SUBNET, data_dir=str(host.path("/var/lib/cni/networks")))
    daemon.bin_dirs = [str(host.path("/opt/cni/bin"))]  # found, but run as is
    daemon.add_network("hosted", {"cniVersion": "1.0.0", "name": "hosted", "plugins": [{
        "type": "netctl-test-hostfile", "hostFile": MARKER, "record": RECORD}]})
    daemon.start()
    primary = str(host.path(PRIMARY))  # as is, the path must be the daemon's
    ns = netns()
    add = daemon.cni("ADD", "hostroot-2", f"{harness.NETNS_DIR}/{ns}",
                     daemon.conf(primary, version="1.0.0"), networks="hosted")
    # the delegate runs in the daemon's root: the host's marker is not there
    assert add.rc == 1 and add.out is not None, add.describe()
    assert f"no file {MARKER} here" in add.out["msg"], add.out
    assert not Path(RECORD).exists()
    assert harness.live_allocations(daemon.state_dir) == []


def test_a_host_root_that_is_no_directory_stops_the_daemon(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-root"
    proc = subprocess.run([NETCTL, "daemon", "--state-dir", str(tmp_path / "state"),
                           "--socket", str(tmp_path / "s.sock"), "--host-root", str(missing)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"host-root {missing}: not a directory" in proc.stderr, proc.stderr


def test_a_netns_dir_that_does_not_propagate_is_reported_at_start(
        daemon: Daemon, host: FakeHost) -> None:
    """The host's netns dir reaches the daemon through a private mount (a host whose ``/``
    is private, as where PID 1 is not systemd): netns the runtime mounts later would never
    appear. The daemon says so at start — logged as an error, and degraded in ``netctl
    status`` with the fix — where the fake host's slave mount (the other tests) says
    nothing."""
    netns_dir = host.path("/run/netns")
    subprocess.run(["mount", "--make-private", str(netns_dir)], check=True, timeout=30)
    daemon.settings["host-root"] = str(host.root)
    daemon.start()
    status = daemon.status()
    assert status["ready"] and status["degraded"], status
    (reason,) = [r for r in status["degraded_reasons"] if "private mount" in r]
    assert reason.startswith(f"{netns_dir} is on a private mount ({netns_dir})"), reason
    assert "mount --make-rshared /" in reason
    assert "mount propagation" in daemon.log()
    assert subprocess.run([NETCTL, "status", "--socket", daemon.socket],
                          capture_output=True, timeout=60).returncode == 3  # degraded


def test_a_propagating_netns_dir_is_not_reported(daemon: Daemon, host: FakeHost) -> None:
    daemon.settings["host-root"] = str(host.root)
    daemon.start()
    status = daemon.status()
    assert not status["degraded"], status["degraded_reasons"]
    assert "mount propagation" not in daemon.log()
