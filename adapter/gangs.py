"""The snapshot's gang bookkeeping a cycle needs around a decision: which gang each pod
is of, what each gang needs to run (minMember less its members that succeeded, and each
task's minimum where Volcano's minTaskMember applies), its queue, and what it already
holds. Built once per cycle (``Gangs.of``), read by the loop's bind, rollback, second
chance, preemption and status steps."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from solver.model import DEFAULT_QUEUE, IMPLICIT_GANG_PREFIX, ClusterState, Pod


@dataclass(frozen=True)
class Gangs:
    """The snapshot's gang bookkeeping, built once per cycle."""

    pods: Mapping[str, Pod]  # the snapshot's pods by name (``ClusterState.pods_by_name``)
    need: dict[str, int]  # gang -> minMember
    queue: dict[str, str]  # gang -> queue
    held: dict[str, int]  # gang -> pods bound in the snapshot
    # Gangs with per-task minimums (Volcano's minTaskMember): each task's minimum, the
    # task of each of their pods, and per task the pods bound (or succeeded).
    task_need: dict[str, dict[str, int]] = field(default_factory=dict)
    task_of: dict[str, str | None] = field(default_factory=dict)
    task_held: dict[str, Counter[str | None]] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)  # gangs with a pod pending
    leaving: Counter[str] = field(default_factory=Counter)  # gang -> its pods terminating
    # Gangs that are Koordinator GangGroups: their tasks are gangs (``Gang.members``).
    grouped: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, state: ClusterState) -> Gangs:
        held: dict[str, int] = defaultdict(int)
        task_need = {g.name: g.task_minimums for g in state.gangs if g.task_minimums}
        task_held: dict[str, Counter[str | None]] = {
            g.name: Counter(g.succeeded_by_task) for g in state.gangs if g.name in task_need
        }
        task_of: dict[str, str | None] = {}
        waiting: set[str] = set()
        leaving: Counter[str] = Counter()
        for pod in state.pods:  # every pod of a big cluster, every cycle: one pass
            if pod.node_name is None:
                if pod.gang is not None:
                    waiting.add(pod.gang)
                    if task_need and pod.gang in task_need:
                        task_of[pod.name] = pod.task
                continue
            gang = pod.gang_name()
            bound = not pod.terminating  # leaving: no member
            if bound:
                held[gang] += 1
            else:
                leaving[gang] += 1
            if task_need and gang in task_need:
                task_of[pod.name] = pod.task
                if bound:
                    task_held[gang][pod.task] += 1
        return cls(
            pods=state.pods_by_name(),
            need={g.name: g.min_running for g in state.gangs},
            queue={g.name: g.queue for g in state.gangs},
            held=held,
            task_need=task_need,
            task_of=task_of,
            task_held=task_held,
            waiting=waiting,
            leaving=leaving,
            grouped={g.name: g.members for g in state.gangs if g.members},
        )

    def short_of_a_task(self, gang: str, members: Counter[str | None]) -> bool:
        """Whether the gang, with ``members`` more per task (bound this cycle, or by
        someone else meanwhile), still misses a task's minimum."""
        held = self.task_held.get(gang, Counter())
        return any(
            held[task] + members[task] < least
            for task, least in self.task_need.get(gang, {}).items()
        )

    def runs_short(
        self, gang: str, bound: Collection[str] = (), without: Collection[str] = ()
    ) -> bool:
        """Whether ``gang``, of a PodGroup the snapshot has, holds fewer bound pods than it
        needs to run (minMember, or a task's minimum), with ``bound``, its pods bound since
        the snapshot, counted, and ``without``, pods the snapshot shows bound, not."""
        if gang not in self.need:
            return False
        if self.held.get(gang, 0) + len(bound) - len(without) < self.need[gang]:
            return True
        members = Counter(self.task_of.get(pod) for pod in bound)
        members.subtract(self.task_of.get(pod) for pod in without)
        return self.short_of_a_task(gang, members)

    def by_gang(self, pods: Iterable[str]) -> dict[str, list[str]]:
        """``pods`` by their gang (``gang``)."""
        found: dict[str, list[str]] = defaultdict(list)
        for pod in pods:
            found[self.gang(pod)].append(pod)
        return found

    def own_gang(self, pod: str) -> str:
        """``gang``, but a GangGroup's pod's own gang (its task): a group is merged only
        while its gangs are short, so its name may be gone at the next snapshot."""
        gang = self.gang(pod)
        if gang in self.grouped and (task := self.task_of.get(pod)) is not None:
            return task
        return gang

    def holds_own_minimum(self, gang: str, more: int) -> bool:
        """Whether ``gang``, a GangGroup's gang, holds its own minimum with ``more``
        members than the snapshot's: as a task of its group merged (the group still
        short), or on its own. A gang the snapshot lacks (its PodGroup deleted) holds
        none."""
        if gang in self.need:
            return self.held.get(gang, 0) + more >= self.need[gang]
        for group, members in self.grouped.items():
            if gang in members:
                held = self.task_held.get(group, Counter())[gang]
                return held + more >= self.task_need[group].get(gang, 1)
        return False

    def gang(self, pod: str) -> str:
        # A placement may name a pod the snapshot lacks; the validator reports it, and
        # the implicit gang name keeps it apart from every real gang.
        found = self.pods.get(pod)
        return found.gang_name() if found is not None else IMPLICIT_GANG_PREFIX + pod

    def queue_of(self, gang: str) -> str:
        return self.queue.get(gang, DEFAULT_QUEUE)  # pods without a gang: default queue
