"""We test the runtimes' ways of asking for a pod's address and MAC, on real netns and
plugins: ``IP=``/``MAC=`` in CNI_ARGS (podman's ``--ip``, ``--mac-address`` and ``network
reload``) and ``runtimeConfig.ips``/``mac`` (CRI-O, containerd, podman with the capability
declared) reach the cluster network — through netctl-ipam in-process, through a
delegate's own IPAM (host-local reads ``args.cni.ips``) and through the delegate's ``mac``
capability or ``args.cni.mac`` — and are honoured or refused with code 7 naming the
address and its holder; a refused ADD leaves nothing behind.

Subnets: 10.181.0.0/24 (netctl-ipam), 10.181.1.0/24 (host-local)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import (
    Daemon,
    bridge_conf,
    bridge_ports,
    ip,
    ipam_bridge,
    ipam_held,
    live,
    netns_addrs,
    netns_links,
)

pytestmark = pytest.mark.netns

MAC = "02:42:ac:11:00:2a"


def _mac(ns: str, ifname: str = "eth0") -> str:
    out = ip("-n", ns, "-j", "link", "show", ifname).stdout
    return str(json.loads(out)[0]["address"])


def _nipam(daemon: Daemon, **extra: Any) -> str:
    br = daemon.name("r0")
    conf = ipam_bridge("rq", br, {"type": "netctl-ipam", "range": "10.181.0.0/24",
                                  "gateway": "10.181.0.1"})
    conf["plugins"][0].update(extra)
    daemon.add_network("rq", conf)
    return br


def test_ip_and_mac_in_cni_args_are_honoured_and_kept_across_a_reload(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = _nipam(daemon)
    daemon.start()
    conf = daemon.conf("rq", "1.0.0")
    ns = netns()
    asked = ("IgnoreUnknown=1", "IP=10.181.0.77", f"MAC={MAC}")
    res = daemon.cni("ADD", "podman1", ns, conf, args=asked)
    assert res.rc == 0, res.describe()
    assert netns_addrs(ns)["eth0"] == ["10.181.0.77/24"]
    assert _mac(ns) == MAC
    assert res.out is not None and res.out["ips"][0]["address"] == "10.181.0.77/24"
    assert [a for _, _, a in live(daemon)] == ["10.181.0.77"]

    # podman network reload: DEL, then ADD again with the container's old IP= and MAC=
    assert daemon.cni("DEL", "podman1", ns, conf, args=asked).rc == 0
    assert live(daemon) == [] and bridge_ports(br) == []
    res = daemon.cni("ADD", "podman1", ns, conf, args=asked)
    assert res.rc == 0, res.describe()
    assert netns_addrs(ns)["eth0"] == ["10.181.0.77/24"] and _mac(ns) == MAC
    assert daemon.cni("DEL", "podman1", ns, conf).rc == 0


def test_runtime_config_ips_and_mac_are_honoured(daemon: Daemon,
                                                 netns: Callable[[], str]) -> None:
    """As CRI-O and containerd pass them when the conflist declares the capabilities."""
    _nipam(daemon, capabilities={"mac": True})
    daemon.start()
    conf = daemon.conf("rq", "1.0.0", capabilities={"ips": True, "mac": True},
                       runtimeConfig={"ips": ["10.181.0.88/24"], "mac": MAC})
    ns = netns()
    res = daemon.cni("ADD", "crio1", ns, conf)
    assert res.rc == 0, res.describe()
    assert netns_addrs(ns)["eth0"] == ["10.181.0.88/24"] and _mac(ns) == MAC
    # the same asked again both ways agrees; a different one is refused
    same = daemon.cni("ADD", "crio1", ns, conf, args=("IP=10.181.0.88",))
    assert same.rc == 0, same.describe()
    other = daemon.cni("ADD", "crio2", netns(), conf, args=("IP=10.181.0.89",))
    assert other.rc == 1 and other.out is not None and other.out["code"] == 7
    assert "disagree" in other.out["msg"] and "10.181.0.89" in other.out["msg"]
    assert daemon.cni("DEL", "crio1", ns, conf).rc == 0


def test_a_taken_or_foreign_address_is_refused_naming_it_and_leaves_nothing(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    br = _nipam(daemon)
    daemon.start()
    conf = daemon.conf("rq", "1.0.0")
    first = netns()
    assert daemon.cni("ADD", "holder", first, conf, args=("IP=10.181.0.40",)).rc == 0
    cases = {
        "IP=10.181.0.40": ("10.181.0.40", "holder"),  # taken: names the holder
        "IP=10.99.0.5": ("10.99.0.5", "range"),  # in no range of the pool
        "IP=not-an-ip": ("not-an-ip", "not"),
        "IP=10.181.0.41;MAC=zz:zz": ("zz:zz", "MAC"),
        "IP=10.181.0.41,10.181.0.42": ("10.181.0.4", "one address per range"),
    }
    for args, (named, why) in cases.items():
        ns = netns()
        res = daemon.cni("ADD", "asker", ns, conf, args=tuple(args.split(";")))
        assert res.rc == 1 and res.out is not None, (args, res.describe())
        assert res.out["code"] == 7, (args, res.out)
        assert named in res.out["msg"] and why in res.out["msg"], (args, res.out["msg"])
        assert netns_links(ns) == ["lo"], args
        assert daemon.cni("DEL", "asker", ns, conf).rc == 0
    assert [a for c, _, a in live(daemon)] == ["10.181.0.40"]
    assert len(bridge_ports(br)) == 1
    assert daemon.cni("DEL", "holder", first, conf).rc == 0


def test_a_delegates_own_ipam_and_mac_get_the_request_through_args(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    """Delegates that declare no capability: host-local reads ``args.cni.ips``, the
    bridge ``args.cni.mac``."""
    br = daemon.name("r1")
    daemon.add_network("hl", bridge_conf("hl", br, "10.181.1.0/24", ipam_dir=daemon.ipam_dir))
    daemon.start()
    conf = daemon.conf("hl", "1.0.0")
    ns = netns()
    res = daemon.cni("ADD", "hl1", ns, conf, args=("IP=10.181.1.66", f"MAC={MAC}"))
    assert res.rc == 0, res.describe()
    assert netns_addrs(ns)["eth0"] == ["10.181.1.66/24"] and _mac(ns) == MAC
    assert ipam_held(daemon.ipam_dir) == ["hl/10.181.1.66"]
    taken = daemon.cni("ADD", "hl2", netns(), conf, args=("IP=10.181.1.66",))
    assert taken.rc == 1 and taken.out is not None, taken.describe()
    assert "10.181.1.66" in taken.out["msg"]
    assert ipam_held(daemon.ipam_dir) == ["hl/10.181.1.66"]
    assert daemon.cni("DEL", "hl1", ns, conf).rc == 0
    assert ipam_held(daemon.ipam_dir) == [] and bridge_ports(br) == []
