"""Exact Kubernetes quantities (apimachinery resource.Quantity) as fractions.

The grammar is the one documented on resource.Quantity::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedDigits> | "E" <signedDigits>

`parse_quantity("1.5Gi")` is exact (a `Fraction`). Go's parser is a little
looser than its own documentation (it reads "Gi" or "-" as zero); we follow the
documented grammar, as the CRD schema pattern does, and reject those.

`milli_value` and `value` round as Quantity.MilliValue and Quantity.Value do:
up, away from zero ("1n" of cpu is 1m). Resource amounts elsewhere are these
*scaled* integers: milli-units for the resources in `milli_resources` (cpu and
the isolated-CPU resource), whole units for the rest.

Quantity strings repeat a lot across pods ("100m", "1Gi"), so parsed strings are
cached; `Fraction` is immutable, so sharing results is safe.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Final

from troupe.api.types import ParseError

# The expression Kubernetes names in its error message (resource.ErrFormatWrong).
QUANTITY_PATTERN: Final = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
BAD_QUANTITY: Final = f"quantities must match the regular expression '{QUANTITY_PATTERN}'"

_GRAMMAR: Final = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?"  # sign, integer digits, fraction digits
    r"(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE])|[eE]([+-]?[0-9]+))?"  # binary | decimal | exponent
)
_NUMBER: Final = re.compile(r"[+-]?[0-9]*\.?[0-9]*")
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Bounds that keep absurd input from costing time or memory ("1e999999999"): far
# beyond anything int64 milli-units hold, far below what costs time to compute.
# Longer strings are refused before the (bounded) cache sees them.
_MAX_DIGITS: Final = 100
_MAX_EXPONENT: Final = 1000
_MAX_TEXT: Final = 128
OUT_OF_RANGE: Final = (
    f"quantity out of range (at most {_MAX_DIGITS} digits and an exponent of at most "
    f"{_MAX_EXPONENT})"
)


@lru_cache(maxsize=8192)
def _parse_text(s: str) -> Fraction | str:
    """The quantity, or the reason it is not one."""
    m = _GRAMMAR.fullmatch(s)
    if m is None:
        return BAD_QUANTITY
    sign, whole, frac, binary, decimal, exponent = m.groups()
    frac = frac or ""
    if not whole and not frac:
        return BAD_QUANTITY  # no digits at all: "", ".", "+", "Gi"
    if len(whole) + len(frac) > _MAX_DIGITS:
        return OUT_OF_RANGE
    q = Fraction(int(whole + frac or "0"), 10 ** len(frac))
    if binary:
        q *= _BINARY[binary]
    elif decimal:
        q *= Fraction(10) ** _DECIMAL[decimal]
    elif exponent:
        if len(exponent.lstrip("+-").lstrip("0")) > 4 or abs(int(exponent)) > _MAX_EXPONENT:
            return OUT_OF_RANGE
        q *= Fraction(10) ** int(exponent)
    return -q if sign == "-" else q


def parse_quantity(v: object, field: str = "quantity") -> Fraction:
    """A quantity from a string, or from a number as YAML and JSON give them.

    Raises `ParseError` naming `field` for anything that is not a quantity.
    """
    if isinstance(v, str):
        if len(v) > _MAX_TEXT:
            raise ParseError(field, OUT_OF_RANGE if _digits_only(v) else BAD_QUANTITY)
        q = _parse_text(v)
        if isinstance(q, str):
            raise ParseError(field, q)
        return q
    if isinstance(v, bool):
        raise ParseError(field, BAD_QUANTITY)
    if isinstance(v, int):
        if v.bit_length() > 4 * _MAX_DIGITS:
            raise ParseError(field, OUT_OF_RANGE)
        return Fraction(v)
    if isinstance(v, float) and math.isfinite(v):
        # repr gives the shortest decimal that reads back as v: 0.1 -> "0.1".
        q = _parse_text(repr(v))
        if isinstance(q, str):
            raise ParseError(field, q)
        return q
    raise ParseError(field, BAD_QUANTITY)


def _digits_only(s: str) -> bool:
    return _NUMBER.fullmatch(s) is not None


def _ceil_away_from_zero(x: Fraction) -> int:
    return math.ceil(x) if x >= 0 else -math.ceil(-x)


def milli_value(q: Fraction) -> int:
    """Quantity.MilliValue: q * 1000, rounded up (away from zero)."""
    return _ceil_away_from_zero(q * 1000)


def value(q: Fraction) -> int:
    """Quantity.Value: q rounded up (away from zero)."""
    return _ceil_away_from_zero(q)


def to_scaled(resource_name: str, q: Fraction, milli_resources: frozenset[str]) -> int:
    """The scaled integer amount: milli-units for `milli_resources`, else whole units."""
    return milli_value(q) if resource_name in milli_resources else value(q)


_BINARY_SUFFIXES: Final = (
    (1 << 60, "Ei"),
    (1 << 50, "Pi"),
    (1 << 40, "Ti"),
    (1 << 30, "Gi"),
    (1 << 20, "Mi"),
    (1 << 10, "Ki"),
)
_DECIMAL_SUFFIXES: Final = (
    (10**18, "E"),
    (10**15, "P"),
    (10**12, "T"),
    (10**9, "G"),
    (10**6, "M"),
    (10**3, "k"),
)


def format_quantity(q: Fraction) -> str:
    """A quantity as text the API reads back to the same value: whole numbers
    with the largest binary or decimal suffix that divides them (1Gi, 2k),
    others in milli-units (1500m) or, finer than that, as a decimal."""
    if q.denominator == 1:
        n = q.numerator
        if n:
            for table in (_BINARY_SUFFIXES, _DECIMAL_SUFFIXES):
                for size, suffix in table:
                    if n % size == 0:
                        return f"{n // size}{suffix}"
        return str(n)
    milli = q * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    digits = 9
    while (q * 10**digits).denominator != 1 and digits < 30:
        digits += 3
    scaled = math.ceil(q * 10**digits)
    return f"{scaled}e-{digits}"
