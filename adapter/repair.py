"""A second chance for a gang whose bind failed part-way, before any of it is deleted.

Deleting the pods a cycle bound is how a gang that cannot reach minMember gives its
room back, but it is final for a pod no controller recreates. So when a member failed
for a reason another node may cure (its node vanished, or refused it) the loop first
places those members once more, on a fresh snapshot that already holds this cycle's
binds, with the gang-aware greedy placer (fast, and the decision is validated like any
other); only what is still short afterwards is rolled back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from adapter.cluster import Cluster, ClusterError
from solver.baselines import gang_greedy
from solver.config import SolverConfig
from solver.model import ClusterState
from solver.validate import check

log = logging.getLogger(__name__)


def place_again(
    cluster: Cluster,
    pods: Collection[str],
    config: SolverConfig,
    held: Callable[[ClusterState], ClusterState] | None = None,
) -> tuple[dict[str, str], dict[str, ClusterError], dict[str, str]]:
    """Bind ``pods`` (pending members of short gangs) elsewhere if their gangs can still
    reach minMember, in the room ``held`` leaves of the snapshot (the room held for gangs
    waiting for their victims); the pods bound (pod -> node), the binds that failed
    again, and where each bind went (pod -> node: one of unknown outcome may be there)."""
    try:
        placements = _placements(cluster, pods, config, held)
    except ClusterError as e:
        log.warning("no second chance for %d pod(s): %s", len(pods), e)
        return {}, {}, {}
    except Exception:  # a bug here must not skip the rollback the caller does next
        log.exception("no second chance for %d pod(s): deciding it failed", len(pods))
        return {}, {}, {}
    if not placements:
        return {}, {}, {}
    failures = cluster.bind(placements)
    return {p: n for p, n in placements if p not in failures}, failures, dict(placements)


def _placements(
    cluster: Cluster,
    pods: Collection[str],
    config: SolverConfig,
    held: Callable[[ClusterState], ClusterState] | None,
) -> list[tuple[str, str]]:
    """Where gang-greedy puts ``pods`` on a fresh snapshot; none if the validator refuses."""
    state = cluster.snapshot(again=True)
    if held is not None:
        state = held(state)
    wanted = set(pods)
    # Only these pods are placed; every bound pod still holds its room.
    state = state.model_copy(
        update={"pods": tuple(p for p in state.pods if p.node_name is not None or p.name in wanted)}
    )
    decision = gang_greedy(state, config)
    violations = check(state, decision)
    if violations:
        log.error("second chance refused by the validator: %s", violations[0])
        return []
    return sorted((p, n) for p, n in decision.placements.items() if p in wanted)
