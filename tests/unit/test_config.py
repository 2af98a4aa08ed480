"""We test these aspects of network configs and the stdin each delegate gets:

- a single conf and a conflist both decode into a chain (from bytes, str or a dict);
- a plugin ``type`` (and an ``ipam.type``) that is not a bare name is refused with code 7;
- malformed configs are refused with the right code and name where they failed;
- ``plugin_config`` injects ``name``/``cniVersion``, the previous result converted to the
  chain's version, ``runtimeConfig`` only for declared capabilities, and merges ``args.cni``;
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from netctl.cni.config import parse_chain, plugin_config, validate_plugin_type
from netctl.errors import DECODE_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG, CNIError

BRIDGE = {"type": "bridge", "bridge": "cni0", "isGateway": True,
          "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}
CONF = {"cniVersion": "0.4.0", "name": "br", **BRIDGE}
CONFLIST = {"cniVersion": "1.0.0", "name": "chained", "plugins": [
    BRIDGE,
    {"type": "portmap", "capabilities": {"portMappings": True, "ips": False}},
    {"type": "tuning", "args": {"cni": {"keep": "yes", "over": "old"}, "other": {"x": 1}}},
]}
PREV_1_1 = {"cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mtu": 1500, "sandbox": "/var/run/netns/p"}],
            "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 0},
                    {"address": "fd00::5/64", "interface": 0}]}


def test_single_conf_is_a_chain_of_one() -> None:
    raw = json.dumps(CONF).encode()
    chain = parse_chain(raw, "network br")
    assert (chain.name, chain.cni_version, chain.types) == ("br", "0.4.0", ["bridge"])
    assert chain.plugins[0]["ipam"]["subnet"] == "10.1.0.0/24"
    assert chain.raw == raw
    assert parse_chain(raw.decode(), "w") == chain


def test_conflist() -> None:
    chain = parse_chain(CONFLIST, "network chained")
    assert chain.name == "chained" and chain.cni_version == "1.0.0"
    assert chain.types == ["bridge", "portmap", "tuning"]
    assert json.loads(chain.raw) == CONFLIST


@pytest.mark.parametrize("ptype", [
    "/usr/lib/cni/bridge", "../bridge", "..", "a..b", "sub/bridge", "", ".hidden", "-x",
    "bridge\n", "bri dge", "x" * 129, 42, None, ["bridge"],
])
def test_plugin_type_must_be_a_bare_name(ptype: Any) -> None:
    conf = {**CONFLIST, "plugins": [BRIDGE, {"type": ptype}]}
    with pytest.raises(CNIError) as info:
        parse_chain(conf, "network evil")
    assert info.value.code == INVALID_CONFIG
    assert "network evil plugins[1]" in info.value.msg


def test_missing_type_refused() -> None:
    with pytest.raises(CNIError) as info:
        parse_chain({"cniVersion": "1.0.0", "name": "n", "plugins": [{"bridge": "x"}]}, "w")
    assert info.value.code == INVALID_CONFIG and "'type'" in info.value.msg


@pytest.mark.parametrize("ipam_type", ["../x", "/bin/sh", "", 7])
def test_ipam_type_must_be_a_bare_name(ipam_type: Any) -> None:
    conf = {**CONF, "ipam": {"type": ipam_type, "subnet": "10.1.0.0/24"}}
    with pytest.raises(CNIError) as info:
        parse_chain(conf, "network br")
    assert info.value.code == INVALID_CONFIG
    assert "plugins[0].ipam" in info.value.msg


def test_plugin_type_accepted_forms() -> None:
    for ok in ("bridge", "host-local", "netctl_ipam", "v1.2-plugin", "x" * 128):
        assert validate_plugin_type(ok, "w") == ok
    # an ipam section without a type is the plugin's business, not ours
    assert parse_chain({**CONF, "ipam": {}}, "w").plugins[0]["ipam"] == {}


@pytest.mark.parametrize(("raw", "code", "words"), [
    (b"{not json", DECODE_FAILURE, "not valid JSON"),
    (b"[1, 2]", DECODE_FAILURE, "must be a JSON object"),
    (b'{"name": "n", "type": "bridge"}', INVALID_CONFIG, "'cniVersion' is missing"),
    (b'{"cniVersion": "0.2.0", "name": "n", "type": "bridge"}', INCOMPATIBLE_VERSION, "0.2.0"),
    (b'{"cniVersion": "1.0.0", "type": "bridge"}', INVALID_CONFIG, "'name' is missing"),
    (b'{"cniVersion": "1.0.0", "name": "n", "plugins": []}', INVALID_CONFIG, "non-empty list"),
    (b'{"cniVersion": "1.0.0", "name": "n", "plugins": {}}', INVALID_CONFIG, "non-empty list"),
    (b'{"cniVersion": "1.0.0", "name": "n", "plugins": ["bridge"]}', INVALID_CONFIG,
     "plugins[0] is not an object"),
])
def test_malformed_configs(raw: bytes, code: int, words: str) -> None:
    with pytest.raises(CNIError) as info:
        parse_chain(raw, "network n")
    assert info.value.code == code
    assert words in info.value.msg


def test_plugin_config_injects_name_version_and_converted_prev_result() -> None:
    chain = parse_chain({"cniVersion": "0.4.0", "name": "br", "plugins": [
        {**BRIDGE, "name": "ignored", "cniVersion": "1.1.0", "prevResult": {"stale": True}}]},
        "w")
    first = json.loads(plugin_config(chain, 0, None, {}))
    assert first["name"] == "br" and first["cniVersion"] == "0.4.0"
    assert "prevResult" not in first
    prev = copy.deepcopy(PREV_1_1)
    second = json.loads(plugin_config(chain, 0, prev, {}))
    assert prev == PREV_1_1
    assert second["prevResult"]["cniVersion"] == "0.4.0"
    assert [ip["version"] for ip in second["prevResult"]["ips"]] == ["4", "6"]
    assert second["prevResult"]["interfaces"] == [{"name": "eth0", "sandbox": "/var/run/netns/p"}]
    assert second["bridge"] == "cni0" and second["ipam"] == BRIDGE["ipam"]


def test_runtime_config_only_for_declared_capabilities() -> None:
    chain = parse_chain(CONFLIST, "w")
    caps = {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
            "ips": ["10.1.0.9/24"], "mac": "0a:00:00:00:00:01"}
    portmap = json.loads(plugin_config(chain, 1, PREV_1_1, caps))
    # declared and enabled → passed; declared but false → not; undeclared → not
    assert portmap["runtimeConfig"] == {"portMappings": caps["portMappings"]}
    bridge = json.loads(plugin_config(chain, 0, None, caps))
    assert "runtimeConfig" not in bridge
    no_caps = json.loads(plugin_config(chain, 1, PREV_1_1, {"mac": "0a:00:00:00:00:01"}))
    assert "runtimeConfig" not in no_caps


def test_args_cni_merge() -> None:
    chain = parse_chain(CONFLIST, "w")
    before = copy.deepcopy(chain.plugins)
    tuning = json.loads(plugin_config(chain, 2, PREV_1_1, {}, {"over": "new", "added": 1}))
    assert tuning["args"] == {"cni": {"keep": "yes", "over": "new", "added": 1},
                              "other": {"x": 1}}
    bridge = json.loads(plugin_config(chain, 0, None, {}, {"added": 1}))
    assert bridge["args"] == {"cni": {"added": 1}}
    assert "args" not in json.loads(plugin_config(chain, 0, None, {}, {}))
    assert chain.plugins == before, "plugin_config changed the chain"
