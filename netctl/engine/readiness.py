"""The cluster network's readiness indicator (Multus' ``readinessindicatorfile``). Pure.

A file whose existence says that the node's own network is up: the conf flannel or
calico writes once their agent runs, say. With ``readinessindicatorfile`` set, an ADD
first waits for that file and fails with code 11 naming it when it does not come, and
STATUS answers "not ready" (code 50) while it is missing. The waiting is the daemon's
I/O; this module says what to wait for (:func:`indicator`) and what to answer when it
is not there (:func:`not_ready`). Multus polls every second for 45 s; how long netctl
waits is a setting of the daemon.
"""

from __future__ import annotations

import posixpath

from netctl.engine.plan import NetctlConf
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
