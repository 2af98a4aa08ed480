"""The configurations netctl does not read itself, read by kubernetes-asyncio's loaders: an
``exec`` credential plugin, an ``auth-provider``, a username and password, several files
in ``$KUBECONFIG``, a ``proxy-url`` other than http (:mod:`netctl.kubeapi.lite` reads the
rest). Only then are the loaders (and aiohttp, some 11 MiB) loaded. They fill a
``Configuration`` (never a client session) from which :class:`LibraryAccess` gives the
endpoint and credentials; the calls go over :class:`~netctl.kubeapi.http.Http` as every
other. The loaders and their refresh hooks are asyncio code, run on the loop trio-asyncio
opened (:func:`netctl.kubeapi.api.with_api`, the daemon's main).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import trio_asyncio

from netctl.kubeapi.errors import ApiError, KubeSettings
from netctl.kubeapi.http import Endpoint, Headers, endpoint_at, proxy_at
from netctl.kubeapi.session import client as kclient
from netctl.kubeapi.session import config as kconfig

log = logging.getLogger("netctl.kube")
T = TypeVar("T")


async def on_asyncio(fn: Callable[[], Awaitable[T]]) -> T:
    """Run an asyncio coroutine function from trio (on the trio-asyncio loop)."""
    result: T = await trio_asyncio.aio_as_trio(fn)()
    return result


async def _load(conf: Any, settings: KubeSettings) -> None:
    """(On the asyncio side.) Fill ``conf``: in-cluster, else from the kubeconfig."""
    if settings.in_cluster:
        kconfig.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=conf, try_refresh_token=True)
    else:
        await kconfig.load_kube_config(config_file=settings.kubeconfig,
                                       client_configuration=conf, persist_config=False)


async def configuration(settings: KubeSettings) -> LibraryAccess:
    """``settings``' configuration as kubernetes-asyncio's loaders read it."""
    conf = kclient.Configuration()
    try:
        await on_asyncio(lambda: _load(conf, settings))
        endpoint = endpoint_of(conf)
    except (kconfig.ConfigException, OSError, ValueError, ssl.SSLError) as exc:
        raise ApiError(0, f"Kubernetes client configuration: {exc}") from exc
    return LibraryAccess(conf, settings, endpoint, str(conf.host))


def endpoint_of(conf: Any) -> Endpoint:
    """Where ``conf`` points, with its TLS and proxy settings."""
    url = urlsplit(str(conf.host))
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"server {conf.host!r}: not an http or https URL")
    tls = None
    if url.scheme == "https":
        tls = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
        if conf.cert_file:
            tls.load_cert_chain(conf.cert_file, keyfile=conf.key_file or None)
        if not conf.verify_ssl:
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        if getattr(conf, "disable_strict_ssl_verification", False):
            tls.verify_flags &= ~ssl.VERIFY_X509_STRICT
    proxy = proxy_at(conf.proxy, dict(conf.proxy_headers or {})) if conf.proxy else None
    return endpoint_at(url, tls, getattr(conf, "tls_server_name", None), proxy)


@dataclass
class LibraryAccess:
    """An :class:`~netctl.kubeapi.api.Access` on a kubernetes-asyncio
    ``Configuration``: its token refreshed by its own hooks (an exec plugin's, OIDC's)."""

    conf: Any
    settings: KubeSettings
    endpoint: Endpoint
    host: str
    loader: str = "kubernetes-asyncio"

    async def authorization(self) -> str:
        conf = self.conf

        async def get() -> str:
            return str(await conf.get_api_key_with_prefix("BearerToken") or "")
        return await on_asyncio(get)

    async def headers(self) -> Headers:
        token = await self.authorization()
        if token:
            return {"Authorization": token}
        if not (self.conf.username or self.conf.password):
            return {}
        return {"Authorization": self.conf.get_basic_auth_token()}  # a username, a password

    async def reload(self) -> None:
        """Read the configuration again into it (a rotated token); one that no longer
        loads leaves the old one: the 401 is the answer."""
        try:
            await on_asyncio(lambda: _load(self.conf, self.settings))
        except (kconfig.ConfigException, OSError, ValueError) as exc:
            log.warning("API credentials not reloaded: %s", exc)
