"""The Kubernetes resources gangsat reads and writes, and which PodGroup dialects a cluster has.

A ``Resource`` names one API collection (group, version, plural) and knows its paths and
the client call that lists or watches it. Lists and watches go through the official
client with ``_preload_content=False``: gangsat reads plain JSON, because decoding
thousands of pods into client models costs more than the scheduling cycle.

Dialects are discovered from the API server's group list, at start-up and every minute
after (``KubeCluster.rediscover``): gangsat watches
the PodGroup and Queue collections of every dialect the cluster serves, and only those.
Where a server serves one collection in several versions (the upstream Workload API's
PodGroups: v1beta1 and v1alpha3 in 1.37, v1alpha2 in 1.36), the newest is watched:
the versions are views of the same objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    # Whether the cluster serves ``plural/status``: Volcano's CRDs ship without it, so
    # their status is written with the object. Learnt at discovery; not part of identity.
    status_subresource: bool = field(default=True, compare=False)

    def __eq__(self, other: object) -> bool:
        # Every watch event compares its resource with PODS and NODES a few times, and
        # it is nearly always one of these very objects.
        if self is other:
            return True
        if not isinstance(other, Resource):
            return NotImplemented
        return (self.plural, self.group, self.version, self.kind, self.namespaced) == (
            other.plural,
            other.group,
            other.version,
            other.kind,
            other.namespaced,
        )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        return self.group not in BUILTIN_GROUPS

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}/{self.version}"

    def list_call(self, api: client.ApiClient, **query: Any) -> Any:
        """A list (or, with ``watch=True``, a watch) of every object, all namespaces;
        returns the raw urllib3 response."""
        query = {k: v for k, v in query.items() if v is not None}
        call = _BUILTIN_LISTS.get((self.group, self.plural))
        if call is None:
            # CRDs, and built-in alpha APIs the client has no typed call for (or one for
            # another version): the generic path serves any group/version/plural.
            return client.CustomObjectsApi(api).list_cluster_custom_object(
                self.group, self.version, self.plural, _preload_content=False, **query
            )
        return call(api)(_preload_content=False, **query)


BUILTIN_GROUPS = frozenset(
    {"", "scheduling.k8s.io", "coordination.k8s.io", "events.k8s.io", "policy", "storage.k8s.io"}
)

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)  # written, never watched
PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
# A gang with a pod a PodDisruptionBudget covers is no victim (``adapter.kube.budgets``).
DISRUPTION_BUDGETS = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True
)

# A pending pod's claims, and the volumes they are bound to: where the pod may go
# (``adapter.kube.volumes``).
CLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True)
VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
# Whether an unbound claim's volume is made where its pod goes (``WaitForFirstConsumer``),
# and where that may be (``adapter.kube.volumes``).
STORAGE_CLASSES = Resource(
    "storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False
)

# Inputs a snapshot can do without, each read as none where the API server refuses to
# list it (RBAC that predates it, a server without the API): PriorityClasses (admission
# copies a pod's priority into it), PodDisruptionBudgets (preemption's dry-run evictions
# still meet them), claims, volumes and StorageClasses (a pod with a claim waits).
# Without them scheduling goes on; without nodes, pods or PodGroups it could only go wrong.
OPTIONAL = (PRIORITY_CLASSES, DISRUPTION_BUDGETS, CLAIMS, VOLUMES, STORAGE_CLASSES)

_BUILTIN_LISTS: dict[tuple[str, str], Any] = {
    ("", "persistentvolumeclaims"): (
        lambda api: client.CoreV1Api(api).list_persistent_volume_claim_for_all_namespaces
    ),
    ("", "persistentvolumes"): lambda api: client.CoreV1Api(api).list_persistent_volume,
    ("", "nodes"): lambda api: client.CoreV1Api(api).list_node,
    ("", "pods"): lambda api: client.CoreV1Api(api).list_pod_for_all_namespaces,
    ("scheduling.k8s.io", "priorityclasses"): (
        lambda api: client.SchedulingV1Api(api).list_priority_class
    ),
    ("policy", "poddisruptionbudgets"): (
        lambda api: client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces
    ),
    ("storage.k8s.io", "storageclasses"): lambda api: client.StorageV1Api(api).list_storage_class,
}

# Every dialect gangsat reads, newest version first; a cluster serves some of them.
DIALECTS: tuple[Resource, ...] = (
    Resource("scheduling.sigs.dev", "v1alpha2", "podgroups", "PodGroup", namespaced=True),
    Resource("scheduling.sigs.dev", "v1alpha2", "queues", "Queue", namespaced=False),
    Resource("scheduling.incubator.k8s.io", "v1alpha1", "podgroups", "PodGroup", namespaced=True),
    Resource("scheduling.incubator.k8s.io", "v1alpha1", "queues", "Queue", namespaced=False),
    Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", namespaced=True),
    Resource("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False),
    Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", namespaced=True),
    # The same, as scheduler-plugins served it before v0.24 and Koordinator still does.
    Resource("scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup", namespaced=True),
    # The upstream Workload API, built in behind the GenericWorkload feature gate: 1.37
    # serves v1beta1 and v1alpha3, 1.36 v1alpha2.
    Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", namespaced=True),
    Resource("scheduling.k8s.io", "v1alpha3", "podgroups", "PodGroup", namespaced=True),
    Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", namespaced=True),
    # 1.35: no PodGroup objects; Workloads list their pod groups (no status).
    Resource("scheduling.k8s.io", "v1alpha1", "workloads", "Workload", namespaced=True),
)


def served(
    dialects: Iterable[Resource], plurals: dict[tuple[str, str], set[str]]
) -> list[Resource]:
    """The dialect resources the API server serves, given its (group, version) -> resource
    names (``podgroups``, ``podgroups/status``, ...), each knowing its status subresource;
    one version of each collection, the first listed (newest)."""
    found = []
    collections = set()
    for r in dialects:
        names = plurals.get((r.group, r.version), set())
        if r.plural in names and (r.group, r.plural) not in collections:
            collections.add((r.group, r.plural))
            found.append(replace(r, status_subresource=f"{r.plural}/status" in names))
    return found


# Patch content types: a custom resource takes a JSON merge patch only; a built-in one a
# strategic merge patch too, which merges lists such as a pod's conditions by type.
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# Discovery runs on the loop thread now and then (``KubeCluster.rediscover``): a server
# that never answers must not stop the cycles.
DISCOVERY_TIMEOUT_S = (10, 30)


def discover(api: client.ApiClient) -> list[Resource]:
    """Every resource gangsat watches in this cluster: the built-ins plus served dialects.

    A group may serve PodGroups without Queues (a cluster with only one CRD installed),
    so each group-version's resource list is read, not just the group list."""
    group_list = client.ApisApi(api).get_api_versions(_request_timeout=DISCOVERY_TIMEOUT_S)
    versions = {g.name: {v.version for v in g.versions} for g in group_list.groups}
    wanted = sorted(
        (g, v) for g, v in {(r.group, r.version) for r in DIALECTS} if v in versions.get(g, set())
    )

    def resources_of(group_version: tuple[str, str]) -> set[str]:
        listing = client.CustomObjectsApi(api).get_api_resources(
            *group_version, _request_timeout=DISCOVERY_TIMEOUT_S
        )
        return {r.name for r in listing.resources} if listing else set()

    with ThreadPoolExecutor(max_workers=max(1, len(wanted))) as pool:
        plurals = dict(zip(wanted, pool.map(resources_of, wanted), strict=True))
    builtin = [NODES, PODS, PRIORITY_CLASSES, DISRUPTION_BUDGETS, CLAIMS, VOLUMES, STORAGE_CLASSES]
    return [*builtin, *served(DIALECTS, plurals)]


JSON = "application/json"


def path_of(resource: Resource, namespace: str | None, name: str = "", sub: str = "") -> str:
    """The path of one object (``sub``: of its subresource, ``status`` say), or without
    ``name`` of the collection objects are created in."""
    root = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    named = f"/{quote(name, safe='')}" if name else ""
    tail = f"/{quote(sub, safe='')}" if sub else ""
    return f"{root}{scope}/{resource.plural}{named}{tail}"


def request_headers(
    api: client.ApiClient, method: str, path: str, content_type: str = JSON
) -> dict[str, str]:
    """The headers of a lean request (``send``, ``connections.Connections``): the
    client's own, JSON both ways, and the configured token (refreshed by the client's
    hook where it has one)."""
    headers = {**api.default_headers, "Accept": JSON, "Content-Type": content_type}
    api.update_params_for_auth(headers, [], ["BearerToken"], path, method, None)
    return headers


def send(
    api: client.ApiClient,
    method: str,
    path: str,
    body: bytes,
    timeout: urllib3.Timeout | tuple[float, float],
    content_type: str = JSON,
) -> Any:
    """``method`` ``path`` with ``body`` (JSON, encoded), as the generated client sends it
    without its cost per call (its models, serialisation and parameter checks: a status
    patch cost 0.61-0.75 ms of CPU through it, 0.48-0.52 ms so, and each bind of a
    backlog as much). Returns the raw response, unread (``done``, ``read_json``); raises
    ``ApiException`` for any answer but 2xx, as the generated client does. Never retried
    by the pool on its own: every caller's writes are fenced by leadership, and a
    connect retried unseen could reach the server after the lease ran out."""
    if isinstance(timeout, tuple):  # (connect, read), as the generated client takes it
        timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
    headers = request_headers(api, method, path, content_type)
    response = api.rest_client.pool_manager.request(
        method,
        api.configuration.host + path,
        body=body,
        headers=headers,
        timeout=timeout,
        preload_content=False,
        retries=False,
    )
    if not 200 <= response.status <= 299:
        text = response.data.decode("utf-8", "replace")  # read whole: the connection is reused
        response.release_conn()
        error = ApiException(status=response.status, reason=response.reason, body=text)
        error.headers = response.headers  # Retry-After of a 429
        raise error
    return response


def raw(response: object) -> Any:
    """The urllib3 response of a client call made with ``_preload_content=False`` (the
    client's annotations promise a model, but the call returns the raw response)."""
    return response


def decode(data: bytes | str) -> Any:
    """One JSON document from the API server. orjson parses a pod in a third of the
    stdlib's time, and every watched object goes through here; what it refuses that the
    stdlib reads (NaN, a lone surrogate: no API server writes them, a fake might) is
    read by the stdlib, so both accept the same documents."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def read_json(response: object) -> Any:
    """The JSON body of such a raw response, connection released."""
    r = raw(response)
    try:
        return decode(r.data)
    finally:
        r.release_conn()


def version_after(response: object) -> str:
    """The resourceVersion a write's raw answer gives its object ("" where the answer does
    not say: written all the same), connection released."""
    try:
        written = read_json(response)
    except ValueError:
        return ""
    meta = written.get("metadata") if isinstance(written, Mapping) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def done(response: object) -> None:
    """Read and release a raw response whose body does not matter (a connection goes back
    to the pool only read to its end: else the next request reads this body)."""
    r = raw(response)
    r.drain_conn()
    r.release_conn()
