from __future__ import annotations

from collections import Counter

from adapter.gangs import Gangs
from solver.model import ClusterState
from tests.builders import gang, pod


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
