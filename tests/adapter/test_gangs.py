from __future__ import annotations

from collections import Counter

from adapter.gangs import Gangs
from adapter.holds import Holds
from solver.model import ClusterState
from tests.builders import gang, node, pod, state


def test_the_gang_index_counts_bound_members_and_tasks_and_names_every_pod_s_gang() -> None:
    state = ClusterState(
        pods=(
            pod("ns/w-0").gang("ns/job").task("worker").on("n1").build(),
            pod("ns/w-1").gang("ns/job").task("worker").on("n1").terminating().build(),
            pod("ns/w-2").gang("ns/job").task("worker").build(),
            pod("ns/ps-0").gang("ns/job").task("ps").build(),
            pod("ns/other-0").gang("ns/other").on("n1").build(),
            pod("kube-system/ds").on("n1").build(),
            pod("ns/alone").task("worker").build(),
        ),
        gangs=(
            gang("ns/job", 3).task_minimums(worker=2, ps=1).build(),
            gang("ns/other", 1).build(),
        ),
    )
    gangs = Gangs.of(state)
    # A terminating pod is no member any more; a pod of no PodGroup is a gang of one.
    assert dict(gangs.held) == {"ns/job": 1, "ns/other": 1, "pod:kube-system/ds": 1}
    assert gangs.task_held == {"ns/job": Counter({"worker": 1})}
    assert gangs.task_of == {
        "ns/w-0": "worker",
        "ns/w-1": "worker",
        "ns/w-2": "worker",
        "ns/ps-0": "ps",
    }
    assert [gangs.gang(p) for p in ("ns/w-2", "kube-system/ds", "ns/gone")] == [
        "ns/job",
        "pod:kube-system/ds",
        "pod:ns/gone",
    ]
    assert gangs.need == {"ns/job": 3, "ns/other": 1}


def test_a_new_leader_evicts_again_the_marked_pods_of_gangs_below_their_minimum() -> None:
    """A victim's pods marked before their evictions: where some went and these did not,
    the leader that sent them again is gone; the next one reads the marks. Not a victim
    that kept its minimum (its evictions all refused), nor a short gang's unmarked pod."""
    why = "preempted by gang ns/hi"
    cluster = state(
        nodes=[node("n1"), node("n2")],
        pods=[
            pod("ns/a-1").gang("ns/a").on("n1").marked_victim(why),  # a-0 went
            pod("ns/b-0").gang("ns/b").on("n2").marked_victim(why),  # b kept both
            pod("ns/b-1").gang("ns/b").on("n2").marked_victim(why),
            pod("ns/c-w0").gang("ns/c").task("worker").on("n1").marked_victim(why),
            pod("ns/c-ps").gang("ns/c").task("ps").on("n2"),  # c: a worker short
            pod("ns/d-0").gang("ns/d").on("n2"),
            pod("ns/a-0").gang("ns/a"),  # a's, made again by its controller
            pod("ns/hi-0").gang("ns/hi").nominated("n1"),
        ],
        gangs=[
            gang("ns/a", 2),
            gang("ns/b", 2),
            gang("ns/c", 2).task_minimums(worker=2),
            gang("ns/d", 2),
            gang("ns/hi", 1),
        ],
    )
    gangs = Gangs.of(cluster)
    assert [gangs.runs_short(g) for g in ("ns/a", "ns/b", "ns/c", "ns/d", "ns/gone")] == [
        True,
        False,
        True,
        True,
        False,
    ]
    holds = Holds()
    assert holds.recover(cluster, gangs) == ["ns/hi"]
    assert holds.resend == {"ns/a-1": (why, "n1"), "ns/c-w0": (why, "n1")}
    # hi waits for them: bound at once, it would meet a node still full.
    assert holds.held["ns/hi"].victim_nodes == {"ns/a-1": "n1", "ns/c-w0": "n1"}
