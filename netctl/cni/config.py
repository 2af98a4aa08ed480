"""Network configurations: decoding conf/conflist, and building each plugin's stdin.

Pure. A chain is a conflist (a single conf is a chain of one). For every step
the plugin gets its own conf with the list's ``name`` and ``cniVersion``
injected, the previous result as ``prevResult``, the capability arguments it
declares under ``runtimeConfig``, and netctl's per-attachment ``args.cni`` —
the same rules libcni applies, so delegates see what a runtime would send.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from netctl.cni import versions
from netctl.errors import DECODE_FAILURE, INVALID_CONFIG, CNIError

_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class Chain(msgspec.Struct, frozen=True):
    """One network's delegate chain."""

    name: str
    cni_version: str
    plugins: tuple[dict[str, Any], ...]
    raw: bytes  # the exact conf/conflist bytes it was read from

    @property
    def types(self) -> list[str]:
        return [str(p["type"]) for p in self.plugins]


def validate_plugin_type(ptype: object, where: str) -> str:
    """A plugin ``type`` is a bare executable name: no ``/``, no ``..``."""
    if not isinstance(ptype, str) or not ptype:
        raise CNIError(INVALID_CONFIG, f"{where}: plugin 'type' is missing or not a string")
    if "/" in ptype or ".." in ptype or not _TYPE_RE.fullmatch(ptype):
        raise CNIError(
            INVALID_CONFIG,
            f"{where}: plugin type {ptype!r} is not a bare plugin name "
            "(no '/', no '..', letters, digits, '_', '.', '-')",
        )
    return ptype


def decode_json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise CNIError(DECODE_FAILURE, f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise CNIError(DECODE_FAILURE, f"{what} must be a JSON object")
    return obj


def parse_chain(raw: bytes | str | dict[str, Any], where: str) -> Chain:
    """Decode a conf or conflist into a :class:`Chain`, refusing what cannot run."""
    if isinstance(raw, dict):
        obj = raw
        raw_bytes = msgspec.json.encode(raw)
    else:
        raw_bytes = raw.encode() if isinstance(raw, str) else raw
        obj = decode_json_object(raw_bytes, where)
    version = obj.get("cniVersion")
    if not isinstance(version, str):
        raise CNIError(INVALID_CONFIG, f"{where}: 'cniVersion' is missing")
    versions.check_supported(version)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise CNIError(INVALID_CONFIG, f"{where}: 'name' is missing")
    if "plugins" in obj:
        plugins = obj["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise CNIError(INVALID_CONFIG, f"{where}: 'plugins' must be a non-empty list")
    else:
        plugins = [obj]
    checked: list[dict[str, Any]] = []
    for i, plugin in enumerate(plugins):
        if not isinstance(plugin, dict):
            raise CNIError(INVALID_CONFIG, f"{where}: plugins[{i}] is not an object")
        validate_plugin_type(plugin.get("type"), f"{where} plugins[{i}]")
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict) and "type" in ipam:
            validate_plugin_type(ipam.get("type"), f"{where} plugins[{i}].ipam")
        checked.append(plugin)
    return Chain(name=name, cni_version=version, plugins=tuple(checked), raw=raw_bytes)


def plugin_config(
    chain: Chain,
    index: int,
    prev_result: dict[str, Any] | None,
    capability_args: dict[str, Any],
    cni_args: dict[str, Any] | None = None,
    ipam: dict[str, Any] | None = None,
    device: str = "",
) -> bytes:
    """The exact stdin for step ``index`` of ``chain`` (with ``ipam`` replacing its
    IPAM section when given). ``device``: the device the attachment holds, as the keys
    SR-IOV CNI (``deviceID``) and host-device (``pciBusID``) read — every plugin of the
    chain gets both, as Multus gives them."""
    conf = dict(chain.plugins[index])
    if ipam is not None:
        conf["ipam"] = ipam
    if device:
        conf["deviceID"] = conf["pciBusID"] = device
    conf["name"] = chain.name
    conf["cniVersion"] = chain.cni_version
    conf.pop("prevResult", None)
    if prev_result is not None:
        conf["prevResult"] = versions.convert_result(prev_result, chain.cni_version)
    caps = conf.get("capabilities")
    runtime = {key: capability_args[key] for key, enabled in caps.items()
               if enabled and key in capability_args} if isinstance(caps, dict) else {}
    if runtime:
        conf["runtimeConfig"] = runtime
    else:
        conf.pop("runtimeConfig", None)
    if cni_args:
        args = dict(conf.get("args") or {})
        args["cni"] = {**(args.get("cni") or {}), **cni_args}
        conf["args"] = args
    return msgspec.json.encode(conf)
