"""Who is asking, and may they: a caller's bearer token checked by the API server, as
kube-rbac-proxy does it, for the daemon's query endpoint (:mod:`netctl.kube.queryserver`).

A ``TokenReview`` says whether the token is valid and whose it is (not: **401**); a
``SubjectAccessReview`` whether that user may ``get`` ``nodes/netctl-journal`` of this node
(not: **403**; ``deploy/kubernetes/journal-reader.yaml`` grants it). An allowed answer is
kept :data:`ALLOWED_FOR` seconds per token hash (two reviews per node a minute, not per
request); refusals are not kept (a binding just created works at once). An API server that
cannot be asked is **503**: fail closed. :func:`token_review`, :func:`access_review` and
:func:`verdict` are pure; :class:`Reviews` makes the calls.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from netctl.kubeapi.api import Api, ApiError

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
RESOURCE, SUBRESOURCE, VERB = "nodes", "netctl-journal", "get"
ALLOWED_FOR = 60.0  # seconds an allowed answer is kept, per token
MAX_KEPT = 1024  # tokens kept at most (the oldest answers dropped first)


@dataclass(frozen=True)
class Verdict:
    """The answer to a caller: ``status`` 200 (go on), 401, 403 or 503, and why."""

    status: int
    user: str = ""
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


def token_review(token: str) -> bytes:
    return msgspec.json.encode({"apiVersion": "authentication.k8s.io/v1",
                                "kind": "TokenReview", "spec": {"token": token}})


def access_review(user: str, groups: list[str], uid: str, node: str) -> bytes:
    return msgspec.json.encode({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, "uid": uid, "resourceAttributes": {
            "group": "", "resource": RESOURCE, "subresource": SUBRESOURCE, "name": node,
            "verb": VERB}}})


class _User(msgspec.Struct):
    username: str = ""
    uid: str = ""
    groups: list[str] = msgspec.field(default_factory=list)


class _TokenStatus(msgspec.Struct):
    authenticated: bool = False
    user: _User = msgspec.field(default_factory=_User)
    error: str = ""


class _AccessStatus(msgspec.Struct):
    allowed: bool = False
    denied: bool = False
    reason: str = ""
    evaluationError: str = ""


class _Review(msgspec.Struct):
    status: Any = None


def authenticated(body: bytes) -> _User | None:
    """The TokenReview's answer: its user, or None when the token was not accepted."""
    raw = msgspec.json.decode(body, type=_Review).status or {}
    st = msgspec.convert(raw, _TokenStatus)
    return st.user if st.authenticated and st.user.username else None


def verdict(user: _User, body: bytes, node: str) -> Verdict:
    """The SubjectAccessReview's answer as a :class:`Verdict` for ``user``."""
    raw = msgspec.json.decode(body, type=_Review).status or {}
    st = msgspec.convert(raw, _AccessStatus)
    if st.allowed and not st.denied:
        return Verdict(200, user.username)
    why = st.reason or st.evaluationError or "no RBAC rule allows it"
    return Verdict(403, user.username, f"{user.username} may not {VERB} "
                   f"{RESOURCE}/{SUBRESOURCE} of node {node}: {why} (bind the "
                   "netctl-journal-reader ClusterRole)")


@dataclass
class Reviews:
    """The two reviews for :meth:`check`, allowed answers kept per token hash."""

    api: Api
    node: str
    allowed_for: float = ALLOWED_FOR
    clock: Callable[[], float] = time.monotonic
    _kept: dict[str, tuple[float, Verdict]] = field(default_factory=dict)
    reviews: int = 0  # TokenReviews made (for the tests and the status)

    async def check(self, token: str) -> Verdict:
        if not token:
            return Verdict(401, reason="no bearer token: send Authorization: Bearer <token>")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        kept = self._kept.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        try:
            self.reviews += 1
            user = authenticated(await self.api.request("create", "POST", TOKEN_REVIEWS,
                                                        body=token_review(token)))
            if user is None:
                return Verdict(401, reason="the API server did not accept the token")
            answer = verdict(user, await self.api.request(
                "create", "POST", ACCESS_REVIEWS,
                body=access_review(user.username, user.groups, user.uid, self.node)),
                self.node)
        except (ApiError, msgspec.MsgspecError) as exc:
            return Verdict(503, reason=f"the caller's token cannot be checked: {exc}")
        if answer.allowed:
            self._keep(key, now + self.allowed_for, answer)
        return answer

    def _keep(self, key: str, until: float, answer: Verdict) -> None:
        now = self.clock()
        for old in [k for k, (t, _) in self._kept.items() if t <= now]:
            del self._kept[old]
        while len(self._kept) >= MAX_KEPT:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = (until, answer)
