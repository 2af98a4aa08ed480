"""We test the reading of whereabouts' reservations for a takeover, against the fake API
server through the real kubernetes-asyncio client:

- IPPools in IPv4 and IPv6 ranges: an allocation's key is its offset from the range's
  address (offset 1 of 10.2.0.0/16 is 10.2.0.1), its owner ``id``/``podref``/``ifname``;
- overlapping-range reservations: the address is the name (``:`` as ``-``, whereabouts'
  trailing ``0`` after ``::``, a ``<network_name>-`` prefix), the owner in the spec;
- what cannot be read (a pool without a CIDR, an offset that is no number or outside its
  range, an owner that is no object, a name that is no address) is skipped with a warning
  naming the object and entry, the rest kept;
- CRDs not installed: no holds; an API server down or refusing: ApiError;
- live_holds drops the holds of deleted pods with one GET per distinct podref, keeps
  holds without a podref; every call made is one the ClusterRole grants.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
import trio_asyncio
from netctl_kit.kubefake import FakeKube, crd, pod

from netctl.kubeapi.api import Api, ApiError, KubeSettings
from netctl.kubeapi.whereabouts import (
    Hold,
    by_address,
    live_holds,
    read_holds,
    reservation_addresses,
)
from tests import access

GROUP = "whereabouts.cni.cncf.io"
IPPOOLS = crd(GROUP, "v1alpha1", "ippools", "IPPool", namespaced=True, status=False)
RESERVATIONS = crd(GROUP, "v1alpha1", "overlappingrangeipreservations",
                   "OverlappingRangeIPReservation", namespaced=True, status=False)
WHEREABOUTS = [IPPOOLS, RESERVATIONS]
T = TypeVar("T")


def ippool(name: str, range_: Any, allocations: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "IPPool",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"range": range_, "allocations": allocations}}


def reservation(name: str, podref: str, ifname: str = "net1") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "OverlappingRangeIPReservation",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"podref": podref, "ifname": ifname}}


def owner(container: str, podref: str, ifname: str = "net1") -> dict[str, str]:
    return {"id": container, "podref": podref, "ifname": ifname}


def run(fake: FakeKube, tmp_path: Path, fn: Callable[[Api], Awaitable[T]],
        timeout: float = 10) -> T:
    """``fn(api)`` on trio, through the real client, against ``fake``; its ApiError raised
    bare (trio-asyncio's loop would wrap it in an exception group)."""
    config = fake.kubeconfig(tmp_path / "kubeconfig")
    failed: list[ApiError] = []

    async def main() -> T | None:
        async with trio_asyncio.open_loop():
            api = await Api.connect(KubeSettings(kubeconfig=str(config), api_timeout=timeout))
            try:
                return await fn(api)
            except ApiError as exc:
                failed.append(exc)
                return None
            finally:
                granted = {("pods", ""), ("ippools", GROUP),
                           ("overlappingrangeipreservations", GROUP)}
                for verb, resource in api.calls:
                    (group,) = [g for r, g in granted if r == resource]
                    assert access.allowed(group, resource, verb), (verb, resource)
                await api.close()

    result = trio.run(main)
    if failed:
        raise failed[0]
    assert result is not None
    return result


def test_pools_and_reservations_are_read_as_holds(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with FakeKube(crds=WHEREABOUTS) as fake:
        fake.create("ippools", ippool("10.2.0.0-16", "10.2.0.0/16", {
            "1": owner("c1", "default/a", "eth0"),
            "256": owner("c2", "default/b"),
            "65534": owner("c3", "ns2/c"),
        }))
        fake.create("ippools", ippool("fd00-10--64", "fd00:10::/64", {
            "1": owner("c1", "default/a", "net2"),
            "18446744073709551615": owner("c4", "default/d"),  # the /64's last address
        }))
        fake.create("overlappingrangeipreservations", reservation("10.2.0.1", "default/a"))
        fake.create("overlappingrangeipreservations", reservation("fd00-10--1", "default/a"))
        # whereabouts' NormalizeIP: "fd00:10::" + "0"; a network_name prefix
        fake.create("overlappingrangeipreservations", reservation("fd00-10--0", "default/e"))
        fake.create("overlappingrangeipreservations",
                    reservation("blue-net-10.9.0.7", "default/f"))

        with caplog.at_level(logging.WARNING, "netctl.kube"):
            holds = run(fake, tmp_path, read_holds)
        assert caplog.records == []
        assert fake.count("list", "ippools") == 1
        assert fake.count("list", "overlappingrangeipreservations") == 1

    assert holds[:5] == [
        Hold("10.2.0.1", 4, "10.2.0.0/16", "default", "a", "c1", "eth0"),
        Hold("10.2.1.0", 4, "10.2.0.0/16", "default", "b", "c2", "net1"),
        Hold("10.2.255.254", 4, "10.2.0.0/16", "ns2", "c", "c3", "net1"),
        Hold("fd00:10::1", 6, "fd00:10::/64", "default", "a", "c1", "net2"),
        Hold("fd00:10::ffff:ffff:ffff:ffff", 6, "fd00:10::/64", "default", "d", "c4",
             "net1"),
    ]
    assert sorted(holds[5:], key=lambda h: h.address) == [
        Hold("10.2.0.1", 4, "", "default", "a", "", "net1"),
        Hold("10.9.0.7", 4, "", "default", "f", "", "net1"),
        Hold("fd00:10::", 6, "", "default", "e", "", "net1"),
        Hold("fd00:10::1", 6, "", "default", "a", "", "net1"),
    ]
    index = by_address(holds)
    assert len(index) == 7  # a pool's entry and its reservation: one address
    assert index[4, int(ipaddress.ip_address("10.2.0.1"))].pool_range == "10.2.0.0/16"
    assert index[6, int(ipaddress.ip_address("fd00:10::"))].pod_name == "e"


def test_an_ipv6_reservation_name_is_read_against_the_pools_ranges() -> None:
    net = [ipaddress.ip_network("fd00::/64")]
    # "net-1" + "fd00::5", or "net" + "1:fd00::5": the pool's range tells
    assert reservation_addresses("net-1-fd00--5", net) == [ipaddress.ip_address("fd00::5")]
    assert reservation_addresses("net-1-fd00--5", []) == [
        ipaddress.ip_address("1:fd00::5"), ipaddress.ip_address("fd00::5")]
    assert reservation_addresses("2001-db8--5", []) == [  # whole name first
        ipaddress.ip_address("2001:db8::5"), ipaddress.ip_address("db8::5")]
    assert reservation_addresses("10.0.0.1", net) == [ipaddress.ip_address("10.0.0.1")]
    assert reservation_addresses("not-an-ip", net) == []


def test_what_cannot_be_read_is_skipped_and_the_rest_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with FakeKube(crds=WHEREABOUTS) as fake:
        fake.create("ippools", ippool("p", "10.3.0.0/24", {
            "1": owner("c1", "default/a"),
            "x7": owner("c2", "default/b"),  # not a number
            "-2": owner("c2", "default/b"),  # not a decimal offset
            "256": owner("c3", "default/c"),  # past 10.3.0.255
            "3": "c4",  # not an object
            "4": {"id": 4, "podref": "default/d"},  # a number where a string goes
            "5": {"id": "c5"},  # no podref: an unknown owner, held
            "6": {"id": "c6", "podref": "nameonly"},  # not ns/name: unknown owner, held
        }))
        fake.create("ippools", ippool("no-cidr", "10.4.0.0", {"1": owner("c", "default/x")}))
        fake.create("ippools", ippool("no-range", 17, {"1": owner("c", "default/x")}))
        fake.create("overlappingrangeipreservations", reservation("nonsense", "default/y"))
        fake.create("overlappingrangeipreservations",
                    {**reservation("10.3.0.9", "default/z"), "spec": "text"})

        with caplog.at_level(logging.WARNING, "netctl.kube"):
            holds = run(fake, tmp_path, read_holds)

    assert [(h.address, h.pod_namespace, h.pod_name) for h in holds] == [
        ("10.3.0.1", "default", "a"), ("10.3.0.5", "", ""), ("10.3.0.6", "", "")]
    warnings = "\n".join(r.getMessage() for r in caplog.records)
    for named in ("IPPool kube-system/p allocation 'x7'", "IPPool kube-system/p allocation '-2'",
                  "IPPool kube-system/p allocation '256'", "IPPool kube-system/p allocation '3'",
                  "IPPool kube-system/p allocation '4'", "'nameonly' is not namespace/name",
                  "IPPool kube-system/no-cidr skipped", "IPPool kube-system/no-range skipped",
                  "OverlappingRangeIPReservation kube-system/nonsense skipped",
                  "OverlappingRangeIPReservation kube-system/10.3.0.9 skipped"):
        assert named in warnings, named
    assert len(caplog.records) == 10


def test_no_whereabouts_crds_no_holds(tmp_path: Path) -> None:
    with FakeKube() as fake:
        assert run(fake, tmp_path, read_holds) == []  # two 404s


def test_live_holds_drops_deleted_pods_with_one_get_per_pod(tmp_path: Path) -> None:
    with FakeKube(crds=WHEREABOUTS) as fake:
        for name in ("a", "b"):
            fake.create("pods", pod(name, node="n1"))
        fake.create("pods", pod("c", "ns2", node="n2"))
        fake.create("ippools", ippool("p", "10.2.0.0/16", {
            "1": owner("c1", "default/a", "eth0"), "2": owner("c1", "default/a", "net1"),
            "3": owner("c2", "default/b"), "4": owner("c3", "ns2/c"),
            "5": owner("c4", "default/gone"), "6": {"id": "c5"},
        }))
        fake.create("overlappingrangeipreservations", reservation("10.2.0.1", "default/a"))
        fake.create("overlappingrangeipreservations", reservation("10.2.0.5", "default/gone"))
        fake.create("overlappingrangeipreservations", reservation("10.2.0.7", "ns2/gone"))
        fake.delete("pods", "default", "b")

        async def both(api: Api) -> tuple[list[Hold], list[Hold]]:
            holds = await read_holds(api)
            return holds, await live_holds(api, holds)

        fake.reset_counts()
        holds, live = run(fake, tmp_path, both)
        # default/a, default/b, ns2/c, default/gone, ns2/gone
        assert fake.count("get", "pods") == 5

    assert len(holds) == 9
    assert [(h.address, h.pool_range != "", h.pod_name) for h in live] == [
        ("10.2.0.1", True, "a"), ("10.2.0.2", True, "a"), ("10.2.0.4", True, "c"),
        ("10.2.0.6", True, ""), ("10.2.0.1", False, "a")]


def test_an_api_server_down_or_refusing_is_an_api_error(tmp_path: Path) -> None:
    hold = Hold("10.2.0.1", 4, "10.2.0.0/16", "default", "a", "c1", "eth0")
    with FakeKube(crds=WHEREABOUTS) as fake:
        fake.forbid("list", "overlappingrangeipreservations")
        with pytest.raises(ApiError) as err:
            run(fake, tmp_path, read_holds)
        assert err.value.status == 403
        fake.forbid("list", "overlappingrangeipreservations", 0)
        fake.forbid("get", "pods")
        with pytest.raises(ApiError) as err:
            run(fake, tmp_path, lambda api: live_holds(api, [hold, hold]))
        assert err.value.status == 403

        fake.stop()
        with pytest.raises(ApiError) as err:
            run(fake, tmp_path, read_holds, timeout=2)
        assert err.value.unreachable and err.value.status == 0
        with pytest.raises(ApiError) as err:
            run(fake, tmp_path, lambda api: live_holds(api, [hold]), timeout=2)
        assert err.value.status == 0
