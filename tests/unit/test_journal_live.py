"""We test these aspects of the journal's in-memory index of what is live
(``Journal.live``), on a real journal file through the journal's own writes:

- an attachment is in it from its ADD's beginning (its netns), with the host links of
  each newer result (a step's, the operation's end), its allocations with it;
- a DEL under way marks it leaving; a DEL that fails leaves it live and no longer
  leaving; a DEL that removes it takes it out, its allocations released with the step;
- plain IPAM allocations come and go with their one transaction;
- after every write, the index is what the database says (read again, as at start-up:
  nothing leaving), and a journal opened again starts from it;
- writes batched together are in the index from their commit on, whoever made it; a
  container the index says has nothing live is answered without a read.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import trio

from netctl.cni.config import parse_chain
from netctl.ipam.planner import Decision
from netctl.ipam.ranges import parse_config
from netctl.ipam.store import IndexStore
from netctl.journal import query
from netctl.journal.live import LiveAllocation, LiveAttachment
from netctl.journal.records import Allocation, Attachment, OpEnd, OpStart, Owner, StepEnd, StepStart
from netctl.journal.store import Journal, open_journal

NETNS = "/run/netns/nct-live"
IPAM = {"type": "netctl-ipam", "range": "10.9.7.0/24"}
CHAIN = parse_chain({"cniVersion": "1.0.0", "name": "blue",
                     "plugins": [{"type": "bridge", "ipam": IPAM}]}, "network blue")


def result(veth: str) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "interfaces": [
        {"name": veth, "mac": "aa:bb:cc:dd:ee:01"},
        {"name": "eth0", "mac": "aa:bb:cc:dd:ee:02", "sandbox": NETNS}]}


async def same_as_read(journal: Journal) -> None:
    again = await journal.read_live()
    assert {k: dataclasses.replace(v, leaving=False) for k, v in
            journal.live.attachments.items()} == again.attachments
    assert journal.live.allocations == again.allocations
    assert journal.live.netns_paths() == again.netns_paths()


async def allocated(store: IndexStore, att_id: int | None, cid: str) -> Decision:
    cfg, ranges = parse_config(IPAM)
    return await store.allocate(cfg, ranges, Owner(cid, "eth0", NETNS, attachment_id=att_id),
                          [], time.time())


def key(alloc: Allocation) -> tuple[str, str]:
    return alloc.scope, alloc.address


async def step(journal: Journal, op_id: int, att: Attachment, verb: str,
               new: Decision | None = None, res: dict[str, Any] | None = None,
               gone: list[Allocation] | None = None) -> None:
    step_id = await journal.begin_step(StepStart(
        op_id=op_id, attachment=att.id, position=0, verb=verb, plugin_type="bridge",
        config=b"{}", netns=NETNS, ifname="eth0"), new=new.new if new else (),
        pools=new.pools if new else None)
    await same_as_read(journal)
    await journal.end_step(StepEnd(step_id=step_id, attachment=att.id, verb=verb, position=0,
                                   result=res), op_id=op_id, gone=gone or ())
    await same_as_read(journal)


def test_the_index_follows_an_attachment_from_add_to_removal(tmp_path: Path) -> None:
    async def main() -> None:
        store = IndexStore()
        async with open_journal(tmp_path) as journal:
            att = Attachment(container_id="c1", ifname="eth0", network="default/blue",
                             chain=CHAIN, netns=NETNS)
            add, _ = await journal.begin(OpStart(verb="ADD", container_id="c1"), adding=[att])
            assert journal.live.attachments == {att.id: LiveAttachment("c1", NETNS)}
            await same_as_read(journal)

            decision = await allocated(store, att.id, "c1")
            await step(journal, add, att, "ADD", new=decision, res=result("veth1"))
            assert journal.live.attachments[att.id].links == {"veth1"}
            assert journal.live.allocations == {
                key(a): LiveAllocation("c1", NETNS, att.id) for a in decision.new}
            att.result = result("veth2")  # the chain's final result
            await journal.finish(add, OpEnd(state="done", attached=[att]))
            assert [a.container_id for a in journal.live.at_link("veth2")] == ["c1"]
            assert list(journal.live.at_link("veth1")) == []
            await same_as_read(journal)

            failing, _ = await journal.begin(OpStart(verb="DEL", container_id="c1"),
                                          removing=[att])
            assert journal.live.attachments[att.id].leaving
            await journal.finish(failing, OpEnd(state="failed", kept=[(att, "boom")]),
                                 retry_at=lambda n: time.time() + 10)
            assert not journal.live.attachments[att.id].leaving
            await same_as_read(journal)

            removing, _ = await journal.begin(OpStart(verb="DEL", container_id="c1"),
                                           removing=[att])
            assert journal.live.attachments[att.id].leaving
            await step(journal, removing, att, "DEL", gone=decision.new)
            assert journal.live.allocations == {}
            await journal.finish(removing, OpEnd(state="done", removed=[att]))
            assert journal.live.attachments == {} and journal.live.netns_paths() == set()
            await same_as_read(journal)

    trio.run(main)


def test_plain_allocations_and_a_journal_opened_again(tmp_path: Path) -> None:
    async def main() -> None:
        store = IndexStore()
        async with open_journal(tmp_path) as journal:
            kept = await allocated(store, None, "plain1")
            await journal.one_transaction(OpStart(verb="ADD", container_id="plain1"),
                                          new=kept.new, pools=kept.pools)
            gone = await allocated(store, None, "plain2")
            await journal.one_transaction(OpStart(verb="ADD", container_id="plain2"),
                                          new=gone.new, pools=gone.pools)
            att = Attachment(container_id="c2", ifname="eth0", network="default/blue",
                             chain=CHAIN, netns=NETNS, result=result("veth3"))
            add, _ = await journal.begin(OpStart(verb="ADD", container_id="c2"), adding=[att])
            await journal.finish(add, OpEnd(state="done", attached=[att]))
            await journal.one_transaction(OpStart(verb="DEL", container_id="plain2"),
                                          gone=gone.new)
            assert {a.container_id for a in journal.live.at_netns(NETNS)} == {"plain1", "c2"}
            await same_as_read(journal)
            before = journal.live
        async with open_journal(tmp_path) as journal:
            assert journal.live.attachments == before.attachments
            assert journal.live.allocations == before.allocations

    trio.run(main)


def test_a_write_is_in_the_index_when_it_commits(tmp_path: Path) -> None:
    """Writes queued together commit in one batch, made by whichever writer goes first;
    the others' rows are in the index from that commit on, not from when their callers
    resume. Checked with a plain read of the file, no checkpoint in between."""
    async def main() -> None:
        async with open_journal(tmp_path) as journal:
            read = query.open_read_only(journal.path)

            def committed() -> set[str]:
                return {a["container_id"] for a in query.unremoved_attachments(read)}

            async def add(cid: str) -> None:
                att = Attachment(container_id=cid, ifname="eth0", network="default/blue",
                                 chain=CHAIN, netns=f"/run/netns/{cid}")
                await journal.begin(OpStart(verb="ADD", container_id=cid), adding=[att])
                assert all(journal.live.holds(c) for c in committed())

            try:
                async with trio.open_nursery() as nursery:
                    for i in range(20):
                        nursery.start_soon(add, f"c{i}")
            finally:
                read.close()
            assert journal.commits < 20  # batched
            trips = journal.trips
            assert await journal.live_attachments("nobody") == []
            assert journal.trips == trips  # the index says it has nothing: no read
            assert [a.container_id for a in await journal.live_attachments("c3")] == ["c3"]

    trio.run(main)
