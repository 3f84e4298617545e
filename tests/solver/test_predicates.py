"""Node predicates, in Kubernetes' semantics and words."""

from __future__ import annotations

from collections import Counter

import pytest

from solver.model import CPU, GPU, MEMORY, PODS
from solver.predicates import (
    AFFINITY_MISMATCH,
    SELECTOR_MISMATCH,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    Feasibility,
    insufficient,
    placement_reason,
    summarize,
    untolerated_taint,
)
from tests.builders import node, pod

GPU_NODE = node("n").cap(cpu=8).label(gpu="v100", zone="a", cores="16").build()


def test_node_selector_match_and_mismatch() -> None:
    assert placement_reason(pod("p").selector(gpu="v100").build(), GPU_NODE) is None
    assert placement_reason(pod("p").selector(gpu="a100").build(), GPU_NODE) == SELECTOR_MISMATCH
    # A selector on a label the node lacks fails too; all pairs must match.
    assert placement_reason(pod("p").selector(rack="r1").build(), GPU_NODE) == SELECTOR_MISMATCH
    both = pod("p").selector(gpu="v100", zone="b").build()
    assert placement_reason(both, GPU_NODE) == SELECTOR_MISMATCH


@pytest.mark.parametrize(
    ("key", "op", "values", "ok"),
    [
        ("gpu", "In", ("a100", "v100"), True),
        ("gpu", "In", ("a100",), False),
        ("rack", "In", ("r1",), False),
        ("gpu", "NotIn", ("a100",), True),
        ("gpu", "NotIn", ("v100",), False),
        ("rack", "NotIn", ("r1",), True),  # absent label is not in any set
        ("zone", "Exists", (), True),
        ("rack", "Exists", (), False),
        ("rack", "DoesNotExist", (), True),
        ("zone", "DoesNotExist", (), False),
        ("cores", "Gt", ("8",), True),
        ("cores", "Gt", ("16",), False),
        ("cores", "Lt", ("17",), True),
        ("cores", "Lt", ("16",), False),
        ("rack", "Gt", ("1",), False),  # absent label fails Gt
        ("gpu", "Gt", ("1",), False),  # non-integer label fails Gt
        ("gpu", "Lt", ("1000",), False),  # and Lt
    ],
)
def test_affinity_operators(key: str, op: str, values: tuple[str, ...], ok: bool) -> None:
    p = pod("p").affinity(key, op, *values).build()
    assert placement_reason(p, GPU_NODE) == (None if ok else AFFINITY_MISMATCH)


@pytest.mark.parametrize(
    ("label", "ok"),
    [
        ("16", True),
        ("+16", True),
        ("9223372036854775807", True),
        ("1_6", False),  # Python's int() reads it; Go's ParseInt does not
        (" 16", False),
        ("\u0661\u0666", False),  # Arabic-Indic digits
        ("9223372036854775808", False),  # past 64 bits
        ("", False),
    ],
)
def test_gt_reads_labels_as_kubernetes_does(label: str, ok: bool) -> None:
    node_ = GPU_NODE.model_copy(update={"labels": {**GPU_NODE.labels, "cores": label}})
    p = pod("p").affinity("cores", "Gt", "8").build()
    assert placement_reason(p, node_) == (None if ok else AFFINITY_MISMATCH)


def test_requirements_of_a_term_are_anded() -> None:
    p = pod("p").affinity("gpu", "In", "v100").affinity("zone", "In", "b").build()
    assert len(p.affinity) == 1
    assert placement_reason(p, GPU_NODE) == AFFINITY_MISMATCH
    p = pod("p").affinity("gpu", "In", "v100").affinity("zone", "In", "a").build()
    assert placement_reason(p, GPU_NODE) is None


def test_terms_are_ored() -> None:
    p = (
        pod("p")
        .affinity_term(("gpu", "In", "a100"))
        .affinity_term(("zone", "In", "a"), ("cores", "Gt", 4))
        .build()
    )
    assert len(p.affinity) == 2
    assert placement_reason(p, GPU_NODE) is None
    none_match = pod("p").affinity_term(("gpu", "In", "a100")).affinity_term(("rack", "Exists"))
    assert placement_reason(none_match.build(), GPU_NODE) == AFFINITY_MISMATCH


TAINTED = node("t").taint("dedicated", "ml", "NoSchedule").build()


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ((), False),
        (("dedicated", "Equal", "ml", "NoSchedule"), True),
        (("dedicated", "Equal", "ml", ""), True),  # empty effect: all effects
        (("dedicated", "Equal", "web", "NoSchedule"), False),  # value differs
        (("dedicated", "Exists", "", "NoSchedule"), True),
        (("other", "Exists", "", ""), False),  # key differs
        (("", "Exists", "", ""), True),  # empty key + Exists tolerates everything
        (("", "Exists", "", "NoExecute"), False),  # ... but only for its effect
        (("dedicated", "Equal", "ml", "NoExecute"), False),  # effect mismatch
    ],
)
def test_noschedule_taint_vs_tolerations(toleration: tuple[str, ...], ok: bool) -> None:
    b = pod("p")
    if toleration:
        b.tolerate(*toleration)
    reason = placement_reason(b.build(), TAINTED)
    assert reason == (None if ok else "node(s) had untolerated taint {dedicated: ml}")


def test_a_node_failing_several_predicates_is_counted_as_kube_scheduler_counts_it() -> None:
    """Its filters run in order and a node is counted under the first that fails it:
    NodeUnschedulable, TaintToleration, then NodeAffinity (a GPU node, tainted, is one
    the CPU pool's pods "had untolerated taint" for, not one that "didn't match node
    selector")."""
    gpu = node("g").label(pool="gpu").taint("nvidia.com/gpu", "", "NoSchedule")
    cpu_pod = pod("p").selector(pool="cpu").build()
    assert (
        placement_reason(cpu_pod, gpu.build()) == "node(s) had untolerated taint {nvidia.com/gpu}"
    )
    away = pod("p").affinity("pool", "In", "cpu").build()
    assert placement_reason(away, gpu.build()) == "node(s) had untolerated taint {nvidia.com/gpu}"
    assert placement_reason(cpu_pod, gpu.cordon().build()) == UNSCHEDULABLE


@pytest.mark.parametrize(
    ("taint_value", "toleration", "ok"),
    [
        ("950", ("sla", "Gt", "900"), True),  # the taint's value above the toleration's
        ("900", ("sla", "Gt", "900"), False),
        ("800", ("sla", "Gt", "900"), False),
        ("800", ("sla", "Lt", "900"), True),  # below it
        ("900", ("sla", "Lt", "900"), False),
        ("-5", ("sla", "Lt", "0"), True),
        ("950", ("sla", "Gt", "+900"), False),  # not canonical: no sign but a minus
        ("950", ("sla", "Gt", "0900"), False),  # no leading zero
        ("5", ("sla", "Gt", "-0"), False),
        ("0950", ("sla", "Gt", "900"), False),  # on the taint's side too
        ("950", ("sla", "Gt", "9e2"), False),
        ("high", ("sla", "Gt", "900"), False),  # a taint value that is no integer
        ("950", ("other", "Gt", "900"), False),
        ("950", ("sla", "Gt", "900", "NoExecute"), False),
        ("950", ("sla", "Gt", "900", ""), True),  # an empty effect: every effect
        (str(2**63), ("sla", "Gt", "0"), False),  # past 64 bits: no integer
    ],
)
def test_gt_and_lt_tolerations_compare_integers_as_kubernetes_does(
    taint_value: str, toleration: tuple[str, ...], ok: bool
) -> None:
    n = node("x").taint("sla", taint_value, "NoSchedule").build()
    tolerating = pod("p").tolerate(*toleration).build()
    assert (untolerated_taint(tolerating, n) is None) is ok


def test_noexecute_taint_is_a_predicate_and_keyless_value_is_shown_bare() -> None:
    n = node("x").taint("maintenance", "", "NoExecute").build()
    assert placement_reason(pod("p").build(), n) == "node(s) had untolerated taint {maintenance}"
    assert placement_reason(pod("p").tolerate("maintenance", "Exists").build(), n) is None
    wrong_effect = pod("p").tolerate("maintenance", "Exists", "", "NoSchedule").build()
    assert placement_reason(wrong_effect, n) is not None


def test_prefer_no_schedule_is_not_a_predicate() -> None:
    n = node("x").taint("soft", "yes", "PreferNoSchedule").build()
    assert placement_reason(pod("p").build(), n) is None
    assert untolerated_taint(pod("p").build(), n) is None


def test_every_hard_taint_must_be_tolerated() -> None:
    n = node("x").taint("a", "1", "NoSchedule").taint("b", "2", "NoExecute").build()
    only_a = pod("p").tolerate("a", "Equal", "1").build()
    taint = untolerated_taint(only_a, n)
    assert taint is not None and taint.key == "b"
    both = pod("p").tolerate("a", "Equal", "1").tolerate("b", "Exists").build()
    assert placement_reason(both, n) is None


def test_a_cordoned_node_takes_only_pods_tolerating_the_unschedulable_taint() -> None:
    # As kube-scheduler's NodeUnschedulable: the toleration decides, whether or not the
    # node carries the taint yet (DaemonSets' pods tolerate it).
    n = node("x").cordon().build()
    assert placement_reason(pod("p").build(), n) == UNSCHEDULABLE
    assert placement_reason(pod("p").tolerate("other", "Exists").build(), n) == UNSCHEDULABLE
    wrong_effect = pod("p").tolerate("node.kubernetes.io/unschedulable", "Exists", "", "NoExecute")
    assert placement_reason(wrong_effect.build(), n) == UNSCHEDULABLE
    cordon = pod("p").tolerate("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule")
    assert placement_reason(cordon.build(), n) is None
    assert placement_reason(pod("p").tolerate("", "Exists").build(), n) is None


def test_insufficient_names_each_short_resource_in_kubernetes_words() -> None:
    demand = {CPU: 2000, MEMORY: 10, GPU: 1, PODS: 1}
    free = {CPU: 1000, MEMORY: 10, PODS: 0}
    # In resource-name order; a resource the node lacks entirely is short too.
    assert insufficient(demand, free) == [
        "Insufficient cpu",
        "Insufficient nvidia.com/gpu",
        TOO_MANY_PODS,
    ]
    assert insufficient({CPU: 1000, PODS: 1}, {CPU: 1000, PODS: 1}) == []


def test_summarize_phrase() -> None:
    reasons = Counter({"Insufficient cpu": 2, UNSCHEDULABLE: 1, SELECTOR_MISMATCH: 1})
    assert summarize(reasons, 4) == (
        "0/4 nodes are available: 2 Insufficient cpu, "
        "1 node(s) didn't match node selector, 1 node(s) were unschedulable"
    )
    assert summarize(Counter(), 3, 3) == "3/3 nodes are available"


def test_feasibility_memoises_on_placement_key_and_node() -> None:
    feas = Feasibility()
    pods = [pod(f"p{i}").req(cpu=i + 1).selector(gpu="v100").build() for i in range(20)]
    nodes = [node(f"n{i}").cap(cpu=i + 1).label(gpu="v100").build() for i in range(3)]
    for p in pods:
        for n in nodes:
            assert feas.reason(p, n) is None
    assert len(feas) == 3  # requests differ, placement keys do not: one per node
    assert feas.reason(pod("q").selector(gpu="a100").build(), nodes[0]) == SELECTOR_MISMATCH
    assert len(feas) == 4
