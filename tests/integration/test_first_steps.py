"""We test this aspect of the journal's steps with a real daemon, real network namespaces
and the real bridge and tuning plugins: each chain's first step is begun in its
operation's own transaction — an ADD's with the addresses netctl gives it, a DEL's
first (the last step started) likewise — and the later steps each in a transaction of
their own, so a pod of N networks costs N commits fewer; what the journal says of the
ADD and the DEL is otherwise what it was: every step in order and ok, every address
given and then released, nothing left. One transaction's rows carry one clock reading,
so a step begun with its operation has the operation's ``started_at`` exactly.

Subnets: 10.144.0-2.0/24.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from netctl_kit import journaldb

from tests.conftest import Daemon, ipam_bridge, netns_links

pytestmark = pytest.mark.netns

NETWORKS = ("red", "green", "blue")  # blue: bridge, then tuning (a second step)


def began(daemon: Daemon, container: str, verb: str
          ) -> tuple[int, dict[tuple[str, int, str], tuple[bool, bool, str]]]:
    """The container's ``verb`` operation's id, and per step (network, position, plugin):
    whether it began in the operation's transaction, whether it began at all after it,
    and its state."""
    (op,) = daemon.read(journaldb.operation_rows, container=container, verb=verb)
    op_id, op_at = op["id"], op["started_at"]
    return op_id, {(s["network_name"], s["position"], s["plugin_type"]):
                   (s["started_at"] == op_at, s["started_at"] >= op_at, s["state"])
                   for s in daemon.read(journaldb.step_rows, operation=op_id)}


def test_each_chains_first_step_begins_with_its_operation(
        daemon: Daemon, netns: Callable[[], str]) -> None:
    for i, name in enumerate(NETWORKS):
        conf = ipam_bridge(name, daemon.name(f"fs{i}"),
                           {"type": "netctl-ipam", "range": f"10.144.{i}.0/24"})
        if name == "blue":
            conf["plugins"].append({"type": "tuning"})
        daemon.add_network(name, conf)
    daemon.start()
    ns = netns()
    daemon.cni("ADD", "fs-1", ns, daemon.conf("red"), networks="green,blue")
    add_id, steps = began(daemon, "fs-1", "ADD")
    assert steps == {
        ("blue", 0, "bridge"): (True, True, "ok"),  # with the operation
        ("blue", 1, "tuning"): (False, True, "ok"),  # after the bridge's result
        ("green", 0, "bridge"): (True, True, "ok"),
        ("red", 0, "bridge"): (True, True, "ok"),
    }
    given = [(a["allocated_op"], a["released_at"])
             for a in daemon.read(journaldb.allocation_rows, container="fs-1")]
    assert given == [(add_id, None)] * 3  # recorded by the operation's first transaction

    daemon.cni("DEL", "fs-1", ns, daemon.conf("red"), networks="green,blue")
    del_id, steps = began(daemon, "fs-1", "DEL")
    assert steps == {
        ("blue", 0, "bridge"): (False, True, "ok"),  # after tuning's DEL
        ("blue", 1, "tuning"): (True, True, "ok"),  # the last started: first undone
        ("green", 0, "bridge"): (True, True, "ok"),
        ("red", 0, "bridge"): (True, True, "ok"),
    }
    assert [a["released_op"] for a in daemon.read(journaldb.allocation_rows, container="fs-1")
            if a["released_at"] is not None] == [del_id] * 3
    assert [o["state"] for o in daemon.read(journaldb.operation_rows, container="fs-1")] == [
        "done", "done"]
    assert netns_links(ns) == ["lo"]
