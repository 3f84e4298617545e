"""The pods a pod-affinity term selects (``adapter.kube.pod_terms.Selected``), worked out
as set operations on a label index, agree with the selector read pod by pod
(``budgets.selects``) on random labels and selectors, malformed parts included."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from adapter.kube.budgets import selects
from adapter.kube.pod_terms import AFFINITY, Selected, terms_of

KEYS = ["app", "job", "role", "tier"]
VALUES = ["a", "b", "c"]
OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt"]


def labels(rng: random.Random, odd: bool) -> dict[str, Any]:
    out: dict[str, Any] = {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.6}
    if odd:
        out["odd"] = 3  # not a string: the pods then are checked one by one
    return out


def expression(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return "not a mapping"
    op = rng.choice(OPERATORS)
    e: dict[str, Any] = {"key": rng.choice(KEYS), "operator": op}
    if op in ("In", "NotIn", "Gt") or rng.random() < 0.1:
        e["values"] = rng.sample(VALUES, rng.randint(0, 2))
    if rng.random() < 0.05:
        e["values"] = "a"  # not a list
    return e


def selector(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return None
    out: dict[str, Any] = {}
    if rng.random() < 0.5:
        out["matchLabels"] = {k: rng.choice(VALUES) for k in rng.sample(KEYS, rng.randint(1, 2))}
    if rng.random() < 0.7:
        out["matchExpressions"] = [expression(rng) for _ in range(rng.randint(1, 3))]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_index_selects_what_the_selector_selects_pod_by_pod(seed: int) -> None:
    rng = random.Random(seed)
    pods = [
        (
            {
                "metadata": {
                    "name": f"p{i}",
                    "namespace": rng.choice(["ns1", "ns2"]),
                    "labels": labels(rng, seed % 4 == 0 and i == 0),
                }
            },
            f"p{i}",
        )
        for i in range(60)
    ]
    chosen = Selected(pods)
    carrier = {"metadata": {"namespace": "ns1"}}
    for _ in range(25):
        wanted = selector(rng)
        term_obj: dict[str, Any] = {"labelSelector": wanted, "topologyKey": "zone"}
        if rng.random() < 0.3:
            term_obj["namespaceSelector"] = {}
        spec = {
            "affinity": {AFFINITY: {"requiredDuringSchedulingIgnoredDuringExecution": [term_obj]}}
        }
        (term,) = terms_of(carrier, spec, AFFINITY)
        expected = [
            name
            for obj, name in pods
            if (term.namespaces is None or obj["metadata"]["namespace"] in term.namespaces)
            and wanted is not None
            and selects(wanted, obj["metadata"]["labels"])
        ]
        assert chosen(term) == expected, wanted


def _carrier(labels: dict[str, str], term: dict[str, Any], uid: str = "") -> dict[str, Any]:
    """A pod (with a ``uid``: stored by an API server) of one required podAffinity term."""
    return {
        "metadata": {"namespace": "ns1", "labels": labels, "uid": uid},
        "spec": {
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        },
    }


def test_label_keys_select_by_the_pods_own_values_and_merge_once() -> None:
    # Two jobs' pods share app=x; matchLabelKeys on job selects the carrier's job only,
    # mismatchLabelKeys on tier every other tier.
    pods = [
        ({"metadata": {"namespace": "ns1", "labels": {"app": "x", "job": j, "tier": t}}}, f"{j}{t}")
        for j in ("a", "b")
        for t in ("hi", "lo")
    ]
    term = {
        "labelSelector": {"matchLabels": {"app": "x"}},
        "topologyKey": "zone",
        "matchLabelKeys": ["job", "absent"],
        "mismatchLabelKeys": ["tier"],
    }
    template = _carrier({"app": "x", "job": "a", "tier": "hi"}, term)
    (read,) = terms_of(template, template["spec"], AFFINITY)
    assert Selected(pods)(read) == ["alo"]
    # A pod as kube-apiserver stores it, the keys merged into its selector already: the
    # same term as its Job's template, which no API server merged.
    stored = copy.deepcopy(term)
    stored["labelSelector"]["matchExpressions"] = [
        {"key": "job", "operator": "In", "values": ["a"]},
        {"key": "tier", "operator": "NotIn", "values": ["hi"]},
    ]
    carrier = _carrier({"app": "x", "job": "a", "tier": "hi"}, stored, uid="u1")
    (again,) = terms_of(carrier, carrier["spec"], AFFINITY)
    assert again == read and again.group() == read.group()
    # A user's own requirement on a mismatchLabelKeys key (the API allows it): the
    # template's NotIn is merged beside it, as the API server would.
    tenants = {
        "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
        "topologyKey": "zone",
        "mismatchLabelKeys": ["tier"],
    }
    template = _carrier({"tier": "hi"}, tenants)
    (read,) = terms_of(template, template["spec"], AFFINITY)
    assert Selected(pods)(read) == ["alo", "blo"]


def test_a_stored_pod_relabelled_keeps_the_selector_the_api_server_merged() -> None:
    # Stored with tier In [hi] merged in, then relabelled tier=lo: the term still selects
    # tier hi (merged again, it asked for both and selected nothing).
    stored = {
        "labelSelector": {
            "matchLabels": {"app": "x"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["hi"]}],
        },
        "topologyKey": "zone",
        "matchLabelKeys": ["tier"],
    }
    carrier = _carrier({"app": "x", "tier": "lo"}, stored, uid="u1")
    (read,) = terms_of(carrier, carrier["spec"], AFFINITY)
    pods = [({"metadata": {"namespace": "ns1", "labels": {"app": "x", "tier": "hi"}}}, "hi")]
    assert Selected(pods)(read) == ["hi"]
