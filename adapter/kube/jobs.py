"""A batch/v1 Job in a manifest, read as the ``parallelism`` pending pods its controller
would make from its template (so an unapplied manifest can be asked "what would gangsat
do"), and what a bound pod's anti-affinity can tell of them (``convert``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from adapter.kube.fields import BadObject, Obj, created_s, int_field, meta
from adapter.kube.memo import Shapes
from adapter.kube.pods import pod_of_object
from solver.model import Pod

MAX_JOB_PODS = 20_000  # pods of one Job: a finding above, not minutes of conversion


def template_of(job: Obj) -> Obj:
    """What a Job's pods are as a bound pod's anti-affinity reads them: the Job's
    namespace, its template's labels and those the Job controller adds by the Job's name
    (not its uid's nor the completion index's, unknown before it makes them)."""
    template = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    metadata = job.get("metadata") or {}
    labels = dict(template.get("labels") or {})
    name = metadata.get("name")
    if isinstance(name, str):
        labels.update({"job-name": name, "batch.kubernetes.io/job-name": name})
    return {"metadata": {"namespace": metadata.get("namespace"), "labels": labels}}


def job_pods(
    job: Obj,
    scheduler_names: Collection[str],
    priorities: Mapping[str, int],
    default_priority: int,
    index: int,
) -> list[Pod]:
    namespace, name = meta(job)
    spec = job.get("spec") or {}
    parallelism = int_field(spec.get("parallelism"), "spec.parallelism", 0, default=1)
    if spec.get("completions") is not None:
        # The Job controller runs no more pods at once than completions still wanted.
        completions = int_field(spec.get("completions"), "spec.completions", 0)
        parallelism = min(parallelism, completions)
    if spec.get("suspend") is True:
        return []  # the controller creates no pod until it is resumed
    if parallelism > MAX_JOB_PODS:
        # Each would be a pod to convert and place before the cycle's time limit starts.
        raise BadObject(f"spec.parallelism {parallelism} is above {MAX_JOB_PODS:,} pods a Job")
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    if pod_spec.get("schedulerName", "default-scheduler") not in scheduler_names:
        return []
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
        for i in range(parallelism)
    ]
