"""Patches, applied to a copy of the stored object (pure; no I/O).

- ``application/merge-patch+json`` (RFC 7386): objects merge key by key, ``null``
  removes a key, anything else (lists included) replaces.
- ``application/strategic-merge-patch+json``: treated as a merge patch. That is exact for
  maps (labels, annotations, ``spec`` scalars); lists are replaced whole instead of merged
  by their patch keys, and ``$patch`` directives are refused. The real server refuses it
  for custom resources (415), and so does the fake.
- ``application/json-patch+json`` (RFC 6902): ``add``, ``remove``, ``replace``, ``move``,
  ``copy``, ``test``, JSON pointers with ``~0``/``~1`` escapes and ``-`` for the end of a
  list. A body that is not a list of operations is 400 (what the real server answers
  when kubernetes-asyncio sends a dict under this type); an operation that cannot apply,
  a failed ``test`` included, is 422.

The caller decides what a changed ``metadata.resourceVersion`` means (a precondition).
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key == "$patch":
            raise bad_request("strategic merge directives ($patch) are not supported by the fake")
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise bad_request(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise _unprocessable(f"doc is missing path: {path!r}")
    return cur


def _index(container: list[Any], part: str, path: str, *, adding: bool) -> int:
    if adding and part == "-":
        return len(container)
    if not part.isdigit():
        raise _unprocessable(f"invalid array index {part!r} in {path!r}")
    index = int(part)
    if index > len(container) or (index == len(container) and not adding):
        raise _unprocessable(f"array index out of bounds in {path!r}")
    return index


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    if isinstance(parent, dict) and parts[-1] in parent:
        return parent[parts[-1]]
    if isinstance(parent, list):
        return parent[_index(parent, parts[-1], path, adding=False)]
    raise _unprocessable(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise _unprocessable("cannot remove the whole document")
    parent = _parent(doc, parts, path)
    if isinstance(parent, dict) and parts[-1] in parent:
        return parent.pop(parts[-1])
    if isinstance(parent, list):
        return parent.pop(_index(parent, parts[-1], path, adding=False))
    raise _unprocessable(f"unable to remove nonexistent key: {parts[-1]!r} ({path!r})")


def _add(doc: Any, path: str, value: Any, *, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    key = parts[-1]
    if isinstance(parent, dict):
        if replace and key not in parent:
            raise _unprocessable(f"doc is missing key: {path!r}")
        parent[key] = value
    elif isinstance(parent, list):
        index = _index(parent, key, path, adding=not replace)
        if replace:
            parent[index] = value
        else:
            parent.insert(index, value)
    else:
        raise _unprocessable(f"doc is missing path: {path!r}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"{kind} operation does not apply: missing value ({path!r})")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind in ("move", "copy"):
            source = op.get("from")
            value = _remove(doc, source) if kind == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise _unprocessable(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"unexpected kind of operation: {kind!r}")
    return doc
