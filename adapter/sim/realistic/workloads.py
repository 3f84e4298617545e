"""What runs and what waits: the teams' queues, gangs already running on the nodes, and the
pending backlog, every pending gang fitting in principle.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import partial

from adapter.sim.realistic.catalog import (
    CAPPED_QUEUE,
    DEDICATED,
    DEDICATED_TEAM,
    GPU_KINDS,
    SPILL,
    TEAMS,
    TOLERATE_ALL,
    res,
)
from adapter.sim.realistic.fleet import Constraints, Fleet, admits, fits, take
from adapter.sim.realistic.jobs import (
    Member,
    allowance,
    constraints,
    draw_kind,
    gang,
    pod_name,
    roles,
)
from solver.model import CPU, GPU, PODS, Gang, Node, Pod, Queue, Resources


def team_queues(nodes: Sequence[Node]) -> list[Queue]:
    """One queue per team; ``batch`` capped at a tenth of the cluster's cores (at least 64)."""
    cores = max(64, sum(n.allocatable[CPU] for n in nodes) // 10_000)
    return [Queue(name=t.queue, weight=t.weight,
                  capability=res(cores * 1000, 0) if t.queue == CAPPED_QUEUE else None)
            for t in TEAMS]


def running_gangs(rng: random.Random, nodes: Sequence[Node], bound: Sequence[Pod] = (), *,
                  busy_fraction: float = 0.33, queues: Sequence[Queue] = (),
                  start_s: float = 0.0, first_index: int = 0) -> tuple[list[Gang], list[Pod]]:
    """Gangs already running on ``round(busy_fraction * len(nodes))`` random nodes.

    Each busy node is filled towards a uniform 30..100% of its GPUs (or cores) by jobs
    drawn as the teams write them, sized for that node's class and spilling onto up to
    ``SPILL`` busy nodes of its class; a gang is the prefix of its pods that fit
    (``min_member`` = that size), each checked against its own node's free capacity.
    ``bound`` pods (DaemonSets) hold their share first; cordoned nodes may be busy
    (cordoned since). A capped queue's gangs hold at most half its capability.
    """
    fleet = Fleet(nodes, bound)
    rooms = allowance(queues)  # decremented as capped gangs are placed
    busy = rng.sample(range(len(nodes)), round(busy_fraction * len(nodes)))
    peers: dict[int, list[int]] = {}
    for i in busy:
        peers.setdefault(id(fleet.class_of[i]), []).append(i)
    gangs: list[Gang] = []
    pods: list[Pod] = []
    clock = start_s
    for i in busy:
        node, free, cls = nodes[i], fleet.free[i], fleet.class_of[i]
        primary = GPU if cls.gpu else CPU
        floor = (1 - rng.uniform(0.3, 1.0)) * node.allocatable[primary]
        teams = [t for t in TEAMS if (t.queue == DEDICATED_TEAM) >= (DEDICATED in node.labels)
                 and any((k in GPU_KINDS) == cls.gpu for k, _ in t.kinds)]
        others = [j for j in peers[id(cls)] if j != i]
        for _attempt in range(12):
            if free.get(primary, 0) <= floor or not teams:
                break
            team = rng.choices(teams, [t.share for t in teams])[0]
            kind = draw_kind(rng, team, cls.gpu)
            c = constraints(rng, team, cls.gpu, node.labels.get)
            if kind is None or not admits(c, node):
                continue
            room = rooms.get(team.queue)
            at = rng.randrange(len(others)) if others else 0
            order = [i, *(others[at:] + others[:at])[:SPILL]]
            placed: list[Member] = []
            for role, n, req in roles(rng, kind, cls.base):
                demand, at = {**req.root, PODS: 1}, 0
                for k in range(n):
                    while at < len(order) and not fits(fleet.free[order[at]], demand):
                        at += 1  # free only shrinks: a node this role missed stays missed
                    if at == len(order) or (room is not None and not fits(room, {
                            q: req[q] for q in room})):
                        break
                    take(fleet.free[order[at]], demand)
                    if room is not None:
                        take(room, {q: req[q] for q in room})
                    placed.append((pod_name(role, n, k), req, nodes[order[at]].name))
                else:
                    continue
                break  # a role cut short: the gang is what was placed so far
            if placed:
                clock += round(rng.expovariate(1 / 30), 3)
                g, p = gang(rng, team, kind, first_index + len(gangs), clock, len(placed),
                            placed, c)
                gangs.append(g)
                pods.extend(p)
    return gangs, pods


def pending_gangs(rng: random.Random, nodes: Sequence[Node], count: int,
                  daemonsets: Sequence[Pod] = (), *, queues: Sequence[Queue] = (),
                  start_s: float = 0.0, first_index: int = 0) -> tuple[list[Gang], list[Pod]]:
    """``count`` pending gangs as the ``TEAMS`` write them, each fitting in principle.

    A job's pods are sized for a node class drawn (weighted by node count) among the
    schedulable classes its constraints match; then its last role (workers, executors) is
    cut until the gang fits those classes with only ``daemonsets`` bound, and a capped
    queue's gang until it asks for at most half the capability. A class counts with the
    least free capacity of its members (``Fleet``), so the room counted is room on each
    node's own allocatable. 20% of gangs of 2 or more pods are elastic: ``min_member``
    leaves out half of the last role.
    """
    fleet = Fleet(nodes, daemonsets)
    if count and not any(not k.node.unschedulable for k in fleet.classes.values()):
        raise ValueError("pending_gangs() needs a schedulable node")
    caps = allowance(queues)
    has_gpu = any(k.gpu for k in fleet.matching(Constraints((), (), (TOLERATE_ALL,))))
    gangs: list[Gang] = []
    pods: list[Pod] = []
    clock = start_s

    def pick(key: str, gpu: bool) -> str | None:
        values = fleet.values(key, gpu)
        return rng.choice(values) if values else None

    while len(gangs) < count:
        team = rng.choices(TEAMS, [t.share for t in TEAMS])[0]
        kind = draw_kind(rng, team, None if has_gpu else False)
        if kind is None:
            continue
        gpu = kind in GPU_KINDS
        c = constraints(rng, team, gpu, partial(pick, gpu=gpu))
        matching = [k for k in fleet.matching(c) if k.gpu or not gpu]
        if not matching:
            continue
        parts = roles(rng, kind, rng.choices(matching, [len(k.members) for k in matching])[0].base)
        envelope = {PODS: 1}  # the largest request of any role, per resource
        for _, _, req in parts:
            for q, v in req.items():
                envelope[q] = max(envelope.get(q, 0), v)
        room = sum(len(k.members) * min(k.base.get(q, 0) // v for q, v in envelope.items())
                   for k in matching)
        cap = caps.get(team.queue, {})
        while parts[-1][1] and (sum(n for _, n, _ in parts) > room or _over(parts, cap)):
            parts[-1] = (parts[-1][0], parts[-1][1] - 1, parts[-1][2])
        size = sum(n for _, n, _ in parts)
        if not 0 < size <= room or _over(parts, cap):
            continue
        elastic = size >= 2 and rng.random() < 0.2
        clock += round(rng.expovariate(1 / 10), 3)
        members = [(pod_name(r, n, k), req, None) for r, n, req in parts for k in range(n)]
        g, p = gang(rng, team, kind, first_index + len(gangs), clock,
                    size - parts[-1][1] // 2 if elastic else size, members, c)
        gangs.append(g)
        pods.extend(p)
    return gangs, pods


def _over(parts: Sequence[tuple[str, int, Resources]], cap: dict[str, int]) -> bool:
    """Whether the pods of ``parts`` together ask for more than ``cap`` of anything."""
    return any(sum(n * req[q] for _, n, req in parts) > v for q, v in cap.items())
