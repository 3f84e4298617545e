"""Pods kept apart: required pod anti-affinity on a topology where each node is a domain
of its own (``kubernetes.io/hostname``, which kubelets set to a value per node), which a
gang of training workers asks for to get one worker per node; a topology spread on such
a key, at most its maxSkew pods a node (``apart_room``); and pods asking for one host
port, one a node.

Each group of pods kept apart (``Pod.apart``) is a column of the problem, as a resource
every node has its room of (one, or the spread's count), each pod of the group asks one
of, and each bound pod of the group takes on its node. Every stage (aggregate counts,
disaggregation, greedy, the node-level model) then keeps the group within that room per
node through the capacity constraints it already has, and node classes stay whole (every
node has the same room). The column is worth no share: it is not what queues compete
for, and a pod's value and a queue's dominant resource are read from the others
(``totals`` is 0 there).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from solver.arrays import IntArray
from solver.model import APART_PREFIX, ClusterState, Pod, apart_room

# Groups modelled in one cycle: each is a column of every node's row, which the stages
# read densely (5,000 nodes, 1,000 groups: a greedy pass took 10 s, the class model's
# room terabytes). The groups of later pods wait; each gang placed frees its group's.
MAX_GROUPS = 32
TURN_S = 10.0


def apart_names(state: ClusterState) -> tuple[list[str], bool]:
    """The columns of the groups pending pods keep apart (bound pods' other groups need
    none: no pending pod competes with them), at most ``MAX_GROUPS``, those of the pods
    that go first (priority, then age); a gang of a group left out waits (``left_out``).
    Pods no placement takes this cycle, whatever the room, take no column (a slot held
    by a gang that never places starved every later one): gated or terminating pods, and
    the gangs ``never_placed``. Also whether any pending pod keeps apart at all."""
    # ``apart`` first: most pods have none, and a big cluster's pods are read once more.
    kept = [
        pod
        for pod in state.pods
        if pod.apart and pod.node_name is None and not pod.gates and not pod.terminating
    ]
    if not kept:
        return [], False
    hopeless = never_placed(state, {pod.gang for pod in kept if pod.gang is not None})
    kept = sorted((pod for pod in kept if pod.gang not in hopeless), key=lambda p: first_goes((p,)))
    names = list(dict.fromkeys(APART_PREFIX + g for pod in kept for g in pod.apart))
    return take_turns(names, MAX_GROUPS, state.now_s), True


def group_turns(
    state: ClusterState,
    groups: Mapping[str, Sequence[Pod]],
    slots: int,
    hopeless: set[str] | None = None,
) -> tuple[list[str], list[str]]:
    """Groups of pending pods (a group shared out over domains: ``solver.together``,
    ``solver.zone_spread``) in the order their pods go (``first_goes``), but those of
    gangs no room places (``never_placed``, unless given), and of them those that take
    one of ``slots`` this cycle (``take_turns``)."""
    if hopeless is None:
        gangs = {p.gang for members in groups.values() for p in members if p.gang is not None}
        hopeless = never_placed(state, gangs)
    order = sorted(
        (g for g, members in groups.items() if any(p.gang not in hopeless for p in members)),
        key=lambda g: first_goes(groups[g]),
    )
    return order, take_turns(order, slots, state.now_s)


def first_goes(pods: Iterable[Pod]) -> tuple[int, float, str]:
    """The order pods go in (priority, then age, then name), of the first of ``pods``."""
    return min((-p.priority, p.created_s, p.name) for p in pods)


def spare_members(state: ClusterState) -> dict[str, int]:
    """Per gang, the members it may run without (members that may run less minMember)."""
    members: dict[str, int] = defaultdict(int)
    for pod in state.pods:
        if pod.gang is not None and may_run(pod):
            members[pod.gang] += 1
    return {gang.name: members[gang.name] - gang.min_running for gang in state.gangs}


def take_turns(names: list[str], slots: int, now_s: float) -> list[str]:
    """Of ``names`` (in the order they go), those that take one of ``slots`` this cycle.
    Half the slots go to the first names, the other half take turns among the rest, a
    turn every ``TURN_S`` of the snapshot clock (``now_s``): a first name no room ever
    takes (its pods' selector matches no node) holds its slot, and no more."""
    if len(names) <= slots:
        return names
    head, rest = names[: slots // 2], names[slots // 2 :]
    start = turn_offset(now_s, len(rest))
    return head + (rest[start:] + rest[:start])[: slots - len(head)]


def turn_offset(now_s: float, count: int, of: str = "") -> int:
    """Where this turn (``TURN_S`` of the snapshot clock) starts among ``count`` names:
    drawn from the turn's number (and ``of``, for draws that must not go together), the
    same for every read of one snapshot. Stepped by one a turn, a quiet cluster's cycles
    (every 30 s, three turns) saw one domain of three for ever."""
    turn = int(now_s // TURN_S)
    return random.Random(f"{turn}/{of}" if of else turn).randrange(count) if count else 0


def may_run(pod: Pod) -> bool:
    """Whether a member counts towards its gang's minMember: not leaving, and bound or
    free of scheduling gates."""
    return not pod.terminating and (pod.node_name is not None or not pod.gates)


def never_placed(state: ClusterState, names: set[str]) -> set[str]:
    """Of the gangs ``names``, those no room makes placeable: of no PodGroup or a queue
    that takes no new pods, with fewer pods that may run than minMember, or needing more
    pods of one group kept apart than there are nodes in service."""
    gangs = {g.name: g for g in state.gangs if g.name in names}
    queues = {q.name: q for q in state.queues}
    members: Counter[str] = Counter()
    of_group: dict[str, Counter[str]] = defaultdict(Counter)  # gang -> group -> its pods
    for pod in state.pods:
        if pod.gang in gangs and may_run(pod):
            members[pod.gang] += 1
            for group in pod.apart:
                of_group[pod.gang][group] += 1
    nodes = sum(1 for node in state.nodes if node.in_service)
    out = set(names - gangs.keys())
    for name, gang in gangs.items():
        queue = queues.get(gang.queue)
        spare = members[name] - gang.min_running  # members it may run without
        # The nodes its largest group needs, the pods it may run without left out.
        most = max(
            (math.ceil((n - spare) / apart_room(g)) for g, n in of_group[name].items()),
            default=0,
        )
        if (queue is not None and not queue.admits()) or spare < 0 or most > nodes:
            out.add(name)
    return out


def left_out(pending: Iterable[Pod], r_index: Mapping[str, int]) -> str | None:
    """Why a gang waits this cycle, if a pending pod of it (``pending``) is of a group
    left out (``apart_names``)."""
    for pod in pending:
        if any(APART_PREFIX + g not in r_index for g in pod.apart):
            return (
                "Unschedulable: its pods are kept apart (required pod anti-affinity, a node "
                "each, a topology spread per node, or a host port) and their group is not "
                "modelled this cycle: it needs more nodes than are in service, or "
                f"{MAX_GROUPS} other such groups go first"
            )
    return None


def give_room(raw_allocatable: IntArray, r_index: Mapping[str, int]) -> list[int]:
    """Every node has its group's room (``apart_room``) of each group's column; returns
    the groups' columns."""
    apart = []
    for name, i in r_index.items():
        if name.startswith(APART_PREFIX):
            raw_allocatable[:, i] = apart_room(name)
            apart.append(i)
    return apart


def take_bound(
    raw_free: IntArray, bound: Iterable[tuple[int, Pod]], r_index: Mapping[str, int]
) -> None:
    """Each bound pod of a group (``bound``: node row, pod) takes one of its node's room."""
    for node, pod in bound:
        for group in pod.apart:
            if (column := r_index.get(APART_PREFIX + group)) is not None:
                raw_free[node, column] -= 1


def joined(pod: Pod, group: str) -> Pod:
    """``pod`` kept apart within ``group`` as well."""
    return pod.model_copy(update={"apart": tuple(sorted({*pod.apart, group}))})


def with_apart(demand: dict[str, int], pod: Pod) -> dict[str, int]:
    """A pod's demand with one of each of its groups' columns."""
    if not pod.apart:
        return demand
    return {**demand, **{APART_PREFIX + g: 1 for g in pod.apart}}


def no_share(totals: IntArray, apart: list[int]) -> IntArray:
    """``totals`` with the groups' columns at 0, which share units read as no share."""
    if apart:
        totals = totals.copy()
        totals[apart] = 0
    return totals
