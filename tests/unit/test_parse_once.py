"""We test these aspects of a request parsed once and carried down (issue 19, item 5):

- :class:`~netctl.engine.conf.Call`: the netctl conf is decoded when first asked for and
  the same object kept; a DEL's call with a conf that is not one fails only if asked;
- :class:`~netctl.engine.chains.Served`: an attachment's served IPAM sections parsed at
  planning (every one, code 7 naming the network for a bad one) and kept for its steps;
  read back from the journal, a bad section fails its own step only;
- the addresses a standalone selection asks for are checked by the selector, before
  anything runs (code 7 naming the network and the address).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from netctl.cni.config import parse_chain
from netctl.cni.request import Invocation, Request, decode
from netctl.engine.chains import Chains, Delegates, Served
from netctl.engine.choice import ArgsSelector, Choice
from netctl.engine.conf import Call
from netctl.errors import DECODE_FAILURE, INVALID_CONFIG, CNIError
from netctl.ipam.store import IndexStore
from netctl.journal.records import Attachment
from netctl.journal.store import open_journal

SERVED = frozenset({"netctl-ipam"})
META = json.dumps({"cniVersion": "1.1.0", "name": "netctl", "type": "netctl-cni",
                   "clusterNetwork": "cluster"})


def invocation(verb: str, stdin: str, args: str = "") -> Invocation:
    return decode(Request(command=verb, container_id="c1", netns="/run/netns/x",
                          ifname="eth0", args=args, stdin=stdin))


def chain(*plugins: dict[str, object]) -> Attachment:
    return Attachment(container_id="c1", ifname="eth0", network="default/blue",
                      chain=parse_chain({"cniVersion": "1.0.0", "name": "blue",
                                         "plugins": list(plugins)}, "network blue"))


BRIDGE = {"type": "bridge", "isGateway": True,
          "ipam": {"type": "netctl-ipam", "range": "10.9.0.0/24"}}
TUNING = {"type": "tuning"}
BAD = {"type": "bridge", "ipam": {"type": "netctl-ipam", "range": "10.9.0.0/99"}}


def test_the_conf_is_decoded_when_asked_and_kept() -> None:
    call = Call(invocation("ADD", META))
    conf = call.conf
    assert conf.name == "netctl" and conf.clusterNetwork == "cluster"
    assert call.conf is conf


def test_a_del_whose_conf_is_not_one_fails_only_when_asked() -> None:
    call = Call(invocation("DEL", "not json"))
    assert call.inv.conf is None
    with pytest.raises(CNIError) as info:
        _ = call.conf
    assert info.value.code == DECODE_FAILURE


def served_at_planning(att: Attachment, state_dir: Path) -> Served:
    """What an ADD's planning parses (:meth:`Chains.served`: no journal call)."""
    async def main() -> Chains:
        async with open_journal(state_dir) as journal:
            return Chains(journal, Delegates([], ipam_types=SERVED), IndexStore())

    return trio.run(main).served(att)


def test_planning_parses_every_served_section_once_for_the_steps(tmp_path: Path) -> None:
    served = served_at_planning(chain(BRIDGE, TUNING), tmp_path)
    parsed = served.section(0)
    assert parsed is not None
    cfg, ranges = parsed
    assert cfg.type == "netctl-ipam" and [str(r.gateway) for r in ranges] == ["10.9.0.1"]
    assert served.section(0) is parsed  # the steps get the planning's parse
    assert served.has(0) and not served.has(1) and served.section(1) is None


def test_planning_refuses_a_bad_section_naming_the_network(tmp_path: Path) -> None:
    with pytest.raises(CNIError) as info:
        served_at_planning(chain(TUNING, BAD), tmp_path)
    assert info.value.code == INVALID_CONFIG
    assert info.value.msg.startswith("network 'default/blue': ")


def test_read_back_a_bad_section_fails_its_own_step_only() -> None:
    served = Served(chain(BAD, BRIDGE).chain, SERVED)
    assert served.section(1) is not None
    with pytest.raises(CNIError) as info:
        served.section(0)
    assert info.value.code == INVALID_CONFIG


def test_a_standalone_selection_asking_for_a_non_address_is_refused_before_planning() -> None:
    def select(selection: str) -> Choice:
        inv = invocation("ADD", META, f"NETCTL_NETWORKS={selection}")
        return trio.run(ArgsSelector().select, Call(inv).conf, inv)

    with pytest.raises(CNIError) as info:
        select('[{"name":"red","ips":["10.0.0.300/24"]}]')
    assert info.value.code == INVALID_CONFIG
    assert info.value.msg == ("NETCTL_NETWORKS: network 'red': requested address "
                              "'10.0.0.300/24' is not an IP address")
    chosen = select('[{"name":"red","ips":["10.0.0.30/24"]}]')
    assert [s.ips for s in chosen.networks] == [["10.0.0.30/24"]]
