"""Domain model: bad input is rejected at the boundary, naming the field."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel, ValidationError

from solver.decision import Decision, SolveStatus
from solver.model import (
    CPU,
    DEFAULT_MAX_PODS,
    GPU,
    MEMORY,
    PODS,
    ClusterState,
    Gang,
    Node,
    Pod,
    Queue,
    Resources,
)
from solver.schedulers import schedule
from solver.scheduling_terms import NodeSelectorRequirement, NodeSelectorTerm, Toleration
from solver.violations import demand_sum
from tests.builders import PodBuilder, gang, node, pod, queue, resources, state


def _error(exc: pytest.ExceptionInfo[ValidationError]) -> tuple[str, str]:
    """(dotted location, message) of the first error."""
    err = exc.value.errors()[0]
    return ".".join(str(part) for part in err["loc"]), err["msg"]


def test_negative_quantity_is_rejected_naming_field_and_resource() -> None:
    with pytest.raises(ValidationError) as exc:
        Pod.model_validate({"name": "p", "requests": {"cpu": -1}})
    loc, msg = _error(exc)
    assert loc == "requests"
    assert "'cpu'" in msg and "negative" in msg and "-1" in msg


def test_negative_allocatable_is_rejected() -> None:
    with pytest.raises(ValidationError) as exc:
        Node.model_validate({"name": "n", "allocatable": {"memory": -5}})
    loc, msg = _error(exc)
    assert loc == "allocatable"
    assert "'memory'" in msg


def test_min_member_zero_is_rejected() -> None:
    with pytest.raises(ValidationError) as exc:
        Gang(name="g", min_member=0)
    loc, _ = _error(exc)
    assert loc == "min_member"


def test_a_podgroup_may_not_take_the_name_of_a_gang_of_one() -> None:
    """Pods of no PodGroup are each a gang of one named ``pod:<pod>``. A PodGroup (or a
    pod's PodGroup) of such a name took that pod in, under its own queue, and the
    validator then counted the pod against the default queue (state files; no Kubernetes
    object can be so named)."""
    with pytest.raises(ValidationError) as exc:
        Gang(name="pod:a", min_member=1)
    loc, msg = _error(exc)
    assert loc == "name" and "gangs of one" in msg
    with pytest.raises(ValidationError) as exc:
        Pod(name="b", gang="pod:a")
    assert _error(exc)[0] == "gang"


def test_weight_zero_is_rejected() -> None:
    with pytest.raises(ValidationError) as exc:
        Queue(name="q", weight=0)
    loc, _ = _error(exc)
    assert loc == "weight"


def test_duplicate_node_names_are_rejected_naming_the_node() -> None:
    with pytest.raises(ValidationError, match=r"nodes: duplicate name\(s\) n1"):
        state(nodes=[node("n1").cap(cpu=1), node("n1").cap(cpu=2), node("n2")])


def test_duplicate_pod_names_are_rejected() -> None:
    with pytest.raises(ValidationError, match=r"pods: duplicate name\(s\) p"):
        ClusterState(pods=(pod("p").build(), pod("p").build()))


def test_in_without_values_is_rejected_with_its_path() -> None:
    with pytest.raises(ValidationError) as exc:
        Pod.model_validate(
            {"name": "p", "affinity": [{"match_expressions": [{"key": "k", "operator": "In"}]}]}
        )
    loc, msg = _error(exc)
    assert loc == "affinity.0.match_expressions.0"
    assert "operator In needs at least one value" in msg


def test_gt_with_a_non_integer_value_matches_no_node_and_other_terms_still_do() -> None:
    bad = NodeSelectorRequirement(key="k", operator="Gt", values=("abc",))
    good = NodeSelectorRequirement(key="zone", operator="In", values=("b",))
    p = (
        pod("p")
        .req(cpu=1)
        .build()
        .model_copy(
            update={
                "affinity": (
                    NodeSelectorTerm(match_expressions=(bad,)),
                    NodeSelectorTerm(match_expressions=(good,)),
                )
            }
        )
    )
    s = state(
        nodes=[
            node("n1").cap(cpu=4, memory="8Gi").label({"k": "5", "zone": "a"}),
            node("n2").cap(cpu=4, memory="8Gi").label({"k": "5", "zone": "b"}),
        ],
        pods=[p],
    )
    assert schedule(s, "gang-greedy").placements == {"p": "n2"}


@pytest.mark.parametrize(
    ("operator", "values", "message"),
    [
        ("Exists", ("x",), "operator Exists takes no values"),
        ("DoesNotExist", ("x",), "operator DoesNotExist takes no values"),
        ("Lt", ("1", "2"), "operator Lt takes exactly one value"),
        ("NotIn", (), "operator NotIn needs at least one value"),
    ],
)
def test_requirement_values_must_suit_operator(
    operator: str, values: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        NodeSelectorRequirement.model_validate({"key": "k", "operator": operator, "values": values})


def test_tolerations_and_affinity_terms_hash_by_value_once_and_afresh_when_copied() -> None:
    a = Toleration(key="gpu", operator="Exists", effect="NoSchedule")
    b = Toleration(key="gpu", operator="Exists", effect="NoSchedule")
    assert hash(a) == hash(b) and a == b and {a: 1}[b] == 1
    changed = a.model_copy(update={"key": "spot"})  # a's hash is cached by now
    assert hash(changed) == hash(Toleration(key="spot", operator="Exists", effect="NoSchedule"))
    assert changed not in {a}
    term = NodeSelectorTerm(
        match_expressions=(NodeSelectorRequirement(key="zone", operator="In", values=("a",)),)
    )
    same = NodeSelectorTerm(
        match_expressions=(NodeSelectorRequirement(key="zone", operator="In", values=("a",)),)
    )
    assert hash(term) == hash(same) and term == same
    assert term.model_dump() == same.model_dump()  # the cached hash is no field
    # Another process hashes strings differently: the cached hash is not pickled.
    assert "_hash" in a.__dict__ and "_hash" not in pickle.loads(pickle.dumps(a)).__dict__


def test_exists_toleration_with_value_is_rejected() -> None:
    with pytest.raises(ValidationError, match="operator Exists must not have a value"):
        Toleration(key="k", operator="Exists", value="v")


def test_empty_key_toleration_must_use_exists() -> None:
    with pytest.raises(ValidationError, match="empty key must use operator Exists"):
        Toleration(key="", operator="Equal", value="v")
    assert Toleration(operator="Exists").key == ""


def test_unknown_field_is_rejected() -> None:
    with pytest.raises(ValidationError) as exc:
        Pod.model_validate({"name": "p", "nodeName": "n"})
    loc, _ = _error(exc)
    assert loc == "nodeName"


def test_node_without_pods_gets_default_slots() -> None:
    assert DEFAULT_MAX_PODS == 110
    assert node("n").cap(cpu=4).build().allocatable[PODS] == 110
    assert Node(name="n", allocatable=Resources({CPU: 1})).allocatable[PODS] == 110
    assert node("n").cap(cpu=4, pods=3).build().allocatable[PODS] == 3


def test_pod_demand_includes_one_pod_slot() -> None:
    p = pod("p").req(cpu="500m", memory="1Gi").build()
    assert p.demand() == {CPU: 500, MEMORY: 2**30, PODS: 1}
    assert pod("empty").build().demand() == {PODS: 1}
    # The request is unchanged: only the demand adds the slot.
    assert PODS not in p.requests.root


def test_a_pod_asking_for_pod_slots_counts_them_once() -> None:
    asks = Resources({CPU: 250, PODS: 3, MEMORY: 0})
    assert asks.pod_demand() == {CPU: 250, PODS: 3}
    assert sorted(asks.pod_demand_items()) == [(CPU, 250), (PODS, 3)]
    # What the sums read is made once per request set; a caller's dict is its own.
    asks.pod_demand()[CPU] = 1
    assert asks.pod_demand_items() is asks.pod_demand_items() and asks.pod_demand()[CPU] == 250
    twice = [pod("a").build().model_copy(update={"requests": asks})] * 2
    assert demand_sum(twice) == {CPU: 500, PODS: 6}
    # A copy with other amounts makes its own.
    other = asks.model_copy(update={"root": {CPU: 100}})
    assert other.pod_demand() == {CPU: 100, PODS: 1} and other.key() == ((CPU, 100),)


def test_resources_keep_explicit_zeros_and_read_absent_as_zero() -> None:
    r = Resources({CPU: 0, MEMORY: 3})
    assert r.root == {CPU: 0, MEMORY: 3}
    assert r[GPU] == 0
    assert r.nonzero() == {MEMORY: 3}
    assert r.key() == ((MEMORY, 3),)


def test_zero_pod_slots_and_zero_capability_survive_a_json_round_trip() -> None:
    n = node("n").cap(cpu=4, pods=0).build()
    assert Node.model_validate_json(n.model_dump_json()).allocatable[PODS] == 0
    q = Queue(name="q", capability=Resources({CPU: 0}))
    again = Queue.model_validate_json(q.model_dump_json())
    assert again.capability is not None and again.capability.root == {CPU: 0}
    assert Resources.of(cpu_milli=2, gpu=1, extended={"x/y": 4}).key() == (
        (CPU, 2),
        (GPU, 1),
        ("x/y", 4),
    )
    assert hash(Resources({CPU: 1})) == hash(Resources({CPU: 1}))


def test_implicit_gang_name_and_keys() -> None:
    a = pod("a").req(cpu=1).selector(zone="z").build()
    b = pod("b").req(cpu=1).selector(zone="z").build()
    c = pod("c").req(cpu=2).selector(zone="z").build()
    assert a.gang_name() == "pod:a"
    assert pod("d").gang("g").build().gang_name() == "g"
    assert a.spec_key() == b.spec_key() != c.spec_key()
    assert a.placement_key() == c.placement_key()


def test_same_spec_agrees_with_spec_key() -> None:
    # Pods built apart (equal, not identical, requests and selectors), and pods differing
    # from the first in one field each: same_spec holds exactly where the keys are equal.
    def base() -> PodBuilder:
        return pod("p").req(cpu=1).selector(zone="a").affinity("k", "In", "v").tolerate("t")

    pods = [
        base().build(),
        base().build(),
        base().req(cpu=2).build(),
        base().selector(zone="b").build(),
        base().affinity("k2", "Exists").build(),
        base().tolerate("u").build(),
        base().task("worker").build(),
        pod("p").req(cpu=1).build(),
    ]
    for a in pods:
        for b in pods:
            assert a.same_spec(b) == (a.spec_key() == b.spec_key())
            assert a.same_placement(b) == (a.placement_key() == b.placement_key())
    assert pods[0].same_spec(pods[1]) and not pods[0].same_spec(pods[2])


def test_state_accessors() -> None:
    s = state(
        nodes=[node("n1"), node("n2")],
        pods=[pod("bound").on("n1"), pod("pending")],
        gangs=[gang("g")],
        queues=[queue("q")],
    )
    assert [p.name for p in s.pending_pods()] == ["pending"]
    assert [p.name for p in s.bound_pods()] == ["bound"]


def test_builder_quantities_follow_kubernetes() -> None:
    assert resources(cpu="500m", memory="1Gi", gpu=2, pods="1e3") == {
        CPU: 500,
        MEMORY: 2**30,
        GPU: 2,
        PODS: 1000,
    }
    assert resources(cpu="1.5", memory="1e3") == {CPU: 1500, MEMORY: 1000}
    assert resources(cpu=2) == {CPU: 2000}


def test_a_copy_reads_as_pydantic_s_own_copy_and_leaves_the_original_alone() -> None:
    built = pod("ns/a").req(cpu="1").gang("ns/g").build()
    bound = built.model_copy(update={"node_name": "n1"})
    reference = BaseModel.model_copy(built, update={"node_name": "n1"})
    assert bound == reference
    assert bound.model_fields_set == reference.model_fields_set
    assert bound.model_dump() == reference.model_dump()
    assert built.node_name is None and built.model_copy() == built
    original = pod("ns/a").req(cpu="1").build()
    renamed = original.model_copy(update={"name": "ns/b"})
    assert (original.name, renamed.name) == ("ns/a", "ns/b")
    with pytest.raises(ValidationError):
        renamed.name = "ns/c"  # type: ignore[misc]  # still frozen
    assert pickle.loads(pickle.dumps(renamed)) == renamed
    # A model with private state still copies it (pydantic's own path).
    decision = Decision(scheduler="s", placements={"ns/a": "n1"}, status=SolveStatus.OPTIMAL)
    decision._explain = lambda: ({"ns/g": "why"}, {"ns/h": "left"})
    copied = decision.model_copy(update={"placements": {}})
    assert copied.placements == {} and copied.explanations_pending
    explained = copied.explained()
    assert (explained.unschedulable, explained.left_over) == ({"ns/g": "why"}, {"ns/h": "left"})


def test_a_snapshot_s_pods_by_name_are_its_own_and_no_field() -> None:
    """Made once and shared by the loop's readers; a copy with other pods makes its own,
    and the index is no part of the model (compared, iterated, pickled)."""
    state = ClusterState(pods=(pod("ns/a").build(), pod("ns/b").build()))
    index = state.pods_by_name()
    assert list(index) == ["ns/a", "ns/b"] and state.pods_by_name() is index
    bound = state.with_bindings({"ns/a": "n1"})
    assert bound.pods_by_name()["ns/a"].node_name == "n1"
    assert state.pods_by_name()["ns/a"].node_name is None
    assert state == ClusterState(pods=state.pods)
    assert set(dict(state)) == {"nodes", "pods", "gangs", "queues", "now_s"}
    again = pickle.loads(pickle.dumps(state))
    assert again == state and list(again.pods_by_name()) == ["ns/a", "ns/b"]
