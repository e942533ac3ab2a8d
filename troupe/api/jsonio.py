"""JSON in and out, in one place: the watch streams and answers of the API
server (`troupe.kube`) and the simulator's input files are decoded here, the
request bodies encoded here, so the decoder is chosen once.

The decoder is orjson's. Measured against the standard library and msgspec on
Troupe's own input (`python -m bench.jsondecode`, docs/benchmarks.md), it
decodes a pod's watch line 3 to 5 times faster than `json` as this module
called it (a decoder built per call, to refuse NaN; 2 to 3 times faster than
one decoder made once) and a `kubectl get -o json` dump 1.5 times faster.
msgspec's untyped decoder is as fast (within 10% either way, from run to run)
builds a dump in less memory (52 MiB for a 26 MiB List, orjson 88, json 74)
and keeps integers past 64 bits exact, but its errors name a byte, not a
line, and are not `json`'s; orjson's are `json.JSONDecodeError`s, which
`troupe simulate` quotes by line.
orjson is also strict where `json` is lenient:

- NaN, Infinity and -Infinity are refused (not JSON; `json` accepts them);
- text that is not UTF-8, a byte order mark and a lone surrogate
  (``"\\ud800"``, which `json` decodes into a string that cannot be encoded
  again) are refused;
- nesting deeper than 1024 levels is refused, in bounded time and stack;
- integers are exact from -2**63 to 2**64-1, the range of every integer the
  API server sends (its fields are int32 and int64); one past that range
  comes back as the nearest float, and one too large for a float is refused.

Whatever `loads` refuses raises `JSONError`, orjson's `JSONDecodeError`, which
is `json.JSONDecodeError` (``msg``, ``lineno``, ``colno``) and so a
ValueError.

`dumps_indented` writes what people read (`troupe simulate -o json`): the
text of ``json.dumps(obj, indent=2)``, by orjson (ten times faster on a
simulation's output) wherever orjson writes the same, which is everywhere but
three cases, left to `json`: text that is not ASCII (`json` escapes it as
``\\uXXXX``), floats below 1e-4 (orjson writes 0.00001 and 1e-7 where `json`
writes 1e-05 and 1e-07), and what orjson cannot encode (integers past 64 bits).
The first two are found on orjson's text (a false alarm, on a string with a
word such as "10.0000", costs only the time); a non-finite float, which
`json` writes as NaN or Infinity (not JSON) and orjson as null, is not looked
for: no output holds one."""

from __future__ import annotations

import json
import re
from typing import Any, Final

import orjson

__all__ = ["JSONError", "dumps", "dumps_indented", "loads"]

JSONError = orjson.JSONDecodeError  # what `loads` raises on text that is not JSON

# Keys that are not strings (ints, enums) are written as strings, as `json` does.
_DUMPS_OPTIONS: Final = orjson.OPT_NON_STR_KEYS
# Where orjson's text may differ from json's: a float below 1e-4 (see above),
# if what stands before it, from the space or newline before, is a number's start.
_SMALL_FLOAT: Final = re.compile(rb"0\.0000|e-[0-9](?![0-9])")
_NUMBER_START: Final = re.compile(rb"-?[0-9.]*")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of one JSON document."""
    return orjson.loads(data)


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return orjson.dumps(obj, option=_DUMPS_OPTIONS)


def dumps_indented(obj: Any) -> str:
    """The text of ``json.dumps(obj, indent=2)``: orjson's where it is the same."""
    try:
        out = orjson.dumps(obj, option=_DUMPS_OPTIONS | orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        return json.dumps(obj, indent=2)
    if not out.isascii() or _small_float(out):
        return json.dumps(obj, indent=2)
    return out.decode()


def _small_float(text: bytes) -> bool:
    """Whether orjson's indented text may hold a float below 1e-4."""
    for m in _SMALL_FLOAT.finditer(text):
        at = m.start()
        start = max(text.rfind(b" ", 0, at), text.rfind(b"\n", 0, at)) + 1
        if _NUMBER_START.fullmatch(text, start, at):
            return True
    return False
