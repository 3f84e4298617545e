"""Kubernetes quantities as the solver's integers: cpu in millicores, the rest rounded up."""

from __future__ import annotations

import pytest

from adapter.quantity import QuantityError, parse, quantity, resources


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 1.5, 1500),
        ("cpu", "0.0001", 1),  # a request is never rounded down to nothing
        ("memory", "1Gi", 2**30),
        ("memory", "1G", 10**9),
        ("memory", "100Mi", 100 * 2**20),
        ("nvidia.com/gpu", 8, 8),
        ("pods", "110", 110),
    ],
)
def test_parse(name: str, value: str | int | float, expected: int) -> None:
    assert parse(name, value) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("-1", "is negative"),
        (-2, "is negative"),
        ("lots", "not a Kubernetes quantity"),
        ("", "not a Kubernetes quantity"),
        (True, "not a quantity"),
        (float("nan"), "not finite"),
        # Overflowed the decimal context, or would take seconds to round.
        ("1e999999", "above the largest any machine has"),
        ("1e300000", "above the largest any machine has"),
        ("9" * 400, "above the largest any machine has"),
        (10**400, "above the largest any machine has"),
    ],
)
def test_bad_quantities_name_the_resource(value: object, fragment: str) -> None:
    with pytest.raises(QuantityError, match=fragment) as caught:
        parse("memory", value)  # type: ignore[arg-type]
    assert str(caught.value).startswith("memory: ")


def test_resources_keeps_every_name() -> None:
    r = resources({"cpu": "250m", "memory": "1Mi", "nvidia.com/gpu": 0})
    assert r.root == {"cpu": 250, "memory": 2**20, "nvidia.com/gpu": 0}


@pytest.mark.parametrize(
    ("name", "amount", "written"),
    [("cpu", 3000, "3"), ("cpu", 1500, "1500m"), ("cpu", 0, "0"), ("memory", 2**31, "2147483648")],
)
def test_quantity_writes_what_parse_reads_back(name: str, amount: int, written: str) -> None:
    assert quantity(name, amount) == written
    assert parse(name, written) == amount
