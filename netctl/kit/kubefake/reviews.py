"""TokenReview and SubjectAccessReview with real semantics, from two tables the test holds:
who a token is (``tokens``: token → user and groups; an unknown token is answered
``authenticated: false``), and what a user or a group may do (``rules``: RBAC-like rows,
verb and API group and resource — ``nodes/netctl-journal`` for a subresource — and
optionally resource names; ``*`` matches any verb or resource). A SubjectAccessReview is
allowed when one row of its user, or of one of its groups, matches, as RBAC's union of
bindings; else ``allowed: false`` with a reason, as the real authorizer answers. The same
rows authorize the synthetic checks the fake makes inside a write (:meth:`Reviews.allows`;
:mod:`.dra`), for a request whose bearer token is one of ``tokens`` (with the node a
pod-bound ServiceAccount token names, ``nodes``). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dra import Requester

TOKEN_REVIEWS = ("authentication.k8s.io", "v1", "tokenreviews")
ACCESS_REVIEWS = ("authorization.k8s.io", "v1", "subjectaccessreviews")


@dataclass(frozen=True)
class Grant:
    subject: str  # a user name, or "group:NAME"
    verb: str
    resource: str  # "nodes", "nodes/netctl-journal", "*"
    api_group: str = ""
    names: tuple[str, ...] = ()  # resourceNames; empty: any


@dataclass
class Reviews:
    tokens: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    grants: list[Grant] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)  # token → its pod's node

    def requester(self, token: str | None) -> Requester | None:
        """Who a request's bearer token is: one of ``tokens``, else None (the cluster's
        admin: the fake's own token, or none)."""
        found = self.tokens.get(token or "")
        if found is None:
            return None
        user, groups = found
        return Requester(user, (*groups, "system:authenticated"), self.nodes.get(token or "", ""))

    def allows(self, who: Requester, verb: str, api_group: str, resource: str,
               name: str) -> bool:
        """Whether a row of ``who``'s user or groups grants ``verb`` on ``resource`` (a
        ``resource/subresource``) of ``api_group``, named ``name``."""
        subjects = {who.user} | {f"group:{g}" for g in who.groups}
        return any(
            g.subject in subjects and g.verb in ("*", verb) and g.api_group in ("*", api_group)
            and g.resource in ("*", resource) and (not g.names or name in g.names)
            for g in self.grants)

    def token_review(self, body: dict[str, Any]) -> dict[str, Any]:
        token = str((body.get("spec") or {}).get("token") or "")
        found = self.tokens.get(token)
        status: dict[str, Any] = {"authenticated": False}
        if found is not None:
            user, groups = found
            status = {"authenticated": True, "user": {
                "username": user, "uid": f"uid-{user}",
                "groups": [*groups, "system:authenticated"]}}
        return {**body, "status": status}

    def access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        spec = body.get("spec") or {}
        attrs = spec.get("resourceAttributes") or {}
        resource = str(attrs.get("resource") or "")
        if attrs.get("subresource"):
            resource += f"/{attrs['subresource']}"
        who = Requester(str(spec.get("user") or ""), tuple(spec.get("groups") or []))
        allowed = self.allows(who, str(attrs.get("verb") or ""), str(attrs.get("group") or ""),
                              resource, str(attrs.get("name") or ""))
        status: dict[str, Any] = {"allowed": allowed}
        if not allowed:
            status["reason"] = (f"RBAC: {spec.get('user')} has no rule granting "
                                f"{attrs.get('verb')} on {resource}")
        return {**body, "status": status}
