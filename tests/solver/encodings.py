"""The node-class model of a prepared problem, as the CP-SAT scheduler first builds it."""

from __future__ import annotations

from solver.bins import class_bins, pair_capacity
from solver.config import SolverConfig
from solver.encode import ROUNDING, Encoding, encode
from solver.objective import Coefficients, coefficients
from solver.problem import Problem
from solver.shapes import group


def class_model(problem: Problem, rounding: int = ROUNDING) -> tuple[Coefficients, Encoding]:
    """Prices at the default weights, and the model over every pair of a pending pod
    class and a class of nodes."""
    coef = coefficients(problem, SolverConfig().weights)
    shapes = group(problem, coef)
    bins = class_bins(problem)
    pairs = pair_capacity(problem, shapes, bins)
    return coef, encode(problem, shapes, bins, coef, pairs, rounding=rounding)
