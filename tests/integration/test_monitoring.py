"""We test ``deploy/monitoring/`` — the Grafana dashboard and the PrometheusRule — against
real scrapes of a daemon in Kubernetes mode with the cluster IPAM (the fake API server,
real netns, the real bridge plugin and the test delegates):

- every metric and every label the dashboard's queries, its legends and the rules'
  expressions use is in a scrape (the target's ``instance`` and ``job`` aside); the
  expressions are read by a small PromQL tokenizer, itself checked on a known expression;
- the PodMonitor selects the DaemonSet's pods and the port its daemon's metrics-addr
  listens on;
- ``promtool check rules`` accepts the PrometheusRule's ``spec`` as a rules file;
- ``promtool test rules``, with input series converted from the scrapes (their values held
  for an hour, one sample a minute; a counter named below grows by one a minute): every
  dashboard query returns data on a healthy daemon, and no alert fires; with an attachment
  stuck and its DEL failure repeated, exactly the stuck, degraded and DEL-failure alerts;
  with the journal's directory read-only, not-ready (and stuck, not degraded: degraded
  says ready); with the API server stopped (unanswered requests repeated), watch-down for
  each cache and API errors (and the stuck ones). Annotations are compared as Prometheus
  renders them for the alerts whose templates name only labels and the value.

promtool comes with Debian's ``prometheus`` package (``make system-packages``); without
it these tests fail, they are not skipped.

Subnets: 10.188.0.0/24 (cluster), 10.188.1.0/24 (broken), 10.188.2.0/24 (sticky),
10.188.3.0/24 (flaky)."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from netctl_kit import harness
from netctl_kit.kubefake import IPAMBLOCKS, IPPOOLS, RESERVATIONS, FakeKube, nad, node, pod
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import (
    ROOT,
    RUN_TAG,
    SYSTEM_CNI,
    TEST_PLUGINS,
    TEST_SETTINGS,
    Daemon,
    free_port,
    ipam_bridge,
    wait_for,
)
from tests.integration.test_metrics import get

pytestmark = pytest.mark.netns

MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "netctl-dashboard.json"
RULES = MONITORING / "prometheusrule.yaml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
NODE = "node-a"
TARGET = {"instance": NODE, "job": "netctl"}  # the labels Prometheus adds to a target's series
# what the dashboard's variables stand for when its queries are evaluated here
VARIABLES = {"$__rate_interval": "5m", "$node": ".*"}


# -- PromQL, as far as the checks need it --------------------------------------------------

KEYWORDS = frozenset({
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
    "group_right", "inf", "nan", "sum", "min", "max", "avg", "count", "stddev", "stdvar",
    "topk", "bottomk", "quantile", "count_values", "group"})
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<range>\[[^\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_:]))
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^(){},=<>])
""", re.VERBOSE)


@dataclass
class Uses:
    """What an expression reads: metric → the labels its matchers name; grouping labels."""

    metrics: dict[str, set[str]] = field(default_factory=dict)
    grouping: set[str] = field(default_factory=set)


def tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read {expr[pos:]!r} in {expr!r}")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        if kind not in ("space", "range", "duration"):
            out.append((kind, m.group()))
    return out


def uses(expr: str) -> Uses:
    """The metrics (with their matchers' labels) and the grouping labels of ``expr``."""
    found = Uses()
    toks = tokens(expr)
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "ident" and text in GROUPING and nxt == "(":
            j = i + 2
            while toks[j][1] != ")":
                if toks[j][0] == "ident":
                    found.grouping.add(toks[j][1])
                j += 1
            i = j + 1
            continue
        if kind == "ident" and text not in KEYWORDS and nxt != "(":
            labels = found.metrics.setdefault(text, set())
            if nxt == "{":
                j = i + 2
                while toks[j][1] != "}":
                    if toks[j][0] == "ident":
                        labels.add(toks[j][1])
                    j += 1
                i = j
        elif text == "{" and (i == 0 or toks[i - 1][0] != "ident"):
            raise ValueError(f"a selector without a metric name in {expr!r}")
        i += 1
    return found


def test_the_tokenizer_reads_metrics_matchers_and_grouping() -> None:
    got = uses('histogram_quantile(0.99, sum by (job, le) (rate(a_bucket{verb="ADD", '
               'code!~"2xx|4[0-9]{2}"}[5m]))) > 5 and on (instance) b / max without '
               '(pool) (c{x="{y}"} offset 1h) > 512e6 unless count(d)')
    assert got.metrics == {"a_bucket": {"verb", "code"}, "b": set(), "c": {"x"}, "d": set()}
    assert got.grouping == {"job", "le", "instance", "pool"}


# -- the dashboard and the rules -------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panel_queries() -> list[tuple[str, str, str]]:
    """(panel title, expression, legend format) of every query of the dashboard."""
    return [(p["title"], t["expr"], t.get("legendFormat", ""))
            for p in dashboard()["panels"] for t in p.get("targets", ())]


def rule_groups() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    return list(doc["spec"]["groups"])


def alerts() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]


def substituted(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a dashboard variable this test does not know: {expr}"
    return expr


def test_the_dashboard_is_importable() -> None:
    doc = dashboard()
    assert doc["uid"] == "netctl" and doc["id"] is None  # grafana.com import: no local id
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["node"]["definition"] == "label_values(netctl_build_info, instance)"
    for p in doc["panels"]:
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["targets"], p["title"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))



def test_the_pod_monitor_scrapes_the_daemonset_metrics_port() -> None:
    """The PodMonitor selects the DaemonSet's pods and a port its daemon names, the one
    the daemon's ``metrics-addr`` listens on; ``instance`` becomes the node's name."""
    monitor = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    objects = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "daemonset.yaml")
                                      .read_text()))
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    config = yaml.safe_load(next(o for o in objects if o["kind"] == "ConfigMap")
                            ["data"]["daemon.yaml"])
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == ds["metadata"]["namespace"]
    ports = {p["name"]: p["containerPort"] for c in ds["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", ())}
    endpoint, = monitor["spec"]["podMetricsEndpoints"]
    assert f":{ports[endpoint['port']]}" == config["metrics-addr"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"} \
        in endpoint["relabelings"]

# -- real scrapes ----------------------------------------------------------------------------

Scrape = dict[str, list[tuple[str, dict[str, str], float]]]  # family → (sample, labels, value)


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Scrapes of one daemon, a node of a fake API server with the cluster IPAM:

    - ``healthy``: ADDs answered, one ADD refused by a delegate and compensated, a DEL, a
      netns deleted without a DEL and cleaned by reconcile; two pods still attached;
    - ``failing``: then an attachment stuck (its delegate refuses DEL for good) and a DEL
      answered with an error (a delegate refusing with a code a retry might cure);
    - ``journal-read-only``: then the journal's directory mounted read-only (undone after);
    - ``api-down``: then the API server stopped until the pods' watch is down."""
    tmp = tmp_path_factory.mktemp("monitoring")
    made: list[str] = []
    with FakeKube(crds=[IPAMBLOCKS, IPPOOLS, RESERVATIONS], bookmark_interval=0.5) as kube:
        d = Daemon(tmp, f"nct{secrets.token_hex(2)}", [str(TEST_PLUGINS), SYSTEM_CNI],
                   dict(TEST_SETTINGS))
        d.install_plugin()
        try:
            def net(name: str, suffix: str, subnet: str, *extra: dict[str, Any]) -> None:
                conf = ipam_bridge(name, d.name(suffix), {"type": "netctl-ipam",
                                                          "range": subnet})
                conf["plugins"].extend(extra)
                namespace = "kube-system" if name == "cluster" else "default"
                kube.create("network-attachment-definitions", nad(name, namespace, conf))

            net("cluster", "k0", "10.188.0.0/24")
            net("broken", "k1", "10.188.1.0/24", {"type": "fail"})
            net("sticky", "k2", "10.188.2.0/24", {"type": "faildel", "delcode": 7})
            net("flaky", "k3", "10.188.3.0/24", {"type": "faildel"})
            kube.create("nodes", node(NODE))
            port = free_port()
            d.settings.update({"kubeconfig": str(kube.kubeconfig(tmp / "kubeconfig")),
                               "node-name": NODE, "ipam-backend": "kubernetes",
                               "api-timeout": 2, "pod-wait": 0.5, "block-check": 0.2,
                               "metrics-addr": f"127.0.0.1:{port}"})
            d.start()
            wait_for(lambda: d.status().get("ready"), 20, "the daemon ready")

            def cni(verb: str, name: str, networks: str = "") -> harness.CNIResult:
                ns = f"nct{RUN_TAG}-mon-{name}"
                found = kube.get("pods", "default", name)
                if found is None:
                    found = kube.create("pods", pod(name, node=NODE, annotations={
                        "k8s.v1.cni.cncf.io/networks": networks} if networks else None))
                    harness.netns_add(ns)
                    made.append(ns)
                return d.cni(verb, name, ns, d.conf("cluster", "1.0.0"),
                             pod=f"default/{name}",
                             args=("IgnoreUnknown=1", f"K8S_POD_UID={found['metadata']['uid']}"))

            for name in ("p0", "p1", "p2", "p3"):
                assert cni("ADD", name).rc == 0
            refused = cni("ADD", "p4", "broken")
            assert refused.rc == 1 and refused.out is not None and refused.out["code"] == 7
            assert cni("DEL", "p1").rc == 0
            harness.netns_del(f"nct{RUN_TAG}-mon-p2")  # a runtime that lost the DEL
            wait_for(lambda: d.live_attachments_of(["p2"]) == 0, 20, "p2 cleaned")
            out = {"healthy": get(port)[1]}

            assert cni("ADD", "p5", "sticky").rc == 0
            assert cni("DEL", "p5").rc == 0  # refused for good: left stuck, DEL answered
            assert cni("ADD", "p6", "flaky").rc == 0
            failed = cni("DEL", "p6")
            assert failed.rc == 1 and failed.out is not None and failed.out["code"] != 0
            out["failing"] = get(port)[1]

            # the journal's directory read-only (a bind mount over itself): not ready
            state = str(Path(d.journal_path).parent)
            subprocess.run(["mount", "--bind", state, state], check=True)
            try:
                subprocess.run(["mount", "-o", "remount,bind,ro", state], check=True)
                out["journal-read-only"] = get(port)[1]
                assert "netctl_ready 0.0" in out["journal-read-only"]
            finally:
                subprocess.run(["umount", state], check=True)
            assert "netctl_ready 1.0" in get(port)[1]

            kube.stop()
            wait_for(lambda: 'netctl_kube_watch_up{resource="pods"} 0.0' in get(port)[1], 30,
                     "the pods' watch down")
            out["api-down"] = get(port)[1]
            kube.start()
            yield out
        finally:
            d.shut_down()
            for ns in made:
                harness.netns_del(ns)
            harness.remove_host_objects(d.prefix)


def series_of(scrapes: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    """Every sample name of every scrape → the label sets it came with."""
    out: dict[str, list[dict[str, str]]] = {}
    for text in scrapes.values():
        for name, labels, _ in parse(text):
            out.setdefault(name, []).append(labels)
    return out


def expressions() -> list[tuple[str, str, str]]:
    """(where, expression, legend) of every dashboard query and alert."""
    out = [(f"panel {title!r}", substituted(expr), legend)
           for title, expr, legend in panel_queries()]
    out += [(f"alert {a['alert']}", a["expr"], "") for a in alerts()]
    return out


def test_every_metric_and_label_used_is_in_a_real_scrape(scrapes: dict[str, str]) -> None:
    known = series_of(scrapes)
    assert "netctl_ipam_blocks" in known and "netctl_kube_watch_up" in known  # kube mode

    def labels_of(metric: str) -> set[str]:
        return {k for labels in known[metric] for k in labels} | set(TARGET)

    checked: set[str] = set()
    problems: list[str] = []
    for where, expr, legend in expressions():
        used = uses(expr)
        assert used.metrics, f"{where}: no metric in {expr}"
        for metric, matched in used.metrics.items():
            checked.add(metric)
            if metric not in known:
                problems.append(f"{where}: {metric} is not in the scrape")
                continue
            problems += [f"{where}: {metric} has no label {label!r}"
                         for label in sorted(matched - labels_of(metric))]
        # a grouping or legend label must come from one of the metrics read
        available = set().union(*(labels_of(m) for m in used.metrics if m in known))
        legend_labels = set(re.findall(r"{{\s*(\w+)\s*}}", legend))
        problems += [f"{where}: label {label!r} is on none of {sorted(used.metrics)}"
                     for label in sorted((used.grouping | legend_labels) - available)]
    variable = dashboard()["templating"]["list"][1]["definition"]
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable).groups()  # type: ignore[union-attr]
    if metric not in known or label not in labels_of(metric):
        problems.append(f"the node variable: {variable}")
    assert problems == []
    # what the issue asks the dashboard for is there
    for wanted in ("netctl_requests_total", "netctl_request_duration_seconds_bucket",
                   "netctl_plugin_exec_duration_seconds_bucket", "netctl_ipam_pool_used",
                   "netctl_ipam_blocks", "netctl_stuck_attachments",
                   "netctl_reconcile_findings_total", "netctl_journal_size_bytes",
                   "netctl_kube_api_requests_total", "netctl_kube_watch_up",
                   "process_resident_memory_bytes", "process_cpu_seconds_total"):
        assert wanted in checked, wanted


# -- promtool ------------------------------------------------------------------------------

def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert Path(PROMTOOL).exists(), (
        "promtool is missing: install Debian's prometheus package (make system-packages)")
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def rules_file(directory: Path, *, annotations: set[str] | None = None) -> Path:
    """The PrometheusRule's ``spec`` as a plain rules file; with ``annotations``, only
    those alerts keep theirs (promtool compares every annotation of a firing alert)."""
    groups = rule_groups()
    if annotations is not None:
        groups = json.loads(json.dumps(groups))
        for group in groups:
            for rule in group["rules"]:
                if rule.get("alert") not in annotations:
                    rule.pop("annotations", None)
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path


def test_promtool_check_rules(tmp_path: Path) -> None:
    res = promtool("check", "rules", str(rules_file(tmp_path)), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in res.stdout, res.stdout


def series_name(name: str, labels: dict[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted({**labels, **TARGET}.items()))
    return f"{name}{{{inner}}}"


def input_series(text: str, growing: dict[str, dict[str, str]] | None = None,
                 minutes: int = 60) -> list[dict[str, str]]:
    """A scrape as promtool's input series: each sample's value held for ``minutes``
    (one a minute); a sample whose name is in ``growing`` and whose labels hold those
    of ``growing[name]`` grows by one a minute instead."""
    out = []
    for name, labels, value in parse(text):
        want = (growing or {}).get(name)
        step = 1 if want is not None and want.items() <= labels.items() else 0
        out.append({"series": series_name(name, labels), "values": f"{value}+{step}x{minutes}"})
    return out


def rendered(alert: dict[str, Any], value: str, **labels: str) -> dict[str, str]:
    """``alert``'s annotations as Prometheus renders them for this test's node."""
    out = {}
    for key, template in alert["annotations"].items():
        text = template.replace("{{ $value }}", value)
        for name, label in {**TARGET, **labels}.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", label)
        assert "{{" not in text, f"{alert['alert']}: this test renders no {text}"
        out[key] = text
    return out


def run_promtool_tests(tmp_path: Path, tests: list[dict[str, Any]], keep: set[str]
                       ) -> subprocess.CompletedProcess[str]:
    rules_file(tmp_path, annotations=keep)
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    return promtool("test", "rules", "tests.yaml", cwd=tmp_path)


def firing(names: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """alert_rule_test entries at 60m: every alert, firing as ``names`` says (else none)."""
    return [{"eval_time": "60m", "alertname": a["alert"], "exp_alerts": names.get(a["alert"], [])}
            for a in alerts()]


def test_promtool_test_rules_with_real_scrapes(scrapes: dict[str, str], tmp_path: Path
                                               ) -> None:
    by_name = {a["alert"]: a for a in alerts()}
    node = {**TARGET}
    held, = (v for name, _, v in parse(scrapes["failing"]) if name == "netctl_stuck_attachments")
    assert held >= 1
    stuck = {"exp_labels": {**node, "severity": "warning"},
             "exp_annotations": rendered(by_name["NetctlStuckAttachments"], f"{held:g}")}
    degraded = {"exp_labels": {**node, "severity": "warning"},
                "exp_annotations": rendered(by_name["NetctlDegraded"], "1")}
    healthy = {
        "interval": "1m", "input_series": input_series(scrapes["healthy"]),
        # every dashboard query returns data on a healthy daemon
        "promql_expr_test": [{"expr": f"count({substituted(expr)}) > bool 0",
                              "eval_time": "60m", "exp_samples": [{"labels": "{}", "value": 1}]}
                             for _, expr, _ in panel_queries()],
        "alert_rule_test": firing({})}
    del_code, = {labels["code"] for name, labels, _ in parse(scrapes["failing"])
                 if name == "netctl_requests_total" and labels["verb"] == "DEL"} - {"0"}
    failing = {
        "interval": "1m",
        "input_series": input_series(scrapes["failing"], growing={
            "netctl_requests_total": {"verb": "DEL", "code": del_code}}),
        "alert_rule_test": firing({
            "NetctlStuckAttachments": [stuck], "NetctlDegraded": [degraded],
            "NetctlDelsFailing": [{"exp_labels": {**node, "severity": "warning"}}]})}
    not_ready = {
        "interval": "1m", "input_series": input_series(scrapes["journal-read-only"]),
        # degraded too, but not ready: only NetctlNotReady says so
        "alert_rule_test": firing({
            "NetctlNotReady": [{"exp_labels": {**node, "severity": "critical"},
                                "exp_annotations": rendered(by_name["NetctlNotReady"], "0")}],
            "NetctlStuckAttachments": [stuck]})}
    watches_down = sorted(labels["resource"] for name, labels, value
                          in parse(scrapes["api-down"])
                          if name == "netctl_kube_watch_up" and value == 0)
    assert "pods" in watches_down
    down = {
        "interval": "1m",
        "input_series": input_series(scrapes["api-down"], growing={
            "netctl_kube_api_responses_total": {"code": "0"}}),
        "alert_rule_test": firing({
            "NetctlKubeWatchDown": [{"exp_labels": {**node, "severity": "warning",
                                                    "resource": r},
                                     "exp_annotations": rendered(
                                         by_name["NetctlKubeWatchDown"], "0", resource=r)}
                                    for r in watches_down],
            "NetctlKubeApiErrors": [{"exp_labels": {**node, "severity": "warning"}}],
            # the stuck attachment is still there (its DEL failure no longer repeated)
            "NetctlStuckAttachments": [stuck], "NetctlDegraded": [degraded]})}
    res = run_promtool_tests(tmp_path, [healthy, failing, not_ready, down], keep={
        "NetctlStuckAttachments", "NetctlDegraded", "NetctlNotReady", "NetctlKubeWatchDown"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout, res.stdout
