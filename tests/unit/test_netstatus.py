"""We test these aspects of the ``k8s.v1.cni.cncf.io/network-status`` annotation:

- a pod on its cluster network alone, from a bridge result (host interfaces and one in
  the sandbox) at cniVersion 1.0.0 and 0.3.1: the annotation's exact bytes, as Multus'
  ``json.MarshalIndent`` prints them;
- several networks in plan order, named ``ns/name`` for NADs and by their CNI name for
  a file or an inline delegate, ``default`` on the cluster network's entry only;
- dual stack: both addresses without their prefix, IPv6 as Go prints it, both
  default-route gateways;
- results with several sandbox interfaces (addresses by index, unindexed ones to the
  last entry, ``default`` where the gateway is), with one host-side interface, with none;
- ``dns``, ``mtu`` and ``device-info``; Go's escapes; the merge patch body;
- reading it back (:func:`~netctl.kubeapi.netstatus.addresses`): what the writer wrote, from
  a pod listed with its network-status (``PodWithStatus``); none without the annotation;
  a malformed one said apart from an empty one;
- an address's text read by the IPv4 fast path as the ipaddress module reads it
  (generated texts, valid or not).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from netctl.cni.config import parse_chain
from netctl.cni.versions import convert_result
from netctl.journal.records import Attachment
from netctl.kubeapi.netstatus import (
    _address,
    _ip_text,
    addresses,
    annotation_value,
    network_status,
    patch_body,
    status_name,
)
from netctl.kubeapi.objects import NETWORK_STATUS, Pod, PodWithStatus

NETNS = "/run/netns/cni-1234"


def attachment(network: str, ifname: str, result: dict[str, Any] | None,
               default: bool = False, chain_name: str = "") -> Attachment:
    chain = parse_chain({"cniVersion": "1.0.0", "name": chain_name or network.split("/")[-1],
                         "type": "bridge"}, "test")
    return Attachment(container_id="c1", ifname=ifname, network=network, chain=chain,
                      is_default=default, result=result, state="attached")


def bridge_result(ifname: str, *addresses: tuple[str, str], version: str = "1.0.0",
                  mac: str = "0a:58:0a:f4:01:08") -> dict[str, Any]:
    """What the bridge plugin returns: the bridge, the host veth, the pod's interface."""
    result = {
        "cniVersion": version,
        "interfaces": [{"name": "cni0", "mac": "0a:58:0a:f4:01:01"},
                       {"name": "veth3f2a", "mac": "6e:41:5c:1d:22:10"},
                       {"name": ifname, "mac": mac, "sandbox": NETNS}],
        "ips": [{"address": addr, "gateway": gw, "interface": 2} for addr, gw in addresses],
        "routes": [{"dst": "0.0.0.0/0" if ":" not in gw else "::/0", "gw": gw}
                   for _, gw in addresses],
        "dns": {}}
    return convert_result(result, version)


SINGLE = """[{
    "name": "kube-system/cluster",
    "interface": "eth0",
    "ips": [
        "10.244.1.8"
    ],
    "mac": "0a:58:0a:f4:01:08",
    "default": true,
    "dns": {},
    "gateway": [
        "10.244.1.1"
    ]
}]"""


@pytest.mark.parametrize("version", ["1.0.0", "0.3.1"])
def test_cluster_network_alone(version: str) -> None:
    result = bridge_result("eth0", ("10.244.1.8/24", "10.244.1.1"), version=version)
    if version == "0.3.1":
        assert result["ips"][0]["version"] == "4"
    atts = [attachment("kube-system/cluster", "eth0", result, default=True)]
    assert annotation_value(network_status(atts)) == SINGLE


def test_several_networks_in_plan_order() -> None:
    macvlan = {"cniVersion": "0.3.1", "interfaces": [
        {"name": "net1", "mac": "02:00:00:00:00:07", "sandbox": NETNS}],
        "ips": [{"version": "4", "address": "192.168.50.7/24", "interface": 0}],
        "dns": {}}
    atts = [
        attachment("/etc/cni/net.d/10-flannel.conflist", "eth0", bridge_result(
            "eth0", ("10.244.1.8/24", "10.244.1.1")), default=True, chain_name="cbr0"),
        attachment("delegate:sidecar", "net1", macvlan, chain_name="sidecar"),
        attachment("shop/storage", "st0", bridge_result(
            "st0", ("10.20.0.4/24", "10.20.0.1"), version="0.3.1", mac="0a:58:0a:14:00:04")),
        attachment("shop/pending", "net3", None),
    ]
    entries = network_status(atts)
    assert [(e["name"], e["interface"], e["ips"], e.get("default", False)) for e in entries] == [
        ("cbr0", "eth0", ["10.244.1.8"], True),
        ("sidecar", "net1", ["192.168.50.7"], False),
        ("shop/storage", "st0", ["10.20.0.4"], False)]
    assert entries[2]["gateway"] == ["10.20.0.1"] and "gateway" not in entries[1]
    value = annotation_value(entries)
    assert value.startswith('[{\n    "name": "cbr0",\n') and '\n},{\n    "name": "sidecar"' in value
    assert json.loads(value) == entries
    assert [status_name(a) for a in atts] == ["cbr0", "sidecar", "shop/storage", "shop/pending"]


@pytest.mark.parametrize("version", ["1.0.0", "0.3.1"])
def test_dual_stack(version: str) -> None:
    result = bridge_result("eth0", ("10.244.1.8/24", "10.244.1.1"),
                           ("fd00:10:244:1:0:0:0:8/64", "fd00:10:244:1::1"), version=version)
    [entry] = network_status([attachment("kube-system/cluster", "eth0", result, True)])
    assert entry == {"name": "kube-system/cluster", "interface": "eth0",
                     "ips": ["10.244.1.8", "fd00:10:244:1::8"], "mac": "0a:58:0a:f4:01:08",
                     "default": True, "dns": {}, "gateway": ["10.244.1.1", "fd00:10:244:1::1"]}
    assert list(entry) == ["name", "interface", "ips", "mac", "default", "dns", "gateway"]


def test_several_sandbox_interfaces() -> None:
    result = {"cniVersion": "1.0.0", "interfaces": [
        {"name": "host0"},
        {"name": "a0", "mac": "02:00:00:00:00:a0", "sandbox": NETNS},
        {"name": "b0", "mac": "02:00:00:00:00:b0", "sandbox": NETNS}],
        "ips": [{"address": "10.1.0.2/24", "interface": 1},
                {"address": "10.2.0.2/24", "gateway": "10.2.0.1", "interface": 2},
                {"address": "10.3.0.2/24"},
                {"address": "10.4.0.2/24", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.2.0.1"}, {"dst": "10.9.0.0/16",
                                                             "gw": "10.1.0.1"}]}
    entries = network_status([attachment("shop/multi", "a0", result, default=True)])
    assert entries == [
        {"name": "shop/multi", "interface": "a0", "ips": ["10.1.0.2"],
         "mac": "02:00:00:00:00:a0", "dns": {}, "gateway": ["10.2.0.1"]},
        {"name": "shop/multi", "interface": "b0", "ips": ["10.2.0.2", "10.3.0.2"],
         "mac": "02:00:00:00:00:b0", "default": True, "dns": {}, "gateway": ["10.2.0.1"]}]
    no_gateway = {**result, "ips": [{"address": "10.1.0.2/24", "interface": 1}]}
    entries = network_status([attachment("shop/multi", "a0", no_gateway, default=True)])
    assert [e.get("default", False) for e in entries] == [True, False]
    assert "ips" not in entries[1], "an interface without addresses has no ips"
    host_gateway = {**result, "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1",
                                       "interface": 0}]}
    entries = network_status([attachment("shop/multi", "a0", host_gateway, default=True)])
    assert [e.get("default", False) for e in entries] == [False, False], \
        "as Multus: the gateway's interface is not in the pod, so no entry is the default"
    entries = network_status([attachment("shop/multi", "a0", result, default=False)])
    assert not any(e.get("default") for e in entries)


def test_one_host_interface_and_none() -> None:
    host_only = {"cniVersion": "1.0.0", "interfaces": [{"name": "veth1", "mac": "aa"}],
                 "ips": [{"address": "10.5.0.2/24", "interface": 0}]}
    assert network_status([attachment("shop/x", "net1", host_only)]) == [
        {"name": "shop/x", "ips": ["10.5.0.2"], "dns": {}}]
    bare = {"cniVersion": "1.0.0", "ips": [{"address": "10.5.0.2/24"}]}
    assert network_status([attachment("shop/x", "net1", bare)]) == []


def test_dns_mtu_device_info_and_routes() -> None:
    result = {"cniVersion": "1.1.0", "interfaces": [
        {"name": "net1", "mac": "02:00:00:00:00:01", "mtu": 9000, "sandbox": NETNS}],
        "ips": [{"address": "::ffff:10.6.0.2/120", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "0.0.0.0/1", "gw": "10.6.0.1"},
                   {"dst": "10.0.0.0/8", "gw": "10.6.0.254"}],
        "dns": {"nameservers": ["10.96.0.10"], "domain": "", "search": ["svc.local"],
                "options": []}}
    device = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:03:00.1"}}
    [entry] = network_status([attachment("shop/sriov", "net1", result)],
                             {"net1": device, "net9": {"type": "other"}})
    assert entry == {"name": "shop/sriov", "interface": "net1", "ips": ["10.6.0.2"],
                     "mac": "02:00:00:00:00:01", "mtu": 9000,
                     "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.local"]},
                     "device-info": device, "gateway": ["10.6.0.1"]}
    assert list(entry) == ["name", "interface", "ips", "mac", "mtu", "dns", "device-info",
                           "gateway"]


def test_go_escapes() -> None:
    value = annotation_value([{"name": "a<b>&c\u2028", "dns": {"domain": "é"}}])
    assert value == ('[{\n    "name": "a\\u003cb\\u003e\\u0026c\\u2028",\n    "dns": {\n'
                     '        "domain": "é"\n    }\n}]')
    assert annotation_value([]) == "[]"


def test_patch_body() -> None:
    value = annotation_value(network_status([attachment(
        "kube-system/cluster", "eth0", bridge_result("eth0", ("10.244.1.8/24", "10.244.1.1")),
        default=True)]))
    body = patch_body(value)
    assert msgspec.json.decode(body) == {"metadata": {"annotations": {NETWORK_STATUS: SINGLE}}}


def test_read_back_from_a_listed_pod() -> None:
    atts = [attachment("kube-system/cluster", "eth0", bridge_result(
                "eth0", ("10.244.1.8/24", "10.244.1.1"),
                ("fd00:10:244:1:0:0:0:8/64", "fd00:10:244:1::1")), True),
            attachment("shop/storage", "net1", bridge_result(
                "net1", ("10.9.0.3/16", "10.9.0.1"), mac="0a:58:0a:09:00:03"))]
    served = json.dumps({"metadata": {"namespace": "shop", "name": "web-1", "uid": "u-1",
                                      "annotations": {NETWORK_STATUS: annotation_value(
                                          network_status(atts))}}})
    listed = msgspec.json.decode(served, type=PodWithStatus)
    assert addresses(listed) == [("eth0", "10.244.1.8"), ("eth0", "fd00:10:244:1::8"),
                                 ("net1", "10.9.0.3")]
    # the informer's pods do not keep the annotation: nothing to read there
    assert addresses(msgspec.json.decode(served, type=Pod)) == []


def test_read_back_none_or_malformed() -> None:
    assert addresses(PodWithStatus()) == []
    malformed = msgspec.json.decode(json.dumps(
        {"metadata": {"annotations": {NETWORK_STATUS: "[{\"ips\": 5}]"}}}), type=PodWithStatus)
    assert addresses(malformed) is None


_OCTET = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["01", "00", "1a", "", "٣"]))
_PREFIX = st.one_of(st.integers(0, 40).map(str), st.sampled_from(["", "08", "+1", " 8", "x"]))


@example("10.0.0.5/33")
@example("10.0.0.5/32")
@example("010.0.0.5/8")
@example("10.0.0.5/08")
@example("10.0.0.5")
@example("::ffff:10.0.0.1/96")
@given(st.one_of(
    st.tuples(st.lists(_OCTET, min_size=3, max_size=5), _PREFIX).map(
        lambda t: ".".join(t[0]) + "/" + t[1]),
    st.ip_addresses().map(str).flatmap(lambda a: _PREFIX.map(lambda p: f"{a}/{p}")),
    st.text(max_size=20)))
def test_an_address_is_printed_as_the_ipaddress_module_reads_it(text: str) -> None:
    """The IPv4 fast path (the C parser) agrees with the ipaddress module on every text,
    valid or not: the address without its prefix, or "" (left out of the entry)."""
    try:
        want = _ip_text(ipaddress.ip_interface(text).ip)
    except ValueError:
        want = ""
    assert _address({"address": text}) == want
