"""Which cluster `gangsat run` schedules, if any: only one it was asked for.

Asking is one of: ``--kubeconfig PATH``; the ``KUBECONFIG`` variable (as kubectl reads
it: a list of files, merged); ``--in-cluster``, the pod's service account, which the
Deployment passes. A pod's service account alone is no request: inside any pod,
``gangsat run --scenario philly`` must simulate, not become that cluster's scheduler.
A ``--scenario`` never talks to a cluster: with ``--kubeconfig`` or ``--in-cluster`` it
is an error, and with only ``KUBECONFIG`` set it simulates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class SourceError(ValueError):
    """The options ask for a cluster and a simulation at once, or for one that is not there."""


@dataclass(frozen=True)
class ClusterSource:
    kubeconfig: Path | None  # None with in_cluster False: KUBECONFIG (or ~/.kube/config)
    in_cluster: bool
    description: str


def cluster_source(
    kubeconfig: Path | None,
    in_cluster_flag: bool,
    scenario_given: bool,
    environ: Mapping[str, str],
    pod: bool,
) -> ClusterSource | None:
    """The cluster to schedule, or None to simulate. ``pod``: a service account is there."""
    if scenario_given and (kubeconfig is not None or in_cluster_flag):
        raise SourceError(
            "--scenario simulates; it cannot be combined with --kubeconfig or --in-cluster"
        )
    if kubeconfig is not None and in_cluster_flag:
        raise SourceError("give --kubeconfig or --in-cluster, not both")
    if kubeconfig is not None:
        return ClusterSource(kubeconfig, False, f"the cluster of {kubeconfig}")
    if in_cluster_flag:
        if not pod:
            raise SourceError(
                "--in-cluster: not inside a pod with a service account "
                "(no KUBERNETES_SERVICE_HOST or no token); use --kubeconfig outside one"
            )
        return ClusterSource(None, True, "this pod's cluster (its service account)")
    if environ.get("KUBECONFIG") and not scenario_given:
        return ClusterSource(None, False, f"the cluster of KUBECONFIG={environ['KUBECONFIG']}")
    return None
