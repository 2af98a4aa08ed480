"""kubernetes-asyncio's ``client`` and ``config``, loaded without its API classes and models.

The client package's ``__init__`` imports every API class and model (about 850 modules,
some 35 MiB) that netctl never instantiates. So the package is imported partly
(:mod:`netctl.partialimport`): the four client modules netctl uses
(:data:`_CLIENT_MODULES`) from their own files, ``ApiClient`` and ``Configuration`` set on
the client package, then ``config`` as it is. :data:`PARTIAL` says whether that way was
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
