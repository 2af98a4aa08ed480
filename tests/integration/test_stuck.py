"""We test these aspects: a delegate whose DEL keeps failing (a NAD with a typo: macvlan on
a master link that does not exist) never holds a netctl-ipam address once the pod's netns
is gone — retried as kubelet retries (new container and netns each time; ADD, DEL, netns
deleted, DEL with an empty CNI_NETNS), a small shared pool stays usable for a good network;
with no DEL at all, the kernel's netns event frees the address while the attachment stays
visible as stuck; nothing is released while the netns exists; ``netctl forget`` ends a stuck
attachment by hand, journaled with who and why, refusing while its netns exists unless
``--force``.

Addresses: 10.236.0.0/29 (the pool ``tiny``, six assignable addresses)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from netctl_kit import journaldb
from netctl_kit.harness import netctl_argv, netns_del, run

from netctl.journal import query
from tests.conftest import Daemon, netns_addrs, wait_for

pytestmark = pytest.mark.netns

POOL = {"type": "netctl-ipam", "range": "10.236.0.0/29", "network_name": "tiny"}


def macvlan(name: str, master: str) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "macvlan", "master": master, "mode": "bridge", "ipam": dict(POOL)}]}


def held(daemon: Daemon, container: str = "") -> list[str]:
    """Live addresses of the pool (of one container), read from the journal."""
    return [a["address"] for a in daemon.read(query.live_allocations,
                                              [container] if container else None)]


def stuck(daemon: Daemon) -> list[str]:
    """Containers of the attachments the journal keeps with a failed clean-up."""
    return [a["container_id"] for a in daemon.read(query.unremoved_attachments)
            if a["del_failures"] > 0]


def setup(daemon: Daemon, veth_parent: str) -> None:
    daemon.add_network("typo", macvlan("typo", daemon.name("nolink")))  # no such link
    daemon.add_network("good", macvlan("good", veth_parent))
    daemon.start()


def test_kubelet_retries_of_a_broken_nad_do_not_exhaust_the_pool(
        daemon: Daemon, netns: Callable[[], str], veth_parent: str) -> None:
    setup(daemon, veth_parent)
    conf = daemon.conf("typo")
    for i in range(8):  # more tries than the pool has addresses
        ns, cid = netns(), f"typo{i}"
        res = daemon.cni("ADD", cid, ns, conf, pod=f"default/broken-{i}")
        assert res.rc == 1 and res.out is not None, res.describe()
        assert "Link not found" in res.out["msg"], res.out  # the delegate's own error,
        # never the pool's exhaustion
        daemon.cni("DEL", cid, ns, conf, pod=f"default/broken-{i}")  # may fail: macvlan's
        netns_del(ns)
        res = daemon.cni("DEL", cid, "", conf, pod=f"default/broken-{i}")
        assert res.rc == 0, res.describe()  # never a DEL refused for ever
        assert held(daemon, cid) == [], f"try {i}: the address is still held"
    # the broken attachments stay visible as stuck; the pool is whole again
    assert len(set(stuck(daemon))) == 8
    assert held(daemon) == []
    ns = netns()
    res = daemon.cni("ADD", "good0", ns, daemon.conf("good"), pod="default/good")
    assert res.rc == 0, res.describe()
    assert netns_addrs(ns)["eth0"][0].startswith("10.236.0."), netns_addrs(ns)
    assert len(held(daemon)) == 1
    # the releases are in the journal, from the DELs that failed with the netns gone
    with daemon.read_only() as conn:
        released_by = list(dict.fromkeys(
            (s["verb"], s["state"], s["netns"]) for a in journaldb.allocation_rows(conn)
            if a["container_id"].lower().startswith("typo")
            and a["released_op"] is not None and a["attachment_id"] is not None
            for s in journaldb.step_rows(conn, operation=a["released_op"],
                                         attachment=a["attachment_id"])))
    assert released_by == [("DEL", "failed", "")], released_by


def test_netns_gone_without_a_del_frees_the_address_not_the_attachment(
        daemon: Daemon, netns: Callable[[], str], veth_parent: str) -> None:
    setup(daemon, veth_parent)  # the suite's daemon: reconcile-interval 0, events on
    conf = daemon.conf("typo")
    ns = netns()
    res = daemon.cni("ADD", "lonely", ns, conf, pod="default/lonely")
    assert res.rc == 1, res.describe()
    assert len(held(daemon, "lonely")) == 1  # compensation failed: the address is held
    # the runtime's DEL fails too, so the attachment backs off (retried in 20 s)
    assert daemon.cni("DEL", "lonely", ns, conf, pod="default/lonely").rc == 1
    # while the netns exists, a reconcile round frees nothing
    report = daemon.reconcile()
    assert report["plan"].get("freed", []) == [] and report["plan"]["allocations"] == [], report
    assert len(held(daemon, "lonely")) == 1
    netns_del(ns)  # the runtime removes the sandbox; no DEL comes
    wait_for(lambda: held(daemon, "lonely") == [], what="the address released on the "
             "netns deletion event")
    assert stuck(daemon) == ["lonely"]
    assert daemon.status()["stuck"], "the attachment stays visible as stuck"
    with daemon.read_only() as conn:
        rel = [(o["verb"], o["origin"])
               for a in journaldb.allocation_rows(conn, container="lonely")
               if a["released_op"] is not None
               for o in journaldb.operation_rows(conn, op_id=a["released_op"])]
    assert rel == [("RELEASE", "event")], rel


def forget(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run(netctl_argv("forget", "--socket", daemon.socket, *args))
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(),
                                       proc.stderr.decode())


def test_forget_ends_a_stuck_attachment_by_hand(
        daemon: Daemon, netns: Callable[[], str], veth_parent: str) -> None:
    setup(daemon, veth_parent)
    conf = daemon.conf("typo")
    ns = netns()
    assert daemon.cni("ADD", "cafe0001", ns, conf, pod="default/stuck").rc == 1
    address = held(daemon, "cafe0001")
    assert len(address) == 1

    # the netns still exists: refused, nothing changed
    proc = forget(daemon, "--container", "cafe")
    assert proc.returncode == 1
    assert "still exists" in proc.stderr and "--force" in proc.stderr, proc.stderr
    assert stuck(daemon) == ["cafe0001"] and held(daemon, "cafe0001") == address
    # an unknown container, an interface it does not have
    assert "no live attachment" in forget(daemon, "--container", "beef").stderr
    assert "no live attachment on net7" in forget(
        daemon, "--container", "cafe", "--ifname", "net7", "--force").stderr

    proc = forget(daemon, "--container", "cafe", "--force", "--why", "typo in NAD typo",
                  "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["forced"] is True and report["container"] == "cafe0001"
    assert [r["addresses"] for r in report["forgotten"]] == [address]
    assert stuck(daemon) == [] and held(daemon, "cafe0001") == []
    assert daemon.status()["stuck"] == []
    ops = daemon.read(journaldb.operation_rows, op_id=report["operation"])
    assert [(o["verb"], o["origin"], o["state"]) for o in ops] == [("FORGET", "admin", "done")]
    request = json.loads(ops[0]["request"])
    assert request["why"] == "typo in NAD typo" and "uid 0" in request["who"]
    # forgotten, not DELeted: no DEL step ran for it; a later DEL of it is a no-op
    assert daemon.read(journaldb.step_rows, operation=report["operation"]) == []
    res = daemon.cni("DEL", "cafe0001", ns, conf, pod="default/stuck")
    assert res.rc == 0, res.describe()

    # without --force once the netns is gone
    ns2 = netns()
    assert daemon.cni("ADD", "cafe0002", ns2, conf, pod="default/stuck2").rc == 1
    netns_del(ns2)
    wait_for(lambda: held(daemon, "cafe0002") == [], what="the address released on the "
             "netns deletion event")
    proc = forget(daemon, "--container", "cafe0002")
    assert proc.returncode == 0, proc.stderr
    assert "forgot 1 attachments of container cafe0002" in proc.stdout, proc.stdout
    assert stuck(daemon) == []
