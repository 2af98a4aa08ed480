"""Sticky addresses: an address owned by a workload's stable identity, kept reserved for
it after its pod goes and handed back when it comes again. Pure: no I/O.

Opt-in per ``ipam`` section: ``sticky: true``, with ``sticky_for`` (a duration: ``90s``,
``10m``, ``24h``, ``7d``, or seconds; default :data:`DEFAULT_STICKY_FOR`) the time an
address stays reserved after its holder released it (:func:`sticky_seconds`).

The identity (:func:`identity`), first found of:

- the pod's annotation ``netctl.dev/sticky-key`` (:data:`STICKY_KEY`): ``key:<value>``,
  any workload that names the same key shares the address over time;
- a KubeVirt virt-launcher pod's ``vm.kubevirt.io/name`` label (:data:`KUBEVIRT_VM`):
  ``vm:<namespace>/<name>``, so a VM keeps its address across its pods (a migration's
  target pod included, once the source has released it);
- the pod's namespace/name (``pod:<namespace>/<name>``, a StatefulSet pod's stable name;
  from ``K8S_POD_NAMESPACE``/``K8S_POD_NAME``, so standalone mode has it too).

A container without a pod name has no identity and no sticky behaviour. An identity
owns one address per (pool, interface name): a pod attaching one network twice keeps
both. The rules the planner applies (:func:`netctl.ipam.planner.plan`) are in the
docs/ipam.md, "Sticky addresses".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netctl.cni.request import Pod
from netctl.errors import INVALID_CONFIG, CNIError
from netctl.journal.retention import duration_seconds
from netctl.kubeapi.objects import KUBEVIRT_VM, STICKY_KEY

DEFAULT_STICKY_FOR = 3600.0  # 1h


def parse_sticky_for(value: Any) -> float:
    """``sticky_for`` → seconds (> 0): a duration (``90s``, ``10m``, ``24h``, ``7d``) or a
    number of seconds; code 7 naming the key otherwise."""
    seconds: float | None
    if isinstance(value, bool):
        seconds = None
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = duration_seconds(value.strip().lower())
        if seconds is None:
            try:
                seconds = float(value.strip())
            except ValueError:
                seconds = None
    else:
        seconds = None
    if seconds is None or not 0 < seconds < float("inf"):
        raise CNIError(INVALID_CONFIG, f"ipam: sticky_for {value!r} is not a duration "
                       "greater than 0 (90s, 10m, 24h, 7d, or seconds)")
    return seconds


def sticky_seconds(sticky: bool, sticky_for: Any) -> float | None:
    """How long a released address stays reserved (None: the section is not sticky);
    ``sticky_for`` without ``sticky: true`` is refused (code 7): it would do nothing."""
    if not sticky:
        if sticky_for is not None:
            raise CNIError(INVALID_CONFIG, f"ipam: sticky_for {sticky_for!r} is given "
                           "without sticky: true")
        return None
    return DEFAULT_STICKY_FOR if sticky_for is None else parse_sticky_for(sticky_for)


def identity(pod: Pod, annotations: Mapping[str, Any] | None = None,
             labels: Mapping[str, Any] | None = None) -> str:
    """The identity that owns a sticky address (see the module's docstring); "" when
    the container names no pod."""
    if not pod.namespace or not pod.name:
        return ""
    key = (annotations or {}).get(STICKY_KEY)
    if isinstance(key, str) and key.strip():
        return f"key:{key.strip()}"
    vm = (labels or {}).get(KUBEVIRT_VM)
    if isinstance(vm, str) and vm.strip():
        return f"vm:{pod.namespace}/{vm.strip()}"
    return f"pod:{pod.namespace}/{pod.name}"


