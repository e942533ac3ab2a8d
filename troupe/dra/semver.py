"""Semantic versions (semver 2.0.0) as DRA reads them: the check a `version`
attribute of a ResourceSlice passes (troupe.dra.types) and the order CEL's
semver library compares them in (troupe.dra.cel).

A module of its own so that the object readers and the CEL interpreter both
depend on it and not on each other.
"""

from __future__ import annotations

import re
from typing import Any, Final

_SEMVER_RE: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def parse_semver(text: str) -> tuple[int, int, int, tuple[str, ...]] | None:
    """(major, minor, patch, pre-release identifiers), or None when `text` is
    not a semantic version (build metadata is accepted and ignored)."""
    m = _SEMVER_RE.match(text)
    if m is None:
        return None
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), pre


def semver_key(text: str) -> tuple[Any, ...]:
    """A sort key giving semver's precedence; ValueError if `text` is not one."""
    v = parse_semver(text)
    if v is None:
        raise ValueError(f"invalid semver {text!r}")
    major, minor, patch, pre = v
    # A version with a pre-release sorts before the release; numeric identifiers
    # before alphanumeric ones, each compared in its own way.
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre)
    return (major, minor, patch, 0 if pre else 1, ids)


__all__ = ["parse_semver", "semver_key"]
