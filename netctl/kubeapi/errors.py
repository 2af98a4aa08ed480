"""What every caller of the API server shares, without its clients: the error of a call
and the client's settings (the commands' one-shot questions import these without
loading kubernetes-asyncio or aiohttp: :mod:`netctl.kubeapi.lite`)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from netctl.kubeapi.objects import Status

Query = list[tuple[str, str]]
JSON = "application/json"  # what every call asks for, unless it asks for less


class ApiError(Exception):
    """A failed API call: the HTTP status (0: unreachable or timed out) and why."""

    def __init__(self, status: int, reason: str, body: bytes = b"") -> None:
        super().__init__(f"{status} {reason}")
        self.status, self.reason, self.body = status, reason, body

    @property
    def unreachable(self) -> bool:
        return self.status == 0 or self.status >= 500


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: str | None = None
    in_cluster: bool = False
    api_timeout: float = 10.0  # one request (not a watch)
    watch_timeout: float = 300.0  # the server ends a watch after this; it is renewed


def reason_of(data: bytes) -> str:
    """The message (else the reason) of the Status an API server answered with."""
    try:
        st = msgspec.json.decode(data, type=Status)
    except msgspec.MsgspecError:
        return ""
    return st.message or st.reason
