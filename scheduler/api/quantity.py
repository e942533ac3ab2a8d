"""Exact Kubernetes quantities (resource.Quantity) as fractions.

`parse_quantity("1.5Gi")` is exact; `milli_value` and `value` round up as
Quantity.MilliValue and Quantity.Value do.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

from scheduler.api.types import ParseError

QUANTITY_PATTERN: Final = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


def _bad(field: str) -> ParseError:
    return ParseError(field, f"quantities must match the regular expression '{QUANTITY_PATTERN}'")


def parse_quantity(v: object, field: str = "quantity") -> Fraction:
    """Parse a quantity (string or number). Raises ParseError naming `field`."""
    if isinstance(v, bool):
        raise _bad(field)
    if isinstance(v, int):
        return Fraction(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _bad(field)
        return Fraction(str(v))
    if not isinstance(v, str):
        raise _bad(field)
    s = v.strip()
    if not s or s != v:
        raise _bad(field)
    i = 0
    while i < len(s) and (s[i].isdigit() or s[i] in ".+-"):
        if s[i] in "+-" and i > 0:
            break
        i += 1
    number, suffix = s[:i], s[i:]
    if not _NUMBER.match(number):
        raise _bad(field)
    value = Fraction(number.lstrip("+")) if number not in ("+", "-") else None
    if value is None:
        raise _bad(field)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    if _EXPONENT.match(suffix):
        return value * Fraction(10) ** int(suffix[1:])
    raise _bad(field)


def milli_value(q: Fraction) -> int:
    """Quantity.MilliValue: q * 1000 rounded up."""
    return math.ceil(q * 1000)


def value(q: Fraction) -> int:
    """Quantity.Value: q rounded up."""
    return math.ceil(q)


def to_scaled(resource: str, q: Fraction, milli_resources: frozenset[str]) -> int:
    return milli_value(q) if resource in milli_resources else value(q)
