"""The simulated cluster: a seeded, discrete-event stand-in for a Kubernetes cluster.

It implements ``adapter.cluster.Cluster``, so the scheduling loop cannot tell it from
the real thing. Virtual time moves only when the runner steps it. Jobs arrive at their
submit time as a gang of pending pods. A job makes progress only while at least
``min_member`` of its pods are running (bound, and past the bind latency): its pods wait
for each other, so a partly bound gang holds resources and does nothing — the seed
talk's deadlock. A job finishes after ``duration_s`` of progress and frees its pods.

Like a kubelet, a bind that would overcommit a node is refused, so the simulator never
runs a node above capacity whatever a scheduler decides.
"""

from __future__ import annotations

import heapq
import random
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from adapter.cluster import ClusterError, CycleReport
from adapter.sim.scenario import Job, Workload
from solver.model import ClusterState, Gang, Node, Pod
from solver.predicates import insufficient, node_affinity_reason, tolerates
from solver.scheduling_terms import TaintEffect

ARRIVE, READY, FINISH, GONE = "arrive", "ready", "finish", "gone"


@dataclass
class JobState:
    job: Job
    arrived: bool = False
    started_s: float | None = None  # first time it ran
    finished_s: float | None = None
    running_since: float | None = None
    remaining_s: float = 0.0
    checkpointed_s: float = 0.0  # progress kept by its last preemption
    token: int = 0  # invalidates a scheduled finish when the job pauses

    @property
    def running(self) -> bool:
        return self.running_since is not None

    @property
    def waiting(self) -> bool:
        """Arrived, not finished, not running: it wants resources."""
        return self.arrived and self.finished_s is None and self.running_since is None


@dataclass(frozen=True)
class SimEvent:
    """Something a user would see happen, for the run log."""

    t: float
    kind: str  # arrived, started, paused, finished, evicted
    job: str
    detail: str = ""


@dataclass
class SimulatedCluster:
    workload: Workload
    now: float = 0.0
    version: int = 0  # bumps on every change a scheduler could react to
    last_progress_s: float = 0.0  # last job start or finish
    events_log: list[SimEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        settings = self.workload.scenario.settings
        self.bind_latency_s = settings.bind_latency_s
        self.bind_failure_rate = settings.bind_failure_rate
        self.termination_grace_s = settings.termination_grace_s
        self.checkpoint_fraction = settings.checkpoint_fraction
        self.preempted_pod_s: dict[str, float] = defaultdict(float)  # resource-s of lost work
        self._rng = random.Random(settings.seed)
        self.nodes: dict[str, Node] = {n.name: n for n in self.workload.nodes}
        self.free: dict[str, dict[str, int]] = {
            n.name: dict(n.allocatable.items()) for n in self.workload.nodes
        }
        self.jobs: dict[str, JobState] = {
            j.name: JobState(j, remaining_s=j.duration_s) for j in self.workload.jobs
        }
        self._gangs: dict[str, Gang] = {j.name: j.gang() for j in self.workload.jobs}
        self.pods: dict[str, Pod] = {}  # pods of arrived, unfinished jobs
        self.job_of: dict[str, str] = {}
        # Kept incrementally: a 1,000-pod gang must not rescan its pods on every bind.
        self._bound_count: dict[str, int] = defaultdict(int)  # job -> pods bound
        self.bound_changed_s: dict[str, float] = {}  # job -> when its bound count last moved
        self._ready_count: dict[str, int] = defaultdict(int)  # job -> pods past bind latency
        self._ready: set[str] = set()
        self._terminating: set[str] = set()  # evicted, still holding their node's room
        self._bind_serial: dict[str, int] = {}  # pod -> serial of its current bind
        self._queue: list[tuple[float, int, str, str, int]] = []
        self._seq = 0
        for job in self.workload.jobs:
            for t in sorted({job.submit_s} | {p.created_s for p in job.pods}):
                self._push(t, ARRIVE, job.name)

    # --- the Cluster protocol -------------------------------------------------------------

    def snapshot(self, again: bool = False) -> ClusterState:
        active = [js.job.name for js in self.jobs.values() if js.arrived and js.finished_s is None]
        return ClusterState(
            nodes=self.workload.nodes,
            pods=tuple(self.pods.values()),
            gangs=tuple(self._gangs[name] for name in active),
            queues=self.workload.queues,
            now_s=self.now,
        )

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        failures: dict[str, ClusterError] = {}
        for pod, node in placements:
            try:
                self.bind_one(pod, node)
            except ClusterError as e:
                failures[pod] = e
        return failures

    def unsettled(self) -> set[str]:
        return set()  # every bind here is answered: none is of unknown outcome

    def where_bound(self, pods: Collection[str]) -> dict[str, str]:
        return {
            p: pod.node_name
            for p in pods
            if (pod := self.pods.get(p)) is not None
            and pod.node_name is not None
            and not pod.terminating
        }

    def evict(self, pods: Sequence[str], reason: str) -> dict[str, ClusterError]:
        failures: dict[str, ClusterError] = {}
        for pod in pods:
            try:
                self.evict_one(pod, reason)
            except ClusterError as e:
                failures[pod] = e
        return failures

    def preempt(self, evictions: Mapping[str, str], again: bool = False) -> dict[str, ClusterError]:
        """Each pod stops at once (its job pauses below minMember, losing the progress
        not checkpointed) and keeps its node's room for the termination grace period,
        after which it is pending again."""
        failures: dict[str, ClusterError] = {}
        touched: set[str] = set()
        stopped: set[str] = set()  # evicted pods that were running: their work is lost
        for pod, reason in evictions.items():
            current = self.pods.get(pod)
            if current is None:
                continue  # gone: evicted already, as the API server's 404 says
            if current.node_name is None or current.terminating:
                failures[pod] = ClusterError("NotFound", f"pod {pod} is not running")
                continue
            if self._terminate(current):
                stopped.add(pod)
            job = self.job_of[pod]
            touched.add(job)
            self.events_log.append(SimEvent(self.now, "preempted", job, f"{pod}: {reason}"))
        for job in touched:
            self._update(self.jobs[job], preempted=True, stopped=stopped)
        self.version += 1
        return failures

    def bind_one(self, pod: str, node: str) -> None:
        current = self.pods.get(pod)
        if current is None:
            raise ClusterError("NotFound", f"pod {pod} does not exist")
        if current.node_name is not None:
            raise ClusterError(
                "Conflict",
                f"pod {pod} is already bound to {current.node_name}",
                bound_to=current.node_name,
            )
        if node not in self.nodes:
            raise ClusterError("NotFound", f"node {node} does not exist", retry_elsewhere=True)
        if self.bind_failure_rate and self._rng.random() < self.bind_failure_rate:
            self.version += 1  # a refused bind is worth retrying next cycle
            raise ClusterError(
                "Conflict", f"binding {pod} to {node}: injected fault", retry_elsewhere=True
            )
        refused = kubelet_refuses(current, self.nodes[node])
        if refused is not None:
            raise ClusterError("NodeAffinity", f"{pod} on {node}: {refused}", retry_elsewhere=True)
        demand = current.demand()
        free = self.free[node]
        short = insufficient(demand, free)
        if short:
            raise ClusterError(
                "OutOfResources", f"{pod} on {node}: {', '.join(short)}", retry_elsewhere=True
            )
        for r, q in demand.items():
            free[r] -= q
        self.pods[pod] = current.model_copy(update={"node_name": node, "started_s": self.now})
        self.version += 1
        job = self.job_of[pod]
        self._bound_count[job] += 1
        self.bound_changed_s[job] = self.now
        if self.bind_latency_s:
            self._seq += 1
            self._bind_serial[pod] = self._seq
            self._push(self.now + self.bind_latency_s, READY, pod, self._seq)
        else:
            self._mark_ready(pod)
            self._update(self.jobs[job])

    def evict_one(self, pod: str, reason: str) -> None:
        """A bound pod deleted (a gang's bind rolled back): as on a real node, it holds its
        room for the termination grace period, then is pending again."""
        current = self.pods.get(pod)
        if current is None or current.node_name is None or current.terminating:
            raise ClusterError("NotFound", f"pod {pod} is not bound")
        if self.termination_grace_s > 0:
            self._terminate(current)
        else:
            self._unbind(current)
        self.version += 1
        js = self.jobs[self.job_of[pod]]
        self.events_log.append(SimEvent(self.now, "evicted", js.job.name, f"{pod}: {reason}"))
        self._update(js)

    def report(self, report: CycleReport) -> None:
        """Nothing to write: simulated gangs have no PodGroup objects, and the run log
        reads the statuses from each ``CycleResult``."""

    # --- virtual time ---------------------------------------------------------------------

    def next_event_time(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def step(self) -> None:
        """Process the next event, moving the clock to it."""
        t, _, kind, name, token = heapq.heappop(self._queue)
        self.now = max(self.now, t)
        if kind == GONE:
            current = self.pods.get(name)
            if current is not None and current.terminating and current.node_name is not None:
                self._release(current)
                self.pods[name] = current.model_copy(
                    update={"node_name": None, "terminating": False, "started_s": None}
                )
                self.version += 1
            return
        if kind == READY:
            # ``name`` is the pod; a bind undone before its latency passed has a new serial.
            if self._bind_serial.get(name) == token:
                self._mark_ready(name)
                self._update(self.jobs[self.job_of[name]])
            return
        js = self.jobs[name]
        if kind == ARRIVE:
            if js.finished_s is not None:
                return  # a pod created after its job ended would belong to no PodGroup
            if not js.arrived:
                self.events_log.append(SimEvent(t, "arrived", name, self._job_shape(js.job)))
            js.arrived = True
            for pod in js.job.pods:
                if pod.created_s <= t and pod.name not in self.job_of:
                    self.pods[pod.name] = pod
                    self.job_of[pod.name] = name
            self.version += 1
        elif kind == FINISH and token == js.token and js.running:
            js.finished_s = t
            js.running_since = None
            js.remaining_s = 0.0
            for pod in js.job.pods:
                current = self.pods.pop(pod.name, None)
                if current is not None and current.node_name is not None:
                    self._release(current)
                self.job_of.pop(pod.name, None)
            self._gangs.pop(name, None)
            self.version += 1
            self.last_progress_s = t
            self.events_log.append(
                SimEvent(t, "finished", name, f"after {t - js.job.submit_s:.0f} s in the system")
            )

    def advance(self, t: float) -> None:
        """Move the clock to ``t``, which must not pass a pending event."""
        nxt = self.next_event_time()
        if nxt is not None and nxt < t:
            raise ValueError(f"advance to {t} would skip an event at {nxt}")
        self.now = max(self.now, t)

    # --- what the runner measures ---------------------------------------------------------

    def done(self) -> bool:
        return all(js.finished_s is not None for js in self.jobs.values())

    def has_waiting(self) -> bool:
        return any(js.waiting for js in self.jobs.values())

    def any_running(self) -> bool:
        return any(js.running for js in self.jobs.values())

    def bound_count(self, job: str) -> int:
        return self._bound_count[job]

    def stuck_partial_jobs(self, for_s: float) -> list[str]:
        """Partial jobs whose bound pods have not changed for ``for_s``."""
        return [
            job
            for job in self.partial_jobs()
            if self.now - self.bound_changed_s.get(job, 0.0) >= for_s
        ]

    def partial_jobs(self) -> list[str]:
        """Jobs holding some pods but fewer than minMember: resources held, no progress.

        A gang bound whole but still inside its bind latency is starting, not partial.
        """
        return [
            name
            for name, js in self.jobs.items()
            if js.waiting and 0 < self.bound_count(name) < js.job.min_member
        ]

    # --- internals ------------------------------------------------------------------------

    def _push(self, t: float, kind: str, name: str, token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, kind, name, token))

    def _terminate(self, pod: Pod) -> bool:
        """Mark a bound pod terminating: no longer a member that runs (a gang that loses
        all its pods so is not "partly bound"), its room held until GONE. Whether it ran."""
        name = pod.name
        self.pods[name] = pod.model_copy(update={"terminating": True})
        ran = name in self._ready
        if ran:
            self._ready.discard(name)
            self._ready_count[self.job_of[name]] -= 1
        self._bind_serial.pop(name, None)  # a bind latency still running never ends
        self._terminating.add(name)
        self._bound_count[self.job_of[name]] -= 1
        self.bound_changed_s[self.job_of[name]] = self.now
        self._push(self.now + self.termination_grace_s, GONE, name)
        return ran

    def _unbind(self, pod: Pod) -> None:
        """The pod stays, pending again (its controller recreated it)."""
        self._release(pod)
        self.pods[pod.name] = pod.model_copy(update={"node_name": None})

    def _release(self, pod: Pod) -> None:
        """Free what a bound pod holds and forget its bind."""
        assert pod.node_name is not None
        free = self.free[pod.node_name]
        for r, q in pod.demand().items():
            free[r] += q
        self._bind_serial.pop(pod.name, None)
        job = self.job_of[pod.name]
        if pod.name in self._terminating:
            self._terminating.discard(pod.name)  # counted out when it was evicted
        else:
            self._bound_count[job] -= 1
            self.bound_changed_s[job] = self.now
        if pod.name in self._ready:
            self._ready.discard(pod.name)
            self._ready_count[job] -= 1

    def _mark_ready(self, pod: str) -> None:
        self._ready.add(pod)
        self._ready_count[self.job_of[pod]] += 1

    def _update(self, js: JobState, preempted: bool = False, stopped: Collection[str] = ()) -> None:
        """Start or pause a job as its running pod count crosses ``min_member``; paused by
        preemption (``stopped``: the running pods it evicted), it keeps only
        ``checkpoint_fraction`` of its progress, lost by the pods that ran."""
        if js.finished_s is not None:
            return
        enough = self._ready_count[js.job.name] >= js.job.min_member
        if enough and not js.running:
            js.running_since = self.now
            if js.started_s is None:
                js.started_s = self.now
            js.token += 1
            self._push(self.now + js.remaining_s, FINISH, js.job.name, js.token)
            self.last_progress_s = self.now
            self.events_log.append(
                SimEvent(
                    self.now, "started", js.job.name, f"waited {self.now - js.job.submit_s:.0f} s"
                )
            )
        elif not enough and js.running:
            assert js.running_since is not None
            js.remaining_s -= self.now - js.running_since
            if preempted:
                # What ran since the last checkpoint keeps its fraction; what an earlier
                # preemption kept stays kept (and is not lost again).
                since = js.job.duration_s - js.remaining_s - js.checkpointed_s
                lost = since * (1 - self.checkpoint_fraction)
                # Pods of an elastic job that never ran lost nothing.
                for pod in js.job.pods:
                    if pod.name in stopped or pod.name in self._ready:
                        for r, q in pod.requests.items():
                            self.preempted_pod_s[r] += q * lost
                js.checkpointed_s += since - lost
                js.remaining_s = js.job.duration_s - js.checkpointed_s
            js.running_since = None
            js.token += 1
            self.events_log.append(
                SimEvent(self.now, "paused", js.job.name, "fewer than minMember pods running")
            )

    @staticmethod
    def _job_shape(job: Job) -> str:
        req = job.pods[0].requests.nonzero() if job.pods else {}
        shown = ", ".join(f"{r} {q}" for r, q in sorted(req.items()))
        return f"{len(job.pods)} pods ({shown}), minMember {job.min_member}, queue {job.queue}"


def kubelet_refuses(pod: Pod, node: Node) -> str | None:
    """Why a kubelet would refuse ``pod`` bound to ``node`` (its admission, resources
    aside): a node selector or required node affinity the node does not match, or a
    NoExecute taint the pod does not tolerate. Not a cordon, nor a NoSchedule taint:
    those only keep schedulers off. A bug shared by the solver's predicates and the
    validator would otherwise run its pods here where a real node refuses them."""
    # Whatever else the node fails first (a cordon, a NoSchedule taint).
    if (mismatch := node_affinity_reason(pod, node)) is not None:
        return mismatch
    for taint in node.taints:
        if taint.effect == TaintEffect.NO_EXECUTE and not any(
            tolerates(t, taint) for t in pod.tolerations
        ):
            return f"node(s) had untolerated taint {{{taint.key}}} (NoExecute)"
    return None
