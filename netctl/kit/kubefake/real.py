"""A real Kubernetes API server for the tests and ``netctl bench cluster --api-server real``,
started as controller-runtime's envtest
starts one: etcd and kube-apiserver as child processes on free loopback ports, in a
temporary directory (on tmpfs), with a CA, a serving certificate and service-account keys
made by ``openssl``, an admin token, an audit log, the project's CRDs and RBAC applied.

:class:`RealKube` has the test-facing methods of :class:`netctl_kit.kubefake.FakeKube`
(``create``, ``get``, ``list``, ``update``, ``patch``, ``delete``, ``kubeconfig``,
``count``, ``reset_counts``, ``wait_watches``, ``stop``, ``start``, ``restart``), so one
test body runs against both servers. netctl runs under a TokenRequest token of its
ServiceAccount (``deploy/kubernetes/rbac.yaml``): a verb that RBAC does not grant fails
with 403. Requests are counted from the audit log, for netctl's ServiceAccount only (the
test's own requests, made with the admin token, are not counted — as the fake counts
only what comes over HTTP).

Where the binaries are: ``NETCTL_KUBE_APISERVER`` (a kube-apiserver; by default the newest
version :mod:`netctl_kit.kubebins` finds, built outside the repository) and ``NETCTL_ETCD``
(default ``build/kube/etcd``, which ``make setup`` extracts from Debian's etcd-server,
else ``etcd`` on PATH). When one is missing, :func:`unavailable` says which and how to
provide it, and the real-server runs are skipped with that line.

One server serves a whole pytest session (it takes about 5 s to start); :meth:`RealKube.
clean` removes between tests what a test made (pods, events, NADs, nodes, blocks,
whereabouts' records), so tests see the same empty cluster the fake gives them.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import datetime
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from netctl_kit import kubebins
from netctl_kit.lifecycle import Opened

from .resources import BUILTIN, IPAMBLOCKS, IPPOOLS, RESERVATIONS, Registry, Resource

ROOT = Path(__file__).resolve().parents[3]  # the checkout: deploy/, build/, ../shared
KUBE_BUILD = ROOT / "build" / "kube"
ISSUER = "https://kubernetes.default.svc.cluster.local"
SA_NAMESPACE, SA_NAME = "kube-system", "netctl"  # deploy/kubernetes/rbac.yaml
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
BENCH_USER = "netctl-bench"  # a bench's baseline client (whereabouts' protocol): counted too
COUNTED = (SA_USER, BENCH_USER)

# what a test may create, and what clean() removes (namespaces stay: no controller-manager
# runs to finish a namespace's deletion)
CLEANED = ("pods", "events", "network-attachment-definitions", "nodes", "ipamblocks",
           "ippools", "overlappingrangeipreservations", "leases")
# kinds in the manifests applied at start → (API path prefix, plural, namespaced)
_MANIFEST_KINDS = {
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions",
                                 False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Namespace": ("/api/v1", "namespaces", False),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1",
                                  "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("/apis/admissionregistration.k8s.io/v1",
                                         "validatingadmissionpolicybindings", False),
}
_WHEREABOUTS_CRDS = (IPPOOLS, RESERVATIONS)  # their real CRDs are not the project's


class ApiFailure(Exception):
    def __init__(self, status: int, body: str, what: str) -> None:
        super().__init__(f"{what}: {status} {body[:500]}")
        self.status = status
        self.body = body


def apiserver_binary(kube: kubebins.KubeVersion | None = None) -> Path | None:
    """``NETCTL_KUBE_APISERVER`` when set, else ``kube``'s (by default the newest selected
    version's: :func:`netctl_kit.kubebins.pick`) kube-apiserver."""
    given = os.environ.get("NETCTL_KUBE_APISERVER")
    if given:
        return Path(given) if os.access(given, os.X_OK) else None
    kube = kube or kubebins.pick(names=kubebins.SERVER_BINARIES)
    return kube.binary("kube-apiserver") if kube is not None else None


def etcd_binary() -> Path | None:
    given = os.environ.get("NETCTL_ETCD")
    if given:
        return Path(given) if Path(given).exists() else None
    built = KUBE_BUILD / "etcd"
    if built.exists():
        return built
    found = shutil.which("etcd")
    return Path(found) if found else None


def unavailable() -> str | None:
    """Why the real API server cannot run here (None when it can)."""
    if apiserver_binary() is None:
        given = os.environ.get("NETCTL_KUBE_APISERVER")
        if given:
            return f"no kube-apiserver at NETCTL_KUBE_APISERVER={given}"
        return kubebins.missing(names=kubebins.SERVER_BINARIES)
    if etcd_binary() is None:
        return ("no etcd: `make setup` extracts Debian's etcd-server into build/kube/etcd, or "
                "set NETCTL_ETCD to an etcd 3.4+")
    if shutil.which("openssl") is None:
        return "no openssl (it makes the real API server's certificates): apt-get install openssl"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path, address: str = "127.0.0.1") -> None:
    """A CA, the serving certificate (127.0.0.1, ``address``, localhost,
    kubernetes.default.svc) and the service-account signing key pair, in ``d``."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=netctl-test-ca", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out",
             "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=d)
    (d / "san.ext").write_text(
        f"subjectAltName=IP:127.0.0.1,IP:{address},DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
        "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "apiserver.crt", "-days", "2", "-extfile", "san.ext",
             cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""


class RealKube(Opened):
    """etcd and kube-apiserver, started by :meth:`open`, stopped by :meth:`close`."""

    def __init__(self, extra: Iterable[Resource] = (IPAMBLOCKS, *_WHEREABOUTS_CRDS), *,
                 service_accounts: bool = False, apiserver_args: Sequence[str] = (),
                 address: str = "127.0.0.1", kube: kubebins.KubeVersion | None = None) -> None:
        """``kube``: the Kubernetes version whose kube-apiserver runs (by default
        :func:`apiserver_binary`'s); ``service_accounts``: the ServiceAccount admission plugin on (a
        controller-manager must then make the default ServiceAccounts: a real node's
        cluster, :mod:`netctl_kit.realnode`); ``apiserver_args``: more kube-apiserver flags;
        ``address``: where kube-apiserver listens (and its certificate names): a real
        node's cluster gives its node network's gateway, which the nodes reach from their
        own network namespaces; it reaches the kubelets by their InternalIP."""
        self.service_accounts = service_accounts
        self.kube = kube
        self.apiserver_args, self.address = list(apiserver_args), address
        self.registry = Registry([*BUILTIN, *extra])
        self.dir = Path(tempfile.mkdtemp(prefix="netctl-kube-", dir="/dev/shm"))
        self.port = free_port()
        self.etcd_port, self.peer_port = free_port(), free_port()
        self.admin_token = secrets.token_hex(16)
        self.bench_token = secrets.token_hex(16)
        self.sa_token = ""
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._audit_from = 0  # the audit log's offset at the last reset_counts
        # since when RBAC answers (it loads a moment after each start: 403s before it are
        # the server's, not a verb netctl's ClusterRole lacks)
        self._rbac_since = datetime.datetime.max.replace(tzinfo=datetime.UTC)
        self._ssl = ssl.create_default_context()

    # -- life cycle ----------------------------------------------------------------------

    def _open(self) -> None:
        make_certs(self.dir, self.address)
        self._ssl = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        (self.dir / "tokens.csv").write_text(
            f'{self.admin_token},netctl-test-admin,netctl-test-admin,"system:masters"\n'
            f'{self.bench_token},{BENCH_USER},{BENCH_USER},"system:masters"\n')
        (self.dir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        self._start_etcd()
        self.start()
        self._apply_manifests()
        self.sa_token = self.token_for(SA_NAMESPACE, SA_NAME)
        self._wait_rbac()

    def close(self) -> None:
        for proc in (self._apiserver, self._etcd):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        self._apiserver = self._etcd = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def _start_etcd(self) -> None:
        etcd = etcd_binary()
        assert etcd is not None
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with open(self.dir / "etcd.log", "wb") as log, signals_unblocked():
            self._etcd = subprocess.Popen(
                [str(etcd), "--name", "default", "--data-dir", str(self.dir / "etcd"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"default={peer}", "--log-level", "error"],
                stdout=log, stderr=subprocess.STDOUT)
        _wait(lambda: _http_ok(f"{client}/health"), 30, "etcd to answer /health",
              self._etcd, self.dir / "etcd.log")

    def start(self) -> None:
        """Start kube-apiserver (again, on the same port and etcd); ready at /readyz."""
        binary = apiserver_binary(self.kube)
        assert binary is not None
        d = self.dir
        with open(d / "apiserver.log", "ab") as log, signals_unblocked():
            self._apiserver = self._spawn_apiserver(binary, log)
        _wait(lambda: self._status("GET", "/readyz") == 200, 60,
              "kube-apiserver to answer /readyz", self._apiserver, d / "apiserver.log")
        if self.sa_token:  # a restart: RBAC loaded again
            self._wait_rbac()

    def _spawn_apiserver(self, binary: Path, log: Any) -> subprocess.Popen[bytes]:
        d = self.dir
        admission = [] if self.service_accounts else ["--disable-admission-plugins=ServiceAccount"]
        return subprocess.Popen([
            str(binary), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={self.address}", f"--secure-port={self.port}",
            f"--advertise-address={self.address}", "--endpoint-reconciler-type=none",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--cert-dir={d}", f"--tls-cert-file={d}/apiserver.crt",
            f"--tls-private-key-file={d}/apiserver.key", f"--client-ca-file={d}/ca.crt",
            f"--token-auth-file={d}/tokens.csv", f"--service-account-issuer={ISSUER}",
            f"--api-audiences={ISSUER}", f"--service-account-key-file={d}/sa.pub",
            f"--service-account-signing-key-file={d}/sa.key",
            "--authorization-mode=Node,RBAC", "--service-cluster-ip-range=10.96.0.0/12",
            "--allow-privileged=true", *admission,
            f"--audit-policy-file={d}/audit-policy.yaml", f"--audit-log-path={d}/audit.log",
            "--audit-log-format=json", "--audit-log-mode=blocking", "--v=0",
            *self.apiserver_args,
        ], stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        """An outage: kube-apiserver killed (SIGKILL), so that every connection to it,
        watches included, ends at once, as the fake's outage ends them and as a failed
        control-plane node does. (On SIGTERM it stops listening but lets the watches it
        serves go on for up to a minute of graceful shutdown: a client learns of that
        only from its next new connection.) etcd keeps the cluster, so :meth:`start`
        brings it back with its history."""
        proc = self._apiserver
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._apiserver = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def apiserver_pid(self) -> int:
        """kube-apiserver's process id (0: not running)."""
        return self._apiserver.pid if self._apiserver is not None else 0

    @property
    def serving(self) -> bool:
        return self._apiserver is not None and self._apiserver.poll() is None

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    # -- credentials -----------------------------------------------------------------------

    def token_for(self, namespace: str, account: str, *, seconds: int = 3600,
                  bound_secret: str | None = None, bound_pod: str | None = None) -> str:
        """A TokenRequest token of a ServiceAccount; bound to a Secret or a Pod of
        ``namespace`` when given (deleting it revokes the token). A Pod's token is a
        DaemonSet pod's: its user info names the pod's node (``spec.nodeName``) in extra
        ``authentication.kubernetes.io/node-name`` (Kubernetes 1.30 and later)."""
        spec: dict[str, Any] = {"audiences": [ISSUER], "expirationSeconds": seconds}
        bound = ("Secret", "secrets", bound_secret) if bound_secret is not None else \
            ("Pod", "pods", bound_pod) if bound_pod is not None else None
        if bound is not None:
            kind, plural, name = bound
            found = self.request("GET", f"/api/v1/namespaces/{namespace}/{plural}/{name}")
            spec["boundObjectRef"] = {"kind": kind, "apiVersion": "v1", "name": name,
                                      "uid": found["metadata"]["uid"]}
        answer = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return str(answer["status"]["token"])

    def kubeconfig(self, path: str | Path, *, token: str | None = None,
                   token_file: str | Path | None = None, namespace: str = "default") -> Path:
        """A kubeconfig for netctl: this server, its CA, and netctl's ServiceAccount token
        (or ``token``, or a ``tokenFile``)."""
        user: dict[str, str] = {}
        if token_file is not None:
            user["tokenFile"] = str(token_file)
        else:
            user["token"] = token if token is not None else self.sa_token
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "real",
            "clusters": [{"name": "real", "cluster": {
                "server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "real", "user": user}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": "real",
                                                      "namespace": namespace}}],
        }
        path = Path(path)
        path.write_text(yaml.safe_dump(config))
        return path

    # -- the cluster, with the admin token ---------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json", ok_missing: bool = False,
                token: str | None = None) -> Any:
        """One request, the admin's unless ``token``: its JSON answer; a status of 300 and
        more raises :class:`ApiFailure` (404 gives None with ``ok_missing``)."""
        status, data = self._raw(method, path, body, content_type, token)
        if status == 404 and ok_missing:
            return None
        if status >= 300:
            raise ApiFailure(status, data.decode(errors="replace"), f"{method} {path}")
        return json.loads(data) if data else None

    def _raw(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json", token: str | None = None,
             ) -> tuple[int, bytes]:
        """One request (the admin's unless ``token``): status and body."""
        conn = http.client.HTTPSConnection(self.address, self.port, context=self._ssl,
                                           timeout=30)
        try:
            headers = {"Authorization": f"Bearer {token or self.admin_token}",
                       "Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            conn.request(method, path, data, headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _status(self, method: str, path: str) -> int:
        try:
            return self._raw(method, path)[0]
        except OSError:
            return 0

    def path(self, res: Resource, namespace: str | None, name: str = "",
             subresource: str = "") -> str:
        base = f"/apis/{res.group}/{res.version}" if res.group else f"/api/{res.version}"
        if res.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{res.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        res = self.registry.named(resource)
        found: dict[str, Any] | None = self.request(
            "GET", self.path(res, namespace or "default", name), ok_missing=True)
        return found

    def list(self, resource: str, namespace: str | None = None, *,
             label_selector: str | None = None, field_selector: str | None = None,
             ) -> list[dict[str, Any]]:
        res = self.registry.named(resource)
        query = {k: v for k, v in (("labelSelector", label_selector),
                                   ("fieldSelector", field_selector)) if v}
        path = self.path(res, namespace)
        if query:
            path += "?" + urllib.parse.urlencode(query)
        items: list[dict[str, Any]] = self.request("GET", path)["items"]
        return items

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        res = self.registry.named(resource)
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        if res.namespaced:
            self.ensure_namespace(ns)
        body = {"apiVersion": res.api_version, "kind": res.kind, **obj}
        created: dict[str, Any] = self.request("POST", self.path(res, ns), body)
        if resource == "pods" and obj.get("status"):  # as the fake keeps a created status
            created = self.update("pods", {**created, "status": obj["status"]},
                                  subresource="status")
        return created

    def ensure_namespace(self, name: str) -> None:
        if self.request("GET", f"/api/v1/namespaces/{name}", ok_missing=True) is None:
            with contextlib.suppress(ApiFailure):  # created meanwhile
                self.request("POST", "/api/v1/namespaces", {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def update(self, resource: str, obj: dict[str, Any], *, subresource: str = "",
               ) -> dict[str, Any]:
        res = self.registry.named(resource)
        meta = obj.get("metadata") or {}
        body = {"apiVersion": res.api_version, "kind": res.kind, **obj}
        updated: dict[str, Any] = self.request(
            "PUT", self.path(res, meta.get("namespace") or "default", meta["name"],
                             subresource), body)
        return updated

    def patch(self, resource: str, namespace: str | None, name: str,
              patch: dict[str, Any] | builtins.list[Any], *, subresource: str = "",
              ) -> dict[str, Any]:
        res = self.registry.named(resource)
        kind = "application/json-patch+json" if isinstance(patch, list) else \
            "application/merge-patch+json"
        patched: dict[str, Any] = self.request(
            "PATCH", self.path(res, namespace or "default", name, subresource), patch,
            content_type=kind)
        return patched

    def delete(self, resource: str, namespace: str | None, name: str, *,
               grace_period: int | None = None,
               preconditions: dict[str, str] | None = None) -> dict[str, Any]:
        """Delete; a pod at once (``gracePeriodSeconds: 0``: no kubelet runs here to finish
        a graceful deletion) unless ``grace_period`` says otherwise."""
        res = self.registry.named(resource)
        if grace_period is None and res.plural == "pods":
            grace_period = 0
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        if preconditions:
            options["preconditions"] = preconditions
        gone: dict[str, Any] = self.request(
            "DELETE", self.path(res, namespace or "default", name), options)
        return gone

    def clean(self) -> None:
        """Remove what tests make (every namespace's pods, events, NADs, …; the nodes),
        so the next test starts from the same empty cluster."""
        namespaces = [n["metadata"]["name"] for n in self.request(
            "GET", "/api/v1/namespaces")["items"]]
        for plural in CLEANED:
            res = self.registry.named(plural)
            if res.plural == "leases":
                continue  # the API server's own leases live in kube-system
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
            for ns in namespaces if res.namespaced else [None]:
                self.request("DELETE", self.path(res, ns), options, ok_missing=True)
        self.request("DELETE", "/api/v1/namespaces/kube-system/secrets?labelSelector="
                     "netctl-test%3Dtrue", {"apiVersion": "v1", "kind": "DeleteOptions"})
        # netctl's own lease (the gone nodes' blocks: one holder among the daemons), which
        # a test's daemons would otherwise find held by the last test's
        self.request("DELETE", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/"
                     "netctl-ipam-gone-nodes", {"apiVersion": "v1", "kind": "DeleteOptions"},
                     ok_missing=True)

    # -- requests netctl made (the audit log) ------------------------------------------------

    def audit(self, *, since_reset: bool = True, settle: bool = True,
              ) -> builtins.list[dict[str, Any]]:
        """The audit events of netctl's ServiceAccount and of a bench's baseline (stages
        ResponseStarted and ResponseComplete), since the last :meth:`reset_counts`; with
        ``settle``, once a request of the test's own is in the log (the server must be
        up)."""
        if settle:
            self._settle()
        path = self.dir / "audit.log"
        with open(path, "rb") as f:
            if since_reset:
                f.seek(self._audit_from)
            lines = f.read().splitlines()
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if (event.get("user") or {}).get("username") in COUNTED:
                out.append(event)
        return out

    def _settle(self) -> None:
        """A request of the test's own, whose audit line is waited for: netctl's requests
        answered before it are in the log too."""
        marker = f"/api/v1/namespaces/default/configmaps/settle-{secrets.token_hex(4)}"
        self._raw("GET", marker)
        path = self.dir / "audit.log"
        _wait(lambda: marker.encode() in path.read_bytes()[self._audit_from:], 10,
              "the audit log to hold a request")

    @property
    def request_counts(self) -> collections.Counter[tuple[str, str]]:
        """Requests netctl made per (verb, resource), as the fake counts them: ``("list",
        "pods")``, ``("patch", "pods/status")``; a watch counted once."""
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for event in self.audit():
            counted_at = "ResponseStarted" if event["verb"] == "watch" else "ResponseComplete"
            if event.get("stage") != counted_at:
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += f"/{ref['subresource']}"
            counts[(event["verb"], resource)] += 1
        return counts

    def count(self, verb: str, resource: str) -> int:
        return self.request_counts[(verb, resource)]

    def reset_counts(self) -> None:
        self._settle()
        self._audit_from = (self.dir / "audit.log").stat().st_size

    def watches(self, resource: str | None = None) -> int:
        """Watches of netctl opened since :meth:`reset_counts` and open now."""
        open_: dict[str, str] = {}
        for event in self.audit():
            if event.get("verb") != "watch":
                continue
            res = (event.get("objectRef") or {}).get("resource", "")
            if event.get("stage") == "ResponseStarted":
                open_[event["auditID"]] = res
            else:
                open_.pop(event["auditID"], None)
        return sum(1 for r in open_.values() if resource is None or r == resource)

    def wait_watches(self, n: int, resource: str | None = None, timeout: float = 10) -> None:
        """Wait until at least ``n`` of netctl's watches are open (the audit log cannot tell
        a closed watch from one still open until it ends)."""
        _wait(lambda: self.watches(resource) >= n, timeout, f"{n} watches open")

    @property
    def server_errors(self) -> builtins.list[str]:
        """Requests of netctl's since :meth:`reset_counts` that the server failed with 500
        (an internal error; a 503 while it starts or stops is its normal answer)."""
        return [f"{e['verb']} {e.get('requestURI')}: {e['responseStatus']['code']}"
                for e in self.audit(settle=self.serving)
                if e.get("stage") == "ResponseComplete"
                and (e.get("responseStatus") or {}).get("code", 0) == 500]

    @property
    def refused(self) -> builtins.list[str]:
        """Requests of netctl's since :meth:`reset_counts` that RBAC (403) or validation
        (422) refused: a verb the ClusterRole lacks, an object the server will not take."""
        return [f"{e['verb']} {e.get('requestURI')}: {e['responseStatus']['code']}"
                for e in self.audit(settle=self.serving)
                if e.get("stage") == "ResponseComplete"
                and (e.get("responseStatus") or {}).get("code", 0) in (403, 422)
                and _received(e) >= self._rbac_since]

    def compact(self) -> None:
        """etcd's history compacted up to now (through its HTTP gateway): a watch resumed
        from an earlier resourceVersion, once the API server's watch cache no longer holds
        it, gets 410 Expired."""
        base = f"http://127.0.0.1:{self.etcd_port}/v3/kv"
        rev = int(_post_json(f"{base}/range", {"key": "AA=="})["header"]["revision"])
        _post_json(f"{base}/compaction", {"revision": rev, "physical": True})

    # -- the manifests -------------------------------------------------------------------

    def _apply_manifests(self) -> None:
        docs: builtins.list[dict[str, Any]] = []
        for crd_file in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
            docs += manifest(crd_file)
        docs += [_crd_manifest(r) for r in _WHEREABOUTS_CRDS]
        docs += manifest(ROOT / "deploy" / "kubernetes" / "rbac.yaml")
        self.apply(docs)

    def apply(self, docs: Iterable[dict[str, Any]]) -> None:
        """Create the objects of a manifest (:func:`manifest`; the kinds of
        ``_MANIFEST_KINDS``), as the admin; a CRD is waited for until it is served."""
        docs = builtins.list(docs)
        for doc in docs:
            prefix, plural, namespaced = _MANIFEST_KINDS[doc["kind"]]
            ns = doc["metadata"].get("namespace", "default") if namespaced else None
            path = f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"
            self.request("POST", path, doc)
        for doc in docs:
            if doc["kind"] == "CustomResourceDefinition":
                self._wait_established(doc)

    def remove(self, docs: Iterable[dict[str, Any]]) -> None:
        """Delete the objects of a manifest that :meth:`apply` created, as the admin, the
        last first; one already gone is no error."""
        for doc in reversed(builtins.list(docs)):
            prefix, plural, namespaced = _MANIFEST_KINDS[doc["kind"]]
            ns = doc["metadata"].get("namespace", "default") if namespaced else None
            path = f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"
            self.request("DELETE", f"{path}/{doc['metadata']['name']}", ok_missing=True)

    def _wait_established(self, doc: dict[str, Any]) -> None:
        name = doc["metadata"]["name"]
        spec = doc["spec"]

        def served() -> bool:
            got = self.request("GET", "/apis/apiextensions.k8s.io/v1/"
                               f"customresourcedefinitions/{name}")
            conds = {c["type"]: c["status"] for c in got.get("status", {}).get(
                "conditions", [])}
            if conds.get("Established") != "True":
                return False
            version = spec["versions"][0]["name"]
            return self._status("GET", f"/apis/{spec['group']}/{version}/"
                                f"{spec['names']['plural']}") == 200
        _wait(served, 30, f"CRD {name} established")

    def _wait_rbac(self) -> None:
        """RBAC is loaded a moment after /readyz: wait until netctl's token may list nodes."""
        def allowed() -> bool:
            return self._raw("GET", "/api/v1/nodes", token=self.sa_token)[0] == 200
        _wait(allowed, 30, "netctl's ServiceAccount to be allowed to list nodes")
        self._rbac_since = datetime.datetime.now(datetime.UTC)


def manifest(path: Path) -> builtins.list[dict[str, Any]]:
    """The objects of a YAML manifest (``deploy/``), empty documents left out."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _crd_manifest(res: Resource) -> dict[str, Any]:
    """A CRD for a kind whose real definition is not the project's (whereabouts'): its
    names and scope, any content (the tests write what whereabouts writes)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": res.qualified},
        "spec": {
            "group": res.group, "scope": "Namespaced" if res.namespaced else "Cluster",
            "names": {"plural": res.plural, "singular": res.kind.lower(), "kind": res.kind,
                      "listKind": res.list_kind},
            "versions": [{"name": res.version, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


def _received(event: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(event["requestReceivedTimestamp"].replace(
        "Z", "+00:00"))


@contextlib.contextmanager
def signals_unblocked() -> Iterator[None]:
    """No signal blocked while a child is spawned (a child inherits the mask, and a caller
    that takes its signals with ``sigwait`` blocks them: the API server would never see
    the SIGTERM that stops it)."""
    old = signal.pthread_sigmask(signal.SIG_SETMASK, set())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _etcd(url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """A GET (or, with ``body``, a JSON POST) to etcd's HTTP endpoint: status and body."""
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=10)
    try:
        if body is None:
            conn.request("GET", parsed.path)
        else:
            conn.request("POST", parsed.path, json.dumps(body).encode(),
                         {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    status, data = _etcd(url, body)
    if status != 200:
        raise RuntimeError(f"etcd {url}: {status} {data[:300]!r}")
    answer: dict[str, Any] = json.loads(data)
    return answer


def _http_ok(url: str) -> bool:
    try:
        return _etcd(url)[0] == 200
    except OSError:
        return False


def _wait(check: Any, timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None,
          log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise RuntimeError(f"waiting for {what}: the process exited {proc.returncode}\n"
                               f"{tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.05)

