"""Quantities: every suffix, exact values, rounding up, errors."""

from __future__ import annotations

from fractions import Fraction

import pytest

from scheduler.api.quantity import milli_value, parse_quantity, value
from scheduler.api.types import ParseError


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", 0),
        ("1", 1),
        ("+1", 1),
        ("-1", -1),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("100m", Fraction(1, 10)),
        ("1n", Fraction(1, 10**9)),
        ("1u", Fraction(1, 10**6)),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1Ki", 1024),
        ("1Mi", 2**20),
        ("1.5Gi", 3 * 2**29),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1e3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("12e6", 12 * 10**6),
        ("2e+2", 200),
        (3, 3),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse(text: str | int | float, want: Fraction | int) -> None:
    assert parse_quantity(text) == want


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 Gi", "Gi", "1KB", "1.2.3", "1e", "two", "1mi", "--1", "1Gii", True, None, [1]],
)
def test_errors(text: object) -> None:
    with pytest.raises(ParseError, match="quantities must match the regular expression"):
        parse_quantity(text, "spec.x")


@pytest.mark.parametrize(
    ("text", "milli", "units"),
    [
        ("100m", 100, 1),
        ("1", 1000, 1),
        ("1.0001", 1001, 2),
        ("1n", 1, 1),
        ("0", 0, 0),
        ("250m", 250, 1),
        ("1Ki", 1024000, 1024),
    ],
)
def test_rounding_up(text: str, milli: int, units: int) -> None:
    q = parse_quantity(text)
    assert milli_value(q) == milli
    assert value(q) == units
