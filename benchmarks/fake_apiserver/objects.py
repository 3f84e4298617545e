"""What the fake stores and answers with: plain JSON objects, the resources they belong
to, and the error a failed request answers with as a Kubernetes Status."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

Obj = dict[str, Any]

# Groups served by kube-apiserver itself: their list items carry no kind/apiVersion and
# they accept strategic merge patches; every other group behaves like a custom resource.
BUILTIN_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

TYPE_KEYS = ("kind", "apiVersion")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _clone(obj: Any) -> Any:
    # A JSON round trip is both a deep copy and a check that the object is plain JSON.
    return json.loads(json.dumps(obj))


class BindingRecord(NamedTuple):
    """One Binding the server answered: the pod (namespace/name), the node it named, and
    the answer's code (201 if it bound the pod)."""

    pod: str
    node: str
    status: int


class FakeApiError(Exception):
    """An error the fake answers with a Kubernetes Status; raised by the direct methods too."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: Obj | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(f"{code} {reason or REASONS.get(code, '')}: {message}")
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.headers = tuple(headers)

    def status(self) -> Obj:
        status: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status


class FailedInBody(FakeApiError):
    """A failure kube-apiserver sends as the Status a create returned, with the create's
    HTTP 201: the eviction of a pod that two PodDisruptionBudgets select."""


def _not_found_path() -> FakeApiError:
    return FakeApiError(404, "the server could not find the requested resource", details={})


@dataclass
class _Resource:
    group: str
    versions: list[str]
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool
    short_names: tuple[str, ...]
    singular: str
    list_kind: str
    # label -> path into the object; metadata.name and metadata.namespace always work
    field_labels: dict[str, tuple[str, ...]]
    create_on_update: bool = False  # leases and events: PUT to a missing name creates it
    return_deleted: bool = False  # pods answer a delete with the object, others with Status
    generation: bool = False  # metadata.generation counts spec changes

    @property
    def custom(self) -> bool:
        return self.group not in BUILTIN_GROUPS

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def details(self, name: str) -> Obj:
        details: Obj = {"name": name, "kind": self.plural}
        if self.group:
            details["group"] = self.group
        return details

    def not_found(self, name: str) -> FakeApiError:
        return FakeApiError(404, f'{self.qualified} "{name}" not found', details=self.details(name))

    def conflict(self, name: str, why: str) -> FakeApiError:
        return FakeApiError(
            409,
            f'Operation cannot be fulfilled on {self.qualified} "{name}": {why}',
            details=self.details(name),
        )

    def invalid(self, name: str, why: str) -> FakeApiError:
        details: Obj = {"name": name, "kind": self.kind}
        if self.group:
            details["group"] = self.group
        return FakeApiError(422, f'{self.kind} "{name}" is invalid: {why}', details=details)
