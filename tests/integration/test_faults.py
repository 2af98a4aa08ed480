"""We test these aspects: a faulty delegate as the second of three networks.

For each way a delegate can fail (a CNI error, a hang, a crash, garbage on
stdout) the caller gets rc 1 and the expected code with a message naming the
network and the plugin; every step that started is DELeted again (the journal
shows a DEL step per started ADD step and the operation 'compensated'); the
netns and the host hold nothing of the pod; and the daemon keeps serving.

A failure stops the sibling chains between steps but does not kill the step
each is running: so every sibling step in the journal is 'ok' (none killed
half-way, which could leave a macvlan under its temporary name in the netns
or a bridge without its MAC that the bridge plugin can no longer ADD to), and
the same bridge serves the next pod.

Subnets: 10.111.0-1.0/24.
"""

from __future__ import annotations

import json

import pytest
from netctl_kit import journaldb

from tests.conftest import (
    Daemon,
    assert_still_serves,
    bridge_conf,
    bridge_ports,
    host_links,
    ipam_held,
    macvlan_conf,
    netns_links,
    owned_processes,
)

pytestmark = pytest.mark.netns

FAULTY = "faulty"
# plugin → (expected code, a fragment of the message that says what went wrong)
FAULTS = {
    "fail": (7, "netctl-test-fail: refused on purpose"),
    "hang": (101, "did not finish ADD within 2s and was killed"),
    "crash": (102, "was killed by signal 11 without a CNI error"),
    "garbage": (103, "printed malformed JSON on ADD"),
}


def faulty_conf(name: str, plugin: str) -> dict[str, object]:
    return {"cniVersion": "1.0.0", "name": name, "plugins": [{"type": plugin}]}


def add_steps_undone(daemon: Daemon, op_id: int) -> list[tuple[object, ...]]:
    """(attachment, position, plugin) of every started ADD step lacking an ok DEL step."""
    return [(s["attachment_id"], s["position"], s["plugin_type"])
            for s in daemon.read(journaldb.add_steps_not_undone, op_id, undone_in=op_id)]


def host_side_links(daemon: Daemon, op_id: int) -> list[str]:
    """Host interfaces (no ``sandbox``) that the operation's ADD steps reported creating."""
    names = []
    for step in daemon.read(journaldb.step_rows, operation=op_id, verb="ADD"):
        if step["result"] is not None:
            names += [i["name"] for i in json.loads(step["result"]).get("interfaces", [])
                      if not i.get("sandbox")]
    return names


@pytest.mark.parametrize("plugin", list(FAULTS))
def test_faulty_second_network_is_compensated(daemon: Daemon, netns, veth_parent: str,
                                              plugin: str) -> None:
    code, what = FAULTS[plugin]
    br = daemon.name("b")
    daemon.add_network("br", bridge_conf("br", br, "10.111.0.0/24", ipam_dir=daemon.ipam_dir))
    daemon.add_network(FAULTY, faulty_conf(FAULTY, plugin))
    daemon.add_network("mv", macvlan_conf("mv", veth_parent, "10.111.1.0/24",
                                          ipam_dir=daemon.ipam_dir))
    daemon.settings["plugin-timeout"] = 2
    daemon.start()
    ns = netns()
    mine_before = set(host_links(daemon.name("")))
    conf = daemon.conf("br")

    res = daemon.cni("ADD", "fault1", ns, conf, networks=f"{FAULTY},mv", pod="default/fault1")

    assert res.rc == 1, res.stdout + res.stderr
    assert res.out is not None, res.stdout
    assert res.out["code"] == code, res.out
    assert res.out["cniVersion"] == "1.1.0"
    msg = res.out["msg"]
    assert f"network 'default/{FAULTY}'" in msg and f"plugin '{plugin}'" in msg, msg
    assert what in msg, msg
    # Nothing of the pod is left: no delegate process (the hang's sleep was killed),
    # nothing in its netns, not on the bridge, no host veth, no address lease.
    assert owned_processes(daemon) == []
    assert netns_links(ns) == ["lo"]
    assert bridge_ports(br) == []
    assert set(host_links(daemon.name(""))) - mine_before <= {br}
    assert ipam_held(daemon.ipam_dir) == []
    # The journal: compensated, with a DEL for every ADD step that started.
    ops = daemon.read(journaldb.operation_rows, verb="ADD", container="fault1")
    assert len(ops) == 1
    op_id, state, op_code = ops[0]["id"], ops[0]["state"], ops[0]["code"]
    assert (state, op_code) == ("compensated", code)
    adds = daemon.read(journaldb.step_rows, operation=op_id, verb="ADD")
    assert plugin in [s["plugin_type"] for s in adds]
    assert add_steps_undone(daemon, op_id) == []
    atts = [(a["network"], a["state"])
            for a in daemon.read(journaldb.attachment_rows, add_op=op_id)]
    assert ("default/faulty", "removed") in atts
    assert all(s == "removed" for _, s in atts), atts
    failed = [(s["plugin_type"], s["code"]) for s in adds if s["state"] == "failed"
              and s["error"] is not None and not s["error"].lower().startswith("cancelled")]
    assert failed == [(plugin, code)]
    # No sibling step was killed half-way: each that had its config finished (within the
    # cancel grace); one cancelled before it had its config was killed before doing anything.
    siblings = [(s["plugin_type"], s["state"], s["error"]) for s in adds
                if s["plugin_type"] != plugin]
    assert all(state == "ok" or error == "cancelled before the plugin had its config; killed"
               for _, state, error in siblings), siblings
    leftovers = set(host_side_links(daemon, op_id)) & set(host_links())
    assert leftovers <= {br}, leftovers
    if plugin == "hang":
        # The siblings finished long before the timeout: compensation undid real work.
        done = sorted(s["plugin_type"] for s in adds if s["state"] == "ok")
        assert done == ["bridge", "macvlan"]
        assert any(n.startswith("veth") for n in host_side_links(daemon, op_id))

    # The runtime's DEL after a failed ADD finds nothing left to do.
    res = daemon.cni("DEL", "fault1", ns, conf, networks=f"{FAULTY},mv", pod="default/fault1")
    assert res.rc == 0, res.stdout + res.stderr
    assert [s for s in daemon.read(journaldb.step_rows) if s["operation_id"] != op_id] == []

    assert_still_serves(daemon, netns(), "br", br)
