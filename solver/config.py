"""Every objective weight and solver parameter, in one model.

The objective is a sum of terms, each an integer quantity times an integer weight.
Quantities are measured in *share units*: a resource's whole-cluster total is
``SHARE_SCALE`` units, so terms on different resources (GPUs, millicores, bytes) are
comparable without floating point. Weights are per hundred: a weight of 100 counts a
quantity once.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from solver.cores import usable_cores

SHARE_SCALE = 10_000_000
WEIGHT_UNIT = 100
# Terms are weight x share units (up to SHARE_SCALE per resource, times priority ranks and
# gang sizes): weights up to this keep every objective far inside 64-bit integers.
MAX_WEIGHT = 100_000
MAX_SEED = 2**31 - 1  # CP-SAT's random seed is a 32-bit integer
MAX_TIME_LIMIT_S = 3600.0
# What a decision keeps of the cycle's limit however long the cycle took before it (a
# cold first snapshot of 5,000 real-shaped nodes took 1.48-1.61 s, `gangsat-bench cycle
# --real`): its stages need some time.
MIN_DECISION_SHARE = 0.5


class ObjectiveWeights(BaseModel):
    """Integer weights, per hundred. Raise one to buy more of its concern at the others' cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: int = Field(
        default=100,
        ge=0,
        le=MAX_WEIGHT,
        description="per share unit of each placed pod's dominant resource: utilisation",
    )
    fairness: int = Field(
        default=300,
        ge=0,
        le=MAX_WEIGHT,
        description=(
            "per share unit a queue's dominant resource falls short of its deserved share "
            "(weighted water-filling, capped by demand and capability)"
        ),
    )
    overuse: int = Field(
        default=0,
        ge=0,
        le=MAX_WEIGHT,
        description=(
            "per share unit a queue's dominant resource ends the cycle above its deserved "
            "share: 0 is work-conserving; above value (100) a queue at its share leaves "
            "capacity idle for another queue's pending gang that does not fit yet, as "
            "Volcano's proportion plugin does, trading utilisation for fairness"
        ),
    )
    priority: int = Field(
        default=400,
        ge=0,
        le=MAX_WEIGHT,
        description=(
            "per admitted gang and priority rank above the lowest (ranks: the cycle's "
            "distinct priorities), times the value of its minMember pods: a gang "
            "outweighs lower-priority gangs of similar size, not much larger ones (at "
            "400, those up to about 1 + the rank gap times its size where its queue is "
            "below its deserved share, and the fairness term adds to their value; about "
            "1 + 4 x the gap where it is not); a trade, not a rule: raise it for strictness"
        ),
    )
    gang_start: int = Field(
        default=0,
        ge=0,
        le=MAX_WEIGHT,
        description=(
            "per gang started, in average nodes' shares: favours starting many small gangs "
            "over few large ones (shorter mean waits; large gangs wait longer)"
        ),
    )
    packing: int = Field(
        default=5,
        ge=0,
        le=MAX_WEIGHT,
        description=(
            "per share unit of nodes opened (empty before, used after; DaemonSet pods do "
            "not count): fill used nodes; capped below the cheapest pod's value"
        ),
    )
    gpu_node_open: int = Field(
        default=10,
        ge=0,
        le=MAX_WEIGHT,
        description="per share unit of GPU nodes opened: keep whole GPU nodes free",
    )
    # 200: on the philly trace with reclaim (1.25-2.08x load, 3 draws each, 0.2 s cycles,
    # simulated) every run held queue shares within 2% (worst 1.72%) and mean JCT within
    # 3.3% of no preemption; at 100 one run's JCT was 5.5% longer, at 400 two runs' shares
    # were off by 2.08% and 2.83%.
    disruption: int = Field(
        default=200,
        ge=0,
        le=MAX_WEIGHT,
        description=(
            "per share unit of each evicted pod's dominant resource, on top of the value "
            "it stops earning: at 200, an eviction must win three times what it takes"
        ),
    )
    disruption_per_hour: int = Field(
        default=10,
        ge=0,
        le=MAX_WEIGHT,
        description=(
            "per share unit of each evicted pod's dominant resource and hour it has run "
            "(work lost): young jobs are evicted before old ones"
        ),
    )


class SolverConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: ObjectiveWeights = Field(default_factory=ObjectiveWeights)
    time_limit_s: float = Field(
        default=1.0,
        gt=0,
        le=MAX_TIME_LIMIT_S,
        allow_inf_nan=False,
        description=(
            "the cycle's time: the loop's snapshot, preparing it, the solves and "
            "decoding (a decision gets at least half of it, however long the snapshot "
            "took; deterministic solves count only their solves' deterministic time); the "
            "LP and first search of a model still run when preparing used it all"
        ),
    )
    num_workers: int = Field(
        default=1,
        ge=0,
        le=256,  # more is no machine's core count; CP-SAT refuses billions

        description=(
            "CP-SAT workers; 0 = every core this process may use (its CPU affinity and "
            "cgroup quota: a container's limit, not the node's cores). One worker with "
            "full LP measured best at one-second cycles on 2 cores (1,000 nodes x 5,000 "
            "pods: 0.3-3.2% gaps over 3 seeds vs 2.1-8.8% with 2 workers); raise it on "
            "bigger machines"
        ),
    )
    linearization_level: int = Field(
        default=2,
        ge=0,
        le=2,
        description=(
            "CP-SAT's LP relaxation strength; 2 (full) measured best on the node-class "
            "models (0.0-0.3% gaps at 0.8 s on 1,000 nodes, vs 1-25% at the default 1)"
        ),
    )
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="CP-SAT random seed: same seed, same decision"
    )
    deterministic: bool = Field(
        default=False,
        description=(
            "reproducible decisions: CP-SAT's workers interleave and the time limit, for "
            "each solve and for choosing which stages run, is counted in deterministic "
            "time (roughly seconds, but independent of load; wall time is capped at 10x)"
        ),
    )
    defer_explanations: bool = Field(
        default=False,
        description=(
            "leave why each gang not admitted waits to Decision.explained(), so that the "
            "scheduling loop works it out once the decision's binds are sent, not before "
            "them (0.08-0.14 s on 1,000 real-shaped nodes)"
        ),
    )
    preemption: bool = Field(
        default=False,
        description=(
            "let pending gangs evict running gangs: of lower priority in their queue "
            "(preempt), or of queues above their deserved share when theirs is below "
            "(reclaim); victims are kept, shrunk to minMember or evicted whole; decided "
            "with placement by one model where it fits (solver.joint), else after it"
        ),
    )
    preemption_time_share: float = Field(
        default=0.25,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description=(
            "of the time limit, held back from placement when preemption is on: what "
            "follows it (finding victims, the greedy choice, the joint or the preemption "
            "model) runs within the limit; the model takes what is left of it, no less "
            "than 0.05 s"
        ),
    )
    relative_gap_limit: float = Field(
        default=0.001,
        ge=0,
        allow_inf_nan=False,
        description=(
            "stop a CP-SAT call once this close to its bound, and the cycle once its best "
            "decision is this close to a proven bound"
        ),
    )
    max_node_level_pairs: int = Field(
        default=5_000,
        ge=0,
        description=(
            "largest node-level model (feasible pod-class x node pairs) handed to CP-SAT; "
            "above it, admission is decided on node classes and placed by disaggregation "
            "(real-shaped 200-node models, 15,000-17,000 pairs, found nothing in 0.15-0.4 s)"
        ),
    )
    max_exact_class_pairs: int = Field(
        default=2_000,
        ge=0,
        description=(
            "largest node-class model (pod-class x node-class pairs) searched whole after "
            "the LP-guided search; larger ones are only searched around the LP optimum"
        ),
    )
    aggregate_time_share: float = Field(
        default=0.4,
        gt=0,
        lt=1,
        description=(
            "share of the time left that the node-class stage may use when a node-level "
            "stage follows (real-shaped 40 nodes x 60 gangs, seeds 0-59, one solve each "
            "way: 0.4 decided higher than 0.6 on 37 seeds, lower on 12, mean gap 1.90 -> "
            "1.62%; 5,000 nodes: the same decisions)"
        ),
    )

    def workers(self) -> int:
        return self.num_workers or usable_cores()

    def after(self, spent_s: float) -> SolverConfig:
        """This config for a decision whose cycle has already spent ``spent_s`` (the
        loop's snapshot): the limit less that, at least ``MIN_DECISION_SHARE`` of it. A
        deterministic solve keeps its limit: it counts deterministic time, which the
        snapshot's wall time must not change, nor the decision with it."""
        if self.deterministic or spent_s <= 0:
            return self
        left = max(self.time_limit_s - spent_s, MIN_DECISION_SHARE * self.time_limit_s)
        return self.model_copy(update={"time_limit_s": left})
