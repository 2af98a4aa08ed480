"""Device networks' pure parts: the kubelet's PodResources answer decoded (device plugins' and
DRA devices), devices assigned to networks (each once, never one held), the device-info file
names and copies, the conf keys a delegate gets, and DRA's parts: a pod's claims (named
directly, from a template, for extended resources), a claim's network devices, networkData,
the status merge (its Ready condition's transition time kept while it stays True) and the
Event's note for a refused write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from netctl_kit import protoencode

from netctl.cni.config import parse_chain, plugin_config
from netctl.cni.hostroot import HostRoot
from netctl.cni.request import Pod
from netctl.devices import devinfo
from netctl.devices.podresources import ClaimedDevice, parse_list
from netctl.engine.devices import assign, cni_file, device_info, give
from netctl.errors import INVALID_CONFIG, CNIError, Refusal
from netctl.journal.records import Attachment
from netctl.kubeapi.dra import (
    Result,
    by_resource,
    held_in,
    index,
    merged,
    network_data,
    refusal_note,
)
from netctl.kubeapi.objects import Pod as KubePod
from netctl.kubeapi.objects import Slice

RES = "example.com/vf"


def list_answer(pods: dict[tuple[str, str], list[tuple[str, dict[str, list[str]]]]]) -> bytes:
    """A ListPodResourcesResponse: (ns, name) → [(container, {resource: ids})]."""
    return protoencode.encode([
        (1, [(1, name), (2, ns), *[
            (3, [(1, cname), *[(2, [(1, res), *[(2, i) for i in ids]])
                                for res, ids in devs.items()]])
            for cname, devs in containers]])
        for (ns, name), containers in pods.items()])


def test_the_kubelets_answer_is_read_by_pod_and_resource_each_id_once() -> None:
    answer = list_answer({
        ("default", "a"): [("main", {RES: ["0000:3b:02.1", "0000:3b:02.2"]}),
                           ("side", {RES: ["0000:3b:02.1", "0000:3b:02.3"], "gpu/x": ["g0"]})],
        ("other", "a"): [("main", {})],
    })
    pods = parse_list(answer)
    assert pods[("default", "a")].devices == {
        RES: ["0000:3b:02.1", "0000:3b:02.2", "0000:3b:02.3"], "gpu/x": ["g0"]}
    assert pods[("other", "a")].devices == {} and pods[("other", "a")].claimed == []
    with pytest.raises(ValueError):
        parse_list(b"\x0a\xff\xff")  # a length past the end


def test_unknown_fields_of_a_newer_kubelet_are_ignored() -> None:
    # ContainerResources with cpu_ids (3, packed) and memory (4) — fields v1.24 lacks
    answer = protoencode.encode([(1, [(1, "p"), (2, "ns"), (3, [
        (1, "main"), (2, [(1, RES), (2, "d1")]), (3, b"\x01\x02"), (4, [(1, "memory")])])])])
    assert parse_list(answer)[("ns", "p")].devices == {RES: ["d1"]}


def test_the_kubelets_dra_devices_are_read_by_claim() -> None:
    """v1.36's answer: ContainerResources.dynamic_resources (5), each DynamicResource's
    claim_name (2), claim_namespace (3), claim_resources (4: cdi_devices 1, driver_name 2,
    pool_name 3, device_name 4); a device two containers share is listed once."""
    vf = [(1, [(1, "k8s.net.example.com/claim=vf0")]), (2, "net.example.com"), (3, "node-a"),
          (4, "vf0")]
    gpu = [(2, "gpu.example.com"), (3, "node-a"), (4, "gpu1")]
    dynamic = (5, [(2, "p1-net-x7k2p"), (3, "default"), (4, vf), (4, gpu)])
    answer = protoencode.encode([(1, [(1, "p1"), (2, "default"), (3, [(1, "main"), dynamic]),
                                (3, [(1, "side"), dynamic])])])
    got = parse_list(answer)[("default", "p1")]
    assert got.devices == {}
    assert got.claimed == [
        ClaimedDevice("default", "p1-net-x7k2p", "net.example.com", "node-a", "vf0"),
        ClaimedDevice("default", "p1-net-x7k2p", "gpu.example.com", "node-a", "gpu1")]


def test_networks_of_one_resource_get_distinct_devices_in_order() -> None:
    got = assign([("a/n1", RES), ("a/n2", RES), ("a/m", "other/r")],
                 {RES: ["d1", "d2", "d3"], "other/r": ["x"]}, held={"d1"}, pod="ns/p")
    assert got == ["d2", "d3", "x"]


def test_too_few_devices_is_code_7_naming_network_resource_and_pod() -> None:
    with pytest.raises(Refusal) as none:
        assign([("ns/sriov", RES)], {}, (), pod="ns/p")
    assert none.value.code == INVALID_CONFIG
    assert "pod ns/p" in none.value.msg and "'ns/sriov'" in none.value.msg
    assert f"allocated no device of {RES}" in none.value.msg
    assert none.value.reason == "NoDeviceAllocated"
    with pytest.raises(Refusal) as few:
        assign([("ns/a", RES), ("ns/b", RES)], {RES: ["d1"]}, (), pod="ns/p")
    assert "allocated 1 device(s)" in few.value.msg and "need 2" in few.value.msg
    with pytest.raises(Refusal) as held:
        assign([("ns/a", RES)], {RES: ["d1"]}, {"d1"}, pod="ns/p")
    assert "already held by its other networks" in held.value.msg


IDS = {r: [f"{r}-{i}" for i in range(6)] for r in ("r1", "r2")}  # a device is one resource's


@given(st.lists(st.sampled_from(["r1", "r2"]), max_size=6),
       st.fixed_dictionaries({}, optional={r: st.lists(st.sampled_from(IDS[r]), unique=True)
                                           for r in IDS}),
       st.sets(st.sampled_from(IDS["r1"] + IDS["r2"])))
def test_assignment_never_repeats_nor_hands_out_a_held_device(
        wanted: list[str], allocated: dict[str, list[str]], held: set[str]) -> None:
    try:
        got = assign([(f"n{i}", r) for i, r in enumerate(wanted)], allocated, held, "ns/p")
    except Refusal:
        # refused only when some resource really lacks free devices
        assert any(sum(1 for w in wanted if w == r) >
                   len([d for d in allocated.get(r, []) if d not in held])
                   for r in set(wanted))
        return
    assert len(got) == len(set(got)) == len(wanted)
    assert not set(got) & held
    assert all(d in allocated[r] for d, r in zip(got, wanted, strict=True))


def test_device_info_files_are_named_as_the_spec_lays_them_out() -> None:
    assert devinfo.dp_path("intel.com/sriov", "0000:3b:02.1") == \
        "/var/run/k8s.cni.cncf.io/devinfo/dp/intel.com-sriov-0000:3b:02.1-device.json"
    assert devinfo.cni_path("sriov-a", "abc123", "net1") == \
        "/var/run/k8s.cni.cncf.io/devinfo/cni/sriov-a-abc123_net1"


def test_the_device_plugins_file_is_copied_read_and_removed(tmp_path: Path) -> None:
    root = HostRoot(str(tmp_path))
    base = devinfo.BASE
    dp = tmp_path / devinfo.dp_path(RES, "d1", base).lstrip("/")
    dp.parent.mkdir(parents=True)
    info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:3b:02.1"}}
    dp.write_text(json.dumps(info))
    target = devinfo.cni_path("net", "c1", "net1")
    assert devinfo.copy_for_cni(RES, "d1", target, root) == ""
    assert devinfo.read(target, root) == (info, "")
    devinfo.remove(target, root)
    assert devinfo.read(target, root) == (None, "")
    # a plugin that wrote no file: nothing copied, no complaint; a broken one: said why
    assert devinfo.copy_for_cni(RES, "d2", target, root) == ""
    dp.write_text("[1, 2]")
    assert "not a JSON object" in devinfo.copy_for_cni(RES, "d1", target, root)


CHAIN = parse_chain({"cniVersion": "1.0.0", "name": "sriov-a", "plugins": [
    {"type": "devmove", "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True}},
    {"type": "tuning"}]}, "test")


def test_every_plugin_gets_the_device_and_declared_capabilities_get_runtime_config() -> None:
    caps = {"deviceID": "d1", "CNIDeviceInfoFile": "/x", "mac": "02:00:00:00:00:01"}
    first = json.loads(plugin_config(CHAIN, 0, None, caps, device="d1"))
    second = json.loads(plugin_config(CHAIN, 1, {"cniVersion": "1.0.0"}, caps, device="d1"))
    assert first["deviceID"] == first["pciBusID"] == "d1"
    assert first["runtimeConfig"] == {"deviceID": "d1", "CNIDeviceInfoFile": "/x"}
    assert second["deviceID"] == second["pciBusID"] == "d1" and "runtimeConfig" not in second
    assert "deviceID" not in json.loads(plugin_config(CHAIN, 0, None, {}))


def att(ifname: str = "net1", resource: str = RES, device: str = "",
        result: dict[str, Any] | None = None) -> Attachment:
    return Attachment(container_id="c1", ifname=ifname, network="ns/sriov-a", chain=CHAIN,
                      pod=Pod(namespace="ns", name="p", uid="u"), resource=resource,
                      device=device, result=result)


class Source:
    def __init__(self, devices: dict[str, list[str]]) -> None:
        self.devices, self.asked = devices, 0

    async def allocated(self, pod: Pod, resources: Any) -> dict[str, list[str]]:
        self.asked += 1
        return self.devices


def test_give_records_the_device_and_copies_its_info(tmp_path: Path) -> None:
    import trio

    root = HostRoot(str(tmp_path))
    dp = tmp_path / devinfo.dp_path(RES, "d2").lstrip("/")
    dp.parent.mkdir(parents=True)
    dp.write_text('{"type": "pci"}')
    atts = [att("eth0", resource=""), att("net1"), att("net2")]
    source = Source({RES: ["d1", "d2"]})
    trio.run(give, atts, source, root)
    assert [a.device for a in atts] == ["", "d1", "d2"]
    assert atts[1].capability_args == {"deviceID": "d1", "CNIDeviceInfoFile": cni_file(atts[1])}
    assert device_info(atts, root) == {"net2": {"type": "pci"}}  # d1's plugin wrote none
    plain = [att("eth0", resource="")]
    trio.run(give, plain, source, root)
    assert source.asked == 1  # no device network: nothing asked
    with pytest.raises(CNIError) as standalone:
        trio.run(give, [att()], None, root)
    assert standalone.value.code == INVALID_CONFIG and "Kubernetes mode" in standalone.value.msg


def test_network_data_is_the_interfaces_addresses_and_mac() -> None:
    result = {"interfaces": [{"name": "net1", "mac": "02:aa:00:00:00:01", "sandbox": "/ns"}],
              "ips": [{"address": "10.56.0.5/24", "interface": 0},
                      {"address": "fd00::5/64", "interface": 0}]}
    assert network_data(att(device="d1", result=result)) == {
        "interfaceName": "net1", "ips": ["10.56.0.5/24", "fd00::5/64"],
        "hardwareAddress": "02:aa:00:00:00:01"}


def test_a_claims_status_keeps_other_devices_and_conditions() -> None:
    current = [{"driver": "gpu.example.com", "pool": "n", "device": "gpu0",
                "conditions": [{"type": "Ready", "status": "True"}]},
               {"driver": "net.example.com", "pool": "n", "device": "vf1",
                "conditions": [{"type": "Healthy", "status": "True"},
                               {"type": "Ready", "status": "False",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
    a = att(device="0000:3b:02.1", result={"interfaces": [], "ips": []})
    out = merged(current, {("net.example.com", "n", "vf1", ""): a,
                           ("net.example.com", "n", "vf2", "s1"): a}, NOW)
    assert out[0] == current[0]
    assert [c["type"] for c in out[1]["conditions"]] == ["Healthy", "Ready"]
    assert out[1]["conditions"][1]["status"] == "True"
    assert out[1]["conditions"][1]["lastTransitionTime"] == NOW  # False → True: now
    assert out[1]["networkData"]["interfaceName"] == "net1"
    assert out[2]["device"] == "vf2" and out[2]["shareID"] == "s1" and out[2]["networkData"]


NOW, LATER = "2026-12-06T10:00:00Z", "2026-12-06T10:05:00Z"


def test_the_ready_conditions_transition_time_stays_while_it_stays_true() -> None:
    """Finding 3: every write moved lastTransitionTime, also True → True."""
    a = att(device="d1", result={"interfaces": [], "ips": []})
    key = ("net.example.com", "n", "vf1", "")
    first = merged([{"driver": "net.example.com", "pool": "n", "device": "vf1"}], {key: a}, NOW)
    again = merged(first, {key: att(ifname="net2", device="d1", result={})}, LATER)
    (ready,) = again[0]["conditions"]
    assert ready["lastTransitionTime"] == NOW and ready["status"] == "True"
    assert "net2" in ready["message"] and again[0]["networkData"]["interfaceName"] == "net2"
    assert merged(first, {key: a}, LATER) == first  # nothing changes: nothing to write


def slice_of(driver: str, pool: str, devices: dict[str, dict[str, str]]) -> Slice:
    return msgspec.convert({"spec": {"driver": driver, "pool": {"name": pool}, "devices": [
        {"name": n, "attributes": {k: {"string": v} for k, v in attrs.items()}}
        for n, attrs in devices.items()]}}, Slice)


def test_a_claims_network_devices_are_those_their_slices_name() -> None:
    published = index([slice_of("net.example.com", "node-a", {
        "vf0": {"k8s.cni.cncf.io/resourceName": RES, "k8s.cni.cncf.io/deviceID": "0000:3b:02.0"},
        "vf1": {"k8s.cni.cncf.io/deviceID": "0000:3b:02.1"},  # no resource of its own
    }), slice_of("gpu.example.com", "node-a", {"gpu0": {}})])
    results = [Result("net.example.com", "node-a", "vf0", "net"),
               Result("gpu.example.com", "node-a", "gpu0", "gpu"),
               Result("net.example.com", "node-a", "vf1", "container-0-request-0")]
    held = held_in("c1", results, published, {})
    assert [(h.device, h.resource, h.device_id) for h in held] == [("vf0", RES, "0000:3b:02.0")]
    # the pod's extended-resource claim: a device without a resourceName attribute is the
    # extended resource its request serves
    extended = held_in("c1", results, published, {"container-0-request-0": "netctl.test/vf"})
    assert [(h.device, h.resource) for h in extended] == [("vf0", RES),
                                                         ("vf1", "netctl.test/vf")]
    assert by_resource(extended + held, {RES}) == {RES: ["0000:3b:02.0"]}


def test_a_pods_claims_are_its_direct_template_and_extended_ones() -> None:
    """Finding 2: a claim the pod names directly is in its spec only (the API server never
    lists it in status.resourceClaimStatuses); a template's is in the status; the
    extended-resource claim in status.extendedResourceClaimStatus."""
    pod = msgspec.convert({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"resourceClaims": [
            {"name": "direct", "resourceClaimName": "shared-vf"},
            {"name": "made", "resourceClaimTemplateName": "vf-template"},
            {"name": "pending", "resourceClaimTemplateName": "vf-template"},
            {"name": "none", "resourceClaimTemplateName": "vf-template"},
            {"name": "again", "resourceClaimName": "shared-vf"}]},
        "status": {"resourceClaimStatuses": [
            {"name": "made", "resourceClaimName": "p-made-x7k2p"},
            {"name": "none"}],  # the controller decided no claim is needed
            "extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-abcde",
                                            "requestMappings": [
                {"containerName": "main", "resourceName": "netctl.test/vf",
                 "requestName": "container-0-request-0"}]}}}, KubePod)
    assert pod.claims == ["shared-vf", "p-made-x7k2p", "p-extended-resources-abcde"]
    assert pod.extended_requests == {"container-0-request-0": "netctl.test/vf"}
    # a status entry the spec does not name is no claim of the pod
    stray = msgspec.convert({"status": {"resourceClaimStatuses": [
        {"name": "x", "resourceClaimName": "c"}]}}, KubePod)
    assert stray.claims == [] and stray.extended_requests == {}


def test_a_refused_write_says_which_grant_is_missing() -> None:
    reason = ('ResourceClaim.resource.k8s.io "c" is invalid: status.devices: Forbidden: '
              'changing status.devices requires resource="resourceclaims/driver", '
              'verb="[associated-node:patch arbitrary-node:patch]" permission: …')
    note = refusal_note("ns", "c", reason)
    assert note.startswith("the networkData of ResourceClaim ns/c was not written: ")
    assert "associated-node:patch on resourceclaims/driver" in note and "rbac.yaml" in note
    assert "rbac.yaml" not in refusal_note("ns", "c", "the server is unreachable")


def test_a_slice_keeps_only_the_network_attributes() -> None:
    raw = {"spec": {"driver": "d", "nodeName": "n", "pool": {"name": "p"}, "devices": [
        {"name": "vf1", "attributes": {
            "k8s.cni.cncf.io/deviceID": {"string": "0000:3b:02.1"},
            "k8s.cni.cncf.io/resourceName": {"string": RES},
            "dra.net/numaNode": {"int": 1}, "dra.net/sriov": {"bool": True}}}]}}
    sl = msgspec.json.decode(json.dumps(raw), type=Slice)
    assert set(sl.spec.devices[0].attributes) == {"k8s.cni.cncf.io/deviceID",
                                                  "k8s.cni.cncf.io/resourceName"}
    assert sl.spec.devices[0].attributes["k8s.cni.cncf.io/deviceID"].text() == "0000:3b:02.1"


def test_device_info_is_found_through_the_hosts_var_run_link(tmp_path: Path) -> None:
    """On the host /var/run is a link to /run: read in the host's root, not the daemon's."""
    (tmp_path / "run").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to("/run")  # absolute, as on the host
    root = HostRoot(str(tmp_path))
    dp = tmp_path / "run" / devinfo.dp_path(RES, "d1").removeprefix("/var/run/")
    dp.parent.mkdir(parents=True)
    dp.write_text('{"type": "pci"}')
    target = devinfo.cni_path("net", "c1", "net1")
    assert devinfo.copy_for_cni(RES, "d1", target, root) == ""
    assert (tmp_path / "run" / target.removeprefix("/var/run/")).exists()
    assert devinfo.read(target, root) == ({"type": "pci"}, "")
