"""Go durations as metav1.Duration reads them ("15s", "1m30s", "500ms")."""

from __future__ import annotations

import math
import re
from typing import Final

_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")


def parse_duration(v: object) -> float | None:
    """The duration in seconds, or None when `v` is not one (or not finite)."""
    if not isinstance(v, str) or not v or len(v) > 64:
        return None
    total, pos = 0.0, 0
    while pos < len(v):
        m = _PART.match(v, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total if math.isfinite(total) else None
