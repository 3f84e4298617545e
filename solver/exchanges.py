"""The end of the placement stages: the best candidate exchanged (``displace.exchanged``:
some of the most valuable waiting gangs placed in place of gangs worth less) and
refilled (``refill.refilled``: placed gangs making way for waiting ones that add more
together), the class LP's other optima placed in the time that leaves, the runner-up
exchanged too, and further exchanges of the best while the cycle would otherwise end
early."""

from __future__ import annotations

import time

from solver.candidates import place_other_optima
from solver.displace import exchanged
from solver.placement import Placer
from solver.refill import refilled
from solver.search import Search

# Time left below which no further exchange round starts (``exchanged_again``).
MIN_EXCHANGE_S = 0.02


def best_exchanged(search: Search) -> Placer:
    """The best candidate after an exchange (``exchanged_once``) and a refill
    (``refilled_once``); then, in the time left, the LP's other optima
    (``candidates.place_other_optima``) and the exchange of the runner-up, which decides
    where it then scores more.

    The refill, a pass that takes all the time left where it must (from about 1,000 nodes
    it always does, and the other optima then have none), comes before the other optima:
    real-shaped 200 nodes, seeds 0-63, one run each way, the mean gap 1.34 -> 1.13%
    (lower on 59 seeds, higher on 5; above 2% on 5 -> 3); 1.29% with the refill after
    them, in what they leave, 1.20% with half the time left; seeds 64-127 1.36 -> 1.20%.
    1,000 nodes: 1.32 -> 1.31% (half: 1.32%). Timed: "The refill" in
    benchmarks/solver_history.md.

    The best candidate's exchange comes first: placed before it, the other optima took
    the time of an exchange that gained a point (real-shaped 800 nodes x 1,200 gangs,
    seed 7: 3.50 -> 4.59% from the bound). An exchange gains more from some candidates
    than from others: with the other optima placed before any exchange, exchanging the
    best alone left real-shaped 200 nodes x 600 gangs' seeds 1 and 11 (deterministic) at
    4.43% and 2.54% from the bound, the runner-up's exchange 3.46% and 1.92%. In this
    order, the same seeds 0-11 end no further from the bound than without the other
    optima on any seed (mean 1.99 -> 1.55%); timed: "The LP's other optima" in
    benchmarks/solver_history.md."""
    first = search.best_so_far()
    once = exchanged_once(search, first)
    best = refilled_once(search, once)
    place_other_optima(search)
    # Not the best's own earlier forms: the runner-up is another candidate.
    others = [p for p in search.solved if p is not first and p is not once and p is not best]
    if others and not search.at_bound(best):
        second = max(others, key=search.score)
        trial = exchanged_once(search, second)
        best = trial if search.score(trial) > search.score(best) else best
    return exchanged_again(search, best)


def exchanged_once(search: Search, best: Placer) -> Placer:
    """The best placement, or where the time left holds it, a better one that places some
    of the most valuable waiting gangs instead of gangs worth less (``displace.exchanged``)."""
    if search.at_bound(best) or search.remaining() <= 0:
        return best
    deterministic = search.config.deterministic
    started = time.perf_counter()
    until = None if deterministic else started + search.remaining()
    tried = search.exchange_tried.setdefault(id(best), set())
    trial = exchanged(best, search.config.weights, until, tried)
    search.exchange_s = max(search.exchange_s, time.perf_counter() - started)
    return best if trial is None else _candidate(search, best, trial, "+exchange")


def refilled_once(search: Search, best: Placer) -> Placer:
    """The best placement, or where the time left holds some of it, a better one where
    placed gangs made way for waiting ones that together add more (``refill.refilled``).
    Not in deterministic solves: how far the pass gets would depend on the load."""
    if search.config.deterministic or search.at_bound(best) or search.remaining() < MIN_EXCHANGE_S:
        return best
    trial = refilled(best, search.config.weights, time.perf_counter() + search.remaining())
    return best if trial is None else _candidate(search, best, trial, "+refill")


def _candidate(search: Search, best: Placer, trial: Placer, step: str) -> Placer:
    """``trial``, made from ``best`` by ``step``, as a candidate: named after ``best`` (a
    step repeated is named once), and with the waiting gangs the exchanges of ``best``
    tried, none to try again in the trial's."""
    search.exchange_tried[id(trial)] = search.exchange_tried.setdefault(id(best), set())
    search.solved.append(trial)
    origin = search.origin.get(id(best), "gang-greedy")
    search.origin[id(trial)] = origin if origin.endswith(step) else f"{origin}{step}"
    return trial


def exchanged_again(search: Search, best: Placer) -> Placer:
    """Where the cycle would otherwise end early, further exchanges of the best placement,
    each over the most valuable waiting gangs that no exchange of it (or of the candidate
    it came from) has tried yet, while the time left holds the longest exchange so far.
    On heavy backlogs the stages before end early with the gap wide (real-shaped 30 nodes
    x 500 gangs, seed 0: 0.54 s, 2.60% from the bound; 150 x 2,000, seed 2: 0.61 s,
    2.92%). Not in deterministic solves: how many rounds fit would depend on the load."""
    if search.config.deterministic:
        return best
    while not search.at_bound(best) and search.remaining() > max(search.exchange_s, MIN_EXCHANGE_S):
        tried = len(search.exchange_tried.get(id(best), ()))
        trial = exchanged_once(search, best)
        if trial is best and len(search.exchange_tried.get(id(best), ())) == tried:
            break  # every waiting gang has been tried
        best = trial
    return best
