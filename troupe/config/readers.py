"""Typed readers of decoded YAML/JSON: each names the field it fails on."""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from troupe.api.types import (
    INT64_MAX,
    INT64_MIN,
    MAX_DURATION_SECONDS,
    describe_int,
)
from troupe.config.types import ConfigError

# ---- typed readers --------------------------------------------------------------------


def show(v: object) -> str:
    """A value as the user wrote it, for messages."""
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, str) and len(v) > 60:
        v = v[:57] + "..."
    if isinstance(v, int) and not isinstance(v, bool):
        return describe_int(v)
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


def read_object(v: object, path: str, allowed: Sequence[str] | None = None) -> Mapping[str, Any]:
    """An object (None reads as empty); with `allowed`, unknown keys are errors."""
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ConfigError(path, f"must be an object, got {show(v)}")
    for k in v:
        if not isinstance(k, str):
            raise ConfigError(path, f"field names must be strings, got {show(k)}")
        if allowed is not None and k not in allowed:
            raise ConfigError(join(path, k), "unknown field" + suggest(k, allowed))
    return v


def read_list(v: object, path: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(path, f"must be a list, got {show(v)}")
    return v


# kube-scheduler decodes its integers into Go's int64 (or narrower) and its
# durations into time.Duration: a larger number is refused where it is read,
# never left to overflow later.
MAX_SECONDS: Final = MAX_DURATION_SECONDS


def finite(v: int | float) -> bool:
    """A number that float arithmetic can take: not inf or NaN, and not an
    integer too large for a float (1e308 and more: 10**400 is a valid YAML int)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def read_int(v: object, path: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer within [lo, hi], and within Go's int64 whatever the bounds."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(path, f"must be an integer, got {show(v)}")
    low = INT64_MIN if lo is None else lo
    high = INT64_MAX if hi is None else hi
    if low <= v <= high:
        return v
    if lo is not None and hi is not None:
        raise ConfigError(path, f"must be between {lo} and {hi}, got {describe_int(v)}")
    if v < low and lo is not None:
        raise ConfigError(path, f"must be >= {lo}, got {describe_int(v)}")
    if v > high and hi is not None:
        raise ConfigError(path, f"must be <= {hi}, got {describe_int(v)}")
    raise ConfigError(path, f"must be a 64-bit integer, got {describe_int(v)}")


def read_seconds(v: object, path: str, *, positive: bool = False) -> float:
    """A finite, non-negative number of seconds (> 0 with `positive`)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not finite(v):
        raise ConfigError(path, f"must be a number of seconds, got {show(v)}")
    if v > MAX_SECONDS:
        raise ConfigError(path, f"must be at most {MAX_SECONDS} seconds, got {show(v)}")
    if positive and v <= 0:
        raise ConfigError(path, f"must be > 0, got {v:g}")
    if v < 0:
        raise ConfigError(path, f"must be >= 0, got {v:g}")
    return float(v)


def read_bool(v: object, path: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(path, f"must be true or false, got {show(v)}")
    return v


def read_name(v: object, path: str) -> str:
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a string, got {show(v)}")
    if not v:
        raise ConfigError(path, "must not be empty")
    return v
