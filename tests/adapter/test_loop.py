"""The scheduling loop against a fake cluster that refuses chosen binds and evictions.

The loop's promise: a gang is bound whole (minMember) or not at all, a decision the
validator rejects is not bound, and no cluster or solver failure escapes ``run_cycle``.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Collection, Iterable, Sequence

import pytest

from adapter.cluster import ClusterError, CycleReport, GangStatus
from adapter.loop import LoopSettings, run_cycle
from adapter.metrics import LoopMetrics
from adapter.results import CycleResult
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.schedulers import SCHEDULERS
from tests.builders import gang, node, pod, pods_of, queue, state

FAST = SolverConfig(time_limit_s=2.0, deterministic=True)
GANG_AWARE = ["cpsat", "gang-greedy"]


class FakeCluster:
    """A fixed snapshot; binds and evictions are recorded and show in later snapshots."""

    def __init__(
        self,
        base: ClusterState,
        fail_binds: Iterable[str] = (),
        fail_evictions: bool = False,
        snapshot_error: ClusterError | None = None,
        report_error: ClusterError | None = None,
    ) -> None:
        self.base = base
        self.fail_binds = set(fail_binds)
        self.fail_evictions = fail_evictions
        self.snapshot_error = snapshot_error
        self.report_error = report_error
        self.bound: dict[str, str] = {}  # pod -> node, bound through this fake
        self.bind_calls: list[tuple[str, str]] = []
        self.evictions: list[tuple[str, str]] = []  # (pod, reason) of successful evictions
        self.evict_calls: list[str] = []
        self.reports: list[list[GangStatus]] = []
        self.in_doubt: set[str] = set()  # pods whose binds' outcomes it has not told yet
        self.hidden: dict[str, str] = {}  # pod -> node the snapshots lack, bound to it

    def snapshot(self, again: bool = False) -> ClusterState:
        if self.snapshot_error is not None:
            raise self.snapshot_error
        pods = tuple(
            p.model_copy(update={"node_name": self.bound[p.name]}) if p.name in self.bound else p
            for p in self.base.pods
        )
        return self.base.model_copy(update={"pods": pods})

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        failures: dict[str, ClusterError] = {}
        for name, target in placements:
            self.bind_calls.append((name, target))
            if name in self.fail_binds:
                failures[name] = ClusterError("Conflict", f"binding {name} to {target}: refused")
            elif name in self.bound:
                failures[name] = ClusterError("Conflict", f"{name} is already bound")
            else:
                self.bound[name] = target
        return failures

    def unsettled(self) -> set[str]:
        return set(self.in_doubt)

    def where_bound(self, pods: Collection[str]) -> dict[str, str]:
        """Bound through this fake or in its base; ``hidden``: bound to a node the
        snapshots lack (a Node deleted meanwhile)."""
        on = {p.name: p.node_name for p in self.base.pods if p.node_name is not None}
        on |= self.bound | self.hidden
        evicted = {p for p, _ in self.evictions}
        return {p: on[p] for p in pods if p in on and p not in evicted}

    def evict(self, pods: Sequence[str], reason: str) -> dict[str, ClusterError]:
        failures: dict[str, ClusterError] = {}
        for name in pods:
            self.evict_calls.append(name)
            if self.fail_evictions:
                failures[name] = ClusterError("Forbidden", f"evicting {name}: refused by the test")
            elif name not in self.bound:
                failures[name] = ClusterError("NotFound", f"{name} is not bound")
            else:
                del self.bound[name]
                self.evictions.append((name, reason))
        return failures

    def report(self, report: CycleReport) -> None:
        if self.report_error is not None:
            raise self.report_error
        self.reports.append(list(report.statuses))


def two_gangs() -> ClusterState:
    """One 8-CPU node; gang g (3 x 1 CPU, minMember 3) and gang h (2 x 1 CPU, minMember 2).

    5 CPUs asked of 8: every scheduler places all five pods.
    """
    return state(
        nodes=[node("n0").cap(cpu=8, memory="16Gi")],
        pods=pods_of("g", 3, cpu=1) + pods_of("h", 2, cpu=1),
        gangs=[gang("g", 3).created(0), gang("h", 2).created(1)],
    )


def status_of(result: CycleResult, name: str) -> GangStatus:
    [found] = [s for s in result.statuses if s.gang == name]
    return found


def sample(metrics: LoopMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_settings_are_atomic_unless_the_scheduler_is_the_stock_greedy() -> None:
    assert LoopSettings(scheduler="cpsat").atomic()
    assert LoopSettings(scheduler="gang-greedy").atomic()
    assert not LoopSettings(scheduler="greedy").atomic()
    assert LoopSettings(scheduler="greedy", atomic_gangs=True).atomic()
    assert not LoopSettings(scheduler="cpsat", atomic_gangs=False).atomic()


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_a_bind_failing_part_way_rolls_the_gang_back(scheduler: str) -> None:
    cluster = FakeCluster(two_gangs(), fail_binds={"g-1"})
    metrics = LoopMetrics()
    result = run_cycle(cluster, LoopSettings(scheduler=scheduler, solver=FAST), metrics)

    assert result.error is None
    # One batch, gang by gang in pod-name order: g-0 binds, g-1 is refused, g-2 binds,
    # then h-0 and h-1 bind; g (2 of 3) is then evicted whole.
    assert [p for p, _ in cluster.bind_calls] == ["g-0", "g-1", "g-2", "h-0", "h-1"]
    assert set(result.failed_binds) == {"g-1"}
    assert set(result.rolled_back) == {"g"}
    assert "g-1" in result.rolled_back["g"]
    assert result.evicted == ["g-0", "g-2"]
    assert [p for p, _ in cluster.evictions] == ["g-0", "g-2"]
    assert cluster.evictions[0][1].startswith("gang rollback")
    assert result.stranded == {}
    # No pod of g is left bound, in the result or on the cluster; h is bound whole.
    assert result.bound == {"h-0": "n0", "h-1": "n0"}
    assert cluster.bound == {"h-0": "n0", "h-1": "n0"}
    assert result.admitted() == ["h"]

    g, h = status_of(result, "g"), status_of(result, "h")
    assert (g.phase, g.bound, g.min_member, g.reason) == ("Pending", 0, 3, "BindFailed")
    assert "g-1" in g.message
    assert (h.phase, h.bound, h.reason) == ("Running", 2, None)
    assert cluster.reports == [result.statuses]

    # Counters, worked from the cycle: 2 binds kept (h-0, h-1), 1 refused (g-1),
    # 2 undone (g-0, g-2); one gang rolled back, one admitted; 5 pods were pending.
    assert sample(metrics, "gangsat_binds_total", result="bound") == 2
    assert sample(metrics, "gangsat_binds_total", result="failed") == 1
    assert sample(metrics, "gangsat_binds_total", result="rolled_back") == 2
    assert sample(metrics, "gangsat_gang_rollbacks_total") == 1
    assert sample(metrics, "gangsat_gangs_admitted_total") == 1
    assert sample(metrics, "gangsat_rejected_gangs_total") == 0
    assert sample(metrics, "gangsat_stranded_pods_total") == 0
    assert sample(metrics, "gangsat_pending_pods") == 5 - 2  # h's two pods bound and kept
    assert sample(metrics, "gangsat_cycles_total", scheduler=scheduler, outcome="ok") == 1
    assert sample(metrics, "gangsat_cycles_total", scheduler=scheduler, outcome="error") is None
    assert sample(metrics, "gangsat_cycle_duration_seconds_count", scheduler=scheduler) == 1

    # Next cycle the refusal is gone: g binds whole and the counters accumulate.
    cluster.fail_binds.clear()
    again = run_cycle(cluster, LoopSettings(scheduler=scheduler, solver=FAST), metrics)
    assert again.bound == {"g-0": "n0", "g-1": "n0", "g-2": "n0"}
    assert status_of(again, "g").phase == "Running"
    assert status_of(again, "h").phase == "Running"
    assert sample(metrics, "gangsat_binds_total", result="bound") == 2 + 3
    assert sample(metrics, "gangsat_binds_total", result="failed") == 1
    assert sample(metrics, "gangsat_gangs_admitted_total") == 1 + 1
    assert sample(metrics, "gangsat_pending_pods") == 0  # g's three pods bound now
    assert sample(metrics, "gangsat_cycles_total", scheduler=scheduler, outcome="ok") == 2


def test_a_rollback_evicts_only_this_cycles_binds() -> None:
    # g-0 was bound earlier; g-1 and g-2 are placed now and g-2 is refused. held 1 +
    # bound now 1 = 2 < minMember 3: g-1 is evicted, g-0 (not this cycle's) is kept.
    base = state(
        nodes=[node("n0").cap(cpu=8)],
        pods=[
            pod("g-0").req(cpu=1).gang("g").on("n0"),
            pod("g-1").req(cpu=1).gang("g"),
            pod("g-2").req(cpu=1).gang("g"),
        ],
        gangs=[gang("g", 3)],
    )
    cluster = FakeCluster(base, fail_binds={"g-2"})
    result = run_cycle(cluster, LoopSettings(scheduler="gang-greedy"))
    assert [p for p, _ in cluster.bind_calls] == ["g-1", "g-2"]
    assert result.evicted == ["g-1"]
    assert cluster.bound == {}
    assert set(result.rolled_back) == {"g"}
    g = status_of(result, "g")
    assert (g.phase, g.bound, g.reason) == ("Pending", 1, "BindFailed")


def test_a_failed_eviction_is_reported_as_stranded_not_raised() -> None:
    cluster = FakeCluster(two_gangs(), fail_binds={"g-1"}, fail_evictions=True)
    metrics = LoopMetrics()
    result = run_cycle(cluster, LoopSettings(scheduler="gang-greedy"), metrics)

    assert result.error is None
    assert cluster.evict_calls == ["g-0", "g-2"]
    assert set(result.stranded) == {"g-0", "g-2"}
    assert "refused by the test" in result.stranded["g-0"]
    assert result.evicted == []
    assert set(result.rolled_back) == {"g"}
    # The stranded pods are still bound on the cluster and counted in g's status, but
    # they are not among the cycle's kept binds.
    assert cluster.bound == {"g-0": "n0", "g-2": "n0", "h-0": "n0", "h-1": "n0"}
    assert "g-0" not in result.bound and "g-2" not in result.bound
    g = status_of(result, "g")
    assert (g.phase, g.bound, g.reason) == ("Pending", 2, "BindFailed")
    assert sample(metrics, "gangsat_stranded_pods_total") == 2
    assert sample(metrics, "gangsat_binds_total", result="rolled_back") == 0
    assert sample(metrics, "gangsat_binds_total", result="bound") == 2


def test_greedy_keeps_a_partly_bound_gang() -> None:
    cluster = FakeCluster(two_gangs(), fail_binds={"g-1"})
    result = run_cycle(cluster, LoopSettings(scheduler="greedy"))
    # Not atomic: the refusal of g-1 neither stops g-2 nor undoes g-0.
    assert [p for p, _ in cluster.bind_calls] == ["g-0", "g-1", "g-2", "h-0", "h-1"]
    assert result.rolled_back == {}
    assert result.evicted == []
    assert cluster.evict_calls == []
    assert set(result.bound) == {"g-0", "g-2", "h-0", "h-1"}
    assert set(cluster.bound) == {"g-0", "g-2", "h-0", "h-1"}
    g = status_of(result, "g")
    assert (g.phase, g.bound) == ("Pending", 2)


def test_a_gang_scheduler_with_atomic_gangs_off_keeps_partial_binds() -> None:
    cluster = FakeCluster(two_gangs(), fail_binds={"g-1"})
    result = run_cycle(cluster, LoopSettings(scheduler="cpsat", solver=FAST, atomic_gangs=False))
    assert result.rolled_back == {}
    assert set(cluster.bound) == {"g-0", "g-2", "h-0", "h-1"}


def test_greedy_with_atomic_gangs_binds_no_partial_gang() -> None:
    # Two 1-CPU nodes, gang g of 3 x 1 CPU: greedy places 2 of 3 pods (a partial gang).
    # Atomic binding makes the validator's partial-gang finding a rejection: nothing binds.
    base = state(
        nodes=[node("n0").cap(cpu=1), node("n1").cap(cpu=1)],
        pods=pods_of("g", 3, cpu=1),
        gangs=[gang("g", 3)],
    )
    cluster = FakeCluster(base)
    metrics = LoopMetrics()
    result = run_cycle(cluster, LoopSettings(scheduler="greedy", atomic_gangs=True), metrics)
    assert result.decision is not None and len(result.decision.placements) == 2
    assert [v.kind for v in result.violations] == ["partial-gang"]
    assert set(result.rejected) == {"g"}
    assert cluster.bind_calls == []
    assert result.bound == {}
    g = status_of(result, "g")
    assert (g.phase, g.reason) == ("Pending", "InvalidDecision")
    assert sample(metrics, "gangsat_rejected_gangs_total") == 1

    # The same decision without atomic binding is bound pod by pod: 2 pods of g.
    plain = FakeCluster(base)
    run_cycle(plain, LoopSettings(scheduler="greedy"))
    assert len(plain.bound) == 2


def test_a_decision_the_validator_rejects_is_not_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # n0 has 2 CPUs. The rogue scheduler puts big (2 x 1 CPU) and bystander (1 x 1 CPU)
    # on n0 — 3 CPUs, over capacity — and ok (1 x 1 CPU) on n1. The capacity finding on
    # n0 rejects every gang placed there (big and bystander); ok on n1 is bound.
    base = state(
        nodes=[node("n0").cap(cpu=2), node("n1").cap(cpu=2)],
        pods=pods_of("big", 2, cpu=1) + pods_of("bystander", 1, cpu=1) + pods_of("ok", 1, cpu=1),
        gangs=[gang("big", 2), gang("bystander", 1), gang("ok", 1)],
    )

    def overcommit(s: ClusterState, config: SolverConfig) -> Decision:
        return Decision(
            scheduler="overcommit",
            placements={"big-0": "n0", "big-1": "n0", "bystander-0": "n0", "ok-0": "n1"},
            admitted=("big", "bystander", "ok"),
            status=SolveStatus.GREEDY,
        )

    monkeypatch.setitem(SCHEDULERS, "overcommit", overcommit)
    cluster = FakeCluster(base)
    metrics = LoopMetrics()
    result = run_cycle(cluster, LoopSettings(scheduler="overcommit"), metrics)

    assert result.error is None
    assert [(v.kind, v.subject) for v in result.violations] == [("capacity", "n0")]
    assert set(result.rejected) == {"big", "bystander"}
    assert cluster.bind_calls == [("ok-0", "n1")]
    assert result.bound == {"ok-0": "n1"}
    assert result.admitted() == ["ok"]  # rejected gangs were never bound
    for name in ("big", "bystander"):
        s = status_of(result, name)
        assert (s.phase, s.reason) == ("Pending", "InvalidDecision")
        assert "capacity" in s.message
    assert status_of(result, "ok").phase == "Running"
    assert sample(metrics, "gangsat_rejected_gangs_total") == 2
    assert sample(metrics, "gangsat_binds_total", result="bound") == 1


def test_a_scheduler_that_raises_binds_nothing_and_does_not_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(s: ClusterState, config: SolverConfig) -> Decision:
        raise RuntimeError("boom")

    monkeypatch.setitem(SCHEDULERS, "broken", broken)
    cluster = FakeCluster(two_gangs())
    metrics = LoopMetrics()
    result = run_cycle(cluster, LoopSettings(scheduler="broken"), metrics)

    assert result.error is not None
    assert "broken" in result.error and "RuntimeError: boom" in result.error
    assert result.decision is None
    assert cluster.bind_calls == [] and result.bound == {}
    assert result.pending_pods == 5
    assert {s.gang: (s.phase, s.reason) for s in result.statuses} == {
        "g": ("Pending", "SchedulerError"),
        "h": ("Pending", "SchedulerError"),
    }
    assert cluster.reports == [result.statuses]
    assert sample(metrics, "gangsat_cycles_total", scheduler="broken", outcome="error") == 1
    assert sample(metrics, "gangsat_cycles_total", scheduler="broken", outcome="ok") is None
    assert sample(metrics, "gangsat_binds_total", result="bound") is None
    assert sample(metrics, "gangsat_pending_pods") == 5


class SlowSnapshot(FakeCluster):
    """A snapshot that takes ``seconds``, as a big cluster's conversion does."""

    def __init__(self, base: ClusterState, seconds: float) -> None:
        super().__init__(base)
        self.seconds = seconds

    def snapshot(self, again: bool = False) -> ClusterState:
        time.sleep(self.seconds)
        return super().snapshot(again)


def test_the_snapshot_s_time_comes_out_of_the_decision_s_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop gives the solver what the snapshot left of the limit (the rule itself,
    its floor and deterministic solves: tests/solver/test_config.py)."""
    limits: list[float] = []

    def recording(s: ClusterState, config: SolverConfig) -> Decision:
        limits.append(config.time_limit_s)
        return SCHEDULERS["gang-greedy"](s, config)

    monkeypatch.setitem(SCHEDULERS, "recording", recording)
    settings = LoopSettings(scheduler="recording", solver=SolverConfig(time_limit_s=2.0))
    result = run_cycle(SlowSnapshot(two_gangs(), 0.3), settings)
    assert result.snapshot_s >= 0.3 and len(result.bound) == 5
    [limit] = limits
    assert 1.0 <= limit <= 1.7


def test_a_failed_snapshot_sets_the_error_and_does_not_raise() -> None:
    cluster = FakeCluster(two_gangs(), snapshot_error=ClusterError("Unavailable", "apiserver"))
    metrics = LoopMetrics()
    result = run_cycle(cluster, LoopSettings(scheduler="gang-greedy"), metrics)
    assert result.error is not None
    assert result.error.startswith("snapshot failed")
    assert "Unavailable" in result.error
    assert result.decision is None
    assert cluster.bind_calls == [] and cluster.reports == []
    assert sample(metrics, "gangsat_cycles_total", scheduler="gang-greedy", outcome="error") == 1


def test_a_failed_report_does_not_undo_the_cycle() -> None:
    cluster = FakeCluster(two_gangs(), report_error=ClusterError("Conflict", "status update"))
    result = run_cycle(cluster, LoopSettings(scheduler="gang-greedy"))
    assert result.error is None
    assert len(cluster.bound) == 5


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_admitted_gangs_report_running(scheduler: str) -> None:
    # n0 has 4 CPUs and a-0 (bound earlier) holds 1. a-1 and b's two pods take the other
    # 3, so a (1 held + 1 new = minMember 2) and b (2 new) are admitted; huge (8 CPUs)
    # fits no node.
    base = state(
        nodes=[node("n0").cap(cpu=4)],
        pods=[
            pod("a-0").req(cpu=1).gang("a").on("n0"),
            pod("a-1").req(cpu=1).gang("a"),
            *pods_of("b", 2, cpu=1),
            *pods_of("huge", 1, cpu=8),
        ],
        gangs=[gang("a", 2), gang("b", 2), gang("huge", 1)],
    )
    cluster = FakeCluster(base)
    metrics = LoopMetrics()
    result = run_cycle(cluster, LoopSettings(scheduler=scheduler, solver=FAST), metrics)
    assert set(result.bound) == {"a-1", "b-0", "b-1"}
    statuses = {s.gang: s for s in result.statuses}
    assert statuses["a"] == GangStatus(gang="a", phase="Running", bound=2, min_member=2)
    assert statuses["b"] == GangStatus(gang="b", phase="Running", bound=2, min_member=2)
    assert (statuses["huge"].phase, statuses["huge"].reason) == ("Pending", "NotEnoughResources")
    assert sorted(result.admitted()) == ["a", "b"]
    assert sample(metrics, "gangsat_gangs_admitted_total") == 2
    assert sample(metrics, "gangsat_binds_total", result="bound") == 3
    assert sample(metrics, "gangsat_pending_pods") == 4 - 3  # huge's pod; a-1, b-0, b-1 bound


def test_a_refusal_after_min_member_is_reached_keeps_the_gang() -> None:
    # Gang g: 3 pods, minMember 2. g-0 and g-1 bind, g-2 is refused: 2 >= minMember, so
    # nothing is rolled back and g runs with 2 pods; g-2 stays pending for a later cycle.
    base = state(nodes=[node("n0").cap(cpu=8)], pods=pods_of("g", 3, cpu=1), gangs=[gang("g", 2)])
    cluster = FakeCluster(base, fail_binds={"g-2"})
    result = run_cycle(cluster, LoopSettings(scheduler="gang-greedy"))
    assert result.rolled_back == {} and cluster.evict_calls == []
    assert set(cluster.bound) == {"g-0", "g-1"}
    assert set(result.failed_binds) == {"g-2"}
    g = status_of(result, "g")
    assert (g.phase, g.bound) == ("Running", 2)
    assert result.admitted() == ["g"]


def test_pods_without_a_gang_count_against_the_default_queue_capability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default queue may hold 1 CPU; a rogue scheduler binds two gang-less 1-CPU pods
    # (implicit gangs pod:solo-0, pod:solo-1, both in the default queue). The capability
    # finding must reject both, although neither names a PodGroup.
    base = state(
        nodes=[node("n0").cap(cpu=4)],
        pods=[pod("solo-0").req(cpu=1), pod("solo-1").req(cpu=1)],
        queues=[queue().capability(cpu=1)],
    )

    def greedy_past_the_cap(s: ClusterState, config: SolverConfig) -> Decision:
        return Decision(
            scheduler="rogue",
            placements={"solo-0": "n0", "solo-1": "n0"},
            admitted=("pod:solo-0", "pod:solo-1"),
            status=SolveStatus.GREEDY,
        )

    monkeypatch.setitem(SCHEDULERS, "rogue", greedy_past_the_cap)
    cluster = FakeCluster(base)
    result = run_cycle(cluster, LoopSettings(scheduler="rogue"))

    assert [v.kind for v in result.violations] == ["capability"]
    assert set(result.rejected) == {"pod:solo-0", "pod:solo-1"}
    assert cluster.bind_calls == []
    assert result.admitted() == []


def _one_fits_one_waits() -> ClusterState:
    """n0 has 2 CPUs: gang fits (2 x 1 CPU) is placed; gang waits (3 x 1 CPU) cannot be."""
    return state(
        nodes=[node("n0").cap(cpu=2, memory="4Gi")],
        pods=pods_of("fits", 2, cpu=1) + pods_of("waits", 3, cpu=1),
        gangs=[gang("fits", 2).created(0), gang("waits", 3).created(1)],
    )


class _BindSignals(FakeCluster):
    """Notes when the first bind arrives."""

    def __init__(self, base: ClusterState) -> None:
        super().__init__(base)
        self.bind_arrived = threading.Event()

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        self.bind_arrived.set()
        return super().bind(placements)


def test_the_gangs_left_waiting_are_explained_once_the_binds_are_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scheduler is asked to defer its explanations, and they are worked out after
    the binds were sent: an explanation that waits for the first bind has it. Worked
    out first, it would wait in vain."""
    cluster = _BindSignals(_one_fits_one_waits())
    asked: list[bool] = []
    waited: list[bool] = []

    def deferring(s: ClusterState, config: SolverConfig) -> Decision:
        asked.append(config.defer_explanations)
        decision = SCHEDULERS["gang-greedy"](s, config)
        explain = decision._explain
        assert explain is not None

        def after_the_binds() -> dict[str, str]:
            waited.append(cluster.bind_arrived.wait(timeout=5))
            return explain()

        decision._explain = after_the_binds
        return decision

    monkeypatch.setitem(SCHEDULERS, "deferring", deferring)
    result = run_cycle(cluster, LoopSettings(scheduler="deferring"))

    assert asked == [True] and waited == [True]
    assert result.bound == {"fits-0": "n0", "fits-1": "n0"}
    assert result.decision is not None and not result.decision.explanations_pending
    waits = status_of(result, "waits")
    assert (waits.phase, waits.reason) == ("Pending", "NotEnoughResources")
    assert waits.message == result.decision.unschedulable["waits"]
    assert "cpu" in waits.message


def test_an_explanation_that_fails_costs_no_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(s: ClusterState, config: SolverConfig) -> Decision:
        decision = SCHEDULERS["gang-greedy"](s, config)

        def broken() -> dict[str, str]:
            raise RuntimeError("explaining broke")

        decision._explain = broken
        return decision

    monkeypatch.setitem(SCHEDULERS, "failing", failing)
    cluster = FakeCluster(_one_fits_one_waits())
    result = run_cycle(cluster, LoopSettings(scheduler="failing"))

    assert result.error is None
    assert result.bound == {"fits-0": "n0", "fits-1": "n0"}
    assert status_of(result, "fits").phase == "Running"
    waits = status_of(result, "waits")
    assert waits.phase == "Pending"
    assert "could not be worked out: RuntimeError: explaining broke" in waits.message
    assert result.decision is not None and not result.decision.explanations_pending
    pickle.dumps(result.decision)  # nothing of the solver's left in it


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_a_gang_whose_task_minimum_failed_to_bind_is_rolled_back(scheduler: str) -> None:
    # minMember 4 with a ps and 3 workers; the ps bind fails while five workers bind:
    # enough pods, but no ps. The gang is short (of a task) and rolled back whole.
    pods = [pod("job-ps0").req(cpu=1).gang("job").task("ps")]
    pods += [pod(f"job-w{i}").req(cpu=1).gang("job").task("worker") for i in range(5)]
    base = state(
        [node("n0").cap(cpu=8)],
        pods,
        [gang("job", 4).task_minimums(ps=1, worker=3)],
        [queue()],
    )
    cluster = FakeCluster(base, fail_binds={"job-ps0"})
    result = run_cycle(cluster, LoopSettings(scheduler=scheduler, solver=FAST), LoopMetrics())
    assert "job" in result.rolled_back
    assert cluster.bound == {}


def test_a_pod_being_deleted_is_not_bound_whatever_the_decision_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The validator's "terminating" finding fell through to the capability branch and
    # rejected nothing: every pod of the decision was bound.
    base = state(
        nodes=[node("n0").cap(cpu=8)],
        pods=[
            pod("solo").req(cpu=1).terminating(),
            pod("g-0").req(cpu=1).gang("g"),
            pod("g-1").req(cpu=1).gang("g"),
            pod("g-2").req(cpu=1).gang("g").terminating(),
        ],
        gangs=[gang("g", 2)],
    )

    def rogue(_: ClusterState, __: SolverConfig) -> Decision:
        placements = {"solo": "n0", "g-0": "n0", "g-1": "n0", "g-2": "n0"}
        return Decision(scheduler="rogue", placements=placements, status=SolveStatus.GREEDY)

    monkeypatch.setitem(SCHEDULERS, "rogue", rogue)
    cluster = FakeCluster(base)
    result = run_cycle(cluster, LoopSettings(scheduler="rogue"), LoopMetrics())
    assert set(result.rejected) == {"g", "pod:solo"}
    assert cluster.bound == {}


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_a_running_gang_keeps_the_extras_that_bound_when_a_tasks_bind_fails(
    scheduler: str,
) -> None:
    # minMember 4 = a ps and 3 workers; running with 2 ps and 2 workers (a worker was
    # recreated); the worker and a third ps wait. The worker's bind fails: the gang still
    # runs, and, as the validator checks a running gang, no task minimum undoes the ps.
    bound = ["job-ps0", "job-ps1", "job-w0", "job-w1"]
    pods = [pod(name).req(cpu=1).gang("job").task(name[4:-1]).on("n0") for name in bound]
    pods += [pod("job-w2").req(cpu=1).gang("job").task("w")]
    pods += [pod("job-ps2").req(cpu=1).gang("job").task("ps")]
    base = state(
        [node("n0").cap(cpu=8)],
        pods,
        [gang("job", 4).task_minimums(ps=1, w=3)],
        [queue()],
    )
    cluster = FakeCluster(base, fail_binds={"job-w2"})
    cluster.bound.update(dict.fromkeys(bound, "n0"))
    result = run_cycle(cluster, LoopSettings(scheduler=scheduler, solver=FAST), LoopMetrics())
    assert "job" not in result.rolled_back and result.evicted == []
    assert cluster.bound["job-ps2"] == "n0"
