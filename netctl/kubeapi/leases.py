"""One holder among the daemons: a ``coordination.k8s.io/v1`` Lease, held while renewed.

:class:`LeaseHold` is one daemon's side of it, ticked by its owner (:meth:`LeaseHold.tick`):

- held, it renews the Lease (an update carrying the resourceVersion of its last write: a
  conflict or a missing Lease means it was lost);
- not held, it reads the Lease (from the API server's cache, ``resourceVersion=0``: one
  cheap GET per lease duration) and takes it over — an update under the resourceVersion
  read, so of several daemons racing one wins — when it is missing, has no holder, names
  this daemon, or has not changed for its ``leaseDurationSeconds`` as this daemon
  observed it (its own clock only: no trust in another node's clock, as client-go's
  leader election does).

The holder ticks every third of the duration, the others once per duration.
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass

import msgspec

from netctl.kubeapi.api import Api, ApiError
from netctl.kubeapi.objects import Meta

log = logging.getLogger("netctl.kube")

API_VERSION = "coordination.k8s.io/v1"


class LeaseSpec(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    holderIdentity: str = ""
    leaseDurationSeconds: int = 0
    acquireTime: str | None = None
    renewTime: str | None = None
    leaseTransitions: int = 0


class Lease(msgspec.Struct, forbid_unknown_fields=False):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)


def _micro_now() -> str:
    """Now as a Kubernetes MicroTime."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _body(lease: Lease) -> bytes:
    doc = msgspec.to_builtins(lease)
    doc["apiVersion"], doc["kind"] = API_VERSION, "Lease"
    return msgspec.json.encode(doc)


@dataclass
class LeaseHold:
    """This daemon's hold on Lease ``namespace/name`` (see the module's docstring)."""

    api: Api
    namespace: str
    name: str
    identity: str  # who holds it: the node's name
    duration: float  # seconds a Lease not renewed stays its holder's
    held: bool = False
    transitions: int = 0  # times this daemon took the Lease
    _last: Lease | None = None  # the Lease as last read or written
    _observed: tuple[str, float] = ("", 0.0)  # (resourceVersion, when first seen)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    @property
    def every(self) -> float:
        """Seconds until the next :meth:`tick`."""
        return self.duration / 3 if self.held else self.duration

    async def tick(self, now: float | None = None) -> bool:
        """Renew, or read and maybe take, the Lease; whether this daemon holds it now."""
        now = time.monotonic() if now is None else now
        try:
            if self.held and self._last is not None:
                self.held = await self._write(self._last, renew_only=True) is not None
                if not self.held:
                    log.info("lease %s/%s lost", self.namespace, self.name)
                return self.held
            self.held = await self._try_take(now)
        except ApiError as exc:
            if self.held:
                log.warning("lease %s/%s: %s; not renewed", self.namespace, self.name, exc)
            self.held = False
        return self.held

    async def _try_take(self, now: float) -> bool:
        try:
            data = await self.api.request("get", "GET", f"{self.path}/{self.name}",
                                          [("resourceVersion", "0")])
        except ApiError as exc:
            if exc.status != 404:
                raise
            return await self._create()
        lease = msgspec.json.decode(data, type=Lease)
        self._last = lease
        rv = lease.metadata.resourceVersion
        if rv != self._observed[0]:
            self._observed = (rv, now)
        spec = lease.spec
        expired = now - self._observed[1] > (spec.leaseDurationSeconds or self.duration)
        if spec.holderIdentity not in ("", self.identity) and not expired:
            return False
        taken = await self._write(lease, renew_only=spec.holderIdentity == self.identity)
        if taken is not None:
            self.transitions += spec.holderIdentity != self.identity
            log.info("lease %s/%s taken (it was %s's)", self.namespace, self.name,
                     spec.holderIdentity or "nobody's")
        return taken is not None

    async def _create(self) -> bool:
        stamp = _micro_now()
        lease = Lease(metadata=Meta(name=self.name, namespace=self.namespace), spec=LeaseSpec(
            holderIdentity=self.identity, leaseDurationSeconds=max(1, round(self.duration)),
            acquireTime=stamp, renewTime=stamp))
        try:
            data = await self.api.request("create", "POST", self.path, body=_body(lease))
        except ApiError as exc:
            if exc.status == 409:
                return False  # another daemon made it first
            raise
        self._last = msgspec.json.decode(data, type=Lease)
        self.transitions += 1
        log.info("lease %s/%s created and held", self.namespace, self.name)
        return True

    async def _write(self, lease: Lease, renew_only: bool) -> Lease | None:
        """``lease`` (as read or last written) renewed by this daemon — taken over unless
        ``renew_only`` — under its resourceVersion; None when it changed meanwhile."""
        stamp = _micro_now()
        spec = lease.spec
        if not renew_only:
            spec = msgspec.structs.replace(spec, holderIdentity=self.identity,
                                           acquireTime=stamp,
                                           leaseTransitions=spec.leaseTransitions + 1)
        spec = msgspec.structs.replace(spec, renewTime=stamp,
                                       leaseDurationSeconds=max(1, round(self.duration)))
        try:
            data = await self.api.request("update", "PUT", f"{self.path}/{self.name}",
                                          body=_body(msgspec.structs.replace(lease, spec=spec)))
        except ApiError as exc:
            if exc.status in (404, 409):
                self._last = None
                return None
            raise
        self._last = msgspec.json.decode(data, type=Lease)
        return self._last
