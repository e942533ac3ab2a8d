"""What several plugins share, as kube-scheduler's framework/plugins/helper:
the utilization-to-score function shape (shape_score.go) that
NodeResourcesFit's RequestedToCapacityRatio and VolumeBinding's storage
capacity scoring both take as an argument, and its validation
(validateFunctionShape in apis/config/validation).

Not a plugin: plugins import this module, never each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from troupe.framework.interface import MAX_NODE_SCORE, Int64Array, PluginArgsError

MAX_UTILIZATION: Final = 100
# A shape's scores are 0..10 (config.MaxCustomPriorityScore), scaled by 10 to 0..100.
MAX_CUSTOM_PRIORITY_SCORE: Final = 10


@dataclass(frozen=True, slots=True)
class ShapePoint:
    utilization: int  # 0..100
    score: int  # 0..10


def int_field(obj: Mapping[str, Any], key: str, path: str, default: int | None) -> int:
    v = obj.get(key, default)
    if v is None:
        raise PluginArgsError(f"{path}.{key}", "required")
    if isinstance(v, bool) or not isinstance(v, int):
        raise PluginArgsError(f"{path}.{key}", f"must be an integer, got {v!r}")
    return v


def parse_shape(raw: object, path: str) -> tuple[ShapePoint, ...]:
    """validateFunctionShape: at least one point, utilization strictly increasing in
    [0, 100], score in [0, 10]."""
    if not isinstance(raw, list) or not raw:
        raise PluginArgsError(path, "at least one point must be specified")
    points = []
    for i, pt in enumerate(raw):
        p = f"{path}[{i}]"
        if not isinstance(pt, Mapping):
            raise PluginArgsError(p, "must be an object with utilization and score")
        for k in pt:
            if k not in ("utilization", "score"):
                raise PluginArgsError(f"{p}.{k}", "unknown field")
        points.append(
            (p, ShapePoint(int_field(pt, "utilization", p, 0), int_field(pt, "score", p, 0)))
        )
    for i in range(1, len(points)):
        if points[i - 1][1].utilization >= points[i][1].utilization:
            raise PluginArgsError(
                f"{points[i][0]}.utilization", "values must be sorted in increasing order"
            )
    for p, pt in points:
        if not 0 <= pt.utilization <= MAX_UTILIZATION:
            raise PluginArgsError(f"{p}.utilization", "not in valid range [0, 100]")
        if not 0 <= pt.score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise PluginArgsError(f"{p}.score", "not in valid range [0, 10]")
    return tuple(pt for _, pt in points)


def go_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """helper.BuildBrokenLinearFunction over (utilization, score) points."""
    for i, (u, s) in enumerate(shape):
        if p <= u:
            if i == 0:
                return s
            u0, s0 = shape[i - 1]
            return s0 + go_div((s - s0) * (p - u0), u - u0)
    return shape[-1][1]


def scaled(shape: Sequence[ShapePoint]) -> tuple[tuple[int, int], ...]:
    """The points with scores scaled from 0..10 to 0..100 (as both plugins' New)."""
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    return tuple((p.utilization, p.score * scale) for p in shape)


def shape_table(shape: Sequence[tuple[int, int]]) -> Int64Array:
    """broken_linear tabulated over every utilization 0..100 (index by utilization)."""
    if not shape:
        return np.zeros(1, dtype=np.int64)
    return np.array([broken_linear(shape, u) for u in range(MAX_UTILIZATION + 1)], dtype=np.int64)


def round_half_up(total: int, weights: int) -> int:
    """math.Round(float64(total) / float64(weights)) for non-negative operands."""
    return (2 * total + weights) // (2 * weights)
