"""Quantities: every suffix, exact values, rounding up, scaled units, errors."""

from __future__ import annotations

from fractions import Fraction

import pytest

from troupe.api.quantity import (
    BAD_QUANTITY,
    OUT_OF_RANGE,
    milli_value,
    parse_quantity,
    to_scaled,
    value,
)
from troupe.api.types import CPU, ISOLATED_CPU_RESOURCE, MILLI_RESOURCES, ParseError

F = Fraction

PARSE_CASES = [
    # plain numbers and signs
    ("0", 0),
    ("1", 1),
    ("+1", 1),
    ("-1", -1),
    ("007", 7),
    ("1.5", F(3, 2)),
    (".5", F(1, 2)),
    ("5.", 5),
    ("-.5", F(-1, 2)),
    ("+5.", 5),
    ("0.000", 0),
    # decimal SI
    ("1n", F(1, 10**9)),
    ("1u", F(1, 10**6)),
    ("100m", F(1, 10)),
    ("1.5m", F(3, 2000)),
    ("1k", 1000),
    ("1M", 10**6),
    ("1G", 10**9),
    ("1T", 10**12),
    ("1P", 10**15),
    ("1E", 10**18),
    ("-2k", -2000),
    # binary SI
    ("1Ki", 1024),
    ("1Mi", 2**20),
    ("1.5Gi", 3 * 2**29),
    ("1Ti", 2**40),
    ("1Pi", 2**50),
    ("1Ei", 2**60),
    (".5Ki", 512),
    # decimal exponent
    ("1e3", 1000),
    ("1E3", 1000),
    ("1E-3", F(1, 1000)),
    ("1e-3", F(1, 1000)),
    ("12e6", 12 * 10**6),
    ("2e+2", 200),
    ("1.5e1", 15),
    ("1e0", 1),
    # numbers as YAML / JSON give them
    (3, 3),
    (-4, -4),
    (0.25, F(1, 4)),
    (0.1, F(1, 10)),
    (1e20, 10**20),
    (2.0, 2),
]


@pytest.mark.parametrize(("given", "want"), PARSE_CASES, ids=[repr(c[0]) for c in PARSE_CASES])
def test_parse(given: str | int | float, want: Fraction | int) -> None:
    assert parse_quantity(given) == want


ERROR_CASES = [
    "",
    " 1",
    "1 ",
    "1 Gi",
    "Gi",
    "m",
    "+",
    "-",
    ".",
    "1KB",
    "1K",
    "1kb",
    "1.2.3",
    "1e",
    "1E+",
    "1e1.5",
    "1e3Ki",
    "1Kie3",
    "two",
    "1mi",
    "--1",
    "+-1",
    "1Gii",
    "1_000",
    "٣",
    "0x10",
    "1" * 200 + "x",
    True,
    None,
    [1],
    {"a": 1},
    float("nan"),
    float("inf"),
]


@pytest.mark.parametrize("given", ERROR_CASES, ids=[repr(c)[:20] for c in ERROR_CASES])
def test_errors_name_the_field(given: object) -> None:
    with pytest.raises(ParseError) as e:
        parse_quantity(given, "spec.x")
    assert str(e.value) == f"spec.x: {BAD_QUANTITY}"
    assert e.value.field_path == "spec.x"


OUT_OF_RANGE_CASES = [
    "1e99999",
    "1e999999999",
    "1e-999999999",
    "1" * 101,
    "9" * 1_000_000,
    10**1000,
]


@pytest.mark.parametrize(
    "given", OUT_OF_RANGE_CASES, ids=[repr(c)[:20] for c in OUT_OF_RANGE_CASES]
)
def test_issue14_quantity_exponent_is_bounded(given: object) -> None:
    """ "1e999999999" once froze the process: parsing is bounded in time and size
    whatever the digits or exponent, and says why."""
    with pytest.raises(ParseError) as e:
        parse_quantity(given, "spec.x")
    assert str(e.value) == f"spec.x: {OUT_OF_RANGE}"


def test_issue14_large_but_bounded_quantities_parse() -> None:
    assert parse_quantity("1e1000") == 10**1000
    assert parse_quantity("9" * 100 + "Ei") == (10**100 - 1) * 2**60


def test_message_is_kubernetes_wording() -> None:
    assert BAD_QUANTITY == (
        "quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


ROUNDING_CASES = [
    # text, MilliValue, Value
    ("0", 0, 0),
    ("1", 1000, 1),
    ("100m", 100, 1),
    ("250m", 250, 1),
    ("1.0001", 1001, 2),
    ("1n", 1, 1),
    ("999999n", 1, 1),
    ("1000001n", 2, 1),
    ("1.5", 1500, 2),
    ("1Ki", 1024000, 1024),
    ("1e-3", 1, 1),
    ("1e-4", 1, 1),
    # away from zero for negatives, as Quantity does
    ("-1n", -1, -1),
    ("-1.5", -1500, -2),
]


@pytest.mark.parametrize(
    ("text", "milli", "units"), ROUNDING_CASES, ids=[c[0] for c in ROUNDING_CASES]
)
def test_rounding_up(text: str, milli: int, units: int) -> None:
    q = parse_quantity(text)
    assert milli_value(q) == milli
    assert value(q) == units


@pytest.mark.parametrize(
    ("name", "text", "want"),
    [
        (CPU, "1.5", 1500),
        (CPU, "1n", 1),
        (ISOLATED_CPU_RESOURCE, "2", 2000),
        ("memory", "1.5Ki", 1536),
        ("memory", "1m", 1),
        ("nvidia.com/gpu", "2", 2),
        ("pods", "110", 110),
    ],
    ids=["cpu", "cpu-nano", "isolated-cpu", "memory", "memory-milli-rounds-up", "gpu", "pods"],
)
def test_to_scaled(name: str, text: str, want: int) -> None:
    assert to_scaled(name, parse_quantity(text), MILLI_RESOURCES) == want


def test_to_scaled_uses_the_given_milli_set() -> None:
    assert to_scaled(
        "example.com/vcpu", parse_quantity("1.5"), frozenset({"example.com/vcpu"})
    ) == (1500)
    assert to_scaled(CPU, parse_quantity("1.5"), frozenset()) == 2
