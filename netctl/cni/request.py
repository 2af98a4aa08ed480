"""One CNI invocation as the thin plugin forwards it: the CNI_* environment and stdin."""

from __future__ import annotations

import msgspec


class Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the plugin read from its environment and stdin, unchanged but for the netns path."""

    command: str = ""
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: str = ""
    path: str = ""
    stdin: str = ""
    plugin: str = "netctl-cni"  # which executable name the runtime ran


class Response(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The daemon's answer: ``output`` to print on stdout, and the exit status."""

    status: int = 0
    output: str = ""
    warning: str = ""
