"""Host ports, as kube-scheduler's NodePorts filter checks them: a pod goes to no node
where a pod runs that asks for one of its host ports (the same protocol and port, on the
same host IP or either on every one, ``0.0.0.0``). MPI and NCCL jobs on the host network
ask for them (with ``hostNetwork``, each container port is a host port as well); placed
together, the kubelet refuses all but one (a gang broken after binding).

The ports a pod asks for (``host_ports``: of its containers and sidecars, init
containers with ``restartPolicy: Always``, which run beside them; the others run to
completion first, and NodePorts does not read them) are read with the pod
(``pods.pod_of_object``: once per pod, not each cycle), into ``Pod.host_ports``. Then,
per pending pod (``keep_ports``):

- against the bound pods (leaving ones still holding theirs): the pod is held off their
  nodes (a ``NodeRule`` on ``metadata.name``);
- among the pending pods: those asking for one protocol and port are kept one a node
  (``Pod.apart``: a group per set of pods asking for the same ports, named
  ``solver.model.APART_PORT``, the lowest protocol and port, and ``+`` how many more),
  whatever their host IPs (two pods on different IPs could share a node: at worst a wait
  kube-scheduler would not make).

A port the API server would refuse (not an integer in 1..65535, an unknown protocol) is
a finding: the pod is not scheduled, and its gang waits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from adapter.kube.fields import BadObject, mappings
from solver.model import APART_PORT, Node, Pod
from solver.predicates import PORTS_CONFLICT, held_to
from solver.scheduling_terms import (
    NODE_NAME_FIELD,
    NodeRule,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)

ANY_IP = "0.0.0.0"
PROTOCOLS = ("TCP", "UDP", "SCTP")
Port = tuple[str, str, int]  # host IP, protocol, port


def keep_ports(pods: dict[str, Pod], nodes: Mapping[str, Node]) -> None:
    """Hold the pending pods of ``pods`` that ask for host ports off the nodes whose bound
    pods hold them, and keep those asking for one port apart (see the module)."""
    asking = [p for p in pods.values() if p.host_ports and p.node_name is None]
    if not asking:
        return
    # Per protocol and port, the host IPs each node's bound pods hold it on.
    held: dict[tuple[str, int], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for pod in pods.values():
        if pod.host_ports and (node := pod.node_name) is not None and node in nodes:
            for ip, protocol, port in pod.host_ports:
                held[protocol, port][node].add(ip)
    # Made once per set of ports (a gang's pods share one): per pod, 4,000 pods each
    # reading 4,000 nodes holding its port took 4.6 s.
    rules: dict[tuple[Port, ...], tuple[NodeRule, ...]] = {}
    askers: dict[tuple[str, int], list[str]] = defaultdict(list)  # of each protocol, port
    for pod in asking:
        if pod.host_ports not in rules:
            rules[pod.host_ports] = _held_off(pod.host_ports, held)
        pods[pod.name] = held_to(pods[pod.name], rules[pod.host_ports])
        for protocol, port in {(protocol, port) for _, protocol, port in pod.host_ports}:
            askers[protocol, port].append(pod.name)
    # One group per set of pods asking for ports: a host-network pod of 40 container
    # ports made 40 groups, more than a cycle models (``apart.MAX_GROUPS``), and waited.
    ports_of: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for protocol_port, asked_by in askers.items():
        if len(asked_by) > 1:  # (alone, no other pending pod asks for it)
            ports_of[tuple(sorted(asked_by))].append(protocol_port)
    for together, ports in ports_of.items():
        protocol, port = min(ports)
        more = f"+{len(ports) - 1}" if len(ports) > 1 else ""
        group = f"{APART_PORT}{protocol}/{port}{more}"
        for name in together:
            pods[name] = pods[name].model_copy(
                update={"apart": tuple(sorted({*pods[name].apart, group}))}
            )


def _held_off(
    wanted: tuple[Port, ...], held: Mapping[tuple[str, int], Mapping[str, set[str]]]
) -> tuple[NodeRule, ...]:
    """The rule off the nodes whose bound pods hold one of the ports ``wanted``, if any."""
    taken = sorted(
        {
            node
            for ip, protocol, port in wanted
            for node, ips in held.get((protocol, port), {}).items()
            if ip == ANY_IP or ANY_IP in ips or ip in ips
        }
    )
    if not taken:
        return ()
    off = NodeSelectorRequirement(key=NODE_NAME_FIELD, operator="NotIn", values=tuple(taken))
    return (NodeRule(reason=PORTS_CONFLICT, terms=(NodeSelectorTerm(match_fields=(off,)),)),)


def host_ports(spec: Any, strict: bool = True) -> set[Port]:
    """The host ports a pod ``spec`` asks for (see the module); ``BadObject`` for one the
    API server would refuse, or, not ``strict`` (a bound pod's, which runs as it is),
    that one left out."""
    if not isinstance(spec, Mapping):
        return set()
    on_host = spec.get("hostNetwork") is True
    sidecars = [
        c for c in mappings(spec.get("initContainers")) if c.get("restartPolicy") == "Always"
    ]
    out: set[Port] = set()
    for container in [*mappings(spec.get("containers")), *sidecars]:
        for p in mappings(container.get("ports")):
            # With hostNetwork, kube-apiserver sets a container port's host port to it.
            port = p.get("hostPort") or (p.get("containerPort") if on_host else None)
            if port is None:
                continue
            protocol, ip = p.get("protocol") or "TCP", p.get("hostIP") or ANY_IP
            why = None
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                why = f"asks for hostPort {port!r}, which is no port in 1..65535"
            elif protocol not in PROTOCOLS or not isinstance(ip, str):
                why = f"asks for hostPort {port} over {protocol!r} on {ip!r}"
            if why is None:
                out.add((ip, protocol, port))
            elif strict:
                raise BadObject(why)
    return out
