"""The status writes themselves: a PodGroup's or Queue's status, and a pod's, patched
as each resource takes it. Which objects need a write, and when, is the reporter's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from adapter.kube.cache import split_key
from adapter.kube.resources import MERGE_PATCH, STRATEGIC_MERGE_PATCH, Resource, done
from adapter.kube.writer import WRITE_TIMEOUT


def patch_object_status(
    custom: client.CustomObjectsApi,
    resource: Resource,
    inline: bool,
    namespace: str | None,
    name: str,
    status: dict[str, Any],
) -> None:
    """Patch ``status`` into a PodGroup (``namespace``) or Queue (None): through the
    status subresource, or on the object where the CRD has none (``inline``). A built-in
    resource (the Workload API's PodGroup) takes a strategic merge patch, which merges
    its conditions by type: a ``DisruptionTarget`` someone else set stays."""
    body = {"status": status}
    where = (resource.group, resource.version)
    kind = MERGE_PATCH if resource.custom else STRATEGIC_MERGE_PATCH
    if namespace is None:
        cluster_patch = (
            custom.patch_cluster_custom_object
            if inline
            else custom.patch_cluster_custom_object_status
        )
        cluster_patch(
            *where, resource.plural, name, body, _content_type=kind, _request_timeout=WRITE_TIMEOUT
        )
        return
    namespaced_patch = (
        custom.patch_namespaced_custom_object
        if inline
        else custom.patch_namespaced_custom_object_status
    )
    namespaced_patch(
        *where,
        namespace,
        resource.plural,
        name,
        body,
        _content_type=kind,
        _request_timeout=WRITE_TIMEOUT,
    )


def pod_status_write(
    core: client.CoreV1Api, pod: str, status: dict[str, Any]
) -> Callable[[], None]:
    """The write that merges ``status`` into the pod's (``namespace/name``) status."""
    namespace, name = split_key(pod)

    def write() -> None:
        done(
            core.patch_namespaced_pod_status(
                name,
                namespace,
                {"status": status},
                _content_type=STRATEGIC_MERGE_PATCH,
                _preload_content=False,
                _request_timeout=WRITE_TIMEOUT,
            )
        )

    return write
