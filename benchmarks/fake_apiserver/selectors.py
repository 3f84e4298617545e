"""Label and field selectors: parsed as the apiserver parses them (cached, since lists
and watches repeat the same few) and matched against stored objects."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from benchmarks.fake_apiserver.objects import FakeApiError, Obj, _Resource


@dataclass(frozen=True)
class _Selector:
    labels: tuple[tuple[str, str, Any], ...] = ()
    fields: tuple[tuple[tuple[str, ...], str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.labels and not self.fields

    def matches(self, obj: Obj) -> bool:
        if self.labels:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            for op, key, want in self.labels:
                if not _label_ok(labels, op, key, want):
                    return False
        for path, op, value in self.fields:
            if (_field_value(obj, path) == value) == (op == "!="):
                return False
        return True


def _label_ok(labels: dict[str, str], op: str, key: str, want: Any) -> bool:
    has = key in labels
    value = labels.get(key)
    if op == "exists":
        return has
    if op == "!":
        return not has
    if op == "=":
        return has and value == want
    if op == "!=":
        return not has or value != want
    if op == "in":
        return has and value in want
    if op == "notin":
        return not has or value not in want
    try:  # ">" and "<" compare integers; a non-integer label matches neither
        number = int(value or "")
    except ValueError:
        return False
    return bool(number > want if op == ">" else number < want)


def _field_value(obj: Obj, path: tuple[str, ...]) -> str:
    node: Any = obj
    for part in path:
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_LABEL_SET = re.compile(rf"\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*")
_LABEL_CMP = re.compile(
    rf"\s*(?P<key>{_KEY})\s*(?P<op>==|!=|=|>|<)\s*(?P<value>[-A-Za-z0-9_.]*)\s*"
)
_LABEL_EXISTS = re.compile(rf"\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*")


def _split_top_level(text: str) -> list[str]:
    # Commas separate requirements except inside "in (a,b)".
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


@lru_cache(maxsize=1024)
def _parse_labels(text: str) -> tuple[tuple[str, str, Any], ...]:
    if not text.strip():
        return ()
    reqs: list[tuple[str, str, Any]] = []
    for term in _split_top_level(text):
        if m := _LABEL_SET.fullmatch(term):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            reqs.append((m["op"], m["key"], values))
        elif m := _LABEL_CMP.fullmatch(term):
            op = "=" if m["op"] == "==" else m["op"]
            want: Any = m["value"]
            if op in (">", "<"):
                try:
                    want = int(want)
                except ValueError:
                    raise FakeApiError(
                        400, f"unable to parse requirement: {term.strip()}: not an integer"
                    ) from None
            reqs.append((op, m["key"], want))
        elif m := _LABEL_EXISTS.fullmatch(term):
            reqs.append(("!" if m["neg"] else "exists", m["key"], None))
        else:
            raise FakeApiError(400, f"unable to parse requirement: {term.strip()!r}")
    return tuple(reqs)


@lru_cache(maxsize=1024)
def _parse_fields(text: str) -> tuple[tuple[str, str, str], ...]:
    if not text.strip():
        return ()
    reqs: list[tuple[str, str, str]] = []
    for term in text.split(","):
        for op in ("!=", "==", "="):
            if op in term:
                label, value = term.split(op, 1)
                reqs.append((label.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            raise FakeApiError(400, f"invalid selector: '{text}'; can't understand '{term}'")
    return tuple(reqs)


def _selector(res: _Resource, query: dict[str, str]) -> _Selector:
    fields: list[tuple[tuple[str, ...], str, str]] = []
    for label, op, value in _parse_fields(query.get("fieldSelector", "")):
        path = res.field_labels.get(label)
        if path is None and label in ("metadata.name", "metadata.namespace"):
            path = tuple(label.split("."))
        if path is None:
            raise FakeApiError(400, f"field label not supported: {label}")
        fields.append((path, op, value))
    return _Selector(_parse_labels(query.get("labelSelector", "")), tuple(fields))
