"""A scheduler's answer for one snapshot, and what each CP-SAT call did to reach it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum

from pydantic import Field, PrivateAttr

from solver.frozen import Frozen


class SolveStatus(StrEnum):
    OPTIMAL = "OPTIMAL"  # proven optimal (over the model that was solved)
    FEASIBLE = "FEASIBLE"  # a solution, with a bound and a gap
    GREEDY = "GREEDY"  # a baseline decided; no solver ran
    FALLBACK = "FALLBACK"  # the solver found nothing better in time; the greedy hint stands
    NOTHING_TO_DO = "NOTHING_TO_DO"


class StageReport(Frozen):
    """What one CP-SAT call did, so a slow or loose cycle can be explained."""

    name: str
    variables: int
    constraints: int
    status: str
    objective: int | None
    bound: int | None
    wall_s: float
    first_solution_s: float | None = None


class Decision(Frozen):
    """A scheduler's answer for one snapshot. ``placements`` are the new bindings only."""

    scheduler: str
    placements: dict[str, str] = Field(default_factory=dict, description="pod -> node")
    admitted: tuple[str, ...] = Field(
        default=(), description="gangs that hold at least minMember pods after this decision"
    )
    unschedulable: dict[str, str] = Field(
        default_factory=dict, description="gang -> why it was not admitted, for the user"
    )
    waiting_pods: dict[str, str] = Field(
        default_factory=dict, description="pod -> why it is not considered (e.g. no PodGroup)"
    )
    status: SolveStatus
    objective: int | None = None
    terms: dict[str, int] = Field(default_factory=dict)
    bound: int | None = None
    gap: float | None = None
    wall_s: float = 0.0
    stages: tuple[StageReport, ...] = ()
    decided_by: str = Field(
        default="", description="the stage whose candidate was returned, or the scheduler"
    )
    evictions: dict[str, str] = Field(
        default_factory=dict,
        description="running pod -> why it is evicted (preemption or reclaim, and for whom)",
    )
    nominated: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "pending pod -> node, for gangs placed into the room the evictions free: bound "
            "once the victims are gone, the room held for them until then"
        ),
    )
    left_over: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "gang admitted or running -> why its pending pods beyond those placed wait "
            "(an elastic job's extras, a member made again): each pod is told"
        ),
    )
    # Why each gang not admitted waits, and why an admitted one's pods left over wait,
    # still to be worked out (SolverConfig's defer_explanations): merged into
    # ``unschedulable`` and ``left_over`` by ``explained``.
    _explain: Callable[[], tuple[dict[str, str], dict[str, str]]] | None = PrivateAttr(default=None)

    def explained(self) -> Decision:
        """This decision with every gang not admitted explained: itself, unless its
        explanations were deferred."""
        if self._explain is None:
            return self
        reasons, left_over = self._explain()
        done = self.with_reasons(reasons)
        if left_over:
            done = done.model_copy(update={"left_over": {**left_over, **self.left_over}})
        return done

    def with_reasons(self, reasons: Mapping[str, str]) -> Decision:
        """This decision with ``reasons`` (gang -> why it waits) added to ``unschedulable``
        (where it has none yet) and nothing left to explain."""
        done = self.model_copy(update={"unschedulable": {**reasons, **self.unschedulable}})
        done._explain = None
        return done

    @property
    def explanations_pending(self) -> bool:
        return self._explain is not None
