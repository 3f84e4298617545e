"""Fuzz: whatever a state file holds, `gangsat solve` ends in a clear error or a decision
the validator accepts (issue 13). The files are JSON as a user or a tool writes them:
the right shape with wrong values (huge, negative, fractional, NaN, strings), unknown
references, duplicates, gated and bound pods, as well as the wrong shape."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.inputs import BadInput, parse_state
from solver.config import SolverConfig
from solver.schedulers import SCHEDULERS
from solver.validate import check

NAMES = ["n1", "n2", "p1", "p2", "p3", "g", "h", "default", "q", ""]
bad_amount = st.one_of(
    st.sampled_from([-1, 10**15, 10**16, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1", "x", None, [], {}]),
)
name = st.sampled_from(NAMES)


@st.composite
def states(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:  # the wrong shape altogether
        return draw(st.one_of(st.lists(st.integers(), max_size=2), st.text(max_size=5), st.none()))
    # Half the files are plausible throughout, so that many are decided on; in the other
    # half any value may be what breaks a careless reader.
    noisy = draw(st.booleans())

    def pick(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(*[good] * 4, bad) if noisy else good)

    def resources() -> dict[str, Any]:
        keys = draw(st.lists(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), max_size=3))
        out = {k: pick(st.integers(0, 8000), bad_amount) for k in keys}
        if noisy and draw(st.integers(0, 4)) == 0:
            out[draw(st.sampled_from(["", "cpu "]))] = 1
        return out

    node_names = [f"n{i}" for i in range(draw(st.integers(0, 3)))]
    nodes = [
        {
            "name": n,
            "allocatable": resources(),
            "labels": {"zone": draw(st.sampled_from(["a", "b"])), "kubernetes.io/hostname": n},
            "unschedulable": draw(st.booleans()),
            "taints": draw(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "key": name,
                            "effect": st.sampled_from(
                                ["NoSchedule", "NoExecute", "Bad"] if noisy else ["NoSchedule"]
                            ),
                        }
                    ),
                    max_size=1,
                )
            ),
        }
        for n in node_names
    ]
    gang_names = draw(st.sampled_from([[], ["g"], ["g", "h"]] + ([["g", "g"]] if noisy else [])))
    gangs = [
        {
            "name": gang,
            "min_member": pick(st.integers(1, 4), bad_amount),
            "queue": draw(st.sampled_from(["default", "q"] + (["missing"] if noisy else []))),
        }
        for gang in gang_names
    ]
    queues = [
        {
            "name": queue,
            "weight": pick(st.integers(1, 5), bad_amount),
            "capability": resources() if draw(st.integers(0, 2)) == 0 else None,
        }
        for queue in draw(
            st.sampled_from([["q"], ["q", "default"]] + ([["q", "q"]] if noisy else []))
        )
    ]
    pods = []
    for i in range(draw(st.integers(0, 5))):
        pod: dict[str, Any] = {"name": f"p{i}", "requests": resources()}
        if gang_names and draw(st.booleans()):
            pod["gang"] = draw(st.sampled_from(gang_names + (["missing"] if noisy else [])))
        if node_names and draw(st.integers(0, 3)) == 0:
            pod["node_name"] = draw(st.sampled_from(node_names + (["gone"] if noisy else [])))
        if draw(st.integers(0, 4)) == 0:
            pod["gates"] = ["example.com/quota"]
        if draw(st.integers(0, 3)) == 0:
            pod["node_selector"] = {"zone": draw(st.sampled_from(["a", "b"]))}
        if draw(st.integers(0, 3)) == 0:
            pod["tolerations"] = [
                {"key": draw(name), "operator": draw(st.sampled_from(["Exists", "Equal"]))}
            ]
        pod["priority"] = pick(st.integers(-10, 10), st.sampled_from([2**40, "high", None]))
        pods.append(pod)
    return {"nodes": nodes, "pods": pods, "gangs": gangs, "queues": queues}


CONFIG = SolverConfig(time_limit_s=0.5, deterministic=True)
PREEMPTING = CONFIG.model_copy(update={"preemption": True})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states())
def test_any_state_file_ends_in_a_clear_error_or_a_valid_decision(raw: Any) -> None:
    text = json.dumps(raw)  # NaN and Infinity as Python's json writes them
    try:
        state = parse_state(text, "state.json")
    except BadInput as e:
        assert e.lines and all(line.startswith("state.json") for line in e.lines), e.lines
        return
    for scheduler in ("cpsat", "gang-greedy", "greedy"):
        decision = SCHEDULERS[scheduler](state, CONFIG)
        violations = check(state, decision)
        if scheduler != "greedy":
            assert violations == [], (scheduler, violations)
            # With preemption on too (the joint model, or the preemption model).
            preempting = SCHEDULERS[scheduler](state, PREEMPTING)
            assert check(state, preempting) == [], (scheduler, "preemption")
        else:
            # The stock baseline may split gangs, and knows nothing of queues' capability:
            # those are its flaws, and the validator names them.
            flaws = ("partial-gang", "capability")
            assert all(v.kind in flaws for v in violations), violations
