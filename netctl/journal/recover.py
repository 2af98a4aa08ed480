"""What the node holds, read back into a rebuilt journal (``netctl journal rebuild``).

A journal rebuilt from a broken one (:mod:`netctl.journal.rebuild`) lacks the rows that
sat on broken pages. For netctl's own IPAM that is dangerous twice over: a live pod whose
allocation row was lost holds an address the journal calls free, so the next ADD could be
given it; and an allocation row that survived while its attachment row was lost would be
released by the first reconcile round ("attachment missing") under a live pod.
:func:`recover` settles both from the live sandboxes:

- every network namespace in the runtimes' netns dirs is entered and its global addresses
  read (:func:`addresses`);
- an address inside one of the journal's pools that no live allocation holds is recorded
  as held (one ``RECOVER`` operation, origin ``rebuild``, per netns) by its interface in
  that netns, for the container the node names: the journal's own surviving rows first
  (a live attachment or an ADD in that netns), then the runtime's cached ADD result
  (libcni's ``cni-results-dir``, whose interfaces name the sandbox), else no container;
- a live allocation whose attachment row was lost and whose netns still exists is kept as
  a plain one (no attachment).

Either way the address is released like any plain allocation: when the container's
delegate IPAM DEL names it, or by the reconciler within a round once its netns is gone.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from netctl.cni.netns import in_netns, is_netns
from netctl.cni.request import Pod
from netctl.journal import rows
from netctl.journal.records import Allocation, OpStart, Owner, PoolInfo

Key = tuple[int, int]  # a netns by (st_dev, st_ino): the same one under any of its paths
Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


@dataclass(frozen=True)
class Found:
    """A global address on an interface of a live network namespace."""

    netns: str
    ifname: str
    address: Interface


def _key(path: str) -> Key | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _read_addresses() -> list[tuple[str, str, int]]:
    """In the current netns: (interface, address, prefix length) of each global address."""
    from netctl.cni.netlink import IPRoute

    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        return [(names.get(msg["index"], ""), msg.get_attr("IFA_ADDRESS"), msg["prefixlen"])
                for msg in ipr.get_addr() if msg["scope"] == 0]  # RT_SCOPE_UNIVERSE


def addresses(netns_dirs: tuple[str, ...]) -> list[Found]:
    """Every global address in every network namespace of ``netns_dirs`` (each namespace
    once, under the first path found; what cannot be entered or read is skipped)."""
    from netctl.cni.netlink import NetlinkError

    found: list[Found] = []
    seen: set[Key] = set()
    for directory in netns_dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            key = _key(path)
            if key is None or key in seen or not is_netns(path):
                continue
            seen.add(key)
            try:
                held = in_netns(path, _read_addresses)
            except (OSError, NetlinkError):
                continue
            found.extend(Found(path, ifname, ipaddress.ip_interface(f"{addr}/{prefix}"))
                         for ifname, addr, prefix in held if ifname)
    return found


@dataclass(frozen=True)
class Pool:
    key: str
    info: PoolInfo
    scope: str
    version: int
    first: int
    last: int
    prefix: int

    def holds(self, ip: Interface) -> bool:
        return ip.version == self.version and self.first <= int(ip.ip) <= self.last


def _pool(row: sqlite3.Row, scope: str | None) -> Pool | None:
    """A pool of the journal's ``ipam_pools`` row (its range: ``a.b.c.d/p`` or
    ``first-last/p``); ``scope`` from a live allocation of it, else the default one
    (overlapping ranges of a network name share uniqueness)."""
    text = str(row["range"])
    body, _, prefix = text.rpartition("/")
    try:
        if "-" in body:
            lo, hi = (ipaddress.ip_address(part) for part in body.split("-", 1))
        else:
            net = ipaddress.ip_network(text, strict=False)
            lo, hi = net[0], net[-1]
        plen = int(prefix)
    except ValueError:
        return None
    info = PoolInfo(row["network_name"], text, lo.version, int(row["size"]))
    return Pool(row["key"], info, scope or f"network:{row['network_name']}", lo.version,
                int(lo), int(hi), plen)


@dataclass(frozen=True)
class Holder:
    container_id: str
    pod: Pod
    source: str  # where the container was named: journal | runtime cache


def _named(path: object, names: set[str]) -> Key | None:
    """The netns at ``path`` when it is called one of ``names`` (the live ones that need an
    owner: other paths are not looked at) and exists."""
    if not isinstance(path, str) or os.path.basename(path) not in names:
        return None
    return _key(path)


def _holders_in_journal(db: sqlite3.Connection, names: set[str]) -> dict[Key, Holder]:
    """Each live netns called one of ``names`` the rebuilt journal still names: its live
    attachment's container, else its latest ADD's."""
    out: dict[Key, Holder] = {}
    for sql in ("SELECT container_id, netns, pod_namespace, pod_name, pod_uid FROM"
                " operations WHERE verb = 'ADD' AND netns != '' ORDER BY id",
                "SELECT container_id, netns, pod_namespace, pod_name, pod_uid FROM"
                " attachments WHERE state != 'removed' AND netns != '' ORDER BY id"):
        for row in db.execute(sql):
            key = _named(row["netns"], names)
            if key is not None:
                out[key] = Holder(row["container_id"], Pod(
                    namespace=row["pod_namespace"], name=row["pod_name"],
                    uid=row["pod_uid"]), "journal")
    return out


def _holders_in_cache(results_dir: str, names: set[str]) -> dict[Key, Holder]:
    """Each netns called one of ``names`` a runtime's cached ADD result names as a sandbox:
    its container."""
    out: dict[Key, Holder] = {}
    try:
        files = os.listdir(results_dir)
    except OSError:
        return out
    for file in files:
        try:
            with open(os.path.join(results_dir, file), "rb") as fh:
                entry = json.load(fh)
            args = dict(entry.get("cniArgs") or [])
            container = str(entry["containerId"])
            sandboxes = {i.get("sandbox") for i in entry["result"].get("interfaces", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        pod = Pod(namespace=str(args.get("K8S_POD_NAMESPACE", "")),
                  name=str(args.get("K8S_POD_NAME", "")),
                  uid=str(args.get("K8S_POD_UID", "")))
        for sandbox in sandboxes:
            key = _named(sandbox, names)
            if key is not None:
                out.setdefault(key, Holder(container, pod, "runtime cache"))
    return out


def recover(db: sqlite3.Connection, netns_dirs: tuple[str, ...], results_dir: str
            ) -> list[dict[str, Any]]:
    """Settle the rebuilt journal ``db`` (in a transaction) with what the node's live
    netns hold (see the module's docstring); what was recovered, one entry each."""
    db.row_factory = sqlite3.Row
    now = time.time()
    done: list[dict[str, Any]] = []
    for row in db.execute(
            "SELECT al.id, al.address, al.netns, al.attachment_id FROM ipam_allocations al"
            " LEFT JOIN attachments a ON a.id = al.attachment_id WHERE al.released_at IS NULL"
            " AND al.attachment_id IS NOT NULL AND a.id IS NULL").fetchall():
        if row["netns"] and _key(row["netns"]) is not None:
            db.execute("UPDATE ipam_allocations SET attachment_id = NULL WHERE id = ?",
                       (row["id"],))
            done.append({"kind": "kept", "address": row["address"], "netns": row["netns"],
                         "why": f"its attachment {row['attachment_id']} was lost; its "
                                "netns lives"})
    scopes = dict(db.execute("SELECT pool, scope FROM ipam_allocations GROUP BY pool"))
    pools = [p for r in db.execute("SELECT key, network_name, range, size FROM ipam_pools")
             if (p := _pool(r, scopes.get(r["key"]))) is not None]
    held = {(scope, ipaddress.ip_address(address)) for scope, address in db.execute(
        "SELECT scope, address FROM ipam_allocations WHERE released_at IS NULL")}
    wanted: list[tuple[Found, Pool]] = []  # addresses no live allocation holds
    for found in addresses(netns_dirs):
        pool = next((p for p in pools if p.holds(found.address)), None)
        if pool is not None and (pool.scope, found.address.ip) not in held:
            held.add((pool.scope, found.address.ip))
            wanted.append((found, pool))
    names = {os.path.basename(found.netns) for found, _ in wanted}
    holders = {**_holders_in_cache(results_dir, names), **_holders_in_journal(db, names)} \
        if wanted else {}
    by_netns: dict[str, list[Allocation]] = {}
    for found, pool in wanted:
        key = _key(found.netns)
        holder = holders.get(key) if key is not None else None
        owner = Owner(holder.container_id if holder else "", found.ifname, found.netns,
                      holder.pod if holder else Pod())
        by_netns.setdefault(found.netns, []).append(Allocation(
            pool.key, pool.scope, int(found.address.ip), pool.version, pool.prefix, owner,
            now))
        done.append({"kind": "recovered", "address": str(found.address.ip),
                     "pool": pool.key, "netns": found.netns, "ifname": found.ifname,
                     "container": owner.container_id,
                     "named_by": holder.source if holder else "nothing"})
    infos = {p.key: p.info for p in pools}
    for netns, new in by_netns.items():
        owner = new[0].owner
        op_id = rows.insert_operation(db, OpStart(
            verb="RECOVER", container_id=owner.container_id, netns=netns,
            ifname=owner.ifname, pod=owner.pod, origin="rebuild",
            reason=f"found in netns {netns} by `netctl journal rebuild`: the journal rows "
                   "that held it were unreadable"), now)
        rows.record_allocations(db, new, op_id, infos, now)
        rows.close_operation(db, op_id, "done", None, None, now)
    return done

