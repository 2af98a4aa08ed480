"""The API server's address and credentials, read by netctl itself: kubernetes-asyncio is
not loaded for them (docs/kubernetes.md, "How the daemon talks to the API server").

:func:`netctl_access` reads in-cluster (the service account's token and CA, the token read
again once a minute and after a 401) and a kubeconfig (``--kubeconfig``, else a single
``$KUBECONFIG`` file, else ``~/.kube/config``: its current context's cluster — ``server``,
its CA, ``insecure-skip-tls-verify``, ``tls-server-name``, an http ``proxy-url`` — and user
— a token, a token file, a client certificate); paths relative to the kubeconfig's
directory, as kubectl reads them. A ``~/.netrc`` entry gives basic auth where the user has
no token. Anything else is None: the caller loads it with :mod:`netctl.kubeapi.full`.
"""

from __future__ import annotations

import base64
import logging
import netrc
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from netctl.kubeapi.errors import KubeSettings
from netctl.kubeapi.http import Endpoint, Headers, endpoint_at, proxy_at

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD = 60.0  # seconds: a token file is read again at most this old

log = logging.getLogger("netctl.kube")


@dataclass
class Credentials:
    """The bearer token a request carries (none: client certificates, or nothing), and
    how to read it again: ``reread`` returns the current token (a token file, or the
    kubeconfig), asked when the server answers 401 and, for a token file, once the token
    read is :data:`TOKEN_REREAD` seconds old."""

    token: str = ""
    reread: Callable[[], str] | None = None
    periodic: bool = False  # a file rewritten as the token rotates: read it again by age
    read_at: float = field(default_factory=time.monotonic)

    @property
    def authorization(self) -> str:
        return f"Bearer {self.token}" if self.token else ""

    def header(self) -> dict[str, str]:
        """The Authorization header (the token read again first when it is old)."""
        if self.periodic and time.monotonic() - self.read_at > TOKEN_REREAD:
            self.reload()
        return {"Authorization": self.authorization} if self.token else {}

    def reload(self) -> None:
        """Read the token again; one that cannot be read leaves the old (the server's 401
        is the answer then)."""
        self.read_at = time.monotonic()
        if self.reread is None:
            return
        try:
            self.token = self.reread()
        except (OSError, ValueError) as exc:
            log.warning("API credentials not reloaded: %s", exc)


@dataclass
class NetctlAccess:
    """Where the API server is and who we are to it, read without kubernetes-asyncio
    (an :class:`~netctl.kubeapi.api.Access`)."""

    endpoint: Endpoint
    credentials: Credentials
    host: str  # the server's URL, for messages
    basic: str = ""  # "Basic …" from ~/.netrc, sent when there is no token
    loader: str = "netctl"

    async def headers(self) -> Headers:
        sent = self.credentials.header()
        if not sent and self.basic:
            return {"Authorization": self.basic}
        return sent

    async def authorization(self) -> str:
        return self.credentials.authorization

    async def reload(self) -> None:
        self.credentials.reload()


def netctl_access(settings: KubeSettings) -> NetctlAccess | None:
    """The server and credentials ``settings`` name, when this module reads them whole;
    None: kubernetes-asyncio's loaders' (see the module's docstring)."""
    if settings.in_cluster:
        return in_cluster()
    path = _kubeconfig_path(settings.kubeconfig)
    if path is None:
        return None
    found = _read_kubeconfig(path)
    if found is None:
        return None
    cluster, user = found
    try:
        return _config(cluster, user, path)
    except (OSError, ValueError, ssl.SSLError):
        return None  # kubernetes-asyncio's loader says what is wrong with it


def in_cluster(account: Path = SERVICE_ACCOUNT) -> NetctlAccess | None:
    """The in-cluster configuration: the server the pod's environment names, the service
    account's CA and token (``account``); None when any is missing (the loader says
    which)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    token_file, ca = account / "token", account / "ca.crt"
    if not host or not port.isdigit():
        return None
    try:
        tls = ssl.create_default_context(cafile=str(ca))
        credentials = Credentials(_read_token(token_file),
                                  lambda: _read_token(token_file), periodic=True)
    except (OSError, ValueError, ssl.SSLError):
        return None
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return NetctlAccess(endpoint_at(urlsplit(server), tls), credentials, server,
                      _netrc_basic(host))


def _read_token(path: Path) -> str:
    return path.read_text().strip()


def _netrc_basic(host: str) -> str:
    """``Basic …`` from the ``~/.netrc`` (or ``$NETRC``) entry for ``host``; "" without
    one (or an unreadable file: said in the log)."""
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    if not os.path.exists(path):
        return ""
    try:
        found = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError) as exc:
        log.warning("%s not read: %s", path, exc)
        return ""
    if found is None:
        return ""
    login, _, password = found
    return "Basic " + base64.b64encode(f"{login}:{password or ''}".encode()).decode()


def _read_kubeconfig(path: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    try:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(path.read_text(), Loader=loader)
    except (OSError, ValueError, ImportError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    return _current(doc)


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
    if cluster is None:
        return None
    if set(user) - {"token", "tokenFile", "client-certificate", "client-certificate-data",
                    "client-key", "client-key-data"}:
        return None  # exec, auth-provider, username/password, impersonation, …
    return cluster, user


def _config(cluster: dict[str, Any], user: dict[str, Any], path: Path) -> NetctlAccess | None:
    base = path.parent
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
    proxy = str(cluster.get("proxy-url") or "")
    if proxy and not proxy.startswith("http://"):
        return None  # socks5, https: kubernetes-asyncio's loader says what it makes of it
    endpoint = endpoint_at(url, tls, str(cluster.get("tls-server-name") or "") or None,
                           proxy_at(proxy) if proxy else None)
    return NetctlAccess(endpoint, Credentials(_token_of(user, base), lambda: _reread(path),
                                            periodic=bool(user.get("tokenFile"))), server,
                      _netrc_basic(url.hostname))


def _token_of(user: dict[str, Any], base: Path) -> str:
    token = str(user.get("token") or "")
    if not token and user.get("tokenFile"):
        token = _read_token(base / str(user["tokenFile"]))
    return token


def _reread(path: Path) -> str:
    """The token of the kubeconfig at ``path`` as it is now (its user may have a new
    token, or a token file rewritten)."""
    found = _read_kubeconfig(path)
    if found is None:
        raise ValueError(f"{path} no longer names a server and a token netctl reads")
    return _token_of(found[1], path.parent)


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
