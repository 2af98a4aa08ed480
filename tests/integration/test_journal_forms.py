"""We test these aspects of ``netctl journal`` on a real daemon, real netns and real plugins
(bridge with the central IPAM; the test delegates ``fail`` and ``faildel``), over
attachments in every state — attached, removed by the runtime's DEL, DELeted on kernel
events (netns gone), collected by GC, the leftovers of an ADD that failed and could not be
undone, a DEL that failed (stuck after the replay and the reconciler retried it), a DEL
the plugin recorded while the daemon was down, pods in two namespaces and one with none:

- for every query form (``--container`` id and 12-character prefix, ``--pod NS/NAME``,
  ``--pod NAME``, ``--pod 'NS/*'``, ``--namespace``, ``--ip``, ``--ip --at`` as UTC ``Z``,
  as an offset and without a zone, ``--since``, ``--network``, ``--running``, none) the
  JSON document and the text tables hold exactly the same attachments, allocations,
  blocks and operations, field by field (issue 16, defect 5: scripts never see less than
  people);
- ``--pod`` and ``--namespace`` show the operations, and ``--pod 'NS/*'`` is
  ``--namespace NS``;
- every DEL netctl began by itself carries its reason in the history (netns gone, GC,
  failed ADD not undone, start-up replay, the plugin's recorded DEL);
- times print as RFC 3339 in UTC (``Z``), or with ``--local`` with the local offset; a
  ``--at`` without a zone is read as UTC and says so (stderr, and ``notes`` in JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from netctl_kit.harness import netns_del

from netctl.commands import cli
from tests.conftest import Daemon, wait_for

pytestmark = pytest.mark.netns

POOL = "10.142.0.0/27"


def utc(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def cell(value: Any) -> str:
    text = " ".join(str(value).split()) if value is not None else ""
    return text or "-"


def expected_tables(doc: dict[str, Any]) -> list[list[tuple[str, ...]]]:
    """The rows a person must see, from the JSON document (its times as UTC RFC 3339)."""
    atts = [tuple(cell(v) for v in (
        a["container"], a["pod"], a["network"], a["ifname"], ",".join(a["addresses"]),
        a["state"], utc(a["since"]), utc(a["until"]))) for a in doc["attachments"]]
    tables = [atts]
    if doc["allocations"]:
        tables.append([tuple(cell(v) for v in (
            a["pool"], a["address"], a["container"], a["pod"], a["identity"] or "-",
            a["ifname"], utc(a["since"]), utc(a["until"]),
            f"until {utc(a['reserved_until'])}" + (f", {a['reservation_end']}"
                                                  if a["reservation_end"] else "")
            if a["reserved_until"] is not None else "-")) for a in doc["allocations"]])
    if doc["blocks"]:
        tables.append([tuple(cell(v) for v in (
            b["block"], b["pool"], b["node"], utc(b["since"]), utc(b["until"])))
            for b in doc["blocks"]])
    if doc["operations"]:
        tables.append([tuple(cell(v) for v in (
            o["id"], o["verb"], o["container_id"], o["pod"], o["origin"], o["state"],
            o["code"], utc(o["started_at"]), o["reason"], o["error"]))
            for o in doc["operations"]])
    return tables


def parse_tables(text: str) -> list[list[tuple[str, ...]]]:
    """The text output's tables, each row cut at its header's column starts."""
    out = []
    for block in text.rstrip("\n").split("\n\n"):
        lines = block.splitlines()
        starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
        bounds = list(zip(starts, [*starts[1:], None], strict=True))
        out.append([tuple(line[a:b].strip() for a, b in bounds) for line in lines[1:]])
    return out


def journal(capsys: pytest.CaptureFixture[str], daemon: Daemon, *args: str
            ) -> tuple[int, str, str]:
    code = cli.main(["journal", "--state-dir", str(daemon.state_dir), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def same_answer(capsys: pytest.CaptureFixture[str], daemon: Daemon, *args: str
                ) -> dict[str, Any]:
    """Run the query as JSON and as text; assert both hold the same rows; the document."""
    code, out, err = journal(capsys, daemon, *args, "--json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    code, text, text_err = journal(capsys, daemon, *args)
    assert code == 0, text_err
    assert parse_tables(text) == expected_tables(doc), (args, text, doc)
    for note in doc["notes"]:
        assert note in text_err
    return doc


def test_json_and_text_hold_the_same_rows_for_every_query(
        daemon: Daemon, netns: Callable[[], str], capsys: pytest.CaptureFixture[str]) -> None:
    daemon.add_network("blue", {"cniVersion": "1.0.0", "name": "blue", "plugins": [{
        "type": "bridge", "bridge": daemon.name("jb"), "isGateway": True, "ipam": {
            "type": "netctl-ipam", "range": POOL, "gateway": "10.142.0.1"}}]})
    daemon.add_network("halfadd", {"cniVersion": "1.0.0", "name": "halfadd", "plugins": [
        {"type": "faildel"}, {"type": "fail"}]})
    daemon.add_network("nodel", {"cniVersion": "1.0.0", "name": "nodel",
                                 "plugins": [{"type": "faildel"}]})
    daemon.settings["reconcile-grace"] = 0  # GC and the reconciler take what is gone at once
    daemon.start()
    blue = daemon.conf("blue")
    spaces = {name: netns() for name in ("att", "rem", "evt", "gc", "half", "nodel", "rec")}
    podman = "9c4e1d2b7a30" + "7" * 52
    ids = {"att": "jatt-1", "rem": "jrem-1", "evt": "jevt-1", "gc": "jgc-1",
           "half": "jhalf-1", "nodel": "jnodel-1", "rec": podman}

    def add(key: str, conf: dict[str, Any], pod: str = "", args: tuple[str, ...] = ()
            ) -> int:
        return daemon.cni("ADD", ids[key], spaces[key], conf, pod=pod, args=args).rc

    assert add("att", blue, "shop/web-1") == 0
    assert add("rem", blue, "shop/web-2") == 0
    assert daemon.cni("DEL", ids["rem"], spaces["rem"], blue).rc == 0
    assert add("evt", blue, "shop/web-3") == 0
    assert add("gc", blue, "ops/batch-1") == 0
    # the netns goes without a DEL: the daemon DELetes it on the kernel's event
    netns_del(spaces["evt"])
    wait_for(lambda: daemon.live_attachments_of([ids["evt"]]) == 0, what="event DEL")
    gc = dict(blue, **{"cni.dev/valid-attachments": [
        {"containerID": ids["att"], "ifname": "eth0"}]})
    assert daemon.cni("GC", "", None, gc, ifname="").rc == 0
    # a DEL that fails: the attachment stays, its DEL failure counted
    assert add("nodel", daemon.conf("nodel", name="netctl-nodel"), "shop/stuck-1") == 0
    assert daemon.cni("DEL", ids["nodel"], spaces["nodel"],
                      daemon.conf("nodel", name="netctl-nodel")).rc != 0
    # podman: no namespace; its DEL comes while the daemon is down (the plugin records it)
    assert add("rec", blue, args=("IgnoreUnknown=1", "K8S_POD_NAME=nginx")) == 0
    daemon.stop()
    assert daemon.cni("DEL", podman, spaces["rec"], blue).rc == 0
    daemon.start()  # replays the leftovers (they fail again), finishes the recorded DEL
    wait_for(lambda: daemon.live_attachments_of([podman]) == 0, what="recorded DEL")
    # an ADD that fails and cannot be undone (faildel refuses its DEL): adding, left over
    assert add("half", daemon.conf("halfadd"), "ops/half-1") != 0
    half = same_answer(capsys, daemon, "--container", ids["half"])
    assert [a["state"] for a in half["attachments"]] == ["adding"]
    assert [(o["verb"], o["state"]) for o in half["operations"]] == [
        ("ADD", "compensate_failed")]
    daemon.reconcile()  # DELs the leftovers of the failed ADD: fails, stuck, backing off

    everything = same_answer(capsys, daemon, "--limit", "0")
    states = {a["container"]: a["state"] for a in everything["attachments"]}
    assert states[ids["att"]] == "attached" and states[ids["half"]] in ("adding", "removing")
    assert {states[ids[k]] for k in ("rem", "evt", "gc", "rec")} == {"removed"}
    assert states[ids["nodel"]] in ("attached", "removing")
    stuck = daemon.reconcile(dry_run=True)["plan"]["stuck"]
    assert {a["container"] for a in stuck} == {ids["half"], ids["nodel"]}

    # the reason of every DEL netctl began by itself, in the history
    dels = [o for o in everything["operations"] if o["verb"] == "DEL"]
    by = {(o["container_id"], o["origin"]): o for o in dels}
    assert "netns" in by[(ids["evt"], "event")]["reason"] and "is gone" in \
        by[(ids["evt"], "event")]["reason"]
    assert "GC" in by[(ids["gc"], "gc")]["reason"]
    assert "recorded by the plugin" in by[(podman, "plugin-record")]["reason"]
    assert "replay" in by[(ids["nodel"], "replay")]["reason"]
    assert "failed ADD" in by[(ids["half"], "reconcile")]["reason"]
    assert by[(ids["rem"], "runtime")]["reason"] is None  # the runtime's own: no reason

    addresses = sorted({a for att in everything["attachments"] for a in att["addresses"]})
    assert len(addresses) == 5
    forms: list[tuple[str, ...]] = [(), ("--running",), ("--since", "1h"),
                                    ("--since", utc(everything["attachments"][0]["since"]))]
    for att in everything["attachments"]:
        forms += [("--container", att["container"]), ("--container", att["container"][:12])]
        if att["pod"]:
            forms.append(("--pod", att["pod"]))
        forms.append(("--network", att["network"]))
    forms += [("--pod", "web-1"), ("--pod", "nginx"), ("--pod", "/nginx"), ("--pod", "nope")]
    for ns in ("shop", "ops", "nowhere"):
        forms += [("--namespace", ns), ("--pod", f"{ns}/*"), ("--namespace", ns, "--limit", "2")]
    forms += [("--network", "blue"), ("--network", "default/halfadd")]
    for att in everything["attachments"]:
        for addr in att["addresses"]:
            during = att["since"] + 0.002
            forms += [("--ip", addr), ("--ip", addr.split("/")[0], "--at", utc(during))]
            offset = datetime.fromtimestamp(during, timezone(timedelta(hours=1)))
            forms.append(("--ip", addr, "--at", offset.isoformat(timespec="milliseconds")))
    for form in forms:
        doc = same_answer(capsys, daemon, *form)
        if form[:1] in (("--container",), ("--pod",), ("--namespace",)) and \
                doc["attachments"]:
            assert doc["operations"], form  # a container's or a pod's history has them

    # the 12-character prefix of the podman id names it; its ADD and its recorded DEL
    doc = same_answer(capsys, daemon, "--container", podman[:12])
    assert [(o["verb"], o["origin"]) for o in doc["operations"] if o["verb"] == "DEL"] == [
        ("DEL", "plugin-record")]
    assert doc["operations"][0]["verb"] == "ADD"
    # --pod shows the pod's operations, the GC's DEL (it names no pod) among them
    doc = same_answer(capsys, daemon, "--pod", "ops/batch-1")
    assert [(o["verb"], o["origin"]) for o in doc["operations"]] == [
        ("ADD", "runtime"), ("DEL", "gc")]
    # --pod 'NS/*' is --namespace NS
    assert same_answer(capsys, daemon, "--pod", "shop/*") == \
        same_answer(capsys, daemon, "--namespace", "shop")
    shop = same_answer(capsys, daemon, "--namespace", "shop")
    assert {a["pod"] for a in shop["attachments"]} == {
        "shop/web-1", "shop/web-2", "shop/web-3", "shop/stuck-1"}

    # --at without a zone: read as UTC, and said so on stderr and in the document
    att = next(a for a in everything["attachments"] if a["container"] == ids["rem"])
    naive = utc(att["since"] + 0.002).rstrip("Z")
    doc = same_answer(capsys, daemon, "--ip", att["addresses"][0], "--at", naive)
    assert [a["container"] for a in doc["attachments"]] == [ids["rem"]]
    assert doc["notes"] == [f"--at: {naive!r} has no time zone: read as UTC (give Z or an "
                            "offset such as +01:00 to say otherwise)"]
    _, text, _ = journal(capsys, daemon, "--container", ids["rem"])
    assert utc(att["since"]) in text and utc(att["since"]).endswith("Z")
    _, text, _ = journal(capsys, daemon, "--container", ids["rem"], "--local")
    local = datetime.fromtimestamp(att["since"], UTC).astimezone().isoformat(
        timespec="milliseconds")
    assert local in text

    # a prefix two containers start with: the same refusal either way
    for form in ((), ("--json",)):
        code, out, err = journal(capsys, daemon, "--container", "j", *form)
        assert code == 1 and out == "" and "is ambiguous" in err

    assert daemon.cni("DEL", ids["att"], spaces["att"], blue).rc == 0
