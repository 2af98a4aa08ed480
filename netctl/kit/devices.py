"""Devices for the tests of device networks: a real kubelet device plugin, a stand-in for
the kubelet's PodResources API, and host veths to hand out as devices.

A device network (what Multus does for SR-IOV) is a NetworkAttachmentDefinition annotated
``k8s.v1.cni.cncf.io/resourceName: VENDOR/RESOURCE``: netctl reads, from the kubelet's
PodResources API, which of that resource's devices the kubelet gave the pod, and passes one
to the delegate as ``deviceID``. The parts here let tests run that chain on real pieces:

- :class:`DevicePlugin` is a device plugin speaking the kubelet's device-plugin API
  ``v1beta1`` (``k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto``). It serves
  ``v1beta1.DevicePlugin`` on ``PLUGIN_DIR/<unique name>.sock`` (grpcio, a thread pool),
  then calls ``v1beta1.Registration/Register`` on ``PLUGIN_DIR/kubelet.sock`` with its
  socket's file name, the resource name and its options. The kubelet (v1.24, as seen on
  the real node) then dials it back, calls ``GetDevicePluginOptions`` and opens
  ``ListAndWatch``: the plugin sends its devices once, all ``Healthy``, and keeps the
  stream open until it closes; for a pod it calls ``GetPreferredAllocation`` (when
  advertised), then ``Allocate`` once per container. ``Allocate`` answers one empty
  ``ContainerAllocateResponse`` per container request (no env, mounts or device nodes: a
  veth needs none) and appends the ids each call asked for to :attr:`DevicePlugin.allocated`;
  ``GetPreferredAllocation`` (advertised unless ``preferred_allocation=False``) prefers the
  ids it must include, then the available ones in the kubelet's order. Every call is named
  in :attr:`DevicePlugin.calls`. For each device it writes the device-info file the Network
  Plumbing WG's device-info spec has a device plugin write,
  ``DEVINFO_DIR/dp/<resource>-<device id>-device.json`` (``/`` → ``-`` in both), holding
  ``{"type": "pci", "version": "1.1.0", "pci": {"pci-address": …}}``; the PCI addresses are
  made up (``0000:ff:DD.F``, one per device in order, :func:`pci_address`): a test stand-in,
  not a device. Leaving, it stops its server (the kubelet sees the stream end: the
  node's allocatable count drops to 0 within seconds, its capacity stays) and removes its
  socket and its device-info files. A restarted kubelet removes the plugin's socket
  and forgets it (the node's capacity and allocatable count drop to 0):
  :meth:`DevicePlugin.register_again` serves on a new socket and registers again.
- :class:`PodResourcesServer` answers ``v1.PodResourcesLister/List`` of the PodResources
  API ``v1`` (``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``) on a unix socket, from
  a mapping the test edits: ``(namespace, name) → resource → device ids``, one container
  ``main`` per pod, each device id in a ``ContainerDevices`` of its own as kubelet v1.24
  answers (``per_device=False``: one a resource, all its ids in it); and, as kubelets from
  v1.27 answer for DRA, the pod's prepared claims (:attr:`PodResourcesServer.claims`:
  ``(namespace, name) → [Prepared]``) as the container's ``dynamic_resources``. With
  ``unavailable = True`` every call fails with gRPC's ``UNAVAILABLE``. For machines without
  a kubelet.
- :func:`device_veths` makes host veth pairs whose ``PREFIXd<i>`` end plays a device (a
  netdev a CNI plugin moves into the pod, as SR-IOV CNI moves a VF) and ``PREFIXp<i>`` the
  peer that stays on the host; :func:`remove_device_veths` deletes them by the peer, which
  works wherever the device end has gone (deleting one end of a veth deletes both).

Messages are encoded and decoded by field number (:mod:`netctl.devices.proto`) and go
through grpcio with identity serializers: no generated code. The field numbers, services
and methods are those of the kubelet's protos named above (kubelet v1.24).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc  # in the dev extra (tests/cri.py drives containerd with it too)
from netctl_kit import protoencode
from netctl_kit.harness import HarnessError, host_links, ip

from netctl.devices import proto

API_VERSION = "v1beta1"  # the device-plugin API version the kubelet (v1.24) supports
HEALTHY = "Healthy"
KUBELET_SOCKET = "kubelet.sock"  # the kubelet's Registration service, in the plugin dir
DEVICE_PLUGIN_SERVICE = "v1beta1.DevicePlugin"
REGISTER = "/v1beta1.Registration/Register"
POD_RESOURCES_SERVICE = "v1.PodResourcesLister"
POD_RESOURCES_LIST = f"/{POD_RESOURCES_SERVICE}/List"
DEVINFO_DIR = Path("/var/run/k8s.cni.cncf.io/devinfo")  # the device-info spec's base dir
DEVINFO_VERSION = "1.1.0"
CONTAINER = "main"  # the one container of PodResourcesServer's pods
IFNAMSIZ = 15  # the longest interface name Linux takes
SUN_PATH_MAX = 107  # the longest path a unix socket can be bound at
WORKERS = 8  # gRPC server threads: each open ListAndWatch stream holds one


class DevicePluginError(RuntimeError):
    """The kubelet refused (or never answered) a device plugin's registration."""


# -- the messages (pure) ---------------------------------------------------------------------


def pci_address(index: int) -> str:
    """The made-up PCI address of the ``index``-th device: bus ``ff`` of domain 0, eight
    functions a slot (``0000:ff:00.0`` … ``0000:ff:00.7``, ``0000:ff:01.0`` …)."""
    return f"0000:ff:{index // 8:02x}.{index % 8}"


def devinfo_path(devinfo_dir: Path, resource: str, device: str) -> Path:
    """Where a device plugin writes a device's device-info file (the spec's
    ``dp/<resource>-<device id>-device.json``, each ``/`` made ``-``)."""
    name = f"{resource.replace('/', '-')}-{device.replace('/', '-')}-device.json"
    return devinfo_dir / "dp" / name


def device_info(pci: str) -> dict[str, Any]:
    """A PCI device's device-info document (the spec's version 1.1.0)."""
    return {"type": "pci", "version": DEVINFO_VERSION, "pci": {"pci-address": pci}}


def plugin_options(*, preferred_allocation: bool, pre_start: bool) -> protoencode.Fields:
    """``DevicePluginOptions``: pre_start_required (1), get_preferred_allocation_available
    (2)."""
    return [(1, pre_start), (2, preferred_allocation)]


def register_request(resource: str, endpoint: str, options: protoencode.Fields) -> bytes:
    """``RegisterRequest``: version (1), endpoint (2: the socket's file name, in the plugin
    dir), resource_name (3), options (4)."""
    return protoencode.encode([(1, API_VERSION), (2, endpoint), (3, resource), (4, options)])


def device_list(devices: Iterable[str]) -> bytes:
    """``ListAndWatchResponse``: repeated Device (1), each ID (1) and health (2)."""
    return protoencode.encode([(1, [(1, device), (2, HEALTHY)]) for device in devices])


def allocate_requests(request: bytes) -> list[list[str]]:
    """An ``AllocateRequest``'s container requests (1), each its devices_ids (1)."""
    return [proto.texts(c, 1) for c in proto.messages(proto.decode(request), 1)]


def allocate_response(containers: int) -> bytes:
    """``AllocateResponse``: one empty ``ContainerAllocateResponse`` (1) a container."""
    return protoencode.encode([(1, []) for _ in range(containers)])


def preferred_allocation(request: bytes) -> bytes:
    """``PreferredAllocationResponse`` for a ``PreferredAllocationRequest``: for each
    container request (1: available_deviceIDs 1, must_include_deviceIDs 2, allocation_size
    3), the ids it must include, then available ones in order, up to the size."""
    answers: protoencode.Fields = []
    for want in proto.messages(proto.decode(request), 1):
        chosen = proto.texts(want, 2)
        for device in proto.texts(want, 1):
            if len(chosen) >= protoencode.integer(want, 3):
                break
            if device not in chosen:
                chosen.append(device)
        answers.append((1, [(1, device) for device in chosen]))
    return protoencode.encode(answers)


@dataclass(frozen=True)
class Prepared:
    """A DRA device the kubelet prepared for a pod: its claim and where it is published."""

    claim: str
    driver: str
    pool: str
    device: str
    namespace: str = "default"  # the claim's


def pod_resources(pods: Mapping[tuple[str, str], Mapping[str, Sequence[str]]], *,
                  per_device: bool = True,
                  claims: Mapping[tuple[str, str], Sequence[Prepared]] | None = None) -> bytes:
    """``ListPodResourcesResponse``: repeated PodResources (1: name 1, namespace 2,
    containers 3), its one container ``main`` (ContainerResources: name 1, devices 2,
    dynamic_resources 5), its devices as ContainerDevices (resource_name 1, repeated
    device_ids 2): one a device, as kubelet v1.24 answers (one a device and NUMA node; no
    topology here), or with not ``per_device`` one a resource holding all its ids (what the
    proto also allows); its ``claims`` as DynamicResource (claim_name 2, claim_namespace 3,
    claim_resources 4), one a claim, each device a ClaimResource (driver_name 2, pool_name
    3, device_name 4; no CDI devices)."""
    out: protoencode.Fields = []
    claims = claims or {}
    for namespace, name in sorted({*pods, *claims}):
        resources = pods.get((namespace, name), {})
        if per_device:
            groups = [(r, [device]) for r, ids in sorted(resources.items()) for device in ids]
        else:
            groups = [(r, list(ids)) for r, ids in sorted(resources.items())]
        devices: protoencode.Fields = [
            (2, [(1, resource), *((2, device) for device in ids)]) for resource, ids in groups]
        by_claim: dict[tuple[str, str], list[Prepared]] = {}
        for p in claims.get((namespace, name), ()):
            by_claim.setdefault((p.namespace, p.claim), []).append(p)
        dynamic: protoencode.Fields = []
        for (ns, claim), prepared in by_claim.items():
            resources_: protoencode.Fields = [(4, [(2, p.driver), (3, p.pool), (4, p.device)])
                                        for p in prepared]
            dynamic.append((5, [(2, claim), (3, ns), *resources_]))
        out.append((1, [(1, name), (2, namespace), (3, [(1, CONTAINER), *devices, *dynamic])]))
    return protoencode.encode(out)


# -- gRPC ------------------------------------------------------------------------------------


def unix_server(socket: Path, service: str, handlers: Mapping[str, Any]) -> Any:
    """A started grpcio server of ``service`` (``handlers``: method → handler) on a unix
    socket (a stale file there replaced)."""
    if len(str(socket).encode()) > SUN_PATH_MAX:
        raise ValueError(f"{socket}: a unix socket's path has at most {SUN_PATH_MAX} bytes")
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
    server = grpc.server(futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="kit-grpc"))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, handlers)])
    server.add_insecure_port(f"unix:{socket}")  # raises RuntimeError when it cannot bind
    server.start()
    return server


def unix_call(socket: Path, method: str, request: bytes, timeout: float = 10.0) -> bytes:
    """One unary gRPC call (``method``: ``/package.Service/Method``) on a unix socket;
    grpc.RpcError when it fails."""
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        call = channel.unary_unary(method, request_serializer=None,
                                   response_deserializer=None)
        return bytes(call(request, timeout=timeout))


def stop_server(server: Any, grace: float = 1.0) -> None:
    server.stop(grace).wait(grace + 5)


# -- the device plugin -----------------------------------------------------------------------


class DevicePlugin:
    """A device plugin for ``resource`` offering ``devices`` to the kubelet whose plugin
    dir is ``plugin_dir`` (see the module's doc). A context manager: serving and registered
    inside, everything taken back on the way out (also after a failure)."""

    def __init__(self, resource: str, devices: Sequence[str], plugin_dir: Path,
                 devinfo_dir: Path = DEVINFO_DIR, *, preferred_allocation: bool = True,
                 pre_start: bool = False, timeout: float = 10.0) -> None:
        """``preferred_allocation``, ``pre_start``: the options it registers with (the
        kubelet then calls GetPreferredAllocation, PreStartContainer); ``timeout``: for
        the Register call."""
        self.resource = resource
        self.devices = list(devices)
        self.plugin_dir, self.devinfo_dir = Path(plugin_dir), Path(devinfo_dir)
        tag = re.sub(r"[^A-Za-z0-9_.-]", "-", resource)
        self.socket = self.plugin_dir / f"kit-{tag}-{secrets.token_hex(3)}.sock"
        self.options = plugin_options(preferred_allocation=preferred_allocation,
                                      pre_start=pre_start)
        self.timeout = timeout
        self.pci_addresses = {d: pci_address(i) for i, d in enumerate(self.devices)}
        self.allocated: list[list[str]] = []  # the ids of each Allocate call, in order
        self.prestarted: list[list[str]] = []  # the ids of each PreStartContainer call
        self.calls: list[str] = []  # the methods the kubelet called, in order
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._watched = threading.Event()
        self._streams: set[threading.Event] = set()  # the open ListAndWatch streams
        self._registered = False
        self._server: Any = None
        self._devinfo_written: list[Path] = []
        self._dirs_made: list[Path] = []

    # -- life cycle

    def __enter__(self) -> DevicePlugin:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Device-info files written, the server started, then registered."""
        self._write_devinfo()
        self._serve()
        self._register()

    def register_again(self) -> None:
        """After a kubelet restart: the new kubelet removes what its plugin dir holds (this
        plugin's socket too) and forgets the plugin, so serve on a new socket and register
        again, as a device plugin does when it sees ``kubelet.sock`` made anew."""
        self._stop_server()
        self._watched.clear()
        self.socket = self.socket.with_name(f"{self.socket.name.rsplit('-', 1)[0]}-"
                                            f"{secrets.token_hex(3)}.sock")
        self._closing.clear()
        self._serve()
        self._register()

    def _serve(self) -> None:
        self._server = unix_server(self.socket, DEVICE_PLUGIN_SERVICE, {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(self._options),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(self._list_and_watch),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(self._preferred),
            "Allocate": grpc.unary_unary_rpc_method_handler(self._allocate),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(self._pre_start),
        })

    def _register(self) -> None:
        """``Registration/Register`` on the kubelet's socket; :class:`DevicePluginError`
        when it refuses or does not answer (the kubelet answers once it has dialled the
        plugin back, up to 10 s)."""
        request = register_request(self.resource, self.socket.name, self.options)
        self._registered = False
        try:
            unix_call(self.plugin_dir / KUBELET_SOCKET, REGISTER, request, self.timeout)
        except grpc.RpcError as exc:
            raise DevicePluginError(
                f"the kubelet at {self.plugin_dir / KUBELET_SOCKET} did not register "
                f"{self.resource}: {exc.code()} {exc.details()}") from exc
        self._registered = True

    def close(self) -> None:
        """The streams ended, the server stopped, the socket and device-info files gone."""
        self._stop_server()
        for path in self._devinfo_written:
            path.unlink(missing_ok=True)
        for d in reversed(self._dirs_made):  # only dirs it made, only when empty
            with contextlib.suppress(OSError):
                d.rmdir()
        self._devinfo_written, self._dirs_made = [], []
        self._registered = False

    def _stop_server(self) -> None:
        """The open streams ended, the server stopped, its socket removed."""
        with self._lock:
            self._closing.set()
            for stream in self._streams:
                stream.set()
        if self._server is not None:
            stop_server(self._server)
            self._server = None
        self.socket.unlink(missing_ok=True)
        self._registered = False

    @property
    def registered(self) -> bool:
        """The kubelet accepted the registration (and the plugin is not closed)."""
        return self._registered

    @property
    def watched(self) -> bool:
        """The kubelet has dialled back and opened ListAndWatch."""
        return self._watched.is_set()

    def wait_watched(self, timeout: float = 30.0) -> None:
        """Until the kubelet has opened ListAndWatch (it does so after Register answers)."""
        if not self._watched.wait(timeout):
            raise DevicePluginError(f"the kubelet did not open ListAndWatch on {self.socket} "
                                    f"within {timeout}s (calls: {self.calls})")

    @property
    def devinfo_files(self) -> list[Path]:
        return list(self._devinfo_written)

    def _write_devinfo(self) -> None:
        top = self.devinfo_dir / "dp"
        missing = [p for p in (top, *top.parents) if not p.exists()]
        top.mkdir(parents=True, exist_ok=True)
        self._dirs_made = list(reversed(missing))  # outermost first; removed innermost first
        for device in self.devices:
            path = devinfo_path(self.devinfo_dir, self.resource, device)
            path.write_text(json.dumps(device_info(self.pci_addresses[device])))
            self._devinfo_written.append(path)

    # -- the service (called on grpcio's threads)

    def _called(self, method: str) -> None:
        with self._lock:
            self.calls.append(method)

    def _options(self, request: bytes, context: Any) -> bytes:
        self._called("GetDevicePluginOptions")
        return protoencode.encode(self.options)

    def _list_and_watch(self, request: bytes, context: Any) -> Iterator[bytes]:
        self._called("ListAndWatch")
        ended = threading.Event()  # set when the kubelet goes away or the plugin closes
        context.add_callback(ended.set)
        with self._lock:
            self._streams.add(ended)
            if self._closing.is_set():
                ended.set()
        try:
            yield device_list(self.devices)
            self._watched.set()
            ended.wait()
        finally:
            with self._lock:
                self._streams.discard(ended)

    def _preferred(self, request: bytes, context: Any) -> bytes:
        self._called("GetPreferredAllocation")
        return preferred_allocation(request)

    def _allocate(self, request: bytes, context: Any) -> bytes:
        self._called("Allocate")
        containers = allocate_requests(request)
        with self._lock:
            self.allocated.append([d for ids in containers for d in ids])
        return allocate_response(len(containers))

    def _pre_start(self, request: bytes, context: Any) -> bytes:
        self._called("PreStartContainer")
        with self._lock:
            self.prestarted.append(proto.texts(proto.decode(request), 1))
        return b""


# -- a stand-in for the kubelet's PodResources API --------------------------------------------


class PodResourcesServer:
    """``v1.PodResourcesLister/List`` on ``socket``, answered from :attr:`pods` (``(namespace,
    name) → resource → device ids``) and :attr:`claims` (``(namespace, name) →``
    :class:`Prepared` DRA devices), read at each call: a test edits them between calls;
    while :attr:`unavailable` is set every call fails with ``UNAVAILABLE``. A context
    manager; the socket is removed on the way out. ``per_device``: each device in a
    ContainerDevices of its own, as kubelet v1.24 answers (else one a resource)."""

    def __init__(self, socket: Path,
                 pods: Mapping[tuple[str, str], Mapping[str, Sequence[str]]] | None = None,
                 *, per_device: bool = True) -> None:
        self.socket = Path(socket)
        self.per_device = per_device
        self.pods: dict[tuple[str, str], dict[str, list[str]]] = {
            key: {r: list(ids) for r, ids in res.items()} for key, res in (pods or {}).items()}
        # DRA: (namespace, name) → the devices prepared for the pod's claims
        self.claims: dict[tuple[str, str], list[Prepared]] = {}
        self.unavailable = False
        self.calls = 0  # List calls answered or refused
        self._lock = threading.Lock()
        self._server: Any = None

    def __enter__(self) -> PodResourcesServer:
        try:
            self._server = unix_server(self.socket, POD_RESOURCES_SERVICE, {
                "List": grpc.unary_unary_rpc_method_handler(self._list)})
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            stop_server(self._server)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def _list(self, request: bytes, context: Any) -> bytes:
        with self._lock:
            self.calls += 1
        if self.unavailable:
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          "netctl kit: the PodResources stand-in is set unavailable")
        return pod_resources(dict(self.pods), per_device=self.per_device,
                             claims=dict(self.claims))


# -- host veths as devices ---------------------------------------------------------------------


def device_veth_names(prefix: str, count: int) -> list[tuple[str, str]]:
    """(device, peer) names: ``PREFIXd<i>``, ``PREFIXp<i>``; ValueError when one would be
    longer than Linux takes."""
    names = [(f"{prefix}d{i}", f"{prefix}p{i}") for i in range(count)]
    too_long = [n for pair in names for n in pair if len(n) > IFNAMSIZ]
    if too_long:
        raise ValueError(f"interface names longer than {IFNAMSIZ} characters: {too_long}; "
                         "use a shorter prefix")
    return names


def device_veths(prefix: str, count: int, netns: str | None = None) -> list[str]:
    """``count`` host veth pairs, both ends up: the devices' names (``PREFIXd<i>``); in the
    named network namespace ``netns`` (a real node's) when given. On a failure, those made
    are removed before the error goes on."""
    names = device_veth_names(prefix, count)
    at = ("-n", netns) if netns else ()
    try:
        for device, peer in names:
            ip(*at, "link", "add", device, "type", "veth", "peer", "name", peer)
            ip(*at, "link", "set", device, "up")
            ip(*at, "link", "set", peer, "up")
    except BaseException:
        remove_device_veths(prefix, netns)
        raise
    return [device for device, _ in names]


def remove_device_veths(prefix: str, netns: str | None = None) -> list[str]:
    """Every pair :func:`device_veths` made with ``prefix`` deleted, by its host peer (the
    device end goes with it wherever it is: a pod's netns too), then any device end left
    on the host; returns the names still on the host (none, normally)."""
    ours = re.compile(rf"{re.escape(prefix)}[dp]\d+")
    at = ("-n", netns) if netns else ()
    links = [n for n in host_links(prefix, netns) if ours.fullmatch(n)]
    for name in sorted(links, key=lambda n: n[len(prefix)] != "p"):  # peers first
        ip(*at, "link", "del", name, check=False)
    return [n for n in host_links(prefix, netns) if ours.fullmatch(n)]


@contextlib.contextmanager
def temporary_device_veths(prefix: str, count: int,
                           netns: str | None = None) -> Iterator[list[str]]:
    """:func:`device_veths` for the ``with`` block; removed after it, also on a failure
    (:class:`~netctl_kit.harness.HarnessError` when some cannot be)."""
    devices = device_veths(prefix, count, netns)
    try:
        yield devices
    except BaseException:
        remove_device_veths(prefix, netns)
        raise
    left = remove_device_veths(prefix, netns)
    if left:
        raise HarnessError(f"device veths not removed: {left}")
