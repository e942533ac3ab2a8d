"""Typed readers over a Kubernetes object's dicts, shared by the parsers.

Each reader takes the enclosing mapping, a key and the *path prefix* of that
mapping (``""`` at the top, else ending in ``"."``, e.g. ``"spec.containers[0]."``)
and returns the value with the expected type, or raises `ParseError` naming
``prefix + key``. Absent and ``null`` mean "not set" everywhere. Messages follow
the Kubernetes API server's wording ("Required value", "Unsupported value",
"Invalid value") so that users see what `kubectl apply` would have told them.

Objects come from JSON (the API server, via kopf) or YAML (the simulator): lists
may be lists or tuples and mappings any `Mapping`. Label-like string maps accept
scalars written unquoted in YAML (``version: 2``) and keep them as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from troupe.api.types import ParseError

EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})
_INT_TEXT: Final = re.compile(r"[+-]?[0-9]+")


def show(v: object) -> str:
    """A value as the API server quotes it in messages."""
    if isinstance(v, str | bool | int | float) or v is None:
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


def get_map(obj: Mapping[str, Any], key: str, prefix: str) -> Mapping[str, Any]:
    v = obj.get(key)
    if v is None:
        return EMPTY
    if v.__class__ is not dict and not isinstance(v, Mapping):  # dict: no ABC check
        raise invalid(prefix + key, v, "must be an object")
    return v


def as_map(v: object, path: str) -> Mapping[str, Any]:
    if v.__class__ is not dict and not isinstance(v, Mapping):
        raise invalid(path, v, "must be an object")
    return v


def get_list(obj: Mapping[str, Any], key: str, prefix: str) -> Sequence[Any]:
    v = obj.get(key)
    if v is None:
        return ()
    if not isinstance(v, list | tuple):
        raise invalid(prefix + key, v, "must be a list")
    return v


def get_str(obj: Mapping[str, Any], key: str, prefix: str, default: str = "") -> str:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise invalid(prefix + key, v, "must be a string")
    return v


def int_value(v: object, path: str) -> int:
    """An integer: a JSON/YAML integer, an integral float, or decimal digits as text."""
    if isinstance(v, bool):
        raise invalid(path, v, "must be an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and len(v) <= 40 and _INT_TEXT.fullmatch(v):
        return int(v)
    raise invalid(path, v, "must be an integer")


def get_int(obj: Mapping[str, Any], key: str, prefix: str) -> int | None:
    v = obj.get(key)
    return None if v is None else int_value(v, prefix + key)


def get_bool(obj: Mapping[str, Any], key: str, prefix: str, default: bool = False) -> bool:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise invalid(prefix + key, v, "must be a boolean")
    return v


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
    return tuple(
        x if isinstance(x, str) else scalar_text(x, f"{prefix}{key}[{i}]")
        for i, x in enumerate(items)
    )


def get_objs(obj: Mapping[str, Any], key: str, prefix: str) -> list[tuple[str, Mapping[str, Any]]]:
    """A list of objects, each with its own path prefix (``"spec.containers[0]."``)."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for i, item in enumerate(get_list(obj, key, prefix)):
        p = f"{prefix}{key}[{i}]"
        if item.__class__ is not dict and not isinstance(item, Mapping):
            raise invalid(p, item, "must be an object")
        out.append((p + ".", item))
    return out
