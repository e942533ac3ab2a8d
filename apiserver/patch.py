"""The three patch types kube-apiserver takes from Troupe, kopf and kubectl.

- JSON merge patch (RFC 7386): dicts merge, `null` deletes, lists replace.
- Strategic merge patch, good enough for the fields our clients touch: lists
  with a merge key in kube's Go types (conditions by `type`, containers by
  `name`, ports by `containerPort`, ...) merge element by element; lists of
  strings with patchStrategy=merge (finalizers) take the union; the directives
  `$patch: replace|delete`, `$setElementOrder/<field>`, `$retainKeys` and
  `$deleteFromPrimitiveList/<field>` that kubectl sends are understood.
- JSON patch (RFC 6902) with JSON pointers.

All functions return new values and never modify their arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final


class PatchError(ValueError):
    """A patch that cannot be applied (HTTP 422, or 400 for malformed patches)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# Merge keys of list fields, by field name (the Go types' patchMergeKey); the
# parent field disambiguates where kube uses different keys for one name.
MERGE_KEYS: Final[Mapping[str, str]] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "taints": "key",
    "addresses": "type",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}
# Lists of scalars with patchStrategy=merge: set union.
MERGE_SCALAR_LISTS: Final = frozenset({"finalizers"})


def _merge_key(parent: str, name: str) -> str | None:
    if name == "ports":
        return "port" if parent == "spec" else "containerPort"
    return MERGE_KEYS.get(name)


def strategic_merge_patch(target: Any, patch: Any, parent: str = "") -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, Mapping) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            out[name] = [v for v in out.get(name) or [] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
            continue
        old = out.get(key)
        if isinstance(value, list):
            merge_key = _merge_key(parent, key)
            if merge_key is not None and all(isinstance(v, Mapping) for v in value):
                out[key] = _merge_list(old if isinstance(old, list) else [], value, merge_key)
            elif key in MERGE_SCALAR_LISTS:
                have = list(old) if isinstance(old, list) else []
                out[key] = have + [v for v in value if v not in have]
            else:
                out[key] = copy.deepcopy(value)
        else:
            out[key] = strategic_merge_patch(old, value, key)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(old: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = [dict(e) if isinstance(e, Mapping) else e for e in old]
    for item in patch:
        idx = next(
            (
                i
                for i, e in enumerate(out)
                if isinstance(e, Mapping) and e.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
        elif idx is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item, key)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise PatchError(f"path not found: /{'/'.join(parts)}")
    return doc


def _add(doc: Any, parts: list[str], value: Any, replace: bool = False) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {last}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise PatchError(f"index out of range: {last}")
    else:
        raise PatchError(f"cannot add at /{'/'.join(parts)}")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError(f"remove operation does not apply: doc is missing path: /{'/'.join(parts)}")


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid operation: {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), replace=True)
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = _remove(doc, src) if kind == "move" else copy.deepcopy(_walk(doc, src))
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise PatchError(f"testing value {op['path']} failed")
        else:
            raise PatchError(f"unknown operation: {kind}")
    return doc
