"""Kubernetes objects -> one ``ClusterState``: gangsat reads every PodGroup/Queue dialect.

Input is plain objects as the API server or a manifest file gives them (dicts, not
client models: decoding thousands of pods into models costs more than the cycle). Output
is the snapshot plus *findings*: each object that could not be used, and why, so the
loop can report it as a condition or Event instead of failing the cycle. Dialects:
``adapter.kube.dialects``.

Names: pods and PodGroups are namespaced, so their names in the snapshot are
``namespace/name``; nodes and queues are cluster-scoped. A pod without a group is a gang
of one. Pending pods count only when they name one of our schedulers; bound pods of any
scheduler hold node capacity; finished pods (Succeeded, Failed) hold nothing. A batch/v1
Job in a manifest stands for ``parallelism`` pending pods made from its template, so an
unapplied manifest can be asked "what would gangsat do".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from adapter.errors import validation_lines
from adapter.kube import dialects
from adapter.kube.anti_affinity import BoundAntiAffinity
from adapter.kube.budgets import Budgets
from adapter.kube.dialects import (
    COSCHEDULING_GROUPS,
    PODGROUP_GROUPS,
    QUEUE_GROUPS,
    WORKLOAD_GROUP,
    group_of,
    workload_template,
)
from adapter.kube.fields import (
    LEAVING,
    BadObject,
    Obj,
    api_group,
    created_s,
    finished,
    meta,
    scheduler_of,
)
from adapter.kube.gang_groups import GangGroups, listed
from adapter.kube.jobs import job_pods, other_scheduler, template_of
from adapter.kube.members import (
    Declared,
    priorities_of_pods,
    wait_for_unreadable,
    workload_instances,
)
from adapter.kube.memo import Memo, Seen, Shapes
from adapter.kube.nodes import node_of_object
from adapter.kube.pod_rules import read_pod_rules
from adapter.kube.pods import TASK_ANNOTATION, pod_of_object, room_held
from adapter.kube.reading import MISSING, Finding, Reading
from adapter.kube.unusable import closed, out_of_service
from adapter.kube.volumes import Claims, Waits
from solver.model import ClusterState, Gang, Node, Pod, Queue

VOLUME_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "StorageClass")
ROOM_ONLY = "read only for the room it holds"


READ_KINDS = (
    "Node",
    "Pod",
    "PodGroup",
    "Queue",
    "Workload",
    "PriorityClass",
    "Job",
    "PodDisruptionBudget",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
)
READ_TEXT = (
    "Node, Pod, PodGroup, Queue, PriorityClass, PersistentVolumeClaim, PersistentVolume, "
    "StorageClass, scheduling.k8s.io Workloads and batch Jobs"
)


@dataclass
class Conversion:
    state: ClusterState
    findings: list[Finding] = field(default_factory=list)
    # What was left alone on purpose, one line per kind or scheduler: not a problem of
    # the object (no Event), but a manifest's reader wants to know (`gangsat solve`).
    ignored: list[str] = field(default_factory=list)
    # Gangs whose pods all name another scheduler (bound by it): their pods count for the
    # room they hold, but their PodGroups are that scheduler's to report on.
    foreign_gangs: frozenset[str] = frozenset()
    selecting: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # ``provisioning``


# --- the whole set ------------------------------------------------------------------------


def _shape_problem(obj: Mapping[str, Any]) -> str | None:
    """What makes an object unreadable as any Kubernetes object, or None."""
    for key in ("metadata", "spec", "status"):
        value = obj.get(key)
        # type() first: a decoded object's parts are dicts, and isinstance of an ABC is slow
        if value is not None and type(value) is not dict and not isinstance(value, Mapping):
            return f"malformed: {key} must be a mapping, got {type(value).__name__}"
    if not isinstance(obj.get("kind", ""), str):
        return "malformed: kind must be a string"
    return None


def convert(
    objects: Iterable[Obj],
    scheduler_names: Collection[str] = ("gangsat",),
    memo: Memo | None = None,
) -> Conversion:
    """A snapshot of ``objects``; what cannot be used becomes a finding, not an error.

    ``memo`` (kept by the caller from one cycle to the next) saves re-reading objects
    that have not changed since: on a big cluster most of them."""
    findings: list[Finding] = []
    reading = Reading(memo, findings)
    shapes = Shapes(memo.shapes if memo is not None else {}, reading.fresh.shapes)
    # Sorted by kind in one pass, each kind in the order given (of two objects of one
    # name, the later is kept), rather than a pass over every object for each kind read
    # apart. Pods and Jobs keep their place among all objects (a pod with no creation
    # time is ordered by it).
    by_kind: defaultdict[Any, list[Obj]] = defaultdict(list)
    # Pods and Jobs, where they came, and what the memo kept of the very object (looked
    # up once: most of a big cluster's objects are).
    placed: list[tuple[int, Obj, Seen | None]] = []
    rest: list[Obj] = []  # every other kind, for the loop that reads them
    index = 0
    refused: set[str] = set()  # nodes whose objects cannot be read
    unreadable_groups: dict[str, str] = {}  # PodGroups that cannot be read -> why
    seen_before = reading.seen_before
    for o in objects:
        if (hit := seen_before(o)) is None:  # else its shape was read when it was first seen
            # type() first: the cache's objects are dicts, and isinstance of an ABC is slow
            if type(o) is not dict and not isinstance(o, Mapping):
                continue
            if (problem := _shape_problem(o)) is not None:
                raw = o.get("metadata")
                name = raw.get("name") if isinstance(raw, Mapping) else None
                label = str(name) if name else "(unnamed)"
                findings.append(Finding(kind=str(o.get("kind")), name=label, message=problem))
                if o.get("kind") == "Node" and name:
                    refused.add(label)  # kept for the pods bound there (``kube.unusable``)
                elif o.get("kind") == "PodGroup" and name and isinstance(raw, Mapping):
                    unreadable_groups[f"{raw.get('namespace')}/{name}"] = problem
                continue
        kind = o.get("kind")
        if kind == "Pod" or kind == "Job":
            placed.append((index, o, hit))
        if kind != "Pod":  # a Job of another API group is reported unread there
            rest.append(o)
            if type(kind) is str:  # (one the memo knows was read when it was one)
                by_kind[kind].append(o)
        index += 1
    priorities: dict[str, int] = {}
    default_priority = 0
    for o in by_kind["PriorityClass"]:
        name = (o.get("metadata") or {}).get("name")
        value = o.get("value")
        if isinstance(name, str) and isinstance(value, int):
            priorities[name] = value
            if o.get("globalDefault"):
                default_priority = value
    reading.priority_key = (
        tuple(sorted(priorities.items())),
        default_priority,
        tuple(scheduler_names),
    )
    attempt, recalled = reading.attempt, reading.recalled

    unread: Counter[str] = Counter()  # kinds gangsat does not read
    others: Counter[str] = Counter()  # pending pods by another scheduler's name
    # per gang, members that ran to completion, by task ("" for none)
    succeeded: defaultdict[str, Counter[str]] = defaultdict(Counter)
    budgets = Budgets(by_kind["PodDisruptionBudget"])
    claims = Claims(o for kind in VOLUME_KINDS for o in by_kind[kind])
    # Pending pods with claims -> their claims and uid (checked once every user is known;
    # of two objects of one name, the one kept)
    claiming: dict[str, tuple[list[tuple[str, bool]], str | None]] = {}
    budgeted: set[str] = set()  # gangs with a bound pod a disruption budget covers
    nodes: dict[str, Node] = {}
    gangs: dict[str, Gang] = {}
    queues: dict[str, Queue] = {}
    pods: dict[str, Pod] = {}
    templates: dict[str, Gang] = {}  # 1.35 Workloads' pod groups
    gang_groups = GangGroups()  # the groups PodGroups and pods list (Koordinator's)
    by_pods: set[str] = set()  # gangs whose priority is their pods' (no field of their own)
    owned: set[str] = set()  # gangs with a pod gangsat schedules
    foreign: set[str] = set()  # gangs with a pod another scheduler bound

    def keep(kind: str, table: dict[str, Any], name: str, value: Any) -> None:
        # An API server keeps names unique; a manifest file may not: say so, last wins.
        if name in table:
            findings.append(
                Finding(kind=kind, name=name, message="duplicate name: the later object is used")
            )
        table[name] = value

    for o in rest:  # pods are the next loop's, once every node is known
        kind = o.get("kind")
        group = api_group(str(o.get("apiVersion") or ""))
        if kind == "Node":
            node = attempt("Node", o, lambda o=o: node_of_object(o))
            if node is not None:
                keep("Node", nodes, node.name, node)
            elif isinstance(raw := o.get("metadata"), Mapping) and raw.get("name"):
                refused.add(str(raw["name"]))  # kept for its pods (``kube.unusable``)
        elif kind == "PodGroup" and group in PODGROUP_GROUPS:
            before = len(findings)
            gang = attempt(
                "PodGroup", o, lambda o=o: dialects.podgroup(o, priorities, default_priority)
            )
            if gang is not None and group in COSCHEDULING_GROUPS:
                try:  # (outside the memo: one lookup, where most PodGroups list no group)
                    gang_groups.note(gang.name, listed(o, gang.name.partition("/")[0]))
                except BadObject as e:
                    findings.append(Finding(kind="PodGroup", name=gang.name, message=str(e)))
                    gang = None
            if gang is None and len(findings) > before:
                unreadable_groups[findings[before].name] = findings[before].message
            elif gang is not None:
                keep("PodGroup", gangs, gang.name, gang)
                if group in COSCHEDULING_GROUPS:
                    by_pods.add(gang.name)
                else:  # of two dialects' PodGroups of one name, the later is kept
                    by_pods.discard(gang.name)
        elif kind == "Workload" and group == WORKLOAD_GROUP:
            read = attempt("Workload", o, lambda o=o: dialects.workload_templates(o))
            templates.update(read or {})
        elif kind == "Queue" and group in QUEUE_GROUPS:
            queue = attempt("Queue", o, lambda o=o: dialects.queue(o))
            if queue is not None:
                keep("Queue", queues, queue.name, queue)
        elif kind in ("PodGroup", "Queue"):
            raw = o.get("metadata")
            metadata: Obj = raw if isinstance(raw, dict) else {}
            known = ", ".join(sorted(PODGROUP_GROUPS if kind == "PodGroup" else QUEUE_GROUPS))
            message = f"apiVersion {o.get('apiVersion')!r} is not a dialect gangsat reads ({known})"
            findings.append(
                Finding(kind=str(kind), name=str(metadata.get("name")), message=message)
            )
        elif kind not in READ_KINDS:
            unread[str(kind)] += 1
        elif kind == "Workload" or (kind == "Job" and group != "batch"):
            # A kind gangsat reads, of another API group (Kueue's Workloads): not read.
            unread[f"{kind} ({o.get('apiVersion')})"] += 1

    def pod_of(o: Obj, spec: Obj, index: int) -> Pod:
        created = created_s(o)
        try:
            return pod_of_object(
                *meta(o),
                o.get("metadata") or {},
                spec,
                created or float(index),
                priorities,
                default_priority,
                # The cache ignores status changes (startTime among them): the age since
                # creation bounds the work an eviction loses from above.
                created or None,
                bool(o.get(LEAVING)),
                o.get("status"),
                shapes,
            )
        except (BadObject, ValidationError, KeyError, TypeError, AttributeError) as e:
            node = spec.get("nodeName")
            if not isinstance(node, str) or not node:
                raise
            # May raise too: then the node's room is unknown (``unknown_room``).
            at = created or float(index)
            held = room_held(*meta(o), o.get("metadata") or {}, spec, at, node, o.get("status"))
            if isinstance(e, ValidationError):
                why = "; ".join(line.removeprefix(": ") for line in validation_lines("", e, None))
            else:
                why = str(e).splitlines()[0]
            message = f"{ROOM_ONLY} on {node} (its gang no victim): {why}"
            findings.append(Finding(kind="Pod", name=held.name, message=message))
            return held

    for name in sorted(refused - nodes.keys()):
        nodes[name] = out_of_service(name)
    declared = Declared(findings, gang_groups)
    declares = declared.read
    anti = BoundAntiAffinity()
    unknown_room: set[str] = set()  # nodes with a bound pod whose requests are unreadable
    pending: list[tuple[Obj, str]] = []  # pending pods, as objects, and their keys
    covered = bool(budgets)
    for index, o, hit in placed:
        kind = o.get("kind")
        if kind == "Pod":
            # Seen as it is: it passed the checks below then (the scheduler names are in
            # the memo's key), and reading it again would cost more than converting did.
            pod = recalled(o, hit)
            if pod is MISSING:
                if finished(o.get("status")):
                    # A member that ran to completion counts towards minMember.
                    if (o.get("status") or {}).get("phase") == "Succeeded":
                        _count_succeeded(o, succeeded)
                    continue
                spec = o.get("spec") or {}
                scheduler = scheduler_of(spec)
                if not spec.get("nodeName") and scheduler not in scheduler_names:
                    others[str(scheduler)] += 1
                    continue
                pod = attempt(
                    "Pod", o, lambda o=o, spec=spec, index=index: pod_of(o, spec, index), True
                )
            if pod is None:
                node_name = (o.get("spec") or {}).get("nodeName")
                if isinstance(node_name, str) and node_name in nodes:
                    unknown_room.add(node_name)
                    anti.add(o, o.get("spec") or {}, node_name)  # its terms hold as its room does
                elif not node_name:
                    _of_its_gang(findings, o)
                continue
            name, node_name, gang_name = pod.name, pod.node_name, pod.gang
            if node_name is not None and node_name not in nodes:
                findings.append(
                    Finding(kind="Pod", name=name, message=f"bound to unknown node {node_name}")
                )
                continue
            if (
                gang_name is not None
                and gang_name not in gangs
                and workload_template(gang_name) is None  # (1.35: no pod declares these)
                and not declares(o, pod)
            ):
                continue  # (``members.Declared``: a pending pod of an unreadable minimum)
            # ``keep``, inline: once per pod of a big cluster at every snapshot
            if name in pods:
                keep("Pod", pods, name, pod)
            pods[name] = pod
            claiming.pop(name, None)  # of an earlier object of the same name
            # A pod read into a Pod has a mapping for a spec: type() first, as above.
            spec = o.get("spec")
            if type(spec) is not dict and not isinstance(spec, Mapping):
                spec = {}
            if node_name is not None:
                anti.add(o, spec, node_name)
                if claims.exclusive or claims.made_where_placed:
                    claims.use(pod.namespace, name.partition("/")[2], spec, True, pod)
            else:
                pending.append((o, name))
                if used := claims.use(pod.namespace, name.partition("/")[2], spec, False):
                    claiming[name] = (used, (o.get("metadata") or {}).get("uid"))
            if gang_name is not None:
                if node_name is not None and covered and budgets.cover(o):
                    budgeted.add(gang_name)
                # Read again for a recalled pod too: one lookup, where keeping it in the
                # memo would cost a lookup as well.
                mine = scheduler_of(spec) in scheduler_names
                (owned if mine else foreign).add(gang_name)
        elif kind == "Job" and api_group(str(o.get("apiVersion") or "")) == "batch":
            if (theirs := other_scheduler(o, scheduler_names)) is not None:
                if theirs[1]:
                    others[theirs[0]] += theirs[1]
                continue
            for pod in (
                attempt(
                    "Job",
                    o,
                    lambda o=o, index=index: job_pods(o, priorities, default_priority, index),
                )
                or []
            ):
                if pod.gang is not None and pod.gang not in gangs:
                    # The template's own labels and annotations declare its pods' gang.
                    made = ((o.get("spec") or {}).get("template") or {}).get("metadata")
                    if not declares({"metadata": made or {}}, pod):
                        continue
                pods[pod.name] = pod
                pending.append((template_of(o), pod.name))
                claiming.pop(pod.name, None)
                template = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
                if used := claims.use(pod.namespace, pod.name.partition("/")[2], template, False):
                    claiming[pod.name] = (used, None)
                if pod.gang is not None:
                    owned.add(pod.gang)

    closed(nodes, unknown_room, findings)
    _claims_read(pods, claims, claiming, findings)
    read_pod_rules(pending, anti, pods, nodes, findings)
    if templates:  # (without, no pod names a Workload's group: every pod read for none)
        workload_instances(templates, pods.values(), gangs)
    by_pods |= declared.gangs(pods.values(), gangs)
    if by_pods:
        priorities_of_pods(by_pods, pods.values(), gangs)
    if unreadable_groups:
        wait_for_unreadable(unreadable_groups, pods, gangs, findings)
    for name, by_task in succeeded.items():
        if name in gangs:
            tasked = {task: n for task, n in by_task.items() if task}
            gangs[name] = gangs[name].model_copy(
                update={"succeeded": by_task.total(), "succeeded_by_task": tasked}
            )
    # Gangs with a bound pod read only for its room (from its finding: a memoised pod's
    # is replayed, where pod_of does not run again).
    opaque = {
        gang
        for f in findings
        if f.kind == "Pod" and f.message.startswith(ROOM_ONLY) and f.name in pods
        if (gang := pods[f.name].gang) is not None
    }
    for name in (budgeted | opaque) & gangs.keys():
        gangs[name] = gangs[name].model_copy(update={"preemptible": False})
    gang_groups.merge(gangs, pods, findings, unreadable_groups)
    reading.kept()
    # Not validated again: each part is a model read above, and names are unique by
    # construction (the tables are keyed by them), which is all the snapshot's own check
    # reads (at 5,000 nodes its pass over every pod took 13-20 ms of each cycle).
    state = ClusterState.model_construct(
        nodes=tuple(nodes.values()),
        pods=tuple(pods.values()),
        gangs=tuple(gangs.values()),
        queues=tuple(queues.values()),
    )
    ours = ", ".join(sorted(scheduler_names))
    ignored = [
        f"{count} pending pod(s) with schedulerName {name!r} left to that scheduler "
        f"(gangsat schedules {ours})"
        for name, count in sorted(others.items())
    ]
    ignored += [
        f"{count} {kind} object(s) not read: gangsat reads {READ_TEXT} "
        f"(their pods count once they exist)"
        for kind, count in sorted(unread.items())
    ]
    return Conversion(state, findings, ignored, frozenset(foreign - owned), claims.selecting)


def _claims_read(
    pods: dict[str, Pod],
    claims: Claims,
    claiming: Mapping[str, tuple[list[tuple[str, bool]], str | None]],
    findings: list[Finding],
) -> None:
    """Pending pods with volume claims (``claiming``: their claims and uid), checked once
    every user of a claim is known: each placed where its volumes allow, or taken out of
    the snapshot with a finding (it waits, or its spec cannot be used)."""
    placeable: dict[str, list[tuple[str, bool]]] = {}
    for name, (used, uid) in claiming.items():
        if pods[name].gates:
            continue  # not scheduled until its gates lift: its claims are read then
        try:
            pods[name] = claims.placed(pods[name], used, uid)
            placeable[name] = used
        except (Waits, BadObject) as e:
            pod = pods.pop(name)
            waits = isinstance(e, Waits)
            # Either way of its gang: its status says the member waits, or is refused.
            reason = "FailedScheduling" if waits else "InvalidSpec"
            findings.append(
                Finding(kind="Pod", name=name, message=str(e), reason=reason, gang=pod.gang)
            )
    findings += claims.unmade
    for name, why in sorted(claims.one_at_a_time(placeable).items()):
        gang = pods.pop(name).gang
        findings.append(
            Finding(kind="Pod", name=name, message=why, reason="FailedScheduling", gang=gang)
        )


def _of_its_gang(findings: list[Finding], o: Obj) -> None:
    """A pending pod refused (its finding the last one made): the finding names its gang,
    whose status then says that a member exists that gangsat cannot schedule. Else the
    gang's NotEnoughTasks counted only its other pods, as if the pod did not exist."""
    if not findings or findings[-1].kind != "Pod" or findings[-1].gang is not None:
        return
    try:
        namespace, name = meta(o)
        group = group_of(o)
    except (AttributeError, TypeError, KeyError, ValueError, BadObject):
        return  # too malformed to name a gang: its finding says so
    # (A manifest's pod of no namespace is named without one.)
    if group and findings[-1].name in (f"{namespace}/{name}", name):
        findings[-1] = findings[-1].model_copy(update={"gang": f"{namespace}/{group}"})


def _count_succeeded(pod: Obj, succeeded: defaultdict[str, Counter[str]]) -> None:
    """Count a finished pod towards its gang (and its task); a malformed one (it is
    finished: nothing else reads it) counts towards none."""
    try:
        group = group_of(pod)
        namespace = meta(pod)[0]
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        task = str(annotations.get(TASK_ANNOTATION) or "")
    except (AttributeError, TypeError, KeyError, BadObject):
        return
    if group:
        succeeded[f"{namespace}/{group}"][task] += 1
