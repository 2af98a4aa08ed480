"""We test these aspects of ``netctl ipam pools|show|leaks`` and ``netctl journal --ip --at``
against a real daemon, real netns and the real bridge plugin with the central IPAM:

- ``pools`` counts a pool's size, live allocations and free addresses; ``show`` lists a
  pool's allocations with pod, container and ifname; both tables name the pool; an unknown
  pool exits 1 naming it and the known ones;
- after a DEL the released allocation stays: ``journal --ip ADDR --at T`` names the pod and
  container that held it at T (JSON and table), and nothing at a time after the release;
- ``leaks`` is empty while every allocation is held by something live; a plain-plugin
  allocation whose sandbox netns is deleted without a DEL is reported, with its reason;
- every read command answers the same while the daemon is stopped; after a restart, the
  missing DEL releases the leak and ``leaks`` is empty again;
- a podman user's words: ``journal --container`` with 12 characters of a 64-character id,
  ``--pod NAME`` for a pod with no namespace, ``ipam show NETWORK``.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import NETCTL, SYSTEM_CNI, CNIResult, Daemon, exec_direct, ip, netns_addrs

pytestmark = pytest.mark.netns

POOL = "10.141.0.0/28"
PLAIN_POOL = "10.141.1.0/28"


def netctl(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NETCTL, *args, "--state-dir", str(daemon.state_dir)],
                          capture_output=True, text=True, timeout=30)


def netctl_json(daemon: Daemon, *args: str) -> dict[str, Any]:
    proc = netctl(daemon, *args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)  # one JSON document
    return out


def table(daemon: Daemon, *args: str) -> str:
    proc = netctl(daemon, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def pools(daemon: Daemon) -> dict[str, tuple[int, int, int]]:
    return {p["key"]: (p["size"], p["in_use"], p["free"])
            for p in netctl_json(daemon, "ipam", "pools")["pools"]}


def add_blue(daemon: Daemon) -> dict[str, Any]:
    daemon.add_network("blue", {"cniVersion": "1.0.0", "name": "blue", "plugins": [{
        "type": "bridge", "bridge": daemon.name("b0"), "isGateway": True, "ipam": {
            "type": "netctl-ipam", "range": POOL, "gateway": "10.141.0.1"}}]})
    return daemon.conf("blue")


def test_pools_show_and_who_held_an_address(daemon: Daemon, netns) -> None:
    conf = add_blue(daemon)
    daemon.start()
    ns1, ns2 = netns(), netns()
    for cid, ns, pod in (("cli1", ns1, "shop/web-1"), ("cli2", ns2, "shop/web-2")):
        res = daemon.cni("ADD", cid, ns, conf, pod=pod)
        assert res.rc == 0, res.stdout + res.stderr
    addr1, addr2 = netns_addrs(ns1)["eth0"][0], netns_addrs(ns2)["eth0"][0]

    assert pools(daemon) == {POOL: (13, 2, 11)}  # /28: 14 hosts minus the gateway
    shown = netctl_json(daemon, "ipam", "show", POOL)
    assert shown["pool"]["key"] == POOL and shown["pool"]["in_use"] == 2
    assert [(a["address"], a["container"], a["pod"], a["ifname"])
            for a in shown["allocations"]] == [
        (addr1, "cli1", "shop/web-1", "eth0"), (addr2, "cli2", "shop/web-2", "eth0")]
    assert all(a["until"] is None and a["attachment"] for a in shown["allocations"])

    pools_table = table(daemon, "ipam", "pools")
    assert POOL in pools_table and "IN_USE" in pools_table
    # size, in use, reserved (sticky), free, blocks (none)
    assert pools_table.splitlines()[1].split()[-5:] == ["13", "2", "0", "11", "-"]
    show_table = table(daemon, "ipam", "show", POOL)
    assert POOL in show_table.splitlines()[0]
    assert "shop/web-1" in show_table and addr2 in show_table

    unknown = netctl(daemon, "ipam", "show", "10.141.9.0/28")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "10.141.9.0/28" in unknown.stderr and f"known pools: {POOL}" in unknown.stderr

    assert daemon.cni("DEL", "cli1", ns1, conf).rc == 0
    assert pools(daemon) == {POOL: (13, 1, 12)}
    assert [a["container"] for a in netctl_json(daemon, "ipam", "show", POOL)
            ["allocations"]] == ["cli2"]
    history = netctl_json(daemon, "journal", "--ip", addr1)["allocations"]
    assert [(a["container"], a["pod"]) for a in history] == [("cli1", "shop/web-1")]
    since, until = history[0]["since"], history[0]["until"]
    assert until is not None and since < until
    held_at = (since + until) / 2

    during = netctl_json(daemon, "journal", "--ip", addr1.split("/")[0], "--at", repr(held_at))
    assert [(a["container"], a["pod"], a["address"]) for a in during["allocations"]] == [
        ("cli1", "shop/web-1", addr1)]
    assert [a["container"] for a in during["attachments"]] == ["cli1"]
    after = netctl_json(daemon, "journal", "--ip", addr1, "--at", "0s")
    assert after["allocations"] == [] and after["attachments"] == []
    at_release = netctl_json(daemon, "journal", "--ip", addr1, "--at", repr(until))
    assert at_release["allocations"] == []

    iso = datetime.fromtimestamp(held_at, UTC).isoformat()  # with its offset
    journal_table = table(daemon, "journal", "--ip", addr1, "--at", iso)
    assert POOL in journal_table and "shop/web-1" in journal_table and "cli1" in journal_table

    assert netctl_json(daemon, "ipam", "leaks") == {"leaks": []}
    assert daemon.cni("DEL", "cli2", ns2, conf).rc == 0
    assert pools(daemon) == {POOL: (13, 0, 13)}


def test_a_sandbox_gone_without_del_is_a_leak_even_with_the_daemon_down(
        daemon: Daemon, netns) -> None:
    conf = add_blue(daemon)
    daemon.settings["reconcile-events"] = False  # the leak must stay for `ipam leaks`
    daemon.start()
    pod_ns, plain_ns = netns(), netns()
    res = daemon.cni("ADD", "held1", pod_ns, conf, pod="shop/db-0")
    assert res.rc == 0, res.stdout + res.stderr

    # a main plugin exec'd directly, with netctl-ipam as its IPAM plugin (no attachment)
    plain = {"cniVersion": "1.0.0", "name": "plain", "type": "bridge",
             "bridge": daemon.name("b1"), "ipam": {
                 "type": "netctl-ipam", "socket": daemon.socket, "range": PLAIN_POOL,
                 "gateway": "10.141.1.1"}}
    netns_path = f"/var/run/netns/{plain_ns}"

    def bridge(command: str) -> CNIResult:
        return exec_direct(daemon, f"{SYSTEM_CNI}/bridge", command, plain, container="plain1",
                           ns=plain_ns, args="IgnoreUnknown=1;K8S_POD_NAMESPACE=batch;"
                           "K8S_POD_NAME=job-7")

    add = bridge("ADD")
    assert add.rc == 0 and add.out is not None, add.stdout + add.stderr
    plain_addr = add.out["ips"][0]["address"]
    assert netctl_json(daemon, "ipam", "leaks") == {"leaks": []}  # its netns still exists

    ip("netns", "del", plain_ns)  # the sandbox goes away; no DEL ever comes
    leaks = netctl_json(daemon, "ipam", "leaks")["leaks"]
    assert [(x["pool"], x["address"], x["container"], x["pod"], x["reason"]) for x in leaks] \
        == [(PLAIN_POOL, plain_addr, "plain1", "batch/job-7", "netns-gone")]
    assert netns_path in leaks[0]["detail"] and leaks[0]["attachment"] is None
    leaks_table = table(daemon, "ipam", "leaks")
    assert PLAIN_POOL in leaks_table and "netns-gone" in leaks_table

    running = {
        "pools": netctl_json(daemon, "ipam", "pools"),
        "show": netctl_json(daemon, "ipam", "show", POOL),
        "leaks": netctl_json(daemon, "ipam", "leaks"),
        "journal": netctl_json(daemon, "journal", "--ip", plain_addr, "--at", "0s"),
    }
    assert daemon.stop() == 0
    assert not os.path.exists(daemon.socket)
    stopped = {
        "pools": netctl_json(daemon, "ipam", "pools"),
        "show": netctl_json(daemon, "ipam", "show", POOL),
        "leaks": netctl_json(daemon, "ipam", "leaks"),
        "journal": netctl_json(daemon, "journal", "--ip", plain_addr, "--at", "0s"),
    }
    assert stopped == running
    assert pools(daemon) == {POOL: (13, 1, 12), PLAIN_POOL: (13, 1, 12)}
    assert [a["pod"] for a in stopped["journal"]["allocations"]] == ["batch/job-7"]
    assert stopped["journal"]["attachments"] == []  # plain-plugin mode: only the allocation
    for args in (("ipam", "pools"), ("ipam", "show", PLAIN_POOL), ("ipam", "leaks"),
                 ("journal", "--ip", plain_addr)):
        assert PLAIN_POOL in table(daemon, *args)

    # the late DEL (the runtime's retry, or a GC) releases it: no leak any more
    daemon.start()
    delete = bridge("DEL")
    assert delete.rc == 0, delete.stdout + delete.stderr
    assert daemon.cni("DEL", "held1", pod_ns, conf).rc == 0
    assert netctl_json(daemon, "ipam", "leaks") == {"leaks": []}
    assert pools(daemon) == {POOL: (13, 0, 13), PLAIN_POOL: (13, 0, 13)}


def test_podman_style_ids_and_pods_and_a_network_name(daemon: Daemon, netns) -> None:
    """What a podman user types: 12 characters of a 64-character id, a pod name with no
    namespace (podman sends only K8S_POD_NAME), and the network's name for its pool."""
    conf = add_blue(daemon)
    daemon.start()
    ns = netns()
    cid = "9c4e1d2b7a30" + "5" * 52
    res = daemon.cni("ADD", cid, ns, conf, args=("IgnoreUnknown=1", "K8S_POD_NAME=nginx"))
    assert res.rc == 0, res.stdout + res.stderr
    found = netctl_json(daemon, "journal", "--container", cid[:12])
    assert [(a["container"], a["pod"]) for a in found["attachments"]] == [(cid, "nginx")]
    assert [o["verb"] for o in found["operations"]] == ["ADD"]
    assert [a["container"] for a in netctl_json(daemon, "journal", "--pod", "nginx")
            ["attachments"]] == [cid]
    shown = netctl_json(daemon, "ipam", "show", "blue")
    assert [p["pool"]["key"] for p in shown["pools"]] == [POOL]
    assert [a["container"] for a in shown["pools"][0]["allocations"]] == [cid]
    assert daemon.cni("DEL", cid, ns, conf).rc == 0
