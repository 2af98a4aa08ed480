"""Sticky addresses: an address owned by a workload's stable identity, kept reserved for
it after its pod goes and handed back when it comes again. Pure: no I/O.

Opt-in per ``ipam`` section (``sticky: true``, ``sticky_for``: :func:`sticky_seconds`).
The identity (:func:`identity`) is the first found of the pod's ``netctl.dev/sticky-key``
annotation, a KubeVirt virt-launcher pod's VM name, the pod's namespace/name; a container
without a pod name has none. An identity owns one address per (pool, interface name). The
rules the planner applies are in docs/ipam.md, "Sticky addresses".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netctl.cni.request import Pod
from netctl.errors import INVALID_CONFIG, CNIError
from netctl.journal.retention import parse_duration
from netctl.kubeapi.objects import KUBEVIRT_VM, STICKY_KEY

DEFAULT_STICKY_FOR = 3600.0  # 1h


def parse_sticky_for(value: Any) -> float:
    """``sticky_for`` → seconds (> 0): a duration (``90s``, ``10m``, ``24h``, ``7d``) or a
    number of seconds, as :func:`~netctl.journal.retention.parse_duration` reads them;
    code 7 naming the key otherwise."""
    try:
        seconds = parse_duration(value)
    except (ValueError, AttributeError):  # (AttributeError: neither a number nor a string)
        seconds = 0.0
    if seconds <= 0:
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


