"""We test these aspects of the daemon's log lines (``netctl.logs``):

- JSON: one object per line with ``time`` (RFC 3339, UTC, milliseconds), ``level``,
  ``logger``, ``msg``, the bound context (empty fields left out) and ``exc``;
- logfmt: values quoted and escaped as the convention asks, read back by the tests'
  parser whatever the message holds (spaces, quotes, ``=``, backslashes, newlines);
- text: the historical line with the context appended, a traceback below it;
- the context follows trio's tasks: chains started in one nursery each log their own
  ``network`` and all the pod's ``op``; a bound block is undone after it;
- a journal event's line (``journal-log``) carries the event's fields and not the task's
  context: all of them in JSON (null when empty), those not empty in logfmt and text;
- levels: ``LEVEL[,LOGGER=LEVEL…]``; at debug netctl's lines pass and aiosqlite's and
  pyroute2's do not, unless named; a bad level or format is refused.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import trio

from netctl import logs
from netctl.journal.events import FIELDS, EventLog
from tests.conftest import parse_logfmt


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """The root logger's handler (and the loggers' levels) as the test set them; the
    pytest handlers put back after."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    touched = ["netctl", "aiosqlite", "pyroute2"]
    levels = {n: logging.getLogger(n).level for n in touched}
    stream = io.StringIO()
    try:
        yield stream
    finally:
        for h in root.handlers[:]:
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_json_line(output: io.StringIO) -> None:
    logs.configure("info", "json", output)
    with logs.bound(op=12, verb="ADD", container="c1", pod="default/web", network=""):
        logging.getLogger("netctl.engine").info("ADD done: %s", "br as eth0")
    (line,) = lines(output)
    obj = json.loads(line)
    assert list(obj) == ["time", "level", "logger", "msg", "op", "verb", "container", "pod"]
    assert obj["time"].endswith("Z") and len(obj["time"]) == len("2026-11-23T07:28:19.123Z")
    assert (obj["level"], obj["logger"], obj["msg"]) == ("info", "netctl.engine",
                                                         "ADD done: br as eth0")
    assert (obj["op"], obj["pod"]) == (12, "default/web")


def test_json_exception(output: io.StringIO) -> None:
    logs.configure("info", "json", output)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("netctl.server").exception("internal error")
    (line,) = lines(output)
    obj = json.loads(line)
    assert obj["level"] == "error" and "RuntimeError: boom" in obj["exc"]


@pytest.mark.parametrize("msg", ["plain", "two words", 'a "quoted" = thing', "back\\slash",
                                 "multi\nline\ttab", "", "ünïcode ok", "key=value"])
def test_logfmt_round_trip(output: io.StringIO, msg: str) -> None:
    logs.configure("info", "logfmt", output)
    with logs.bound(op=3, verb="DEL", container="abc", pod="ns/p"):
        logging.getLogger("netctl.engine").warning("%s", msg)
    (line,) = lines(output)
    pairs = parse_logfmt(line)
    assert pairs["msg"] == msg
    assert (pairs["level"], pairs["logger"]) == ("warning", "netctl.engine")
    assert (pairs["op"], pairs["verb"], pairs["container"], pairs["pod"]) == \
        ("3", "DEL", "abc", "ns/p")


def test_logfmt_value_quoting() -> None:
    assert logs.logfmt_value("eth0") == "eth0"
    assert logs.logfmt_value("") == '""'
    assert logs.logfmt_value("a b") == '"a b"'
    assert logs.logfmt_value('say "hi"') == '"say \\"hi\\""'
    assert logs.logfmt_value("x=1") == '"x=1"'
    assert logs.logfmt_value("l1\nl2") == '"l1\\nl2"'


def test_text_line_with_context_and_traceback(output: io.StringIO) -> None:
    logs.configure("info", "text", output)
    with logs.bound(op=7, verb="ADD"):
        try:
            raise ValueError("bad")
        except ValueError:
            logging.getLogger("netctl.engine").exception("it failed")
    first, *rest = lines(output)
    assert first.endswith("ERROR netctl.engine: it failed op=7 verb=ADD")
    assert rest[0].startswith("Traceback") and rest[-1] == "ValueError: bad"


def test_context_follows_trio_tasks(output: io.StringIO) -> None:
    logs.configure("debug", "json", output)
    log = logging.getLogger("netctl.engine")

    async def chain(network: str, ifname: str) -> None:
        with logs.bound(network=network):
            for _ in range(3):
                await trio.lowlevel.checkpoint()  # the chains interleave
                log.debug("step of %s", ifname)

    async def request() -> None:
        logs.bind(verb="ADD", container="c9", pod="default/two")
        logs.bind(op=41)  # as the journal does when it begins the operation
        async with trio.open_nursery() as nursery:
            nursery.start_soon(chain, "br", "eth0")
            nursery.start_soon(chain, "br2", "net1")
        log.info("ADD done")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(request)
            nursery.start_soon(request)  # another request: its own context
        log.info("after")

    trio.run(main)
    objs = [json.loads(line) for line in lines(output)]
    steps = [o for o in objs if o["msg"].startswith("step")]
    assert len(steps) == 12
    for o in steps:
        assert (o["op"], o["verb"], o["pod"]) == (41, "ADD", "default/two")
        assert o["network"] == {"step of eth0": "br", "step of net1": "br2"}[o["msg"]]
    done = [o for o in objs if o["msg"] == "ADD done"]
    assert len(done) == 2 and all("network" not in o and o["op"] == 41 for o in done)
    assert objs[-1] == {k: objs[-1][k] for k in ("time", "level", "logger", "msg")}


def test_levels(output: io.StringIO) -> None:
    assert logs.parse_levels("debug") == (logging.DEBUG, {})
    assert logs.parse_levels("INFO, aiosqlite=debug") == (logging.INFO,
                                                          {"aiosqlite": logging.DEBUG})
    assert logs.parse_levels("pyroute2=error") == (logging.INFO, {"pyroute2": logging.ERROR})
    with pytest.raises(ValueError, match="loud"):
        logs.parse_levels("loud")
    with pytest.raises(ValueError, match="log format"):
        logs.configure("info", "xml", output)

    logs.configure("debug", "logfmt", output)
    logging.getLogger("netctl.journal").debug("ours")
    logging.getLogger("aiosqlite").debug("executing a statement")
    logging.getLogger("pyroute2.ndb").info("chatty")
    logging.getLogger("pyroute2").warning("worth seeing")
    assert [parse_logfmt(line)["msg"] for line in lines(output)] == ["ours", "worth seeing"]

    logs.configure("warning,aiosqlite=debug", "logfmt", output)
    logging.getLogger("netctl.engine").info("not shown")
    logging.getLogger("aiosqlite").debug("asked for")
    assert parse_logfmt(lines(output)[-1])["msg"] == "asked for"


EVENT = {"node": "node-a", "at": "2026-11-27T07:28:19.123Z", "event": "allocated", "op": 7,
         "verb": "ADD", "pod": "shop/web-1", "uid": "u-1", "container": "c1",
         "ifname": "eth0", "network": "default/blue", "address": "10.1.0.5",
         "pool": "10.1.0.0/24", "origin": "runtime", "state": None, "code": None,
         "error": None, "reason": None, "finished": None}


@pytest.mark.parametrize("fmt", ["json", "logfmt", "text"])
def test_a_journal_event_line_carries_the_event_not_the_context(output: io.StringIO,
                                                                fmt: str) -> None:
    logs.configure("info", fmt, output)
    with logs.bound(op=99, verb="DEL", container="other", pod="x/y", network="n"):
        EventLog("node-a")([EVENT])
    (line,) = lines(output)
    if fmt == "json":
        obj = json.loads(line)
        assert list(obj) == ["time", "level", "logger", "msg", *FIELDS]
        assert {k: obj[k] for k in FIELDS} == EVENT
        assert (obj["logger"], obj["msg"]) == ("netctl.journal.events", "allocated 10.1.0.5")
        return
    pairs = line.split("netctl.journal.events: allocated 10.1.0.5 ", 1)[1] \
        if fmt == "text" else line
    parsed = parse_logfmt(pairs)
    assert {k: v for k, v in parsed.items() if k in FIELDS} == {
        k: str(v) for k, v in EVENT.items() if v is not None}
