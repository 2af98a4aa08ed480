"""Readiness: the cluster network's indicator (Multus' ``readinessindicatorfile``) and the
daemon's own. Pure.

A file whose existence says that the node's own network is up: the conf flannel or
calico writes once their agent runs, say. With ``readinessindicatorfile`` set, an ADD
first waits for that file and fails with code 11 naming it when it does not come, and
STATUS answers "not ready" (code 50) while it is missing. The waiting is the daemon's
I/O; this module says what to wait for (:func:`indicator`) and what to answer when it
is not there (:func:`not_ready`). The daemon's own readiness — what keeps it from serving
ADDs — is decided here too (:func:`daemon_reasons`), for ``netctl status`` and the STATUS
verb alike (:func:`daemon_not_ready`). Multus polls every second for 45 s; how long netctl
waits is a setting of the daemon.
"""

from __future__ import annotations

import posixpath

from netctl.engine.conf import NetctlConf
from netctl.errors import NOT_AVAILABLE, TRY_AGAIN_LATER, CNIError


def indicator(conf: NetctlConf) -> str | None:
    """The file to wait for, as an absolute, normalized path; None when none is set.
    A relative path is taken from ``/`` (Multus takes it from its working directory,
    which is ``/`` in its DaemonSet)."""
    path = conf.readinessindicatorfile.strip()
    return posixpath.normpath(posixpath.join("/", path)) if path else None


def not_ready(path: str, verb: str, waited: float = 0.0) -> CNIError:
    """The answer while the indicator is missing: STATUS says the plugin is not
    available (code 50); ADD, after waiting ``waited`` seconds, to try again later."""
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
    """Why the daemon cannot serve ADDs now (empty: it can). ``None``: not in this mode
    (no Kubernetes, or ``ipam-backend: sqlite``). In Kubernetes mode ``node`` is the
    daemon's ``--node-name`` and ``node_exists`` whether the API server has a Node of that
    name (``None``: not read yet): a wrong name (the short hostname where kubelet
    registered the FQDN) watches no pod at all, so it is a reason of its own. While a cache
    is not listed, ``unreachable`` (why the last call did not reach the API server: its
    address, the step, the cause) comes first: it is why they are not."""
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
