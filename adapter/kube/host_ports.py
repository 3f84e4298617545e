"""Host ports, as kube-scheduler's NodePorts filter checks them: a pod goes to no node
where a pod runs that asks for one of its host ports (the same protocol and port, on the
same host IP or either on every one, ``0.0.0.0``). MPI and NCCL jobs on the host network
ask for them (with ``hostNetwork``, each container port is a host port as well); placed
together, the kubelet refuses all but one (a gang broken after binding).

The ports a pod asks for (``host_ports``: of its containers and sidecars, init
containers with ``restartPolicy: Always``, which run beside them; the others run to
completion first, and NodePorts does not read them) are read with the pod
(``pods.pod_of_object``: once per pod, not each cycle), into ``Pod.host_ports``. Then
(``keep_ports``):

- pending pods asking for one protocol and port are kept one a node (``Pod.apart``: a
  group per set of pods asking for the same ports, named ``solver.model.APART_PORT``,
  the lowest protocol and port, and ``+`` how many more), whatever their host IPs (two
  pods on different IPs could share a node: at worst a wait kube-scheduler would not
  make);
- the bound pods holding one of those ports on an IP every pod asking for it conflicts
  with (leaving ones still hold theirs) take their node's room of the group, as a
  running pod of the group does: a preemption that evicts one frees it, as
  kube-scheduler's would (held off by a node rule instead, a high-priority host-network
  gang waited behind low-priority holders). Where only some of them conflict (specific
  host IPs), those are held off its node by a rule, which no preemption lifts.

A port the API server would refuse (not an integer in 1..65535, an unknown protocol) is
a finding: the pod is not scheduled, and its gang waits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from adapter.kube.fields import BadObject, mappings
from solver.apart import joined
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
    """Keep the pending pods of ``pods`` that ask for one host port a node apart, from
    each other and from the bound pods that hold it (see the module)."""
    asking = [p for p in pods.values() if p.host_ports and p.node_name is None]
    if not asking:
        return
    # Of each protocol and port, the pending pods asking for it, and the IP each asks on.
    askers: dict[tuple[str, int], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for pod in asking:
        for ip, protocol, port in pod.host_ports:
            askers[protocol, port][pod.name].add(ip)
    # The bound pods holding a port on an IP every pending pod asking for it conflicts
    # with take their node's room of the group (a victim frees it); where only some do
    # (specific IPs), those are held off the node instead: in the group, a pod asking on
    # another IP would evict it for nothing.
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    held_off: dict[str, set[str]] = defaultdict(set)  # pending pod -> nodes
    hits: dict[Port, tuple[bool, list[str]]] = {}  # whether all conflict, else who does
    for pod in pods.values():
        if pod.host_ports and pod.node_name is not None and pod.node_name in nodes:
            for held in pod.host_ports:
                if held not in hits:  # (per port and IP: 4,000 holders x 4,000 askers)
                    hits[held] = _conflicting(held, askers.get(held[1:], {}))
                every, some = hits[held]
                if every:
                    holders[held[1:]].append(pod.name)
                for name in some:
                    held_off[name].add(pod.node_name)
    for name, taken in held_off.items():
        off = NodeSelectorRequirement(
            key=NODE_NAME_FIELD, operator="NotIn", values=tuple(sorted(taken))
        )
        rule = NodeRule(reason=PORTS_CONFLICT, terms=(NodeSelectorTerm(match_fields=(off,)),))
        pods[name] = held_to(pods[name], (rule,))
    # One group per set of pending pods asking for ports together: a host-network pod of
    # 40 container ports made 40 groups, more than a cycle models (``apart.MAX_GROUPS``).
    ports_of: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for protocol_port, asked_by in askers.items():
        if len(asked_by) > 1 or protocol_port in holders:  # (else nothing to keep from)
            ports_of[tuple(sorted(asked_by))].append(protocol_port)
    for together, ports in ports_of.items():
        protocol, port = min(ports)
        more = f"+{len(ports) - 1}" if len(ports) > 1 else ""
        group = f"{APART_PORT}{protocol}/{port}{more}"
        held_by = {name for p in ports for name in holders.get(p, ())}
        for name in {*together, *held_by}:
            pods[name] = joined(pods[name], group)


def _conflicting(held: Port, asked: Mapping[str, set[str]]) -> tuple[bool, list[str]]:
    """Whether a port ``held`` (IP, protocol, port) conflicts with every pending pod
    asking for it (``asked``: pod -> the IPs it asks on: the same IP, or either
    ``0.0.0.0``); if not, those it conflicts with."""
    ip = held[0]
    hit = [n for n, ips in asked.items() if ip == ANY_IP or ANY_IP in ips or ip in ips]
    return (True, []) if hit and len(hit) == len(asked) else (False, hit)


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
