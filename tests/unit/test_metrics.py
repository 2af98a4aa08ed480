"""We test these aspects of the metrics, without a daemon: label values are capped (verbs,
codes, plugin types), the state collector renders a :class:`Snapshot` as the documented
families, the endpoint's answer to a request head, ``HOST:PORT`` parsing; the reconcile
plan's reasons, the daemon's readiness reasons, the store's pool usage and the journal
index's stuck attachments that the metrics read."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from netctl import __version__
from netctl.engine.readiness import daemon_not_ready, daemon_reasons
from netctl.errors import NOT_AVAILABLE
from netctl.httpserver import HttpServer, Request, Response, parse_addr, request_of, url_of
from netctl.ipam.store import IndexStore
from netctl.journal.live import LiveIndex
from netctl.journal.records import Allocation, Owner
from netctl.metrics import (
    MAX_PLUGIN_TYPES,
    CacheState,
    Capped,
    Metrics,
    Snapshot,
    metrics_server,
    respond,
    text_format,
)
from netctl.reconcile.plan import REASONS, AttachmentFact, Facts, plan


def families(m: Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_label_values_are_capped() -> None:
    m = Metrics()
    for i in range(200):
        m.plugin_exec(f"plugin-{i}", "ADD", 0.01)
        m.request("ADD", 1000 + i, 0.01)
    m.request("A" * 5000, 0, 0.01)
    got = families(m)
    plugins = {labels["plugin"] for labels, _ in got["netctl_plugin_exec_duration_seconds_count"]}
    assert len(plugins) == MAX_PLUGIN_TYPES + 1 and "other" in plugins
    codes = {labels["code"] for labels, _ in got["netctl_requests_total"]}
    assert len(codes) <= 33 and "other" in codes
    verbs = {labels["verb"] for labels, _ in got["netctl_requests_total"]}
    assert verbs == {"ADD", "other"}
    capped = Capped(2, {"known"})
    assert [capped(v) for v in ("known", "a", "b", "a")] == ["known", "a", "other", "a"]


def test_a_snapshot_is_rendered_at_scrape_time() -> None:
    m = Metrics()
    state = Snapshot(in_flight=3, queued=1, stuck=2, pools={"p/10.0.0.0/24": (254, 7),
                                                            "q": (None, 1)},
                     blocks={"node-a": 2}, journal_bytes=4096, journal_writes=10,
                     journal_commits=4,
                     watches={"pods": CacheState(True, 0.5, 7, 7000, 1, 900),
                              "nodes": CacheState(False, None)},
                     api_calls={("list", "pods"): 2})
    m.watch(lambda: state)
    got = families(m)
    assert got["netctl_requests_in_flight"] == [({}, 3)]
    assert got["netctl_stuck_attachments"] == [({}, 2)]
    assert got["netctl_ipam_pool_size"] == [({"pool": "p/10.0.0.0/24"}, 254)]
    assert ({"pool": "q"}, 1) in got["netctl_ipam_pool_used"]
    assert got["netctl_ipam_blocks"] == [({"node": "node-a"}, 2)]
    assert got["netctl_journal_writes_total"] == [({}, 10)]
    assert got["netctl_kube_watch_up"] == [({"resource": "nodes"}, 0), ({"resource": "pods"}, 1)]
    assert got["netctl_kube_cache_age_seconds"] == [({"resource": "pods"}, 0.5)]
    # what each cache received: events and their bytes, lists and theirs (a relist storm
    # shows as lists and list bytes climbing)
    assert ({"resource": "pods"}, 7) in got["netctl_kube_watch_events_total"]
    assert ({"resource": "pods"}, 7000) in got["netctl_kube_watch_bytes_total"]
    assert ({"resource": "pods"}, 1) in got["netctl_kube_lists_total"]
    assert ({"resource": "pods"}, 900) in got["netctl_kube_list_bytes_total"]
    assert ({"resource": "nodes"}, 0) in got["netctl_kube_watch_events_total"]
    assert got["netctl_kube_api_requests_total"] == [({"verb": "list", "resource": "pods"}, 2)]
    state.in_flight = 0  # read again at the next scrape
    assert families(m)["netctl_requests_in_flight"] == [({}, 0)]
    assert "netctl_kube_watch_up" not in families(_standalone())


def test_process_build_state_and_api_answers() -> None:
    """The process collector's series, the build's version, the ready and degraded gauges
    and the API's answers by code, from the snapshot at each scrape."""
    m = Metrics()
    state = Snapshot(ready=True, degraded=True,
                     api_answers={("get", "pods", "404"): 3, ("list", "pods", "2xx"): 1})
    m.watch(lambda: state)
    got = families(m)
    assert got["netctl_build_info"] == [({"version": __version__}, 1.0)]
    assert got["process_resident_memory_bytes"][0][1] > 0
    assert got["process_open_fds"][0][1] > 0
    assert got["process_start_time_seconds"][0][1] > 0
    assert "process_cpu_seconds_total" in got
    assert got["netctl_ready"] == [({}, 1.0)] and got["netctl_degraded"] == [({}, 1.0)]
    assert got["netctl_kube_api_responses_total"] == [
        ({"verb": "get", "resource": "pods", "code": "404"}, 3),
        ({"verb": "list", "resource": "pods", "code": "2xx"}, 1)]
    state.ready, state.degraded = False, False
    again = families(m)
    assert again["netctl_ready"] == [({}, 0.0)] and again["netctl_degraded"] == [({}, 0.0)]
    assert "netctl_kube_api_responses_total" not in families(_standalone())


def _standalone() -> Metrics:
    m = Metrics()
    m.watch(Snapshot)
    return m


def exchange(server: HttpServer, *raw: bytes) -> list[bytes]:
    """Each of ``raw`` sent on a connection of its own to ``server`` (on a loopback port);
    each whole answer, up to the server's close."""
    async def main() -> list[bytes]:
        out = []
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            for data in raw:
                async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
                    await stream.send_all(data)
                    answer = b""
                    while chunk := await stream.receive_some(65536):
                        answer += chunk
                out.append(answer)
            server.stop()
        return out
    return trio.run(main)


def test_the_endpoint_answers() -> None:
    m = Metrics()  # no parts yet: not ready
    ok, head, missing, post, garbage, huge, live, ready = exchange(
        metrics_server(m, "127.0.0.1:0"),
        b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", b"POST /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
        b"garbage\r\n\r\n", b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n",
        b"GET /livez HTTP/1.1\r\nHost: a\r\n\r\n", b"GET /readyz HTTP/1.1\r\nHost: a\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and b"netctl_build_info" in ok
    assert b"\r\nconnection: close\r\n" in ok.lower()
    length = int(ok.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    assert len(ok.partition(b"\r\n\r\n")[2]) == length
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
    assert missing.startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert post.startswith(b"HTTP/1.1 405 Method Not Allowed\r\n")
    assert garbage.startswith(b"HTTP/1.1 400 Bad Request\r\n")  # not HTTP: said so
    assert huge.startswith(b"HTTP/1.1 400 Bad Request\r\n")  # a head past max_head
    # the probes: alive whenever it answers; ready as the daemon says
    assert live.startswith(b"HTTP/1.1 200 OK") and ready.startswith(b"HTTP/1.1 503")
    assert respond(request_of("GET", "/readyz"), bytes, lambda: True).status == 200


def test_a_handler_that_fails_is_answered_500_and_the_server_goes_on() -> None:
    calls = []

    async def handler(request: Request) -> Response:
        calls.append(request.path)
        if request.path == "/bug":
            raise RuntimeError("a bug")
        return Response(200, b"fine")

    bug, fine = exchange(HttpServer("127.0.0.1:0", "test-addr", handler),
                         b"GET /bug HTTP/1.1\r\nHost: a\r\n\r\n",
                         b"GET /ok HTTP/1.1\r\nHost: a\r\n\r\n")
    assert bug.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert bug.endswith(b"netctl internal error: RuntimeError: a bug\n")
    assert fine.startswith(b"HTTP/1.1 200 OK\r\n") and fine.endswith(b"\r\n\r\nfine")
    assert calls == ["/bug", "/ok"]


def test_ready_follows_the_daemons_snapshot() -> None:
    m = Metrics()
    assert not m.ready()  # no parts yet: not ready
    state = Snapshot(ready=True, degraded=True)
    m.watch(lambda: state)
    assert m.ready()  # degraded still serves
    state.ready = False
    assert not m.ready()


def test_metrics_addr() -> None:
    assert parse_addr("127.0.0.1:9100", "metrics-addr") == ("127.0.0.1", 9100)
    assert parse_addr("[::1]:9100", "metrics-addr") == ("::1", 9100)
    assert parse_addr(":9100", "metrics-addr") == ("", 9100)
    for bad in ("9100", "host:", "host:port", "h:70000"):
        with pytest.raises(ValueError):
            parse_addr(bad, "metrics-addr")


def test_the_logged_url_of_a_bound_address() -> None:
    assert url_of("http", "127.0.0.1", 40123, "/m") == "http://127.0.0.1:40123/m"
    assert url_of("https", "::", 9100) == "https://[::]:9100"


def _att(att_id: int, state: str, netns: str = "/run/netns/x", running: bool = False
         ) -> AttachmentFact:
    return AttachmentFact(att_id, f"c{att_id}", "net", "eth0", netns, state, running, None)


def test_the_plan_counts_its_reasons() -> None:
    facts = Facts([_att(1, "attached"), _att(2, "adding"), _att(3, "removing"),
                   _att(4, "attached", "/run/netns/here")], [], [],
                  {"/run/netns/x": False, "/run/netns/here": True}, {})
    found = plan(facts, 30).found
    assert found == {"netns-gone": 1, "add-not-undone": 1, "del-unfinished": 1}
    assert set(found) <= set(REASONS)


def test_readiness_reasons() -> None:
    assert daemon_reasons(journal_writable=True) == []
    assert daemon_reasons(journal_writable=True, pods_synced=True, nads_synced=True,
                          ipam_ready=None) == []
    reasons = daemon_reasons(journal_writable=False, pods_synced=False, nads_synced=True,
                             ipam_ready=False)
    assert len(reasons) == 3 and "journal" in reasons[0] and "pods" in reasons[1]
    err = daemon_not_ready(reasons)
    assert err.code == NOT_AVAILABLE and "journal" in err.msg


def _alloc(pool: str, ip: int, container: str) -> Allocation:
    return Allocation(pool=pool, scope=pool, version=4, ip=ip, prefix=24,
                      owner=Owner(container, "eth0"))


def test_pool_usage_follows_the_store() -> None:
    a, b = _alloc("p", 10, "c1"), _alloc("p", 11, "c2")
    store = IndexStore.of([a, b])
    store.know_pools({"p": 254, "empty": 14})
    assert store.pool_usage() == {"p": (254, 2), "empty": (14, 0)}
    store.released([a, a])  # twice: counted once
    assert store.pool_usage()["p"] == (254, 1)


def test_stuck_attachments_in_the_live_index() -> None:
    live = LiveIndex()
    live.attachment(1, "c1", "/run/netns/a")
    live.failed([1, 2])  # 2 is not live
    assert live.failing == {1}
    live.removed([1])
    assert live.failing == set()


def test_the_text_format_is_prometheus_clients_for_the_daemons_metrics() -> None:
    """Every family the daemon has, filled (events, a snapshot, the process collector):
    the same bytes as prometheus-client's own encoder. The process collector reads the
    process's CPU time at each encoding, so the two encodings are taken again (up to five
    times) when that moved in between: a format that differs never matches."""
    m = Metrics()
    m.plugin_exec("bridge", "ADD", 0.02)
    m.request("ADD", 0, 0.05)
    m.request("DEL", 11, 0.01)
    m.compensation("done")
    m.replayed({"ops": 2})
    m.reconciled({"leaked": 1})
    m.network_status_write_failed()
    m.network_data_write_failed()
    m.watch(lambda: Snapshot(in_flight=1, pools={"p": (254, 3)}, ready=True,
                             watches={"pods": CacheState(True, 0.5, 7, 7000, 1, 900)},
                             api_calls={("list", "pods"): 2},
                             api_answers={("get", "pods", "404"): 1}))
    for _ in range(5):
        ours, theirs = text_format(m.registry), generate_latest(m.registry)
        if ours == theirs:
            break
    assert ours == theirs
    assert b"netctl_dra_network_data_writes_failed_total 1.0" in ours


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
VALUES = st.one_of(st.floats(allow_nan=True), st.integers(-10**20, 10**20).map(float),
                   st.sampled_from([math.inf, -math.inf, 0.0, 1e-9, 1e21]))


@settings(max_examples=200, deadline=None)
@given(doc=TEXT, label=TEXT, value=VALUES, when=st.none() | st.floats(0, 2e9))
def test_the_text_format_is_prometheus_clients_for_every_kind(doc: str, label: str,
                                                              value: float,
                                                              when: float | None) -> None:
    """Help and label values with quotes, backslashes and line breaks, any float (NaN and
    the infinities too), a timestamp or none, and every kind of family, OpenMetrics' own
    samples (``_created``, ``_gsum``, ``_gcount``) included."""
    counter = CounterMetricFamily("c", doc, labels=["l"], created=1.5)
    counter.add_metric([label], value, created=2.5, timestamp=when)
    gauge = GaugeMetricFamily("g", doc, labels=["l", "m"])
    gauge.add_metric([label, "x"], value, timestamp=when)
    histogram = GaugeHistogramMetricFamily("gh", doc, labels=["l"])
    histogram.add_metric([label], [("1.0", 2.0), ("+Inf", 3.0)], gsum_value=value)
    info = InfoMetricFamily("i", doc, labels=["l"])
    info.add_metric([label], {"version": label})
    state = StateSetMetricFamily("s", doc, labels=["l"])
    state.add_metric([label], {"on": True, "off": False})
    unknown = UnknownMetricFamily("u", doc, value=value)
    registry = CollectorRegistry()
    registry.register(_Families([counter, gauge, histogram, info, state, unknown]))
    assert text_format(registry) == generate_latest(registry)
