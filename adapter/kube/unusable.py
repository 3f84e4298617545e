"""Nodes kept in a snapshot that no new pod goes to: where the room is unknown.

A node is kept while the API server has it, even where gangsat cannot read what it has
free, because the pods bound there still run: they count as their gangs' members and
towards their queues' shares. Dropped, with the node, a gang running there read as
short of minMember (its PodGroup went from Running to Pending, a re-created member
waited for good as NotEnoughTasks) and its queue's share looked smaller than it is.
"""

from __future__ import annotations

from collections.abc import Collection

from adapter.kube.reading import Finding
from solver.model import PODS, Node, Resources

NO_ROOM = "no new pods here"


def out_of_service(name: str) -> Node:
    """A node whose own object cannot be read (its finding says why): no pod slot, not
    ready, so nothing is placed there and it counts towards no share or enqueue room."""
    return Node(name=name, allocatable=Resources({PODS: 0}), unschedulable=True, ready=False)


def closed(nodes: dict[str, Node], unknown_room: Collection[str], findings: list[Finding]) -> None:
    """Nodes with a bound pod whose requests cannot be read: what is free there is
    unknown, so no new pod goes there this cycle, whatever it tolerates (every pod takes
    a pod slot, and the node has none), nor does it count towards any queue's share or
    enqueue room (``Node.ready``)."""
    for name in sorted(unknown_room):
        room = {**nodes[name].allocatable.root, PODS: 0}
        update = {"allocatable": Resources(room), "ready": False}
        nodes[name] = nodes[name].model_copy(update=update)
        message = f"a pod bound here has requests gangsat cannot read: {NO_ROOM}"
        findings.append(Finding(kind="Node", name=name, message=message))
