"""Which resource a request path names, and which Kubernetes verb the request is."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class _Target:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str | None
    sub: str | None


def _resource_target(group: str, version: str, segments: list[str]) -> _Target | None:
    namespace = None
    # /namespaces/{ns}/status is the namespace's own subresource, not a collection.
    if (
        len(segments) >= 3
        and segments[0] == "namespaces"
        and not (len(segments) == 3 and segments[2] in ("status", "finalize"))
    ):
        namespace, segments = segments[1], segments[2:]
    if not 1 <= len(segments) <= 3 or "" in segments:
        return None
    return _Target(
        group,
        version,
        namespace,
        segments[0],
        segments[1] if len(segments) > 1 else None,
        segments[2] if len(segments) > 2 else None,
    )


def _verb(method: str, target: _Target, query: dict[str, str]) -> str:
    if method == "GET":
        if target.name is None:
            return "watch" if query.get("watch", "").lower() in ("true", "1") else "list"
        return "get"
    if method == "DELETE" and target.name is None:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )
