"""A pending pod's PersistentVolumeClaims, as kube-scheduler's volume plugins read them.

Training jobs mount datasets and checkpoints through claims; most are bound to volumes
any node reaches (NFS, object-store CSI drivers: no node affinity), some to volumes one
zone or one node reaches. So a claim is no reason to refuse a pod: where its volume is
bound, the pod is held to the volume's node affinity (``spec.nodeAffinity.required``)
and zone besides its own (``solver.scheduling_terms.NodeRule``), and goes wherever all
allow. A claim gangsat cannot place the pod for
makes the pod wait, with the reason, as kube-scheduler's ``VolumeBinding`` and
``VolumeRestrictions`` filters do:

- the claim does not exist (yet), or is being deleted;
- a generic ephemeral volume's claim (``<pod>-<volume>``) was made for another pod;
- the claim is not bound and nothing a bind does will bind it: of an ``Immediate``
  StorageClass (the PV controller binds it: waited for), of none gangsat knows, or of a
  ``WaitForFirstConsumer`` class without a provisioner (``kubernetes.io/no-provisioner``:
  local volumes, which kube-scheduler binds to pre-made volumes and gangsat does not);
- its volume is not known (yet);
- a ``ReadWriteOncePod`` claim that a bound pod uses (of pending pods sharing one, the
  first by name is placed, the others wait for it).

A claim of a ``WaitForFirstConsumer`` class with a provisioner, unbound (the default
class of most clouds' clusters: EKS's gp2/gp3, GKE's, AKS's), is made where its pod
goes: the pod may go to the nodes the class's ``allowedTopologies`` allow (every node,
without them; the class named by the beta annotation first). Once the claim names its
node (``volume.kubernetes.io/selected-node``, which a decision writes before any bind of
the gang: ``adapter.kube.provisioning``), the pod goes to that node only, and is gated
(``Pod.gates``: not bound) until the claim is bound, as kube-scheduler's VolumeBinding
waits in its PreBind; then its volume says where it may go, as for any bound claim. Not
modelled: an unbound
pre-made volume of such a class that would match the claim (kube-scheduler binds it
instead of provisioning one), and the class's capacity per node
(``CSIStorageCapacity``).

A volume is reached where its ``spec.nodeAffinity.required`` holds, as kube-scheduler
reads it: against the node's labels only (its ``matchFields`` are skipped there, so a
term of them alone matches every node, and the kubelet mounts alike), and, for volumes
labelled with a zone or region (``topology.kubernetes.io/zone``, the older
``failure-domain.beta.kubernetes.io/zone`` that in-tree and restored volumes carry;
``__`` joins several), where the node's label of that key holds one of the values, or
on a node with no zone or region label at all (``VolumeZone``).

Not modelled (kube-scheduler checks it, gangsat does not): per-node limits on attached
volumes (``NodeVolumeLimits``); a ``ReadWriteOnce`` volume is, as in kube-scheduler,
not kept off a second node (its attach would fail there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import product
from typing import Any

from pydantic import ValidationError

from adapter.cluster import WAITING_FOR_VOLUMES
from adapter.kube.fields import BadObject, Obj, listed, mappings
from adapter.kube.pods import node_selector_terms
from adapter.kube.reading import Finding
from solver.model import Pod
from solver.predicates import NO_VOLUME_TO_BIND, NO_VOLUME_ZONE, VOLUME_CONFLICT, held_to
from solver.scheduling_terms import (
    NODE_NAME_FIELD,
    NodeRule,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)

RWOP = "ReadWriteOncePod"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
FIRST_CONSUMER = "WaitForFirstConsumer"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
UNMADE = "VolumeNotProvisioned"  # the Event's reason on a bound pod whose volume is never made
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_KEYS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
GA_OF = {BETA_ZONE: ZONE, BETA_REGION: REGION}


class Waits(Exception):
    """Why a pod cannot be placed until its claims change."""


def claim_names(pod_name: str, spec: Obj) -> list[tuple[str, bool]]:
    """The claims a pod's volumes name, in its namespace, each with whether it is a
    generic ephemeral volume's (``<pod name>-<volume name>``, made by its controller)."""
    names = []
    for volume in mappings(spec.get("volumes")):
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, Mapping):
            names.append((str(claim.get("claimName") or ""), False))
        elif volume.get("ephemeral") is not None:
            names.append((f"{pod_name}-{volume.get('name')}", True))
    return names


class Claims:
    """The claims and volumes of a snapshot, and which bound pods use each claim."""

    def __init__(self, objects: Iterable[Obj]) -> None:
        self.claims: dict[str, Obj] = {}  # namespace/name -> PersistentVolumeClaim
        self.volumes: dict[str, Obj] = {}  # name -> PersistentVolume
        self.classes: dict[str, Obj] = {}  # name -> StorageClass
        self.users: dict[str, set[str]] = {}  # namespace/claim -> bound pods using it
        # Pending pod -> its claims a decision placing it gives its node (``provisioning``).
        self.selecting: dict[str, tuple[str, ...]] = {}
        for o in objects:
            metadata = o.get("metadata")
            if not isinstance(metadata, Mapping):
                continue
            if o.get("kind") == "PersistentVolumeClaim":
                namespace = metadata.get("namespace") or "default"
                self.claims[f"{namespace}/{metadata.get('name')}"] = o
            elif o.get("kind") == "PersistentVolume":
                self.volumes[str(metadata.get("name"))] = o
            elif o.get("kind") == "StorageClass":
                self.classes[str(metadata.get("name"))] = o
        # Whether a bound pod's claims must be read: a ReadWriteOncePod claim's users keep
        # other pods off it, and a claim made where its pod goes may be left unmade.
        self.exclusive = any(RWOP in _modes(c) for c in self.claims.values())
        self.made_where_placed = any(
            c.get("volumeBindingMode") == FIRST_CONSUMER for c in self.classes.values()
        )
        self.unmade: list[Finding] = []  # bound pods whose volume is never made, and why

    def use(
        self, namespace: str, pod_name: str, spec: Obj, bound: bool, pod: Pod | None = None
    ) -> list[tuple[str, bool]]:
        """Record that pod ``pod_name`` (not finished) uses its claims; returns them. Of a
        bound ``pod``, a claim whose volume is made where its pod goes that names no node
        any more is noted (``unmade``)."""
        names = claim_names(pod_name, spec)
        if bound:
            for name, _ in names:
                self.users.setdefault(f"{namespace}/{name}", set()).add(f"{namespace}/{pod_name}")
            if pod is not None and self.made_where_placed and not pod.terminating:
                self._unmade(pod, names)
        return names

    def _unmade(self, pod: Pod, names: list[tuple[str, bool]]) -> None:
        """Its provisioner could not make the volume on the pod's node and took the node
        back (removed ``SELECTED_NODE``), after the pod was bound there: the pod waits for
        good, where kube-scheduler, which binds once the claim is, places it again."""
        for name, _ in names:
            claim = self.claims.get(f"{pod.namespace}/{name}")
            if claim is None or (claim.get("spec") or {}).get("volumeName"):
                continue
            if ((claim.get("metadata") or {}).get("annotations") or {}).get(SELECTED_NODE):
                continue
            if not _made_by_a_provisioner(self._class_of(claim)[1]):
                continue  # not made where its pod goes: waited for as any unbound claim
            why = (
                f"PersistentVolumeClaim {name!r} names no node any more: its provisioner "
                f"could not make the volume on node {pod.node_name}, where the pod is bound "
                "and waits for it; delete the pod to have it placed afresh"
            )
            self.unmade.append(Finding(kind="Pod", name=pod.name, message=why, reason=UNMADE))
            return

    def one_at_a_time(self, placeable: Mapping[str, list[tuple[str, bool]]]) -> dict[str, str]:
        """Of the pending pods that ``placed`` let through (pod -> its claims), those that
        share a ReadWriteOncePod claim with another: all but the first by name wait for
        it (one pod may use the claim; the solver places a gang's pods at once, where
        kube-scheduler would bind one and refuse the next). Pod -> why it waits."""
        sharing: dict[str, list[str]] = {}
        for pod, names in placeable.items():
            namespace = pod.partition("/")[0]
            for name, _ in names:
                key = f"{namespace}/{name}"
                claim = self.claims.get(key)
                if claim is not None and RWOP in _modes(claim):
                    sharing.setdefault(key, []).append(pod)
        waits: dict[str, str] = {}
        for key, pods in sharing.items():
            first, *rest = sorted(pods)
            for pod in rest:
                name = key.partition("/")[2]
                waits.setdefault(
                    pod, f"waits: PersistentVolumeClaim {name!r} is {RWOP}, and {first} goes first"
                )
        return waits

    def placed(self, pod: Pod, names: list[tuple[str, bool]], uid: str | None) -> Pod:
        """``pod`` held to what the volumes its claims ``names`` are bound to ask of a
        node (``NodeRule``s, each with kube-scheduler's reason for a node that fails it);
        ``Waits`` if one of them keeps it from every node now, ``BadObject`` if a claim or
        volume is malformed. ``uid``: the pod's, which a generic ephemeral volume's claim
        must be controlled by."""
        rules: list[NodeRule] = []
        selecting: list[str] = []
        making: list[str] = []
        for name, ephemeral in names:
            try:
                rules += self._rules(pod, name, ephemeral, uid, selecting, making)
            except (KeyError, TypeError, AttributeError, ValueError, ValidationError) as e:
                raise BadObject(f"PersistentVolumeClaim {name!r} or its volume: {e!r}") from e
        if selecting:
            self.selecting[pod.name] = tuple(selecting)
        if making:
            # Not bound before its volumes are (``WAITING_FOR_VOLUMES``), as a gate holds a pod;
            # the room a decision chose for it is held meanwhile (``adapter.holds``).
            made = ", ".join(making)
            gate = f"{WAITING_FOR_VOLUMES}: PersistentVolumeClaim {made} being made on its node"
            pod = pod.model_copy(update={"gates": (*pod.gates, gate)})
        return held_to(pod, rules)  # volumes of one zone ask the same: one rule

    def _rules(
        self,
        pod: Pod,
        name: str,
        ephemeral: bool,
        uid: str | None,
        selecting: list[str],
        making: list[str],
    ) -> list[NodeRule]:
        """What the claim's volume asks of a node: its zone (VolumeZone) and its node
        affinity (VolumeBinding), each a rule of ORed terms; of a claim whose volume is
        made where its pod goes, where it can be made (its key into ``selecting`` where
        a decision placing the pod is to name the node)."""
        key = f"{pod.namespace}/{name}"
        claim = self.claims.get(key)
        what = f"PersistentVolumeClaim {name!r}"
        if claim is None:
            raise Waits(f"waits for {what}: not found")
        metadata = claim.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            raise Waits(f"waits: {what} is being deleted")
        if ephemeral and not _controlled_by(claim, uid):
            raise Waits(f"waits: {what} was not made for this pod's ephemeral volume")
        if RWOP in _modes(claim) and self.users.get(key, set()) - {pod.name}:
            raise Waits(f"waits: {what} is {RWOP} and a running pod uses it")
        spec = claim.get("spec") or {}
        volume_name = spec.get("volumeName")
        phase = (claim.get("status") or {}).get("phase")
        if not volume_name:
            rules = self._made_where_placed(claim, what)
            if (metadata.get("annotations") or {}).get(SELECTED_NODE):
                making.append(name)
            else:
                selecting.append(key)
            return rules
        if phase not in (None, "Bound"):
            raise Waits(f"waits for {what} to be bound (it is {phase})")
        volume = self.volumes.get(str(volume_name))
        if volume is None:
            raise Waits(f"waits for PersistentVolume {volume_name!r} of {what}: not found")
        asked = [NodeRule(reason=NO_VOLUME_ZONE, terms=terms) for terms in _zones(volume)]
        required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")
        if required:
            terms = tuple(_by_labels(t) for t in node_selector_terms(required))
            if not any(t.match_expressions or t.match_fields for t in terms):
                raise Waits(f"PersistentVolume {volume_name!r} of {what} allows no node")
            asked.append(NodeRule(reason=VOLUME_CONFLICT, terms=terms))
        return asked

    def _made_where_placed(self, claim: Obj, what: str) -> list[NodeRule]:
        """Where an unbound claim's volume can be made once its pod is placed: the node it
        names (``SELECTED_NODE``: its provisioner is making it there) and where its
        StorageClass's ``allowedTopologies`` allow (kube-scheduler's VolumeBinding);
        ``Waits`` if no bind makes it."""
        class_name, storage = self._class_of(claim)
        if storage is None or storage.get("volumeBindingMode") != FIRST_CONSUMER:
            if storage is not None:
                how = f"StorageClass {class_name!r} binds it at once, not where its pod goes"
            elif class_name:
                how = f"StorageClass {class_name!r} is not known"
            else:
                how = "it has no StorageClass: an admin binds it"
            raise Waits(f"waits for {what} to be bound ({how})")
        if not _made_by_a_provisioner(storage):
            raise Waits(
                f"waits for {what} to be bound: StorageClass {class_name!r} has no "
                "provisioner, and gangsat does not bind claims to pre-made volumes"
            )
        rules = []
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        if chosen := annotations.get(SELECTED_NODE):
            # Its provisioner is making the volume there: the pod goes there only, and
            # not before the claim is bound (``placed``).
            only = _requirement(NODE_NAME_FIELD, "In", (str(chosen),))
            term = NodeSelectorTerm(match_fields=(only,))
            rules.append(NodeRule(reason=NO_VOLUME_TO_BIND, terms=(term,)))
        allowed = listed(storage.get("allowedTopologies"))
        terms = []
        for topology in mappings(allowed):
            asked = tuple(
                _requirement(str(e["key"]), "In", tuple(str(v) for v in listed(e.get("values"))))
                for e in mappings(topology.get("matchLabelExpressions"))
            )
            if asked:
                terms.append(NodeSelectorTerm(match_expressions=asked))
        if terms:
            rules.append(NodeRule(reason=NO_VOLUME_TO_BIND, terms=tuple(terms)))
        elif allowed:
            raise Waits(f"StorageClass {class_name!r} of {what} allows no topology")
        return rules

    def _class_of(self, claim: Obj) -> tuple[Any, Obj | None]:
        """A claim's StorageClass name, and the class if known. The beta annotation first,
        as kube-scheduler and the provisioners read it: a claim made with it alone keeps
        no storageClassName."""
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        name = annotations.get(BETA_CLASS) or (claim.get("spec") or {}).get("storageClassName")
        return name, self.classes.get(str(name)) if name else None


def _made_by_a_provisioner(storage: Obj | None) -> bool:
    """Whether a class's unbound claims are made where their pod goes, by a provisioner
    (``WaitForFirstConsumer``, and not ``kubernetes.io/no-provisioner``)."""
    return (
        storage is not None
        and storage.get("volumeBindingMode") == FIRST_CONSUMER
        and storage.get("provisioner") != NO_PROVISIONER
    )


def _zones(volume: Obj) -> list[tuple[NodeSelectorTerm, ...]]:
    """A volume's zone and region labels, as kube-scheduler's VolumeZone reads them: a
    node without any zone or region label passes; one with them must hold, for each of
    the volume's, a value it lists (a beta key on the volume is read from the node's GA
    key where the node lacks the beta one)."""
    labels = (volume.get("metadata") or {}).get("labels") or {}
    asked: list[tuple[str, tuple[str, ...]]] = []
    for key in TOPOLOGY_KEYS:
        if key in labels:
            pieces = [v.strip() for v in str(labels[key]).split("__")]
            # A value VolumeZone cannot read (empty, or an empty piece) it ignores, and so
            # does gangsat: read, it kept the pod off every zoned node.
            if all(pieces):
                asked.append((key, tuple(sorted(set(pieces)))))
    if not asked:
        return []
    unlabelled = NodeSelectorTerm(
        match_expressions=tuple(_requirement(k, "DoesNotExist") for k in TOPOLOGY_KEYS)
    )
    # Per label of the volume, the ways a labelled node holds it; one of each, ANDed.
    ways = []
    for key, values in asked:
        own: list[tuple[NodeSelectorRequirement, ...]] = [(_requirement(key, "In", values),)]
        if key in GA_OF:
            own.append((_requirement(key, "DoesNotExist"), _requirement(GA_OF[key], "In", values)))
        ways.append(own)
    labelled = tuple(
        NodeSelectorTerm(match_expressions=tuple(r for way in combination for r in way))
        for combination in product(*ways)
    )
    return [(unlabelled, *labelled)]


def _by_labels(term: NodeSelectorTerm) -> NodeSelectorTerm:
    """A volume's term as kube-scheduler matches it: against a node made of the labels
    alone (``CheckNodeAffinity``), whose fields are empty, and a term's ``matchFields``
    are skipped against empty fields (component-helpers' ``nodeSelectorTerm.match``):
    the term is its expressions, and one of fields only matches every node."""
    if not term.match_fields:
        return term
    # Every node has a name: NotIn "" holds on each, where no requirement left would
    # make a term that matches no node.
    anywhere = _requirement(NODE_NAME_FIELD, "NotIn", ("",))
    return NodeSelectorTerm(match_expressions=term.match_expressions, match_fields=(anywhere,))


def _requirement(key: str, operator: str, values: tuple[str, ...] = ()) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


def _controlled_by(claim: Obj, uid: str | None) -> bool:
    """Whether ``claim``'s controller is the pod of ``uid`` (a pod read from a manifest,
    without one: any pod)."""
    for ref in mappings((claim.get("metadata") or {}).get("ownerReferences")):
        if ref.get("controller") and ref.get("kind") == "Pod":
            return uid is None or ref.get("uid") == uid
    return False


def _modes(claim: Obj) -> list[Any]:
    spec = claim.get("spec")
    return listed(spec.get("accessModes")) if isinstance(spec, Mapping) else []
