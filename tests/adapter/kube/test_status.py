"""Status bodies per PodGroup dialect, the pod condition, and the Event policy."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from adapter.cluster import GangStatus
from adapter.kube.status import (
    EventRecorder,
    ObjectRef,
    pod_unschedulable,
    podgroup_status,
    waiting_for_volumes,
    with_refused_members,
)

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
PENDING = GangStatus(
    gang="team/train",
    phase="Pending",
    bound=0,
    min_member=5,
    reason="NotEnoughResources",
    message="3/5 pods fit (minMember 5): 2 Insufficient nvidia.com/gpu",
)
RUNNING = GangStatus(gang="team/train", phase="Running", bound=5, min_member=5)


@pytest.mark.parametrize(
    "api_version", ["scheduling.sigs.dev/v1alpha2", "scheduling.volcano.sh/v1beta1"]
)
def test_kube_batch_and_volcano_get_an_unschedulable_condition(api_version: str) -> None:
    body = podgroup_status(PENDING, api_version, NOW)
    assert body["phase"] == "Pending" and body["running"] == 0
    [condition] = body["conditions"]
    assert condition == {
        "type": "Unschedulable",
        "status": "True",
        "lastTransitionTime": "2026-11-30T12:00:00Z",
        "reason": "NotEnoughResources",
        # As kube-batch words it, then the solver's reason.
        "message": "5/5 tasks in gang unschedulable: 3/5 pods fit (minMember 5): "
        "2 Insufficient nvidia.com/gpu",
    }


def test_a_running_gang_is_scheduled() -> None:
    body = podgroup_status(RUNNING, "scheduling.sigs.dev/v1alpha2", NOW)
    assert body["phase"] == "Running" and body["running"] == 5
    assert [c["type"] for c in body["conditions"]] == ["Scheduled"]


@pytest.mark.parametrize(
    ("was", "bound", "written"),
    [("Inqueue", 0, "Inqueue"), ("Running", 3, "Running"), ("Running", 0, "Pending")],
)
def test_volcano_is_not_written_back_to_pending_while_its_job_controller_needs_it(
    was: str, bound: int, written: str
) -> None:
    # Volcano's job controller (re)creates a Job's pods only while its PodGroup is not
    # Pending; Volcano's scheduler itself keeps Inqueue, and Running while pods run.
    waiting = PENDING.model_copy(update={"bound": bound})
    body = podgroup_status(waiting, "scheduling.volcano.sh/v1beta1", NOW, {"phase": was})
    assert body["phase"] == written
    assert [c["type"] for c in body["conditions"]] == ["Unschedulable"]
    # kube-batch has no job controller waiting on it: its phase says what gangsat found.
    kube_batch = podgroup_status(waiting, "scheduling.sigs.dev/v1alpha2", NOW, {"phase": was})
    assert kube_batch["phase"] == "Pending"


def test_a_failed_bind_keeps_its_own_reason() -> None:
    failed = PENDING.model_copy(update={"reason": "BindFailed", "bound": 2, "message": "x"})
    [condition] = podgroup_status(failed, "scheduling.volcano.sh/v1beta1", NOW)["conditions"]
    assert condition["reason"] == "BindFailed"
    assert condition["message"] == "3/5 tasks in gang unschedulable: x"


@pytest.mark.parametrize("api", ["scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1"])
def test_coscheduling_has_phases_but_no_conditions(api: str) -> None:
    assert podgroup_status(PENDING, api, NOW) == {"phase": "Pending", "running": 0}
    partly = PENDING.model_copy(update={"bound": 2})
    assert podgroup_status(partly, api, NOW)["phase"] == "Scheduling"


def test_an_unknown_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match=r"example\.com"):
        podgroup_status(PENDING, "example.com/v1", NOW)


CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # metav1.Condition


def test_the_workload_api_gets_its_scheduled_condition_only() -> None:
    body = podgroup_status(PENDING, "scheduling.k8s.io/v1alpha2", NOW)
    [condition] = body["conditions"]
    assert set(body) == {"conditions"}  # the API has no phase or running count
    assert condition["type"] == "PodGroupScheduled" and condition["status"] == "False"
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("5/5 tasks in gang unschedulable: 3/5 pods fit")
    [running] = podgroup_status(RUNNING, "scheduling.k8s.io/v1alpha2", NOW)["conditions"]
    assert (running["status"], running["reason"]) == ("True", "Scheduled")
    broken = PENDING.model_copy(update={"reason": "SchedulerError", "message": "boom"})
    [error] = podgroup_status(broken, "scheduling.k8s.io/v1alpha2", NOW)["conditions"]
    assert error["reason"] == "SchedulerError"
    for c in (condition, running, error):
        assert CONDITION_REASON.match(c["reason"]), c["reason"]


def test_a_condition_keeps_its_transition_time_until_its_status_flips() -> None:
    earlier = "2026-11-30T11:00:00Z"
    for api_version in ("scheduling.k8s.io/v1alpha2", "scheduling.sigs.dev/v1alpha2"):
        first = podgroup_status(PENDING, api_version, NOW)
        first["conditions"][0]["lastTransitionTime"] = earlier
        fewer = PENDING.model_copy(update={"message": "4/5 pods fit"})
        [again] = podgroup_status(fewer, api_version, NOW, first)["conditions"]
        assert again["lastTransitionTime"] == earlier and "4/5 pods fit" in again["message"]
        [flipped] = podgroup_status(RUNNING, api_version, NOW, first)["conditions"]
        assert flipped["lastTransitionTime"] == "2026-11-30T12:00:00Z"


@pytest.mark.parametrize("api_version", ["scheduling.k8s.io/v1alpha3", "scheduling.k8s.io/v1beta1"])
def test_from_v1alpha3_on_initially_scheduled_stays_true(api_version: str) -> None:
    [pending] = podgroup_status(PENDING, api_version, NOW)["conditions"]
    assert (pending["type"], pending["status"]) == ("PodGroupInitiallyScheduled", "False")
    scheduled = podgroup_status(RUNNING, api_version, NOW)
    # The gang lost pods later: upstream, the condition never goes back to False.
    assert podgroup_status(PENDING, api_version, NOW, scheduled) == scheduled
    with pytest.raises(ValueError, match="v9"):
        podgroup_status(PENDING, "scheduling.k8s.io/v9", NOW)


def test_pod_condition() -> None:
    assert pod_unschedulable("0/4 nodes are available", NOW) == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes are available",
        "lastTransitionTime": "2026-11-30T12:00:00Z",
    }


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


REF = ObjectRef(kind="PodGroup", namespace="team", name="train", api_version="v1alpha2")


def test_a_repeated_event_is_sent_once_then_refreshed_with_its_count() -> None:
    clock = Clock()
    rec = EventRecorder(rate_per_s=10, burst=10, refresh_s=60, clock=clock, wall=lambda: NOW)
    first = rec.record(REF, "Warning", "Unschedulable", "3/5 pods fit")
    assert first is not None and first.verb == "create"
    assert first.body["involvedObject"]["name"] == "train"
    assert first.body["count"] == 1 and first.body["source"] == {"component": "gangsat"}
    # The same Event every cycle for 59 s: no writes.
    for second in range(1, 60):
        clock.t = float(second)
        assert rec.record(REF, "Warning", "Unschedulable", "3/5 pods fit") is None
    # At 60 s one update carries the 61 occurrences so far.
    clock.t = 60.0
    update = rec.record(REF, "Warning", "Unschedulable", "3/5 pods fit")
    assert update is not None and update.verb == "update" and update.key == first.key
    assert update.body["count"] == 61
    # A message that names something else is a different Event.
    other = rec.record(REF, "Warning", "Unschedulable", "queue 'a' at capability (cpu)")
    assert other is not None and other.verb == "create"


def test_counts_that_move_spend_none_of_the_rate_other_news_needs() -> None:
    clock = Clock()
    rec = EventRecorder(rate_per_s=0, burst=2, refresh_s=60, clock=clock, wall=lambda: NOW)
    assert rec.record(REF, "Warning", "Unschedulable", "0/5 pods fit: 3 Insufficient cpu")
    for moved in range(1, 5):
        assert (
            rec.record(REF, "Warning", "Unschedulable", f"{moved}/5 pods fit: 3 Insufficient cpu")
            is None
        )
    assert rec.dropped == 0
    pod = ObjectRef("Pod", "team", "new-0")
    news = rec.record(pod, "Warning", "FailedScheduling", "0/5 pods fit: 3 Insufficient cpu")
    assert news is not None and news.verb == "create"


def test_an_event_whose_counts_moved_is_a_repeat_until_it_is_due() -> None:
    from adapter.kube.recount import RECOUNT_S

    clock = Clock()
    rec = EventRecorder(rate_per_s=10, burst=10, refresh_s=60, clock=clock, wall=lambda: NOW)
    first = rec.record(REF, "Warning", "Unschedulable", "0/5 pods fit: 3 Insufficient cpu")
    assert first is not None and first.verb == "create"
    for second in range(1, 60):  # the counts move every cycle: no Event, no token spent
        clock.t = float(second)
        moved = f"{second % 5}/5 pods fit: {second} Insufficient cpu"
        assert rec.record(REF, "Warning", "Unschedulable", moved) is None
    clock.t = 60.0
    update = rec.record(REF, "Warning", "Unschedulable", "2/5 pods fit: 7 Insufficient cpu")
    assert update is not None and update.verb == "update" and update.key == first.key
    assert update.body["count"] == 61 and update.body["message"] == first.body["message"]
    clock.t = 2 * RECOUNT_S  # due (RECOUNT_S to twice it, by object)
    again = rec.record(REF, "Warning", "Unschedulable", "2/5 pods fit: 7 Insufficient cpu")
    assert again is not None and again.verb == "create"
    assert again.body["message"] == "2/5 pods fit: 7 Insufficient cpu"


def test_new_events_beyond_the_rate_are_dropped_and_counted() -> None:
    clock = Clock()
    rec = EventRecorder(rate_per_s=2, burst=3, refresh_s=60, clock=clock, wall=lambda: NOW)
    refs = [ObjectRef("Pod", "team", f"p{i}") for i in range(5)]
    sent = [rec.record(r, "Warning", "FailedScheduling", "waits") for r in refs]
    # A burst of 3, then nothing until tokens come back.
    assert [a is not None for a in sent] == [True, True, True, False, False]
    assert rec.dropped == 2
    clock.t = 1.0  # 2 tokens per second
    assert rec.record(refs[3], "Warning", "FailedScheduling", "waits") is not None
    assert rec.record(refs[4], "Warning", "FailedScheduling", "waits") is not None
    assert rec.record(ObjectRef("Pod", "team", "p9"), "Warning", "FailedScheduling", "x") is None


def test_forgetting_an_object_lets_its_event_be_created_again() -> None:
    clock = Clock()
    rec = EventRecorder(rate_per_s=10, burst=10, refresh_s=60, clock=clock, wall=lambda: NOW)
    assert rec.record(REF, "Normal", "Scheduled", "bound") is not None
    assert rec.record(REF, "Normal", "Scheduled", "bound") is None
    rec.forget({REF})
    again = rec.record(REF, "Normal", "Scheduled", "bound")
    assert again is not None and again.verb == "create"


def test_a_new_message_is_a_new_event_and_replaces_the_old_in_memory() -> None:
    clock = Clock()
    rec = EventRecorder(rate_per_s=10, burst=10, refresh_s=0, clock=clock, wall=lambda: NOW)
    ref = ObjectRef("Pod", "team", "p-0")
    for short in ("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "pods"):
        # The message changes every cycle, beyond its counts.
        action = rec.record(
            ref, "Warning", "FailedScheduling", f"0/3 nodes: 3 Insufficient {short}"
        )
        assert action is not None and action.verb == "create"
    assert len(rec.keep(lambda r: True)) == 1  # one remembered per object and reason
    clock.t = 1.0  # the rate refilled: a refresh takes only what news leaves (NEWS_RESERVE)
    again = rec.record(ref, "Warning", "FailedScheduling", "0/3 nodes: 3 Insufficient pods")
    assert again is not None and again.verb == "update" and again.body["count"] == 2


def test_events_name_the_object_as_kubectl_describe_finds_it() -> None:
    clock = Clock()
    rec = EventRecorder(clock=clock, wall=lambda: NOW)
    pod = rec.record(ObjectRef("Pod", "team", "p-0", uid="u-1"), "Normal", "Scheduled", "ok")
    assert pod is not None
    assert pod.body["involvedObject"]["uid"] == "u-1"
    assert pod.body["metadata"]["namespace"] == "team"
    queue = rec.record(
        ObjectRef("Queue", "", "gpu", "scheduling.sigs.dev/v1alpha2", uid="u-2"),
        "Warning",
        "InvalidSpec",
        "weight: -1",
    )
    assert queue is not None
    # A cluster-scoped object has no namespace; its Event has to live in one.
    assert "namespace" not in queue.body["involvedObject"]
    assert queue.body["metadata"]["namespace"] == "default"


def test_members_that_succeeded_are_not_counted_as_waiting() -> None:
    # minMember 4, 2 succeeded, none bound: 2 tasks wait, not 4.
    waiting = PENDING.model_copy(update={"min_member": 4, "succeeded": 2, "message": ""})
    body = podgroup_status(waiting, "scheduling.volcano.sh/v1beta1", NOW)
    assert body["conditions"][0]["message"] == "2/4 tasks in gang unschedulable"
    running = RUNNING.model_copy(update={"bound": 3, "min_member": 4, "succeeded": 1})
    body = podgroup_status(running, "scheduling.sigs.dev/v1alpha2", NOW)
    assert body["conditions"][0]["message"] == "3/4 pods bound, 1 succeeded"


def test_volumes_are_the_reason_a_gang_waits_only_where_they_keep_it_short() -> None:
    first = "team/train-4: its claim 'd' is not bound"
    # minMember 5: four members besides the one that waits cannot reach it.
    short = waiting_for_volumes(PENDING, 1, first, members=4)
    assert short.reason == "WaitingForVolumes"
    assert short.message == f"1 pod(s) wait for their volumes ({first}); {PENDING.message}"
    enough = waiting_for_volumes(PENDING, 1, first, members=5)
    assert enough.reason == "NotEnoughResources"
    assert enough.message == f"{PENDING.message}; 1 pod(s) wait for their volumes ({first})"
    # A bind that failed, or a decision refused, keeps its reason however short the gang.
    failed = PENDING.model_copy(update={"reason": "BindFailed", "message": "bind of p failed"})
    assert waiting_for_volumes(failed, 1, first, members=0).reason == "BindFailed"
    # Members that succeeded count; a running gang is not rewritten.
    done = PENDING.model_copy(update={"succeeded": 1})
    assert waiting_for_volumes(done, 1, first, members=4).reason == "NotEnoughResources"
    assert waiting_for_volumes(RUNNING, 1, first, members=0) == RUNNING


def test_members_gangsat_refuses_are_why_a_gang_waits_only_where_they_would_complete_it() -> None:
    first = "team/train-4: asks for hostPort 80, which gangsat does not check"
    short = PENDING.model_copy(
        update={"reason": "NotEnoughTasks", "message": "NotEnoughTasks: 4 pod(s) exist"}
    )
    # minMember 5: four members and the refused one would reach it.
    refused = with_refused_members(short, 1, first, members=4)
    assert refused.reason == "InvalidSpec"
    assert refused.message == f"1 pod(s) of it exist that gangsat cannot schedule ({first})"
    # Two more are missing besides it: its own reason stands, the refused one noted.
    missing = with_refused_members(short, 1, first, members=2)
    assert missing.reason == "NotEnoughTasks"
    assert missing.message.endswith(
        f"; 1 pod(s) of it exist that gangsat cannot schedule ({first})"
    )
    # Enough members without it: the room is why it waits, the refused one a note.
    enough = with_refused_members(PENDING, 1, first, members=5)
    assert enough.reason == "NotEnoughResources" and enough.message.startswith(PENDING.message)
    assert with_refused_members(RUNNING, 1, first, members=5) == RUNNING


def test_reasons_alike_name_the_same_things_whatever_their_counts_or_order() -> None:
    from adapter.kube.recount import alike_reasons

    told = "0/2 pods fit (minMember 2): 23 Insufficient cpu, 4 node(s) had untolerated taint"
    assert alike_reasons(
        told, "1/2 pods fit (minMember 2): 25 Insufficient cpu, 3 node(s) had untolerated taint"
    )
    assert alike_reasons(
        told, "1/2 pods fit (minMember 2): 5 node(s) had untolerated taint, 2 Insufficient cpu"
    )
    assert not alike_reasons(told, "0/2 pods fit (minMember 2): 23 Insufficient cpu")
    assert not alike_reasons(
        told, "0/2 pods fit (minMember 2): 23 Insufficient memory, 4 node(s) had untolerated taint"
    )
    assert not alike_reasons(told, "queue 'a' at capability (cpu)")
    # Numbers that are not counts: in names, minMember, the gang's size.
    claim = "waits for PersistentVolumeClaim 'data-0': not found"
    assert not alike_reasons(claim, claim.replace("data-0", "data-1"))
    assert not alike_reasons(told, told.replace("minMember 2", "minMember 3"))
    assert not alike_reasons(told, told.replace("0/2", "0/3"))
    bind = "bind of ns/job-0 failed (node node-12 is gone)"
    assert not alike_reasons(bind, bind.replace("node-12", "node-47"))
    gpu = "0/1 pods fit (minMember 1): 1 Insufficient nvidia.com/mig-1g.5gb"
    assert not alike_reasons(gpu, gpu.replace("mig-1g.5gb", "mig-2g.10gb"))
    # Pods a controller makes, gates lifted, members done: each move is news.
    tasks = "NotEnoughTasks: 3 pod(s) exist, minMember is 5"
    assert not alike_reasons(tasks, tasks.replace("3 pod(s)", "4 pod(s)"))
    gated = "SchedulingGated: 3 pod(s) wait for scheduling gates"
    assert not alike_reasons(gated, gated.replace("3 pod(s)", "2 pod(s)"))
    done = "NotEnoughTasks: 3 pod(s) exist, 1 succeeded, minMember is 5"
    assert not alike_reasons(done, done.replace("1 succeeded", "2 succeeded"))


def test_statuses_alike_differ_at_most_in_their_conditions_counts() -> None:
    from adapter.kube.recount import alike_statuses

    def sig(phase: str, running: int, *conditions: tuple[str, str, str, str]) -> tuple[Any, ...]:
        return (phase, running, conditions)

    why = "2/2 tasks in gang unschedulable: 0/2 pods fit (minMember 2): 3 Insufficient cpu"
    waiting = ("Unschedulable", "True", "NotEnoughResources", why)
    recounted = (*waiting[:3], why.replace("0/2 pods", "1/2 pods").replace(": 3 ", ": 1 "))
    assert alike_statuses(sig("Pending", 0, waiting), sig("Pending", 0, recounted))
    assert not alike_statuses(sig("Pending", 0, waiting), sig("Pending", 1, recounted))
    assert not alike_statuses(sig("Pending", 0, waiting), sig("Inqueue", 0, recounted))
    assert not alike_statuses(sig("Pending", 0, waiting), sig("Pending", 0))
    other_reason = ("Unschedulable", "True", "QueueAtCapability", recounted[3])
    assert not alike_statuses(sig("Pending", 0, waiting), sig("Pending", 0, other_reason))
    memory = (*waiting[:3], why.replace("cpu", "memory"))
    assert not alike_statuses(sig("Pending", 0, waiting), sig("Pending", 0, memory))
    # Nothing sent yet, an Inqueue (its phase alone), a message that is not text.
    assert not alike_statuses(sig("Pending", 0, waiting), None)
    assert not alike_statuses(sig("Pending", 0, waiting), ("Inqueue",))
    no_text: tuple[Any, ...] = (*waiting[:3], None)
    assert not alike_statuses(sig("Pending", 0, no_text), sig("Pending", 0, waiting))


def test_what_a_pod_was_told_is_read_back_off_its_condition() -> None:
    from adapter.kube.recount import last_told as told_after
    from adapter.kube.recount import waiting_condition

    def last_told(obj: dict[str, Any], uid: str, now: float) -> tuple[Any, ...] | None:
        return told_after(waiting_condition(obj), uid, now)

    now = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    told = pod_unschedulable("0/2 pods fit (minMember 2): 3 Insufficient cpu", now)

    def pod(*conditions: dict[str, Any]) -> dict[str, Any]:
        return {"status": {"conditions": list(conditions)}}

    later = now.timestamp() + 60
    assert last_told(pod(told), "u1", later) == (
        "PodScheduled",
        told["message"],
        "u1",
        now.timestamp(),
    )
    assert last_told(pod({"type": "Ready", "status": "True"}, told), "u1", later) is not None
    assert last_told(pod(told), "u1", now.timestamp() - 1) is None  # another clock's future
    assert last_told(pod({**told, "lastTransitionTime": "yesterday"}), "u1", later) is None
    assert last_told(pod({**told, "lastTransitionTime": None}), "u1", later) is None
    assert (
        last_told(pod({**told, "lastTransitionTime": "2026-12-06T10:00:00"}), "u1", later) is None
    )
    fractional = {**told, "lastTransitionTime": "2026-12-06T10:00:00.123456+00:00"}
    assert last_told(pod(fractional), "u1", later) is not None
    assert last_told(pod({**told, "status": "True", "reason": None}), "u1", later) is None
    assert last_told(pod({**told, "message": 3}), "u1", later) is None
    assert last_told(pod(), "u1", later) is None
    assert last_told({"status": "garbage"}, "u1", later) is None


def test_news_gets_the_rate_however_large_the_backlog_told_before() -> None:
    """300 waiting pods whose counts move every second, against a rate of 0.5 a second:
    told in the first 600 s, their Events then come due for refreshes and for their
    counts made anew, twice what the rate allows. From then on a pod bound every 4
    seconds is news: each gets its Scheduled Event."""
    clock = Clock()
    rec = EventRecorder(rate_per_s=0.5, burst=4, refresh_s=300, clock=clock, wall=lambda: NOW)
    backlog = [ObjectRef("Pod", "team", f"p-{i}", uid=f"u{i}") for i in range(300)]
    made = 0
    for second in range(1800):
        clock.t = float(second)
        for ref in backlog:
            moved = f"{second % 5}/5 pods fit: {second % 11} Insufficient cpu"
            rec.record(ref, "Warning", "FailedScheduling", moved)
        if second >= 600 and second % 4 == 0:
            bound = ObjectRef("Pod", "team", f"new-{second}", uid=f"n{second}")
            scheduled = f"Successfully assigned team/new-{second} to n1"
            made += rec.record(bound, "Normal", "Scheduled", scheduled) is not None
    assert made == 300


def test_a_pod_made_again_under_its_name_gets_events_of_its_own() -> None:
    clock = Clock()
    rec = EventRecorder(rate_per_s=10, burst=10, refresh_s=60, clock=clock, wall=lambda: NOW)
    first = ObjectRef("Pod", "team", "p-0", uid="u1")
    assert rec.record(first, "Warning", "FailedScheduling", "0/2 pods fit: 3 Insufficient cpu")
    # Made again with other counts, then again with the same message: each its own Event.
    for uid in ("u2", "u3"):
        again = ObjectRef("Pod", "team", "p-0", uid=uid)
        action = rec.record(
            again, "Warning", "FailedScheduling", "0/2 pods fit: 2 Insufficient cpu"
        )
        assert action is not None and action.verb == "create"
        assert action.body["involvedObject"]["uid"] == uid


def test_an_object_told_before_takes_the_rate_as_a_refresh_does() -> None:
    clock = Clock()
    rec = EventRecorder(rate_per_s=0, burst=4, refresh_s=60, clock=clock, wall=lambda: NOW)
    told = [ObjectRef("Pod", "team", f"p-{i}", uid=f"u{i}") for i in range(3)]
    made = [rec.record(r, "Warning", "FailedScheduling", "0/2 pods fit", news=False) for r in told]
    assert [m is not None for m in made] == [True, True, False]  # half the burst kept
    news = rec.record(ObjectRef("Pod", "team", "new", uid="n"), "Warning", "FailedScheduling", "x")
    assert news is not None and news.verb == "create"
