"""PodDisruptionBudgets as preemption reads them: a gang with a bound pod one covers is
no victim, so an eviction half-refused can never leave it below minMember."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.kube.budgets import selects
from adapter.kube.convert import convert
from tests.adapter.kube.test_convert import node, pod, podgroup


@pytest.mark.parametrize(
    ("selector", "labels", "covered"),
    [
        ({}, {"app": "x"}, True),  # policy/v1: an empty selector selects every pod
        (None, {"app": "x"}, False),  # none at all: no pod
        ({"matchLabels": {"app": "x"}}, {"app": "x", "k": "v"}, True),
        ({"matchLabels": {"app": "x"}}, {"app": "y"}, False),
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]},
            {"app": "x"},
            True,
        ),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, {}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, {"app": "x"}, False),
    ],
)
def test_selectors_as_policy_v1_reads_them(
    selector: Any, labels: dict[str, str], covered: bool
) -> None:
    assert selects(selector, labels) is covered


def _budget(namespace: str, selector: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "namespace": namespace},
        "spec": {"maxUnavailable": 1, "selector": selector},
    }


def test_a_gang_with_a_bound_pod_a_budget_covers_is_no_victim() -> None:
    objects: list[dict[str, Any]] = [node("n1", cpu="8")]
    for name in ("covered", "free", "waiting"):
        objects.append(podgroup("scheduling.volcano.sh/v1beta1", name, {"minMember": 2}))
        for i in range(2):
            p = pod(
                f"{name}-{i}",
                annotations={"scheduling.k8s.io/group-name": name},
                labels={"app": name},
                node_name=None if name == "waiting" else "n1",
            )
            objects.append(p)
    # One covers a running gang; one the waiting gang's pods (not bound: nothing to
    # evict); one another namespace's pods.
    objects += [
        _budget("team", {"matchLabels": {"app": "covered"}}),
        _budget("team", {"matchLabels": {"app": "waiting"}}),
        _budget("elsewhere", {}),
    ]
    conversion = convert(objects)
    assert conversion.ignored == []
    preemptible = {g.name: g.preemptible for g in conversion.state.gangs}
    assert preemptible == {"team/covered": False, "team/free": True, "team/waiting": True}
