"""The long-running scheduler: two replicas and one leader, settings reload, the CLI."""

from __future__ import annotations

import gc
import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from adapter import loop
from adapter.cli import app
from adapter.kube import run
from adapter.kube.cluster import KubeCluster
from adapter.kube.resources import DIALECTS, PODS
from adapter.kube.run import KubeOptions, KubeScheduler
from adapter.settings import Settings, SettingsError
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import (
    EXAMPLES,
    apply,
    bindings,
    binds,
    bound_pods,
    gang_pods,
    manifests,
    node,
    podgroup,
    wait_until,
)

QUICK = Settings.model_validate({"cycleSeconds": 0.05, "solver": {"time_limit_s": 1.0}})


def replica(server: FakeApiServer, identity: str, **kw: object) -> KubeScheduler:
    options = KubeOptions(
        metrics_port=0,
        metrics_host="127.0.0.1",
        identity=identity,
        lease_namespace="gangsat-system",
        lease_duration_s=1.5,
        renew_deadline_s=1.0,
        retry_period_s=0.1,
        **kw,  # type: ignore[arg-type]
    )
    return KubeScheduler(server.client(), options, QUICK)


def start(scheduler: KubeScheduler) -> threading.Thread:
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    return thread


def test_two_replicas_one_leader_no_pod_bound_twice(server: FakeApiServer) -> None:
    apply(server, [node("n1", cpu="16", memory="64Gi"), node("n2", cpu="16", memory="64Gi")])
    for g in range(6):
        apply(server, [podgroup(f"g{g}", 3), *gang_pods(f"g{g}", 3)])
    a, b = replica(server, "a"), replica(server, "b")
    threads = [start(a), start(b)]
    try:
        both_led = []
        stop_sampling = threading.Event()

        def sample() -> None:
            while not stop_sampling.is_set():
                both_led.append(a.leading() and b.leading())
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        wait_until(lambda: len(bound_pods(server)) == 18, timeout_s=15, what="18 pods bound")
        leader, follower = (a, b) if a.leading() else (b, a)
        assert leader.leading() and not follower.leading()
        metric = leader.metrics.registry.get_sample_value
        assert metric("gangsat_leader") == 1
        assert follower.cycles == 0  # a follower never ran a cycle, so never bound
        # Once a cycle has seen every bind: 18 CPUs held by the default queue, which
        # deserves all 18 it asks for; 6 gangs running.
        wait_until(
            lambda: (
                metric("gangsat_queue_allocated", {"queue": "default", "resource": "cpu"}) == 18
            ),
            what="the queue metrics of a cycle after the binds",
        )
        assert metric("gangsat_queue_deserved", {"queue": "default", "resource": "cpu"}) == 18
        assert metric("gangsat_queue_share_ratio", {"queue": "default"}) == 1.0
        running = {"state": "Running", "reason": "", "queue": "default"}
        assert metric("gangsat_gangs", running) == 6

        # The leader goes away (a rolling update): it releases the lease, the other
        # replica takes over and schedules what arrives next.
        leader.stop_event.set()
        threads[[a, b].index(leader)].join(timeout=10)
        apply(server, [podgroup("late", 2), *gang_pods("late", 2)])
        wait_until(lambda: len(bound_pods(server)) == 20, timeout_s=15, what="the late gang")
        assert follower.leading() and follower.cycles >= 1
        stop_sampling.set()
        sampler.join()
        assert not any(both_led)
        # No pod bound twice, nor sent to a second node. A bind may go out again when its
        # answer was lost (the fence cuts a request's wait to the leadership left, under
        # a second here): the server answers 409, the pod stays where the first put it.
        sent = bindings(server)
        assert len(sent) == 20 and set(binds(server)) == set(sent)
        assert all(len(set(nodes)) == 1 for nodes in sent.values())
    finally:
        for s in (a, b):
            s.stop_event.set()
        for t in threads:
            t.join(timeout=10)


def test_a_standby_that_takes_over_binds_in_its_first_cycle(server: FakeApiServer) -> None:
    """A standby replica keeps its caches warm: once the dead leader's lease expires, the
    work that waited for a leader is bound by the new leader's first cycle."""
    apply(server, [node("n1", cpu="16", memory="64Gi")])
    server.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "gangsat", "namespace": "gangsat-system"},
            "spec": {
                "holderIdentity": "a-replica-that-died",
                "leaseDurationSeconds": 3,
                "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
    )
    standby = replica(server, "standby")
    bound_by_cycle: list[int] = []
    cycle = standby.cycle

    def recorded() -> Any:
        result = cycle()
        bound_by_cycle.append(len(result.bound))
        return result

    standby.cycle = recorded  # type: ignore[method-assign]
    thread = start(standby)
    try:
        wait_until(lambda: standby.cluster.synced(), what="the standby's caches")
        apply(server, [podgroup("waiting", 3), *gang_pods("waiting", 3)])
        cache = standby.cluster.cache
        wait_until(
            lambda: all(cache.get(PODS, f"default/waiting-{i}") for i in range(3)),
            what="the standby sees the gang",
        )
        assert not standby.leading() and standby.cycles == 0
        wait_until(standby.leading, timeout_s=10, what="the lease taken over")
        wait_until(lambda: len(bound_pods(server)) == 3, what="the gang bound")
        # The binds land on the server before the cycle that made them returns.
        wait_until(lambda: bool(bound_by_cycle), what="the first cycle's result")
        assert bound_by_cycle[0] == 3, "bound by the first cycle after taking over"
    finally:
        standby.stop_event.set()
        thread.join(timeout=10)


def test_losing_the_lease_ends_the_run_with_a_failure_status(server: FakeApiServer) -> None:
    apply(server, [node("n1")])
    scheduler = replica(server, "a")
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(scheduler.run()), daemon=True)
    thread.start()
    wait_until(scheduler.leading, timeout_s=10, what="a leader")
    # Another writer takes the lease over (an operator, a split brain): renewals fail.
    server.fail("PUT", r"/leases/gangsat$", 409, times=1000)
    thread.join(timeout=10)
    assert status == [1] and scheduler.lost_lease
    # The frozen heap went back to the collector as it stopped (a process that goes on
    # kept a stopped scheduler's cyclic garbage until some full collection).
    assert gc.get_freeze_count() == 0


def test_settings_are_reloaded_when_the_file_changes(server: FakeApiServer, tmp_path: Path) -> None:
    path = tmp_path / "gangsat.yaml"
    path.write_text("cycleSeconds: 0.5\nscheduler: cpsat\n", encoding="utf-8")
    options = KubeOptions(settings_path=path, leader_elect=False, scheduler="gang-greedy")
    scheduler = KubeScheduler(server.client(), options, Settings.load(path))
    assert scheduler.settings.scheduler == "gang-greedy"  # the flag wins over the file
    assert not scheduler.reload_settings()  # unchanged
    path.write_text(
        "cycleSeconds: 2\nschedulerNames: [gangsat, kube-batch]\n"
        "solver: {weights: {fairness: 900}}\n",
        encoding="utf-8",
    )
    scheduler._settings_mtime = -1.0  # mtime granularity: a rewrite within a tick looks unchanged
    assert scheduler.reload_settings()
    assert scheduler.settings.cycle_s == 2
    assert scheduler.settings.solver.weights.fairness == 900
    assert scheduler.settings.scheduler == "gang-greedy"  # and keeps winning on reload
    assert scheduler.cluster.scheduler_names == ("gangsat", "kube-batch")
    path.write_text("cycleSeconds: -1\n", encoding="utf-8")
    scheduler._settings_mtime = -1.0
    assert not scheduler.reload_settings()  # refused, the previous settings stay
    assert scheduler.settings.cycle_s == 2
    path.write_bytes(b"cycleSeconds: 3\n# caf\xe9 (latin-1)\n")  # not UTF-8: no crash either
    scheduler._settings_mtime = -1.0
    assert not scheduler.reload_settings()
    assert scheduler.settings.cycle_s == 2


def test_gangsat_run_kubeconfig_schedules_the_seed(server: FakeApiServer, tmp_path: Path) -> None:
    apply(server, manifests(EXAMPLES / "kube-batch-seed.yaml"))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--no-leader-elect",
            "--cycles",
            "1",
            "--metrics-port",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    assert set(bound_pods(server)) == {f"default/myjob-{i}" for i in range(3)}


def test_gangsat_run_refuses_a_bad_settings_file(server: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    bad = tmp_path / "gangsat.yaml"
    bad.write_text("cycleSeconds: soon\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["run", "--kubeconfig", str(kubeconfig), "--settings", str(bad), "--cycles", "1"]
    )
    assert result.exit_code == 2
    assert "cycleSeconds" in result.output


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--time-limit", "-1"], "--time-limit: "),
        (["--time-limit", "nan"], "--time-limit: "),
        (["--scheduler", "fastest"], "--scheduler: "),
        (["--scheduler", "cpsat", "--scheduler", "greedy"], "--scheduler: "),
        (["--scheduler-name", " "], "--scheduler-name: "),
    ],
)
def test_gangsat_run_refuses_a_bad_flag_by_name_before_it_starts(
    server: FakeApiServer, tmp_path: Path, flags: list[str], named: str
) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(kubeconfig), *flags])
    assert result.exit_code == 2, result.output
    assert f"gangsat: {named}" in result.output
    assert not [r for r in server.requests if r.resource], "no request to the cluster"


def test_flags_override_the_settings_validated_as_the_file_is() -> None:
    settings = Settings.from_yaml("scheduler: greedy\nsolver:\n  time_limit_s: 3\n")
    options = KubeOptions(scheduler="gang-greedy", time_limit_s=0.5, scheduler_names=("a", "b"))
    merged = options.applied(settings)
    assert (merged.scheduler, merged.solver.time_limit_s) == ("gang-greedy", 0.5)
    assert merged.scheduler_names == ("a", "b")
    assert merged.solver.model_copy(update={"time_limit_s": 3.0}) == settings.solver
    with pytest.raises(SettingsError, match="--time-limit: "):
        KubeOptions(time_limit_s=0.0).applied(settings)
    assert KubeOptions().applied(settings) is settings


def test_gangsat_run_says_when_the_api_server_is_unreachable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = FakeApiServer().start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    server.stop()  # nothing listens there any more
    result = CliRunner().invoke(
        app, ["run", "--kubeconfig", str(kubeconfig), "--no-leader-elect", "--cycles", "1"]
    )
    assert result.exit_code == 3
    assert "cannot reach the Kubernetes API" in caplog.text  # a log record: JSON if asked


def test_gangsat_run_gives_up_on_a_first_list_past_its_sync_timeout(
    server: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A first list of every pod slower than --sync-timeout: the process exits, saying
    # which list never came, where the fixed 60 s would have kept a large cluster's
    # replica restarting.
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def slow(method: str, path: str) -> None:
        if method == "GET" and path == "/api/v1/pods":
            time.sleep(3)

    server.hooks.append(slow)
    argv = ["run", "--kubeconfig", str(kubeconfig), "--no-leader-elect", "--cycles", "1"]
    result = CliRunner().invoke(app, [*argv, "--metrics-port", "0", "--sync-timeout", "1"])
    server.hooks.remove(slow)
    # The list answers after 3 s, well within the default 60: only the flag ends it.
    assert result.exit_code == 3, result.output
    assert "no initial list of pods" in caplog.text


def test_a_start_stopped_before_the_first_lists_says_which_never_came(
    server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped from outside while a list is still out (a startup probe that gave up, a
    rollout): it left no word of why the start took so long."""

    def slow(method: str, path: str) -> None:
        if method == "GET" and path == "/api/v1/pods":
            time.sleep(2)

    server.hooks.append(slow)
    stop = threading.Event()
    cluster = KubeCluster(server.client())
    try:
        threading.Timer(0.5, stop.set).start()
        with caplog.at_level(logging.WARNING):
            cluster.start(sync_timeout_s=30, stop=stop)
        assert not cluster.synced()
        assert "before the initial list of pods" in caplog.text
    finally:
        server.hooks.remove(slow)
        cluster.stop()


def test_in_cluster_the_service_account_configures_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import incluster_config

    from adapter.kube import run

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("secret-token", encoding="utf-8")
    (account / "ca.crt").write_text("not checked until a request is made", encoding="utf-8")
    (account / "namespace").write_text("batch-system\n", encoding="utf-8")
    monkeypatch.setattr(run, "SERVICE_ACCOUNT", account)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert not run.in_cluster()  # a token alone is not a pod

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert run.in_cluster()
    assert run.pod_namespace() == "batch-system"
    api = run.api_client(None, in_cluster=True)
    configuration = api.configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.ssl_ca_cert == str(account / "ca.crt")
    headers: dict[str, str] = {}
    api.update_params_for_auth(headers, [], ["BearerToken"], "/api", "GET", None)
    assert headers["authorization"].lower() == "bearer secret-token"  # the scheme is case-blind


# --- which cluster, if any: only one asked for ---------------------------------------------


def test_a_scenario_inside_a_pod_simulates_and_never_schedules_the_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapter import cli

    monkeypatch.setattr(cli, "in_cluster", lambda: True)  # a pod with a service account
    monkeypatch.delenv("KUBECONFIG", raising=False)

    def no_cluster(*_: object, **__: object) -> int:
        raise AssertionError("a simulation must not talk to a cluster")

    monkeypatch.setattr(cli, "run_cluster", no_cluster)
    result = CliRunner().invoke(app, ["run", "--scenario", "seed-deadlock", "-s", "gang-greedy"])
    assert result.exit_code == 0, result.output
    assert "Summary: seed-deadlock" in result.stdout


def test_kubeconfig_from_the_environment_schedules_that_cluster(
    server: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gangsat")
    apply(server, manifests(EXAMPLES / "kube-batch-seed.yaml"))
    monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    result = CliRunner().invoke(
        app, ["run", "--no-leader-elect", "--cycles", "1", "--metrics-port", "0"]
    )
    assert result.exit_code == 0, result.output
    assert "scheduling the cluster of KUBECONFIG=" in caplog.text
    assert set(bound_pods(server)) == {f"default/myjob-{i}" for i in range(3)}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--scenario", "philly", "--kubeconfig", "k"], "--scenario simulates"),
        (["--in-cluster", "--kubeconfig", "k"], "not both"),
        (["--in-cluster"], "not inside a pod"),
    ],
)
def test_contradictory_or_impossible_modes_are_refused(
    args: list[str], fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapter import cli

    monkeypatch.setattr(cli, "in_cluster", lambda: False)
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 2
    assert fragment in result.stderr


def test_liveness_waits_for_the_first_lists_and_fails_when_the_loop_is_wedged(
    server: FakeApiServer,
) -> None:
    options = KubeOptions(leader_elect=False, metrics_port=0, metrics_host="127.0.0.1")
    scheduler = KubeScheduler(server.client(), options, Settings())
    ok, why = scheduler.alive()
    assert not ok and why.startswith("starting")
    runner = threading.Thread(target=scheduler.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: scheduler.alive()[0], what="alive once the loop runs")
    finally:
        scheduler.stop_event.set()
        runner.join(timeout=10)
    # The loop no longer goes round (here: stopped; in life: a call that never returns).
    # Within stall_s it is still alive; past it the kubelet is told to restart it.
    assert scheduler.alive()[0]
    scheduler._beat = time.monotonic() - scheduler.stall_s() - 1
    ok, why = scheduler.alive()
    assert not ok and why.startswith("wedged")


def test_each_gang_admission_wait_is_observed_once_by_queue(server: FakeApiServer) -> None:
    apply(server, manifests(EXAMPLES / "kube-batch-seed.yaml"))
    options = KubeOptions(leader_elect=False, metrics_port=0, metrics_host="127.0.0.1")
    scheduler = KubeScheduler(server.client(), options, Settings())
    scheduler.cluster.start(sync_timeout_s=10)
    try:
        wait_until(lambda: len(scheduler.cluster.cache.of(PODS)) == 3, what="the seed's pods")
        first = scheduler.cycle()
        assert first.admitted() == ["default/mygroup"]
        registry = scheduler.metrics.registry
        count = registry.get_sample_value("gangsat_gang_wait_seconds_count", {"queue": "myqueue"})
        assert count == 1
        running = registry.get_sample_value(
            "gangsat_gangs", {"state": "Running", "reason": "", "queue": "myqueue"}
        )
        assert running == 1
        memories = ("pods left to roll back", "gangs kept for binds in doubt")
        for memory in (*memories, "evictions to send again"):
            size = registry.get_sample_value("gangsat_remembered_objects", {"memory": memory})
            assert size == 0
        wait_until(lambda: len(bound_pods(server)) == 3, what="binds seen")
        scheduler.cycle()
        again = registry.get_sample_value("gangsat_gang_wait_seconds_count", {"queue": "myqueue"})
        assert again == 1  # not observed a second time
    finally:
        scheduler.cluster.stop()


def test_leader_elect_false_as_kubernetes_components_take_it(
    server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapter import cli

    apply(server, manifests(EXAMPLES / "kube-batch-seed.yaml"))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    argv = ["gangsat", "run", "--kubeconfig", str(kubeconfig), "--leader-elect=false"]
    argv += ["--cycles", "1", "--metrics-port", "0", "--log-level", "debug"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 0
    assert set(bound_pods(server)) == {f"default/myjob-{i}" for i in range(3)}
    assert not any(r.resource == "leases" for r in server.requests)  # no election
    assert cli.kube_style(["--leader-elect=true", "--leader-elect=False", "x=false"]) == [
        "--leader-elect",
        "--no-leader-elect",
        "x=false",
    ]


def test_version_flag() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("gangsat ")


def test_scheduler_name_on_run_picks_whose_pods_are_scheduled(
    server: FakeApiServer, tmp_path: Path
) -> None:
    objects = manifests(EXAMPLES / "kube-batch-seed.yaml")
    for obj in objects:
        if obj.get("kind") == "Job":
            obj["spec"]["template"]["spec"]["schedulerName"] = "batch-team"
    apply(server, objects)
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    run = ["run", "--kubeconfig", kubeconfig, "--no-leader-elect", "--cycles", "1"]
    run += ["--metrics-port", "0"]
    empty = CliRunner().invoke(app, [*run, "--scheduler-name", ""])
    assert empty.exit_code == 2 and "cannot be empty" in empty.stderr
    assert CliRunner().invoke(app, run).exit_code == 0
    assert bound_pods(server) == {}  # not ours by default
    result = CliRunner().invoke(app, [*run, "--scheduler-name", "batch-team"])
    assert result.exit_code == 0, result.output
    assert set(bound_pods(server)) == {f"default/myjob-{i}" for i in range(3)}


def test_json_logs_are_one_object_a_line_with_named_fields() -> None:
    import io
    import json
    from datetime import datetime, timedelta

    from adapter.kube.launch import log_handler

    handler = log_handler("json")
    stream = io.StringIO()
    handler.setStream(stream)
    record = logging.LogRecord(
        "adapter.kube.run", logging.INFO, "run.py", 1, "cycle %d", (3,), None
    )
    handler.handle(record)
    line = json.loads(stream.getvalue())
    assert line["level"] == "INFO" and line["logger"] == "adapter.kube.run"
    assert line["message"] == "cycle 3"
    assert datetime.fromisoformat(line["ts"]).utcoffset() == timedelta(0)
    text = log_handler("text")
    text.setStream(stream := io.StringIO())
    text.handle(record)
    assert stream.getvalue().rstrip().endswith("INFO adapter.kube.run: cycle 3")


def test_a_status_write_that_failed_is_redone_without_waiting_for_a_change(
    server: FakeApiServer,
) -> None:
    # The PodGroup's status write fails once (503); nothing else changes afterwards (the
    # echo of gangsat's own binds starts no cycle), yet the write is redone well before
    # the 30 s resync.
    apply(server, [node("n1", cpu="8"), podgroup("g", 2), *gang_pods("g", 2)])
    server.fail("PATCH", r"/podgroups/g/status$", 503)
    scheduler = replica(server, "a", leader_elect=False, write_retry_s=0.2)
    thread = start(scheduler)
    try:
        wait_until(lambda: len(bound_pods(server)) == 2, what="the gang bound")

        def phase() -> Any:
            obj = server.get("scheduling.sigs.dev", "podgroups", "default", "g")
            return ((obj or {}).get("status") or {}).get("phase")

        wait_until(lambda: phase() == "Running", timeout_s=5, what="the status redone")
        writes = [r for r in server.requests if r.path.endswith("/podgroups/g/status")]
        assert len(writes) >= 2  # the one refused, and the one redone
    finally:
        scheduler.stop_event.set()
        thread.join(timeout=10)


def test_a_kubeconfig_that_cannot_be_loaded_is_a_logged_error_and_exit_2(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: [}\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["run", "--kubeconfig", str(broken), "--no-leader-elect", "--cycles", "1"]
    )
    assert result.exit_code == 2
    # A log record (JSON under --log-format json), not a line printed beside the logs.
    assert "cannot load the cluster's client configuration" in caplog.text


def test_a_status_write_that_keeps_failing_is_retried_less_and_less_often(
    server: FakeApiServer,
) -> None:
    apply(server, [node("n1", cpu="8"), podgroup("g", 2), *gang_pods("g", 2)])
    server.fail("PATCH", r"/podgroups/g/status$", 403, times=10_000)  # RBAC: never heals
    scheduler = replica(server, "a", leader_elect=False, write_retry_s=0.2)
    thread = start(scheduler)
    try:
        wait_until(lambda: len(bound_pods(server)) == 2, what="the gang bound")
        time.sleep(3.0)
    finally:
        scheduler.stop_event.set()
        thread.join(timeout=10)
    writes = [r for r in server.requests if r.path.endswith("/podgroups/g/status")]
    # Retried (0.2 s, then 0.4, 0.8, 1.6 s apart), not every 0.2 s (about 15 in 3 s).
    assert 2 <= len(writes) <= 8, len(writes)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--lease-name", ""),
        ("--lease-name", "Gangsat_1"),
        ("--lease-namespace", "a b"),
        ("--lease-namespace", "gangsat.system"),  # a label: no dots, unlike a Lease's name
        ("--lease-namespace", "a" * 64),
    ],
)
def test_a_lease_name_the_api_server_would_refuse_is_refused_at_once(
    tmp_path: Path, flag: str, value: str
) -> None:
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(tmp_path / "k"), flag, value])
    assert result.exit_code == 2
    assert "DNS-1123" in result.output


def test_kube_scheduler_boolean_spellings() -> None:
    from adapter import cli

    given = [f"--leader-elect={v}" for v in ("1", "t", "TRUE", "0", "f", "False")]
    assert cli.kube_style(given) == ["--leader-elect"] * 3 + ["--no-leader-elect"] * 3
    assert cli.kube_style(["--leader-elect=yes"]) == ["--leader-elect=yes"]  # Go refuses it too


def test_a_metrics_port_in_use_is_a_clear_error_not_a_traceback(
    server: FakeApiServer, tmp_path: Path
) -> None:
    import socket

    from adapter import cli

    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["run", "--kubeconfig", str(kubeconfig), "--no-leader-elect"]
        result = CliRunner().invoke(cli.app, [*args, "--metrics-port", str(port)])
    assert result.exit_code == 2, result.output
    assert CliRunner().invoke(cli.app, [*args, "--metrics-port", "70000"]).exit_code == 2


def test_a_running_scheduler_watches_a_dialect_installed_after_it_started() -> None:
    with FakeApiServer() as fake:
        options = KubeOptions(
            leader_elect=False, metrics_port=0, metrics_host="127.0.0.1", rediscover_s=0.1
        )
        scheduler = KubeScheduler(fake.client(), options, QUICK)
        thread = start(scheduler)
        try:
            apply(fake, [node("n1", cpu="4")])
            for r in DIALECTS:  # kube-batch's CRDs, installed after gangsat started
                if r.group == "scheduling.sigs.dev":
                    fake.add_resource(r.group, r.version, r.plural, r.kind, r.namespaced)
            apply(fake, [podgroup("late", 2), *gang_pods("late", 2)])
            wait_until(lambda: len(bound_pods(fake)) == 2, what="the late dialect's gang bound")
        finally:
            scheduler.stop_event.set()
            thread.join(timeout=30)


def test_a_cycle_runs_without_automatic_collections_and_they_resume_after(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(server, manifests(EXAMPLES / "kube-batch-seed.yaml"))
    options = KubeOptions(
        leader_elect=False, metrics_port=0, metrics_host="127.0.0.1", max_cycles=1
    )
    scheduler = KubeScheduler(server.client(), options, Settings())
    scheduler.cluster.start(sync_timeout_s=10)
    collecting: list[bool] = []
    real = loop.run_cycle

    def observed(*args: Any, **kwargs: Any) -> Any:
        collecting.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "run_cycle", observed)
    heap = scheduler.heap
    frozen: list[tuple[int, int]] = []  # objects frozen before and after a snapshot
    real_snapshot = scheduler.cluster.snapshot

    def snapshot(again: bool = False) -> Any:
        before = gc.get_freeze_count()
        state = real_snapshot(again)
        frozen.append((before, gc.get_freeze_count()))
        return state

    monkeypatch.setattr(scheduler.cluster, "snapshot", snapshot)
    try:
        wait_until(lambda: len(scheduler.cluster.cache.of(PODS)) == 3, what="the seed's pods")
        assert gc.isenabled()
        scheduler._loop()
        assert scheduler.last is not None and scheduler.last.admitted() == ["default/mygroup"]
        assert collecting == [False]
        # The snapshot frozen as converted: the settle after the cycle does not walk it
        assert len(frozen) == 1 and frozen[0][1] > frozen[0][0]
        # What the cycle left collected before the collector is back on, not walked twice
        assert heap.young_collections + heap.full_collections == 1
        assert gc.isenabled()

        def failing(*args: Any, **kwargs: Any) -> Any:
            scheduler.stop_event.set()
            raise RuntimeError("a bug in the loop")

        monkeypatch.setattr(run, "run_cycle", failing)
        scheduler._loop()  # logged, not raised
        assert heap.young_collections + heap.full_collections == 2
        assert gc.isenabled()  # a cycle that fails leaves the collector on
    finally:
        scheduler.cluster.stop()


def test_a_deployment_marks_and_recovers_under_its_own_scheduler_names(
    server: FakeApiServer,
) -> None:
    # Two gangsat deployments in one cluster: each leader's marks name its scheduler
    # names, and a new leader finishes only its own deployment's (and unnamed) ones.
    options = KubeOptions(leader_elect=False, metrics_port=0, metrics_host="127.0.0.1")
    settings = Settings(scheduler_names=["gangsat-gpu", "gangsat"])
    scheduler = KubeScheduler(server.client(), options, settings)
    assert scheduler.holds.author == "gangsat,gangsat-gpu"
    assert scheduler.cluster.evictor.author == "gangsat,gangsat-gpu"
