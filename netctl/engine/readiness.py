"""Readiness: the cluster network's indicator (Multus' ``readinessindicatorfile``: an ADD
waits for it, code 11; STATUS answers code 50 while it is missing) and the daemon's own
(:func:`daemon_reasons`). Pure.
"""

from __future__ import annotations

import posixpath

from netctl.engine.conf import NetctlConf
from netctl.errors import NOT_AVAILABLE, TRY_AGAIN_LATER, CNIError


def indicator(conf: NetctlConf) -> str | None:
    """The file to wait for, absolute (a relative path from ``/``, Multus' working
    directory); None when none is set."""
    path = conf.readinessindicatorfile.strip()
    return posixpath.normpath(posixpath.join("/", path)) if path else None


def not_ready(path: str, verb: str, waited: float = 0.0) -> CNIError:
    """The answer while the indicator is missing: code 50 for STATUS; for an ADD, after
    ``waited`` seconds, code 11."""
    if verb == "STATUS":
        return CNIError(NOT_AVAILABLE, f"the cluster network is not ready: its readiness "
                        f"indicator {path} (readinessindicatorfile) does not exist")
    return CNIError(TRY_AGAIN_LATER, f"the cluster network is not ready: its readiness "
                    f"indicator {path} (readinessindicatorfile) did not appear within "
                    f"{waited:g} s; is the node's network plugin running?")


def daemon_reasons(*, journal_writable: bool, pods_synced: bool | None = None,
                   nads_synced: bool | None = None, ipam_ready: bool | None = None,
                   node: str = "", node_exists: bool | None = None,
                   unreachable: str = "") -> list[str]:
    """Why the daemon cannot serve ADDs now (empty: it can); ``None``: not in this mode.
    ``node_exists``: whether the API server has the Node ``node`` (a wrong name watches no
    pod at all). While a cache is not listed, ``unreachable`` (why the API server was not
    reached) comes first."""
    reasons = []
    if unreachable and (node_exists is None or pods_synced is False or nads_synced is False
                        or ipam_ready is False):
        reasons.append(unreachable)
    if not journal_writable:
        reasons.append("the journal is not writable (its file or directory refuses writes)")
    if node and node_exists is None:
        reasons.append(f"the Node {node!r} has not been read from the API server yet")
    elif node and node_exists is False:
        reasons.append(node_missing(node))
    if pods_synced is False:
        reasons.append("the pods cache has not listed this node's pods from the API server "
                       "yet")
    if nads_synced is False:
        reasons.append("the NetworkAttachmentDefinitions cache has not listed them from the "
                       "API server yet")
    if ipam_ready is False:
        reasons.append("the cluster-wide IPAM (ipam-backend: kubernetes) is not ready: its "
                       "blocks are not settled with the API server yet")
    return reasons


def node_missing(node: str) -> str:
    """The reason (and log line) while the API server has no Node named ``node``."""
    return (f"the API server has no Node named {node!r}: --node-name (or NODE_NAME) must be "
            "the name kubelet registered the node with (kubectl get nodes; often the FQDN, "
            "not the short hostname); until then no pod of this node is watched and a pod "
            "deleted through the API is never cleaned")


def daemon_not_ready(reasons: list[str]) -> CNIError:
    """STATUS's answer while the daemon cannot serve ADDs: code 50, with why."""
    return CNIError(NOT_AVAILABLE, "the netctl daemon is not ready: " + "; ".join(reasons))
