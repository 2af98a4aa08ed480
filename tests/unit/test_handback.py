"""whereabouts' names and offsets for a handback (netctl/kubeapi/handback.py), as whereabouts
writes them (``IPPoolName``, ``normalizeRange``, ``NormalizeIP``, ``toAllocationMap``), and
the plan: one pool per range, a reservation per address of an overlapping network."""

from __future__ import annotations

import ipaddress

from netctl.kubeapi.handback import (
    Held,
    offset,
    plan,
    pool_name,
    pool_network,
    reservation_name,
)


def test_names_and_offsets() -> None:
    assert pool_network("10.2.0.0/16") == ipaddress.ip_network("10.2.0.0/16")
    assert pool_network("10.2.0.10-10.2.0.20/16") == ipaddress.ip_network("10.2.0.0/16")
    assert pool_network("fd00::5-fd00::9/64") == ipaddress.ip_network("fd00::/64")
    assert pool_name(ipaddress.ip_network("10.2.0.0/16")) == "10.2.0.0-16"
    assert pool_name(ipaddress.ip_network("10.2.0.0/16"), "net-a") == "net-a-10.2.0.0-16"
    assert pool_name(ipaddress.ip_network("fd00::/64")) == "fd00---64"
    assert reservation_name("10.2.0.7") == "10.2.0.7"
    assert reservation_name("fd00::", "n") == "n-fd00--0"  # a trailing ':' gets a 0
    assert reservation_name("fd00::5") == "fd00--5"
    assert offset("10.2.1.1", ipaddress.ip_network("10.2.0.0/16")) == 257


def test_plan_groups_by_pool_and_skips_addresses_without_a_pod() -> None:
    held = [Held("10.2.0.1", "10.2.0.0/16", "", True, "c1", "net1", "ns", "a"),
            Held("10.2.0.2", "10.2.0.0/16", "", False, "c2", "net1", "ns", "b"),
            Held("10.3.0.9", "10.3.0.5-10.3.0.20/24", "x", True, "c1", "net2", "ns", "a"),
            Held("10.2.0.3", "10.2.0.0/16", "", True, "c3", "net1")]
    p = plan(held)
    assert sorted(p.pools) == ["10.2.0.0-16", "x-10.3.0.0-24"]
    assert {k: v[1] for k, v in p.pools["10.2.0.0-16"].entries.items()} == {
        "1": {"id": "c1", "podref": "ns/a", "ifname": "net1"},
        "2": {"id": "c2", "podref": "ns/b", "ifname": "net1"}}
    assert p.pools["x-10.3.0.0-24"].range == "10.3.0.0/24"
    assert sorted(p.reservations) == ["10.2.0.1", "x-10.3.0.9"]  # c2's network: no overlap
    assert [(h.container_id, why.split(":")[0]) for h, why in p.skipped] == [("c3", "no pod")]
