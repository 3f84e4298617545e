"""Kubernetes quantities ("500m", "1Gi", 8) as the integers ``solver.model.Resources`` holds.

Scenario files and (later) Kubernetes objects write quantities the way users do; the
solver counts ``cpu`` in millicores and everything else in whole units (bytes for
memory). Rounding is up, as the kubelet rounds a request: a pod never gets less than
it asked for.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from decimal import Decimal, DecimalException

from kubernetes.utils import parse_quantity

from solver.model import CPU, Resources

Quantity = str | int | float
HUGE_EXPONENT = 30  # 1e30 (a value a real API server stores) still reads, and is refused


class QuantityError(ValueError):
    """A quantity that cannot be a resource amount (unparseable, negative, not finite)."""


class QuantityTooLarge(QuantityError):
    """A quantity far past any machine's amount: no resource amount, but as a cap, none."""


@functools.lru_cache(maxsize=8192, typed=True)
def parse(name: str, value: Quantity) -> int:
    """One resource amount in the solver's unit for ``name``.

    Cached: a cluster's pods repeat a handful of request strings thousands of times, and
    parsing them is most of the cost of reading a pod."""
    if isinstance(value, bool):
        raise QuantityError(f"{name}: {value!r} is not a quantity")
    try:
        amount = Decimal(str(value)) if isinstance(value, int | float) else parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, DecimalException):  # "1e999999" overflows the context
        raise QuantityError(f"{name}: {value!r} is not a Kubernetes quantity") from None
    if not amount.is_finite():
        raise QuantityError(f"{name}: {value!r} is not finite")
    if amount < 0:
        raise QuantityError(f"{name}: {value!r} is negative")
    # Far past any machine (the model refuses more than MAX_QUANTITY, saying so): an
    # exponent this large overflows the arithmetic below or takes seconds to round.
    if amount.adjusted() > HUGE_EXPONENT:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:36]}..."
        raise QuantityTooLarge(f"{name}: {shown} is above the largest any machine has")
    if name == CPU:
        amount *= 1000
    return math.ceil(amount)


def resources(values: Mapping[str, Quantity]) -> Resources:
    return Resources({name: parse(name, value) for name, value in values.items()})


def quantity(name: str, amount: int) -> str:
    """The inverse of ``parse``: one amount in the solver's unit as Kubernetes writes it
    (cpu in whole cores when it can be, else millicores; everything else whole units)."""
    if name == CPU and amount % 1000:
        return f"{amount}m"
    return str(amount // 1000 if name == CPU else amount)
