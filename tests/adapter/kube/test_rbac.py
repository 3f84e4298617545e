"""deploy/'s RBAC grants exactly the API calls the adapter makes: no more, no fewer.

Every code path of the Kubernetes backend runs here against the fake API server, which
records each request in authorization terms (verb, group, resource[/subresource]); the
ClusterRole and the leader-election Role of ``deploy/base/rbac.yaml`` must allow each
recorded call, and every (verb, group, resource) they grant must have been used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from adapter.holds import Holds
from adapter.kube.cluster import KubeCluster
from adapter.kube.lease import LeaseElector
from adapter.kube.resources import DIALECTS
from adapter.kube.status import EventRecorder
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from tests.adapter.kube.manifests import (
    INSTALLED_EITHER_WAY,
    apply,
    gang_pods,
    node,
    podgroup,
    ships_inline_status,
)

RBAC = Path(__file__).resolve().parents[3] / "deploy" / "base" / "rbac.yaml"
Grant = tuple[str, str, str]  # verb, group, resource or resource/subresource


def grants(kind: str) -> set[Grant]:
    found: set[Grant] = set()
    for doc in yaml.safe_load_all(RBAC.read_text(encoding="utf-8")):
        if doc and doc["kind"] == kind:
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            found.add((verb, group, resource))
    return found


def exercise(server: FakeApiServer) -> None:
    """Every request path of the backend: watch, bind, 409 check, rollback, eviction,
    status of every dialect, pod conditions, Events and their repeats, a claim given its
    pod's node, the Lease."""
    objects: list[dict[str, Any]] = [
        node("n1", cpu="4", memory="16Gi"),
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 100,
        },
    ]
    for r in DIALECTS:
        if r.kind == "Queue":
            objects.append(
                {
                    "apiVersion": r.api_version,
                    "kind": "Queue",
                    "metadata": {"name": "default"},
                    "spec": {"weight": 1},
                }
            )
    for i, r in enumerate(d for d in DIALECTS if d.kind == "PodGroup"):
        name = f"fits{i}"
        pods = gang_pods(name, 1, cpu="100m", dialect=r.group)
        objects += [podgroup(name, 1, group=r.group), *pods]
    objects += [podgroup("huge", 2), *gang_pods("huge", 2, cpu="64")]  # never fits
    objects += [podgroup("flaky", 2), *gang_pods("flaky", 2, cpu="100m")]
    # Preemption: gang urgent (priority class high) evicts gang low from n2.
    low = gang_pods("low", 2, cpu="2")
    for p in low:
        p["spec"]["nodeName"] = "n2"
    urgent = gang_pods("urgent", 2, cpu="3")
    for p in urgent:
        p["spec"]["priorityClassName"] = "high"
    urgent_group = podgroup("urgent", 2)
    urgent_group["spec"]["priorityClassName"] = "high"
    objects += [node("n2", cpu="4"), podgroup("low", 2), *low, urgent_group, *urgent]
    # A claim whose volume is made where its pod goes: given the pod's node (patch).
    objects += [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "local-ssd"},
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "scratch", "namespace": "default"},
            "spec": {"storageClassName": "local-ssd", "accessModes": ["ReadWriteOnce"]},
            "status": {"phase": "Pending"},
        },
    ]
    (mounting,) = gang_pods("mounting", 1, cpu="100m")
    mounting["spec"]["volumes"] = [{"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}]
    objects += [podgroup("mounting", 1), mounting]
    apply(server, objects)
    server.fail("POST", r"/pods/flaky-1/binding$", 409)  # -> get, then delete flaky-0
    # A claim's node write refused as a conflict: read, whether it names the node already.
    server.fail("PATCH", r"/persistentvolumeclaims/scratch$", 409)

    # The rate as high as the Events: the second cycle's refreshes are not held for news.
    recorder = EventRecorder(refresh_s=0.0, rate_per_s=1000.0, burst=1000)
    cluster = KubeCluster(server.client(), recorder=recorder).start(10)
    settings = LoopSettings(solver=SolverConfig(time_limit_s=2.0, preemption=True))
    holds = Holds()
    try:
        for _ in range(2):  # the second cycle repeats the Events: count updates
            run_cycle(cluster, settings, None, holds)
            assert cluster.writer.flush()
    finally:
        cluster.stop()
    clock = [0.0]
    elector = LeaseElector(
        server.client(), "gangsat-system", "gangsat", "me", clock=lambda: clock[0]
    )
    assert elector.try_acquire_or_renew()  # create
    clock[0] += 1
    assert elector.try_acquire_or_renew()  # get, update


def test_the_rbac_rules_are_exactly_the_calls_the_adapter_makes(server: FakeApiServer) -> None:
    """On the CRDs as each peer ships them, and on the other shape of the two kube-batch
    groups, whose CRDs kube-batch or early Volcano may have installed (with or without a
    status subresource), and of the older Coscheduling group (scheduler-plugins before
    v0.24, or Koordinator): status goes to whichever the cluster has."""
    exercise(server)
    other = FakeApiServer()
    for r in DIALECTS:
        inline = ships_inline_status(r.group, r.plural)
        if r.group in INSTALLED_EITHER_WAY:
            inline = not inline
        other.add_resource(
            r.group,
            r.version,
            r.plural,
            r.kind,
            namespaced=r.namespaced,
            status_subresource=not inline,
        )
    with other:
        exercise(other)
    used: set[Grant] = set()
    for r in [*server.requests, *other.requests]:
        if not r.resource:
            continue  # discovery: the default system:discovery role allows it
        resource = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
        used.add((r.verb, r.group, resource))
    cluster_wide, leader = grants("ClusterRole"), grants("Role")
    lease_calls = {u for u in used if u[2] == "leases"}
    assert lease_calls == leader, "the Role grants exactly the Lease calls"
    assert used - lease_calls == cluster_wide, (
        f"not granted: {sorted(used - lease_calls - cluster_wide)}; "
        f"granted, never used: {sorted(cluster_wide - used)}"
    )
