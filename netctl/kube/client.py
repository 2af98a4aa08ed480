"""kubernetes-asyncio's ``client`` and ``config``, loaded without its API and model layer.

netctl uses four modules of kubernetes-asyncio's client (``configuration``,
``api_client``, ``rest``, ``exceptions``) and its ``config`` package (kubeconfig,
in-cluster, exec credential providers, token refresh); see :mod:`netctl.kube.api`. But
the package ``__init__`` of ``kubernetes_asyncio`` imports ``client``, whose
``__init__`` imports every API class and every model: about 850 modules and some 35 MiB
of a daemon's resident memory, for classes netctl never instantiates (its calls keep the
body as bytes).

So :func:`load` imports the few modules netctl needs *without running those package
``__init__`` files*: it puts the packages ``kubernetes_asyncio``,
``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models`` into
``sys.modules`` as modules made from their real specs (the same ``__path__``,
``__file__`` and loader) but not yet executed, so that the submodules load from their
real files. ``kubernetes_asyncio.client`` is given ``ApiClient`` and ``Configuration``,
the two names ``config`` imports from it. Each such package stays complete for any
other caller: a missing attribute imports the submodule of that name, or else runs the
package's own ``__init__`` once (:func:`_complete_on_demand`), so ``client.CoreV1Api``
or ``client.models.V1Pod`` still work, at the full cost, in a process that asks.

When kubernetes-asyncio is already imported (a test or a tool imported it first), its
real modules are used. When the lean load fails (a release whose layout differs), what
it put into ``sys.modules`` is taken out again and the package is imported the ordinary
way: slower and heavier, never broken. :data:`LEAN` says which way was taken.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import threading
import types
from typing import TYPE_CHECKING, Any

log = logging.getLogger("netctl.kube")

PACKAGE = "kubernetes_asyncio"
# the package modules created unexecuted, outermost first
_HOLLOW = (PACKAGE, f"{PACKAGE}.client", f"{PACKAGE}.client.models")
# what netctl uses from the client package, imported from their own files
_CLIENT_MODULES = ("exceptions", "configuration", "rest", "api_client")


def _hollow_package(name: str, search: list[str] | None) -> types.ModuleType:
    """The package ``name`` made from its real spec, its ``__init__`` not run."""
    spec = importlib.machinery.PathFinder.find_spec(name, search)
    if spec is None or spec.submodule_search_locations is None or spec.loader is None:
        raise ImportError(f"{name}: not found as a package")
    module = importlib.util.module_from_spec(spec)
    _complete_on_demand(module, spec)
    return module


def _complete_on_demand(module: types.ModuleType, spec: importlib.machinery.ModuleSpec
                        ) -> None:
    """Give ``module`` a module ``__getattr__`` (PEP 562): a name it lacks is its
    submodule of that name if one exists, else found by running the package's real
    ``__init__`` in it, once."""
    lock = threading.RLock()
    state = {"run": False}

    def __getattr__(attr: str) -> Any:
        if importlib.machinery.PathFinder.find_spec(
                f"{module.__name__}.{attr}", spec.submodule_search_locations) is not None:
            return importlib.import_module(f"{module.__name__}.{attr}")
        with lock:
            if not state["run"]:
                state["run"] = True
                assert spec.loader is not None
                log.debug("%s: its package __init__ run on demand (%s)",
                          module.__name__, attr)
                spec.loader.exec_module(module)
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}"
                                 ) from None

    module.__getattr__ = __getattr__  # type: ignore[method-assign]


def _load_lean() -> tuple[types.ModuleType, types.ModuleType]:
    parent: types.ModuleType | None = None
    for name in _HOLLOW:
        search = None if parent is None else list(parent.__path__)
        module = _hollow_package(name, search)
        sys.modules[name] = module
        if parent is not None:
            setattr(parent, name.rpartition(".")[2], module)
        parent = module
    client = sys.modules[f"{PACKAGE}.client"]
    for sub in _CLIENT_MODULES:
        importlib.import_module(f"{PACKAGE}.client.{sub}")
    # the two names ``config`` imports from the package
    vars(client).update(ApiClient=client.api_client.ApiClient,
                        Configuration=client.configuration.Configuration)
    config = importlib.import_module(f"{PACKAGE}.config")
    return client, config


def _load_full() -> tuple[types.ModuleType, types.ModuleType]:
    return (importlib.import_module(f"{PACKAGE}.client"),
            importlib.import_module(f"{PACKAGE}.config"))


def load() -> tuple[types.ModuleType, types.ModuleType, bool]:
    """kubernetes-asyncio's ``client`` and ``config`` modules, and whether they were
    loaded lean (True) or the ordinary way (False)."""
    if PACKAGE in sys.modules:
        return (*_load_full(), False)
    try:
        return (*_load_lean(), True)
    except Exception as exc:  # any failure: the ordinary import
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        log.debug("kubernetes-asyncio imported in full (the lean load failed: %r)", exc)
        return (*_load_full(), False)


if TYPE_CHECKING:
    from kubernetes_asyncio import client, config
    LEAN: bool
else:
    client, config, LEAN = load()

__all__ = ["LEAN", "client", "config", "load"]
