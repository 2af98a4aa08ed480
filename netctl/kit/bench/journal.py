"""``netctl bench journal``: the latency of the journal's read paths on N rows.

On a temporary state dir, a journal made by the real migrations
(:func:`netctl.journal.migrate.migrate`) is filled, with plain sqlite3
``executemany``, with a simulated week of a busy node:

- N attachments: pods (``ceil(N/2)``, in a few namespaces; deployments with new
  names, statefulsets reusing theirs) each on a bridge network with the central
  IPAM (``pod-net``, eth0) and a bridge network with host-local (``storage``,
  net1), created over the week, most removed after a few hours, some live; each
  with its ADD and DEL operations and their steps, the results holding the
  addresses; about 1% of the ADDs failed and were compensated;
- N IPAM allocations: the pod-net attachments' (allocated by their ADD, released
  by their DEL, a few never released: leaks) and plain-plugin allocations (a main
  plugin exec'ing netctl-ipam) in three more pools, one of them IPv6, each with its
  own ADD and DEL operations. Addresses are picked round-robin by
  :func:`netctl.ipam.ranges.next_free`, as the allocator (and host-local) does, so
  an address is reused over the week.

A node runs as many pods at once as it can hold, whatever its history: up to
``BUSY_ROWS`` rows the pods live 3 hours on average and 3% are never removed; past it,
more rows mean faster churn, not more pods at once. By Little's law (pods live = arrivals
times mean lifetime) the mean lifetime and the never-removed share shrink by ``BUSY_ROWS/N``,
so the live set, and the pools' use, stay those of a ``BUSY_ROWS`` week while every
address is handed out again more often (the pools do not grow: a node's do not).

Then the read paths of ``netctl journal`` and ``netctl ipam`` are timed in-process
(the functions of :mod:`netctl.journal.query` on the CLI's read-only connection),
each on 50 targets drawn from the simulation, every answer checked against it; and
``netctl journal --ip ADDR --at TIME --json`` as a subprocess a few times. A wrong
answer is a problem (exit 1).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from netctl_kit import journaldb
from netctl_kit.bench.common import Bench, Measured, drive, progress, summary_ms
from netctl_kit.bench.render import num, steps, table, verdict
from netctl_kit.harness import netctl_argv, run, tail
from rich.console import RenderableType

from netctl.ipam.planner import pool_key, scope_of
from netctl.ipam.ranges import Range, next_free
from netctl.ipam.ranges import parse_config as parse_ipam
from netctl.journal import query
from netctl.journal.migrate import migrate

T = TypeVar("T")

REPETITIONS = 50
CLI_RUNS = 5
WEEK = 7 * 86400.0
SEED = 20261122
NAMESPACES = ("default", "shop", "payments", "monitoring", "batch")
DEPLOYMENTS = ("web", "api", "cart", "checkout", "worker", "exporter", "ingest", "cron")
STATEFULSETS = ("db", "cache", "queue")
LIFETIME_S = 3 * 3600.0  # mean lifetime of a pod that is removed
LONG_LIVED = 0.03  # share of pods (and plain allocations) never removed
BUSY_ROWS = 100_000  # past this many rows the churn is faster, the live set the same
ADD_FAILS = 0.01  # share of ADDs that failed and were compensated
LEAKS = 0.002  # share of removed pod-net attachments whose allocation was never released
CHAIN_VERSION = "1.0.0"
CALLER_CONF = json.dumps({"cniVersion": "1.1.0", "name": "netctl", "type": "netctl-cni",
                          "socket": "/run/netctl/netctl.sock",
                          "clusterNetwork": "pod-net"}).encode()


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # one encoder for the ~100k results


def _compact(obj: Any) -> bytes:
    return _COMPACT.encode(obj).encode()


# -- the simulated rows ------------------------------------------------------------------


@dataclass
class Pool:
    """An address allocator: a netctl-ipam pool, or host-local's view of a subnet."""

    key: str
    network_name: str
    scope: str
    rng: Range
    gateway: str | None
    used: set[int] = field(default_factory=set)
    cursor: int | None = None
    live: int = 0
    peak: int = 0  # the most addresses held at once
    handed_out: int = 0

    def take(self) -> int:
        ip = next_free(self.rng, self.used, self.cursor, "round-robin")
        if ip is None:
            raise RuntimeError(f"pool {self.key} exhausted in the simulation")
        self.used.add(ip)
        self.cursor = ip
        self.live += 1
        self.peak = max(self.peak, self.live)
        self.handed_out += 1
        return ip

    def give_back(self, ip: int) -> None:
        self.used.discard(ip)
        self.live -= 1


def _pool(ipam: dict[str, Any]) -> Pool:
    cfg, ranges = parse_ipam(ipam)
    key = pool_key(cfg, ranges[0])
    return Pool(key, cfg.network_name, scope_of(cfg, key), ranges[0], ranges[0].gateway)


@dataclass
class Net:
    """A simulated delegate network: one bridge plugin, netctl-ipam or host-local."""

    network: str  # the NAD key
    name: str  # the chain's CNI name
    bridge: str
    ifname: str
    ipam: dict[str, Any]
    pool: Pool
    central: bool  # netctl-ipam: an allocation row per attachment

    @property
    def chain(self) -> bytes:
        return _compact({"cniVersion": CHAIN_VERSION, "name": self.name, "plugins": [{
            "type": "bridge", "bridge": self.bridge, "isGateway": True, "ipam": self.ipam}]})


@dataclass(eq=False)
class Op:
    verb: str
    container: str
    netns: str
    ifname: str
    caller_network: str
    caller_version: str
    pod: tuple[str, str, str]
    request: bytes
    origin: str
    state: str
    started: float
    finished: float
    code: int | None = None
    error: str | None = None
    id: int = 0

    def row(self) -> tuple[Any, ...]:
        return (self.id, self.verb, self.container, self.netns, self.ifname,
                self.caller_network, self.caller_version, *self.pod, self.request, self.origin,
                self.state, self.code, self.error, self.started, self.finished)


@dataclass(eq=False)
class Att:
    container: str
    net: Net
    netns: str
    pod: tuple[str, str, str]
    add_op: Op
    created: float
    address: str  # CIDR form
    result: bytes | None
    state: str = "attached"
    del_op: Op | None = None
    error: str | None = None
    removed: float | None = None
    id: int = 0

    def row(self) -> tuple[Any, ...]:
        return (self.id, self.container, self.net.ifname, self.net.network, self.net.name,
                int(self.net.ifname == "eth0"), "netctl", "eth0", self.netns, *self.pod,
                CHAIN_VERSION, self.net.chain, b"{}", b"{}", 1, self.result, self.state,
                self.add_op.id, self.del_op.id if self.del_op else None, self.error,
                self.created, self.removed)


@dataclass(eq=False)
class Step:
    op: Op
    att: Att
    verb: str
    config: bytes
    state: str
    result: bytes | None
    started: float
    seconds: float
    error: str | None = None
    id: int = 0

    def row(self) -> tuple[Any, ...]:
        return (self.id, self.op.id, self.att.id, 0, self.verb, "bridge", self.config,
                self.att.netns, self.att.net.ifname, self.state, self.result,
                None if self.error is None else 1, self.error, None, self.started,
                self.started + self.seconds, self.seconds)


@dataclass(eq=False)
class Alloc:
    pool: Pool
    address: str  # the address alone
    container: str
    ifname: str
    netns: str
    pod: tuple[str, str, str]
    att: Att | None
    allocated_op: Op
    allocated: float
    released_op: Op | None = None
    released: float | None = None
    id: int = 0

    def row(self) -> tuple[Any, ...]:
        return (self.id, self.pool.key, self.pool.scope, self.address,
                self.pool.rng.cidr.prefixlen, self.container, self.ifname, self.netns,
                *self.pod, self.att.id if self.att else None, self.allocated_op.id,
                self.released_op.id if self.released_op else None, self.allocated,
                self.released)


@dataclass
class Week:
    """The simulated journal: every row, with what the checks need."""

    now: float
    start: float
    pools: list[Pool]
    ops: list[Op] = field(default_factory=list)
    atts: list[Att] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    allocs: list[Alloc] = field(default_factory=list)
    leaks: int = 0

    def number(self) -> None:
        """Ids in time order, as a real journal has them."""
        self.ops.sort(key=lambda r: r.started)
        self.atts.sort(key=lambda r: r.created)
        self.steps.sort(key=lambda r: r.started)
        self.allocs.sort(key=lambda r: r.allocated)
        rows: list[Op | Att | Step | Alloc] = [*self.ops, *self.atts, *self.steps,
                                                *self.allocs]
        counters: Counter[type] = Counter()
        for row in rows:
            counters[type(row)] += 1
            row.id = counters[type(row)]


@dataclass
class _Pending:
    """A pod or plain allocation between its ADD and its DEL."""

    container: str
    netns: str
    pod: tuple[str, str, str]
    atts: list[tuple[Att, int, Alloc | None, dict[str, Any]]] = field(default_factory=list)
    alloc: Alloc | None = None
    ip: int = 0
    conf: bytes = b""


class Simulation:
    """A week of a busy node: N attachments and N allocations, as journal rows."""

    def __init__(self, rows: int, seed: int = SEED, busy_rows: int = BUSY_ROWS) -> None:
        self.rows = rows
        self.churn = max(1.0, rows / busy_rows)  # 1 up to busy_rows: as before
        self.lifetime_s = LIFETIME_S / self.churn
        self.long_lived = LONG_LIVED / self.churn
        self.rnd = random.Random(seed)
        self.now = time.time()
        self.start = self.now - WEEK
        pod_ipam = {"type": "netctl-ipam", "range": "10.128.0.0/18", "gateway": "10.128.0.1"}
        storage_ipam = {"type": "host-local", "subnet": "10.130.0.0/16",
                        "dataDir": "/var/lib/cni/networks"}
        self.pod_pool = _pool(pod_ipam)
        self.plain_pools = [_pool({"type": "netctl-ipam", "range": r}) for r in
                            ("10.129.0.0/20", "10.129.16.0/20", "fd42:0:0:1::/64")]
        # host-local's addresses, picked as it does (round-robin, its gateway kept out)
        host_local = _pool({"type": "netctl-ipam", "range": "10.130.0.0/16",
                            "gateway": "10.130.0.1"})
        self.nets = [
            Net("default/pod-net", "pod-net", "cni0", "eth0", pod_ipam, self.pod_pool, True),
            Net("default/storage", "storage", "stor0", "net1", storage_ipam, host_local, False),
        ]
        self.week = Week(self.now, self.start, [self.pod_pool, *self.plain_pools])
        self.host_local = host_local

    def lifetimes(self, count: int) -> list[tuple[float, float | None]]:
        """(start, end or None: still live) of ``count`` leases over the week."""
        out: list[tuple[float, float | None]] = []
        for _ in range(count):
            t = self.start + self.rnd.random() * (WEEK - 60)
            if self.rnd.random() < self.long_lived:
                out.append((t, None))
                continue
            end = t + 1 + self.rnd.expovariate(1.0 / self.lifetime_s)
            out.append((t, end if end < self.now - 5 else None))
        return out

    def pod_name(self) -> tuple[str, str, str]:
        rnd = self.rnd
        ns = rnd.choice(NAMESPACES)
        if rnd.random() < 0.2:  # a statefulset's pod: the same name each time
            name = f"{rnd.choice(STATEFULSETS)}-{rnd.randrange(3)}"
        else:
            name = f"{rnd.choice(DEPLOYMENTS)}-{rnd.randbytes(5).hex()[:9]}-" \
                   f"{rnd.randbytes(3).hex()[:5]}"
        return ns, name, rnd.randbytes(16).hex()

    def build(self) -> Week:
        pods = math.ceil(self.rows / 2)
        events: list[tuple[float, int, int, int]] = []  # (time, 0 end / 1 start, kind, index)
        for kind, count in ((0, pods), (1, self.rows - pods)):
            for i, (t0, t1) in enumerate(self.lifetimes(count)):
                events.append((t0, 1, kind, i))
                if t1 is not None:
                    events.append((t1, 0, kind, i))
        events.sort()  # in time order: the allocators see them as the daemon did
        pending: dict[tuple[int, int], _Pending] = {}
        for t, starting, kind, i in events:
            if kind == 0 and starting:
                # the last pod of an odd N has its eth0 only
                nets = self.nets[:1] if (self.rows % 2 and i == pods - 1) else self.nets
                found = self.pod_add(t, nets)
                if found is not None:
                    pending[(kind, i)] = found
            elif kind == 0:
                if (kind, i) in pending:
                    self.pod_del(t, pending.pop((kind, i)))
            elif starting:
                pending[(kind, i)] = self.plain_add(t)
            else:
                self.plain_del(t, pending.pop((kind, i)))
        self.week.number()
        return self.week

    # -- a pod: one ADD with both attachments, one DEL later ---------------------------

    def pod_add(self, t: float, nets: list[Net]) -> _Pending | None:
        """The pod's ADD; None when it failed (compensated at once, then kubelet's DEL)."""
        rnd, week = self.rnd, self.week
        p = _Pending(rnd.randbytes(32).hex(), f"/var/run/netns/cni-{rnd.randbytes(16).hex()}",
                     self.pod_name())
        failed = rnd.random() < ADD_FAILS
        end = t + rnd.uniform(0.04, 0.15)
        op = Op("ADD", p.container, p.netns, "eth0", "netctl", "1.1.0", p.pod, CALLER_CONF,
                "runtime", "compensated" if failed else "done", t, end)
        if failed:
            op.code, op.error = 11, "network default/pod-net: bridge: failed to set bridge addr"
        week.ops.append(op)
        for net in nets:
            ip = net.pool.take()
            address = net.pool.rng.address(ip)
            result = _compact({"cniVersion": CHAIN_VERSION, "interfaces": [
                {"name": net.bridge, "mac": self.mac()},
                {"name": f"veth{rnd.randbytes(4).hex()}", "mac": self.mac()},
                {"name": net.ifname, "mac": self.mac(), "sandbox": p.netns}],
                "ips": [{"interface": 2, "address": address, "gateway": net.pool.gateway}],
                "dns": {}})
            att = Att(p.container, net, p.netns, p.pod, op, t, address,
                      None if failed else result)
            week.atts.append(att)
            conf: dict[str, Any] = {"type": "bridge", "bridge": net.bridge, "isGateway": True,
                                    "ipam": net.ipam, "name": net.name,
                                    "cniVersion": CHAIN_VERSION}
            if net.central:  # the daemon hands the bridge its address in a static section
                conf["ipam"] = {"type": "static", "addresses": [
                    {"address": address, "gateway": net.pool.gateway}]}
            s0, secs = t + rnd.uniform(0.001, 0.005), rnd.uniform(0.02, 0.08)
            week.steps.append(Step(op, att, "ADD", _compact(conf),
                                   "failed" if failed else "ok", None if failed else result,
                                   s0, secs, "failed to set bridge addr" if failed else None))
            alloc = None
            if net.central:
                alloc = Alloc(net.pool, net.pool.rng.host(ip), p.container, net.ifname,
                              p.netns, p.pod, att, op, s0 - 0.0005)
                week.allocs.append(alloc)
            p.atts.append((att, ip, alloc, conf | {"prevResult": json.loads(result)}))
        if not failed:
            return p
        self.undo(end - 0.01, p, op, removed=end, error="compensated")
        week.ops.append(Op("DEL", p.container, p.netns, "eth0", "netctl", "1.1.0", p.pod,
                           CALLER_CONF, "runtime", "done", end + 0.5, end + 0.51))
        return None

    def undo(self, t: float, p: _Pending, op: Op, removed: float, error: str | None = None,
             leak: bool = False) -> None:
        """DEL steps of every attachment, in reverse; addresses released with them."""
        for att, ip, alloc, conf in reversed(p.atts):
            secs = self.rnd.uniform(0.02, 0.06)
            self.week.steps.append(Step(op, att, "DEL", _compact(conf), "ok", None, t, secs))
            att.state, att.removed, att.error = "removed", removed, error
            if att.net.central and leak:
                continue  # the allocation stays live: `netctl ipam leaks` reports it
            att.net.pool.give_back(ip)
            if alloc is not None:
                alloc.released_op, alloc.released = op, t + secs

    def pod_del(self, t: float, p: _Pending) -> None:
        end = t + self.rnd.uniform(0.05, 0.2)
        op = Op("DEL", p.container, p.netns, "eth0", "netctl", "1.1.0", p.pod, CALLER_CONF,
                "runtime", "done", t, end)
        self.week.ops.append(op)
        for att, *_ in p.atts:
            att.del_op = op
        leak = self.rnd.random() < LEAKS
        self.week.leaks += leak
        self.undo(t + 0.002, p, op, removed=end, leak=leak)

    def mac(self) -> str:
        return ":".join(f"{b:02x}" for b in (0x0a, *self.rnd.randbytes(5)))

    # -- plain-plugin allocations: netctl-ipam exec'd by a main plugin -------------------

    def plain_add(self, t: float) -> _Pending:
        rnd = self.rnd
        pool = rnd.choice(self.plain_pools)
        p = _Pending(rnd.randbytes(32).hex(), f"/var/run/netns/cni-{rnd.randbytes(16).hex()}",
                     self.pod_name())
        p.ip = pool.take()
        ifname = rnd.choice(("net2", "net3"))
        p.conf = _compact({"cniVersion": "1.0.0", "name": "sriov-a", "type": "macvlan",
                           "master": "eth1", "ipam": {"type": "netctl-ipam",
                                                      "range": pool.rng.key}})
        op = Op("ADD", p.container, p.netns, ifname, "sriov-a", "1.0.0", p.pod, p.conf, "ipam",
                "done", t, t + rnd.uniform(0.002, 0.01))
        self.week.ops.append(op)
        p.alloc = Alloc(pool, pool.rng.host(p.ip), p.container, ifname, p.netns, p.pod, None,
                        op, t + 0.001)
        self.week.allocs.append(p.alloc)
        return p

    def plain_del(self, t: float, p: _Pending) -> None:
        assert p.alloc is not None
        op = Op("DEL", p.container, p.netns, p.alloc.ifname, "sriov-a", "1.0.0", p.pod, p.conf,
                "ipam", "done", t, t + self.rnd.uniform(0.002, 0.01))
        self.week.ops.append(op)
        p.alloc.released_op, p.alloc.released = op, t + 0.001
        p.alloc.pool.give_back(p.ip)


def write(path: str, week: Week) -> None:
    """The week's rows into the migrated journal at ``path`` (:func:`journaldb.write_history`)."""
    journaldb.write_history(path, {
        "operations": (op.row() for op in week.ops),
        "attachments": (att.row() for att in week.atts),
        "steps": (s.row() for s in week.steps),
        "ipam_pools": ((p.key, p.network_name, p.rng.key, p.rng.version, str(p.rng.size),
                        None if p.cursor is None else str(p.cursor), week.start)
                       for p in week.pools),
        "ipam_allocations": (a.row() for a in week.allocs)})


# -- the queries, their targets and the checks ----------------------------------------------


def _when(rnd: random.Random, since: float, until: float | None, now: float) -> float:
    """A time while something was held: ``since`` inclusive, ``until`` exclusive."""
    return since + rnd.random() * ((until if until is not None else now) - since) * 0.999


@dataclass
class Query:
    key: str
    label: str  # as the CLI calls it
    run: Callable[[sqlite3.Connection, Any], list[dict[str, Any]]]
    targets: list[Any]
    check: Callable[[Any, list[dict[str, Any]]], str | None]


def _has_attachment(att: Att) -> Callable[[list[dict[str, Any]]], str | None]:
    def check(found: list[dict[str, Any]]) -> str | None:
        ids = [a["attachment"] for a in found]
        return None if att.id in ids else f"attachment {att.id} not among {ids[:10]}"
    return check


def queries(week: Week, rnd: random.Random, reps: int) -> list[Query]:
    """Every read path the CLI uses, with ``reps`` targets each and the expected answers."""
    now = week.now
    addressed = [a for a in week.atts if a.result is not None]
    by_pod = Counter(f"{a.pod[0]}/{a.pod[1]}" for a in week.atts)
    by_container = Counter(a.container for a in week.atts)
    ops_of = Counter(op.container for op in week.ops)
    live = Counter(a.pool.key for a in week.allocs if a.released is None)
    leaks = sum(1 for a in week.allocs if a.released is None and (
        (a.att is not None and a.att.state == "removed")
        or (a.att is None and a.netns and not os.path.exists(a.netns))))
    pools = [p.key for p in week.pools]

    def pick(rows: Sequence[T]) -> list[T]:
        return [rnd.choice(rows) for _ in range(reps)]

    ip_at = [(a, _when(rnd, a.created, a.removed, now)) for a in pick(addressed)]
    held = [(a, _when(rnd, a.allocated, a.released, now)) for a in pick(week.allocs)]
    since = [now - rnd.uniform(1800, 7200) for _ in range(reps)]

    def in_window(t: float) -> int:
        return sum(1 for a in week.atts
                   if a.created >= t or a.removed is None or a.removed >= t)

    expected_since = {t: in_window(t) for t in since}

    def count(want: int, found: list[dict[str, Any]], what: str) -> str | None:
        return None if len(found) == want else f"{len(found)} {what}, expected {want}"

    def held_by(alloc: Alloc, found: list[dict[str, Any]]) -> str | None:
        if any(f["container"] == alloc.container and f["since"] == alloc.allocated
               for f in found):
            return None
        return f"allocation {alloc.id} of {alloc.address} not among {len(found)} found"

    def pools_ok(_: Any, found: list[dict[str, Any]]) -> str | None:
        got = {p["key"]: p["in_use"] for p in found}
        want = {k: live.get(k, 0) for k in pools}
        return None if got == want else f"pools {got}, expected {want}"

    return [
        Query("attachments_ip_at", "attachments(ip=…, at=…)",
              lambda c, t: query.attachments(c, ip=t[0].address.split("/")[0], at=t[1]),
              ip_at, lambda t, found: _has_attachment(t[0])(found)),
        Query("attachments_ip", "attachments(ip=…)  (the address's history)",
              lambda c, t: query.attachments(c, ip=t[0].address), ip_at,
              lambda t, found: _has_attachment(t[0])(found)),
        Query("attachments_pod", f"attachments(pod=…, limit={query.PAGE + 1})  (--pod)",
              lambda c, a: query.attachments(c, pod=f"{a.pod[0]}/{a.pod[1]}",
                                             limit=query.PAGE + 1),
              pick(week.atts),
              lambda a, found: count(min(by_pod[f"{a.pod[0]}/{a.pod[1]}"], query.PAGE + 1),
                                     found, "attachments")),
        Query("attachments_pod_all", "attachments(pod=…)  (--pod --limit 0: all)",
              lambda c, a: query.attachments(c, pod=f"{a.pod[0]}/{a.pod[1]}"),
              pick(week.atts),
              lambda a, found: count(by_pod[f"{a.pod[0]}/{a.pod[1]}"], found, "attachments")),
        Query("attachments_container", "attachments(container=…)",
              lambda c, a: query.attachments(c, container=a.container), pick(week.atts),
              lambda a, found: count(by_container[a.container], found, "attachments")),
        Query("attachments_since", "attachments(since=30m…2h ago)",
              lambda c, t: query.attachments(c, since=t), since,
              lambda t, found: count(expected_since[t], found, "attachments")),
        Query("allocations_at", "allocations_at(ip, at)",
              lambda c, t: query.allocations_at(c, t[0].address, t[1]), held,
              lambda t, found: held_by(t[0], found)),
        Query("pools", "pools()", lambda c, _: query.pools(c), [None] * reps, pools_ok),
        Query("pool_allocations", "pool_allocations(key)",
              lambda c, key: query.pool_allocations(c, key), pick(pools),
              lambda key, found: count(live.get(key, 0), found, "live allocations")),
        Query("leaks", "ipam leaks (the reconciler's plan)", lambda c, _: _plan_leaks(c),
              [None] * reps, lambda _, found: count(leaks, found, "leaks")),
        Query("operations_container", "operations(container=…)",
              lambda c, a: query.operations(c, container=a.container), pick(week.atts),
              lambda a, found: count(ops_of[a.container], found, "operations")),
    ]


def _plan_leaks(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """``netctl ipam leaks``: the reconciler's plan on the journal, as the CLI asks it.
    The simulated sandboxes have no netns on this host, so the plan also frees every
    attachment's addresses; kept here are the kinds the simulation counts (allocations
    of removed or missing attachments, plain-plugin ones whose netns is gone)."""
    from netctl.reconcile.facts import gather
    from netctl.reconcile.plan import leaks, plan

    path = journaldb.file_of(conn)
    facts = gather(path, links={})
    return [row for row in leaks(facts, plan(facts, 0.0))
            if row["attachment"] is None or row["reason"] in ("attachment-removed",
                                                              "attachment-missing")]


# -- the bench ----------------------------------------------------------------------------


class JournalBench(Bench):
    def __init__(self, rows: int, reps: int = REPETITIONS, cli_runs: int = CLI_RUNS) -> None:
        super().__init__(1)
        self.rows = rows
        self.reps = reps
        self.cli_runs = cli_runs
        self.rnd = random.Random(SEED + 1)

    def measure(self) -> Measured:
        self.daemon.state_dir.mkdir(parents=True)
        path = self.daemon.journal_path
        migrate(path)
        progress(f"simulating a week: {self.rows} attachments, {self.rows} allocations")
        t0 = time.perf_counter()
        sim = Simulation(self.rows)
        week = sim.build()
        simulated = time.perf_counter() - t0
        t0 = time.perf_counter()
        write(path, week)
        written = time.perf_counter() - t0
        journal = self.describe(path)
        journal.update({"simulate_s": round(simulated, 2), "insert_s": round(written, 2),
                        "leaks_injected": week.leaks,
                        "churn": {"mean_lifetime_s": round(sim.lifetime_s, 1),
                                  "never_removed": round(sim.long_lived, 5),
                                  "pools": {p.key: {"size": p.rng.size, "peak_live": p.peak,
                                                    "handed_out": p.handed_out}
                                            for p in (*week.pools, sim.host_local)}}})
        progress(f"journal {journal['db_bytes'] / 2**20:.1f} MiB; timing the read paths, "
                  f"{self.reps} targets each")
        problems: list[str] = []
        todo = queries(week, self.rnd, self.reps)
        # The simulation's millions of objects are not the CLI's: out of the collector's
        # sight, or every full collection during a query would walk them all.
        gc.collect()
        gc.freeze()
        conn = query.connect(self.daemon.state_dir)
        timings: dict[str, Any] = {}
        try:
            with steps("read paths", len(todo)) as step:
                for q in todo:
                    timings[q.key] = self.time_query(conn, q, problems)
                    step("")
        finally:
            conn.close()
            gc.unfreeze()
        timings["cli_journal_ip_at"] = self.time_cli(week, problems)
        return Measured(
            params={"rows": self.rows, "repetitions": self.reps, "cli_runs": self.cli_runs},
            parts={"journal": journal, "queries": timings}, problems=problems)

    def describe(self, path: str) -> dict[str, Any]:
        conn = query.open_read_only(path)
        try:
            counts = journaldb.row_counts(conn, ("operations", "attachments", "steps", "ipam_pools",
                                             "ipam_allocations"))
            attachments, allocations = journaldb.live_counts(conn)
            live = {"attachments": attachments, "ipam_allocations": allocations}
            indexes = journaldb.index_names(conn)
            version = journaldb.schema_version(conn)
        finally:
            conn.close()
        size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
        return {"rows": counts, "live": live, "db_bytes": size, "schema_version": version,
                "indexes": indexes}

    def time_query(self, conn: sqlite3.Connection, q: Query,
                   problems: list[str]) -> dict[str, Any]:
        q.run(conn, q.targets[0])  # not timed: the first use of the statement and its pages
        seconds, rows, wrong = [], [], []
        for target in q.targets:
            p0 = time.perf_counter()
            found = q.run(conn, target)
            seconds.append(time.perf_counter() - p0)
            rows.append(len(found))
            problem = q.check(target, found)
            if problem:
                wrong.append(problem)
        if wrong:
            problems.append(f"{q.label}: {len(wrong)} of {len(q.targets)} answers wrong, e.g. "
                            f"{wrong[0]}")
        return {**summary_ms(seconds), "label": q.label,
                "rows_mean": round(sum(rows) / len(rows), 1) if rows else 0.0,
                "wrong": len(wrong)}

    def time_cli(self, week: Week, problems: list[str]) -> dict[str, Any]:
        """``netctl journal --ip ADDR --at TIME --json`` as a subprocess (interpreter start,
        imports, the queries, the JSON)."""
        addressed = [a for a in week.atts if a.result is not None]
        seconds, wrong = [], []
        for _ in range(self.cli_runs):
            att = self.rnd.choice(addressed)
            at = _when(self.rnd, att.created, att.removed, week.now)
            argv = netctl_argv("journal", "--state-dir", str(self.daemon.state_dir), "--ip",
                               att.address.split("/")[0], "--at", repr(at), "--json")
            p0 = time.perf_counter()
            proc = run(argv)
            seconds.append(time.perf_counter() - p0)
            try:
                found = json.loads(proc.stdout)["attachments"] if proc.returncode == 0 else None
            except (ValueError, KeyError):
                found = None
            if found is None:
                wrong.append(f"exited {proc.returncode}: {tail(proc.stdout)} "
                             f"{tail(proc.stderr)}")
            elif not any(a["attachment"] == att.id for a in found):
                wrong.append(f"attachment {att.id} not in the answer")
        if wrong:
            problems.append(f"netctl journal --ip --at: {len(wrong)} of {self.cli_runs} runs "
                            f"wrong, e.g. {wrong[0]}")
        return {**summary_ms(seconds), "label": "netctl journal --ip ADDR --at TIME --json "
                "(subprocess)", "rows_mean": None, "wrong": len(wrong)}


def render_journal(report: dict[str, Any]) -> list[RenderableType]:
    p, j = report["params"], report["journal"]
    rows, churn = j["rows"], j["churn"]
    return [
        f"netctl bench journal: {p['rows']} attachments and {p['rows']} IPAM allocations over "
        f"a simulated week, {p['cpus']} CPUs",
        "journal: " + ", ".join(f"{rows[t]} {t}" for t in rows)
        + f"; live: {j['live']['attachments']} attachments, "
          f"{j['live']['ipam_allocations']} allocations",
        f"  {j['db_bytes'] / 2**20:.1f} MiB on disk, schema version {j['schema_version']}; "
        f"simulated in {j['simulate_s']:.1f} s, inserted in {j['insert_s']:.1f} s",
        f"  pods live {churn['mean_lifetime_s'] / 60:.0f} min on average, "
        f"{churn['never_removed']:.2%} never removed; addresses held at most at once / "
        "handed out: " + ", ".join(f"{k} {v['peak_live']}/{v['handed_out']}"
                                   for k, v in churn["pools"].items()),
        f"each query on {p['repetitions']} targets drawn from the simulation (the CLI's "
        f"read-only connection, in-process), the CLI {p['cli_runs']} times", "",
        table(("", "p50 ms", "p95 ms", "p99 ms", "max ms", "rows"), [
            (t["label"], num(t["p50"]), num(t["p95"]), num(t["p99"]), num(t["max"]),
             num(t["rows_mean"], "{:.1f}")) for t in report["queries"].values()]),
        "", *verdict(report["problems"], "every answer matched the simulation")]


def run_journal(args: argparse.Namespace) -> int:
    if args.rows < 10:
        print("netctl bench journal: --rows must be ≥ 10", file=sys.stderr)
        return 2
    bench = JournalBench(args.rows)
    return drive(bench, "journal", bench.measure, render_journal, args.json)

