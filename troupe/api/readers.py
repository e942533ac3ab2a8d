"""The typed readers of decoded JSON and YAML: one family for Kubernetes objects
(`troupe.api`'s parsers, `troupe.dra.types`) and for the configuration
(`troupe.config`).

Paths. A reader of a field takes the enclosing mapping, the key and the *path
prefix* of that mapping (``""`` at the top, else ending in ``"."``, e.g.
``"spec.containers[0]."``) and names ``prefix + key`` when it fails; a reader of
a value (``as_map``, ``int_value``...) takes the value's whole path. List items
are ``key[i]``. Absent and ``null`` mean "not set" everywhere, and a ``null``
item of a list of objects reads as an empty object (as Go decodes it).

Errors. Every reader raises `ParseError(path, problem)` in the API server's
words, as `kubectl apply` or kube-scheduler's validation would say it:
"Required value", "Invalid value: <value>: must be an integer", "Unsupported
value", "Duplicate value". Each user turns it into its own error at its edge:
an `InvalidObject` for an object, a `ConfigError` for the configuration.

Objects come from JSON (the API server, via kopf) or YAML (the simulator):
lists may be lists or tuples and mappings any `Mapping`. Label-like string maps
accept scalars written unquoted in YAML (``version: 2``) and keep them as text.
An integer of an object may be an integral float or decimal digits as text (a
hand-written YAML dump); the configuration is decoded strictly, as
kube-scheduler's strict decoding, so it reads integers with ``strict=True``.
Every integer is a Go int64 upstream: a larger one is refused where it is read.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from troupe.api.types import (
    INT64_MAX,
    INT64_MIN,
    MAX_DURATION_SECONDS,
    ParseError,
    describe_int,
)

EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})
_INT_TEXT: Final = re.compile(r"[+-]?[0-9]+")

# ---- messages ---------------------------------------------------------------------------


def show(v: object) -> str:
    """A value as the API server quotes it in messages (a long integer described)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return describe_int(v)
    if isinstance(v, str | bool | float) or v is None:
        return json.dumps(v)
    if isinstance(v, Mapping):
        return "object"
    if isinstance(v, list | tuple):
        return "array"
    return type(v).__name__


def join(prefix: str) -> str:
    """Normalise a caller's path prefix: "" stays "", "a" and "a." become "a."."""
    return prefix if not prefix or prefix.endswith(".") else prefix + "."


def required(path: str, detail: str = "") -> ParseError:
    return ParseError(path, "Required value" + (f": {detail}" if detail else ""))


def invalid(path: str, value: object, detail: str) -> ParseError:
    return ParseError(path, f"Invalid value: {show(value)}: {detail}")


def unsupported(path: str, value: object, supported: Sequence[str]) -> ParseError:
    choices = ", ".join(json.dumps(s) for s in supported)
    return ParseError(path, f"Unsupported value: {show(value)}: supported values: {choices}")


def duplicate(path: str, value: object) -> ParseError:
    return ParseError(path, f"Duplicate value: {show(value)}")


def suggest(name: str, candidates: Iterable[str]) -> str:
    """' (did you mean "x"?)' for the closest candidate, or ""."""
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


# ---- objects and lists ------------------------------------------------------------------


def _fields(m: Mapping[str, Any], path: str, allowed: Sequence[str]) -> None:
    """Unknown fields are errors (strict decoding), with the closest known one."""
    for k in m:
        if not isinstance(k, str):
            raise invalid(path, k, "field names must be strings")
        if k not in allowed:
            raise ParseError(join(path) + k, "unknown field" + suggest(k, allowed))


def as_map(v: object, path: str, allowed: Sequence[str] | None = None) -> Mapping[str, Any]:
    """An object; with `allowed`, a field not in it is an error."""
    if v.__class__ is not dict and not isinstance(v, Mapping):  # dict: no ABC check
        raise invalid(path, v, "must be an object")
    if allowed is not None:
        _fields(v, path, allowed)
    return v


def get_map(
    obj: Mapping[str, Any], key: str, prefix: str, allowed: Sequence[str] | None = None
) -> Mapping[str, Any]:
    v = obj.get(key)
    if v is None:
        return EMPTY
    if v.__class__ is dict and allowed is None:  # most of them: no further checks
        return v
    return as_map(v, prefix + key, allowed)


def get_list(obj: Mapping[str, Any], key: str, prefix: str) -> Sequence[Any]:
    v = obj.get(key)
    if v is None:
        return ()
    if not isinstance(v, list | tuple):
        raise invalid(prefix + key, v, "must be a list")
    return v


def get_objs(
    obj: Mapping[str, Any], key: str, prefix: str, allowed: Sequence[str] | None = None
) -> list[tuple[str, Mapping[str, Any]]]:
    """A list of objects, each with its own path prefix (``"spec.containers[0]."``)."""
    items = obj.get(key)
    if items is None:  # most of them
        return []
    if not isinstance(items, list | tuple):
        raise invalid(prefix + key, items, "must be a list")
    out: list[tuple[str, Mapping[str, Any]]] = []
    at = f"{prefix}{key}["
    for i, item in enumerate(items):
        if item.__class__ is dict and allowed is None:
            out.append((f"{at}{i}].", item))
        elif item is None:
            out.append((f"{at}{i}].", EMPTY))
        else:
            out.append((f"{at}{i}].", as_map(item, f"{at}{i}]", allowed)))
    return out


# ---- scalars ----------------------------------------------------------------------------


def get_str(obj: Mapping[str, Any], key: str, prefix: str, default: str = "") -> str:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise invalid(prefix + key, v, "must be a string")
    return v


def get_name(obj: Mapping[str, Any], key: str, prefix: str) -> str:
    """A string that must be given and not empty."""
    name = get_str(obj, key, prefix)
    if not name:
        raise required(prefix + key)
    return name


def get_bool(obj: Mapping[str, Any], key: str, prefix: str, default: bool = False) -> bool:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise invalid(prefix + key, v, "must be a boolean")
    return v


def _bounds(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"must be between {lo} and {hi}, inclusive"
    if lo is not None:
        return f"must be greater than or equal to {lo}"
    return f"must be less than or equal to {hi}"


def int_value(
    v: object, path: str, lo: int | None = None, hi: int | None = None, *, strict: bool = False
) -> int:
    """An integer within [lo, hi] and Go's int64: a JSON/YAML integer, or (not
    `strict`) an integral float or decimal digits as text."""
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif not strict and (
        (isinstance(v, float) and v.is_integer())
        or (isinstance(v, str) and len(v) <= 40 and _INT_TEXT.fullmatch(v) is not None)
    ):
        n = int(v)
    else:
        raise invalid(path, v, "must be an integer")
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise invalid(path, n, _bounds(lo, hi))
    if not INT64_MIN <= n <= INT64_MAX:
        raise invalid(path, n, "must be a 64-bit integer")
    return n


def get_int(
    obj: Mapping[str, Any],
    key: str,
    prefix: str,
    lo: int | None = None,
    hi: int | None = None,
    *,
    strict: bool = False,
) -> int | None:
    v = obj.get(key)
    return None if v is None else int_value(v, prefix + key, lo, hi, strict=strict)


def finite(v: int | float) -> bool:
    """A number that float arithmetic can take: not inf or NaN, and not an
    integer too large for a float (10**400 is a valid YAML integer)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def number_value(v: object, path: str, detail: str) -> float:
    """A finite number (a JSON/YAML integer or float, not a boolean); `detail`
    says what it must be when it is not one."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not finite(v):
        raise invalid(path, v, detail)
    return float(v)


def get_seconds(
    obj: Mapping[str, Any], key: str, prefix: str, *, positive: bool = False
) -> float | None:
    """A number of seconds, at least 0 (more than 0 with `positive`), and at most
    what Go's time.Duration holds."""
    v = obj.get(key)
    if v is None:
        return None
    path = prefix + key
    seconds = number_value(v, path, "must be a number of seconds")
    if seconds > MAX_DURATION_SECONDS:
        raise invalid(path, v, f"must be at most {MAX_DURATION_SECONDS} seconds")
    if positive and seconds <= 0:
        raise invalid(path, v, "must be greater than zero")
    if seconds < 0:
        raise invalid(path, v, "must be greater than or equal to 0")
    return seconds


def scalar_text(v: object, path: str) -> str:
    """A string, or a YAML scalar written without quotes (2, 1.5, true) as text."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    raise invalid(path, v, "must be a string")


def get_str_map(obj: Mapping[str, Any], key: str, prefix: str) -> dict[str, str]:
    """A map of strings (labels, annotations, nodeSelector). The result is a new
    dict that nothing else holds; callers treat it as read-only."""
    m = get_map(obj, key, prefix)
    out: dict[str, str] = {}
    for k, v in m.items():
        out[str(k)] = v if isinstance(v, str) else scalar_text(v, f"{prefix}{key}.{k}")
    return out


def get_str_list(obj: Mapping[str, Any], key: str, prefix: str) -> tuple[str, ...]:
    items = get_list(obj, key, prefix)
    for x in items:
        if x.__class__ is not str:  # a YAML scalar without quotes, or not a string
            return tuple(
                x if isinstance(x, str) else scalar_text(x, f"{prefix}{key}[{i}]")
                for i, x in enumerate(items)
            )
    return tuple(items)
