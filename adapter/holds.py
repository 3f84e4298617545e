"""Room held for preempting gangs while their victims terminate, and for gangs whose
volumes are being made where a decision placed them.

A decision that evicts running pods nominates the pending gang that takes their room
(``Decision.nominated``). The victims take their termination grace period to go, so the
gang cannot be bound in the same cycle. Until they are gone the loop *holds* the room:
every snapshot the solver reads shows the held pods as bound to their nominated nodes
(assumed, as kube-scheduler assumes a pod before its bind lands), so no other gang takes
the freed room and the held gang is not placed a second time. Once every victim is gone
the held pods are bound as this cycle's placements, through the same validator and
all-or-nothing bind as any decision.

A hold is dropped (its gang pending again, decided afresh next cycle) when a held pod is
no longer pending or its node is gone, or when its victims have not gone within
``timeout_s`` of the snapshot clock (a stuck finalizer, a PodDisruptionBudget); the
nominations of its pods are then cleared (``cleared``).

A gang whose bind was held back while its volumes are made where the decision placed it
(``WAITING_FOR_VOLUMES``: claims of a ``WaitForFirstConsumer`` class, given their pods'
nodes) is held the same way, with no victims: its pods are gated meanwhile, and it is
bound once none is, as kube-scheduler keeps a pod assumed on its node while its PreBind
waits for its claims; within ``timeout_s`` too.

Holds live in the leader's memory, and the nominations in the API server: a new leader
(or a restarted one) rebuilds them from the pending pods' ``nominatedNodeName`` once, at
its first cycle (``recover``), as kube-scheduler keeps a nominated pod's room. Which pods
were evicted for the gang it does not know: it waits for the pods terminating on the
nominated nodes, which include them (and, where its queue has a capability the gang may
wait for, for the pods of that queue's PodGroups terminating anywhere, as
``evicting.preempt`` waits for its queue's victims). The victims whose eviction failed
where others of their gang's went, which its predecessor sent again, it knows by their
mark (``Pod.marked_victim``, the ``DisruptionTarget`` condition written before every
eviction): it sends them again, and the gangs nominated where they run wait for them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from adapter.gangs import Gangs
from solver.model import DEFAULT_QUEUE, IMPLICIT_GANG_PREFIX, PODS, ClusterState, Node, Pod
from solver.predicates import placement_reason

log = logging.getLogger(__name__)

HOLD_TIMEOUT_S = 300.0  # ten default 30 s grace periods
# A victim's mark older than this is not acted on: kube-controller-manager's disruption
# controller turns a DisruptionTarget older than two minutes False on a pod not being
# deleted (``stalePodDisruptionTimeout``), and so the marks of a victim that kept every
# pod lapse; where no such controller runs, this does. A leader refreshes the marks of
# the evictions it sends again each cycle.
MARK_STALE_S = 120.0


@dataclass(frozen=True)
class Hold:
    gang: str
    pods: dict[str, str]  # pod -> nominated node
    victim_nodes: dict[str, str]  # pod evicted for it -> the node it ran on
    since_s: float  # snapshot clock when the evictions were sent
    # Of its victims, the pods whose eviction failed where others of their gang's went:
    # the gang runs below minMember whatever comes next, so they are evicted again while
    # the hold waits (pod -> why), as ``evicting.evict_again`` does.
    resend: dict[str, str] = field(default_factory=dict)
    # Held while its volumes are made where it was placed (its binds deferred), not for
    # victims.
    volumes: bool = False


@dataclass
class Holds:
    timeout_s: float = HOLD_TIMEOUT_S
    held: dict[str, Hold] = field(default_factory=dict)  # gang -> hold
    recovered: bool = False  # the nominations found at the first cycle are held
    # Pods of holds dropped unbound: their nominations are stale, to be cleared.
    cleared: set[str] = field(default_factory=set)
    # Evictions to send again with no hold waiting on them (pod -> (why, the node it was
    # evicted from)): of a dropped hold's ``resend``, or of a victim broken for a gang
    # that was not held. Its gang runs below minMember whatever comes next, hold or not.
    resend: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Of those, the ones waiting for binds of unknown outcome that may have made their
    # gang whole: pod -> the snapshot clock when the wait began (``evicting.evict_again``).
    doubt_since: dict[str, float] = field(default_factory=dict)
    # Whose marks it recovers (``VictimMark.by``: its deployment's, and those that say
    # none; None: any): another deployment's victims are that one's to finish.
    author: str | None = None

    def __bool__(self) -> bool:
        return bool(self.held)

    def resending(self) -> bool:
        """Whether an eviction is to be sent again (``resend``, a hold's ``Hold.resend``)."""
        return bool(self.resend) or any(hold.resend for hold in self.held.values())

    def add(self, hold: Hold) -> None:
        old = self.held.get(hold.gang)
        if old is not None:  # held again: the pods it no longer holds are stale
            self.cleared |= old.pods.keys() - hold.pods.keys()
        self.held[hold.gang] = hold
        self.cleared -= hold.pods.keys()

    def drop(self, gang: str, why: str, bound: bool = False) -> None:
        """``bound``: its pods were bound as nominated, so their nominations stand."""
        hold = self.held.pop(gang, None)
        if hold is not None:
            log.info("room held for gang %s released: %s", gang, why)
            # Dropped with it, they left the victim running below minMember for good.
            for pod, reason in hold.resend.items():
                self.resend[pod] = (reason, hold.victim_nodes[pod])
            if not bound:
                self.cleared |= hold.pods.keys()

    def take_cleared(self, state: ClusterState) -> tuple[str, ...]:
        """The pods whose nominations lapsed, still pending. Each is asked for again while
        the snapshot shows its nomination (a clear that failed goes out again; the writer
        sends each once), and once more where it shows none (one written this term may not
        show yet: the writer knows)."""
        if not self.cleared:
            return ()
        pending = {p.name: p for p in state.pods if p.name in self.cleared and p.node_name is None}
        self.cleared = {name for name, p in pending.items() if p.nominated_node is not None}
        return tuple(sorted(pending))

    def recover(self, state: ClusterState, gangs: Gangs) -> list[str]:
        """Hold the room of the pending pods a leader before this one nominated, once
        (``recovered``); returns the gangs held. Per gang, its nominated pending pods; its
        victims, the pods terminating on their nodes and the remnants (below) there, and
        where its queue has a capability (the gang may wait for it), the pods of that
        queue's PodGroups terminating or remnants anywhere. Remnants, per ``gangs``: the
        running pods a leader before this one marked to evict (``Pod.marked_victim``, within
        ``MARK_STALE_S``) of gangs that run below their minimum. Their evictions failed
        where others of their gang's went, and the evictions to send again were that
        leader's memory (``resend``): they are sent again, as it would have. Where no victim
        is left, the hold binds at once, through the validator. A nomination to a node that
        is gone, or that the pod may no longer use (a taint or a cordon since, labels
        changed, its room unknown), of a pod whose PodGroup is gone, or in a queue closed
        since, is no hold: the gang is decided afresh, and the nomination cleared. (Held,
        the validator refused its bind as a broken rule, the error a solver's bug logs.)"""
        if self.recovered:
            return []
        self.recovered = True
        nodes = {n.name: n for n in state.nodes}
        queue_of = {g.name: g.queue for g in state.gangs}
        capped = {q.name for q in state.queues if q.capability is not None}
        closed = _closed_queues(state)
        nominated: dict[str, dict[str, str]] = {}
        usable: dict[str, bool] = {}  # gang -> every nomination on a node its pod may use
        leaving: dict[str, dict[str, str]] = {}  # node -> leaving pod -> node
        leaving_queue: dict[str, dict[str, str]] = {}  # queue -> leaving pod -> node
        for pod in state.pods:
            remnant = False
            if (
                (mark := pod.marked_victim) is not None
                and (self.author is None or mark.by in ("", self.author))
                and state.now_s - mark.at_s <= MARK_STALE_S
                and pod.node_name is not None
                and not pod.terminating
                and gangs.runs_short(pod.gang_name())
            ):
                remnant = True
                self.resend[pod.name] = (mark.why, pod.node_name)
                log.info("evicting %s again, as a leader before this one did", pod.name)
            if (pod.terminating or remnant) and pod.node_name is not None:
                leaving.setdefault(pod.node_name, {})[pod.name] = pod.node_name
                if (queue := queue_of.get(pod.gang_name())) is not None:  # PodGroups only
                    leaving_queue.setdefault(queue, {})[pod.name] = pod.node_name
            elif pod.node_name is None and not pod.terminating and pod.nominated_node:
                gang = pod.gang_name()
                nominated.setdefault(gang, {})[pod.name] = pod.nominated_node
                node = nodes.get(pod.nominated_node)
                fits = node is not None and _unusable(pod, node) is None
                usable[gang] = usable.get(gang, True) and fits
        held: list[str] = []
        for gang, pods in sorted(nominated.items()):
            if gang in self.held:
                continue
            implicit = gang.startswith(IMPLICIT_GANG_PREFIX)
            if (
                not usable[gang]
                or not (implicit or gang in queue_of)
                or queue_of.get(gang, DEFAULT_QUEUE) in closed
            ):
                self.cleared |= pods.keys()
                continue
            victims = {
                p: n for node in set(pods.values()) for p, n in leaving.get(node, {}).items()
            }
            queue = queue_of.get(gang, DEFAULT_QUEUE)
            if queue in capped:  # it may wait for its capability (``evicting.preempt``)
                victims |= leaving_queue.get(queue, {})
            self.add(Hold(gang=gang, pods=pods, victim_nodes=victims, since_s=state.now_s))
            held.append(gang)
            log.info(
                "room held for gang %s as nominated before this leader: %d pod(s) on %s",
                gang,
                len(pods),
                ", ".join(sorted(set(pods.values()))),
            )
        return held

    def refresh(self, state: ClusterState, pods: Mapping[str, Pod]) -> dict[str, str]:
        """Drop the holds the snapshot makes void; returns gang -> why. ``pods``: the
        snapshot's by name (``by_name``)."""
        nodes = {n.name: n for n in state.nodes}
        closed = _closed_queues(state)
        queue_of = {g.name: g.queue for g in state.gangs}
        gated = _gated_gangs(pods)
        dropped: dict[str, str] = {}
        for gang, hold in list(self.held.items()):
            why = None
            if (queue := queue_of.get(gang, DEFAULT_QUEUE)) in closed:
                why = f"queue {queue!r} is {closed[queue]}: it takes no new pods"
            for pod, node in hold.pods.items():
                if why:
                    break
                current = pods.get(pod)
                if current is None or current.node_name is not None or current.terminating:
                    why = f"pod {pod} is no longer pending"
                elif node not in nodes:
                    why = f"node {node} is gone"
                elif (broken := _unusable(current, nodes[node])) is not None:
                    # A taint or a cordon since the nomination, or a node whose room is no
                    # longer known: bound, the validator would refuse it as a solver's
                    # broken rule.
                    why = f"pod {pod} may no longer use node {node}: {broken}"
            late = state.now_s - hold.since_s > self.timeout_s
            if why is None and late and not self.victims_gone(hold, pods):
                why = f"victims still running after {self.timeout_s:g} s"
            elif why is None and late and (self.gated(hold, pods) or gang in gated):
                why = f"volumes still being made after {self.timeout_s:g} s"
            if why is not None:
                dropped[gang] = why
                self.drop(gang, why)
        return dropped

    @staticmethod
    def by_name(state: ClusterState) -> Mapping[str, Pod]:
        """The snapshot's pods by name, for ``refresh`` and ``split``: a scan of every pod
        per hold cost tens of holds x tens of thousands of pods."""
        return state.pods_by_name()

    @staticmethod
    def victims_left(hold: Hold, pods: Mapping[str, Pod]) -> list[str]:
        """The victims still on the node they were evicted from: not deleted, pending
        again, or replaced by a namesake created since the evictions (a Volcano job
        recreates its pods under their names, and one placed where its predecessor ran
        kept the hold waiting out its timeout). A namesake has a later creation time. That
        is the API server's clock, ``since_s`` the scheduler's: a victim younger than
        their skew would be taken for gone (its node's kubelet then refuses the bind)."""
        return [
            name
            for name, node in hold.victim_nodes.items()
            if (pod := pods.get(name)) is not None
            and pod.node_name == node
            and pod.created_s <= hold.since_s
        ]

    @classmethod
    def victims_gone(cls, hold: Hold, pods: Mapping[str, Pod]) -> bool:
        return not cls.victims_left(hold, pods)

    @classmethod
    def waits_for(cls, hold: Hold, pods: Mapping[str, Pod]) -> tuple[bool, str]:
        """What a hold waits for: (whether its volumes, not its victims; in words)."""
        if hold.volumes or (cls.victims_gone(hold, pods) and cls.gated(hold, pods)):
            nodes = ", ".join(sorted(set(hold.pods.values())))
            return True, f"its volumes being made on {nodes}, the room held"
        left = cls.victims_left(hold, pods) or list(hold.victim_nodes)
        # Where they run: its own nodes, or others where its queue's capability waits for
        # victims elsewhere.
        on = {hold.victim_nodes[p] for p in left} or set(hold.pods.values())
        return False, (
            f"preempting: waiting for {len(left)} evicted pod(s) to terminate on "
            f"{', '.join(sorted(on))}"
        )

    @staticmethod
    def gated(hold: Hold, pods: Mapping[str, Pod]) -> bool:
        """Whether a held pod is gated: its volumes are still being made where the hold
        nominates it (``kube.volumes``), and it is not to be bound yet."""
        return any((pod := pods.get(name)) is not None and pod.gates for name in hold.pods)

    def split(self, pods: Mapping[str, Pod]) -> tuple[list[Hold], list[Hold]]:
        """(holds whose victims are gone and pods not gated: bind them now, holds still
        waiting); ``pods``: the snapshot's by name (``by_name``)."""
        ready: list[Hold] = []
        waiting: list[Hold] = []
        # A gang-mate gated, held or not: a new leader's hold recovers only the nominated
        # pods, and bound without a mate still gated (made again since, say), the gang
        # was short (refused by the validator, its room released).
        gated = _gated_gangs(pods)
        for hold in self.held.values():
            go = self.victims_gone(hold, pods) and not self.gated(hold, pods)
            go = go and hold.gang not in gated
            (ready if go else waiting).append(hold)
        return ready, waiting

    def assumed(self, state: ClusterState, holds: list[Hold]) -> ClusterState:
        """The snapshot with the held pods bound to their nominated nodes. Their gangs
        are not victims meanwhile: their pods are not really bound."""
        if not holds:
            return state
        bound = state.with_bindings({pod: node for h in holds for pod, node in h.pods.items()})
        names = {h.gang for h in holds}
        gangs = tuple(
            g.model_copy(update={"preemptible": False}) if g.name in names else g
            for g in state.gangs
        )
        return bound.model_copy(update={"gangs": gangs})


def _gated_gangs(pods: Mapping[str, Pod]) -> set[str]:
    """The gangs with a pending pod gated (its volumes being made, or a scheduling gate)."""
    return {p.gang_name() for p in pods.values() if p.gates and p.node_name is None}


def _closed_queues(state: ClusterState) -> dict[str, str]:
    """Queues that take no new pods (``Queue.admits``) -> their state: a held gang in
    one is not bound (an admin closed it since the evictions)."""
    return {q.name: q.state for q in state.queues if not q.admits()}


def _unusable(pod: Pod, node: Node) -> str | None:
    """Why ``pod`` may no longer go to ``node``, whatever else runs there: a predicate,
    or no pod slot at all (a node whose room gangsat cannot read: ``kube.unusable``,
    which a pod that tolerates every taint passes)."""
    if node.allocatable[PODS] == 0:
        return "it takes no pods"
    return placement_reason(pod, node)
