"""Which stranded pods a cycle deletes again (``rollbacks.Stranded``)."""

from __future__ import annotations

from adapter.gangs import Gangs
from adapter.rollbacks import Stranded
from tests.builders import gang, node, pod, state


def test_only_pods_still_where_the_rollback_left_them_of_a_gang_still_short_are_due() -> None:
    """Gang g needs 4: g-0 and g-1 stayed bound on n1 after a rollback, g-2 was
    recreated (a namesake) and bound to n2, g-3 is being deleted after all."""
    s = state(
        nodes=[node("n1").cap(cpu=8), node("n2").cap(cpu=8)],
        pods=[
            pod("g-0").req(cpu=1).gang("g").on("n1"),
            pod("g-1").req(cpu=1).gang("g").on("n1"),
            pod("g-2").req(cpu=1).gang("g").on("n2"),
            pod("g-3").req(cpu=1).gang("g").on("n1").terminating(),
            pod("g-4").req(cpu=1).gang("g"),
        ],
        gangs=[gang("g", 4)],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.add(
        ["g-0", "g-1", "g-2", "g-3"], gangs, dict.fromkeys(["g-0", "g-1", "g-2", "g-3"], "n1")
    )
    # Three bound (g-0, g-1, the namesake g-2): short of 4, the rollback's two are due.
    assert stranded.due(s, gangs, bound=[]) == ["g-0", "g-1"]
    assert set(stranded.pods) == {"g-0", "g-1"}
    # A cycle that binds g-4 makes the gang whole: nothing is due, nothing remembered.
    assert stranded.due(s, gangs, bound=["g-4"]) == [] and not stranded
