"""The oracle: each hard rule, broken exactly once, is reported exactly once."""

from __future__ import annotations

import pytest

from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.schedulers import schedule
from solver.validate import Violation, check
from tests.builders import gang, node, pod, pods_of, queue, state


def decide(**placements: str) -> Decision:
    return Decision(scheduler="test", placements=placements, status=SolveStatus.GREEDY)


def kinds(violations: list[Violation]) -> list[tuple[str, str]]:
    return [(v.kind, v.subject) for v in violations]


@pytest.fixture
def cluster() -> ClusterState:
    """Nodes n1 (4 cpu, 3 slots, labelled) and n2 (8 cpu), a 2-pod gang, a capped queue."""
    return state(
        nodes=[
            node("n1").cap(cpu=4, memory="8Gi", pods=3).label(kind="gpu"),
            node("n2").cap(cpu=8, memory="8Gi"),
        ],
        pods=[
            *pods_of("pair", 2, cpu=1, memory="1Gi"),
            pod("solo").req(cpu=1),
            pod("running").req(cpu=2).on("n1"),
            pod("picky").req(cpu=1).selector(kind="gpu"),
            pod("big").req(cpu=3),
            pod("tiny").req(memory="1Mi"),
            pod("lost").req(cpu=1).gang("ghost"),
            pod("capped-0").req(cpu=1).gang("c"),
            pod("capped-1").req(cpu=1).gang("c"),
            pod("orphan").req(cpu=1).gang("o"),
        ],
        gangs=[
            gang("pair", min_member=2),
            gang("c", min_member=1).queue("limited"),
            gang("o").queue("missing"),
        ],
        queues=[queue("limited").capability(cpu="1500m")],
    )


def test_clean_decision_has_no_violations(cluster: ClusterState) -> None:
    d = decide(**{"pair-0": "n2", "pair-1": "n2", "solo": "n1", "picky": "n1", "capped-0": "n2"})
    assert check(cluster, d) == []


def test_empty_decision_is_clean(cluster: ClusterState) -> None:
    assert check(cluster, decide()) == []


def test_unknown_pod(cluster: ClusterState) -> None:
    (v,) = check(cluster, decide(nobody="n2", solo="n2"))
    assert (v.kind, v.subject) == ("unknown-pod", "nobody")
    assert "'nobody'" in v.message


def test_already_bound_pod_is_not_bound_twice(cluster: ClusterState) -> None:
    (v,) = check(cluster, decide(running="n2"))
    assert (v.kind, v.subject) == ("already-bound", "running")
    assert "'n1'" in v.message and "'n2'" in v.message


def test_unknown_node(cluster: ClusterState) -> None:
    (v,) = check(cluster, decide(solo="n9"))
    assert (v.kind, v.subject) == ("unknown-node", "solo")
    assert "'n9'" in v.message


def test_predicate(cluster: ClusterState) -> None:
    (v,) = check(cluster, decide(picky="n2"))
    assert (v.kind, v.subject) == ("predicate", "picky")
    assert "didn't match node selector" in v.message and "'n2'" in v.message


def test_capacity_counts_bound_pods(cluster: ClusterState) -> None:
    # n1 has 4 cpu with 2 bound: a 3-cpu pod does not fit there, but does on n2.
    assert check(cluster, decide(big="n2")) == []
    (v,) = check(cluster, decide(big="n1"))
    assert (v.kind, v.subject) == ("capacity", "n1")
    assert "Insufficient cpu" in v.message
    assert "2000 cpu bound + 3000 new = 5000 > 4000" in v.message


def test_capacity_counts_pod_slots(cluster: ClusterState) -> None:
    # n1 has 3 slots, one taken: three more pods need one too many (cpu fits exactly).
    (v,) = check(cluster, decide(**{"pair-0": "n1", "pair-1": "n1", "tiny": "n1"}))
    assert (v.kind, v.subject) == ("capacity", "n1")
    assert "Too many pods" in v.message and "1 pods bound + 3 new = 4 > 3" in v.message


def test_preexisting_overcommit_is_not_blamed_on_the_decision() -> None:
    s = state(
        nodes=[node("full").cap(cpu=1), node("free").cap(cpu=4)],
        pods=[pod("hog").req(cpu=3).on("full"), pod("p").req(cpu=1)],
    )
    assert check(s, decide(p="free")) == []
    assert kinds(check(s, decide(p="full"))) == [("capacity", "full")]


def test_partial_gang(cluster: ClusterState) -> None:
    (v,) = check(cluster, decide(**{"pair-0": "n2"}))
    assert (v.kind, v.subject) == ("partial-gang", "pair")
    assert "1 pod(s)" in v.message and "minMember 2" in v.message


def test_bound_members_count_towards_min_member() -> None:
    s = state(
        nodes=[node("n").cap(cpu=8)],
        pods=[pod("g-0").gang("g").on("n"), pod("g-1").gang("g"), pod("g-2").gang("g")],
        gangs=[gang("g", min_member=3)],
    )
    assert check(s, decide(**{"g-1": "n", "g-2": "n"})) == []
    assert kinds(check(s, decide(**{"g-1": "n"}))) == [("partial-gang", "g")]


def test_a_gang_that_starts_needs_each_tasks_minimum() -> None:
    mpi = gang("mpi", min_member=3).task_minimums(launcher=1, worker=2)
    pods = [pod("l").gang("mpi").task("launcher").build()]
    pods += [pod(f"w{i}").gang("mpi").task("worker").build() for i in range(3)]
    s = state(nodes=[node("n").cap(cpu=8)], pods=pods, gangs=[mpi])
    assert check(s, decide(l="n", w0="n", w1="n")) == []
    (v,) = check(s, decide(w0="n", w1="n", w2="n"))  # minMember, but no launcher
    assert (v.kind, v.subject) == ("partial-gang", "mpi")
    assert "task 'launcher' 0 < 1" in v.message and "worker" not in v.message
    # Its bound launcher and a launcher that succeeded count as the task's.
    bound = s.model_copy(
        update={"pods": (pods[0].model_copy(update={"node_name": "n"}), *pods[1:])}
    )
    assert check(bound, decide(w0="n", w1="n")) == []
    done = mpi.build().model_copy(update={"succeeded": 1, "succeeded_by_task": {"launcher": 1}})
    finished = state(nodes=[node("n").cap(cpu=8)], pods=pods[1:], gangs=[done])
    assert check(finished, decide(w0="n", w1="n")) == []
    assert kinds(check(finished, decide(w0="n"))) == [("partial-gang", "mpi")]


def test_terminating_members_do_not_count_towards_min_member() -> None:
    # Evicted (terminating), g-0 still holds its room but is no member: g-1 alone would
    # run below minMember.
    s = state(
        nodes=[node("n").cap(cpu=8)],
        pods=[pod("g-0").gang("g").on("n").terminating(), pod("g-1").gang("g")],
        gangs=[gang("g", min_member=2)],
    )
    assert kinds(check(s, decide(**{"g-1": "n"}))) == [("partial-gang", "g")]


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_pending_pod_being_deleted_is_not_bound_nor_a_member(scheduler: str) -> None:
    # g-1 is being deleted before it was ever bound: g-0 alone is the gang (minMember 1),
    # and with minMember 2 the gang waits for a pod to replace it.
    pods = [pod("g-0").gang("g"), pod("g-1").gang("g").terminating()]
    s = state(nodes=[node("n").cap(cpu=8)], pods=pods, gangs=[gang("g", min_member=1)])
    assert schedule(s, scheduler).placements == {"g-0": "n"}
    assert kinds(check(s, decide(**{"g-0": "n", "g-1": "n"}))) == [("terminating", "g-1")]
    short = s.model_copy(update={"gangs": (gang("g", min_member=2).build(),)})
    assert schedule(short, scheduler).placements == {}


def test_capability(cluster: ClusterState) -> None:
    # Queue "limited" may hold 1.5 cpu: one 1-cpu pod fits, two do not.
    assert check(cluster, decide(**{"capped-0": "n2"})) == []
    (v,) = check(cluster, decide(**{"capped-0": "n2", "capped-1": "n2"}))
    assert (v.kind, v.subject) == ("capability", "limited")
    assert "0 cpu held + 2000 new = 2000 > capability 1500" in v.message


def test_capability_counts_held_pods() -> None:
    s = state(
        nodes=[node("n").cap(cpu=8)],
        pods=[pod("a").req(cpu=2).gang("g").on("n"), pod("b").req(cpu=2).gang("h")],
        gangs=[gang("g").queue("q"), gang("h").queue("q")],
        queues=[queue("q").capability(cpu=3)],
    )
    (v,) = check(s, decide(b="n"))
    assert (v.kind, v.subject) == ("capability", "q")
    assert "2000 cpu held + 2000 new" in v.message


def test_capability_of_implicit_default_queue() -> None:
    s = state(
        nodes=[node("n").cap(cpu=8)],
        pods=[pod("a").req(cpu=1), pod("b").req(cpu=1)],
        queues=[queue("default").capability(cpu=1)],
    )
    assert check(s, decide(a="n")) == []
    assert kinds(check(s, decide(a="n", b="n"))) == [("capability", "default")]


def test_invalid_gang_unknown_podgroup(cluster: ClusterState) -> None:
    (v,) = check(cluster, decide(lost="n2"))
    assert (v.kind, v.subject) == ("invalid-gang", "ghost")
    assert "PodGroup 'ghost' not found" in v.message and "lost" in v.message


def test_invalid_gang_unknown_queue(cluster: ClusterState) -> None:
    (v,) = check(cluster, decide(orphan="n2"))
    assert (v.kind, v.subject) == ("invalid-gang", "o")
    assert "queue 'missing'" in v.message


def test_no_new_pod_in_a_closed_queue() -> None:
    """A queue an admin closed (Volcano's Closed, Closing) takes no new pods: nor does a
    pod of no gang where the default queue is closed."""
    s = state(
        nodes=[node("n").cap(cpu=4)],
        pods=[pod("p").gang("g"), pod("solo"), pod("q").gang("h")],
        gangs=[gang("g").queue("drained"), gang("h")],
        queues=[queue("drained").state("Closing"), queue("default").state("Closed")],
    )
    found = check(s, decide(p="n", solo="n", q="n"))
    assert [(v.kind, v.subject) for v in found] == [
        ("invalid-gang", "g"),
        ("invalid-gang", "h"),
        ("invalid-gang", "pod:solo"),
    ]
    assert "queue 'drained' is Closing: it takes no new pods" in found[0].message


def test_default_queue_is_implicit() -> None:
    s = state(nodes=[node("n").cap(cpu=2)], pods=[pod("p").gang("g")], gangs=[gang("g")])
    assert check(s, decide(p="n")) == []


def test_every_kind_at_once_in_deterministic_order(cluster: ClusterState) -> None:
    d = decide(
        nobody="n1",
        running="n2",
        solo="n9",
        picky="n2",
        big="n1",
        lost="n2",
        orphan="n2",
        **{"pair-0": "n2", "capped-0": "n2", "capped-1": "n2"},
    )
    found = check(cluster, d)
    assert kinds(found) == [
        ("unknown-pod", "nobody"),
        ("predicate", "picky"),
        ("already-bound", "running"),
        ("unknown-node", "solo"),
        ("capacity", "n1"),
        ("invalid-gang", "ghost"),
        ("invalid-gang", "o"),
        ("partial-gang", "pair"),
        ("capability", "limited"),
    ]
    assert check(cluster, d) == found
    assert len({v.kind for v in found}) == 8


def test_violation_is_frozen() -> None:
    v = Violation(kind="capacity", subject="n", message="m")
    with pytest.raises(ValueError):
        v.subject = "other"  # type: ignore[misc]
