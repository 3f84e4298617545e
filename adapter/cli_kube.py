"""``gangsat run`` on a real cluster: its flags checked as kube-scheduler's are, then the
scheduler launched (``adapter.kube.launch``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from adapter.inputs import BadInput
from adapter.kube.launch import launch
from adapter.kube.run import KubeOptions, pod_namespace
from adapter.kube.source import ClusterSource
from adapter.settings import Settings, SettingsError
from solver.schedulers import SCHEDULERS

LogLevel = Literal["debug", "info", "warning", "error"]
# Kubernetes components take booleans as --flag=false; typer's are --flag/--no-flag.
BOOLEAN_FLAGS = ("--leader-elect",)
# Names as the API server validates them: a Lease's a DNS-1123 subdomain (at most 253
# characters), a namespace's a DNS-1123 label (no dots, at most 63).
DNS_1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_NAMES = {
    "--lease-name": (re.compile(rf"{DNS_1123_LABEL}(\.{DNS_1123_LABEL})*"), 253, "subdomain"),
    "--lease-namespace": (re.compile(DNS_1123_LABEL), 63, "label"),
}


def run_cluster(
    source: ClusterSource,
    logs: tuple[LogLevel, Literal["text", "json"]],
    scheduler_names: list[str] | None,
    settings_file: Path | None,
    metrics_port: int,
    leader_elect: bool,
    lease_namespace: str | None,
    lease_name: str,
    cycles: int | None,
    scheduler: list[str] | None,
    time_limit: float | None,
    sync_timeout: float = 60.0,
) -> int:
    """Schedule a real cluster until stopped; the process's exit status. Bad flags or
    settings raise ``BadInput``, before anything is started."""
    if scheduler and len(scheduler) != 1:
        raise BadInput([f"--scheduler: a cluster is scheduled by one of {', '.join(SCHEDULERS)}"])
    if scheduler_names and not all(n.strip() for n in scheduler_names):
        raise BadInput(["--scheduler-name: a scheduler name cannot be empty"])
    for flag, value in (("--lease-name", lease_name), ("--lease-namespace", lease_namespace)):
        pattern, most, kind = DNS_NAMES[flag]
        if value is not None and not (len(value) <= most and pattern.fullmatch(value)):
            # The API server would refuse it on every attempt, and the replica never lead.
            raise BadInput(
                [f"{flag}: {value!r} is not a DNS-1123 {kind} (at most {most} characters)"]
            )
    options = KubeOptions(
        settings_path=settings_file,
        metrics_port=metrics_port,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace or pod_namespace(),
        lease_name=lease_name,
        max_cycles=cycles,
        scheduler=scheduler[0] if scheduler else None,
        time_limit_s=time_limit,
        scheduler_names=tuple(scheduler_names) if scheduler_names else None,
        sync_timeout_s=sync_timeout,
    )
    try:
        settings = Settings.load(settings_file) if settings_file is not None else Settings()
        options.applied(settings)  # the flags are checked as the settings file is
    except SettingsError as e:
        raise BadInput(str(e).splitlines()) from None
    return launch(source, settings, options, *logs)


# Go's strconv.ParseBool, which kube-scheduler's flags take.
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def kube_style(argv: list[str]) -> list[str]:
    """``--leader-elect=false`` as kube-scheduler takes it, in typer's spelling."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if eq and name in BOOLEAN_FLAGS and value in (*GO_TRUE, *GO_FALSE):
            out.append(name if value in GO_TRUE else f"--no-{name[2:]}")
        else:
            out.append(arg)
    return out
