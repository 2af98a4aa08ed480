"""We test how the read commands find what a person names, on a real journal file made by
the migrations runner, with rows written by hand, and through ``netctl.commands.cli.main``:

- ``--container``: the full id; a unique prefix (runtimes print 12 of 64 characters); an
  id that is itself a prefix of another still means itself; an ambiguous prefix is an
  error naming the candidates (capped); an unknown prefix matches nothing;
- ``--pod NAME`` without a namespace matches that name in any namespace (podman's pods
  have none; shown as the name alone), ``NS/NAME`` only that one, ``/NAME`` only the
  pod without a namespace — for attachments and for allocations; ``--namespace NS`` and
  ``--pod 'NS/*'`` are the same query (with ``--pod NAME``: that pod of it; a pod of
  another namespace is refused); ``--pod`` shows the pod's operations;
- a journal not migrated to 0007 (an older daemon still running) shows no ``reason``;
- ``ipam show``: a pool key as before; a network's name — the IPAM ``network_name``, the
  network of the attachments that held its addresses (NAD ``ns/name``, NAD name, CNI
  name), or a plain-plugin request's CNI name — shows all of its pools; an unknown name
  exits 1 naming it and the known pools.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from netctl_kit import journaldb

from netctl.commands import cli
from netctl.journal import query
from netctl.journal.migrate import migrate

T0 = 1_700_000_000.0
PODMAN = "3f2a9c1be04d" + "7" * 52  # 64 characters, as podman and containerd make them
OTHER = "3f2a9c1be04e" + "1" * 52
SIBLING = "3f2a9c1be04e" + "2" * 52


class Rows:
    """A migrated journal and a writer of its rows."""

    def __init__(self, state_dir: Path) -> None:
        migrate(state_dir / "journal.db")
        self.conn = sqlite3.connect(state_dir / "journal.db", isolation_level=None)

    def attach(self, container: str, *, pod: str = "", network: str = "default/blue",
               chain: str = "blue", pool: str = "", address: str = "") -> None:
        ns, _, name = pod.rpartition("/")
        op = journaldb.write_operation(self.conn, verb="ADD", container_id=container,
                                       state="done", started_at=T0, caller_network="netctl",
                                       pod_namespace=ns, pod_name=name)
        att = journaldb.write_attachment(self.conn, container_id=container, state="attached",
                                         created_at=T0, network=network, network_name=chain,
                                         add_op=op, pod_namespace=ns, pod_name=name)
        if pool:
            self.alloc(pool, address, container, ns, name, att, op)

    def plain(self, container: str, caller: str, pool: str, address: str) -> None:
        """A plain-plugin allocation: an operation with the conf's name, no attachment."""
        op = journaldb.write_operation(self.conn, verb="ADD", container_id=container,
                                       state="done", started_at=T0, caller_network=caller,
                                       origin="ipam")
        self.alloc(pool, address, container, "", "", None, op)

    def pool(self, key: str, rng: str, network_name: str = "", family: int = 4) -> None:
        journaldb.write_pool(self.conn, key=key, pool_range=rng, size=253, created_at=T0,
                             family=family, network_name=network_name)

    def alloc(self, pool: str, address: str, container: str, ns: str, name: str,
              att: int | None, op: int | None) -> None:
        journaldb.write_allocation(self.conn, pool=pool, address=address, prefix=24,
                                   container_id=container, allocated_at=T0, netns="",
                                   pod_namespace=ns, pod_name=name, attachment_id=att,
                                   allocated_op=op)


@pytest.fixture
def rows(tmp_path: Path) -> Iterator[Rows]:
    r = Rows(tmp_path)
    try:
        yield r
    finally:
        r.conn.close()


@pytest.fixture
def read(tmp_path: Path, rows: Rows) -> Iterator[sqlite3.Connection]:
    """The CLI's read-only connection; use it after writing the rows."""
    conn = query.connect(tmp_path)
    try:
        yield conn
    finally:
        conn.close()


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str
        ) -> tuple[int, str, str]:
    code = cli.main([*args, "--state-dir", str(tmp_path)])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- --container ------------------------------------------------------------------------------

def test_container_prefix(rows: Rows, read: sqlite3.Connection) -> None:
    for cid in (PODMAN, OTHER, SIBLING):
        rows.attach(cid)
    conn = read
    assert query.resolve_container(conn, PODMAN) == PODMAN
    assert query.resolve_container(conn, PODMAN[:12]) == PODMAN
    assert query.resolve_container(conn, OTHER[:13]) == OTHER
    assert query.resolve_container(conn, "ffff") == "ffff"  # unknown: matches nothing
    with pytest.raises(query.AmbiguousContainer) as info:
        query.resolve_container(conn, "3f2a9c1be04e")
    assert info.value.candidates == [OTHER, SIBLING]
    assert f"{OTHER}, {SIBLING}" in str(info.value) and "3f2a9c1be04e" in str(info.value)


def test_container_that_prefixes_another_means_itself(rows: Rows, read: sqlite3.Connection) -> None:
    rows.attach("abc")
    rows.attach("abcdef")
    conn = read
    assert query.resolve_container(conn, "abc") == "abc"
    assert query.resolve_container(conn, "abcd") == "abcdef"


def test_ambiguous_prefix_names_a_few_candidates(rows: Rows, read: sqlite3.Connection) -> None:
    for i in range(15):
        rows.attach(f"cafe{i:02d}")
    with pytest.raises(query.AmbiguousContainer) as info:
        query.resolve_container(read, "cafe", limit=10)
    assert info.value.candidates == [f"cafe{i:02d}" for i in range(10)] + ["…"]


def test_journal_cli_container_prefix(rows: Rows, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    rows.attach(PODMAN, pod="web")
    rows.attach(OTHER)
    rows.attach(SIBLING)
    code, out, _ = run(tmp_path, capsys, "journal", "--container", PODMAN[:12], "--json")
    assert code == 0
    found = json.loads(out)
    assert [a["container"] for a in found["attachments"]] == [PODMAN]
    assert [o["container_id"] for o in found["operations"]] == [PODMAN]
    code, out, err = run(tmp_path, capsys, "journal", "--container", "3f2a9c1be04e")
    assert code == 1 and out == ""
    assert "ambiguous" in err and OTHER in err and SIBLING in err


# --- --pod --------------------------------------------------------------------------------------

def test_pod_without_namespace_matches_any(rows: Rows, read: sqlite3.Connection) -> None:
    rows.pool("10.9.0.0/24", "10.9.0.0/24")
    rows.attach("c1", pod="shop/web", pool="10.9.0.0/24", address="10.9.0.2")
    rows.attach("c2", pod="web", pool="10.9.0.0/24", address="10.9.0.3")  # podman: no ns
    rows.attach("c3", pod="shop/db", pool="10.9.0.0/24", address="10.9.0.4")
    conn = read

    def atts(pod: str) -> list[tuple[str, str]]:
        return [(a["container"], a["pod"]) for a in query.attachments(conn, pod=pod)]

    assert atts("web") == [("c1", "shop/web"), ("c2", "web")]
    assert atts("shop/web") == [("c1", "shop/web")]
    assert atts("/web") == [("c2", "web")]
    assert atts("db") == [("c3", "shop/db")]
    assert [a["container"] for a in query.allocations_at(conn, "10.9.0.3", pod="web")] == ["c2"]
    assert query.allocations_at(conn, "10.9.0.3", pod="shop/web") == []


def test_journal_cli_pod_name(rows: Rows, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    rows.attach("c1", pod="shop/web")
    rows.attach("c2", pod="web")
    code, out, _ = run(tmp_path, capsys, "journal", "--pod", "web")
    assert code == 0
    lines = first_table(out)[1:]
    assert [line.split()[:2] for line in lines] == [["c1", "shop/web"], ["c2", "web"]]


def first_table(out: str) -> list[str]:
    """The attachments' table of ``netctl journal``'s text (the operations follow it)."""
    return out.split("\n\n")[0].splitlines()


def test_journal_pod_shows_the_newest_attachments(rows: Rows, tmp_path: Path,
                                                  read: sqlite3.Connection,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A StatefulSet's pod name over a week: ``--pod`` shows the newest ``--limit`` (100 by
    default), oldest first, and says older ones exist; ``--limit 0`` shows all; the
    query reads them newest first from the index (never the whole history)."""
    for i in range(130):
        rows.attach(f"c{i:03}", pod="shop/db-0")
    rows.attach("other", pod="shop/db-1")
    newest = [a["container"] for a in query.attachments(read, pod="shop/db-0", limit=5)]
    assert newest == ["c125", "c126", "c127", "c128", "c129"]
    plan = journaldb.pod_attachments_plan(read, "shop", "db-0", 5)
    assert "attachments_pod" in plan and "TEMP B-TREE" not in plan, plan
    code, out, err = run(tmp_path, capsys, "journal", "--pod", "shop/db-0", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["older_attachments"] is True
    assert [a["container"] for a in doc["attachments"]] == [f"c{i:03}" for i in range(30, 130)]
    code, out, err = run(tmp_path, capsys, "journal", "--pod", "shop/db-0")
    assert code == 0 and len(first_table(out)) == 101 and "--limit 0" in err
    code, out, _ = run(tmp_path, capsys, "journal", "--pod", "shop/db-0", "--limit", "0",
                       "--json")
    doc = json.loads(out)
    assert len(doc["attachments"]) == 130 and doc["older_attachments"] is False
    code, out, err = run(tmp_path, capsys, "journal", "--pod", "shop/db-1")
    assert len(first_table(out)) == 2 and err == ""


def test_namespace_and_pod_star_are_one_query(rows: Rows, read: sqlite3.Connection,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rows.attach("c1", pod="shop/web")
    rows.attach("c2", pod="shop/db")
    rows.attach("c3", pod="ops/web")
    rows.attach("c4", pod="web")
    assert query.pod_selector("shop/*", None) == query.pod_selector(None, "shop") == "shop/*"
    assert query.pod_selector("web", "shop") == "shop/web"
    assert query.pod_selector("shop/web", "shop") == "shop/web"
    with pytest.raises(ValueError, match="not in --namespace ops"):
        query.pod_selector("shop/web", "ops")
    docs = []
    for args in (["--namespace", "shop"], ["--pod", "shop/*"]):
        code, out, _ = run(tmp_path, capsys, "journal", *args, "--json")
        docs.append(json.loads(out))
        assert code == 0
    assert docs[0] == docs[1]
    assert [a["container"] for a in docs[0]["attachments"]] == ["c1", "c2"]
    assert [(o["verb"], o["container_id"]) for o in docs[0]["operations"]] == [
        ("ADD", "c1"), ("ADD", "c2")]
    code, out, _ = run(tmp_path, capsys, "journal", "--namespace", "shop", "--pod", "web",
                       "--json")
    assert [a["container"] for a in json.loads(out)["attachments"]] == ["c1"]
    code, _, err = run(tmp_path, capsys, "journal", "--namespace", "ops", "--pod", "shop/web")
    assert code == 1 and "--pod shop/web is not in --namespace ops" in err
    code, out, _ = run(tmp_path, capsys, "journal", "--pod", "web", "--json")
    doc = json.loads(out)  # the pod's operations, not only its attachments
    assert [o["container_id"] for o in doc["operations"]] == ["c1", "c3", "c4"]
    assert [o["pod"] for o in doc["operations"]] == ["shop/web", "ops/web", "web"]


def test_a_journal_without_the_reason_column(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A journal an older daemon still writes (schema 6): no reason, nothing fails."""
    rows = Rows(tmp_path)
    rows.attach("c1", pod="shop/web")
    journaldb.simulate_no_reason(rows.conn)
    rows.conn.close()
    code, out, _ = run(tmp_path, capsys, "journal", "--container", "c1", "--json")
    assert code == 0
    assert [(o["verb"], o["reason"]) for o in json.loads(out)["operations"]] == [("ADD", None)]


# --- ipam show NETWORK ------------------------------------------------------------------------

def test_network_pools(rows: Rows, read: sqlite3.Connection) -> None:
    rows.pool("red/10.1.0.0/24", "10.1.0.0/24", network_name="red")
    rows.pool("red/fd00:1::/64", "fd00:1::/64", network_name="red", family=6)
    rows.pool("10.2.0.0/24", "10.2.0.0/24")
    rows.pool("10.3.0.0/24", "10.3.0.0/24")
    rows.attach("c1", network="team/blue", chain="blue-chain", pool="10.2.0.0/24",
                address="10.2.0.2")
    rows.plain("c2", "plainnet", "10.3.0.0/24", "10.3.0.2")
    conn = read
    assert query.network_pools(conn, "red") == ["red/10.1.0.0/24", "red/fd00:1::/64"]
    for name in ("team/blue", "blue", "blue-chain"):
        assert query.network_pools(conn, name) == ["10.2.0.0/24"], name
    assert query.network_pools(conn, "plainnet") == ["10.3.0.0/24"]
    assert query.network_pools(conn, "netctl") == []  # the meta-plugin's own conf name
    assert query.network_pools(conn, "green") == []


def test_ipam_show_cli_by_network(rows: Rows, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    rows.pool("red/10.1.0.0/24", "10.1.0.0/24", network_name="red")
    rows.pool("red/fd00:1::/64", "fd00:1::/64", network_name="red", family=6)
    rows.attach("c1", network="default/red", chain="red", pool="red/10.1.0.0/24",
                address="10.1.0.2")
    code, out, _ = run(tmp_path, capsys, "ipam", "show", "red", "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["network"] == "red"
    assert [p["pool"]["key"] for p in shown["pools"]] == ["red/10.1.0.0/24", "red/fd00:1::/64"]
    assert [a["container"] for a in shown["pools"][0]["allocations"]] == ["c1"]
    code, out, _ = run(tmp_path, capsys, "ipam", "show", "red/10.1.0.0/24", "--json")
    assert code == 0 and json.loads(out)["pool"]["key"] == "red/10.1.0.0/24"  # as before
    code, out, _ = run(tmp_path, capsys, "ipam", "show", "red")
    assert code == 0
    assert "pool red/10.1.0.0/24:" in out and "pool red/fd00:1::/64:" in out
    code, out, err = run(tmp_path, capsys, "ipam", "show", "green")
    assert code == 1 and out == ""
    assert "no IPAM pool or network 'green'" in err and "red/10.1.0.0/24" in err
