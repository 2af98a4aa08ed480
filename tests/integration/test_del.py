"""We test these aspects: DEL is idempotent (three DELs in a row), a DEL of a container
never seen succeeds, a DEL after the netns is gone succeeds and releases what the pod held,
a DEL without CNI_NETNS removes the pod's interfaces from where the journal says they are,
and a DEL works from the journal alone when its stdin is not a usable config — neither a
valid netctl conf nor JSON at all (then the thin plugin falls back to the default socket,
which a private mount namespace points at this test's daemon).

Subnets: 10.103.1-2.0/24.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.journal import query
from tests.conftest import (
    CNIResult,
    Daemon,
    bridge_conf,
    bridge_ports,
    host_links,
    host_veths,
    ip,
    ipam_held,
    journal_results,
    netns_links,
    ptp_conf,
    wait_for,
)

pytestmark = pytest.mark.netns


def setup(daemon: Daemon) -> str:
    """NADs br (bridge, cluster) and pt (ptp); starts the daemon; returns the bridge."""
    br = daemon.name("b0")
    daemon.add_network("br", bridge_conf("br", br, "10.103.1.0/24", ipam_dir=daemon.ipam_dir))
    daemon.add_network("pt", ptp_conf("pt", "10.103.2.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    return br


def add_pod(daemon: Daemon, container: str, ns: str) -> list[str]:
    """ADD a pod on br + pt; returns its host-side veths (which exist now)."""
    res = daemon.cni("ADD", container, ns, daemon.conf("br"), networks="pt", pod="default/x")
    assert res.rc == 0, res.stdout + res.stderr
    assert set(netns_links(ns)) == {"lo", "eth0", "net1"}
    veths = host_veths(journal_results(daemon, container))
    assert len(veths) == 2 and set(veths) <= set(host_links("veth"))
    assert len(ipam_held(daemon.ipam_dir)) == 2
    return veths


def del_ops(daemon: Daemon, container: str) -> list[tuple[Any, ...]]:
    """(state, code, number of DEL steps, of which ok) of each DEL operation, in order."""
    out: list[tuple[Any, ...]] = []
    with daemon.read_only() as conn:
        for op in journaldb.operation_rows(conn, verb="DEL", container=container):
            steps = [s["state"] for s in journaldb.step_rows(conn, operation=op["id"])]
            out.append((op["state"], op["code"], len(steps), steps.count("ok")))
    return out


def assert_released(daemon: Daemon, container: str, br: str, veths: list[str]) -> None:
    assert bridge_ports(br) == []
    assert not set(veths) & set(host_links("veth"))
    assert ipam_held(daemon.ipam_dir) == []
    states = sorted((a["ifname"], a["state"])
                    for a in daemon.read(query.attachments, container=container))
    assert states == [("eth0", "removed"), ("net1", "removed")]


def test_del_three_times(daemon: Daemon, netns) -> None:
    br = setup(daemon)
    ns = netns()
    veths = add_pod(daemon, "thrice", ns)
    for _ in range(3):
        res = daemon.cni("DEL", "thrice", ns, daemon.conf("br"))
        assert res.rc == 0, res.stdout + res.stderr
        assert res.stdout.strip() == ""
        assert netns_links(ns) == ["lo"]
        assert_released(daemon, "thrice", br, veths)
    # Only the first DEL had anything to run; the others found nothing left.
    assert del_ops(daemon, "thrice") == [("done", None, 2, 2), ("done", None, 0, 0),
                                         ("done", None, 0, 0)]


def test_del_unknown_container(daemon: Daemon, netns) -> None:
    setup(daemon)
    ns = netns()
    conf = daemon.conf("br")
    res = daemon.cni("DEL", "never-seen", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert res.stdout.strip() == ""
    # Without CNI_NETNS, and for a caller network that names no known network at all.
    res = daemon.cni("DEL", "never-seen-2", None, daemon.conf("no-such-network"))
    assert res.rc == 0, res.stdout + res.stderr
    assert "unknown to netctl" in res.stderr, res.stderr  # nothing could run: warned
    # a container netctl never saw may be a pod from before the switch: the cluster
    # network's DEL runs for it once (a no-op here, as the spec makes it), journaled
    # with its one attachment, removed; when the network cannot be found, a DEL of
    # nothing is journaled
    assert del_ops(daemon, "never-seen") == [("done", None, 1, 1)]
    assert del_ops(daemon, "never-seen-2") == [("done", None, 0, 0)]
    assert [a["state"] for a in daemon.read(query.attachments)] == ["removed"]
    assert netns_links(ns) == ["lo"]
    # the runtime's second DEL finds it known: nothing runs again
    assert daemon.cni("DEL", "never-seen", ns, conf).rc == 0
    assert del_ops(daemon, "never-seen")[1:] == [("done", None, 0, 0)]


def test_del_after_netns_is_gone(daemon: Daemon, netns) -> None:
    daemon.settings["reconcile-events"] = False  # the runtime's DEL, not the events, cleans
    br = setup(daemon)
    ns = netns()
    veths = add_pod(daemon, "nsgone", ns)
    ip("netns", "del", ns)
    assert not os.path.exists(f"/var/run/netns/{ns}")
    res = daemon.cni("DEL", "nsgone", ns, daemon.conf("br"))
    assert res.rc == 0, res.stdout + res.stderr
    # The kernel takes the veths down with the namespace, in its own time.
    wait_for(lambda: not set(veths) & set(host_links("veth")), what="host veths to go")
    wait_for(lambda: bridge_ports(br) == [], what="the bridge port to go")
    assert_released(daemon, "nsgone", br, veths)
    assert del_ops(daemon, "nsgone") == [("done", None, 2, 2)]
    atts = daemon.journal("--container", "nsgone")["attachments"]
    assert {a["state"] for a in atts} == {"removed"} and len(atts) == 2


def test_del_without_netns_uses_the_journal(daemon: Daemon, netns) -> None:
    """A runtime may send DEL with no CNI_NETNS; the journal knows where the pod was."""
    br = setup(daemon)
    ns = netns()
    veths = add_pod(daemon, "nonetns", ns)
    res = daemon.cni("DEL", "nonetns", None, daemon.conf("br"))
    assert res.rc == 0, res.stdout + res.stderr
    assert netns_links(ns) == ["lo"]
    assert_released(daemon, "nonetns", br, veths)
    assert del_ops(daemon, "nonetns") == [("done", None, 2, 2)]


def test_del_with_invalid_conf(daemon: Daemon, netns) -> None:
    """Valid JSON that names the socket but is no netctl conf (no version, no name)."""
    br = setup(daemon)
    ns = netns()
    veths = add_pod(daemon, "badconf", ns)
    conf = {"socket": daemon.socket, "name": 42, "cniVersion": ["x"], "clusterNetwork": {}}
    res = daemon.cni("DEL", "badconf", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert netns_links(ns) == ["lo"]
    assert_released(daemon, "badconf", br, veths)
    assert del_ops(daemon, "badconf") == [("done", None, 2, 2)]


def cni_at_default_socket(daemon: Daemon, command: str, container: str, ns: str,
                          stdin: bytes) -> CNIResult:
    """Exec the plugin in a private mount namespace whose /run/netctl is the daemon's run
    dir, so the default socket (all a plugin has when stdin is unreadable) is this daemon."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": command,
           "CNI_CONTAINERID": container, "CNI_IFNAME": "eth0", "CNI_ARGS": "",
           "CNI_PATH": "/nonexistent-client-path", "CNI_NETNS": f"/var/run/netns/{ns}"}
    script = ('mount -t tmpfs netctl-test /run && mkdir /run/netctl && '
              'mount --bind "$1" /run/netctl && exec "$2"')
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh",
                           os.path.dirname(daemon.socket), daemon.plugin],
                          input=stdin, env=env, capture_output=True, timeout=60)
    stdout = proc.stdout.decode()
    out = json.loads(stdout) if stdout.strip().startswith("{") else None
    return CNIResult(proc.returncode, out, stdout, proc.stderr.decode())


@pytest.mark.parametrize("stdin", [b'{"cniVersion": "1.0.0", "name": "netctl", "type"',
                                   b"", b"\xff\xfe\x00 not json at all", b"[1, 2, 3]"],
                         ids=["truncated", "empty", "binary", "array"])
def test_del_with_malformed_stdin(daemon: Daemon, netns, stdin: bytes) -> None:
    br = setup(daemon)
    ns = netns()
    veths = add_pod(daemon, "malformed", ns)
    res = cni_at_default_socket(daemon, "DEL", "malformed", ns, stdin)
    assert res.rc == 0, res.stdout + res.stderr
    assert res.stdout.strip() == ""
    assert "warning" not in res.stderr  # it reached the daemon; nothing was left for later
    assert netns_links(ns) == ["lo"]
    assert_released(daemon, "malformed", br, veths)
    assert del_ops(daemon, "malformed") == [("done", None, 2, 2)]
