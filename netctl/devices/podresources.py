"""The kubelet's PodResources API: which devices the kubelet allocated to a pod
(docs/networks.md, "Which devices").

:class:`PodResources` asks ``v1.PodResourcesLister/List`` — once per ADD that has a device
network, never otherwise; DEL never asks (the journal holds each attachment's device) — and
keeps the pod's :class:`Allocated`: its device plugins' devices by resource, and the DRA
devices the kubelet prepared for it (its containers' ``dynamic_resources``, which carry no
attributes: :mod:`netctl.kubeapi.dra` matches them through the slices). grpcio is imported
at the first call only; the messages are decoded by field number (:mod:`netctl.devices.proto`).
A kubelet that does not answer is code 11 naming the socket: the kubelet retries the sandbox.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import trio

from netctl.devices import proto
from netctl.errors import TRY_AGAIN_LATER, CNIError

SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST = "/v1.PodResourcesLister/List"

Devices = dict[str, list[str]]  # resource name → device ids allocated to the pod


@dataclass(frozen=True)
class ClaimedDevice:
    """A DRA device the kubelet prepared for a pod: its claim, and where its driver
    publishes it (driver, pool, device)."""

    namespace: str
    claim: str
    driver: str
    pool: str
    device: str


@dataclass
class Allocated:
    """What the kubelet allocated to one pod: device plugins' devices by resource, and
    DRA devices (each once, in container order)."""

    devices: Devices = field(default_factory=dict)
    claimed: list[ClaimedDevice] = field(default_factory=list)


def parse_list(answer: bytes) -> dict[tuple[str, str], Allocated]:
    """A ``ListPodResourcesResponse`` as (namespace, name) → :class:`Allocated`
    (``ValueError`` for bytes that are not one)."""
    out: dict[tuple[str, str], Allocated] = {}
    for pod in proto.messages(proto.decode(answer), 1):  # pod_resources
        namespace = proto.text(pod, 2)
        allocated = out.setdefault((namespace, proto.text(pod, 1)), Allocated())
        for container in proto.messages(pod, 3):  # containers
            for dev in proto.messages(container, 2):  # devices
                ids = allocated.devices.setdefault(proto.text(dev, 1), [])
                ids.extend(i for i in proto.texts(dev, 2) if i not in ids)
            for dyn in proto.messages(container, 5):  # dynamic_resources
                for res in proto.messages(dyn, 4):  # claim_resources
                    found = ClaimedDevice(proto.text(dyn, 3) or namespace, proto.text(dyn, 2),
                                          proto.text(res, 2), proto.text(res, 3),
                                          proto.text(res, 4))
                    if found not in allocated.claimed:
                        allocated.claimed.append(found)
    return out


@dataclass
class PodResources:
    """The kubelet's PodResources API on ``socket`` (a path as the daemon sees it;
    ``named``: as the host names it, for messages)."""

    socket: str = SOCKET
    named: str = ""
    timeout: float = 10.0
    calls: int = 0  # List calls made (the metrics and the tests read it)
    _channel: Any = field(default=None, repr=False)

    def _call(self) -> bytes:
        if not os.path.exists(self.socket):
            raise OSError("there is no such socket (is the kubelet running, and is its "
                          "pod-resources directory where the daemon looks?)")
        import grpc  # loaded at the first device network only

        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{os.path.abspath(self.socket)}")
        method = self._channel.unary_unary(LIST, request_serializer=None,
                                           response_deserializer=None)
        try:
            answer: bytes = method(b"", timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            name = code.name if code is not None else "error"
            raise OSError(f"{name}: {detail}") from None
        return answer

    async def of_pod(self, namespace: str, name: str) -> Allocated:
        """The devices the kubelet allocated to pod ``namespace/name`` (none: an empty
        :class:`Allocated`); code 11 naming the socket when the kubelet does not answer."""
        where = self.named or self.socket
        self.calls += 1
        try:
            answer = await trio.to_thread.run_sync(self._call, abandon_on_cancel=True)
            pods = parse_list(answer)
        except (OSError, ValueError) as exc:
            raise CNIError(TRY_AGAIN_LATER, f"the kubelet's PodResources API at {where} "
                           f"does not answer: {exc}") from None
        return pods.get((namespace, name), Allocated())

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
