"""A DRA driver for the tests of device networks: host veths published as network devices in a
ResourceSlice, and the claims a real kubelet prepares through them.

Dynamic Resource Allocation (``resource.k8s.io/v1``) splits a driver in two: what it
publishes in the API (ResourceSlices: the devices of a node, with attributes), and a
kubelet plugin the kubelet calls before a pod's containers start. :class:`DraDriver` is
both, written from the kubelet's APIs (no generated code; the messages are encoded and
decoded by field number, :mod:`netctl.devices.proto`, and served through grpcio with
identity serializers, as :mod:`netctl_kit.devices` serves the device-plugin API):

- **Registration** (``pluginregistration`` v1, the kubelet's plugin watcher): a socket in
  the kubelet's ``plugins_registry`` directory, ``<driver>-reg.sock``, serving
  ``pluginregistration.Registration``. The kubelet sees the socket appear, calls
  ``GetInfo`` (``InfoRequest`` {} → ``PluginInfo``: type 1 ``"DRAPlugin"``, name 2 the
  driver's name, endpoint 3 the DRA socket as the kubelet names it, supported_versions 4
  the gRPC services served, ``"v1.DRAPlugin"``: the kubelet picks the first it knows), then
  ``NotifyRegistrationStatus`` (``RegistrationStatus``: plugin_registered 1, error 2 →
  ``RegistrationStatusResponse`` {}), which :attr:`DraDriver.registered` and
  :meth:`DraDriver.wait_registered` report.
- **The DRA service** (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``) on
  ``plugins/<driver>/dra.sock``: ``NodePrepareResources`` (``NodePrepareResourcesRequest``:
  claims 1, each ``Claim`` namespace 1, uid 2, name 3 → ``NodePrepareResourcesResponse``:
  claims 1, a map from the claim's uid to ``NodePrepareResourceResponse``: devices 1, error
  2; each ``Device``: request_names 1, pool_name 2, device_name 3, cdi_device_ids 4) reads
  each claim from the API, checks its uid and that it is allocated, and answers the devices
  of its allocation that are this driver's (no CDI ids: a veth needs no device node, and
  containerd 1.6 has no CDI); ``NodeUnprepareResources`` (claims 1 →
  ``NodeUnprepareResourcesResponse``: claims 1, uid → ``NodeUnprepareResourceResponse``:
  error 1) forgets them. What was prepared is :attr:`DraDriver.prepared` (claim uid →
  device names), every call is named in :attr:`DraDriver.calls`.
- **The ResourceSlice** (:func:`resource_slice`): one pool named after the node, one slice,
  each device ``vf<i>`` with the attributes Multus v4.3 reads and netctl matches networks
  by: ``k8s.cni.cncf.io/resourceName`` (the resource a NAD names) and
  ``k8s.cni.cncf.io/deviceID`` (here the host veth's name: what the delegate moves into the
  pod, as SR-IOV CNI moves a VF by its PCI address). Published after the kubelet accepted
  the registration (a kubelet wipes a node's slices of drivers it does not know), removed
  on the way out.

The API calls go through ``api`` — the tests' :class:`~netctl_kit.kubefake.FakeKube` or
:class:`~netctl_kit.kubefake.real.RealKube` (``create``, ``get``, ``delete``), as the
cluster's admin. Builders for what a test applies beside it: :func:`device_class` (with an
``extendedResourceName`` for extended resources backed by DRA), :func:`claim_template`,
:func:`resource_claim`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc  # in the dev extra, as for netctl_kit.devices
from netctl_kit import protoencode
from netctl_kit.devices import SUN_PATH_MAX, stop_server, unix_server

from netctl.devices import proto

PLUGIN_TYPE = "DRAPlugin"
REGISTRATION_SERVICE = "pluginregistration.Registration"
DRA_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
SUPPORTED = ("v1.DRAPlugin",)  # "<gRPC package's last part>.<service>", as kubelets list them
KUBELET_ROOT = "/var/lib/kubelet"  # the kubelet's root dir, as the kubelet names it
RESOURCE_ATTR = "k8s.cni.cncf.io/resourceName"
DEVICE_ATTR = "k8s.cni.cncf.io/deviceID"


class Cluster(Protocol):
    """The API as the driver uses it (the admin's): FakeKube and RealKube both are."""

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]: ...

    def get(self, resource: str, namespace: str | None, name: str
            ) -> dict[str, Any] | None: ...

    def delete(self, resource: str, namespace: str | None, name: str) -> Any: ...


class DraDriverError(RuntimeError):
    """The kubelet did not register the driver."""


# -- the messages (pure) ---------------------------------------------------------------------


def plugin_info(driver: str, endpoint: str) -> bytes:
    """``PluginInfo``: type 1, name 2, endpoint 3, supported_versions 4."""
    return protoencode.encode([(1, PLUGIN_TYPE), (2, driver), (3, endpoint),
                         *((4, v) for v in SUPPORTED)])


def registration_status(request: bytes) -> tuple[bool, str]:
    """A ``RegistrationStatus``: plugin_registered 1, error 2."""
    msg = proto.decode(request)
    return bool(protoencode.integer(msg, 1)), proto.text(msg, 2)


def claims_of(request: bytes) -> list[tuple[str, str, str]]:
    """The claims (namespace, uid, name) of a ``NodePrepareResourcesRequest`` or a
    ``NodeUnprepareResourcesRequest`` (claims 1: namespace 1, uid 2, name 3)."""
    return [(proto.text(c, 1), proto.text(c, 2), proto.text(c, 3))
            for c in proto.messages(proto.decode(request), 1)]


def allocated_devices(claim: Mapping[str, Any], driver: str) -> list[tuple[str, str, str]]:
    """The (request, pool, device) of ``driver``'s devices in a claim's allocation."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [(str(r.get("request", "")), str(r.get("pool", "")), str(r.get("device", "")))
            for r in results if isinstance(r, dict) and r.get("driver") == driver]


def prepare_answer(answers: Mapping[str, Sequence[tuple[str, str, str]] | str]) -> bytes:
    """``NodePrepareResourcesResponse``: for each claim uid, its devices (request_names 1,
    pool_name 2, device_name 3, no cdi_device_ids) or an error (2)."""
    entries: protoencode.Fields = []
    for uid, answer in answers.items():
        value: protoencode.Fields = [(2, answer)] if isinstance(answer, str) else [
            (1, [(1, request), (2, pool), (3, device)]) for request, pool, device in answer]
        entries.append((1, [(1, uid), (2, value)]))
    return protoencode.encode(entries)


def unprepare_answer(uids: Sequence[str]) -> bytes:
    """``NodeUnprepareResourcesResponse``: each claim uid with an empty answer (no error)."""
    return protoencode.encode([(1, [(1, uid), (2, [])]) for uid in uids])


def read_prepare_answer(answer: bytes) -> dict[str, list[tuple[str, str, str]] | str]:
    """A ``NodePrepareResourcesResponse`` read back: uid → devices (request, pool, device)
    or the error."""
    out: dict[str, list[tuple[str, str, str]] | str] = {}
    for entry in proto.messages(proto.decode(answer), 1):
        value = (proto.messages(entry, 2) or [{}])[0]
        error = proto.text(value, 2)
        out[proto.text(entry, 1)] = error or [
            ((proto.texts(d, 1) or [""])[0], proto.text(d, 2), proto.text(d, 3))
            for d in proto.messages(value, 1)]
    return out


def claims_request(claims: Sequence[tuple[str, str, str]]) -> bytes:
    """A ``NodePrepareResourcesRequest`` (or unprepare): (namespace, uid, name) each."""
    return protoencode.encode([(1, [(1, ns), (2, uid), (3, name)]) for ns, uid, name in claims])


# -- the API objects ---------------------------------------------------------------------------


def resource_slice(driver: str, node: str, devices: Mapping[str, tuple[str, str]],
                   name: str = "") -> dict[str, Any]:
    """The node's ResourceSlice: one pool (the node's name), ``devices`` by name, each
    (resourceName, deviceID)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-{driver.replace('.', '-')}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": dev, "attributes": {
                         RESOURCE_ATTR: {"string": resource}, DEVICE_ATTR: {"string": did}}}
                         for dev, (resource, did) in devices.items()]}}


def device_class(name: str, driver: str, *, extended_resource: str | None = None
                 ) -> dict[str, Any]:
    """A DeviceClass of ``driver``'s devices; ``extended_resource``: pods requesting that
    extended resource get a claim of this class (Kubernetes 1.34+, on by default in
    1.36)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {
        "expression": f'device.driver == "{driver}"'}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name}, "spec": spec}


def _claim_spec(device_class_name: str, count: int, request: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": request, "exactly": {
        "deviceClassName": device_class_name, "allocationMode": "ExactCount",
        "count": count}}]}}


def resource_claim(name: str, namespace: str, device_class_name: str, count: int = 1,
                   request: str = "vf") -> dict[str, Any]:
    """A ResourceClaim of ``count`` devices of the class, for pods to name directly."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": _claim_spec(device_class_name, count, request)}


def claim_template(name: str, namespace: str, device_class_name: str, count: int = 1,
                   request: str = "vf") -> dict[str, Any]:
    """A ResourceClaimTemplate: each pod naming it gets a claim of its own."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": _claim_spec(device_class_name, count, request)}}


# -- the driver ---------------------------------------------------------------------------------


class DraDriver:
    """``driver``'s kubelet plugin and ResourceSlice for ``node`` (module doc): ``devices``
    by name, each (resourceName, deviceID); ``kubelet_dir``: the kubelet's root dir as this
    process reaches it (a node in a mount namespace of its own: through
    ``/proc/PID/root``), ``kubelet_root`` as the kubelet names it. A context manager:
    serving, registered and published inside; everything taken back on the way out."""

    def __init__(self, driver: str, node: str, devices: Mapping[str, tuple[str, str]],
                 api: Cluster, kubelet_dir: Path, kubelet_root: str = KUBELET_ROOT) -> None:
        self.driver, self.node, self.api = driver, node, api
        self.devices = dict(devices)
        self.registration_socket = Path(kubelet_dir) / "plugins_registry" / f"{driver}-reg.sock"
        self.plugin_dir = Path(kubelet_dir) / "plugins" / driver
        self.socket = self.plugin_dir / "dra.sock"
        self.endpoint = f"{kubelet_root}/plugins/{driver}/dra.sock"
        self.slice = resource_slice(driver, node, self.devices)
        for sock in (self.registration_socket, self.socket):
            if len(str(sock).encode()) > SUN_PATH_MAX:
                raise ValueError(f"{sock}: a unix socket's path has at most {SUN_PATH_MAX} "
                                 "bytes")
        self.calls: list[str] = []
        self.prepared: dict[str, list[str]] = {}  # claim uid → device names prepared
        self.registration: tuple[bool, str] | None = None  # the kubelet's last word
        self._registered = threading.Event()
        self._lock = threading.Lock()
        self._servers: list[Any] = []
        self._published = False

    def __enter__(self) -> DraDriver:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, timeout: float = 30.0) -> None:
        """The DRA service served, then the registration socket (the kubelet dials it at
        once); once the kubelet says it registered the driver, the slice published."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        self._servers.append(unix_server(self.socket, DRA_SERVICE, {
            "NodePrepareResources": grpc.unary_unary_rpc_method_handler(self._prepare),
            "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(self._unprepare)}))
        self._servers.append(unix_server(self.registration_socket, REGISTRATION_SERVICE, {
            "GetInfo": grpc.unary_unary_rpc_method_handler(self._info),
            "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(self._notified)}))
        self.wait_registered(timeout)
        self.publish()

    def publish(self) -> None:
        """The slice created (again, if it was removed: a kubelet wipes the slices of a
        driver it lost)."""
        if self.api.get("resourceslices", None, self.slice["metadata"]["name"]) is None:
            self.api.create("resourceslices", self.slice)
        self._published = True

    def close(self) -> None:
        """The slice deleted, the servers stopped, the sockets removed."""
        if self._published:
            with contextlib.suppress(Exception):  # gone already (the kubelet wiped it)
                self.api.delete("resourceslices", None, self.slice["metadata"]["name"])
            self._published = False
        for server in reversed(self._servers):
            stop_server(server)
        self._servers = []
        for sock in (self.registration_socket, self.socket):
            sock.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.plugin_dir.rmdir()

    @property
    def registered(self) -> bool:
        return self.registration is not None and self.registration[0]

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Until the kubelet has told the driver it is registered; :class:`DraDriverError`
        when it refused it or said nothing within ``timeout``."""
        if not self._registered.wait(timeout):
            raise DraDriverError(f"the kubelet did not register DRA driver {self.driver} "
                                 f"through {self.registration_socket} within {timeout}s "
                                 f"(calls: {self.calls})")
        if not self.registered:
            raise DraDriverError(f"the kubelet refused DRA driver {self.driver}: "
                                 f"{self.registration}")

    # -- the services (called on grpcio's threads)

    def _called(self, method: str) -> None:
        with self._lock:
            self.calls.append(method)

    def _info(self, request: bytes, context: Any) -> bytes:
        self._called("GetInfo")
        return plugin_info(self.driver, self.endpoint)

    def _notified(self, request: bytes, context: Any) -> bytes:
        self._called("NotifyRegistrationStatus")
        self.registration = registration_status(request)
        self._registered.set()
        return b""

    def _prepare(self, request: bytes, context: Any) -> bytes:
        self._called("NodePrepareResources")
        answers: dict[str, list[tuple[str, str, str]] | str] = {}
        for namespace, uid, name in claims_of(request):
            claim = self.api.get("resourceclaims", namespace, name)
            if claim is None or claim.get("metadata", {}).get("uid") != uid:
                answers[uid] = f"ResourceClaim {namespace}/{name} (uid {uid}) not found"
                continue
            devices = allocated_devices(claim, self.driver)
            unknown = [d for _, _, d in devices if d not in self.devices]
            if not devices or unknown:
                answers[uid] = (f"ResourceClaim {namespace}/{name}: no device of driver "
                                f"{self.driver} allocated" if not devices else
                                f"ResourceClaim {namespace}/{name}: devices {unknown} are "
                                "not this driver's")
                continue
            answers[uid] = devices
            with self._lock:
                self.prepared[uid] = [d for _, _, d in devices]
        return prepare_answer(answers)

    def _unprepare(self, request: bytes, context: Any) -> bytes:
        self._called("NodeUnprepareResources")
        uids = [uid for _, uid, _ in claims_of(request)]
        with self._lock:
            for uid in uids:
                self.prepared.pop(uid, None)
        return unprepare_answer(uids)
