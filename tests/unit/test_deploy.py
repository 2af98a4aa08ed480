"""We test the manifests in ``deploy/`` without a cluster, with netctl's own parsers
wherever netctl reads what they say:

- every YAML file under ``deploy/`` parses; every Kubernetes object has apiVersion, kind
  and a name; ``deploy/daemon.yaml`` and the ConfigMap's ``daemon.yaml`` load as daemon
  configs (unknown keys refused);
- the DaemonSet: host network, host PID, the daemon privileged, a toleration for every
  taint, NODE_NAME from the downward API, the host paths mounted at the same paths
  (``/run/netns`` with HostToContainer), every command parsed by netctl's own CLI parser
  (the init container's ``install-cni --auto-config``, the watcher, the daemon, the
  readiness probe, the uninstaller), one socket path throughout, requests = limits in
  every container but the daemon, whose CPU has a request and no limit (bursts of pod
  starts are not throttled: ``netctl bench node-density``) and whose memory is bounded,
  every figure a quantity with the measurement behind it in a ``# measured:`` comment;
- RBAC: the ClusterRole is exactly ``tests.access.RULES``, row by row, each reason
  as its comment; the binding ties it to the DaemonSet's ServiceAccount;
- the admission policies that keep each daemon to its own node (``node-reach.yaml``): for
  that ServiceAccount only, every write the table grants on pods and IPAMBlocks looked at,
  the labels and the Lease netctl writes named as netctl names them;
- the NetworkAttachmentDefinition CRD as the API defines it and Multus (v4.3.0) installs
  it, object for object; the example NADs are of it and their configs are networks netctl
  runs, the example pods' annotations parse (both forms).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from netctl import settings
from netctl.cni.config import parse_chain
from netctl.commands import cli
from netctl.engine import selection
from netctl.kubeapi.objects import Nad
from tests import access

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBE = DEPLOY / "kubernetes"
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi)?$")


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def one(path: Path, kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs(path) if d["kind"] == kind]
    return found


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = one(KUBE / "daemonset.yaml", "DaemonSet")["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in spec.get("initContainers", []) + spec["containers"]
                if c["name"] == name]
    return found


def parsed(command: list[str]) -> argparse.Namespace:
    """A container's command, as netctl's own CLI reads it."""
    assert command[0] == "netctl", command
    return cli.build_parser().parse_args(command[1:])


def mounts(spec: dict[str, Any], c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mountPath → {host path, propagation, read-only}, through the pod's volumes."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    out = {}
    for m in c.get("volumeMounts", []):
        vol = volumes[m["name"]]
        out[m["mountPath"]] = {"host": vol.get("hostPath", {}).get("path"),
                               "propagation": m.get("mountPropagation"),
                               "readOnly": m.get("readOnly", False)}
    return out


def test_every_yaml_file_parses_and_every_object_is_named() -> None:
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert {p.relative_to(DEPLOY).as_posix() for p in files} >= {
        "daemon.yaml", "pod-net.yaml", "crds/network-attachment-definitions.yaml",
        "kubernetes/rbac.yaml", "kubernetes/daemonset.yaml", "kubernetes/uninstall.yaml",
        "kubernetes/journal-rebuild.yaml",
        "examples/networks.yaml", "examples/pods.yaml"}
    for path in files:
        if path.name == "daemon.yaml" and path.parent == DEPLOY:
            settings.load_config(str(path), {})  # the standalone daemon's config file
            continue
        for doc in docs(path):
            assert doc.get("apiVersion") and doc.get("kind"), path
            assert doc["metadata"].get("name"), path


def test_the_configmap_is_a_daemon_config(tmp_path: Path) -> None:
    cm = one(KUBE / "daemonset.yaml", "ConfigMap")
    (tmp_path / "daemon.yaml").write_text(cm["data"]["daemon.yaml"])
    cfg = settings.load_config(str(tmp_path / "daemon.yaml"), {"in_cluster": True})
    spec = pod_spec()
    args = parsed(container(spec, "netctl")["command"])
    assert args.cmd == "daemon" and args.in_cluster and args.config == "/etc/netctl/daemon.yaml"
    assert mounts(spec, container(spec, "netctl"))["/etc/netctl"]["readOnly"]
    assert cfg.cni_bin_dir == "/opt/cni/bin"


def test_daemonset_privileges_tolerations_and_node_name() -> None:
    spec = pod_spec()
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["tolerations"] == [{"operator": "Exists"}]  # every key, value and effect
    assert spec["serviceAccountName"] == one(KUBE / "rbac.yaml", "ServiceAccount")[
        "metadata"]["name"]
    main = container(spec, "netctl")
    assert main["securityContext"] == {"privileged": True}
    assert {"name": "NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in main["env"]
    for c in spec["initContainers"] + spec["containers"][1:]:
        assert "securityContext" not in c, f"{c['name']} writes files: root, not privileged"


def test_host_paths_are_mounted_at_the_same_paths(tmp_path: Path) -> None:
    spec = pod_spec()
    main = mounts(spec, container(spec, "netctl"))
    for path in ("/run/netctl", "/var/lib/netctl", "/run/netns"):
        assert main[path]["host"] == path, path
    assert main["/run/netns"]["propagation"] == "HostToContainer"
    # the delegates and the host files they need: the host's root, where host-root says
    cm = one(KUBE / "daemonset.yaml", "ConfigMap")
    (tmp_path / "d.yaml").write_text(cm["data"]["daemon.yaml"])
    cfg = settings.load_config(str(tmp_path / "d.yaml"), {})
    assert main[cfg.host_root] == {"host": "/", "propagation": "HostToContainer",
                                   "readOnly": False}
    for path in ("/opt/cni/bin", "/etc/cni/net.d", "/var/lib/cni"):
        assert path not in main, f"{path} is the host's, read under {cfg.host_root}"
    assert not main["/run/netctl"]["readOnly"] and not main["/var/lib/netctl"]["readOnly"]
    for name in ("install-cni", "cni-config"):
        writer = mounts(spec, container(spec, name))
        for path in ("/opt/cni/bin", "/etc/cni/net.d"):
            assert writer[path] == {"host": path, "propagation": None, "readOnly": False}


def test_the_commands_are_netctls_and_agree_on_the_socket(tmp_path: Path) -> None:
    spec = pod_spec()
    init = parsed(container(spec, "install-cni")["command"])
    assert (init.cmd, init.bin_dir, init.cni_conf_dir, init.auto_config, init.watch,
            init.uninstall) == ("install-cni", "/opt/cni/bin", "/etc/cni/net.d", True, False,
                                False)
    assert init.python is None and init.wait_timeout > 0  # the plugin needs no interpreter
    watcher = parsed(container(spec, "cni-config")["command"])
    assert watcher.auto_config and watcher.watch and not watcher.uninstall
    assert vars(watcher) | {"watch": False} == vars(init) | {"wait_timeout": 0}
    # the probes: HTTP on the metrics endpoint (no process started), on the port the
    # daemon's metrics-addr names; /readyz for readiness (a degraded daemon serves: 200),
    # /livez for the startup and liveness probes (an answer, ready or not, is alive)
    cm = one(KUBE / "daemonset.yaml", "ConfigMap")
    (tmp_path / "d.yaml").write_text(cm["data"]["daemon.yaml"])
    loaded = settings.load_config(str(tmp_path / "d.yaml"), {})
    daemon = container(spec, "netctl")
    (port,) = [p["containerPort"] for p in daemon["ports"] if p["name"] == "metrics"]
    assert loaded.metrics_addr == f":{port}"
    for kind, path in (("readinessProbe", "/readyz"), ("startupProbe", "/livez"),
                       ("livenessProbe", "/livez")):
        assert daemon[kind]["httpGet"] == {"path": path, "port": "metrics"}, kind
        assert "exec" not in daemon[kind], kind
    socket = loaded.socket
    assert init.socket == watcher.socket == socket
    assert os.path.dirname(socket) in mounts(spec, container(spec, "netctl"))

    uninstall = one(KUBE / "uninstall.yaml", "DaemonSet")["spec"]["template"]["spec"]
    undo = parsed(container(uninstall, "uninstall-cni")["command"])
    assert (undo.uninstall, undo.auto_config, undo.bin_dir, undo.cni_conf_dir) == (
        True, True, "/opt/cni/bin", "/etc/cni/net.d")
    assert uninstall["tolerations"] == [{"operator": "Exists"}]
    # then the DELs recorded meanwhile, with the daemon's own state, socket and host root
    assert [c["name"] for c in uninstall["initContainers"]] == ["uninstall-cni", "replay"]
    replay = container(uninstall, "replay")
    again = parsed(replay["command"])
    cfg = settings.load_config(str(tmp_path / "d.yaml"), {})
    assert again.exit_after_replay and not again.in_cluster and again.kubeconfig is None
    assert (again.state_dir, again.socket, again.cni_bin_dir, again.host_root) == (
        cfg.state_dir, cfg.socket, cfg.cni_bin_dir, cfg.host_root)
    assert mounts(uninstall, replay) == {
        path: m for path, m in mounts(spec, container(spec, "netctl")).items()
        if path != "/etc/netctl"}
    assert replay["securityContext"] == {"privileged": True}
    assert uninstall["hostNetwork"] is True and uninstall["hostPID"] is True


def test_the_journal_rebuild_pod_reads_what_the_daemon_reads() -> None:
    """``journal-rebuild.yaml``: one pod on the named node, the daemon's config, state dir,
    netns mounts and host root, its processes seen (a running daemon refuses it), allowed
    into the pods' netns, on the node's network (a pod network's sandbox needs the daemon
    that is down); run once, its resources measured."""
    pod = one(KUBE / "journal-rebuild.yaml", "Pod")
    spec = pod["spec"]
    (rebuild,) = spec["containers"]
    args = parsed(rebuild["command"])
    daemon = pod_spec()
    main = container(daemon, "netctl")
    (config,) = [a.split("=", 1)[1] for a in main["command"] if a.startswith("--config=")]
    assert (args.cmd, args.journal_cmd, args.config, args.force) == (
        "journal", "rebuild", config, False)
    assert rebuild["image"] == main["image"]
    assert mounts(spec, rebuild) == mounts(daemon, main)
    assert {v["name"]: v.get("configMap") for v in spec["volumes"]}["config"] == \
        {v["name"]: v.get("configMap") for v in daemon["volumes"]}["config"]
    assert rebuild["securityContext"] == {"privileged": True} and spec["hostPID"] is True
    # no pod network: its sandbox's ADD would go to the daemon that is down
    assert spec["hostNetwork"] is True
    assert (spec["nodeName"], spec["restartPolicy"]) == ("NODE_NAME", "Never")
    assert spec["tolerations"] == [{"operator": "Exists"}]
    res = rebuild["resources"]
    assert res["requests"] == res["limits"] and set(res["limits"]) == {"cpu", "memory"}
    text = (KUBE / "journal-rebuild.yaml").read_text()
    assert "# measured:" in text.split("resources:", 1)[1].split("requests:", 1)[0]


@pytest.mark.parametrize("name", ["daemonset.yaml", "uninstall.yaml"])
def test_resources_are_bounded_and_figures_are_measured(name: str) -> None:
    path = KUBE / name
    spec = one(path, "DaemonSet")["spec"]["template"]["spec"]
    for c in spec.get("initContainers", []) + spec["containers"]:
        res = c["resources"]
        assert set(res["requests"]) == {"cpu", "memory"}, c["name"]
        if c["name"] == "netctl":
            # no CPU limit: a burst of pod starts is not throttled (bench node-density);
            # its memory, delegates included, is bounded
            assert res["limits"] == {"memory": res["requests"]["memory"]}, res
        else:
            assert res["requests"] == res["limits"], c["name"]  # Guaranteed QoS
        for value in res["requests"].values():
            assert QUANTITY.match(str(value)), (c["name"], value)
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "resources:":
            comment = []
            for follow in lines[i + 1:]:
                if not follow.strip().startswith("#"):
                    break
                comment.append(follow.strip())
            assert any(c.startswith("# measured:") for c in comment), (name, i + 1)
    assert "TODO" not in path.read_text()


def _rule_comments(text: str) -> list[str]:
    """The comment right above each rule of the ClusterRole, joined into one line."""
    role = text.split("kind: ClusterRole\n", 1)[1].split("\n---", 1)[0]
    out, pending = [], []
    for line in role.splitlines():
        s = line.strip()
        if s.startswith("#"):
            pending.append(s.lstrip("#").strip())
        elif s.startswith("- apiGroups:"):
            out.append(" ".join(pending))
            pending = []
        else:
            pending = []
    return out


def test_the_cluster_role_is_the_access_table() -> None:
    path = KUBE / "rbac.yaml"
    role = one(path, "ClusterRole")
    rows = [(r["apiGroups"], r["resources"], r["verbs"]) for r in role["rules"]]
    assert rows == [([r.api_group], [r.resource], list(r.verbs)) for r in access.RULES]
    assert set(role["rules"][0]) == {"apiGroups", "resources", "verbs"}  # no names, no URLs
    assert _rule_comments(path.read_text()) == [r.reason for r in access.RULES]
    granted = {(g, res, v) for r in role["rules"] for g in r["apiGroups"]
               for res in r["resources"] for v in r["verbs"]}
    assert granted == access.grants()
    assert "*" not in {x for row in rows for part in row for x in part}
    assert access.allowed("", "pods", "patch") and not access.allowed("", "pods", "delete")
    assert not access.allowed("", "secrets", "get")

    binding = one(path, "ClusterRoleBinding")
    sa = one(path, "ServiceAccount")["metadata"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"],
                                    "namespace": sa["namespace"]}]
    assert one(KUBE / "daemonset.yaml", "DaemonSet")["metadata"]["namespace"] == sa["namespace"]


def test_the_nad_crd_and_the_examples() -> None:
    crd = one(DEPLOY / "crds" / "network-attachment-definitions.yaml",
              "CustomResourceDefinition")
    spec = crd["spec"]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}" == \
        "network-attachment-definitions.k8s.cni.cncf.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "NetworkAttachmentDefinition"
    assert spec["names"]["plural"] == access.RULES[2].resource
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["properties"]["config"]["type"] == "string"

    nads = docs(DEPLOY / "examples" / "networks.yaml") + docs(DEPLOY / "pod-net.yaml")
    assert len(nads) == 3
    for doc in nads:
        assert doc["apiVersion"] == f"{spec['group']}/{version['name']}"
        assert doc["kind"] == spec["names"]["kind"]
        nad = msgspec.convert(doc, Nad)  # as netctl reads a NAD
        chain = parse_chain(nad.spec.config, nad.metadata.name)
        assert chain.name == nad.metadata.name

    names = {d["metadata"]["name"] for d in nads}
    forms = []
    for pod in docs(DEPLOY / "examples" / "pods.yaml"):
        value = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        chosen = selection.parse(value)
        assert chosen and {s.name for s in chosen} <= names
        forms.append(value.strip().startswith("["))
    assert sorted(forms) == [False, True]  # the comma form and the JSON form


# Multus v4.3.0's NetworkAttachmentDefinition CRD (deployments/multus-daemonset-thick.yml),
# as the API server stores it: netctl ships the same object, so that applying either over
# the other changes nothing
_K8S_API_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/" \
    "api-conventions.md"
MULTUS_NAD_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"},
    "spec": {
        "group": "k8s.cni.cncf.io",
        "scope": "Namespaced",
        "names": {"plural": "network-attachment-definitions",
                  "singular": "network-attachment-definition",
                  "kind": "NetworkAttachmentDefinition",
                  "shortNames": ["nad", "net-attach-def"]},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
            "openAPIV3Schema": {
                "description": "NetworkAttachmentDefinition is a CRD schema specified by the "
                "Network Plumbing Working Group to express the intent for attaching pods to "
                "one or more logical or physical networks. More information available at: "
                "https://github.com/k8snetworkplumbingwg/multi-net-spec",
                "type": "object",
                "properties": {
                    "apiVersion": {
                        "description": "APIVersion defines the versioned schema of this "
                        "represen tation of an object. Servers should convert recognized "
                        "schemas to the latest internal value, and may reject unrecognized "
                        f"values. More info: {_K8S_API_CONVENTIONS}#resources",
                        "type": "string"},
                    "kind": {
                        "description": "Kind is a string value representing the REST "
                        "resource this object represents. Servers may infer this from the "
                        "endpoint the client submits requests to. Cannot be updated. In "
                        f"CamelCase. More info: {_K8S_API_CONVENTIONS}#types-kinds",
                        "type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {
                        "description": "NetworkAttachmentDefinition spec defines the desired "
                        "state of a network attachment",
                        "type": "object",
                        "properties": {"config": {
                            "description": "NetworkAttachmentDefinition config is a "
                            "JSON-formatted CNI configuration",
                            "type": "string"}}}}}}}],
    },
}


def test_the_nad_crd_is_multus_own() -> None:
    """The whole object, metadata included: a label or an explicit listKind that Multus'
    CRD has not would be written over it (and back) by every apply."""
    crd = one(DEPLOY / "crds" / "network-attachment-definitions.yaml",
              "CustomResourceDefinition")
    assert crd == MULTUS_NAD_CRD


def test_the_ipamblock_crd_matches_the_code() -> None:
    """The IPAMBlock CRD is cluster-scoped, named and grouped as the kube client calls it,
    and its schema has every field netctl writes in a block's or a borrow's spec."""
    import msgspec

    from netctl.kubeapi import blocks
    from netctl.kubeapi.objects import BorrowSpec  # a block's fields and a borrow's

    crd = one(DEPLOY / "crds" / "ipamblocks.yaml", "CustomResourceDefinition")
    spec = crd["spec"]
    assert spec["scope"] == "Cluster" and spec["names"]["kind"] == "IPAMBlock"
    assert blocks.BLOCKS == f"/apis/{spec['group']}/v1/{spec['names']['plural']}"
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    assert access.allowed(spec["group"], spec["names"]["plural"], "create")
    (version,) = spec["versions"]
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(props) == {f.encode_name for f in msgspec.structs.fields(BorrowSpec)}


def test_the_journal_reader_role_grants_what_the_daemons_check() -> None:
    """The ClusterRole's first rule is the SubjectAccessReview the query endpoint asks
    (netctl/kubeapi/review.py); the DaemonSet serves the port kubectl netctl asks by default;
    the bindings name the roles of the file."""
    from netctl.kubeapi import daemons, review

    path = KUBE / "journal-reader.yaml"
    role = one(path, "ClusterRole")
    assert role["metadata"]["name"] == "netctl-journal-reader"
    assert role["rules"][0] == {"apiGroups": [""], "verbs": [review.VERB],
                                "resources": [f"{review.RESOURCE}/{review.SUBRESOURCE}"]}
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert all(v in ("get", "list") for _, _, v in granted)  # read-only
    finder = one(path, "Role")
    assert finder["metadata"]["namespace"] == daemons.NAMESPACE
    assert finder["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert one(path, "ClusterRoleBinding")["roleRef"]["name"] == role["metadata"]["name"]
    assert one(path, "RoleBinding")["roleRef"]["name"] == finder["metadata"]["name"]

    ds = one(KUBE / "daemonset.yaml", "DaemonSet")
    assert ds["metadata"]["namespace"] == daemons.NAMESPACE
    key, _, value = daemons.SELECTOR.partition("=")
    assert ds["spec"]["template"]["metadata"]["labels"][key] == value
    cm = one(KUBE / "daemonset.yaml", "ConfigMap")
    query_addr = yaml.safe_load(cm["data"]["daemon.yaml"])["query-addr"]
    assert query_addr == f":{daemons.PORT}"
    ports = container(ds["spec"]["template"]["spec"], "netctl")["ports"]
    assert {"name": "query", "containerPort": daemons.PORT, "protocol": "TCP"} in ports


def test_the_api_servers_address_can_be_given_without_editing_the_manifest() -> None:
    """Where the ``kubernetes`` Service is not routed from the host network, the daemon's
    in-cluster address comes from ConfigMap ``netctl-api-server`` (Cilium's key names);
    optional, so that without it kubelet's Service variables stay."""
    env = {v["name"]: v for v in container(pod_spec(), "netctl")["env"]}
    for var, key in (("KUBERNETES_SERVICE_HOST", "k8sServiceHost"),
                     ("KUBERNETES_SERVICE_PORT", "k8sServicePort")):
        assert env[var]["valueFrom"]["configMapKeyRef"] == {
            "name": "netctl-api-server", "key": key, "optional": True}


def test_the_node_reach_policies_look_at_every_write_netctl_may_make_there() -> None:
    """``node-reach.yaml``: two policies, each bound with Deny, for netctl's ServiceAccount
    (rbac.yaml's) only; they look at every write the access table grants on IPAMBlocks and
    pods (a patch is an UPDATE to admission) and at the gone-nodes Lease, read the labels
    netctl writes, and take that Lease as the gone-nodes policy's parameter."""
    from netctl.ipam.cluster.gone import LEASE_NAME, LEASE_NAMESPACE
    from netctl.kubeapi.objects import BLOCK_LENDER_LABEL, BLOCK_NODE_LABEL

    path = KUBE / "node-reach.yaml"
    found = docs(path)
    policies = {d["metadata"]["name"]: d for d in found
                if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["spec"]["policyName"]: d for d in found
                if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings) == {"netctl-node-reach", "netctl-node-reach-gone-nodes"}
    sa = one(KUBE / "rbac.yaml", "ServiceAccount")["metadata"]
    user = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    for name, policy in policies.items():
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["matchConditions"][0] == {
            "name": "netctl", "expression": f"request.userInfo.username == '{user}'"}
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]

    operation = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE"}
    rules = policies["netctl-node-reach"]["spec"]["matchConstraints"]["resourceRules"]
    looked_at = {(g, r, op) for rule in rules for g in rule["apiGroups"]
                 for r in rule["resources"] for op in rule["operations"]}
    writes = {(r.api_group, r.resource, operation[v]) for r in access.RULES for v in r.verbs
              if r.resource in ("pods", "ipamblocks") and v in operation}
    assert writes == looked_at - {("coordination.k8s.io", "leases", op)
                                  for op in ("CREATE", "UPDATE")}
    (lease,) = [rule for rule in rules if rule["resources"] == ["leases"]]
    assert lease["resourceNames"] == [LEASE_NAME]
    param = bindings["netctl-node-reach-gone-nodes"]["spec"]["paramRef"]
    assert (param["namespace"], param["name"]) == (LEASE_NAMESPACE, LEASE_NAME)
    text = path.read_text()
    assert f"'{BLOCK_NODE_LABEL}'" in text and f"'{BLOCK_LENDER_LABEL}'" in text
