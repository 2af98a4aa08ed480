"""We test how netctl reads and writes IPAMBlocks (:mod:`netctl.kubeapi.objects`,
:mod:`netctl.kubeapi.blocks`), on the objects three netctl 0.1.0 daemons left in the API
(``tests/fixtures/upgrade/ipamblocks.json``: blocks with sticky reservations, borrows with
grants, a history, a refused and a pending transfer ask):

- each is decoded as what it is: a :class:`Borrow` when its spec names a parent, else a
  :class:`Block`; a list as its items;
- decoded, then written back (the body of an update) it is the same JSON: spec, name,
  labels, uid and resourceVersion, apiVersion and kind — all but what the API server
  alone sets (creationTimestamp, generation), and the order of keys, which is no part of
  JSON's meaning (the real API server keeps its own);
- an object of metadata only (the gone-nodes watch) is a block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from netctl.kubeapi import blocks
from netctl.kubeapi.objects import (
    Block,
    BlockSpec,
    Borrow,
    BorrowSpec,
    decode_block,
    decode_blocks,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade" / "ipamblocks.json"
ITEMS: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["items"]
SERVER_SET = ("creationTimestamp", "generation")


@pytest.mark.parametrize("item", ITEMS, ids=[i["metadata"]["name"] for i in ITEMS])
def test_an_object_of_netctl_0_1_0_decoded_and_written_is_the_same_json(
        item: dict[str, Any]) -> None:
    obj = decode_block(json.dumps(item).encode())
    borrowed = "parent" in item["spec"]
    assert type(obj) is (Borrow if borrowed else Block)
    assert type(obj.spec) is (BorrowSpec if borrowed else BlockSpec)
    written = json.loads(blocks._body(obj))
    assert written == {**item, "metadata": {k: v for k, v in item["metadata"].items()
                                            if k not in SERVER_SET}}


def test_the_fixture_holds_every_kind_of_object() -> None:
    """Blocks, borrows, reservations on both, a history, refused and pending asks."""
    specs = [i["spec"] for i in ITEMS]
    assert {"parent" in s for s in specs} == {True, False}
    assert {"parent" in s for s in specs if s.get("reserved")} == {True, False}
    assert any(s.get("history") for s in specs)
    assert sorted(bool(s["transfer"].get("refused")) for s in specs if "transfer" in s) == [
        False, True]
    assert all(i["metadata"]["labels"] for i in ITEMS)


def test_a_list_decodes_as_its_items() -> None:
    listed = decode_blocks(FIXTURE.read_bytes())
    assert listed == [decode_block(json.dumps(i).encode()) for i in ITEMS]
    assert decode_blocks(b'{"items": null}') == decode_blocks(b"{}") == []


def test_an_object_of_metadata_only_is_a_block() -> None:
    obj = decode_block(msgspec.json.encode({"kind": "PartialObjectMetadata", "metadata": {
        "name": "b-1", "labels": {"ipam.netctl.dev/node": "node-a", "app": "x"}}}))
    assert type(obj) is Block and obj.spec == BlockSpec()
    assert obj.metadata.labels == {"ipam.netctl.dev/node": "node-a"}
