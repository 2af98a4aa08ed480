"""Validation of the CNI_* values a runtime sends. Pure."""

from __future__ import annotations

import re

from netctl.errors import INVALID_ENVIRONMENT, CNIError

_CONTAINER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
VERBS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")


def container_id(value: str | None) -> str:
    if not value:
        raise CNIError(INVALID_ENVIRONMENT, "CNI_CONTAINERID is missing")
    if len(value) > 1024 or not _CONTAINER_ID_RE.fullmatch(value):
        raise CNIError(
            INVALID_ENVIRONMENT,
            f"CNI_CONTAINERID {value[:80]!r} is invalid: it must start with a letter or digit "
            "and hold only letters, digits, '_', '.' and '-'",
        )
    return value


IFNAMSIZ = 16  # the kernel's buffer for an interface name, its NUL included


def ifname(value: str | None, what: str = "CNI_IFNAME") -> str:
    """An interface name the kernel takes: at most 15 *bytes* of UTF-8 (``IFNAMSIZ``
    less the NUL; "ethé" counts 5), no '/', ':' or white space, not '.' or '..'."""
    if not value:
        raise CNIError(INVALID_ENVIRONMENT, f"{what} is missing")
    if (
        len(value.encode("utf-8", "surrogatepass")) >= IFNAMSIZ
        or value in (".", "..")
        or any(c in value for c in "/:")
        or any(c.isspace() for c in value)
    ):
        raise CNIError(
            INVALID_ENVIRONMENT,
            f"{what} {value[:40]!r} is invalid: at most 15 bytes in UTF-8, "
            "no '/', ':' or white space, not '.' or '..'",
        )
    return value


def command(value: str | None) -> str:
    if not value:
        raise CNIError(INVALID_ENVIRONMENT, "CNI_COMMAND is missing")
    if value not in VERBS:
        raise CNIError(
            INVALID_ENVIRONMENT,
            f"CNI_COMMAND {value[:40]!r} is not one of {', '.join(VERBS)}",
        )
    return value


def parse_cni_args(value: str | None) -> dict[str, str]:
    """``K8S_POD_NAME=a;K8S_POD_NAMESPACE=b`` → dict. Malformed pairs are refused."""
    out: dict[str, str] = {}
    if not value:
        return out
    for pair in value.split(";"):
        if not pair:
            continue
        key, sep, val = pair.partition("=")
        if not sep or not key:
            raise CNIError(INVALID_ENVIRONMENT, f"CNI_ARGS entry {pair[:80]!r} is not KEY=VALUE")
        out[key] = val
    return out
