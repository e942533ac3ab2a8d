"""JSON in and out, in one place: the watch streams and answers of the API
server (`troupe.kube`) and the simulator's input files are decoded here, the
request bodies encoded here, so the decoder is chosen once.

`loads` refuses NaN and Infinity (not JSON; Python's `json` accepts them)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JSONError", "dumps", "loads"]

JSONError = ValueError  # what `loads` raises on text that is not JSON


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of one JSON document."""
    if isinstance(data, memoryview):
        data = bytes(data)
    return json.loads(data, parse_constant=_no_constant)


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return _encoder.encode(obj).encode()
