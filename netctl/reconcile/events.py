"""What the kernel said (:class:`Hints`), and which containers it concerns
(:func:`concerned`, from the journal's index of what is live; what a DEL under way removes
concerns nobody). A hint only says where to look; the plan decides. Pure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from netctl.cni.rtnl import RTM_DELLINK, RTM_DELNSID, link_name, messages
from netctl.journal.live import LiveIndex

AF_BRIDGE = 7  # ifi_family of a bridge port's own link messages


@dataclass
class Hints:
    """Where to look: host links and netns paths deleted, whether every netns must be
    checked (an nsid deleted, events lost), and containers to look at again."""

    links: set[str] = field(default_factory=set)
    netns: set[str] = field(default_factory=set)
    recheck: bool = False
    containers: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.links or self.netns or self.recheck or self.containers)

    def merge(self, other: Hints) -> None:
        self.links |= other.links
        self.netns |= other.netns
        self.recheck = self.recheck or other.recheck
        self.containers |= other.containers

    def describe(self) -> str:
        parts = [f"{len(self.links)} links deleted" if self.links else "",
                 f"{len({os.path.basename(n) for n in self.netns})} netns deleted"
                 if self.netns else "",
                 "an nsid deleted or events lost" if self.recheck else "",
                 f"{len(self.containers)} containers again" if self.containers else ""]
        return ", ".join(p for p in parts if p) or "nothing"


# -- netlink --------------------------------------------------------------------------------


def netlink_hints(datagram: bytes) -> Hints:
    """The hints in one netlink datagram: a name per ``RTM_DELLINK`` (not a bridge port's:
    ``AF_BRIDGE``), a recheck for an ``RTM_DELNSID``; only the header and one attribute
    are read (a node reboot brings thousands)."""
    out = Hints()
    for kind, _seq, payload in messages(datagram):
        if kind == RTM_DELLINK and payload and payload[0] != AF_BRIDGE:
            name = link_name(payload)
            if name:
                out.links.add(name)
        elif kind == RTM_DELNSID:
            out.recheck = True
    return out


# -- which containers ---------------------------------------------------------------------------


def netns_to_check(live: LiveIndex, hints: Hints) -> set[str]:
    """The live netns paths whose existence :func:`concerned` needs: every one on a
    recheck; else those a deleted name may mean under another spelling of its dir."""
    if hints.recheck:
        return live.netns_paths()
    names = {os.path.basename(p) for p in hints.netns}
    return {path for name in names for path in live.named(name)} - hints.netns


def concerned(live: LiveIndex, hints: Hints, netns_exists: Mapping[str, bool]
              ) -> frozenset[str]:
    """The containers the hints point at, given the existence of the paths
    :func:`netns_to_check` named (a path not in ``netns_exists`` exists)."""
    out = set(hints.containers)
    gone = set(hints.netns) | {path for path, exists in netns_exists.items() if not exists}
    holders = [h for path in gone for h in live.at_netns(path)]
    holders += [att for name in hints.links for att in live.at_link(name)]
    out.update(h.container_id for h in holders if not live.is_leaving(h))
    return frozenset(out)
