"""The daemon's settings: :class:`DaemonConfig`, every setting with its default, and
:func:`load_config`, which reads them from the defaults, then a ``--config`` file (YAML or
JSON, the flags' names as keys), then the flags given on the command line."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import msgspec.yaml

from netctl import (
    DEFAULT_CNI_BIN_DIRS,
    DEFAULT_NETWORKS_DIR,
    DEFAULT_SOCKET,
    DEFAULT_STATE_DIR,
)
from netctl.engine.degraded import DEFAULT_POOL_DEGRADED_AT, parse_threshold
from netctl.engine.foreign import DEFAULT_MULTUS_CACHE, DEFAULT_RESULTS_CACHE
from netctl.errors import INVALID_CONFIG, CNIError
from netctl.httpserver import parse_addr
from netctl.journal.retention import DEFAULT_ALLOCATIONS, DEFAULT_JOURNAL, parse_duration


@dataclass
class DaemonConfig:
    """Every daemon setting, each documented in docs/configuration.md; ``--config`` files use
    the same keys as the flags (``state-dir``, ``stateDir`` and ``state_dir`` are all
    accepted)."""

    state_dir: str = DEFAULT_STATE_DIR
    socket: str = DEFAULT_SOCKET
    cni_bin_dir: str = DEFAULT_CNI_BIN_DIRS
    networks_dir: str = DEFAULT_NETWORKS_DIR
    kubeconfig: str | None = None
    in_cluster: bool = False
    node_name: str | None = None
    metrics_addr: str | None = None
    query_addr: str | None = None  # kubectl netctl's read-only queries (Kubernetes mode)
    query_tls_cert: str | None = None
    query_tls_key: str | None = None
    log_level: str = "info"  # LEVEL[,LOGGER=LEVEL…]: netctl's, then other loggers' (logs.py)
    log_format: Literal["text", "json", "logfmt"] = "text"
    journal_log: bool = False  # every journal change also logged as it commits
    plugin_timeout: float = 60.0
    max_concurrent: int = 32
    max_queue: int = 256
    compensate_timeout: float = 30.0
    cancel_grace: float = 5.0
    drain_timeout: float = 30.0
    max_request_bytes: int = 4 << 20
    allowed_uids: tuple[int, ...] = (0,)
    ipam_takeover: tuple[str, ...] = ()  # IPAM types served by netctl-ipam, e.g. whereabouts
    reconcile_interval: float = 60.0  # seconds between reconcile rounds; 0: the first only
    reconcile_grace: float = 30.0  # allocations younger than this are never released
    reconcile_events: bool = True  # reconcile on kernel and netns-dir events (watch.py)
    netns_dirs: tuple[str, ...] = ("/run/netns", "/var/run/netns")  # watched for deletions
    cutover_dels: bool = True  # a DEL of a container from before the switch: what ran for it
    multus_cache_dir: str = DEFAULT_MULTUS_CACHE  # Multus' cniDir
    cni_results_dir: str = DEFAULT_RESULTS_CACHE  # libcni's cached ADD results
    host_root: str = ""  # where the host's / is mounted ("": run as is)
    exit_after_replay: bool = False  # the start-up replay, then exit without serving
    # Kubernetes mode
    api_timeout: float = 10.0  # one API request (watches are renewed every 5 min)
    pod_wait: float = 2.0  # an ADD waits this long for the watch to bring an unseen pod
    pod_deleted_grace: float = 10.0  # a deleted pod's attachments are DELeted after this
    multus_conf_dir: str = "/etc/cni/multus/net.d"  # NADs with an empty spec.config
    readiness_wait: float = 45.0  # an ADD waits this long for readinessindicatorfile
    network_status_required: bool = False  # a network-status not written fails the ADD
    ipam_backend: str = "sqlite"  # sqlite: pools per node; kubernetes: blocks per node
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    block_idle: float = 600.0  # a block empty this long is released (one per pool kept)
    node_gone_grace: float = 300.0  # a deleted Node's blocks are taken over after this
    block_check: float = 10.0  # seconds between rounds of block maintenance
    journal_retention: float = DEFAULT_JOURNAL  # seconds; 0 keeps all
    allocation_retention: float = DEFAULT_ALLOCATIONS
    pool_degraded_at: float = DEFAULT_POOL_DEGRADED_AT  # netctl status: degraded this full

    @property
    def bin_dirs(self) -> list[str]:
        return [d for d in self.cni_bin_dir.split(":") if d]


def _normalize(key: str) -> str:
    """``state-dir``, ``stateDir``, ``state_dir`` → ``state_dir``."""
    return re.sub("[A-Z]", lambda m: "_" + m[0].lower(), key.replace("-", "_"))


# the settings whose config-file value is parsed before it is converted
_PARSED: dict[str, Callable[[Any], float]] = {
    "journal_retention": parse_duration, "allocation_retention": parse_duration,
    "pool_degraded_at": parse_threshold}


def load_config(path: str | None, overrides: dict[str, Any]) -> DaemonConfig:
    """Defaults, then the ``--config`` file, then the flags given on the command line."""
    values: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(DaemonConfig)}
    if path:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
            data = msgspec.yaml.decode(raw) if not path.endswith(".json") \
                else msgspec.json.decode(raw)
        except (OSError, msgspec.MsgspecError) as exc:
            raise CNIError(INVALID_CONFIG, f"daemon config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise CNIError(INVALID_CONFIG, f"daemon config {path}: not a mapping")
        for key, value in data.items():
            name = _normalize(str(key))
            if name not in fields:
                raise CNIError(INVALID_CONFIG, f"daemon config {path}: unknown key {key!r}")
            values[name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    for name, parse in _PARSED.items():
        if name in values:
            try:
                values[name] = parse(values[name])
            except (ValueError, TypeError) as exc:
                raise CNIError(INVALID_CONFIG, f"daemon config: {name.replace('_', '-')}: "
                               f"{exc}") from exc
    try:
        cfg = msgspec.convert(values, DaemonConfig, strict=False)
        if cfg.metrics_addr:
            parse_addr(cfg.metrics_addr, "metrics-addr")
        if cfg.query_addr:
            parse_addr(cfg.query_addr, "query-addr")
    except (msgspec.ValidationError, ValueError) as exc:
        raise CNIError(INVALID_CONFIG, f"daemon config: {exc}") from exc
    if bool(cfg.query_tls_cert) != bool(cfg.query_tls_key):
        raise CNIError(INVALID_CONFIG, "daemon config: query-tls-cert and query-tls-key go "
                       "together")
    return cfg
