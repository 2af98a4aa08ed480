"""We test these aspects of the daemon's log, on a real daemon, real netns and the real
bridge plugin: with ``log-format: json`` and ``logfmt`` every line of the daemon's
output parses (one event per line, nothing else printed); the lines of an ADD over two
networks — whose chains run concurrently — carry the journal's operation id as ``op``,
the ``verb``, ``container`` and ``pod``, and each chain's steps their own ``network``;
the DEL's lines carry the DEL's operation; and a delegate's stderr is in the journal's
step (and the runtime's error details), never in the log.

Subnets: 10.125.1-2.0/24.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from netctl_kit import journaldb

from netctl.journal import query
from tests.conftest import Daemon, bridge_conf, parse_logfmt

pytestmark = pytest.mark.netns


def log_lines(daemon: Daemon, fmt: str) -> list[dict[str, str]]:
    """Every line of the daemon's output, parsed (a line that does not parse fails)."""
    out = []
    for n, line in enumerate(daemon.log().splitlines(), 1):
        try:
            obj: dict[str, Any] = json.loads(line) if fmt == "json" else parse_logfmt(line)
        except ValueError as exc:
            raise AssertionError(f"line {n} is not {fmt}: {line!r} ({exc})") from None
        assert isinstance(obj, dict), line
        assert {"time", "level", "logger", "msg"} <= obj.keys(), line
        out.append({k: str(v) for k, v in obj.items()})
    return out


def op_of(daemon: Daemon, verb: str, container: str) -> str:
    (op,) = daemon.read(journaldb.operation_rows, verb=verb, container=container)
    return str(op["id"])


@pytest.mark.parametrize("fmt", ["json", "logfmt"])
def test_the_lines_of_an_add_carry_its_operation(daemon: Daemon, netns: Any, fmt: str) -> None:
    daemon.settings["log-format"] = fmt
    for name, subnet in (("br", "10.125.1.0/24"), ("br2", "10.125.2.0/24")):
        daemon.add_network(name, bridge_conf(name, daemon.name(name), subnet,
                                             ipam_dir=daemon.ipam_dir))
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    res = daemon.cni("ADD", "logs1", ns, conf, networks="br2", pod="default/web")
    assert res.rc == 0, res.describe()
    assert daemon.cni("DEL", "logs1", ns, conf, pod="default/web").rc == 0

    lines = log_lines(daemon, fmt)
    add_op, del_op = op_of(daemon, "ADD", "logs1"), op_of(daemon, "DEL", "logs1")
    of_add = [line for line in lines if line.get("op") == add_op]
    of_del = [line for line in lines if line.get("op") == del_op]
    for line in of_add + of_del:
        assert (line.get("container"), line.get("pod")) == ("logs1", "default/web"), line
    assert {line["verb"] for line in of_add} == {"ADD"}
    assert {line["verb"] for line in of_del} == {"DEL"}
    assert [line["msg"] for line in of_add if line["msg"].startswith("ADD done")]
    assert [line["msg"] for line in of_del if line["msg"].startswith("DEL (runtime) done")]
    if fmt == "json":
        assert all(line["time"].endswith("Z") for line in lines)

    # the two chains ran at once, each in its own task: each step line names its network
    network_of = {a["ifname"]: a["network"]
                  for a in daemon.read(query.attachments, container="logs1")}
    assert sorted(network_of.values()) == ["default/br", "default/br2"]
    steps = [line for line in of_add + of_del if line["msg"].startswith("bridge ")]
    assert len(steps) == 4, steps  # ADD and DEL, on each network
    for line in steps:
        ifname = line["msg"].split(" of ")[1].split()[0]
        assert line["network"] == network_of[ifname], line


def test_a_delegates_stderr_goes_to_the_journal_not_the_log(daemon: Daemon,
                                                             netns: Any) -> None:
    daemon.settings["log-format"] = "json"
    daemon.add_network("fd", {"cniVersion": "1.0.0", "name": "fd", "plugins": [
        {"type": "faildel", "delcode": 0}]})  # its DEL crashes, saying so on stderr
    daemon.add_network("br", bridge_conf("br", daemon.name("b"), "10.125.1.0/24",
                                         ipam_dir=daemon.ipam_dir))
    daemon.start()
    ns = netns()
    conf = daemon.conf("br")
    assert daemon.cni("ADD", "logs2", ns, conf, networks="fd").rc == 0
    res = daemon.cni("DEL", "logs2", ns, conf)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 107, res.describe()

    said = "netctl-test-faildel: crashed on purpose"
    dels = {o["id"] for o in daemon.read(journaldb.operation_rows, verb="DEL")}
    (stderr,) = [s["stderr"] for s in daemon.read(journaldb.step_rows, plugin="faildel")
                 if s["operation_id"] in dels]
    assert said in bytes(stderr).decode()
    assert said in res.out.get("details", ""), res.out  # the runtime is told too
    lines = log_lines(daemon, "json")
    failed = [line for line in lines if line["msg"].startswith("DEL (runtime) failed")]
    assert failed and failed[0]["op"] == op_of(daemon, "DEL", "logs2"), lines
    assert "crashed on purpose" not in daemon.log()
