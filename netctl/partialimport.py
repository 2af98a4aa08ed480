"""Packages imported without their ``__init__``: a few of their modules for a fraction of
the memory.

Some libraries import everything in their package ``__init__`` (kubernetes-asyncio's
``client`` every API class and model, some 35 MiB; pyroute2 every socket family, some 4 MiB)
where netctl uses a handful of their modules (:mod:`netctl.kubeapi.session`,
:mod:`netctl.cni.netlink`).

:func:`unexecuted` puts such a package into ``sys.modules`` as a module made from its real
spec (the same ``__path__``, ``__file__`` and loader) whose ``__init__`` has not run, so
that ``import package.submodule`` loads the submodule from its real file and nothing
else. The package stays whole for any other caller: a name it lacks is its submodule of
that name if there is one, else found by running the package's own ``__init__`` in it
then, once (a module ``__getattr__``, PEP 562). So ``from pyroute2 import NDB`` still
works, at the full cost, in a process that asks for it.

The caller imports what it needs, and on any failure (a release laid out otherwise)
calls :func:`forget` and imports the package the ordinary way: heavier, never broken.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("netctl")


def unexecuted(*names: str) -> bool:
    """Put the packages ``names`` (each the parent of the next, outermost first) into
    ``sys.modules`` unexecuted; False, and nothing done, when the first is imported
    already (then its real modules serve). ImportError when one is not a package."""
    if names[0] in sys.modules:
        return False
    parent: types.ModuleType | None = None
    for name in names:
        search = None if parent is None else list(parent.__path__)
        spec = importlib.machinery.PathFinder.find_spec(name, search)
        if spec is None or spec.submodule_search_locations is None or spec.loader is None:
            forget(names[0])
            raise ImportError(f"{name}: not found as a package", name=name)
        module = importlib.util.module_from_spec(spec)
        _complete_on_demand(module, spec)
        sys.modules[name] = module
        if parent is not None:
            setattr(parent, name.rpartition(".")[2], module)
        parent = module
    return True


def import_partly(names: tuple[str, ...], load: Callable[[], T]) -> T | None:
    """:func:`unexecuted` the packages ``names``, then ``load()`` (the imports a caller needs
    from them) and its result; None when the first package was imported already, or when
    anything failed — then the packages are forgotten, for the ordinary import."""
    try:
        if not unexecuted(*names):
            return None
        return load()
    except Exception as exc:  # any failure: the caller imports the ordinary way
        forget(names[0])
        log.debug("%s imported in full (the partial import failed: %r)", names[0], exc)
        return None


def forget(package: str) -> None:
    """Take ``package`` and every module under it out of ``sys.modules``."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


def _complete_on_demand(module: types.ModuleType, spec: importlib.machinery.ModuleSpec
                        ) -> None:
    """Give ``module`` the module ``__getattr__`` described above."""
    lock = threading.RLock()
    ran = False

    def __getattr__(attr: str) -> Any:
        nonlocal ran
        if importlib.machinery.PathFinder.find_spec(
                f"{module.__name__}.{attr}", spec.submodule_search_locations) is not None:
            return importlib.import_module(f"{module.__name__}.{attr}")
        with lock:
            if not ran:
                ran = True
                assert spec.loader is not None
                log.debug("%s: its package __init__ run on demand (for %s)",
                          module.__name__, attr)
                spec.loader.exec_module(module)
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}"
                                 ) from None

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
