"""We test these aspects of Kubernetes mode's networks (:class:`NadResolver`):

- ``ns/name`` is that NAD and nothing else; a missing one is refused (NoNetworkFound);
- a bare name (``clusterNetwork``, ``defaultNetworks``) is the NAD in the namespace
  asked, else the CNI config of that network name in the conf dir (keyed by its path);
- an absolute path is that file; a directory is refused;
- a NAD with an empty ``spec.config`` is the conf dir's config of the NAD's name, still
  keyed ``ns/name``; a ``spec.config`` without ``name`` gets the NAD's; a broken one is
  refused naming the NAD (InvalidNetworkConfig);
- a NAD's config is parsed once per resourceVersion; a cache that is not ready yet
  (code 11) is passed on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netctl.errors import INVALID_CONFIG, TRY_AGAIN_LATER, CNIError, Refusal
from netctl.kube.nads import MULTUS_CONF_DIR, NadResolver
from netctl.kubeapi.objects import Meta, Nad, NadSpec, key


def config(name: str | None, ptype: str = "bridge") -> str:
    obj: dict[str, Any] = {"cniVersion": "1.0.0", "plugins": [{"type": ptype}]}
    if name is not None:
        obj["name"] = name
    return json.dumps(obj)


class Nads:
    """A NAD cache in a dict, as the kube client keeps one (not ready: code 11)."""

    def __init__(self, *nads: Nad) -> None:
        self.nads = {key(nad): nad for nad in nads}
        self.ready = True

    def get(self, namespace: str, name: str) -> Nad | None:
        if not self.ready:
            raise CNIError(TRY_AGAIN_LATER, "the NAD cache is not synced yet")
        return self.nads.get(f"{namespace}/{name}")

    def put(self, nad: Nad) -> None:
        self.nads[key(nad)] = nad


def nad(ref: str, conf: str | None = None, rv: str = "1") -> Nad:
    ns, name = ref.split("/")
    return Nad(metadata=Meta(namespace=ns, name=name, resourceVersion=rv),
               spec=NadSpec(config=config(name) if conf is None else conf))


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    d = tmp_path / "multus.d"
    d.mkdir()
    (d / "10-node.conflist").write_text(config("node-net", "ptp"))
    (d / "20-broken.conf").write_text("{not json")
    (d / "30-sriov.conf").write_text(json.dumps({"cniVersion": "0.3.1", "name": "sriov",
                                                 "type": "sriov"}))
    return d


def test_default_conf_dir_is_multus() -> None:
    assert NadResolver(Nads()).conf_dir == MULTUS_CONF_DIR == "/etc/cni/multus/net.d"


def test_ns_name_is_that_nad_only(conf_dir: Path) -> None:
    nets = NadResolver(Nads(nad("shop/storage"), nad("default/other")), str(conf_dir))
    net = nets.resolve("shop/storage", "elsewhere")
    assert (net.key, net.chain.name, net.chain.types) == ("shop/storage", "storage", ["bridge"])
    for ref in ("shop/other", "shop/node-net"):
        with pytest.raises(Refusal) as info:
            nets.resolve(ref, "shop")
        assert info.value.code == INVALID_CONFIG and info.value.reason == "NoNetworkFound"
        assert info.value.msg == f"no NetworkAttachmentDefinition {ref}"


def test_bare_name_nad_then_conf_dir(conf_dir: Path) -> None:
    nets = NadResolver(Nads(nad("kube-system/cluster"), nad("kube-system/node-net")),
                       str(conf_dir))
    assert nets.resolve("cluster", "kube-system").key == "kube-system/cluster"
    assert nets.resolve("node-net", "kube-system").key == "kube-system/node-net"
    net = nets.resolve("node-net", "nets")
    assert (net.key, net.chain.types) == (str(conf_dir / "10-node.conflist"), ["ptp"])
    assert nets.resolve("sriov", "nets").chain.cni_version == "0.3.1"
    with pytest.raises(Refusal) as info:
        nets.resolve("missing", "nets")
    assert info.value.reason == "NoNetworkFound"
    assert info.value.msg.startswith(
        f"network 'missing' not found: no NetworkAttachmentDefinition nets/missing and no "
        f"CNI config named 'missing' in {conf_dir}; unreadable: {conf_dir}/20-broken.conf "
        "is not valid JSON")


def test_no_conf_dir(tmp_path: Path) -> None:
    nets = NadResolver(Nads(), str(tmp_path / "absent"))
    with pytest.raises(Refusal) as info:
        nets.resolve("x", "kube-system")
    assert info.value.msg.endswith(f"no CNI config named 'x' in {tmp_path}/absent (there is "
                                   f"no {tmp_path}/absent)")


def test_absolute_path(conf_dir: Path) -> None:
    nets = NadResolver(Nads(), str(conf_dir))
    path = str(conf_dir / "10-node.conflist")
    assert nets.resolve(path, "any").key == path
    with pytest.raises(CNIError, match="not a regular file") as info:
        nets.resolve(str(conf_dir), "any")
    assert info.value.code == INVALID_CONFIG


def test_empty_spec_config_is_the_conf_dirs(conf_dir: Path) -> None:
    nads = Nads(nad("shop/node-net", ""), nad("shop/nothing", ""))
    nets = NadResolver(nads, str(conf_dir))
    net = nets.resolve("shop/node-net", "shop")
    assert (net.key, net.chain.name, net.chain.types) == ("shop/node-net", "node-net", ["ptp"])
    with pytest.raises(Refusal) as info:
        nets.resolve("shop/nothing", "shop")
    assert info.value.reason == "InvalidNetworkConfig"
    assert info.value.msg.startswith(
        f"NetworkAttachmentDefinition shop/nothing has an empty spec.config and {conf_dir} "
        "has no CNI config named 'nothing'; unreadable: ")
    # the file is read again at each lookup: an edit shows at once
    (conf_dir / "10-node.conflist").write_text(config("node-net", "macvlan"))
    assert nets.resolve("shop/node-net", "shop").chain.types == ["macvlan"]


def test_spec_config_without_name_gets_the_nads() -> None:
    nets = NadResolver(Nads(nad("shop/storage", config(None)), nad("shop/b", config(""))))
    assert nets.resolve("shop/storage", "shop").chain.name == "storage"
    assert nets.resolve("shop/b", "shop").chain.name == "b"


@pytest.mark.parametrize(("conf", "words"), [
    ("{not json", "not valid JSON"),
    ('["a list"]', "must be a JSON object"),
    (json.dumps({"cniVersion": "1.0.0", "name": "x", "type": "../sh"}), "bare plugin name"),
    (json.dumps({"cniVersion": "9.9.9", "name": "x", "type": "bridge"}), "not supported"),
])
def test_broken_spec_config_refused(conf: str, words: str) -> None:
    nets = NadResolver(Nads(nad("shop/bad", conf)))
    with pytest.raises(Refusal) as info:
        nets.resolve("shop/bad", "shop")
    assert info.value.code == INVALID_CONFIG and info.value.reason == "InvalidNetworkConfig"
    assert info.value.msg.startswith("NetworkAttachmentDefinition shop/bad: ")
    assert words in info.value.msg and words in info.value.note


def test_parsed_once_per_resource_version() -> None:
    nads = Nads(nad("shop/storage", rv="1"))
    nets = NadResolver(nads)
    first = nets.resolve("shop/storage", "shop")
    assert nets.resolve("shop/storage", "shop") is first
    nads.put(nad("shop/storage", config("storage", "macvlan"), rv="2"))
    second = nets.resolve("shop/storage", "shop")
    assert second.chain.types == ["macvlan"] and nets.resolve("shop/storage", "x") is second
    del nads.nads["shop/storage"]
    with pytest.raises(Refusal):
        nets.resolve("shop/storage", "shop")


def test_cache_not_ready_is_passed_on() -> None:
    nads = Nads(nad("shop/storage"))
    nads.ready = False
    with pytest.raises(CNIError) as info:
        NadResolver(nads).resolve("shop/storage", "shop")
    assert info.value.code == TRY_AGAIN_LATER and not isinstance(info.value, Refusal)
