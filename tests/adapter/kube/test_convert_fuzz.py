"""Fuzz: whatever objects a user applies, conversion ends in findings and a snapshot every
scheduler decides on, and every decision passes the validator (issue 13)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.kube.convert import convert
from adapter.kube.memo import Memo
from solver.config import SolverConfig
from solver.schedulers import SCHEDULERS
from solver.validate import check

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "1", "-1", "1e30", "500m", "1Gi", "999999999999Ti", "abc", "n1"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
quantity = st.sampled_from(["1", "2", "500m", "1Gi", "1e30", "-1", "x", 3, 2.5, None, []])


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Node", "Pod", "PodGroup", "Queue", "Workload", "Job", "Other"]))
    name = draw(st.sampled_from(["a", "b", "n1", "g", ""]))
    obj: dict[str, Any] = {
        "apiVersion": draw(
            st.sampled_from(
                [
                    "v1",
                    "batch/v1",
                    "scheduling.x-k8s.io/v1alpha1",
                    "scheduling.k8s.io/v1alpha2",  # the Workload API's PodGroups
                    "scheduling.k8s.io/v1alpha1",  # 1.35's Workloads
                    "x/v1",
                ]
            )
        ),
        "kind": kind,
        "metadata": draw(
            st.one_of(
                st.just({"name": name, "namespace": "ns"}),
                st.fixed_dictionaries(
                    {
                        "name": st.just(name),
                        "annotations": st.dictionaries(
                            st.sampled_from(["scheduling.k8s.io/group-name"]), values, max_size=1
                        ),
                    }
                ),
                # As a server stores it (uid, resourceVersion: what the memo keys on), or
                # shaped as none would.
                st.fixed_dictionaries(
                    {
                        "name": st.just(name),
                        "namespace": st.just("ns"),
                        "uid": st.one_of(st.just(f"uid-{name}"), values),
                        "resourceVersion": st.one_of(st.just("7"), values),
                        "creationTimestamp": st.one_of(st.just("2026-12-01T00:00:00Z"), values),
                        "annotations": st.one_of(values, st.just({})),
                    }
                ),
                values,
            )
        ),
    }
    if kind == "Node":
        obj["status"] = draw(
            st.one_of(
                st.fixed_dictionaries(
                    {
                        "allocatable": st.dictionaries(
                            st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"]), quantity
                        )
                    }
                ),
                values,
            )
        )
    elif kind in ("Pod", "Job"):
        container = {
            "name": "c",
            "resources": {
                "requests": draw(
                    st.dictionaries(st.sampled_from(["cpu", "memory", ""]), quantity, max_size=2)
                )
            },
        }
        spec: Any = {
            "schedulerName": "gangsat",
            "containers": [container],
            "nodeName": draw(st.sampled_from([None, "n1", "ghost"])),
            "schedulingGates": draw(st.sampled_from([None, [{"name": "g"}], "x"])),
            "nodeSelector": draw(st.one_of(st.none(), values)),
            "tolerations": draw(st.one_of(st.none(), values)),
            "priority": draw(scalars),
            # The Workload API's ways of joining a group, well-formed or not.
            "schedulingGroup": draw(
                st.one_of(st.none(), st.fixed_dictionaries({"podGroupName": scalars}), values)
            ),
            "workloadRef": draw(
                st.one_of(
                    st.none(),
                    st.fixed_dictionaries(
                        {"name": scalars, "podGroup": scalars, "podGroupReplicaKey": scalars}
                    ),
                    values,
                )
            ),
        }
        if kind == "Job":
            spec = {
                "parallelism": draw(st.one_of(st.integers(-1, 50), scalars)),
                "template": {"spec": spec},
            }
        obj["spec"] = draw(st.one_of(st.just(spec), values))
        phase = st.one_of(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]), values)
        obj["status"] = draw(st.one_of(st.none(), st.fixed_dictionaries({"phase": phase}), values))
    elif kind == "Workload":
        group = st.fixed_dictionaries(
            {"name": scalars, "policy": st.one_of(values, st.just({"gang": {"minCount": 2}}))}
        )
        obj["spec"] = draw(st.one_of(st.fixed_dictionaries({"podGroups": st.lists(group)}), values))
    else:
        gang = st.one_of(values, st.just({"minCount": 2}))
        policy = st.one_of(st.just({"basic": {}}), st.fixed_dictionaries({"gang": gang}))
        obj["spec"] = draw(
            st.one_of(
                st.fixed_dictionaries({"minMember": scalars, "queue": scalars, "weight": scalars}),
                st.fixed_dictionaries({"schedulingPolicy": policy, "priority": scalars}),
                values,
            )
        )
    return obj


CONFIG = SolverConfig(time_limit_s=0.5, deterministic=True)


def _stored_as(obj: dict[str, Any]) -> tuple[str, str] | None:
    """Its uid and resourceVersion, where it has both as strings."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    return (uid, version) if isinstance(uid, str) and isinstance(version, str) else None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(objects(), max_size=8))
def test_any_objects_end_in_findings_and_a_valid_decision(objs: list[dict[str, Any]]) -> None:
    fresh = convert(objs)
    state = fresh.state
    memo = Memo()  # as KubeCluster converts: memoised, and again from the memo (by
    # identity), and from copies of the objects (by uid and resourceVersion, which an API
    # server never gives two objects of different content): each time what was read
    # afresh, findings and all
    keys = [_stored_as(o) for o in objs]
    copies = [dict(o) for o, k in zip(objs, keys, strict=True) if k is None or keys.count(k) == 1]
    for again in (objs, objs):
        assert convert(again, memo=memo) == fresh
    assert convert(copies, memo=memo) == convert(copies)
    for name, schedule in SCHEDULERS.items():
        decision = schedule(state, CONFIG)
        if name != "greedy":
            assert check(state, decision) == [], (name, decision)
