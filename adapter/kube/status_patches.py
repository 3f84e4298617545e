"""The status writes themselves: a PodGroup's or Queue's status, and a pod's, patched
as each resource takes it, on a connection the writing thread keeps (``Connections``: a
patch through the client's pool cost 0.48-0.52 ms of CPU). Which objects need a write,
and when, is the reporter's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from adapter.kube.cache import split_key
from adapter.kube.connections import Connections
from adapter.kube.resources import MERGE_PATCH, PODS, STRATEGIC_MERGE_PATCH, Resource, path_of
from adapter.kube.writer import WRITE_TIMEOUT


def patch_object_status(
    connections: Connections,
    resource: Resource,
    inline: bool,
    namespace: str | None,
    name: str,
    status: dict[str, Any],
    uid: str = "",
) -> None:
    """Patch ``status`` into a PodGroup (``namespace``) or Queue (None): through the
    status subresource, or on the object where the CRD has none (``inline``). A built-in
    resource (the Workload API's PodGroup) takes a strategic merge patch, which merges
    its conditions by type: a ``DisruptionTarget`` someone else set stays.

    ``uid``: the object's the status was built for. In the patch, it makes the write to
    a namesake made since an error, not a write (the UID is immutable): a Volcano
    PodGroup deleted and made again under its name took the Inqueue meant for the old
    one, and kept it. A CRD's status subresource drops the patch's metadata: there a
    namesake still takes the write, as before."""
    kind = MERGE_PATCH if resource.custom else STRATEGIC_MERGE_PATCH
    path = path_of(resource, namespace, name, "" if inline else "status")
    body = {"metadata": {"uid": uid}, "status": status} if uid else {"status": status}
    connections.request("PATCH", path, orjson.dumps(body), *WRITE_TIMEOUT, kind)


def pod_status_write(
    connections: Connections, pod: str, status: dict[str, Any]
) -> Callable[[], None]:
    """The write that merges ``status`` into the pod's (``namespace/name``) status."""
    namespace, name = split_key(pod)
    path = path_of(PODS, namespace, name, "status")

    def write() -> None:
        body = orjson.dumps({"status": status})
        connections.request("PATCH", path, body, *WRITE_TIMEOUT, STRATEGIC_MERGE_PATCH)

    return write
