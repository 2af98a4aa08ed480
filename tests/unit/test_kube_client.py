"""We test how netctl loads kubernetes-asyncio for its configuration loaders
(:mod:`netctl.kubeapi.session`, :mod:`netctl.kubeapi.full`: the kubeconfigs netctl
does not read itself), each time in a fresh interpreter as a daemon starts: partly
(without the API classes and the models), and the client so loaded lists, gets and is
refused against the fake API server over HTTP from a kubeconfig, the models still there
for a caller that asks for them; the real modules when kubernetes-asyncio was imported
first; and the ordinary import when the partial import fails, here on a copy of the package
laid out differently (its ``client/api_client.py`` renamed), as a future release might
be."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from netctl_kit.kubefake import FakeKube, pod

REPO = Path(__file__).resolve().parents[2]

# imports netctl's client first, then asks the fake (kubeconfig: argv[1]) through it
SCRIPT = """
import json, sys
{first}
import netctl.kubeapi.api
from netctl.kubeapi import full, session as partly
import trio, trio_asyncio
from netctl.kubeapi.api import Api, KubeSettings

def kube_modules():
    return sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio"))

before = kube_modules()
out = {{"partial": partly.PARTIAL, "modules": before}}

async def main():
    async with trio_asyncio.open_loop():
        settings = KubeSettings(kubeconfig=sys.argv[1])
        api = Api(await full.configuration(settings), settings)  # the loaders', as for OIDC
        try:
            on_n1 = [("fieldSelector", "spec.nodeName=n1")]
            pods = json.loads(await api.list("/api/v1/pods", on_n1))
            out["listed"] = [p["metadata"]["name"] for p in pods["items"]]
            got = json.loads(await api.get("/api/v1/namespaces/default/pods/a"))
            out["got"] = got["metadata"]["name"]
            out["missing"] = await api.get("/api/v1/namespaces/default/pods/nope")
            out["after_calls"] = kube_modules() == before
            # the whole package for whoever asks: API classes and models, on demand
            from kubernetes_asyncio import client
            async def read():
                async with client.ApiClient(configuration=api.access.conf) as c:
                    return await client.CoreV1Api(c).read_namespaced_pod("b", "default")
            found = await trio_asyncio.aio_as_trio(read)()
            out["model"] = [type(found).__name__, found.spec.node_name]
        finally:
            await api.close()

trio.run(main)
print(json.dumps(out))
"""


def run_script(kube: FakeKube, tmp_path: Path, first: str = "",
               pythonpath: Path | None = None) -> dict[str, Any]:
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(first=first), str(config)],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def serving(kube: FakeKube) -> FakeKube:
    kube.create("pods", pod("a", node="n1"))
    kube.create("pods", pod("b", node="n2"))
    return kube


def test_lean_load_imports_no_api_class_and_no_model_and_works(tmp_path: Path) -> None:
    with FakeKube(token="s3cret") as kube:
        out = run_script(serving(kube), tmp_path)
        assert out["partial"] is True
        assert out["modules"] == [
            "kubernetes_asyncio", "kubernetes_asyncio.client",
            "kubernetes_asyncio.client.api_client", "kubernetes_asyncio.client.configuration",
            "kubernetes_asyncio.client.exceptions", "kubernetes_asyncio.client.models",
            "kubernetes_asyncio.client.rest", "kubernetes_asyncio.config",
            "kubernetes_asyncio.config.config_exception",
            "kubernetes_asyncio.config.dateutil", "kubernetes_asyncio.config.exec_provider",
            "kubernetes_asyncio.config.google_auth",
            "kubernetes_asyncio.config.incluster_config",
            "kubernetes_asyncio.config.kube_config", "kubernetes_asyncio.config.openid"]
        assert (out["listed"], out["got"], out["missing"]) == (["a"], "a", None)
        assert out["after_calls"] is True  # the calls loaded no model either
        assert out["model"] == ["V1Pod", "n2"]
        assert kube.count("list", "pods") == 1
        assert kube.count("get", "pods") == 3


@pytest.mark.slow  # the full import: some seconds
def test_kubernetes_asyncio_imported_first_is_used_as_it_is(tmp_path: Path) -> None:
    with FakeKube(token="s3cret") as kube:
        out = run_script(serving(kube), tmp_path, first="import kubernetes_asyncio")
        assert out["partial"] is False
        assert "kubernetes_asyncio.client.models.v1_pod" in out["modules"]
        assert (out["listed"], out["got"], out["missing"]) == (["a"], "a", None)
        assert out["model"] == ["V1Pod", "n2"]


def relaid_copy(into: Path) -> Path:
    """kubernetes-asyncio with ``client/api_client.py`` renamed ``client/_api_client.py``
    and the modules that import it changed to match; the rest symlinked."""
    spec = importlib.util.find_spec("kubernetes_asyncio")
    assert spec is not None and spec.submodule_search_locations is not None
    real = Path(spec.submodule_search_locations[0])
    for path in real.rglob("*"):
        if "__pycache__" in path.parts or path.is_dir():
            continue
        rel = path.relative_to(real)
        if rel.parent.name == "client" and rel.stem == "api_client":
            rel = rel.with_name("_" + rel.name)
        target = into / "kubernetes_asyncio" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text() if path.suffix == ".py" else ""
        if "kubernetes_asyncio.client.api_client" in text:
            target.write_text(text.replace("kubernetes_asyncio.client.api_client",
                                           "kubernetes_asyncio.client._api_client"))
        else:
            target.symlink_to(path)
    return into


@pytest.mark.slow  # the full import: some seconds
def test_a_package_laid_out_otherwise_is_imported_the_ordinary_way(tmp_path: Path) -> None:
    site = relaid_copy(tmp_path / "site")
    with FakeKube(token="s3cret") as kube:
        out = run_script(serving(kube), tmp_path, pythonpath=site)
        assert out["partial"] is False
        assert "kubernetes_asyncio.client._api_client" in out["modules"]
        assert "kubernetes_asyncio.client.models.v1_pod" in out["modules"]
        assert (out["listed"], out["got"], out["missing"]) == (["a"], "a", None)
        assert out["model"] == ["V1Pod", "n2"]
