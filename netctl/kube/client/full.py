"""The full client: kubernetes-asyncio's configuration and aiohttp's session, for the
kubeconfigs and environments netctl does not read itself.

Most daemons and commands never load this module: :func:`netctl.kube.client.lite.lean_config`
reads an in-cluster service account and the common kubeconfigs (a server, its CA, a token,
a token file or a client certificate) itself, and :class:`~netctl.kube.client.wire.Wire`
carries the calls. What is left comes here, at its full cost (aiohttp, the asyncio bridge,
kubernetes-asyncio's configuration loaders: some 11 MiB of a daemon's memory): an ``exec``
credential plugin, an ``auth-provider``, a username and password, a ``proxy-url``, several
files in ``$KUBECONFIG``, a proxy in the environment, a ``.netrc`` entry for the server.
Even then :class:`~netctl.kube.client.wire.Wire` carries the calls when it can
(:func:`~netctl.kube.client.wire.wire_for`); the session carries them only for a proxy or
``.netrc`` basic auth.

Every function here runs from trio and crosses to asyncio through trio-asyncio.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from netctl.kube.client.api import on_asyncio
from netctl.kube.client.errors import ApiError, KubeSettings, Query, reason_of
from netctl.kube.client.session import client as kclient
from netctl.kube.client.session import config as kconfig

log = logging.getLogger("netctl.kube")

ApiClient = kclient.ApiClient


async def connect(settings: KubeSettings) -> Any:
    """kubernetes-asyncio's client for ``settings`` (in-cluster, else the kubeconfig)."""
    async def load() -> Any:
        if settings.in_cluster:
            conf = kclient.Configuration()
            kconfig.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=conf, try_refresh_token=True)
            return kclient.ApiClient(configuration=conf)
        return await kconfig.new_client_from_config(config_file=settings.kubeconfig,
                                                    persist_config=False)
    try:
        return await on_asyncio(load)
    except (kconfig.ConfigException, OSError, ValueError) as exc:
        raise ApiError(0, f"Kubernetes client configuration: {exc}") from exc


async def _load_credentials(api: Any, settings: KubeSettings) -> None:
    """(On the asyncio side.) Read the token again into the client's configuration: the
    service account's in-cluster, else the kubeconfig's (``token`` or ``tokenFile``).
    A configuration that no longer loads leaves the old one: the 401 is the answer."""
    conf = api.configuration
    try:
        if settings.in_cluster:
            kconfig.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=conf, try_refresh_token=True)
        else:
            await kconfig.load_kube_config(config_file=settings.kubeconfig,
                                           client_configuration=conf, persist_config=False)
    except (kconfig.ConfigException, OSError, ValueError) as exc:
        log.warning("API credentials not reloaded: %s", exc)


async def reload_credentials(api: Any, settings: KubeSettings) -> None:
    """:func:`_load_credentials`, from trio."""
    await on_asyncio(lambda: _load_credentials(api, settings))


async def authorization(api: Any) -> str:
    """The ``Authorization`` value the client sends (an exec plugin's or OIDC token
    refreshed); "" when its credentials are no token."""
    conf = api.configuration

    async def get() -> str:
        return str(await conf.get_api_key_with_prefix("BearerToken") or "")
    return str(await on_asyncio(get))


async def close(api: Any) -> None:
    await on_asyncio(api.close)


async def call(api: Any, settings: KubeSettings, method: str, path: str, query: Query,
               body: bytes | None, content_type: str, accept: str, *, stream: bool,
               timeout: float, reloaded: Callable[[], None]) -> Any:
    """The aiohttp response of one request on the session (from the asyncio side), its
    status checked; a 401 re-reads the credentials (and tells ``reloaded``) and retries
    once. A
    ``stream`` (a watch) has no read timeout here: its reader bounds it."""
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type
    # the client JSON-encodes a body itself, for every JSON content type
    document = None if body is None else msgspec.json.decode(body)
    for attempt in range(2):
        resp = await api.call_api(
            path, method, query_params=query, header_params=headers, body=document,
            auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=None, connect=timeout,
                                                   sock_read=None if stream else timeout))
        if resp.status != 401 or attempt:
            break
        # the token was rotated (bound service-account tokens expire; a kubeconfig's
        # tokenFile is rewritten): read the credentials again, and retry once
        resp.release()
        reloaded()
        await _load_credentials(api, settings)
    if not 200 <= resp.status <= 299:
        data = await resp.read()
        resp.release()
        raise ApiError(resp.status, reason_of(data) or str(resp.reason), data)
    return resp


async def request(api: Any, settings: KubeSettings, method: str, path: str, query: Query,
                  body: bytes | None, content_type: str, accept: str,
                  reloaded: Callable[[], None],
                  not_reachable: Callable[[object], str]) -> bytes:
    """One request on the session; its body (:class:`ApiError` 0 when not reached)."""
    async def go() -> bytes:
        try:
            resp = await call(api, settings, method, path, query, body, content_type, accept,
                              stream=False, timeout=settings.api_timeout, reloaded=reloaded)
            data: bytes = await resp.read()
            resp.release()
            return data
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiError(0, not_reachable(exc or "timeout")) from None
    return bytes(await on_asyncio(go))


async def open_stream(api: Any, settings: KubeSettings, path: str, params: Query,
                      accept: str, reloaded: Callable[[], None],
                      not_reachable: Callable[[object], str]) -> tuple[
        Callable[[], Awaitable[bytes]], Callable[[], Awaitable[None]]]:
    """A watch's stream on the session: what it has received is taken in one trip to the
    asyncio side, however many events it holds."""
    async def open_it() -> Any:
        try:
            return await call(api, settings, "GET", path, params, None, "", accept,
                              stream=True, timeout=settings.watch_timeout + 30,
                              reloaded=reloaded)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiError(0, not_reachable(exc or "timeout")) from None

    resp = await on_asyncio(open_it)

    async def received() -> bytes:
        try:
            data: bytes = await resp.content.readany()
            return data
        except (TimeoutError, aiohttp.ClientError, OSError):
            return b""

    async def receive() -> bytes:
        return bytes(await on_asyncio(received))

    async def close() -> None:
        resp.close()

    return receive, close


def environment_read_once(api: Any) -> None:
    """kubernetes-asyncio's aiohttp session trusts the environment: for every request
    aiohttp then reads ``~/.netrc`` and the proxy variables, each on a thread of its own
    (two thread trips per request: a fifth of a small request's CPU in the daemon).
    Neither changes while netctl runs: the proxy the environment names for the API
    server (``HTTPS_PROXY``, ``NO_PROXY``, …) is put into the client's own proxy setting
    here, once, and the session stops looking. A ``.netrc`` entry for the API server's
    host (basic auth) leaves the session as it was."""
    rest = api.rest_client
    session = rest.pool_manager
    url = URL(str(api.configuration.host))
    netrc_auth = getattr(session, "_get_netrc_auth", None)  # aiohttp's own, as it asks
    if not getattr(session, "_trust_env", False) or url.host is None or netrc_auth is None:
        return  # an aiohttp laid out otherwise: the session is left as it was made
    if netrc_auth(url.host) is not None:
        return
    if not rest.proxy:
        try:
            proxy, auth = get_env_proxy_for_url(url)
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}),
                                      "Proxy-Authorization": auth.encode()}
    session._trust_env = False
