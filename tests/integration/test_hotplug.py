"""We test these aspects: ``netctl attach`` plugs a network into a running container (the
interface appears in its netns with an address, journaled as an ADD of origin
``hotplug``), names it ``net1`` then ``net2`` when no interface is given, honours a
requested address, and answers a repeat with the live attachment; ``netctl detach`` by
interface and by network, and its refusals (ambiguous, unknown, the runtime's own
interface); an attach to an unknown container, or one whose netns is gone, is refused;
a failing delegate on attach is compensated (nothing left in the netns, no address
held), and so is an attach the runtime's DEL of the container cancels, and one cut short
by a daemon killed mid-way (the start-up replay undoes it, the runtime's interface kept);
the reconciler leaves hot-plugged attachments be; the runtime's DEL of the container
removes them too.

Subnets: 10.102.1-5.0/24.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from netctl_kit.harness import netctl_argv, netns_del, run

from netctl.journal import query
from tests.conftest import (
    Daemon,
    bridge_conf,
    bridge_ports,
    ipam_held,
    netns_addrs,
    netns_links,
    ptp_conf,
    step_states,
    wait_for,
)

pytestmark = pytest.mark.netns

SUBNETS = {"br": "10.102.1.0/24", "br2": "10.102.2.0/24", "pt": "10.102.3.0/24"}


def setup(daemon: Daemon, **settings: Any) -> list[str]:
    """Networks br, br2 (bridges), pt (ptp) and broken (a bridge, then the fail plugin);
    the daemon started (with ``settings``); the bridges."""
    bridges = [daemon.name("b1"), daemon.name("b2"), daemon.name("b3")]
    ipam = daemon.ipam_dir
    daemon.add_network("br", bridge_conf("br", bridges[0], SUBNETS["br"], ipam_dir=ipam))
    daemon.add_network("br2", bridge_conf("br2", bridges[1], SUBNETS["br2"], ipam_dir=ipam))
    daemon.add_network("pt", ptp_conf("pt", SUBNETS["pt"], ipam_dir=ipam))
    broken = bridge_conf("broken", bridges[2], "10.102.4.0/24", ipam_dir=ipam)
    broken["plugins"].append({"type": "fail"})
    daemon.add_network("broken", broken)
    daemon.settings.update(settings)
    daemon.start()
    return bridges


def netctl(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run(netctl_argv(*args, "--socket", daemon.socket))
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(),
                                       proc.stderr.decode())


def attach(daemon: Daemon, container: str, network: str, *extra: str) -> dict[str, Any]:
    proc = netctl(daemon, "attach", "--container", container, "--network", network,
                  *extra, "--json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def refused(daemon: Daemon, *args: str) -> str:
    """The message of a refused ``netctl attach|detach``, checked to exit 1 naming its code."""
    proc = netctl(daemon, *args)
    assert proc.returncode == 1, proc.stdout
    return proc.stderr


def hotplug_ops(daemon: Daemon, container: str) -> list[tuple[str, str]]:
    ops = daemon.journal("--container", container)["operations"]
    return sorted((o["verb"], o["state"]) for o in ops if o["origin"] == "hotplug")


def started(daemon: Daemon, netns: Callable[[], str], container: str) -> str:
    """A container ADDed on br by the runtime; its netns."""
    ns = netns()
    res = daemon.cni("ADD", container, ns, daemon.conf("br"), pod="default/web")
    assert res.rc == 0, res.describe()
    return ns


def test_attach_then_detach_and_the_runtime_del_removes_everything(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    bridges = setup(daemon)
    ns = started(daemon, netns, "hotplug-0001")

    one = attach(daemon, "hotplug-0001", "br2")  # the full id
    assert one["ifname"] == "net1" and one["existing"] is False
    assert one["network"] == "default/br2" and len(one["addresses"]) == 1
    assert netns_addrs(ns)["net1"] == one["addresses"]
    assert one["addresses"][0].startswith("10.102.2.")
    assert len(bridge_ports(bridges[1])) == 1
    assert hotplug_ops(daemon, "hotplug-0001") == [("ADD", "done")]

    # the same again: the live attachment, nothing run
    again = attach(daemon, "hotplug", "br2")  # a prefix, as podman's short ids
    assert again["existing"] is True and again["attachment"] == one["attachment"]
    assert hotplug_ops(daemon, "hotplug-0001") == [("ADD", "done")]

    two = attach(daemon, "hotplug", "pt")
    assert two["ifname"] == "net2" and two["addresses"][0].startswith("10.102.3.")
    three = attach(daemon, "hotplug", "br2", "--ifname", "data0", "--ip", "10.102.2.50/24")
    assert three["ifname"] == "data0" and three["addresses"] == ["10.102.2.50/24"]
    assert netns_addrs(ns)["data0"] == ["10.102.2.50/24"]
    # pt plugged already, with no address asked for: another one is refused
    msg = refused(daemon, "attach", "--container", "hotplug", "--network", "pt",
                  "--ip", "10.102.3.9/24")
    assert "already attached" in msg and "as net2 with other addresses" in msg, msg
    proc = netctl(daemon, "attach", "--container", "hotplug", "--network", "br")
    assert proc.returncode == 0 and "attached default/br as net3" in proc.stdout, proc.stderr
    assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net2", "data0", "net3"}
    # the runtime repeats its ADD: answered from the journal, the plugged ones left be
    first = daemon.cni("ADD", "hotplug-0001", ns, daemon.conf("br"), pod="default/web")
    assert first.rc == 0, first.describe()
    assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net2", "data0", "net3"}
    assert netns_addrs(ns)["data0"] == ["10.102.2.50/24"]

    # detach refusals: ambiguous, unknown, the runtime's interface; nothing changed
    msg = refused(daemon, "detach", "--container", "hotplug", "--network", "br2")
    assert "attached 2 times" in msg and "net1, data0" in msg and "(code 7)" in msg
    msg = refused(daemon, "detach", "--container", "hotplug", "--ifname", "net9")
    assert "no live attachment on interface net9" in msg
    msg = refused(daemon, "detach", "--container", "hotplug", "--ifname", "eth0")
    assert "cluster network" in msg and "runtime's DEL" in msg
    msg = refused(daemon, "detach", "--container", "hotplug", "--network", "nope")
    assert "no live attachment of network 'nope'" in msg
    assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net2", "data0", "net3"}

    proc = netctl(daemon, "detach", "--container", "hotplug", "--ifname", "data0")
    assert proc.returncode == 0, proc.stderr
    assert "detached default/br2 as data0" in proc.stdout and "10.102.2.50/24" in proc.stdout
    assert "data0" not in netns_links(ns)
    out = json.loads(netctl(daemon, "detach", "--container", "hotplug", "--network", "pt",
                            "--json").stdout)
    assert out["ifname"] == "net2" and out["addresses"] == two["addresses"]
    assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net3"}
    assert hotplug_ops(daemon, "hotplug-0001") == [("ADD", "done")] * 4 + [("DEL", "done")] * 2
    assert len(ipam_held(daemon.ipam_dir)) == 3  # eth0, net1, net3

    # a reconcile round leaves hot-plugged attachments be
    report = daemon.reconcile()
    assert report["plan"]["attachments"] == [] and report["plan"]["allocations"] == []
    assert set(netns_links(ns)) == {"lo", "eth0", "net1", "net3"}

    # the runtime's DEL of the container removes the hot-plugged ones too
    res = daemon.cni("DEL", "hotplug-0001", ns, daemon.conf("br"), pod="default/web")
    assert res.rc == 0, res.describe()
    assert netns_links(ns) == ["lo"]
    assert ipam_held(daemon.ipam_dir) == []
    for br in bridges:
        assert bridge_ports(br) == [], br
    states = {a["state"] for a in daemon.read(query.attachments, container="hotplug-0001")}
    assert states == {"removed"}


def test_attach_refusals(daemon: Daemon, netns: Callable[[], str]) -> None:
    setup(daemon, **{"reconcile-events": False})  # the deleted netns is not cleaned at once
    msg = refused(daemon, "attach", "--container", "nosuch", "--network", "br2")
    assert "no live attachment of a container whose id starts with 'nosuch'" in msg
    assert "(code 3)" in msg
    ns = started(daemon, netns, "gone-1")
    msg = refused(daemon, "attach", "--container", "gone-1", "--network", "missing")
    assert "network 'missing' not found" in msg and "(code 7)" in msg
    msg = refused(daemon, "attach", "--container", "gone-1", "--network", "br2",
                  "--ifname", "eth0")
    assert "interface eth0 already exists" in msg
    msg = refused(daemon, "attach", "--container", "gone-1", "--network", "br2",
                  "--ifname", "a/b")
    assert "--ifname 'a/b' is invalid" in msg
    netns_del(ns)  # the sandbox went, no DEL came yet
    msg = refused(daemon, "attach", "--container", "gone-1", "--network", "br2")
    assert "is gone" in msg and "(code 3)" in msg
    assert hotplug_ops(daemon, "gone-1") == []


def test_a_failing_delegate_on_attach_is_compensated(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    bridges = setup(daemon)
    ns = started(daemon, netns, "broken-1")
    msg = refused(daemon, "attach", "--container", "broken-1", "--network", "broken")
    assert "refused on purpose" in msg and "(code 7)" in msg
    assert set(netns_links(ns)) == {"lo", "eth0"}
    assert bridge_ports(bridges[2]) == []
    assert len(ipam_held(daemon.ipam_dir)) == 1  # eth0's alone
    assert hotplug_ops(daemon, "broken-1") == [("ADD", "compensated")]
    # the container is as it was: a plug that works still does, on net1
    assert attach(daemon, "broken-1", "br2")["ifname"] == "net1"
    assert daemon.cni("DEL", "broken-1", ns, daemon.conf("br")).rc == 0
    assert netns_links(ns) == ["lo"] and ipam_held(daemon.ipam_dir) == []


@contextlib.contextmanager
def hung_attach(daemon: Daemon, netns: Callable[[], str], container: str,
                **settings: Any) -> Iterator[tuple[str, list[str], str, subprocess.Popen[str]]]:
    """Networks as :func:`setup` has them and ``hung`` (a bridge, then the hang plugin); a
    container ADDed on br; ``netctl attach`` of hung under way, its bridge step done and its
    hang step running (net1 in the netns). Yields the netns, the bridges, hung's bridge and
    the attach's process (killed on the way out if still running)."""
    hung = daemon.name("b4")
    conf = bridge_conf("hung", hung, "10.102.5.0/24", ipam_dir=daemon.ipam_dir)
    conf["plugins"].append({"type": "hang"})
    daemon.add_network("hung", conf)
    bridges = setup(daemon, **{"plugin-timeout": 300, **settings})
    ns = started(daemon, netns, container)
    plug = subprocess.Popen(netctl_argv("attach", "--container", container, "--network",
                                        "hung", "--socket", daemon.socket),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: step_states(daemon, container) == {"bridge": "ok",
                                                            "hang": "running"},
                 20, "the attach's bridge step done and its hang step running")
        assert "net1" in netns_links(ns) and len(ipam_held(daemon.ipam_dir)) == 2
        yield ns, bridges, hung, plug
    finally:
        if plug.poll() is None:
            plug.kill()
            plug.wait()


def test_a_runtime_del_cancels_an_attach_in_flight(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    # cancel-grace: the cancelled hang sleeps through it and is killed after it (the
    # default, 5 s, is no part of what this test checks)
    with hung_attach(daemon, netns, "racing-1", **{"cancel-grace": 0.5}) as (
            ns, bridges, hung, plug):
        res = daemon.cni("DEL", "racing-1", ns, daemon.conf("br"), pod="default/web")
        assert res.rc == 0, res.describe()
        _, err = plug.communicate(timeout=60)
    assert plug.returncode == 1 and "cancelled by a DEL" in err and "(code 106)" in err, err
    assert hotplug_ops(daemon, "racing-1") == [("ADD", "compensated")]
    assert netns_links(ns) == ["lo"] and ipam_held(daemon.ipam_dir) == []
    for br in [*bridges, hung]:
        assert bridge_ports(br) == [], br
    assert daemon.delegates() == []


def test_a_daemon_killed_during_an_attach_undoes_it_at_start_up(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    with hung_attach(daemon, netns, "crashing-1") as (ns, bridges, hung, plug):
        daemon.kill()  # the hang delegate goes on: the next start kills it
        plug.communicate(timeout=30)
    assert plug.returncode != 0
    assert hotplug_ops(daemon, "crashing-1") == [("ADD", "running")]

    daemon.start()  # the start-up replay undoes the unfinished attach before it serves
    ops = daemon.journal("--container", "crashing-1")["operations"]
    assert [(o["verb"], o["origin"], o["ifname"], o["state"]) for o in ops] == [
        ("ADD", "runtime", "eth0", "done"), ("ADD", "hotplug", "net1", "compensated"),
        ("DEL", "replay", "", "done")], ops
    assert set(netns_links(ns)) == {"lo", "eth0"}  # the runtime's interface untouched
    assert bridge_ports(hung) == [] and len(bridge_ports(bridges[0])) == 1
    assert len(ipam_held(daemon.ipam_dir)) == 1  # eth0's alone
    assert daemon.delegates() == []
    # the container is served as before: the plug works now, and the runtime's DEL ends all
    assert attach(daemon, "crashing-1", "br2")["ifname"] == "net1"
    assert daemon.cni("DEL", "crashing-1", ns, daemon.conf("br")).rc == 0
    assert netns_links(ns) == ["lo"] and ipam_held(daemon.ipam_dir) == []
