"""The kit's parts for device networks (``netctl/kit/devices.py``) and the ``devmove`` test
delegate (``tests/plugins/devmove``), on real parts.

We test these aspects:

- devmove, exec'd as a runtime execs it with Debian's ``static`` IPAM, moves a host veth end
  (:func:`~netctl_kit.devices.device_veths`) into a real netns as CNI_IFNAME, up, with the
  IPAM's address and route, and returns it (name, MAC, sandbox, ips on interface 0) in each
  cniVersion static speaks; it records what it was given; an ADD again answers the same;
  DEL puts the device back on the host under its name, up, and removes the record; a DEL
  again succeeds. ``runtimeConfig.deviceID`` alone works (cniVersion 1.1.0, no IPAM).
- devmove's refusals: no deviceID (code 7), a device that is nowhere (code 7 naming it),
  an IPAM failure passed on with the device back on the host.
- :func:`~netctl_kit.devices.remove_device_veths` removes a pair whose device end is in a
  netns (by its host peer).
- :class:`~netctl_kit.devices.PodResourcesServer` answers ``v1.PodResourcesLister/List``
  as the kubelet's proto lays it out (read here by field number with
  :mod:`netctl.devices.proto` through a plain grpcio call, not the kit's code), follows
  edits of its mapping, fails with ``UNAVAILABLE`` when set so, and removes its socket.
- :class:`~netctl_kit.devices.DevicePlugin` against a Registration recorder (here, no
  kubelet): what it registers, its device list, Allocate, GetPreferredAllocation and
  PreStartContainer answers, its device-info files; all gone when it closes; a refused
  registration; registering again on a new socket.
- the device plugin against the real kubelet v1.24: in ``test_realnode.py``'s device test,
  where netctl reads the kubelet's real PodResources answer for the devices it allocated.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from netctl_kit import devices as kit
from netctl_kit import protoencode
from netctl_kit.devices import (
    DevicePlugin,
    PodResourcesServer,
    device_veths,
    remove_device_veths,
    temporary_device_veths,
)
from netctl_kit.harness import NETNS_DIR, CNIResult, exec_plugin

from netctl.devices import proto
from tests.conftest import (
    RUN_TAG,
    SYSTEM_CNI,
    TEST_PLUGINS,
    host_links,
    ip,
    netns_addrs,
    netns_links,
)

pytestmark = [pytest.mark.netns]

DEVMOVE = str(TEST_PLUGINS / "devmove")
STATIC_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0")  # what Debian's static speaks
RESOURCE = "netctl.test/veth"
PodDevices = dict[tuple[str, str], dict[str, dict[str, list[str]]]]


# -- devmove -----------------------------------------------------------------------------------


@pytest.fixture
def prefix() -> Iterator[str]:
    """A name prefix for this test's device veths (``nct<run><test>``: 9 characters);
    whatever is left of them removed at the end."""
    tag = f"nct{RUN_TAG}{secrets.token_hex(1)}"
    try:
        yield tag
    finally:
        assert remove_device_veths(tag) == []


def devmove_conf(version: str, device: str, record: Path | None = None, *,
                 address: str = "", runtime_device: str = "") -> dict[str, Any]:
    """devmove's conf as netctl passes it for a device network (``deviceID``,
    ``pciBusID``, runtimeConfig), with static IPAM giving ``address`` when set."""
    conf: dict[str, Any] = {"cniVersion": version, "name": "devnet", "type": "devmove"}
    if device:
        conf.update(deviceID=device, pciBusID="0000:ff:00.1")
    if runtime_device:
        conf["runtimeConfig"] = {"deviceID": runtime_device,
                                 "CNIDeviceInfoFile": "/tmp/nonexistent-devinfo.json"}
    if record is not None:
        conf["record"] = str(record)
    if address:
        conf["ipam"] = {"type": "static", "addresses": [{"address": address}],
                        "routes": [{"dst": "10.251.0.0/16"}]}
    return conf


def devmove(command: str, conf: dict[str, Any], ns: str, container: str = "c1",
            ifname: str = "net1") -> CNIResult:
    return exec_plugin(DEVMOVE, command, conf, container=container, netns=ns, ifname=ifname,
                       cni_path=SYSTEM_CNI, timeout=60)


def link_json(name: str, ns: str = "") -> dict[str, Any]:
    args = ["-n", ns] if ns else []
    (found,) = json.loads(ip(*args, "-j", "link", "show", "dev", name).stdout)
    return dict(found)


@pytest.mark.parametrize("version", STATIC_VERSIONS)
def test_devmove_add_del(version: str, netns: Callable[[], str], prefix: str,
                         tmp_path: Path) -> None:
    ns = netns()
    dev, other = device_veths(prefix, 2)
    mac = link_json(dev)["address"]
    conf = devmove_conf(version, dev, tmp_path / "rec", address="10.250.0.5/24")

    res = devmove("ADD", conf, ns)
    assert res.rc == 0, res.describe()
    assert res.out is not None
    assert res.out["cniVersion"] == version
    assert res.out["interfaces"] == [{"name": "net1", "mac": mac,
                                      "sandbox": f"{NETNS_DIR}/{ns}"}]
    assert [(i["address"], i["interface"]) for i in res.out["ips"]] == [("10.250.0.5/24", 0)]
    assert res.out["routes"] == [{"dst": "10.251.0.0/16"}]
    # the device is in the netns as net1, up, with the address and route; not on the host
    assert sorted(netns_links(ns)) == ["lo", "net1"]
    assert netns_addrs(ns)["net1"] == ["10.250.0.5/24"]
    assert "UP" in link_json("net1", ns)["flags"]
    assert "10.251.0.0/16 dev net1" in ip("-n", ns, "route", "show").stdout
    assert dev not in host_links(prefix) and other in host_links(prefix)
    record = tmp_path / "rec" / "c1-net1.json"
    assert json.loads(record.read_text()) == {
        "deviceID": dev, "pciBusID": "0000:ff:00.1", "runtimeConfig": None,
        "ifname": "net1", "netns": f"{NETNS_DIR}/{ns}"}

    again = devmove("ADD", conf, ns)  # a runtime's retry: done already, the same answer
    assert again.rc == 0 and again.out == res.out, again.describe()
    assert netns_addrs(ns)["net1"] == ["10.250.0.5/24"]

    for _ in range(2):  # DEL, then DEL again: nothing left to do, still a success
        gone = devmove("DEL", conf, ns)
        assert gone.rc == 0 and gone.stdout == "", gone.describe()
        assert netns_links(ns) == ["lo"]
        back = link_json(dev)
        assert back["address"] == mac and "UP" in back["flags"] and not back.get("ifalias")
        assert not record.exists()


def test_devmove_runtime_config_device(netns: Callable[[], str], prefix: str,
                                       tmp_path: Path) -> None:
    """No conf ``deviceID``: the runtimeConfig's; no IPAM: no addresses; cniVersion 1.1.0."""
    ns = netns()
    (dev,) = device_veths(prefix, 1)
    conf = devmove_conf("1.1.0", "", tmp_path, runtime_device=dev)
    res = devmove("ADD", conf, ns, container="c2", ifname="dev0")
    assert res.rc == 0, res.describe()
    assert res.out is not None
    assert res.out["interfaces"][0]["name"] == "dev0" and res.out["ips"] == []
    assert res.out["cniVersion"] == "1.1.0"
    assert netns_addrs(ns) == {"lo": [], "dev0": []}
    recorded = json.loads((tmp_path / "c2-dev0.json").read_text())
    assert recorded["deviceID"] is None and recorded["runtimeConfig"]["deviceID"] == dev
    assert devmove("DEL", conf, ns, container="c2", ifname="dev0").rc == 0
    assert netns_links(ns) == ["lo"] and dev in host_links(prefix)


def test_devmove_refusals(netns: Callable[[], str], prefix: str) -> None:
    ns = netns()
    (dev,) = device_veths(prefix, 1)

    res = devmove("ADD", devmove_conf("1.0.0", ""), ns)
    assert res.rc == 1 and res.out is not None
    assert (res.out["code"], res.out["msg"]) == (7, "devmove: no deviceID in the config")

    res = devmove("ADD", devmove_conf("1.0.0", f"{prefix}d9"), ns)
    assert res.rc == 1 and res.out is not None and res.out["code"] == 7
    assert f"{prefix}d9" in res.out["msg"]

    # static refuses an address that is not one: the device goes back, its error goes on
    res = devmove("ADD", devmove_conf("1.0.0", dev, address="10.250.0.5/99"), ns)
    assert res.rc == 1 and res.out is not None, res.describe()
    assert res.out["code"] == 999 and "10.250.0.5/99" in res.out["msg"]  # static's own
    assert netns_links(ns) == ["lo"]
    assert "UP" in link_json(dev)["flags"]

    assert devmove("CHECK", devmove_conf("1.0.0", dev), ns).rc == 0
    version = devmove("VERSION", {}, ns)
    assert version.out == {"cniVersion": "1.0.0",
                           "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}


def test_remove_device_veths_from_a_netns(netns: Callable[[], str], prefix: str) -> None:
    """A device end moved into a netns goes with its host peer."""
    ns = netns()
    with temporary_device_veths(prefix, 2) as made:
        assert made == [f"{prefix}d0", f"{prefix}d1"]
        assert sorted(host_links(prefix)) == sorted([*made, f"{prefix}p0", f"{prefix}p1"])
        ip("link", "set", "dev", made[0], "netns", ns)
        assert f"{prefix}d0" in netns_links(ns)
    assert host_links(prefix) == []
    assert netns_links(ns) == ["lo"]
    with pytest.raises(ValueError, match="longer than 15"):
        device_veths("a-very-long-prefix", 1)


# -- PodResources --------------------------------------------------------------------------


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A dir with a short path (a unix socket's path has at most 107 bytes; pytest's
    tmp_path is long), removed at the end."""
    made = Path(tempfile.mkdtemp(prefix=f"nct{RUN_TAG}-"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def list_pod_resources(socket: Path) -> PodDevices:
    """``v1.PodResourcesLister/List`` through grpcio, read by field number:
    ``(namespace, name) → container → resource → device ids`` (the ContainerDevices of one
    resource merged: kubelet v1.24 gives each device its own)."""
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        call = channel.unary_unary("/v1.PodResourcesLister/List")
        raw = call(b"", timeout=10)
    out: PodDevices = {}
    for pod in proto.messages(proto.decode(raw), 1):  # ListPodResourcesResponse.pod_resources
        containers = out.setdefault((proto.text(pod, 2), proto.text(pod, 1)), {})
        for container in proto.messages(pod, 3):  # PodResources.containers
            resources = containers.setdefault(proto.text(container, 1), {})
            for devices in proto.messages(container, 2):  # ContainerResources.devices
                ids = resources.setdefault(proto.text(devices, 1), [])
                ids.extend(proto.texts(devices, 2))
    return out


def test_pod_resources_server(short_dir: Path) -> None:
    socket = short_dir / "pod-resources.sock"
    pods = {("ns1", "pod-a"): {RESOURCE: ["d0", "d1"], "other.test/x": ["x7"]}}
    with PodResourcesServer(socket, pods) as server:
        assert list_pod_resources(socket) == {
            ("ns1", "pod-a"): {"main": {RESOURCE: ["d0", "d1"], "other.test/x": ["x7"]}}}
        with grpc.insecure_channel(f"unix:{socket}") as channel:  # one entry a device
            raw = channel.unary_unary("/v1.PodResourcesLister/List")(b"", timeout=10)
        (pod,) = proto.messages(proto.decode(raw), 1)
        (container,) = proto.messages(pod, 3)
        assert [(proto.text(d, 1), proto.texts(d, 2)) for d in proto.messages(container, 2)] \
            == [(RESOURCE, ["d0"]), (RESOURCE, ["d1"]), ("other.test/x", ["x7"])]

        server.pods[("ns2", "pod-b")] = {RESOURCE: ["d2"]}
        del server.pods[("ns1", "pod-a")]
        assert list_pod_resources(socket) == {("ns2", "pod-b"): {"main": {RESOURCE: ["d2"]}}}
        server.per_device = False
        server.pods[("ns2", "pod-b")] = {RESOURCE: ["d2", "d3"]}
        assert list_pod_resources(socket) == {
            ("ns2", "pod-b"): {"main": {RESOURCE: ["d2", "d3"]}}}

        server.unavailable = True
        with pytest.raises(grpc.RpcError) as failed:
            list_pod_resources(socket)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        server.unavailable = False
        assert list_pod_resources(socket) != {}
        assert server.calls == 6
    assert not socket.exists()


# -- the device plugin, against a Registration recorder -----------------------------------------


class Registrations:
    """The kubelet's ``v1beta1.Registration`` service on ``DIR/kubelet.sock``, recording
    each request: (version, endpoint, resource, options)."""

    def __init__(self, plugin_dir: Path) -> None:
        self.requests: list[tuple[str, str, str, tuple[int, int]]] = []
        self.refuse = False
        self.server = grpc.server(ThreadPoolExecutor(2))
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "v1beta1.Registration",
            {"Register": grpc.unary_unary_rpc_method_handler(self.register)})])
        self.server.add_insecure_port(f"unix:{plugin_dir / 'kubelet.sock'}")
        self.server.start()

    def register(self, request: bytes, context: Any) -> bytes:
        msg = proto.decode(request)
        (opts,) = proto.messages(msg, 4)
        self.requests.append((proto.text(msg, 1), proto.text(msg, 2), proto.text(msg, 3),
                              (protoencode.integer(opts, 1), protoencode.integer(opts, 2))))
        if self.refuse:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused by the recorder")
        return b""

    def close(self) -> None:
        self.server.stop(0).wait()


def test_device_plugin_served(short_dir: Path) -> None:
    plugin_dir, devinfo = short_dir / "device-plugins", short_dir / "run" / "devinfo"
    plugin_dir.mkdir()
    kubelet = Registrations(plugin_dir)
    try:
        with DevicePlugin("netctl.test/veth", ["v0", "pci/1"], plugin_dir, devinfo,
                          pre_start=True) as plugin:
            assert plugin.registered
            assert kubelet.requests == [("v1beta1", plugin.socket.name, RESOURCE, (1, 1))]
            assert plugin.socket.parent == plugin_dir and plugin.socket.is_socket()
            files = sorted(p.name for p in (devinfo / "dp").iterdir())
            assert files == ["netctl.test-veth-pci-1-device.json",
                             "netctl.test-veth-v0-device.json"]
            assert json.loads((devinfo / "dp" / files[1]).read_text()) == {
                "type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:ff:00.0"}}
            assert plugin.pci_addresses == {"v0": "0000:ff:00.0", "pci/1": "0000:ff:00.1"}

            with grpc.insecure_channel(f"unix:{plugin.socket}") as channel:
                def call(method: str, request: bytes) -> bytes:
                    fn = channel.unary_unary(f"/v1beta1.DevicePlugin/{method}")
                    return bytes(fn(request, timeout=10))

                options = proto.decode(call("GetDevicePluginOptions", b""))
                assert (protoencode.integer(options, 1), protoencode.integer(options, 2)) == (1, 1)
                stream = channel.unary_stream("/v1beta1.DevicePlugin/ListAndWatch")(b"")
                first = proto.decode(next(stream))
                assert [(proto.text(d, 1), proto.text(d, 2)) for d in proto.messages(first, 1)] \
                    == [("v0", "Healthy"), ("pci/1", "Healthy")]
                plugin.wait_watched(10)

                want = protoencode.encode([(1, [(1, "v0"), (1, "pci/1"), (2, "pci/1"), (3, 2)]),
                                     (1, [(1, "v0"), (1, "pci/1"), (3, 1)])])
                preferred = proto.decode(call("GetPreferredAllocation", want))
                assert [proto.texts(c, 1) for c in proto.messages(preferred, 1)] == \
                    [["pci/1", "v0"], ["v0"]]

                request = protoencode.encode([(1, [(1, "pci/1")]), (1, [(1, "v0")])])
                answer = proto.decode(call("Allocate", request))
                assert answer.get(1) == [b"", b""]  # two empty ContainerAllocateResponses
                assert plugin.allocated == [["pci/1", "v0"]]
                assert call("PreStartContainer", protoencode.encode([(1, "v0")])) == b""
                assert plugin.prestarted == [["v0"]]

                ended = threading.Event()  # the stream ends when the plugin closes

                def drain() -> None:
                    for _ in stream:
                        pass
                    ended.set()
                reader = threading.Thread(target=drain, daemon=True)
                reader.start()
                plugin.close()
                assert ended.wait(10)
                reader.join(10)
            assert plugin.calls == ["GetDevicePluginOptions", "ListAndWatch",
                                    "GetPreferredAllocation", "Allocate", "PreStartContainer"]
        assert not plugin.registered and not plugin.socket.exists()
        assert not devinfo.exists()  # the dirs it made, removed once empty

        kubelet.refuse = True
        with pytest.raises(kit.DevicePluginError, match="INVALID_ARGUMENT"):
            with DevicePlugin(RESOURCE, ["v0"], plugin_dir, devinfo):
                pass
        assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"]
        assert not devinfo.exists()
    finally:
        kubelet.close()


def test_device_plugin_registers_again(short_dir: Path) -> None:
    """After a kubelet restart (which removes the plugin's socket): a new socket, served,
    and a second registration naming it."""
    plugin_dir = short_dir / "device-plugins"
    plugin_dir.mkdir()
    kubelet = Registrations(plugin_dir)
    try:
        with DevicePlugin(RESOURCE, ["v0"], plugin_dir, short_dir / "devinfo") as plugin:
            first = plugin.socket
            first.unlink()  # what the new kubelet does to what its plugin dir holds
            plugin.register_again()
            assert plugin.registered and plugin.socket != first and plugin.socket.is_socket()
            assert [r[1] for r in kubelet.requests] == [first.name, plugin.socket.name]
            options = kit.unix_call(plugin.socket, "/v1beta1.DevicePlugin/"
                                    "GetDevicePluginOptions", b"")
            assert protoencode.integer(proto.decode(options), 2) == 1
        assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"]
    finally:
        kubelet.close()
