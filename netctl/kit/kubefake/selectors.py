"""Label and field selectors: parsed once per request into a :class:`Selector`, then
matched against objects (pure; no I/O).

Label selectors take the grammar of ``k8s.io/apimachinery/pkg/labels``: requirements
joined by commas (commas inside ``( )`` belong to a set), each one of ``key``
(exists), ``!key`` (does not exist), ``key=v``, ``key==v``, ``key!=v`` (true when the
label is absent), ``key in (a,b)``, ``key notin (a,b)`` (true when absent), ``key>n``,
``key<n``. Field selectors are ``field=v``, ``field==v``, ``field!=v`` joined by commas,
with ``\\,``, ``\\=`` and ``\\\\`` escapes; only the fields the resource declares are
accepted (the real server answers 400 for the rest), and a missing field reads as ``""``
(booleans as ``true``/``false``), as the server's field sets do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

Predicate = Callable[[dict[str, Any]], bool]

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_REQ = re.compile(r"^\s*(?P<neg>!)?\s*(?P<key>[^\s!=<>]+)\s*"
                  r"(?:(?P<op>==|=|!=|<|>|\bnotin\b|\bin\b)\s*(?P<value>.*?))?\s*$")


@dataclass(frozen=True)
class Selector:
    """The conjunction of a label and a field selector (either may be empty)."""

    tests: tuple[Predicate, ...] = ()

    def matches(self, obj: dict[str, Any]) -> bool:
        return all(test(obj) for test in self.tests)


def parse(label_selector: str | None, field_selector: str | None,
          fields: Mapping[str, str]) -> Selector:
    """Raise :class:`ApiError` 400 for a selector the real server would refuse."""
    tests = [*_labels(label_selector or ""), *_fields(field_selector or "", fields)]
    return Selector(tuple(tests))


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _labels(text: str) -> list[Predicate]:
    if not text.strip():
        return []
    return [_label_requirement(part) for part in _split_top(text)]


def _label_requirement(part: str) -> Predicate:
    m = _REQ.match(part)
    if not m or not _KEY.match(m["key"]):
        raise bad_request(f"unable to parse requirement: invalid label selector {part!r}")
    key, op, value = m["key"], m["op"], (m["value"] or "").strip()
    values = [v.strip() for v in value[1:-1].split(",")] if op in ("in", "notin") else [value]
    if op and not (op in ("<", ">") or all(_VALUE.match(v) for v in values)):
        raise bad_request(f"unable to parse requirement: invalid label value in {part!r}")

    def labels(obj: dict[str, Any]) -> dict[str, str]:
        return (obj.get("metadata") or {}).get("labels") or {}

    if m["neg"]:
        if op:
            raise bad_request(f"unable to parse requirement: {part!r}")
        return lambda obj: key not in labels(obj)
    if op is None:
        return lambda obj: key in labels(obj)
    if op in ("in", "notin"):
        if not (value.startswith("(") and value.endswith(")")):
            raise bad_request(f"unable to parse requirement: {op} needs a (set): {part!r}")
        chosen = frozenset(v for v in values if v)
        if op == "in":
            return lambda obj: labels(obj).get(key) in chosen
        return lambda obj: labels(obj).get(key) not in chosen
    if op in ("<", ">"):
        try:
            bound = int(value)
        except ValueError:
            raise bad_request(f"unable to parse requirement: {value!r} is not an integer") from None
        return lambda obj: _compare(labels(obj).get(key), op, bound)
    if op == "!=":
        return lambda obj: labels(obj).get(key) != value
    return lambda obj: labels(obj).get(key) == value


def _compare(have: str | None, op: str, bound: int) -> bool:
    try:
        number = int(have) if have is not None else None
    except ValueError:
        return False
    return number is not None and (number < bound if op == "<" else number > bound)


def _fields(text: str, fields: Mapping[str, str]) -> list[Predicate]:
    if not text.strip():
        return []
    tests = []
    for term in _split_escaped(text, ","):
        for op in ("!=", "==", "="):
            at = _find_unescaped(term, op)
            if at >= 0:
                name, value = term[:at].strip(), _unescape(term[at + len(op):])
                break
        else:
            raise bad_request(f"invalid selector: {term!r}; can't understand {term!r}")
        if name not in fields:
            raise bad_request(f'field label not supported: "{name}"')
        tests.append(_field_test(fields[name].split("."), op == "!=", value))
    return tests


def _field_test(path: list[str], negate: bool, value: str) -> Predicate:
    def test(obj: dict[str, Any]) -> bool:
        return (field_value(obj, path) == value) != negate
    return test


def field_value(obj: dict[str, Any], path: list[str]) -> str:
    cur: Any = obj
    for part in path:
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _split_escaped(text: str, sep: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if text[i] == sep:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(text[i])
        i += 1
    out.append("".join(cur))
    return out


def _find_unescaped(text: str, op: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(op, i):
            return i
        i += 1
    return -1


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)

