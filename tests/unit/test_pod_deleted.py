"""We test these aspects of a pod deleted through the API (``Reconciler.pod_deleted``), on a
real journal file with hundreds of live attachments:

- a deleted pod with no live attachment (kubelet's DEL came first, as it nearly always
  does) costs no journal read at all, however many attachments other pods hold;
- a deleted pod with live attachments has exactly those DELeted (matched by UID: another
  pod of the same name keeps its own), reading only its own containers;
- the journal's in-memory index knows each live attachment's pod, from its ADD and when
  the journal is opened again.
"""

from __future__ import annotations

from pathlib import Path

import trio

from netctl.cni.config import parse_chain
from netctl.cni.hostroot import HostRoot
from netctl.cni.request import Pod
from netctl.engine.admission import Admission
from netctl.engine.chains import Chains, Delegates
from netctl.engine.choice import ArgsSelector
from netctl.engine.engine import Engine
from netctl.engine.networks import NetworkDir
from netctl.ipam.store import IndexStore
from netctl.journal.records import Attachment, OpEnd, OpStart
from netctl.journal.store import Journal, open_journal
from netctl.reconcile.leaks import Reconciler

CHAIN = parse_chain({"cniVersion": "1.0.0", "name": "blue",
                     "plugins": [{"type": "bridge"}]}, "network blue")
PODS = 150


async def attach(journal: Journal, container: str, pod: Pod, ifnames: list[str]) -> None:
    """An ADD journaled whole: its attachments live, no step started (a DEL runs none)."""
    atts = [Attachment(container_id=container, ifname=ifname, network="default/blue",
                       chain=CHAIN, netns=f"/run/netns/{container}", pod=pod)
            for ifname in ifnames]
    op, _ = await journal.begin(OpStart(verb="ADD", container_id=container, pod=pod),
                             adding=atts)
    await journal.finish(op, OpEnd(state="done", attached=atts))


def pod(name: str, uid: str) -> Pod:
    return Pod(namespace="default", name=name, uid=uid)


def reconciler(journal: Journal, tmp_path: Path) -> Reconciler:
    store = IndexStore()
    journal.ipam.follower = store
    admission = Admission()
    engine = Engine(journal, Chains(journal, Delegates([]), store), HostRoot(),
                    NetworkDir(str(tmp_path)), ArgsSelector(), admission)
    return Reconciler(journal, admission, engine, store)


def test_a_deleted_pod_with_nothing_live_costs_no_journal_read(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_journal(tmp_path) as journal:
            for i in range(PODS):
                await attach(journal, f"c{i}", Pod(namespace="default", name=f"p{i}",
                                                   uid=f"uid-{i}"), ["eth0", "net1", "net2"])
            rec = reconciler(journal, tmp_path)
            before = journal.trips
            for i in range(100):  # pods whose attachments kubelet's DEL already removed
                assert await rec.pod_deleted(pod(f"gone{i}", f"gone-{i}")) == []
            assert await rec.pod_deleted(pod("p7", "another-uid")) == []  # replaced
            assert journal.trips == before  # not one read

            before = journal.trips
            assert await rec.pod_deleted(pod("p7", "uid-7")) == ["c7"]
            assert await journal.live_attachments("c7") == []
            assert len(await journal.live_attachments()) == 3 * (PODS - 1)
            # its own container read, a DEL begun and finished, and the count above
            assert journal.trips - before <= 5
            assert journal.live.of_pod("uid-7") == set()
            assert journal.live.of_pod("uid-8") == {"c8"}

        async with open_journal(tmp_path) as journal:  # opened again: read from the rows
            assert journal.live.of_pod("uid-8") == {"c8"}
            assert journal.live.of_pod("uid-7") == set()

    trio.run(main)
