"""whereabouts' Kubernetes protocol, written again in Python as the baseline of ``netctl bench
cluster``: what an allocation costs when every node's IPAM goes through one cluster-wide
Lease and one IPPool object holding every allocation of the pool.

The protocol, as whereabouts runs it (``pkg/storage/kubernetes/ipam.go`` in
k8snetworkplumbingwg/whereabouts, over client-go's leader election with a LeaseLock), each
CNI invocation (ADD or DEL) on its own:

1. **the lease**: ``whereabouts`` in the pool's namespace, whereabouts' defaults (lease
   1.5 s, which client-go writes as ``leaseDurationSeconds: 1``; retry period 0.5 s). A try
   GETs it; missing: CREATE it with this caller as the holder; no holder, this caller, or
   expired (``renewTime`` + duration past): UPDATE it with this caller as the holder, under
   its resourceVersion; held by another: no write. A try that did not end holding it (held,
   or a 409: another caller won) waits the retry period with client-go's jitter (x1 to
   x2.2) and tries again, until the ADD's 2 min (DEL's 1 min) limit. The identity is the
   pod, so a node's own ADDs wait for each other too.
2. **the pool**, holding the lease: GET the IPPool (missing: CREATE it empty, then again);
   ADD takes the lowest free offset (the one the container holds, if any), DEL drops the
   container's; then write the pool back under its resourceVersion (409: GET it and again,
   up to 100 times).
3. **release**: UPDATE the lease with no holder (client-go's ``ReleaseOnCancel``).

What this baseline leaves out, each of which would make whereabouts slower or costlier than
it measures here: the LIST of IPPools whereabouts makes first (a connectivity check); the
OverlappingRangeIPReservation of each address (on by default: a GET, then a CREATE on ADD or
a DELETE on DEL); the holder's lease renewals; the exec of its plugin binary; a new client
(and its discovery) per exec. whereabouts writes the pool as a JSON patch whose first
operation tests the resourceVersion (422 when it moved); here it is a PUT carrying the
resourceVersion (409): one write either way.

The decisions (:func:`lease_step`, :func:`holding`, :func:`assign`, …) are pure; only
:class:`Whereabouts` talks HTTP (``http.client``, one connection per invocation: each exec
of the plugin is a new process).
"""

from __future__ import annotations

import http.client
import ipaddress
import random
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import msgspec

T = TypeVar("T")

NAMESPACE = "kube-system"  # the namespace of whereabouts' kubeconfig context by default
LEASE_NAME = "whereabouts"
LEASE_DURATION_S = 1.5  # whereabouts' leader_lease_duration (ms) default, in seconds
RETRY_PERIOD_S = 0.5  # leader_retry_period
JITTER = 1.2  # client-go's leader election: each wait is period x (1 + rand x 1.2)
DATASTORE_RETRIES = 100
ADD_TIME_LIMIT_S = 120.0
DEL_TIME_LIMIT_S = 60.0
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
IPPOOLS = "/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/{ns}/ippools"

LeaseStep = Literal["create", "take", "wait"]
Allocations = dict[str, dict[str, str]]  # offset (decimal) → {"id": container, "podref": …}


class BaselineError(RuntimeError):
    """An invocation that failed: its time limit, an unexpected answer, a full pool."""


# -- pure: the lease ---------------------------------------------------------------------


def micro_time(t: float) -> str:
    """A MicroTime as the API server writes it (RFC 3339, microseconds, UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def lease_step(lease: dict[str, Any] | None, me: str, now: float) -> LeaseStep:
    """What one try does with the lease as read: create it, take it, or wait."""
    if lease is None:
        return "create"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if holder and holder != me:
        renewed = spec.get("renewTime")
        duration = float(spec.get("leaseDurationSeconds") or 0)
        if renewed and parse_micro_time(renewed) + duration > now:
            return "wait"
    return "take"


def holding(lease: dict[str, Any] | None, me: str, now: float) -> dict[str, Any]:
    """The lease held by ``me`` from ``now`` (to create, or to write over ``lease`` under its
    resourceVersion)."""
    old = (lease or {}).get("spec") or {}
    taken = old.get("holderIdentity") != me
    meta: dict[str, Any] = {"name": LEASE_NAME, "namespace": NAMESPACE}
    if lease is not None:
        meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": me, "leaseDurationSeconds": int(LEASE_DURATION_S),
                     "acquireTime": micro_time(now) if taken else old.get("acquireTime"),
                     "renewTime": micro_time(now),
                     "leaseTransitions": int(old.get("leaseTransitions") or 0)
                     + (1 if taken and lease is not None else 0)}}


def released(lease: dict[str, Any], now: float) -> dict[str, Any]:
    """The lease given up (client-go's release: no holder, a 1 s duration)."""
    spec = lease.get("spec") or {}
    return {**lease, "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                              "acquireTime": micro_time(now), "renewTime": micro_time(now),
                              "leaseTransitions": spec.get("leaseTransitions", 0)}}


def retry_wait(rng: random.Random) -> float:
    return RETRY_PERIOD_S * (1 + rng.random() * JITTER)


# -- pure: the pool ------------------------------------------------------------------------


def pool_name(pool: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str:
    """The IPPool's name: the range with ``:`` and ``/`` made ``-``."""
    return str(pool).replace(":", "-").replace("/", "-")


def new_pool(pool: ipaddress.IPv4Network | ipaddress.IPv6Network) -> dict[str, Any]:
    return {"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": pool_name(pool), "namespace": NAMESPACE},
            "spec": {"range": str(pool), "allocations": {}}}


def assign(allocations: Allocations, size: int, container: str,
           podref: str) -> tuple[int, Allocations]:
    """The offset ``container`` holds, else the lowest free one (the network and broadcast
    addresses, offsets 0 and ``size - 1``, never); and the allocations with it."""
    for offset, entry in allocations.items():
        if entry.get("id") == container:
            return int(offset), allocations
    used = {int(offset) for offset in allocations}
    free = next((o for o in range(1, size - 1) if o not in used), None)
    if free is None:
        raise BaselineError(f"the pool is full ({len(used)} addresses)")
    return free, {**allocations, str(free): {"id": container, "podref": podref}}


def release(allocations: Allocations, container: str) -> Allocations:
    return {o: e for o, e in allocations.items() if e.get("id") != container}


# -- I/O: one invocation ----------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is: its URL, and for a real one (https) a bearer token and the
    CA file that signed its certificate."""

    url: str
    token: str | None = None
    ca_file: str | None = None


class _Http:
    """One keep-alive HTTP/1.1 connection to the API server; JSON in and out."""

    def __init__(self, api: Endpoint) -> None:
        parts = urlsplit(api.url)
        host = parts.hostname or "127.0.0.1"
        self.conn: http.client.HTTPConnection
        if parts.scheme == "https":
            self.conn = http.client.HTTPSConnection(
                host, parts.port, timeout=30, context=ssl.create_default_context(
                    cafile=api.ca_file))
        else:
            self.conn = http.client.HTTPConnection(host, parts.port, timeout=30)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api.token:
            self.headers["Authorization"] = f"Bearer {api.token}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = msgspec.json.encode(body) if body is not None else None
        self.conn.request(method, path, body=data, headers=self.headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        return resp.status, msgspec.json.decode(raw) if raw else None

    def close(self) -> None:
        self.conn.close()


@dataclass
class Tally:
    """What one invocation went through."""

    lease_tries: int = 0  # GETs of the lease (1: it was free at once)
    pool_conflicts: int = 0  # pool writes refused (409) and done again
    waited_s: float = 0.0  # asleep between tries for the lease


class Whereabouts:
    """One CNI invocation of whereabouts' IPAM, ADD or DEL, against the API server at
    ``api`` (see the module's docstring). ``stop`` set ends a wait for the lease."""

    def __init__(self, api: Endpoint, pool: ipaddress.IPv4Network | ipaddress.IPv6Network,
                 identity: str, stop: threading.Event, rng: random.Random | None = None
                 ) -> None:
        self.api = api
        self.pool = pool
        self.me = identity
        self.stop = stop
        self.rng = rng or random.Random()
        self.tally = Tally()
        self.lease_path = LEASES.format(ns=NAMESPACE)
        self.pool_path = IPPOOLS.format(ns=NAMESPACE)

    def add(self, container: str, podref: str) -> str:
        """The address the pool gives ``container``."""
        def change(allocs: Allocations) -> tuple[str, Allocations]:
            offset, new = assign(allocs, self.pool.num_addresses, container, podref)
            return str(self.pool.network_address + offset), new
        return self._locked(ADD_TIME_LIMIT_S, change)

    def delete(self, container: str) -> None:
        self._locked(DEL_TIME_LIMIT_S, lambda allocs: (None, release(allocs, container)))

    def _locked(self, limit: float, change: Callable[[Allocations], tuple[T, Allocations]]) -> T:
        api = _Http(self.api)
        try:
            lease = self._acquire(api, time.monotonic() + limit)
            try:
                return self._update_pool(api, change)
            finally:
                api.call("PUT", f"{self.lease_path}/{LEASE_NAME}", released(lease, time.time()))
        finally:
            api.close()

    def _acquire(self, api: _Http, deadline: float) -> dict[str, Any]:
        while True:
            self.tally.lease_tries += 1
            status, body = api.call("GET", f"{self.lease_path}/{LEASE_NAME}")
            if status not in (200, 404):
                raise BaselineError(f"GET lease: HTTP {status}: {body}")
            lease = body if status == 200 else None
            step = lease_step(lease, self.me, time.time())
            if step == "create":
                status, body = api.call("POST", self.lease_path, holding(None, self.me,
                                                                         time.time()))
            elif step == "take":
                status, body = api.call("PUT", f"{self.lease_path}/{LEASE_NAME}",
                                        holding(lease, self.me, time.time()))
            if step != "wait":
                if status in (200, 201):
                    return dict(body)
                if status != 409:
                    raise BaselineError(f"{step} lease: HTTP {status}: {body}")
            pause = retry_wait(self.rng)
            if time.monotonic() + pause > deadline:
                raise BaselineError("time limit exceeded while waiting to become leader")
            if self.stop.wait(pause):
                raise BaselineError("stopped while waiting to become leader")
            self.tally.waited_s += pause

    def _update_pool(self, api: _Http, change: Callable[[Allocations], tuple[T, Allocations]]
                     ) -> T:
        path = f"{self.pool_path}/{pool_name(self.pool)}"
        for _ in range(DATASTORE_RETRIES):
            status, pool = api.call("GET", path)
            if status == 404:  # whereabouts creates it, then starts again
                status, body = api.call("POST", self.pool_path, new_pool(self.pool))
                if status not in (201, 409):
                    raise BaselineError(f"create IPPool: HTTP {status}: {body}")
                continue
            if status != 200:
                raise BaselineError(f"GET IPPool: HTTP {status}: {pool}")
            result, allocations = change(dict(pool["spec"].get("allocations") or {}))
            status, body = api.call("PUT", path, {**pool, "spec": {
                **pool["spec"], "allocations": allocations}})
            if status == 200:
                return result
            if status != 409:
                raise BaselineError(f"PUT IPPool: HTTP {status}: {body}")
            self.tally.pool_conflicts += 1
        raise BaselineError(f"the IPPool was changed under us {DATASTORE_RETRIES} times")
