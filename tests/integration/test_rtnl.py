"""We test netctl's own route-netlink calls (:mod:`netctl.cni.rtnl`: the reconciler's link dump
and link deletion, without pyroute2) in a network namespace of the test's own: the links
it lists are the ones ``ip -j link`` shows, with their kind and MAC (a veth pair, a
bridge, loopback); a link deleted by name is gone (its veth peer with it) and deleting it
again says there was none; a name too long for the kernel is its refusal, not a crash;
and pyroute2 is not loaded for any of it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
from netctl_kit.harness import ip

from netctl.cni import rtnl
from netctl.cni.netns import in_netns


def ip_links(ns: str) -> dict[str, tuple[str, str]]:
    """name → (kind, MAC) as ``ip -d -j link`` shows them in netns ``ns``."""
    data = json.loads(ip("-n", ns, "-d", "-j", "link", "show").stdout)
    return {d["ifname"]: (d.get("linkinfo", {}).get("info_kind", ""),
                          d.get("address", "") if d.get("link_type") != "none" else "")
            for d in data}


def test_links_and_their_deletion(netns: Callable[[], str]) -> None:
    ns = netns()
    path = f"/var/run/netns/{ns}"
    ip("-n", ns, "link", "add", "rt0a", "type", "veth", "peer", "name", "rt0b")
    ip("-n", ns, "link", "add", "rtbr", "type", "bridge")
    listed = {link.name: (link.kind, link.mac) for link in in_netns(path, rtnl.links)}
    assert listed == ip_links(ns)
    assert listed["rt0a"][0] == "veth" and listed["rtbr"][0] == "bridge"
    assert listed["lo"] == ("", "00:00:00:00:00:00")
    assert in_netns(path, lambda: rtnl.delete_link("rt0a")) is True
    names = {link.name for link in in_netns(path, rtnl.links)}
    assert names == {"lo", "rtbr"}  # the peer went with it
    assert in_netns(path, lambda: rtnl.delete_link("rt0a")) is False
    with pytest.raises(rtnl.NetlinkError):
        in_netns(path, lambda: rtnl.delete_link("x" * 40))  # longer than IFNAMSIZ


def test_no_pyroute2_for_the_reconcilers_calls() -> None:
    script = ("import sys; from netctl.reconcile import facts, leaks, watch; "
              "facts.host_links(); print('pyroute2' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"
