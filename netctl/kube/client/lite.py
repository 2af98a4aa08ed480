"""The API server for a command's one-shot questions, without kubernetes-asyncio.

``kubectl netctl`` asks the API server two lists (the daemons' pods, the blocks) and sends
the kubeconfig's token to the daemons. Loading kubernetes-asyncio and aiohttp for that
costs more than everything else the command does. :func:`lite` reads the kubeconfig
itself and talks HTTP/1.1 from trio (:class:`~netctl.kube.client.wire.Wire`, the daemon's
own transport) when the kubeconfig is one this module reads whole:

- the file: ``--kubeconfig``, else ``$KUBECONFIG`` (one file), else ``~/.kube/config``;
  its ``current-context``, that context's cluster and user;
- the cluster: ``server`` (http or https), ``certificate-authority`` or
  ``certificate-authority-data``, ``insecure-skip-tls-verify``, ``tls-server-name``;
- the user: ``token`` or ``tokenFile``, ``client-certificate(-data)`` and
  ``client-key(-data)``.

Anything else — an ``exec`` credential plugin, an ``auth-provider``, a username and
password, a ``proxy-url``, several files in ``$KUBECONFIG``, a proxy in the environment —
is None: the caller uses the full client (:class:`~netctl.kube.client.api.Api`), which
reads all of it. Paths in the kubeconfig are relative to its directory, as kubectl reads
them.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from netctl.kube.client.errors import JSON, ApiError, KubeSettings, Query, reason_of
from netctl.kube.client.wire import Endpoint, Wire, WireError

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                   "all_proxy")


@dataclass
class LiteApi:
    """The calls ``kubectl netctl`` makes, on a :class:`Wire`."""

    wire: Wire
    authorization: str  # "Bearer …", or "" (client certificates)
    timeout: float
    host: str

    async def list(self, path: str, query: Query, accept: str = JSON) -> bytes:
        return await self.request("GET", path, query, accept)

    async def get(self, path: str) -> bytes | None:
        try:
            return await self.request("GET", path, [])
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def request(self, method: str, path: str, query: Query,
                      accept: str = JSON) -> bytes:
        target = f"{path}?{urlencode(query)}" if query else path
        try:
            answer = await self.wire.request(method, target, {"Accept": accept}, None,
                                             self.timeout)
        except WireError as exc:
            raise ApiError(0, f"API server {self.host} not reachable: {exc}") from None
        if not 200 <= answer.status <= 299:
            raise ApiError(answer.status, reason_of(answer.body) or answer.reason,
                           answer.body)
        return answer.body

    async def close(self) -> None:
        await self.wire.aclose()


def lite(settings: KubeSettings) -> LiteApi | None:
    """A :class:`LiteApi` for ``settings``' kubeconfig, or None when it needs the full
    client (see the module's docstring)."""
    if settings.in_cluster or any(os.environ.get(v) for v in PROXY_VARIABLES):
        return None
    path = _kubeconfig_path(settings.kubeconfig)
    if path is None:
        return None
    try:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(path.read_text(), Loader=loader)
    except (OSError, ValueError, ImportError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    found = _current(doc)
    if found is None:
        return None
    cluster, user = found
    try:
        return _api(cluster, user, path.parent, settings.api_timeout)
    except (OSError, ValueError, ssl.SSLError):
        return None  # the full client says what is wrong with it


def _kubeconfig_path(given: str | None) -> Path | None:
    if given:
        return Path(given).expanduser()
    env = os.environ.get("KUBECONFIG", "")
    if env:
        files = [f for f in env.split(os.pathsep) if f]
        return Path(files[0]).expanduser() if len(files) == 1 else None
    return Path("~/.kube/config").expanduser()


def _named(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    for entry in doc.get(kind) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(kind[:-1])
            return body if isinstance(body, dict) else None
    return None


def _current(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    context = _named(doc, "contexts", str(doc.get("current-context") or ""))
    if context is None:
        return None
    cluster = _named(doc, "clusters", str(context.get("cluster") or ""))
    user = _named(doc, "users", str(context.get("user") or "")) or {}
    if cluster is None or cluster.get("proxy-url"):
        return None
    if set(user) - {"token", "tokenFile", "client-certificate", "client-certificate-data",
                    "client-key", "client-key-data"}:
        return None  # exec, auth-provider, username/password, impersonation, …
    return cluster, user


def _api(cluster: dict[str, Any], user: dict[str, Any], base: Path,
         timeout: float) -> LiteApi | None:
    server = str(cluster.get("server") or "")
    url = urlsplit(server)
    if url.scheme not in ("http", "https") or not url.hostname:
        return None
    tls = None
    if url.scheme == "https":
        tls = ssl.create_default_context()
        if cluster.get("certificate-authority-data"):
            tls.load_verify_locations(cadata=base64.b64decode(
                cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            tls.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
        if cluster.get("insecure-skip-tls-verify"):
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        _client_certificate(tls, user, base)
    token = str(user.get("token") or "")
    if not token and user.get("tokenFile"):
        token = (base / str(user["tokenFile"])).read_text().strip()
    auth = f"Bearer {token}" if token else ""
    endpoint = Endpoint(url.hostname, url.port or (443 if url.scheme == "https" else 80),
                        url.path.rstrip("/"), url.netloc.rpartition("@")[2], tls,
                        str(cluster.get("tls-server-name") or url.hostname))
    wire = Wire(endpoint, lambda: {"Authorization": auth} if auth else {})
    return LiteApi(wire, auth, timeout, server)


def _client_certificate(tls: ssl.SSLContext, user: dict[str, Any], base: Path) -> None:
    """The user's client certificate and key, from files or ``-data`` (written to a
    private temporary directory for the TLS context to load, then removed)."""
    cert, key = user.get("client-certificate"), user.get("client-key")
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if not (cert or cert_data):
        return
    with tempfile.TemporaryDirectory(prefix="netctl-kubeconfig-") as tmp:
        def path_of(name: str, file: Any, data: Any) -> str:
            if file:
                return str(base / str(file))
            out = Path(tmp) / name
            out.write_bytes(base64.b64decode(data))
            return str(out)
        tls.load_cert_chain(path_of("cert", cert, cert_data),
                            path_of("key", key, key_data) if (key or key_data) else None)
