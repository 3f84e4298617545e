"""A batch/v1 Job in a manifest, read as the pending pods its controller would make from
its template (``parallelism``, less what a Job read from a cluster runs or has finished;
so a manifest, applied or not, can be asked "what would gangsat do"), and what a bound
pod's anti-affinity can tell of them (``convert``)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from adapter.kube.fields import BadObject, Obj, created_s, int_field, meta, scheduler_of
from adapter.kube.memo import Shapes
from adapter.kube.pods import pod_of_object
from solver.model import Pod

MAX_JOB_PODS = 20_000  # pods of one Job: a finding above, not minutes of conversion


def template_of(job: Obj) -> Obj:
    """What a Job's pods are as anti-affinity reads them: the Job's namespace, its
    template's labels and those the Job controller adds by the Job's name and uid (not
    the completion index's, unknown before it makes them), and its template's spec."""
    template = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    metadata = job.get("metadata") or {}
    labels = dict(template.get("labels") or {})
    name = metadata.get("name")
    if isinstance(name, str):
        labels.update({"job-name": name, "batch.kubernetes.io/job-name": name})
    uid = metadata.get("uid")
    if isinstance(uid, str) and uid:
        labels.update({"controller-uid": uid, "batch.kubernetes.io/controller-uid": uid})
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {"metadata": {"namespace": metadata.get("namespace"), "labels": labels}, "spec": spec}


# A Job's conditions once it has ended: its controller makes no more pods.
ENDED = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")


# ``spec.managedBy`` of a Job the built-in controller runs (Kubernetes 1.32+).
JOB_CONTROLLER = "kubernetes.io/job-controller"


def pods_to_make(job: Obj) -> int:
    """How many pods the Job's controller would make now: as many as run at once
    (``parallelism``, at most the completions still wanted), less those it has running
    (``status.active``, of a Job read from a cluster); none for a Job suspended or ended,
    or managed by another controller (``spec.managedBy``)."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    if not isinstance(status, Mapping):
        raise BadObject(f"status must be a mapping, got {type(status).__name__}")
    if spec.get("suspend") is True:
        return 0  # the controller creates no pod until it is resumed
    if spec.get("managedBy") not in (None, JOB_CONTROLLER):
        # Another controller's (Kueue's MultiKueue runs its pods in a worker cluster):
        # the Job controller here makes none.
        return 0
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if (
            isinstance(condition, Mapping)
            and condition.get("status") == "True"
            and condition.get("type") in ENDED
        ):
            return 0
    parallelism = int_field(spec.get("parallelism"), "spec.parallelism", 0, default=1)
    succeeded = int_field(status.get("succeeded"), "status.succeeded", 0, default=0)
    active = int_field(status.get("active"), "status.active", 0, default=0)
    if spec.get("completions") is not None:
        # The Job controller runs no more pods at once than completions still wanted. An
        # Indexed Job with a backoff limit per index never runs an index it lists failed
        # again, and ends once more indexes failed than ``maxFailedIndexes``.
        completions = int_field(spec.get("completions"), "spec.completions", 0)
        failed = _failed_indexes(spec, status)
        limit = spec.get("maxFailedIndexes")
        if limit is not None and failed > int_field(limit, "spec.maxFailedIndexes", 0):
            return 0
        parallelism = min(parallelism, max(0, completions - succeeded - failed))
    elif succeeded:
        return 0  # without completions, the first pod that succeeds ends the Job
    if spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy"):
        # Pods still terminating are replaced only once gone (a podFailurePolicy implies
        # this policy).
        active += int_field(status.get("terminating"), "status.terminating", 0, default=0)
    return max(0, parallelism - active)


def _failed_indexes(spec: Mapping[str, object], status: Mapping[str, object]) -> int:
    """How many indexes ``status.failedIndexes`` lists ("1,3-5": four), of an Indexed Job
    with ``backoffLimitPerIndex``; 0 of any other Job (its controller retries a failed
    pod's index until ``backoffLimit`` fails the whole Job)."""
    listed = status.get("failedIndexes")
    if spec.get("backoffLimitPerIndex") is None or spec.get("completionMode") != "Indexed":
        return 0
    if listed in (None, ""):
        return 0
    if not isinstance(listed, str):
        raise BadObject(f"status.failedIndexes must be a string, got {type(listed).__name__}")
    count = 0
    for part in listed.split(","):
        # ASCII digits only: str.isdigit takes "²", which int() refuses.
        found = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip(), re.ASCII)
        first = int(found.group(1)) if found else -1
        last = int(found.group(2) or first) if found else -1
        if found is None or last < first:
            raise BadObject(f"status.failedIndexes {listed!r}: not a list of indexes and ranges")
        count += last - first + 1
    return count


def other_scheduler(job: Obj, scheduler_names: Collection[str]) -> tuple[str, int] | None:
    """The scheduler a Job's pods would name, and how many it would make now, where that
    is not one of ``scheduler_names``: they are left to it, and said so as bare pods are.
    None where it is ours (``job_pods`` makes them), or unreadable (``job_pods`` says why)."""
    try:
        template = (job.get("spec") or {}).get("template") or {}
        scheduler = scheduler_of(template.get("spec") or {})
    except (AttributeError, TypeError):
        return None
    if scheduler in scheduler_names:
        return None
    try:
        return str(scheduler), pods_to_make(job)
    except (BadObject, AttributeError, TypeError):
        return str(scheduler), 0  # another scheduler's to read


def job_pods(
    job: Obj,
    priorities: Mapping[str, int],
    default_priority: int,
    index: int,
) -> list[Pod]:
    """The pods the Job's controller would make now (``pods_to_make``), of a Job whose
    pods name one of gangsat's schedulers (``other_scheduler`` is None)."""
    namespace, name = meta(job)
    spec = job.get("spec") or {}
    count = pods_to_make(job)
    if count > MAX_JOB_PODS:
        # Each would be a pod to convert and place before the cycle's time limit starts.
        raise BadObject(f"spec.parallelism {count} is above {MAX_JOB_PODS:,} pods a Job")
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    created = created_s(job) or float(index)
    shapes = Shapes()  # its pods are one template's: read once
    return [
        pod_of_object(
            namespace,
            f"{name}-{i}",
            template.get("metadata") or {},
            pod_spec,
            created,
            priorities,
            default_priority,
            shapes=shapes,
        )
        for i in range(count)
    ]
