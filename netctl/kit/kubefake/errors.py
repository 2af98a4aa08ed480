"""The API server's failures as data: an :class:`ApiError` carries what the HTTP layer
turns into a ``Status`` body (``kind: Status``, ``status: Failure``, ``reason``, ``code``,
``details``), the shape kubernetes-asyncio's ``ApiException`` reads back as ``.status``,
``.reason`` and ``.body``.

The constructors below use the messages and reasons of the real API server
(``k8s.io/apimachinery/pkg/api/errors``), so a test can match on them as netctl would in
production: ``NotFound`` 404, ``AlreadyExists`` and ``Conflict`` 409, ``Expired`` 410,
``Invalid`` 422, ``BadRequest`` 400, ``UnsupportedMediaType`` 415, ``Unauthorized`` 401.
"""

from __future__ import annotations

from typing import Any

from .resources import Resource


class ApiError(Exception):
    """A failed API call: the HTTP status code and the ``Status`` object to send."""

    def __init__(self, code: int, reason: str, message: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(res: Resource, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": res.plural}
    if res.group:
        details["group"] = res.group
    return details


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                    _details(res, name))


def conflict(res: Resource, name: str, why: str | None = None) -> ApiError:
    why = why or ("the object has been modified; please apply your changes to the latest "
                  "version and try again")
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": '
                    f"{why}", _details(res, name))


def invalid(res: Resource, name: str, causes: list[str]) -> ApiError:
    details = _details(res, name)
    details["kind"] = res.kind
    kind = f"{res.kind}.{res.group}" if res.group else res.kind  # the real server's GroupKind
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: ' + "; ".join(causes),
                    details)


def expired(asked: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {asked} ({oldest})")


def too_large(asked: int, current: int) -> ApiError:
    return ApiError(504, "Timeout", f"Too large resource version: {asked}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: application/json-patch+json, application/merge-patch+json "
                    f"(got {content_type!r})")


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(verb: str, resource: str) -> ApiError:
    return ApiError(403, "Forbidden", f"{resource} is forbidden: the request to {verb} it "
                    "was refused")


def method_not_allowed(what: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {what}")


def path_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
