"""We test these aspects of the reconcile on kernel events, with the periodic round off
(``reconcile-interval: 0``), on real netns, plugins and a real daemon:

- a sandbox whose netns is deleted without a DEL is released on its own: a bridge
  attachment (its host veth dies with the netns) and a macvlan-only one (no host-side
  link: the netns dir tells), each DEL'd through its chain from the journal, its
  address released, journaled as a RECONCILE and a DEL of origin ``event``; the pod
  beside it is untouched;
- 200 sandboxes deleted at once are all released, in far fewer runs than sandboxes,
  while the runtime's ADDs and DELs keep being served in the middle of it;
- a sandbox deleted while a request for its container is in flight is not touched
  until that request is over, then released without being asked;
- the events of a pod a runtime's DEL is removing (its veth, then its netns) are left to
  that DEL: no run, nothing looked at again;
- an address a plain IPAM plugin holds for a netns deleted while the address is younger
  than ``reconcile-grace`` is released once the grace ends, by the events' own look
  again (no periodic round runs here);
- ``reconcile-events: false`` leaves such a leak to the periodic round or to
  ``netctl reconcile`` (the other test modules that need a leak to persist say so);
- the watcher's netlink socket gets only what it reads: a pod's host veth deleted and
  its nsid, not the link's creation, its changes, nor its leaving the bridge.

Subnets: 10.187.0-4.0/24.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import harness, journaldb
from netctl_kit.harness import SYSTEM_CNI
from pyroute2.netlink.rtnl import RTM_DELLINK, RTM_DELNSID

from netctl.reconcile.events import AF_BRIDGE, netlink_hints
from netctl.reconcile.watch import open_netlink
from tests.conftest import (
    Daemon,
    attachment_states,
    bridge_ports,
    exec_direct,
    ip,
    live,
    step_states,
    wait_for,
)

pytestmark = pytest.mark.netns

RELEASED_WITHIN = 20.0  # the tests wait for the condition; this only bounds a failure


def ipam_net(name: str, plugin: dict[str, Any], subnet: str) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "plugins": [
        {**plugin, "ipam": {"type": "netctl-ipam", "range": subnet}}]}


def held(daemon: Daemon) -> list[str]:
    """Containers holding a live allocation."""
    return [container for container, _, _ in live(daemon)]


def event_ops(daemon: Daemon) -> list[tuple[str, str, str]]:
    return [(o["verb"], o["container_id"], o["state"])
            for o in daemon.read(journaldb.operation_rows, origin="event")]


def events_status(daemon: Daemon) -> dict[str, Any]:
    status: dict[str, Any] = daemon.status()["events"]
    return status


def assert_vanished_pod_released(daemon: Daemon, netns: Callable[[], str], cluster: str
                                 ) -> None:
    keep, gone = netns(), netns()
    conf = daemon.conf(cluster)
    for container, ns in (("ev-keep", keep), ("ev-gone", gone)):
        res = daemon.cni("ADD", container, ns, conf)
        assert res.rc == 0, res.stdout + res.stderr
    ip("netns", "del", gone)  # no DEL: the runtime crashed

    wait_for(lambda: held(daemon) == ["ev-keep"], RELEASED_WITHIN,
             "the vanished pod's address to be released on events")
    wait_for(lambda: attachment_states(daemon) == {"ev-keep": "attached", "ev-gone": "removed"},
             RELEASED_WITHIN, "the vanished pod's attachment removed")
    wait_for(lambda: event_ops(daemon) == [("RECONCILE", "", "done"), ("DEL", "ev-gone", "done")],
             what="the run on events to be journaled as done")
    assert daemon.read(journaldb.operation_rows, origin="reconcile") == []
    assert daemon.cni("DEL", "ev-keep", keep, conf).rc == 0
    assert held(daemon) == []


def test_a_vanished_bridge_sandbox_is_released_on_events(daemon: Daemon, netns) -> None:
    br = daemon.name("e0")
    daemon.add_network("evbr", ipam_net("evbr", {"type": "bridge", "bridge": br},
                                        "10.187.0.0/24"))
    daemon.start()
    sources = events_status(daemon)["sources"]
    assert "netlink" in sources and "inotify:/run/netns" in sources

    assert_vanished_pod_released(daemon, netns, "evbr")
    wait_for(lambda: bridge_ports(br) == [], what="the kernel to remove the host veth")
    counts = events_status(daemon)
    assert counts["attachments_reconciled"] == 1 and counts["batches"] >= 1


def test_a_vanished_macvlan_only_sandbox_is_released_on_events(
        daemon: Daemon, netns, veth_parent: str) -> None:
    """No host-side link: the deletion in /run/netns is what tells."""
    daemon.add_network("evmv", ipam_net("evmv", {"type": "macvlan", "master": veth_parent,
                                                 "mode": "bridge"}, "10.187.1.0/24"))
    daemon.start()
    assert_vanished_pod_released(daemon, netns, "evmv")


def test_a_young_plain_allocation_is_released_on_events_once_the_grace_ends(
        daemon: Daemon, netns) -> None:
    """The grace keeps the reconciler off an address for its first seconds; a netns
    deleted within them is looked at again when they end, not left to a periodic round
    (off here) — as after ``netctl journal rebuild``, whose recovered addresses are
    young."""
    daemon.settings["reconcile-grace"] = 3
    br = daemon.name("e4")
    daemon.start()
    keep, gone = netns(), netns()
    conf = {"cniVersion": "1.0.0", "name": "evplain", "type": "bridge", "bridge": br,
            "ipam": {"type": "netctl-ipam", "socket": daemon.socket,
                     "range": "10.187.4.0/24"}}
    for container, ns in (("ev-plain-keep", keep), ("ev-plain-gone", gone)):
        res = exec_direct(daemon, f"{SYSTEM_CNI}/bridge", "ADD", conf, container=container,
                          ns=ns)
        assert res.rc == 0, res.stdout + res.stderr
    ip("netns", "del", gone)  # no DEL, while the address is younger than the grace
    wait_for(lambda: held(daemon) == ["ev-plain-keep"], RELEASED_WITHIN,
             "the vanished sandbox's address to be released once the grace ended")
    (released,) = daemon.read(journaldb.allocation_rows, container="ev-plain-gone")
    (by,) = daemon.read(journaldb.operation_rows, op_id=released["released_op"])
    assert (by["verb"], by["origin"], by["state"]) == ("RELEASE", "event", "done")
    # the start's round found nothing to do: no periodic round released it
    assert daemon.read(journaldb.operation_rows, origin="reconcile") == []
    assert exec_direct(daemon, f"{SYSTEM_CNI}/bridge", "DEL", conf, container="ev-plain-keep",
                       ns=keep).rc == 0
    assert held(daemon) == []


def test_no_events_when_switched_off(daemon: Daemon, netns) -> None:
    daemon.settings["reconcile-events"] = False
    daemon.add_network("evoff", ipam_net("evoff", {"type": "bridge", "bridge": daemon.name("e3")},
                                         "10.187.3.0/24"))
    daemon.start()
    assert daemon.status()["events"] is None
    gone = netns()
    assert daemon.cni("ADD", "ev-off", gone, daemon.conf("evoff")).rc == 0
    ip("netns", "del", gone)
    # the leak stays until asked: `netctl reconcile` finds and cleans it
    plan = daemon.reconcile(dry_run=True)["plan"]
    assert [a["container"] for a in plan["attachments"]] == ["ev-off"]
    assert held(daemon) == ["ev-off"] and event_ops(daemon) == []
    assert daemon.reconcile()["errors"] == []
    assert held(daemon) == []


def test_an_event_for_a_container_in_flight_waits_for_its_request(
        daemon: Daemon, netns, tmp_path: Path) -> None:
    """The pod's ADD is held open by a delegate (``gate``) while its netns is deleted."""
    gate = tmp_path / "gate-open"
    daemon.add_network("evbr", ipam_net("evbr", {"type": "bridge", "bridge": daemon.name("e2")},
                                        "10.187.2.0/24"))
    daemon.add_network("held", {"cniVersion": "1.0.0", "name": "held",
                                "plugins": [{"type": "gate", "gate": str(gate)}]})
    daemon.settings["plugin-timeout"] = 60
    daemon.start()
    ns = netns()
    with ThreadPoolExecutor(1) as pool:
        add = pool.submit(daemon.cni, "ADD", "ev-busy", ns, daemon.conf("evbr"),
                          networks="held")
        try:
            wait_for(lambda: step_states(daemon, "ev-busy") == {"bridge": "ok",
                                                                "gate": "running"},
                     20, "the bridge half of the ADD done, the gate's running")
            ip("netns", "del", ns)
            wait_for(lambda: events_status(daemon)["deferred"] >= 1, RELEASED_WITHIN,
                     "the event to be looked at, and left alone")
            # untouched: the ADD still runs, its attachments are its own, nothing DEL'd
            assert not add.done()
            assert set(attachment_states(daemon).values()) == {"adding"}
            assert held(daemon) == ["ev-busy"] and event_ops(daemon) == []
        finally:
            gate.touch()
        res = add.result(timeout=60)
    assert res.rc == 0, res.stdout + res.stderr  # the delegate finished: the ADD succeeded
    # ... of a sandbox that is gone: released right after, without being asked
    wait_for(lambda: held(daemon) == [], RELEASED_WITHIN, "the release once the ADD is over")
    wait_for(lambda: set(attachment_states(daemon).values()) == {"removed"}, RELEASED_WITHIN,
             "the attachments removed (the DEL's end comes after the step's release)")
    wait_for(lambda: event_ops(daemon) == [("RECONCILE", "", "done"), ("DEL", "ev-busy", "done")],
             what="the run on events to be journaled as done")


def test_the_events_of_a_del_in_flight_are_left_to_it(daemon: Daemon, netns) -> None:
    """A runtime's DEL deletes the pod's host veth, and the runtime deletes its netns
    right after: those events concern nothing that DEL is not removing already, so they
    cost no run and leave nothing to look at again. The DEL is held here after its
    bridge step (the veth gone) until a gate file exists."""
    gate, bin_dir = daemon.root / "del-gate", daemon.root / "held-bin"
    bin_dir.mkdir()
    plugin = bin_dir / "heldbridge"
    plugin.write_text(
        "#!/bin/sh\n"
        f"{SYSTEM_CNI}/bridge; rc=$?\n"  # stdin, stdout and stderr are the bridge's
        'if [ "$CNI_COMMAND" = DEL ]; then\n'
        f'    while [ ! -e "{gate}" ]; do sleep 0.02; done\n'
        "fi\n"
        "exit $rc\n")
    plugin.chmod(0o755)
    daemon.bin_dirs.insert(0, str(bin_dir))
    br = daemon.name("e4")
    daemon.add_network("evdel", ipam_net("evdel", {"type": "heldbridge", "bridge": br},
                                         "10.187.4.0/24"))
    daemon.start()
    ns, conf = netns(), daemon.conf("evdel")
    assert daemon.cni("ADD", "ev-del", ns, conf).rc == 0
    before = events_status(daemon)

    def flushed() -> None:
        """Every batch so far has been run: one more comes (a netns of nobody's) and
        begins only after them."""
        batches = events_status(daemon)["batches"]
        ip("netns", "del", netns())
        wait_for(lambda: events_status(daemon)["batches"] > batches, RELEASED_WITHIN,
                 "a batch after the others")

    with ThreadPoolExecutor(1) as pool:
        deleting = pool.submit(daemon.cni, "DEL", "ev-del", ns, conf)
        try:
            wait_for(lambda: bridge_ports(br) == [], RELEASED_WITHIN,
                     "the DEL's bridge step to delete the veth")
            ip("netns", "del", ns)  # the sandbox goes while its DEL is still in flight
            wait_for(lambda: events_status(daemon)["netns_deleted"] > before["netns_deleted"]
                     and events_status(daemon)["links_deleted"] > before["links_deleted"],
                     RELEASED_WITHIN, "the veth's and the netns' events")
            flushed()
            assert not deleting.done()
            assert events_status(daemon)["deferred"] == 0  # not looked at again either
            assert event_ops(daemon) == [] and held(daemon) == ["ev-del"]
        finally:
            gate.touch()
        assert deleting.result(timeout=60).rc == 0
    assert attachment_states(daemon) == {"ev-del": "removed"} and held(daemon) == []
    flushed()
    assert event_ops(daemon) == [] and events_status(daemon)["deferred"] == 0


BURST = 200


@pytest.mark.slow
def test_a_burst_of_vanished_sandboxes_is_released_while_requests_are_served(
        daemon: Daemon, netns) -> None:
    br = daemon.name("e1")
    daemon.add_network("evburst", ipam_net("evburst", {"type": "bridge", "bridge": br},
                                           "10.187.0.0/23"))
    daemon.start()
    conf = daemon.conf("evburst")
    names = [netns() for _ in range(BURST)]
    with ThreadPoolExecutor(4) as pool:
        adds = list(pool.map(lambda i: daemon.cni("ADD", f"ev-{i}", names[i], conf),
                             range(BURST)))
    assert [r.rc for r in adds] == [0] * BURST, [r.describe() for r in adds if r.rc][:3]
    assert len(held(daemon)) == BURST

    probe = netns()
    proc = harness.run(["ip", "-batch", "-"], data="".join(
        f"netns del {n}\n" for n in names).encode())  # all at once, as a node reboot
    assert proc.returncode == 0, proc.stderr
    served = 0
    while held(daemon):  # the runtime goes on meanwhile: ADD and DEL of other pods
        container = f"ev-probe-{served}"
        res = daemon.cni("ADD", container, probe, conf)
        assert res.rc == 0, res.describe()
        res = daemon.cni("DEL", container, probe, conf)
        assert res.rc == 0, res.describe()
        served += 1
        assert served < 500, f"still held: {held(daemon)[:5]}"

    wait_for(lambda: set(attachment_states(daemon).values()) == {"removed"}, RELEASED_WITHIN,
             "every attachment removed")
    dels = daemon.read(journaldb.operation_rows, origin="event", verb="DEL")
    assert len(dels) == BURST and {d["state"] for d in dels} == {"done"}
    runs = len(daemon.read(journaldb.operation_rows, origin="event", verb="RECONCILE"))
    assert runs < BURST // 4  # coalesced: a few runs, not one per sandbox
    # the runtime's requests were answered in the middle of the release, not after it
    first, last = min(d["started_at"] for d in dels), max(d["finished_at"] for d in dels)
    probes = len([o for o in daemon.read(journaldb.operation_rows, origin="runtime", verb="ADD")
                  if o["container_id"].lower().startswith("ev-probe-")
                  and o["finished_at"] is not None and first <= o["finished_at"] <= last])
    assert served >= 1 and probes >= 1
    wait_for(lambda: bridge_ports(br) == [], 60, "the kernel to remove the host veths")


def test_the_netlink_socket_gets_the_deletions_only(daemon: Daemon, netns) -> None:
    """Not started: the daemon fixture only names the links, and removes them after."""
    bridge, veth = daemon.name("fb"), daemon.name("fv")
    with open_netlink() as sock:
        ns = netns()
        ip("link", "add", bridge, "type", "bridge")
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", bridge, "up")
        ip("netns", "del", ns)  # the veth dies with it, and leaves the bridge
        got: list[bytes] = []

        def deleted() -> bool:
            got.extend(receive(sock))
            return veth in {name for d in got for name in netlink_hints(d).links}

        wait_for(deleted, 10, "the veth's deletion")
    kinds = [struct.unpack_from("=H", d, 4)[0] for d in got]  # one message a datagram
    assert set(kinds) <= {RTM_DELLINK, RTM_DELNSID}  # no RTM_NEWLINK: creation, changes
    assert [d[16] for d, kind in zip(got, kinds, strict=True)
            if kind == RTM_DELLINK and AF_BRIDGE == d[16]] == []  # no port leaving a bridge


def receive(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(1 << 16))
        except BlockingIOError:
            return out
