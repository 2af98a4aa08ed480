"""We test packages imported without their ``__init__`` (:mod:`netctl.partialimport`), each time
in a fresh interpreter: pyroute2 as the daemon loads it (:mod:`netctl.cni.netlink`)
without IPDB, NDB and the other socket families, its IPRoute answering a real dump of
the host's links, and the whole package still there for a caller that asks (``from
pyroute2 import NDB``); the real package when it was imported first; and a name that
is neither a submodule nor in the package's ``__init__`` refused as for any module; and a
daemon's modules without pyroute2, the Kubernetes client library and prometheus-client's
exposition module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
{first}
from netctl.cni import netlink
out = {{"partial": netlink.PARTIAL,
        "loaded": sorted({{m.split(".")[1] for m in sys.modules if m.startswith("pyroute2.")}})}}
with netlink.IPRoute() as ipr:
    out["links"] = sorted(link.get_attr("IFLA_IFNAME") for link in ipr.get_links())
try:
    import pyroute2
    pyroute2.NoSuchThing
except AttributeError as exc:
    out["refused"] = str(exc)
from pyroute2 import NDB, NetNS
out["whole"] = [NDB.__module__, NetNS.__name__]
print(json.dumps(out))
"""


def run_script(first: str = "") -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(first=first)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_pyroute2_loaded_without_its_init_and_whole_on_demand() -> None:
    out = run_script()
    assert out["partial"] is True
    # what IPRoute needs, and none of the families netctl does not use
    assert {"iproute", "netlink"} <= set(out["loaded"])
    assert not {"ndb", "ipdb", "ipset", "ipvs", "iwutil", "wiset", "plan9"} & set(out["loaded"])
    assert "lo" in out["links"]
    assert out["refused"] == "module 'pyroute2' has no attribute 'NoSuchThing'"
    assert out["whole"] == ["pyroute2.ndb.main", "NetNS"]


def test_pyroute2_imported_first_is_used_as_it_is() -> None:
    out = run_script(first="import pyroute2")
    assert out["partial"] is False
    assert "ndb" in out["loaded"]
    assert "lo" in out["links"]
    assert out["refused"] == "module 'pyroute2' has no attribute 'NoSuchThing'"


DAEMON = """
import json, sys
import netctl.daemon.run, netctl.kube.mode
from netctl import metrics
heavy = ("pyroute2", "aiohttp", "kubernetes_asyncio", "prometheus_client.exposition",
         "wsgiref", "http.server")
out = {"partial": metrics.PARTIAL, "loaded": sorted(m for m in heavy if m in sys.modules)}
from prometheus_client import generate_latest  # the whole package, for whoever asks
out["whole"] = generate_latest.__module__
print(json.dumps(out))
"""


def test_a_daemon_loads_none_of_what_it_does_not_use() -> None:
    """The daemon's modules (both modes): no pyroute2 (the reconciler's netlink calls are
    netctl's own), no Kubernetes client library (loaded only for the configurations netctl
    does not read), prometheus-client without its exposition module (and its HTTP server),
    which is still there for a caller that asks."""
    done = subprocess.run([sys.executable, "-c", DAEMON], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"partial": True, "loaded": [], "whole": "prometheus_client.exposition"}
