"""kubernetes-asyncio's ``client`` and ``config``, loaded without its API classes and models.

netctl uses four modules of kubernetes-asyncio's client (``configuration``,
``api_client``, ``rest``, ``exceptions``) and its ``config`` package (kubeconfig,
in-cluster, exec credential providers, token refresh); see :mod:`netctl.kubeapi.api`. But
the package ``__init__`` of ``kubernetes_asyncio`` imports ``client``, whose
``__init__`` imports every API class and every model: about 850 modules and some 35 MiB
of a daemon's resident memory, for classes netctl never instantiates (its calls keep the
body as bytes).

So the packages ``kubernetes_asyncio``, ``kubernetes_asyncio.client`` and
``kubernetes_asyncio.client.models`` are imported without their ``__init__``
(:mod:`netctl.partialimport`: in ``sys.modules``, whole again for any caller that asks for
more), the four client modules imported from their own files, ``ApiClient`` and
``Configuration`` (the names ``config`` imports from the client package) set on it,
then ``config`` imported as it is. ``api_client`` imports the models package but only
looks into it to build models, which netctl's calls never ask for.

When kubernetes-asyncio is already imported (a test or a tool imported it first), its
real modules serve. When the partial import fails (a release laid out otherwise), the package
is imported the ordinary way: heavier, never broken. :data:`PARTIAL` says which way was
taken.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING

from netctl.partialimport import import_partly

PACKAGE = "kubernetes_asyncio"
_UNEXECUTED = (PACKAGE, f"{PACKAGE}.client", f"{PACKAGE}.client.models")
# what netctl uses from the client package, imported from their own files
_CLIENT_MODULES = ("exceptions", "configuration", "rest", "api_client")


def _load_partly() -> tuple[types.ModuleType, types.ModuleType]:
    client = importlib.import_module(f"{PACKAGE}.client")
    for sub in _CLIENT_MODULES:
        importlib.import_module(f"{PACKAGE}.client.{sub}")
    vars(client).update(ApiClient=client.api_client.ApiClient,
                        Configuration=client.configuration.Configuration)
    return client, importlib.import_module(f"{PACKAGE}.config")


def load() -> tuple[types.ModuleType, types.ModuleType, bool]:
    """kubernetes-asyncio's ``client`` and ``config`` modules, and whether they were
    imported partly (True) or the ordinary way (False)."""
    loaded = import_partly(_UNEXECUTED, _load_partly)
    if loaded is not None:
        return (*loaded, True)
    return (importlib.import_module(f"{PACKAGE}.client"),
            importlib.import_module(f"{PACKAGE}.config"), False)


if TYPE_CHECKING:
    from kubernetes_asyncio import client, config
    PARTIAL: bool
else:
    client, config, PARTIAL = load()

__all__ = ["PARTIAL", "client", "config", "load"]
