"""Just enough of Kubernetes' protobuf encoding for the bodies kubectl's typed clients send.

Commands such as `kubectl create namespace` post protobuf (`application/vnd.kubernetes.protobuf`)
and do not fall back to JSON. The envelope is the magic `k8s\\0` and a runtime.Unknown
(typeMeta, raw); `raw` is the object, decoded here for the few kinds whose fields we
know (field numbers from k8s.io/api generated.proto). Any other kind is refused (415)
rather than half-read.
"""

from __future__ import annotations

import base64
from typing import Any, Final

MAGIC: Final = b"k8s\x00"


class ProtobufError(ValueError):
    pass


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: varints as int, length-delimited as bytes."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= len(data):
                raise ProtobufError("truncated varint")
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    while pos < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 2:
            size = varint()
            out.append((number, data[pos : pos + size]))
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _str(v: int | bytes) -> str:
    if not isinstance(v, bytes):
        raise ProtobufError("expected a string")
    return v.decode()


def _map(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for entry in entries:
        kv = dict(_fields(entry))
        out[_str(kv.get(1, b""))] = _str(kv.get(2, b""))
    return out


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    labels: list[bytes] = []
    annotations: list[bytes] = []
    finalizers: list[str] = []
    for number, value in _fields(data):
        if number in (1, 2, 3, 6) and isinstance(value, bytes) and value:
            key = {1: "name", 2: "generateName", 3: "namespace", 6: "resourceVersion"}[number]
            meta[key] = value.decode()
        elif number == 11 and isinstance(value, bytes):
            labels.append(value)
        elif number == 12 and isinstance(value, bytes):
            annotations.append(value)
        elif number == 14:
            finalizers.append(_str(value))
    if labels:
        meta["labels"] = _map(labels)
    if annotations:
        meta["annotations"] = _map(annotations)
    if finalizers:
        meta["finalizers"] = finalizers
    return meta


def _namespace(fields: list[tuple[int, int | bytes]], obj: dict[str, Any]) -> None:
    for number, value in fields:
        if number == 2 and isinstance(value, bytes):
            finalizers = [_str(v) for n, v in _fields(value) if n == 1]
            obj["spec"] = {"finalizers": finalizers} if finalizers else {}


def _config_map(fields: list[tuple[int, int | bytes]], obj: dict[str, Any]) -> None:
    data = [v for n, v in fields if n == 2 and isinstance(v, bytes)]
    if data:
        obj["data"] = _map(data)
    for number, value in fields:
        if number == 4:
            obj["immutable"] = bool(value)


def _service_account(fields: list[tuple[int, int | bytes]], obj: dict[str, Any]) -> None:
    for number, value in fields:
        if number == 4:
            obj["automountServiceAccountToken"] = bool(value)


def _priority_class(fields: list[tuple[int, int | bytes]], obj: dict[str, Any]) -> None:
    for number, value in fields:
        if number == 2 and isinstance(value, int):
            obj["value"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3:
            obj["globalDefault"] = bool(value)
        elif number == 4:
            obj["description"] = _str(value)
        elif number == 5:
            obj["preemptionPolicy"] = _str(value)


def _secret(fields: list[tuple[int, int | bytes]], obj: dict[str, Any]) -> None:
    """Secret: data (map<string, bytes>, base64 in JSON) = 2, type = 3, stringData = 4,
    immutable = 5 (Helm keeps its releases in Secrets and sends them this way)."""
    data: dict[str, str] = {}
    string_data: list[bytes] = []
    for number, value in fields:
        if number == 2 and isinstance(value, bytes):
            kv = dict(_fields(value))
            raw = kv.get(2, b"")
            if not isinstance(raw, bytes):
                raise ProtobufError("expected bytes")
            data[_str(kv.get(1, b""))] = base64.b64encode(raw).decode()
        elif number == 3:
            obj["type"] = _str(value)
        elif number == 4 and isinstance(value, bytes):
            string_data.append(value)
        elif number == 5:
            obj["immutable"] = bool(value)
    if data:
        obj["data"] = data
    if string_data:
        obj["stringData"] = _map(string_data)


def _delete_options(fields: list[tuple[int, int | bytes]], obj: dict[str, Any]) -> None:
    """meta/v1 DeleteOptions: gracePeriodSeconds = 1, preconditions = 2 (uid = 1,
    resourceVersion = 2), orphanDependents = 3, propagationPolicy = 4, dryRun = 5."""
    obj.pop("metadata", None)
    for number, value in fields:
        if number == 1 and isinstance(value, int):
            obj["gracePeriodSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 2 and isinstance(value, bytes):
            pre = {
                {1: "uid", 2: "resourceVersion"}[n]: _str(v)
                for n, v in _fields(value)
                if n in (1, 2)
            }
            obj["preconditions"] = pre
        elif number == 3:
            obj["orphanDependents"] = bool(value)
        elif number == 4:
            obj["propagationPolicy"] = _str(value)
        elif number == 5:
            obj.setdefault("dryRun", []).append(_str(value))


_KINDS: Final = {
    ("v1", "DeleteOptions"): _delete_options,
    ("meta.k8s.io/v1", "DeleteOptions"): _delete_options,
    ("v1", "Secret"): _secret,
    ("scheduling.k8s.io/v1", "PriorityClass"): _priority_class,
    ("v1", "Namespace"): _namespace,
    ("v1", "ConfigMap"): _config_map,
    ("v1", "ServiceAccount"): _service_account,
}


def decode(body: bytes) -> dict[str, Any]:
    """The object in a Kubernetes protobuf body, as the JSON form would carry it."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body")
    envelope = dict(_fields(body[len(MAGIC) :]))
    type_meta = dict(_fields(envelope.get(1, b"")))  # type: ignore[arg-type]
    api_version, kind = _str(type_meta.get(1, b"")), _str(type_meta.get(2, b""))
    read = _KINDS.get((api_version, kind))
    if read is None:
        raise ProtobufError(f"protobuf bodies of {api_version} {kind} are not understood")
    fields = _fields(envelope.get(2, b""))  # type: ignore[arg-type]
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {}}
    for number, value in fields:
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _object_meta(value)
    read(fields, obj)
    return obj
