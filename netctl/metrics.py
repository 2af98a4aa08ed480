"""Prometheus metrics and the ``/metrics``, ``/livez`` and ``/readyz`` endpoint
(``--metrics-addr``); every series and label is listed in docs/operating.md ("Metrics").

One registry of netctl's own. **Events** are counted as they happen through the methods of
:class:`Metrics` (the only importer of prometheus_client). **State** is not copied into
gauges: at scrape time :class:`_State` reads a :class:`Snapshot` from the daemon's parts'
in-memory counters (never the journal). Labels are bounded (:class:`Capped`): no container
id, pod or address is ever one.

prometheus-client is loaded without its package ``__init__`` (:mod:`netctl.partialimport`),
which would import an HTTP server, ``email`` and ``urllib`` (2.3 MiB) for the text encoding
alone; :func:`text_format` writes the same bytes (a test compares them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from netctl.httpserver import HttpServer, Request, Response
from netctl.partialimport import import_partly


def _imports() -> bool:
    """The partial import of prometheus-client: its metrics, registry and process collector."""
    import prometheus_client.metrics
    import prometheus_client.process_collector
    import prometheus_client.utils  # noqa: F401
    return True


PARTIAL = import_partly(("prometheus_client",), _imports) is not None

# the same names either way: from their own modules
from prometheus_client.metrics import (  # noqa: E402
    Counter,
    Histogram,
    Info,
    disable_created_metrics,
)
from prometheus_client.metrics_core import (  # noqa: E402
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector  # noqa: E402
from prometheus_client.registry import Collector, CollectorRegistry  # noqa: E402
from prometheus_client.samples import Sample  # noqa: E402
from prometheus_client.utils import floatToGoString  # noqa: E402

from netctl import __version__  # noqa: E402

log = logging.getLogger("netctl.metrics")

VERBS = frozenset({"ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"})
OTHER = "other"
MAX_CODES = 32
MAX_PLUGIN_TYPES = 32
REQUEST_BUCKETS = (.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60)
PLUGIN_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60)


class Capped:
    """A label's values: the first ``limit`` distinct ones as they are, then ``other``."""

    def __init__(self, limit: int, known: Iterable[str] = ()) -> None:
        self.limit = limit
        self.seen: set[str] = set(known)

    def __call__(self, value: str) -> str:
        if value in self.seen:
            return value
        if len(self.seen) >= self.limit:
            return OTHER
        self.seen.add(value)
        return value


def verb_label(verb: str) -> str:
    return verb if verb in VERBS else OTHER


@dataclass(frozen=True)
class CacheState:
    """One Kubernetes cache (an informer) as the scrape reports it."""

    up: bool  # watching now
    age: float | None  # seconds since it last heard from the API server (None: never)
    events: int = 0  # watch events received
    event_bytes: int = 0  # their bytes
    lists: int = 0  # lists (the first, and every relist)
    list_bytes: int = 0  # the lists' bytes


@dataclass
class Snapshot:
    """The daemon's state as the scrape reports it (read from memory)."""

    in_flight: int = 0
    queued: int = 0
    ready: bool = True  # ADDs can be served (netctl status: ready)
    degraded: bool = False  # ready, but stuck attachments or a pool nearly full
    stuck: int = 0  # attachments whose clean-up failed and that are still live
    pools: Mapping[str, tuple[int | None, int]] = field(default_factory=dict)  # size, used
    blocks: Mapping[str, int] | None = None  # node → blocks (ipam-backend: kubernetes)
    journal_bytes: int = 0
    journal_writes: int = 0
    journal_commits: int = 0
    journal_writable: bool = True  # its disk took the last batch
    journal_refused: int = 0  # writes its disk refused (full, read-only, I/O error)
    watches: Mapping[str, CacheState] | None = None  # resource → its cache
    api_calls: Mapping[tuple[str, str], int] | None = None  # (verb, resource) → count
    # (verb, resource, code) → count: answers by HTTP status (netctl.kubeapi.api.code_label)
    api_answers: Mapping[tuple[str, str, str], int] | None = None


class _State(Collector):
    """The gauges and counters read from a :class:`Snapshot` at scrape time."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.snapshot = snapshot

    def describe(self) -> Iterable[Metric]:
        return []  # collected at scrape time only (the registry must not call collect())

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot()
        yield GaugeMetricFamily("netctl_requests_in_flight",
                                "CNI requests being served now", value=s.in_flight)
        yield GaugeMetricFamily("netctl_requests_queued",
                                "CNI requests waiting for a slot (max-concurrent)",
                                value=s.queued)
        yield GaugeMetricFamily("netctl_ready", "1 while the daemon can serve ADDs "
                                "(netctl status exits 0 or 3)", value=1.0 if s.ready else 0.0)
        yield GaugeMetricFamily("netctl_degraded", "1 while the daemon is degraded: ready, "
                                "but the journal's disk refuses writes, attachments are "
                                "stuck or a pool is filled to "
                                "pool-degraded-at (netctl status names them)",
                                value=1.0 if s.degraded else 0.0)
        yield GaugeMetricFamily("netctl_stuck_attachments", "Live attachments whose clean-up "
                                "failed (the reconciler retries them with back-off)",
                                value=s.stuck)
        size = GaugeMetricFamily("netctl_ipam_pool_size", "Addresses in the pool",
                                 labels=["pool"])
        used = GaugeMetricFamily("netctl_ipam_pool_used", "Addresses of the pool allocated "
                                 "on this node", labels=["pool"])
        for pool, (total, n) in sorted(s.pools.items()):
            if total is not None:
                size.add_metric([pool], total)
            used.add_metric([pool], n)
        yield size
        yield used
        if s.blocks is not None:
            blocks = GaugeMetricFamily("netctl_ipam_blocks", "Address blocks held, by node "
                                       "(the cluster IPAM's blocks cache)", labels=["node"])
            for node, n in sorted(s.blocks.items()):
                blocks.add_metric([node], n)
            yield blocks
        yield GaugeMetricFamily("netctl_journal_size_bytes", "The journal database's size, "
                                "its write-ahead log included", value=s.journal_bytes)
        yield CounterMetricFamily("netctl_journal_writes", "Journal writes committed",
                                  value=s.journal_writes)
        yield CounterMetricFamily("netctl_journal_commits", "Journal transactions committed "
                                  "(fewer than writes: group commit)", value=s.journal_commits)
        yield GaugeMetricFamily("netctl_journal_writable", "0 while the journal's disk refuses "
                                "its writes (full, read-only, I/O errors): ADDs fail, DELs are "
                                "kept aside (netctl status names the cause)",
                                value=1.0 if s.journal_writable else 0.0)
        yield CounterMetricFamily("netctl_journal_writes_refused", "Journal writes the disk "
                                  "refused", value=s.journal_refused)
        if s.watches is not None:
            up = GaugeMetricFamily("netctl_kube_watch_up", "1 while the cache of the resource "
                                   "is watching the API server", labels=["resource"])
            age = GaugeMetricFamily("netctl_kube_cache_age_seconds", "Seconds since the cache "
                                    "last heard from the API server", labels=["resource"])
            counted = {
                name: CounterMetricFamily(f"netctl_kube_{name}", text, labels=["resource"])
                for name, text in (
                    ("watch_events", "Watch events the cache of the resource received"),
                    ("watch_bytes", "Bytes of the watch events the cache received"),
                    ("lists", "Lists the cache made (the first, and every relist)"),
                    ("list_bytes", "Bytes the cache's lists brought"))}
            for resource, c in sorted(s.watches.items()):
                up.add_metric([resource], 1.0 if c.up else 0.0)
                if c.age is not None:
                    age.add_metric([resource], c.age)
                for name, value in (("watch_events", c.events), ("watch_bytes", c.event_bytes),
                                    ("lists", c.lists), ("list_bytes", c.list_bytes)):
                    counted[name].add_metric([resource], value)
            yield up
            yield age
            yield from counted.values()
        if s.api_calls is not None:
            calls = CounterMetricFamily("netctl_kube_api_requests", "Requests made to the "
                                        "Kubernetes API server", labels=["verb", "resource"])
            for (verb, resource), n in sorted(s.api_calls.items()):
                calls.add_metric([verb, resource], n)
            yield calls
        if s.api_answers is not None:
            answers = CounterMetricFamily(
                "netctl_kube_api_responses", "Answers of the Kubernetes API server, by the "
                "request's verb and resource and the HTTP status (a few by number, others "
                "by class such as 5xx; 0: unreachable or timed out)",
                labels=["verb", "resource", "code"])
            for (verb, resource, code), n in sorted(s.api_answers.items()):
                answers.add_metric([verb, resource, code], n)
            yield answers


class Metrics:
    """netctl's instruments, on a registry of their own."""

    def __init__(self) -> None:
        # no `_created` series beside each counter and histogram: they double a scrape and
        # say only when the daemon started (a process-wide switch; nothing else in the
        # daemon uses prometheus_client)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        self._snapshot: Callable[[], Snapshot] | None = None  # the daemon's state (watch)
        r = self.registry
        # process_*: CPU seconds, resident and virtual memory, open and max fds, start time
        # (read from /proc at each scrape: a few small files)
        ProcessCollector(registry=r)
        Info("netctl_build", "The running netctl's version", registry=r).info(
            {"version": __version__})
        self._codes = Capped(MAX_CODES, {"0"})
        self._plugins = Capped(MAX_PLUGIN_TYPES)
        self.requests = Counter("netctl_requests", "CNI requests answered, by verb and CNI "
                                "code (0: success)", ["verb", "code"], registry=r)
        self.request_seconds = Histogram(
            "netctl_request_duration_seconds", "Time to answer a CNI request", ["verb"],
            buckets=REQUEST_BUCKETS, registry=r)
        self.plugin_seconds = Histogram(
            "netctl_plugin_exec_duration_seconds", "Time a delegate plugin ran, by type (the "
            f"first {MAX_PLUGIN_TYPES} types seen; later ones: other) and verb",
            ["plugin", "verb"], buckets=PLUGIN_BUCKETS, registry=r)
        self.compensations = Counter(
            "netctl_compensations", "Failed or cancelled ADDs undone: compensated, failed "
            "(something could not be removed) or timed_out", ["outcome"], registry=r)
        self.replay_findings = Counter(
            "netctl_replay_findings", "What the start-up replay found", ["kind"], registry=r)
        self.reconcile_findings = Counter(
            "netctl_reconcile_findings", "Leaks the reconcile rounds found and acted on, by "
            "reason", ["reason"], registry=r)
        self.network_status_failures = Counter(
            "netctl_network_status_writes_failed", "Attempts to write a pod's network-status "
            "annotation that the API server did not take (the ADD's own, then each retry "
            "in the background)", registry=r)
        self.network_data_failures = Counter(
            "netctl_dra_network_data_writes_failed", "Writes of a DRA ResourceClaim's "
            "status.devices networkData the API server did not take (refused: its "
            "authorization or validation; or not answered); each also a Warning Event "
            "NetworkDataNotWritten on the pod", registry=r)

    # -- events: called by the daemon, the engine, the chains, the reconciler --------------

    def request(self, verb: str, code: int, seconds: float) -> None:
        v = verb_label(verb)
        self.requests.labels(v, self._codes(str(code))).inc()
        self.request_seconds.labels(v).observe(seconds)

    def plugin_exec(self, plugin: str, verb: str, seconds: float) -> None:
        self.plugin_seconds.labels(self._plugins(plugin), verb_label(verb)).observe(seconds)

    def compensation(self, outcome: str) -> None:
        self.compensations.labels(outcome).inc()

    def replayed(self, found: Mapping[str, int]) -> None:
        for kind, n in found.items():
            self.replay_findings.labels(kind).inc(n)

    def reconciled(self, found: Mapping[str, int]) -> None:
        for reason, n in found.items():
            self.reconcile_findings.labels(reason).inc(n)

    def network_status_write_failed(self) -> None:
        self.network_status_failures.inc()

    def network_data_write_failed(self) -> None:
        self.network_data_failures.inc()

    # -- state -----------------------------------------------------------------------------

    def watch(self, snapshot: Callable[[], Snapshot]) -> None:
        """Read ``snapshot()`` at every scrape (the daemon's parts, in memory)."""
        self._snapshot = snapshot
        self.registry.register(_State(snapshot))

    def ready(self) -> bool:
        """Whether ADDs are served (degraded or not): ``/readyz``. Not before the daemon
        has its parts (:meth:`watch`)."""
        return self._snapshot is not None and self._snapshot().ready

    def render(self) -> bytes:
        return text_format(self.registry)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
# an OpenMetrics type as the text format names it
_TEXT_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram",
               "unknown": "untyped"}
_APART = ("_created", "_gsum", "_gcount")  # OpenMetrics samples: gauges of their own


def _escape(text: str, quote: bool) -> str:
    text = text.replace("\\", r"\\").replace("\n", r"\n")
    return text.replace('"', r'\"') if quote else text


def _sample(s: Sample) -> str:
    labels = ",".join(f'{k}="{_escape(v, True)}"' for k, v in sorted(s.labels.items()))
    head = f"{s.name}{{{labels}}}" if labels else s.name
    at = f" {int(float(s.timestamp) * 1000):d}" if s.timestamp is not None else ""
    return f"{head} {floatToGoString(s.value)}{at}\n"  # type: ignore[no-untyped-call]


def _family(name: str, kind: str, documentation: str, lines: list[str]) -> list[str]:
    return [f"# HELP {name} {_escape(documentation, False)}\n", f"# TYPE {name} {kind}\n",
            *lines]


def text_format(registry: Collector) -> bytes:
    """What ``registry`` collects, in Prometheus' text format (version 0.0.4): a counter
    named with ``_total``, an info with ``_info`` (a gauge), each family's OpenMetrics-only
    samples (``_created``, ``_gsum``, ``_gcount``) as gauges of their own after it, label
    values and help escaped. netctl's names are all of the classic character set."""
    out: list[str] = []
    for metric in registry.collect():
        name = metric.name + {"counter": "_total", "info": "_info"}.get(metric.type, "")
        apart: dict[str, list[str]] = {}
        lines = []
        for s in metric.samples:
            suffix = next((x for x in _APART if s.name == metric.name + x), None)
            if suffix is None:
                lines.append(_sample(s))
            else:
                apart.setdefault(suffix, []).append(_sample(s))
        out += _family(name, _TEXT_TYPES.get(metric.type, metric.type),
                       metric.documentation, lines)
        for suffix, more in sorted(apart.items()):
            out += _family(metric.name + suffix, "gauge", metric.documentation, more)
    return "".join(out).encode()


def respond(request: Request, body: Callable[[], bytes],
            ready: Callable[[], bool] = lambda: True) -> Response:
    """The answer to ``request``. Pure.

    ``/metrics``: ``body()``; ``/livez``: 200 (an answer is alive: kubelet's liveness and
    startup probes); ``/readyz``: 200 when ``ready()`` (ADDs are served, degraded or
    not), else 503 (the readiness probe). A probe over HTTP costs the node nothing but
    the answer: an exec probe starts a Python process, every ten seconds."""
    if request.method not in ("GET", "HEAD"):
        return Response(405, b"GET /metrics\n")
    if request.path == "/metrics":
        return Response(200, body(), CONTENT_TYPE)
    if request.path == "/livez":
        return Response(200, b"alive\n")
    if request.path == "/readyz":
        return Response(200, b"ready\n") if ready() else Response(503, b"not ready\n")
    return Response(404, b"see /metrics, /livez, /readyz\n")


def metrics_server(metrics: Metrics, addr: str) -> HttpServer:
    """``GET /metrics``, ``/livez`` and ``/readyz`` (:func:`respond`) on ``addr``."""
    async def handle(request: Request) -> Response:
        return respond(request, metrics.render, metrics.ready)

    return HttpServer(addr, "metrics-addr", handle, max_head=8192, name="metrics",
                      path="/metrics", logger=log)
