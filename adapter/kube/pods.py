"""A Pod object as the solver reads it: its requests as Kubernetes sums them, its node
predicates (selector, required affinity with matchFields, tolerations), its gang and
task, and what preemption reads (priority, policy, start). Used by ``convert`` for live
pods and for the pods a Job's template stands for. A pending pod with a placement rule
gangsat does not check is refused (``unmodelled``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import orjson

from adapter.kube.dialects import group_of
from adapter.kube.disruption import marked_victim
from adapter.kube.fields import (
    CONTAINER_LISTS,
    STATUS_LISTS,
    BadObject,
    Obj,
    listed,
    mappings,
    quantities,
)
from adapter.kube.host_ports import host_ports
from adapter.kube.memo import Shapes
from adapter.kube.unmodelled import inline_disk, unmodelled
from solver.model import CPU, HUGEPAGES_PREFIX, MEMORY, PODS, Pod, Resources
from solver.scheduling_terms import (
    NODE_NAME_FIELD,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Toleration,
)

# The task of a Volcano Job's pod, which its PodGroup's minTaskMember counts by.
TASK_ANNOTATION = "volcano.sh/task-spec"


def _requests(spec: Obj, status: Obj | None = None) -> dict[str, int]:
    """What the scheduler reserves, as Kubernetes sums it (``PodRequests``): containers and
    sidecars (init containers with ``restartPolicy: Always``, which keep running) summed;
    or, if larger, an init container with the sidecars started before it; plus overhead.

    A resource a container (or the pod) sets only a limit for is requested at its
    limit, as the API server defaults it, resource by resource. Pod-level resources
    (``spec.resources``, PodLevelResources) replace the containers' sum for cpu, memory
    and hugepages, the resources they may set.

    A bound pod's ``status`` counts too (in-place resize, on by default since 1.33): a
    container holds the most of what its spec asks, what the kubelet runs it with and
    what it allocated, as kube-scheduler counts it; where a resize is infeasible, not
    what the spec asks.
    """
    resized = _resized(status) if isinstance(status, Mapping) else {}

    def of(container: Obj, where: str, statuses: str = "") -> dict[str, int]:
        resources = container.get("resources") or {}
        limits = quantities(resources.get("limits"), f"{where}.limits")
        asked = {**limits, **quantities(resources.get("requests"), f"{where}.requests")}
        seen = resized.get((statuses, str(container.get("name")))) if statuses else None
        if seen is None:
            return asked
        running, allocated, infeasible = seen
        held = {} if infeasible else asked
        for amounts in (running, allocated):
            for r, q in amounts.items():
                held[r] = max(held.get(r, 0), q)
        return held

    total: dict[str, int] = {}
    for i, c in enumerate(spec.get("containers") or []):
        for r, q in of(c, f"spec.containers[{i}].resources", "containerStatuses").items():
            total[r] = total.get(r, 0) + q
    sidecars: dict[str, int] = {}  # of the sidecars started so far
    init_peak: dict[str, int] = {}
    for i, c in enumerate(spec.get("initContainers") or []):
        sidecar = isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
        statuses = "initContainerStatuses" if sidecar else ""  # a sidecar may be resized
        requests = of(c, f"spec.initContainers[{i}].resources", statuses)
        if sidecar:
            for r, q in requests.items():
                total[r] = total.get(r, 0) + q
                sidecars[r] = sidecars.get(r, 0) + q
            running = sidecars
        else:
            running = {r: requests.get(r, 0) + sidecars.get(r, 0) for r in {*requests, *sidecars}}
        for r, q in running.items():
            init_peak[r] = max(init_peak.get(r, 0), q)
    for r, q in init_peak.items():
        total[r] = max(total.get(r, 0), q)
    for r, q in of(spec, "spec.resources").items():
        if r in (CPU, MEMORY) or r.startswith(HUGEPAGES_PREFIX):
            total[r] = q
    for r, q in quantities(spec.get("overhead"), "spec.overhead").items():
        total[r] = total.get(r, 0) + q
    total.pop(PODS, None)
    return total


def _resized(status: Obj) -> dict[tuple[str, str], tuple[dict[str, int], dict[str, int], bool]]:
    """Per (status list, container name), from a pod's status: the requests the kubelet
    runs it with, what it allocated, and whether a resize was found infeasible. Only
    containers whose status reports resources (kube-scheduler reads no other)."""
    infeasible = status.get("resize") == "Infeasible" or any(
        isinstance(c, Mapping)
        and c.get("type") == "PodResizePending"
        and c.get("reason") == "Infeasible"
        for c in listed(status.get("conditions"))
    )
    out = {}
    for key in STATUS_LISTS:
        for cs in listed(status.get(key)):
            if not isinstance(cs, Mapping) or not isinstance(cs.get("resources"), Mapping):
                continue
            where = f"status.{key}[{cs.get('name')}]"
            running = quantities(cs["resources"].get("requests"), f"{where}.resources.requests")
            allocated = quantities(cs.get("allocatedResources"), f"{where}.allocatedResources")
            out[(key, str(cs.get("name")))] = (running, allocated, infeasible)
    return out


def _affinity(spec: Obj) -> tuple[NodeSelectorTerm, ...]:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return node_selector_terms(required)


def node_selector_terms(selector: Obj) -> tuple[NodeSelectorTerm, ...]:
    """A NodeSelector (a pod's required node affinity, a PersistentVolume's): its terms.
    Equal terms are one object, as tolerations are (``_tolerations``): ``prepare`` tells
    pods apart by them, and terms of different shapes compared field by field through
    pydantic (95,000 comparisons a cycle at 5,000 real-shaped nodes)."""
    key = tuple(
        (
            _requirements_key(term.get("matchExpressions")),
            _requirements_key(term.get("matchFields")),
        )
        for term in selector.get("nodeSelectorTerms") or []
    )
    try:
        hash(key)
    except TypeError:  # a value no API server stores: the model says what is wrong
        return _terms(key)
    return _interned_terms(key)


RequirementsKey = tuple[tuple[Any, Any, tuple[Any, ...]], ...]


def _requirements_key(given: Any) -> RequirementsKey:
    return tuple((e["key"], e["operator"], tuple(e.get("values") or ())) for e in given or [])


def _terms(
    key: tuple[tuple[RequirementsKey, RequirementsKey], ...],
) -> tuple[NodeSelectorTerm, ...]:
    def requirements(given: RequirementsKey) -> tuple[NodeSelectorRequirement, ...]:
        return tuple(
            NodeSelectorRequirement(key=k, operator=operator, values=values)
            for k, operator, values in given
        )

    terms = []
    for expressions, fields_key in key:
        fields = requirements(fields_key)
        if any(f.key != NODE_NAME_FIELD for f in fields):
            # The API server admits no other field: a term naming one matches no node.
            raise BadObject(f"matchFields may only read {NODE_NAME_FIELD}")
        terms.append(
            NodeSelectorTerm(match_expressions=requirements(expressions), match_fields=fields)
        )
    return tuple(terms)


_interned_terms = functools.lru_cache(maxsize=4096)(_terms)


def room_held(
    namespace: str,
    name: str,
    metadata: Obj,
    spec: Obj,
    created: float,
    node: str,
    status: Obj | None = None,
) -> Pod:
    """A bound pod read for the room it holds on ``node`` alone: its requests, as
    kube-scheduler counts them whatever else the pod says. For a bound pod whose other
    fields gangsat cannot read (a toleration operator of a newer API, say): left out,
    its node would look freer than it is, and a pod placed there be refused by the
    kubelet after its gang was bound."""
    try:
        group = group_of({"metadata": metadata, "spec": spec})
    except (BadObject, AttributeError, TypeError):
        group = None
    return Pod(
        name=f"{namespace}/{name}",
        namespace=namespace,
        requests=_resources(tuple(sorted(_requests(spec, status).items()))),
        # Its gang's member still: it counts towards the gang (and its task) and the
        # queue's use.
        gang=f"{namespace}/{group}" if group else None,
        task=str((metadata.get("annotations") or {}).get(TASK_ANNOTATION) or "") or None,
        node_name=node,
        created_s=created,
        started_s=created,
    )


# Most pods of a cluster share their requests and tolerations (every pod gets the same
# two from the DefaultTolerationSeconds admission plugin): built once, as validated
# models, they cost a dictionary lookup instead of a validation per pod.
@functools.lru_cache(maxsize=4096)
def _resources(requests: tuple[tuple[str, int], ...]) -> Resources:
    return Resources(dict(requests))


@functools.lru_cache(maxsize=4096)
def _tolerations(given: tuple[tuple[Any, Any, Any, Any], ...]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(key=key, operator=operator, value=value, effect=effect)
        for key, operator, value, effect in given
    )


def pod_of_object(
    namespace: str,
    name: str,
    metadata: Obj,
    spec: Obj,
    created: float,
    priorities: Mapping[str, int],
    default_priority: int,
    started: float | None = None,
    terminating: bool = False,
    status: Obj | None = None,
    shapes: Shapes | None = None,
) -> Pod:
    """``status``: a bound pod's, for the resources it holds (``_requests``) and its mark as
    a victim (``marked_victim``); a pending pod's, for where a preemptor is nominated
    (``_nominated``). ``shapes``: pods read before, by all their conversion reads but their
    name, gang, node, times, nomination and mark (``shape_key``); a pod of a known shape is
    a copy with its own, not read again (a 2-container training pod, 8 per gang: 49-54 ->
    27-29 us per pod). Its gang is not in the key, so the pods of many gangs of one template
    (a backlog of 1,000 gangs of 3 pods) are one shape, and so are the bound pods of one
    template on many nodes."""
    bound = bool(spec.get("nodeName"))
    try:
        group = group_of({"metadata": metadata, "spec": spec})
        task = str((metadata.get("annotations") or {}).get(TASK_ANNOTATION) or "") or None
        owners = metadata.get("ownerReferences") or ()
        daemon = bool(owners) and any(
            isinstance(ref, dict) and ref.get("kind") == "DaemonSet" for ref in owners
        )
    except (AttributeError, TypeError):
        # Malformed: the rule it asks for, if any, is what the user reads first.
        if not bound and (rule := unmodelled(spec)) is not None:
            raise BadObject(rule) from None
        raise
    priority = spec.get("priority")
    if not isinstance(priority, int):
        priority = priorities.get(spec.get("priorityClassName") or "", default_priority)
    gang = f"{namespace}/{group}" if group else None
    node = spec.get("nodeName") or None
    key = None
    # A node name of another type is the model's to refuse, which a copy would not do.
    if shapes is not None and isinstance(node, str | None):
        key = shape_key(namespace, task, daemon, priority, spec, status if bound else None)
        template = shapes.get(key) if key is not None else None
        if template is not None:
            return template.model_copy(
                update={
                    "name": f"{namespace}/{name}",
                    "gang": gang,
                    "node_name": node,
                    "created_s": created,
                    "started_s": started if bound else None,
                    "terminating": terminating,
                    "nominated_node": None if bound else _nominated(status),
                    "marked_victim": marked_victim(status) if bound else None,
                }
            )
    if not bound and (rule := unmodelled(spec)) is not None:
        raise BadObject(rule)
    # A bound pod's mistake is its own: it runs as it is, holding the ports it could.
    ports = tuple(sorted(host_ports(spec, strict=not bound)))
    pod = Pod(
        name=f"{namespace}/{name}",
        namespace=namespace,
        requests=_resources(tuple(sorted(_requests(spec, status if bound else None).items()))),
        priority=priority,
        gang=gang,
        task=task,
        node_selector=spec.get("nodeSelector") or {},
        affinity=_affinity(spec),
        tolerations=_tolerations(
            tuple(
                (
                    t.get("key") or "",
                    t.get("operator") or "Equal",
                    t.get("value") or "",
                    t.get("effect") or "",
                )
                for t in spec.get("tolerations") or []
            )
        ),
        node_name=node,
        host_ports=ports,
        created_s=created,
        gates=tuple(
            str(g.get("name") or "")
            for g in spec.get("schedulingGates") or []
            if isinstance(g, dict)
        ),
        daemon=daemon,
        # The API server copies the PriorityClass's policy into the pod.
        may_preempt=spec.get("preemptionPolicy") != "Never",
        started_s=started if bound else None,
        terminating=terminating,
        nominated_node=None if bound else _nominated(status),
        marked_victim=marked_victim(status) if bound else None,
    )
    if key is not None and shapes is not None:
        shapes.put(key, pod)
    return pod


# What no conversion here reads (``pod_of_object``, ``unmodelled``) and what differs from
# pod to pod of one template: the ServiceAccount admission's ``kube-api-access-<random>``
# volume and its mounts, an indexed Job's hostname and index variables; and the node,
# which a copy takes as its own. Left out of a shape's key, so that a gang's pods share
# one; a field read here must not be listed unless the copy sets what it decides or the
# key holds what is read of it (the volumes' inline disks).
UNREAD_SPEC = frozenset({"volumes", "hostname", "subdomain", "nodeName"})
UNREAD_CONTAINER = frozenset({"env", "envFrom", "volumeMounts", "command", "args", "image"})


def shape_key(
    namespace: str,
    task: str | None,
    daemon: bool,
    priority: int,
    spec: Obj,
    status: Obj | None = None,
) -> tuple[Any, ...] | None:
    """All a pod's conversion reads but its name, gang, node, times, nomination and mark:
    its spec but the fields listed above (any other may decide a rule), what it takes from
    elsewhere, whether it is bound, and of a bound pod's ``status`` what its requests read
    (``_resized``). None for a spec that is not as JSON has it (a manifest's YAML may hold a
    date where a string was meant, JSON decoded by the standard library a NaN): such a spec
    may be told apart from another only by a type the key does not keep, so it is read
    alone."""
    read: dict[str, Any] = {k: v for k, v in spec.items() if k not in UNREAD_SPEC}
    for field in CONTAINER_LISTS:
        containers = read.get(field)
        if isinstance(containers, list):
            # (as the cache keeps them, trimmed already: no copy; ``kept``)
            read[field] = [
                {k: v for k, v in c.items() if k not in UNREAD_CONTAINER}
                if isinstance(c, dict) and not UNREAD_CONTAINER.isdisjoint(c)
                else c
                for c in containers
            ]
    bound = bool(spec.get("nodeName"))
    held: Any = None
    if bound and isinstance(status, Mapping):
        held = [
            status.get("resize"),
            [
                c
                for c in listed(status.get("conditions"))
                if isinstance(c, Mapping) and c.get("type") == "PodResizePending"
            ],
            [
                [k, c.get("name"), c.get("resources"), c.get("allocatedResources")]
                for k in STATUS_LISTS
                for c in listed(status.get(k))
                if isinstance(c, Mapping)
            ],
        ]
    # Of the volumes, what ``unmodelled`` reads: the inline disks it refuses.
    volumes = spec.get("volumes")
    disks = [d for v in mappings(volumes) if (d := inline_disk(v)) is not None] if volumes else []
    shape = [read, held, disks]
    try:
        text = orjson.dumps(shape)
    except TypeError:  # orjson's JSONEncodeError is one
        return None
    if orjson.loads(text) != shape:
        return None
    return (namespace, task, daemon, priority, bound, text)


def _nominated(status: Obj | None) -> str | None:
    """A pending pod's status.nominatedNodeName; anything but a node name reads as none:
    a nomination only ever holds room, so a bad one must not refuse the pod."""
    node = (status or {}).get("nominatedNodeName") if isinstance(status, dict) else None
    return node if isinstance(node, str) and node else None
