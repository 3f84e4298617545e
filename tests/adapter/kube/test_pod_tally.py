from __future__ import annotations

from adapter.kube.pod_tally import PodTally
from adapter.kube.queue_report import allocated_by_queue
from solver.model import ClusterState, Gang, Node, Pod, Resources


def test_one_pass_reads_members_pending_pods_and_what_bound_pods_hold_per_queue() -> None:
    small, large = Resources({"cpu": 1000}), Resources({"cpu": 4000, "memory": 2**30})
    pods = [
        Pod(name="ns/a-0", gang="ns/a", requests=small, node_name="n1"),
        Pod(name="ns/a-1", gang="ns/a", requests=small, node_name="n1", terminating=True),
        Pod(name="ns/a-2", gang="ns/a", requests=small),
        Pod(name="ns/b-0", gang="ns/b", requests=large, node_name="n1"),
        Pod(name="ns/b-1", gang="ns/b", requests=large),
        Pod(name="ns/b-2", gang="ns/b", requests=large),
        Pod(name="kube-system/ds", requests=large, node_name="n1", daemon=True),
        Pod(name="ns/alone", requests=small),
    ]
    state = ClusterState(
        nodes=(Node(name="n1", allocatable=Resources({"cpu": 64000})),),
        pods=tuple(pods),
        gangs=(
            Gang(name="ns/a", min_member=3, queue="q1"),
            Gang(name="ns/b", min_member=3, queue="q2"),
        ),
    )
    tally = PodTally.of(state)
    assert tally.members == {"ns/a": 3, "ns/b": 3, "pod:kube-system/ds": 1, "pod:ns/alone": 1}
    assert tally.pending == {
        "ns/a": ["ns/a-2"],
        "ns/b": ["ns/b-1", "ns/b-2"],
        "pod:ns/alone": ["ns/alone"],
    }
    # A terminating pod still holds its room; a pod of no PodGroup is no queue's.
    allocated = allocated_by_queue(tally, {"ns/a": "q1", "ns/b": "q2"})
    assert allocated == {"q1": {"cpu": "2"}, "q2": {"cpu": "4", "memory": str(2**30)}}
    assert PodTally.of(None) == PodTally()
