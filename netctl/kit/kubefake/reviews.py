"""TokenReview and SubjectAccessReview with real semantics, from two tables the test holds:
who a token is (``tokens``: token → user and groups; an unknown token is answered
``authenticated: false``), and what a user or a group may do (``rules``: RBAC-like rows,
verb and API group and resource — ``nodes/netctl-journal`` for a subresource — and
optionally resource names; ``*`` matches any verb or resource). A SubjectAccessReview is
allowed when one row of its user, or of one of its groups, matches, as RBAC's union of
bindings; else ``allowed: false`` with a reason, as the real authorizer answers. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
        subjects = {str(spec.get("user") or "")} | {f"group:{g}" for g in
                                                     spec.get("groups") or []}
        allowed = any(
            g.subject in subjects and g.verb in ("*", attrs.get("verb"))
            and g.api_group in ("*", attrs.get("group") or "")
            and g.resource in ("*", resource)
            and (not g.names or attrs.get("name") in g.names) for g in self.grants)
        status: dict[str, Any] = {"allowed": allowed}
        if not allowed:
            status["reason"] = (f"RBAC: {spec.get('user')} has no rule granting "
                                f"{attrs.get('verb')} on {resource}")
        return {**body, "status": status}
