"""We test these aspects of Debian's podman 4.3 (CNI backend) on a netctl network, through
podman's own commands: an address from netctl-ipam, released by ``podman run --rm``; what
podman sends (CNI_ARGS, runtimeConfig); ``--ip`` and ``--mac-address`` honoured, and an
address outside the range refused; the address and MAC kept across ``podman network
reload``; ``-p`` reaching portmap (a request to the host port on loopback answered by the
container's httpd, refused again once it is gone); extra networks through
``defaultNetworks``, a second conflist and ``CNI_ARGS`` in podman's environment; a container
removed while the daemon is down, finished by the next start's replay before it serves;
ten containers at once, unique addresses, nothing left.

Each test has its own daemon (``daemon`` fixture) and its own podman
(:class:`netctl_kit.harness_podman.Podman`: temporary config and storage, a busybox image
imported from a tar); both are removed after the test, and so is what podman leaves on the
host. Skipped with the reason when podman cannot run here.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import harness, harness_podman
from netctl_kit.harness_podman import IMAGE, Podman, netctl_conflist

from tests.conftest import SYSTEM_CNI, Daemon, bridge_ports, free_port, http_get, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.slow]

CLUSTER, EXTRA = "pod-net", "extra"
SUBNET = ipaddress.ip_network("10.211.0.0/24")
EXTRA_SUBNET = ipaddress.ip_network("10.211.1.0/24")
NETWORK = "netctl"  # the conflist podman knows
TAP = Path(__file__).resolve().parent / "cni-tap"  # records what the runtime sends
# In the container: eth0's MAC, then every global IPv4 address with its interface.
SHOW = ["sh", "-c", "cat /sys/class/net/eth0/address; ip -4 -o addr show scope global"]


def run_args(*args: str) -> list[str]:
    return ["run", "--pull=never", *args]


@contextlib.contextmanager
def open_podman(daemon: Daemon, plugin_dirs: list[str]) -> Iterator[Podman]:
    """The daemon started with the two networks, and a podman with the netctl conflist;
    podman and what it left on the host removed afterwards (a failure if anything had to be
    forced)."""
    why = harness_podman.preflight()
    if why:
        pytest.skip(why)
    daemon.add_network(CLUSTER, {"cniVersion": "1.0.0", "name": CLUSTER, "plugins": [
        {"type": "bridge", "bridge": daemon.name("br"), "isGateway": True,
         "ipam": {"type": "netctl-ipam", "range": str(SUBNET), "gateway": str(SUBNET[1])}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]})
    daemon.add_network(EXTRA, {"cniVersion": "1.0.0", "name": EXTRA, "plugins": [
        {"type": "bridge", "bridge": daemon.name("bx"),
         "ipam": {"type": "netctl-ipam", "range": str(EXTRA_SUBNET)}}]})
    daemon.start()
    pm = Podman.create(plugin_dirs, prefix=daemon.prefix)
    problems: list[str] = []
    try:
        why = pm.start_image()
        if why:
            pytest.skip(f"podman cannot run containers here: {why}")
        pm.add_conflist(netctl_conflist(daemon.socket, CLUSTER, NETWORK))
        yield pm
    finally:
        problems = pm.remove()
    assert problems == [], problems


@pytest.fixture
def podman(daemon: Daemon) -> Iterator[Podman]:
    with open_podman(daemon, [str(Path(daemon.plugin).parent), SYSTEM_CNI]) as pm:
        yield pm


def interfaces(out: str) -> tuple[str, dict[str, str]]:
    """eth0's MAC and interface → address from :data:`SHOW`'s output."""
    lines = out.split("\n", 1)
    addrs = dict(re.findall(r"^\d+: (\S+)\s+inet (\S+)", lines[1] if len(lines) > 1 else "",
                            re.M))
    return lines[0].strip(), addrs


def in_container(pm: Podman, name: str) -> tuple[str, dict[str, str]]:
    return interfaces(pm.run("exec", name, *SHOW).stdout)


def live(daemon: Daemon) -> list[str]:
    """Every live allocation's address."""
    return sorted(a["address"] for a in harness.live_allocations(daemon.state_dir))


def assert_nothing_left(daemon: Daemon) -> None:
    found = harness.leftovers(daemon, bridges=[daemon.name("br"), daemon.name("bx")])
    assert harness.describe_leftovers(found) == []


def test_address_from_netctl_ipam_released_on_rm(podman: Podman, daemon: Daemon) -> None:
    out = podman.run(*run_args("--rm", "--name", "web-1", "--network", NETWORK, IMAGE,
                               *SHOW)).stdout
    _, addrs = interfaces(out)
    assert list(addrs) == ["eth0"]
    assert ipaddress.ip_interface(addrs["eth0"]).network == SUBNET
    # the journal knows it by podman's container name (its pod has no namespace)
    atts = daemon.journal("--pod", "web-1")["attachments"]
    assert [(a["addresses"], a["state"]) for a in atts] == [([addrs["eth0"]], "removed")]
    assert live(daemon) == []
    assert_nothing_left(daemon)


def test_what_podman_sends(daemon: Daemon, tmp_path: Path) -> None:
    """podman 4.3 passes --ip, --mac-address as IP=/MAC= in CNI_ARGS and -p as
    runtimeConfig.portMappings (nothing else in runtimeConfig), at the conflist's
    cniVersion, with the capabilities the conflist declares; the same on DEL."""
    tap = tmp_path / "tap"
    tap.mkdir()
    (tap / "netctl-cni").symlink_to(TAP)
    log = tmp_path / "tap.log"
    (tap / "tap.json").write_text(json.dumps({"log": str(log), "exec": daemon.plugin}))
    with open_podman(daemon, [str(tap), str(Path(daemon.plugin).parent), SYSTEM_CNI]) as pm:
        port = free_port()
        pm.run(*run_args("--rm", "--name", "tapped", "--network", NETWORK,
                         "--ip", str(SUBNET[200]), "--mac-address", "02:00:0a:d3:00:c8",
                         "-p", f"127.0.0.1:{port}:80", IMAGE, "true"))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    by_verb = {c["env"]["CNI_COMMAND"]: c for c in calls}
    assert set(by_verb) == {"VERSION", "ADD", "DEL"}
    for verb in ("ADD", "DEL"):
        env, conf = by_verb[verb]["env"], by_verb[verb]["stdin"]
        assert re.fullmatch(r"[0-9a-f]{64}", env["CNI_CONTAINERID"])
        assert env["CNI_IFNAME"] == "eth0"
        assert env["CNI_NETNS"].startswith("/run/netns/netns-")
        assert dict(kv.split("=", 1) for kv in env["CNI_ARGS"].split(";")) == {
            "IgnoreUnknown": "1", "K8S_POD_NAME": "tapped", "IP": str(SUBNET[200]),
            "MAC": "02:00:0a:d3:00:c8"}
        assert conf["cniVersion"] == "1.0.0"
        assert conf["capabilities"] == {"portMappings": True, "ips": True, "mac": True}
        assert conf["runtimeConfig"] == {"portMappings": [
            {"hostPort": port, "containerPort": 80, "protocol": "tcp", "hostIP": "127.0.0.1"}]}
    assert "prevResult" not in by_verb["ADD"]["stdin"]
    assert by_verb["DEL"]["stdin"]["prevResult"]["ips"]
    assert_nothing_left(daemon)


def test_ip_and_mac_honoured(podman: Podman, daemon: Daemon) -> None:
    """``--ip`` and ``--mac-address`` (IP=/MAC= in CNI_ARGS) give eth0 that address and MAC;
    the address is the IPAM's allocation while the container lives."""
    wanted_ip, wanted_mac = f"{SUBNET[77]}/{SUBNET.prefixlen}", "02:00:0a:d3:00:4d"
    podman.run(*run_args("-d", "--name", "pinned", "--network", NETWORK, "--ip", str(SUBNET[77]),
                         "--mac-address", wanted_mac, IMAGE, "sleep", "600"))
    mac, addrs = in_container(podman, "pinned")
    assert (addrs.get("eth0"), mac) == (wanted_ip, wanted_mac)
    assert live(daemon) == [wanted_ip]
    podman.run("rm", "--force", "--time", "0", "pinned")
    assert live(daemon) == []
    assert_nothing_left(daemon)


def test_ip_outside_the_range_refused(podman: Podman, daemon: Daemon) -> None:
    """An ``--ip`` the network cannot give is refused (code 7, naming the address): podman
    fails the run, and nothing is left."""
    proc = podman.run(*run_args("--rm", "--network", NETWORK, "--ip", "10.99.0.5", IMAGE,
                                "true"), check=False)
    assert proc.returncode != 0
    assert "10.99.0.5" in proc.stderr
    assert podman.containers() == []
    assert live(daemon) == []
    assert_nothing_left(daemon)


def test_address_kept_across_network_reload(podman: Podman, daemon: Daemon) -> None:
    """``podman network reload`` DELs and ADDs again with the old address and MAC in
    CNI_ARGS (IP=, MAC=): the container keeps both, and holds one allocation."""
    podman.run(*run_args("-d", "--name", "reloaded", "--network", NETWORK, IMAGE,
                         "sleep", "600"))
    before = in_container(podman, "reloaded")
    podman.run("network", "reload", "reloaded")
    assert in_container(podman, "reloaded") == before
    assert live(daemon) == [before[1]["eth0"]]
    podman.run("rm", "--force", "--time", "0", "reloaded")
    assert live(daemon) == []
    assert_nothing_left(daemon)


def test_port_mapping_reaches_portmap(podman: Podman, daemon: Daemon) -> None:
    """``-p 127.0.0.1:PORT:80`` reaches portmap in the cluster network's chain: a request to
    the host port on loopback is answered by the container's httpd; refused once the
    container is gone (portmap's DEL ran)."""
    port, token = free_port(), secrets.token_hex(8)
    podman.run(*run_args("-d", "--name", "web", "--network", NETWORK,
                         "-p", f"127.0.0.1:{port}:80", IMAGE, "sh", "-c",
                         f"mkdir /www && echo netctl-{token} > /www/index.html && "
                         "exec httpd -f -p 80 -h /www"))
    answer = wait_for(lambda: http_get(port), 30, f"the container's httpd on 127.0.0.1:{port}")
    assert answer.startswith(b"HTTP/1.") and f"netctl-{token}".encode() in answer
    podman.run("rm", "--force", "--time", "0", "web")
    assert http_get(port) is None
    assert_nothing_left(daemon)


EXTRA_WAYS = {
    # the netctl conflist names the extra network in defaultNetworks: net1
    "defaultNetworks": ({"defaultNetworks": [EXTRA]}, (), {}),
    # a second conflist, a second --network: podman's eth1
    "second conflist": ({}, ("--network", "netctl-extra"), {}),
    # NETCTL_NETWORKS in podman's CNI_ARGS environment, which podman appends to its own: net1
    "CNI_ARGS": ({}, (), {"CNI_ARGS": f"NETCTL_NETWORKS={EXTRA}"}),
}


@pytest.mark.parametrize("way", list(EXTRA_WAYS))
def test_extra_network(podman: Podman, daemon: Daemon, way: str) -> None:
    extra_keys, args, env = EXTRA_WAYS[way]
    podman.add_conflist(netctl_conflist(daemon.socket, CLUSTER, NETWORK, **extra_keys))
    podman.add_conflist(netctl_conflist(daemon.socket, EXTRA, "netctl-extra"))
    out = podman.run(*run_args("--rm", "--network", NETWORK, *args, IMAGE, *SHOW),
                     env=env).stdout
    _, addrs = interfaces(out)
    extra_if = "eth1" if args else "net1"
    assert sorted(addrs) == sorted(["eth0", extra_if])
    subnets = {name: ipaddress.ip_interface(addr).network for name, addr in addrs.items()}
    if args:
        # two --network flags: podman names the interfaces eth0/eth1 in the order of its own
        # map of networks, which is not the command line's: either may be the cluster one
        assert sorted(map(str, subnets.values())) == sorted([str(SUBNET), str(EXTRA_SUBNET)])
    else:
        assert (subnets["eth0"], subnets[extra_if]) == (SUBNET, EXTRA_SUBNET)
    assert live(daemon) == []
    assert_nothing_left(daemon)


def test_rm_while_daemon_down_finished_by_replay(podman: Podman, daemon: Daemon) -> None:
    """``podman rm`` while the daemon is down succeeds (the plugin records the DEL); the
    next start finishes it in its replay, before it serves: the attachment removed, the
    address released (not by the reconciler: its periodic round is off here)."""
    podman.run(*run_args("-d", "--name", "orphan", "--network", NETWORK, IMAGE,
                         "sleep", "600"))
    cid = podman.inspect("orphan")["Id"]
    assert len(live(daemon)) == 1
    assert daemon.stop() == 0
    proc = podman.run("rm", "--force", "--time", "0", "orphan")
    assert proc.stdout.strip() == "orphan"
    assert podman.containers() == []
    daemon.start()  # returns once the socket accepts
    atts = daemon.journal("--container", cid)["attachments"]
    ops = daemon.journal("--container", cid)["operations"]
    assert [a["state"] for a in atts] == ["removed"]
    assert live(daemon) == []
    dels = [op for op in ops if op["verb"] == "DEL"]
    assert [(op["state"], op["origin"] != "reconcile") for op in dels] == [("done", True)]
    assert_nothing_left(daemon)


def test_ten_containers_at_once(podman: Podman, daemon: Daemon) -> None:
    def one(i: int) -> dict[str, str]:
        out = podman.run(*run_args("--rm", "--name", f"par-{i}", "--network", NETWORK, IMAGE,
                                   *SHOW)).stdout
        return interfaces(out)[1]

    with ThreadPoolExecutor(10) as pool:
        results: list[dict[str, Any]] = list(pool.map(one, range(10)))
    addrs = [r["eth0"] for r in results]
    assert len(set(addrs)) == 10
    assert all(ipaddress.ip_interface(a).network == SUBNET for a in addrs)
    assert podman.containers() == []
    assert bridge_ports(daemon.name("br")) == []
    assert live(daemon) == []
    assert_nothing_left(daemon)
