"""We test these aspects: the interface a hot-plugged network gets when none is named
(the first free ``netN``), and which live attachment ``netctl detach`` picks — by
interface, by network when it is attached once — and its refusals: ambiguous, nothing
matching, the runtime's own interface."""

from __future__ import annotations

import pytest

from netctl.cni.config import parse_chain
from netctl.cni.request import Pod
from netctl.engine.hotplug import names_network, target
from netctl.engine.selection import next_ifname
from netctl.errors import INVALID_CONFIG, CNIError
from netctl.journal.records import Attachment


def test_next_ifname_takes_the_first_free_netN() -> None:
    assert next_ifname([]) == "net1"
    assert next_ifname(["lo", "eth0"]) == "net1"
    assert next_ifname(["lo", "eth0", "net1"]) == "net2"
    assert next_ifname(["net1", "net3"]) == "net2"  # a gap is filled
    assert next_ifname(["net2", "net1", "net3", "net10"]) == "net4"
    assert next_ifname({"net1": 0}.keys()) == "net2"


def att(ifname: str, network: str, name: str, default: bool = False) -> Attachment:
    chain = parse_chain({"cniVersion": "1.0.0", "name": name, "type": "bridge"}, "test")
    return Attachment(container_id="c1", ifname=ifname, network=network, chain=chain,
                      is_default=default, pod=Pod(namespace="web", name="p"))


LIVE = [att("eth0", "default/br", "br", default=True), att("net1", "default/br2", "br2"),
        att("net2", "web/db", "dbnet"), att("net3", "web/db", "dbnet")]


def test_names_network_by_key_bare_name_or_cni_name() -> None:
    br2 = LIVE[1]
    assert names_network(br2, "default/br2") and names_network(br2, "br2")
    assert not names_network(br2, "web/br2") and not names_network(br2, "br")
    db = LIVE[2]
    assert names_network(db, "db")  # in the pod's namespace
    assert names_network(db, "dbnet")  # its CNI name
    assert not names_network(db, "default/db")


def test_target_by_interface_or_by_network_attached_once() -> None:
    assert target(LIVE, ifname="net1") is LIVE[1]
    assert target(LIVE, network="br2") is LIVE[1]
    assert target(LIVE, ifname="net3", network="db") is LIVE[3]


@pytest.mark.parametrize(("ifname", "network", "says"), [
    ("", "db", "attached 2 times to container c1 (interfaces net2, net3): name one"),
    ("net7", "", "no live attachment on interface net7; it has: eth0 (default/br), "),
    ("", "nope", "no live attachment of network 'nope'"),
    ("net1", "db", "no live attachment on interface net1 and of network 'db'"),
    ("eth0", "", "is its cluster network (default/br), which the runtime made"),
    ("", "br", "is its cluster network"),
])
def test_target_refusals(ifname: str, network: str, says: str) -> None:
    with pytest.raises(CNIError) as caught:
        target(LIVE, ifname, network)
    assert caught.value.code == INVALID_CONFIG
    assert says in caught.value.msg, caught.value.msg
