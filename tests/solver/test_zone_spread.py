"""Topology spread over zones (``Pod.spreads``, ``solver.zone_spread``) on clusters small
enough to work the answer out by hand: a gang's pods are shared out so that every zone
that gets one ends at most maxSkew above the fewest, in the room there is, and the
validator refuses a decision that ends otherwise."""

from __future__ import annotations

from collections import Counter

import pytest

from solver.apart import TURN_S
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.predicates import SPREAD_CONFLICT
from solver.schedulers import SCHEDULERS, schedule
from solver.scheduling_terms import DomainSpread
from solver.together import held_in
from solver.validate import check
from solver.zone_spread import HOLD_FIRST, NOT_SPLIT, split
from tests.builders import gang, pod, state
from tests.solver.test_together import FAST, ZONE, zones


def spread(skew: int = 1, fewest_zero: bool = False, **counted: int) -> DomainSpread:
    return DomainSpread(
        group=f"job@{ZONE}#{skew}",
        key=ZONE,
        max_skew=skew,
        counted=tuple(sorted(counted.items())),
        fewest_zero=fewest_zero,
    )


def job(size: int, s: DomainSpread, min_member: int | None = None) -> dict[str, list[object]]:
    pods = [pod(f"job-{i}").req(cpu=1).gang("job").spread(s) for i in range(size)]
    return {"pods": pods, "gangs": [gang("job", min_member or size)]}


def per_zone(s: ClusterState, placements: dict[str, str]) -> Counter[str]:
    labels = {n.name: n.labels[ZONE] for n in s.nodes}
    return Counter(labels[n] for p, n in placements.items() if p.startswith("job-"))


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_a_gang_is_shared_out_evenly_over_the_zones(scheduler: str) -> None:
    s = state(nodes=zones(a=[4, 4], b=[4, 4], c=[4, 4]), **job(6, spread(a=0, b=0, c=0)))
    d = schedule(s, scheduler, FAST)
    assert check(s, d) == []
    assert per_zone(s, d.placements) == {"a": 2, "b": 2, "c": 2}  # (greedy's too: room)


def test_the_zones_with_the_fewest_get_the_pods() -> None:
    # Zone a counts 2 already: 4 more go 2 to b and 2 to c, none to a (3 - 0 > 1 at first).
    s = state(nodes=zones(a=[4, 4], b=[4, 4], c=[4, 4]), **job(4, spread(a=2, b=0, c=0)))
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert per_zone(s, d.placements) == {"b": 2, "c": 2}


def test_a_full_zone_holds_the_others_down_and_the_gang_waits() -> None:
    # Zone c has no room: it stays at 0, so a and b take one each at most, not 4.
    s = state(nodes=zones(a=[4, 4], b=[4, 4], c=[0]), **job(4, spread(a=0, b=0, c=0)))
    d = schedule(s, "cpsat", FAST)
    assert d.placements == {}
    assert check(s, d) == []
    held = split(s)
    assert {r.reason for p in held.pods for r in p.node_rules} == {SPREAD_CONFLICT}


def test_the_room_of_each_zone_is_read_at_a_larger_skew() -> None:
    # maxSkew 2, zone c holds one pod: 6 go 3 / 2 / 1 (a zone ends at most 2 above c).
    s = state(nodes=zones(a=[4], b=[4], c=[1]), **job(6, spread(skew=2, a=0, b=0, c=0)))
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert per_zone(s, d.placements) == {"a": 3, "b": 2, "c": 1}


def test_with_the_fewest_read_as_zero_each_zone_takes_skew_less_what_it_counts() -> None:
    zero = spread(skew=2, fewest_zero=True, a=1, b=1, c=1)
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(3, zero))
    assert per_zone(s, schedule(s, "cpsat", FAST).placements) == {"a": 1, "b": 1, "c": 1}
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(4, zero))
    assert schedule(s, "cpsat", FAST).placements == {}


def test_a_gang_that_may_run_without_some_pods_takes_what_no_subset_breaks() -> None:
    # Placed in part, an end state shared out as for a whole gang could break the spread
    # (a 2 / b 1 / c 1, c's left out: 2 - 0 > 1): each zone takes only what keeps it
    # within maxSkew of the fewest now (one each), and the fourth pod waits.
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(4, spread(a=0, b=0, c=0), min_member=2))
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert per_zone(s, d.placements) == {"a": 1, "b": 1, "c": 1}
    held = {p.name: {r.reason for r in p.node_rules} for p in split(s).pods}
    assert held["job-3"] == {SPREAD_CONFLICT}
    # Any two of them (its minimum) end within maxSkew too.
    assert check(s, decided({"job-0": "a-0", "job-1": "b-0"})) == []
    # Running where one zone already counts one, that zone takes none.
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(4, spread(a=1, b=0, c=0), min_member=2))
    assert per_zone(s, schedule(s, "cpsat", FAST).placements) == {"b": 1, "c": 1}


def test_a_zone_spread_only_some_of_a_gangs_pods_carry_is_still_all_or_nothing() -> None:
    # The launcher carries no spread: the workers' split holds with it placed anywhere.
    launcher = pod("launcher").req(cpu=1).gang("job")
    s = state(
        nodes=zones(a=[4], b=[4], c=[4]),
        pods=[*job(3, spread(a=0, b=0, c=0))["pods"], launcher],
        gangs=[gang("job", 4)],
    )
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert len(d.placements) == 4
    assert per_zone(s, d.placements) == {"a": 1, "b": 1, "c": 1}


def decided(placements: dict[str, str]) -> Decision:
    return Decision(scheduler="test", status=SolveStatus.GREEDY, placements=placements)


def test_the_validator_refuses_an_end_state_over_the_skew() -> None:
    s = state(nodes=zones(a=[4, 4], b=[4], c=[4]), **job(4, spread(a=0, b=0, c=0)))
    even = {"job-0": "a-0", "job-1": "a-1", "job-2": "b-0", "job-3": "c-0"}
    assert check(s, decided(even)) == []
    crowded = {"job-0": "a-0", "job-1": "a-1", "job-2": "a-0", "job-3": "b-0"}
    found = check(s, decided(crowded))
    assert {v.subject for v in found} == {"job-0", "job-1", "job-2"}
    assert all("maxSkew 1 above the fewest" in v.message for v in found)


def test_the_validator_counts_the_pods_a_spread_may_count_besides() -> None:
    # Zone a may count one more (a delete without an answer yet): 1 + 1 + 1 - 0 > 1.
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(3, spread(a=1, b=0, c=0)))
    extra = s.model_copy(
        update={
            "pods": tuple(
                p.model_copy(
                    update={"spreads": (p.spreads[0].model_copy(update={"extra": (("a", 1),)}),)}
                )
                for p in s.pods
            )
        }
    )
    placed = {"job-0": "a-0", "job-1": "b-0", "job-2": "c-0"}
    assert check(s, decided(placed)) == []
    assert [v.subject for v in check(extra, decided(placed))] == ["job-0"]


def test_a_pod_held_to_one_zone_is_shared_out_before_the_others() -> None:
    # job-4 can only go to zone a (its volume's zone): shared out first, by name after
    # the others it found a full at maxSkew 1 (a, b, c, a taken) and the gang waited.
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(5, spread(a=0, b=0, c=0)))
    pinned = s.pods[4].model_copy(
        update={"node_rules": (held_in(ZONE, ("a",), "node(s) had volume node affinity conflict"),)}
    )
    s = s.model_copy(update={"pods": (*s.pods[:4], pinned)})
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert d.placements["job-4"] == "a-0"
    assert sorted(per_zone(s, d.placements).values()) == [1, 2, 2]


def test_a_pod_of_no_podgroup_is_a_gang_of_its_own() -> None:
    lone = pod("web").req(cpu=1).spread(spread(a=1, b=0, c=1)).build()
    s = state(nodes=zones(a=[4], b=[4], c=[4]), pods=[lone])
    d = schedule(s, "cpsat", FAST)
    assert d.placements == {"web": "b-0"}


def test_while_a_holds_carriers_wait_the_pods_their_spread_counts_wait_too() -> None:
    # g's carrier is held on a-0 (bound once its victims are gone): h's carrier, which
    # g's spread counts, bound before it would move g's counts; it waits the hold. The
    # validator counts the held pod in its zone.
    one = spread(a=0, b=0).model_copy(update={"group": "both"})
    held = pod("g-0").req(cpu=1).gang("g").spread(one).on("a-0").build()
    carrier = pod("h-0").req(cpu=1).gang("h").spread(one).build()
    s = state(nodes=zones(a=[4], b=[4]), pods=[held, carrier], gangs=[gang("g", 1), gang("h", 1)])
    assert schedule(s, "cpsat", FAST).placements == {}
    assert {r.reason for p in split(s).pods for r in p.node_rules} == {HOLD_FIRST.reason}
    assert check(s, decided({"h-0": "a-0"})) != []
    assert check(s, decided({"h-0": "b-0"})) == []


def test_a_counted_pod_its_carriers_affinity_needs_first_is_not_left_out() -> None:
    # The workers keep together with their launcher (required pod affinity): it may have
    # to be scheduled first, so it cannot be left out of their counts; the gang waits,
    # told why, and the validator counts such a pod where it lands.
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(2, spread(a=0, b=0, c=0)))
    only = spread(a=0, b=0, c=0).model_copy(update={"carried": False})
    launcher = pod("job-launcher").req(cpu=1).gang("job").spread(only).together("l@zone")
    workers = [p.model_copy(update={"together": ("l@zone",)}) for p in s.pods]
    s = s.model_copy(
        update={"pods": (*workers, launcher.build()), "gangs": (gang("job", 3).build(),)}
    )
    assert schedule(s, "cpsat", FAST).placements == {}
    assert NOT_SPLIT.reason in {r.reason for p in split(s).pods for r in p.node_rules}
    crowded = {"job-0": "a-0", "job-1": "b-0", "job-launcher": "a-0"}
    found = check(s, decided(crowded))
    assert {v.subject for v in found if "topology spread" in v.message} == {"job-0"}


def test_the_validator_counts_a_counted_pod_that_carries_a_spread_of_its_own() -> None:
    # a's spread counts b's pod and b's counts a's (two groups): in either order the
    # second sees 2 - 0 > 1 in zone a.
    mine = spread(a=0, b=0, c=0).model_copy(update={"group": "mine"})
    theirs = spread(a=0, b=0, c=0).model_copy(update={"group": "theirs"})
    counted = {"carried": False}
    a = pod("a-0").req(cpu=1).gang("a").spread(mine, theirs.model_copy(update=counted))
    b = pod("b-0").req(cpu=1).gang("b").spread(theirs, mine.model_copy(update=counted))
    s = state(nodes=zones(a=[4], b=[4], c=[4]), pods=[a, b], gangs=[gang("a", 1), gang("b", 1)])
    assert {v.subject for v in check(s, decided({"a-0": "a-0", "b-0": "a-0"}))} == {"a-0", "b-0"}
    for t in range(8):
        turn = s.model_copy(update={"now_s": t * TURN_S})
        d = schedule(turn, "cpsat", FAST)
        assert check(turn, d) == [] and len(d.placements) == 1


def test_a_gang_that_never_places_takes_no_turn() -> None:
    # b (3 pods, minMember 4) never places; a, of the same selector, goes every turn.
    one = spread(a=0, b=0, c=0).model_copy(update={"group": "both"})
    a = [pod(f"a-{i}").req(cpu=1).gang("a").spread(one) for i in range(3)]
    b = [pod(f"b-{i}").req(cpu=1).gang("b").spread(one) for i in range(3)]
    s = state(nodes=zones(a=[4], b=[4], c=[4]), pods=[*a, *b], gangs=[gang("a", 3), gang("b", 4)])
    for t in range(8):
        turn = s.model_copy(update={"now_s": t * TURN_S})
        assert sorted(schedule(turn, "cpsat", FAST).placements) == ["a-0", "a-1", "a-2"]


def test_a_launcher_goes_after_the_carriers_even_to_their_zone() -> None:
    # Only zone b has room: the carrier goes there (b: 1 + 1 - 1), then the launcher,
    # which the filter does not check; counted with the carrier, b would read 3 - 1.
    s = state(nodes=zones(a=[0], b=[4]), **job(1, spread(a=1, b=1)))
    only = spread(a=1, b=1).model_copy(update={"carried": False})
    launcher = pod("job-launcher").req(cpu=1).gang("job").spread(only).build()
    s = s.model_copy(update={"pods": (*s.pods, launcher), "gangs": (gang("job", 2).build(),)})
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert d.placements == {"job-0": "b-0", "job-launcher": "b-0"}


def test_a_gang_whose_launcher_carries_another_zone_spread_waits_told_why() -> None:
    # Its order would need one group's carriers before the other's, each counting both.
    s = state(nodes=zones(a=[4], b=[4], c=[4]), **job(2, spread(a=0, b=0, c=0)))
    theirs = spread(a=0, b=0, c=0).model_copy(update={"group": "launchers"})
    only = spread(a=0, b=0, c=0).model_copy(update={"carried": False})
    launcher = pod("job-launcher").req(cpu=1).gang("job").spread(only, theirs).build()
    s = s.model_copy(update={"pods": (*s.pods, launcher), "gangs": (gang("job", 3).build(),)})
    reasons = set()
    for t in range(8):  # whichever group goes first
        turn = s.model_copy(update={"now_s": t * TURN_S})
        assert schedule(turn, "cpsat", FAST).placements == {}
        reasons |= {r.reason for p in split(turn).pods for r in p.node_rules}
    assert NOT_SPLIT.reason in reasons


def test_shared_out_into_room_victims_free_the_fewest_is_read_as_zero() -> None:
    # Only b has room once low (priority 0, all or nothing) is evicted; low's pods on a
    # and c are ones the spread counts. Two pods in b end 2 - 1 within maxSkew while they
    # run, 2 - 0 once low is gone: high waits rather than nominate that.
    s = state(
        nodes=zones(a=[2], b=[2], c=[2]),
        pods=[
            pod("l-a").req(cpu=0.1).gang("low").on("a-0"),
            pod("l-b").req(cpu=1.9).gang("low").on("b-0"),
            pod("l-c").req(cpu=0.1).gang("low").on("c-0"),
            pod("k-a").req(cpu=1.9).gang("keep").priority(100).on("a-0"),
            pod("k-c").req(cpu=1.9).gang("keep").priority(100).on("c-0"),
            *(
                pod(f"job-{i}").req(cpu=0.9).gang("job").priority(50).spread(spread(a=1, b=0, c=1))
                for i in range(2)
            ),
        ],
        gangs=[gang("low", 3), gang("keep", 2).priority(100), gang("job", 2).priority(50)],
    )
    rules = {p.name: p.node_rules for p in split(s).pods if p.gang == "job"}
    assert {r.reason for held in rules.values() for r in held} == {SPREAD_CONFLICT}
    assert all(not r.terms[0].match_expressions for held in rules.values() for r in held)
    one = s.model_copy(
        update={"pods": s.pods[:-1], "gangs": (*s.gangs[:2], gang("job", 1).build())}
    )
    [held] = [p.node_rules for p in split(one).pods if p.gang == "job"]
    assert held[0].terms[0].match_expressions[0].values == ("b",)
