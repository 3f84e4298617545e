"""Rollbacks left to finish: pods a gang's rollback could not delete.

A gang left short of minMember by a cycle's failed binds is rolled back: the pods the
cycle bound are deleted (``loop._bind``). A delete can fail too (the API server down for
longer than the retry budget); its pod stays bound, and its gang with it, short: the
partial gang gang scheduling exists to prevent. Nothing else would undo it (a running
gang that lost a pod is short too, and is never rolled back), so each such pod is
remembered and deleted again after each later cycle's binds, until it is gone, or its
gang holds minMember after all (a later cycle placed the rest; and each task's minimum,
as the rollback judged it; a Koordinator GangGroup's gang, with every gang of its group
at its own minimum). Remembered by the node it was bound to: a pod of that name
elsewhere is another one, not deleted.

A gang short only of binds of unknown outcome (their answers lost; each may still land)
is not rolled back at once: deleted, its bound pods are lost where no controller makes
them again, and each such bind may have landed, the gang whole. They are remembered the
same way, with the binds in doubt (``await_doubts``), and judged once the backend knows
where each of those pods is (``Cluster.unsettled``): whole, they are forgotten; short
still (a bind lapsed, and no cycle placed that pod since), deleted.

In the leader's memory only: a new leader finds such a gang short like any other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from adapter.gangs import Gangs
from solver.model import ClusterState


@dataclass
class Stranded:
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod -> (gang, node)
    # Own gang -> its pods whose binds were of unknown outcome: its stranded pods wait
    # until the backend has settled every one of them.
    doubts: dict[str, set[str]] = field(default_factory=dict)
    # A GangGroup's gang -> the group's gangs, when its rollback left it stranded: whole
    # only with them all. Judged on its own, a master holding its minimum with the pods
    # not deleted was forgotten, and ran while its workers, rolled back, stayed short.
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.pods)

    def await_doubts(
        self, pods: Iterable[str], gangs: Gangs, nodes: Mapping[str, str], doubted: Iterable[str]
    ) -> None:
        """``pods``, bound, kept until the binds of ``doubted`` (members of their gangs,
        each of which may still land) are settled, then judged as stranded pods are. Not
        for a GangGroup's pods: a gang of it waits for its own doubts only, and is judged
        with the group's other gangs (``groups``) before theirs are settled."""
        self.add(pods, gangs, nodes)
        for pod in doubted:
            self.doubts.setdefault(gangs.own_gang(pod), set()).add(pod)

    def add(self, pods: Iterable[str], gangs: Gangs, nodes: Mapping[str, str]) -> None:
        """Remembered by their own gang: a GangGroup's pods by their gang in it, whose
        merged name the next snapshot may not have (its gang held its minimum with them:
        remembered by that name, they were deleted while the group's other gang, then
        alone, was bound)."""
        for pod in pods:
            own = gangs.own_gang(pod)
            self.pods[pod] = (own, nodes[pod])
            if (group := gangs.grouped.get(gangs.gang(pod))) is not None:
                self.groups[own] = group

    def by_gang(self) -> Counter[str]:
        return Counter(gang for gang, _ in self.pods.values())

    def due(
        self,
        state: ClusterState,
        gangs: Gangs,
        bound: Mapping[str, str],
        completing: Collection[str] = (),
        unsettled: Collection[str] = (),
        where_bound: Callable[[Collection[str]], Mapping[str, str]] | None = None,
    ) -> list[str]:
        """The pods to delete again after this cycle's binds (``bound``: pod -> node),
        which the snapshot ``state`` preceded, but those of gangs ``completing``
        (nominated to preempt: kept until their hold ends) and of gangs waiting for a bind
        of theirs still ``unsettled`` when ``state`` was taken (of unknown outcome: the
        snapshot shows it bound, which it may not be); forgets the others: being deleted,
        pending or on another node (a namesake), or of a gang that holds minMember now. A
        waiting gang's pods bound meanwhile, and, once it is settled, its binds in doubt
        that landed, are judged with the pods kept for it: left out, they ran alone where
        the rest was deleted."""
        # A gang waits while any pod of it is unsettled: one bound again meanwhile, its
        # bind of unknown outcome too, is waited for as well (the snapshot shows it bound).
        of_gang: dict[str, set[str]] = {}
        for pod in unsettled:
            of_gang.setdefault(gangs.own_gang(pod), set()).add(pod)
        for gang, pods in self.doubts.items():
            pods |= of_gang.get(gang, set())
        waiting = {gang for gang, pods in self.doubts.items() if not pods.isdisjoint(unsettled)}
        settled = {pod for g, pods in self.doubts.items() if g not in waiting for pod in pods}
        self.doubts = {gang: pods for gang, pods in self.doubts.items() if gang in waiting}
        for pod, node in bound.items():
            if (gang := gangs.own_gang(pod)) in waiting:
                self.pods[pod] = (gang, node)
        # A pod of no snapshot (gone, or bound to a node the snapshot lacks: deleted, it
        # may come back with its pods) is judged as if still where it was: forgotten, it
        # ran alone once its node was back and the rest of its gang deleted. A delete of
        # a pod that is gone is answered as done.
        where: dict[str, str | None] = {pod: node for pod, (_, node) in self.pods.items()}
        for p in state.pods:
            if p.name in where or p.name in settled:
                where[p.name] = None if p.terminating else p.node_name
        # A settled doubt of no snapshot that landed (``where_bound``: the backend holds
        # it bound, to a node the snapshot lacks) is judged where it is: forgotten, the
        # gang was judged short without it, the rest deleted, and it ran alone once its
        # node was back (a chaos probe).
        absent = [pod for pod in settled if pod not in where]
        if absent and where_bound is not None:
            where.update(where_bound(absent))
        for pod in settled:
            if (landed_on := where.get(pod)) is not None:
                self.pods[pod] = (gangs.own_gang(pod), landed_on)
        added: Counter[str] = Counter()  # per gang, pods bound this cycle
        by_task: dict[str, Counter[str | None]] = {}  # of gangs with task minimums
        for pod in bound:
            gang = gangs.gang(pod)
            added[gang] += 1
            if gang in gangs.task_need:
                by_task.setdefault(gang, Counter())[gangs.task_of.get(pod)] += 1
        stranded = self.by_gang()
        # A GangGroup's gang is whole with every gang of its group; bound this cycle,
        # their pods count by their own gang, their group possibly merged.
        own_added = Counter(gangs.own_gang(pod) for pod in bound) if self.groups else Counter()
        whole: dict[str, bool] = {}
        due = []
        for pod, (gang, node) in list(self.pods.items()):
            if gang in waiting:
                continue
            if gang not in whole:
                if (group := self.groups.get(gang)) is not None:
                    whole[gang] = all(gangs.holds_own_minimum(g, own_added[g]) for g in group)
                else:
                    tasks = by_task.get(gang, Counter())
                    whole[gang] = self._whole(gang, gangs, added, tasks, stranded)
            if where.get(pod) != node or whole[gang]:
                del self.pods[pod]
            elif gang not in completing:
                due.append(pod)
        left = {gang for gang, _ in self.pods.values()}
        self.groups = {g: group for g, group in self.groups.items() if g in left}
        return sorted(due)

    @staticmethod
    def _whole(
        gang: str,
        gangs: Gangs,
        added: Counter[str],
        tasks_added: Counter[str | None],
        stranded: Counter[str],
    ) -> bool:
        """Whether the gang holds minMember with this cycle's binds (``added``, and per
        task ``tasks_added``), and each task's minimum unless it held minMember without
        its stranded pods (it ran before: the rollback checks a running gang for
        minMember only)."""
        need = gangs.need.get(gang, 1)
        held = gangs.held.get(gang, 0)
        if held + added[gang] < need:
            return False
        if gang not in gangs.task_need or held - stranded[gang] >= need:
            return True
        return not gangs.short_of_a_task(gang, tasks_added)
