"""Jobs as the teams write them: node constraints, pods by role sized for a node, and the
gang and pods of one job.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from functools import cache

from adapter.sim.realistic.catalog import (
    ARCH,
    CAPACITY_TYPE,
    DEDICATED,
    DEDICATED_TEAM,
    GPU_KINDS,
    GPU_PRESENT,
    GPU_PRODUCT,
    INSTANCE_TYPE,
    JOB_PREFIX,
    TOLERATE_ALL,
    TOLERATE_DEDICATED,
    TOLERATE_GPU,
    ZONE,
    GiB,
    MiB,
    Team,
    res,
)
from adapter.sim.realistic.fleet import Constraints
from solver.model import CPU, EPHEMERAL_STORAGE, GPU, MEMORY, Gang, Pod, Queue, Resources
from solver.scheduling_terms import NodeSelectorRequirement, NodeSelectorTerm

Roles = list[tuple[str, int, Resources]]  # role (pod name part), pod count, requests
Member = tuple[str, Resources, str | None]  # pod name part, requests, node (None: pending)


@cache
def _term(*reqs: tuple[str, str, tuple[str, ...]]) -> tuple[NodeSelectorTerm, ...]:
    exprs = (NodeSelectorRequirement(key=k, operator=op, values=v) for k, op, v in reqs)
    return (NodeSelectorTerm(match_expressions=tuple(exprs)),)


def constraints(rng: random.Random, team: Team, gpu: bool,
                pick: Callable[[str], str | None]) -> Constraints:
    """Selector, affinity and tolerations as ``team`` writes them; ``pick`` gives label values."""
    selector: list[tuple[str, str]] = []
    reqs: list[tuple[str, str, tuple[str, ...]]] = []
    tolerations = [TOLERATE_GPU] if gpu else []
    if team.queue == DEDICATED_TEAM:
        tolerations.append(TOLERATE_DEDICATED)
        if rng.random() < 0.5 and (dedicated := pick(DEDICATED)):
            selector.append((DEDICATED, dedicated))
    u = rng.random()
    if gpu and u < 0.45 and (product := pick(GPU_PRODUCT)):
        selector.append((GPU_PRODUCT, product))
    elif gpu and u < 0.6:
        reqs.append((GPU_PRESENT, "Exists", ()))
    elif not gpu and not selector and u < 0.15 and (instance := pick(INSTANCE_TYPE)):
        selector.append((INSTANCE_TYPE, instance))
    elif not gpu and u < 0.45 and pick(ARCH) == "amd64":
        reqs.append((ARCH, "In", ("amd64",)))
        if u < 0.25:
            reqs.append((CAPACITY_TYPE, "NotIn", ("SPOT",)))
    if rng.random() < 0.15 and (zone := pick(ZONE)):
        reqs.append((ZONE, "In", (zone,)))
    if rng.random() < 0.03:
        tolerations = [TOLERATE_ALL]
    return Constraints(tuple(selector), _term(*reqs) if reqs else (), tuple(tolerations))


def roles(rng: random.Random, kind: str, budget: Mapping[str, int]) -> Roles:
    """A job's pods by role, each fitting a node with ``budget`` free."""
    cpu, mem, node_gpus = budget.get(CPU, 0), budget.get(MEMORY, 0), budget.get(GPU, 0)
    if kind in GPU_KINDS:
        train = kind == "train"
        gpus = min(rng.choices((1, 2, 4, 8), (3, 2, 1, 1) if train else (3, 1, 0, 0))[0],
                   node_gpus)
        share = rng.choice((0.5, 0.75, 0.9) if train else (0.25, 0.5)) * gpus / node_gpus
        pod = res(max(1000, int(share * cpu) // 1000 * 1000),
                  max(GiB, int(share * mem) // GiB * GiB), gpus)
        if not train:
            return [("worker", 1, pod)]
        return [("master", 1, pod),
                ("worker", rng.choices((1, 2, 4, 8, 16), (4, 4, 2, 1, 0.5))[0] - 1, pod)]
    shapes: list[tuple[str, int, int, int, int]]  # role, count, cpu, memory, disk
    if kind == "spark":
        cores = rng.choices((1, 2, 4, 8), (2, 4, 3, 1))[0]
        heap = cores * rng.choice((2, 4, 8)) * GiB
        disk = rng.choice((0, 0, 8 * GiB, 20 * GiB))
        driver = rng.choice((1, 2))
        shapes = [("driver", 1, driver * 1000, driver * 4 * GiB, 0),
                  ("exec", int(2 ** rng.uniform(1, 6)), cores * 1000,
                   heap + max(heap // 10, 384 * MiB), disk)]
    elif kind == "mpi":
        cores = rng.choice((4, 8, 16))
        workers = rng.choices((2, 4, 8, 16, 32), (3, 3, 2, 1, 1))[0]
        shapes = [("launcher", 1, 500, GiB, 0),
                  ("worker", workers, cores * 1000, cores * 2 * GiB, 0)]
    else:
        cores = rng.choice((1, 2, 4))
        shapes = [("pod", 1, cores * 1000, cores * rng.choice((2, 4)) * GiB, 0)]
    out = []
    for role, n, c, m, d in shapes:
        while c > cpu or m > mem:  # halve until it fits the node it was sized for
            c, m = max(c // 2, 100), m // 2
        out.append((role, n, res(c, m, disk=d if d <= budget.get(EPHEMERAL_STORAGE, 0) else 0)))
    return out


def pod_name(role: str, n: int, k: int) -> str:
    """``driver``, ``exec-0``, ...: replicas are numbered, a role of one pod is not."""
    return f"{role}-{k}" if n > 1 or role in ("master", "worker") else role


def allowance(queues: Sequence[Queue]) -> dict[str, dict[str, int]]:
    """Half of each capability: what running gangs may hold, and the most one gang asks."""
    return {q.name: {k: v // 2 for k, v in q.capability.items()}
            for q in queues if q.capability is not None}


def gang(rng: random.Random, team: Team, kind: str, index: int, created: float,
         min_member: int, members: Sequence[Member], c: Constraints) -> tuple[Gang, list[Pod]]:
    """Job ``index`` of ``kind``: its gang and its pods, bound where ``members`` say."""
    job = f"{team.queue}/{JOB_PREFIX[kind]}-{index:05d}"
    priority = rng.choices(*zip(*team.priorities, strict=True))[0]
    selector = dict(c.selector)
    g = Gang(name=job, min_member=min_member, queue=team.queue, priority=priority,
             created_s=created)
    return g, [Pod(name=f"{job}-{name}", namespace=team.queue, requests=req,
                   priority=priority, gang=job, node_selector=selector, affinity=c.affinity,
                   tolerations=c.tolerations, node_name=node, created_s=created)
               for name, req, node in members]


def draw_kind(rng: random.Random, team: Team, gpu: bool | None) -> str | None:
    """One of ``team``'s job kinds: GPU ones, CPU ones, or either (``gpu=None``)."""
    kinds = [(k, w) for k, w in team.kinds if gpu is None or (k in GPU_KINDS) == gpu]
    return rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0] if kinds else None
