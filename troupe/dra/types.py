"""The resource.k8s.io/v1 objects the scheduler reads, as values: DeviceClasses,
ResourceSlices (the devices drivers publish) and ResourceClaims (what pods ask
for, and what was allocated), with their readers.

A reader raises `ParseError` naming the field, with the API server's wording;
`parse_dra_object` turns that into an `InvalidObject`. Fields the allocator
does not handle yet are read and kept in `unsupported` (the path of the first
one), so a claim or a device that uses them is never allocated as if they were
not there: the pod waits with a reason naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, NamedTuple

from troupe.api._read import (
    get_bool,
    get_int,
    get_list,
    get_map,
    get_objs,
    get_str,
    invalid,
    required,
    unsupported,
)
from troupe.api.parse import _guarded
from troupe.api.quantity import parse_quantity
from troupe.api.selectors import parse_node_selector
from troupe.api.taints import parse_taint, parse_toleration
from troupe.api.types import InvalidObject, NodeSelector, ParseError, Taint, Toleration

RESOURCE_API: Final = "resource.k8s.io/v1"
EXACT_COUNT: Final = "ExactCount"
ALL: Final = "All"
# ResourceClaimReservedForMaxSize: how many consumers a claim can have.
RESERVED_FOR_MAX: Final = 256
# ResourceClaim and DeviceRequest limits the API server enforces.
DEVICE_REQUESTS_MAX: Final = 32
SELECTOR_EXPRESSION_MAX: Final = 10 * 1024
FINALIZER: Final = "resource.kubernetes.io/delete-protection"


# ---- values ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Version:
    """A `version` attribute: semantic version 2.0.0."""

    text: str


AttributeValue = bool | int | str | Version


class DeviceID(NamedTuple):
    """A device as allocation results name it (a tuple: hashed in C, as the
    allocator looks devices up in the in-use set for every node it tries)."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Device:
    id: DeviceID
    # Fully qualified names ("<domain>/<name>"; unqualified ones take the driver's).
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, Fraction]
    taints: tuple[Taint, ...] = ()
    # The path of a field this device uses that the allocator does not handle yet.
    unsupported: str = ""


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    resource_version: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str = ""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    devices: tuple[Device, ...] = ()
    node_selector_raw: Mapping[str, Any] = field(default_factory=dict, compare=False)
    unsupported: str = ""

    @property
    def key(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    resource_version: str
    selectors: tuple[str, ...] = ()
    extended_resource_name: str = ""
    config: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)

    @property
    def key(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """One way to satisfy a request: `exactly`, or one of `firstAvailable`.
    `name` is what allocation results carry ("gpu", or "gpu/large")."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    # `exactly`: one alternative; `firstAvailable`: in the order of preference.
    alternatives: tuple[ExactRequest, ...]
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request of the claim
    match_attribute: str


@dataclass(frozen=True, slots=True)
class AllocationResult:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False

    @property
    def device_id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[AllocationResult, ...]
    node_selector: NodeSelector | None = None
    # The allocation as written (status.allocation), to write back unchanged.
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class Consumer:
    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[Consumer, ...] = ()
    deleting: bool = False
    owner_pod_uid: str = ""  # the controlling Pod owner's uid (claims from templates)
    finalizers: tuple[str, ...] = ()
    config: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    unsupported: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


DraObject = ResourceClaim | ResourceSlice | DeviceClass


# ---- readers ---------------------------------------------------------------------


def qualified(name: str, driver: str) -> str:
    """An attribute or capacity name with its domain (the driver's when none)."""
    return name if "/" in name else f"{driver}/{name}"


def _attribute(v: object, path: str) -> AttributeValue:
    if not isinstance(v, Mapping):
        raise invalid(path, v, "must be an object")
    set_ = [k for k in ("int", "bool", "string", "version") if v.get(k) is not None]
    if len(set_) != 1:
        raise invalid(path, "object", "exactly one value must be specified")
    kind = set_[0]
    value = v[kind]
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"{path}.int", value, "must be an integer")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise invalid(f"{path}.bool", value, "must be a boolean")
        return value
    if not isinstance(value, str):
        raise invalid(f"{path}.{kind}", value, "must be a string")
    if kind == "version":
        from troupe.dra.cel import parse_semver

        if parse_semver(value) is None:
            raise invalid(f"{path}.version", value, "must be a semantic version")
        return Version(value)
    return value


def _device(item: Mapping[str, Any], prefix: str, driver: str, pool: str) -> Device:
    name = get_str(item, "name", prefix)
    if not name:
        raise required(f"{prefix}name")
    attrs = {
        qualified(k, driver): _attribute(v, f"{prefix}attributes[{k}]")
        for k, v in get_map(item, "attributes", prefix).items()
    }
    capacity: dict[str, Fraction] = {}
    for k, v in get_map(item, "capacity", prefix).items():
        path = f"{prefix}capacity[{k}]"
        if not isinstance(v, Mapping) or v.get("value") is None:
            raise required(f"{path}.value")
        capacity[qualified(k, driver)] = parse_quantity(v["value"], f"{path}.value")
    taints = tuple(parse_taint(t, p) for p, t in get_objs(item, "taints", prefix))
    odd = ""
    for f in (
        "consumesCounters",
        "allowMultipleAllocations",
        "bindsToNode",
        "bindingConditions",
        "bindingFailureConditions",
    ):
        if item.get(f) not in (None, [], False):
            odd = f"{prefix}{f}"
            break
    else:
        for k, v in get_map(item, "capacity", prefix).items():
            if isinstance(v, Mapping) and v.get("requestPolicy") is not None:
                odd = f"{prefix}capacity[{k}].requestPolicy"
                break
    return Device(DeviceID(driver, pool, name), attrs, capacity, taints, odd)


def _parse_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    md = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    driver = get_str(spec, "driver", "spec.")
    if not driver:
        raise required("spec.driver")
    pool = get_map(spec, "pool", "spec.")
    pool_name = get_str(pool, "name", "spec.pool.")
    if not pool_name:
        raise required("spec.pool.name")
    node_name = get_str(spec, "nodeName", "spec.")
    node_selector = parse_node_selector(spec.get("nodeSelector"), "spec.nodeSelector")
    all_nodes = get_bool(spec, "allNodes", "spec.")
    per_device = get_bool(spec, "perDeviceNodeSelection", "spec.")
    chosen = sum((bool(node_name), node_selector is not None, all_nodes, per_device))
    if chosen != 1:
        raise ParseError(
            "spec",
            "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            "`perDeviceNodeSelection` is required",
        )
    devices = tuple(_device(d, p, driver, pool_name) for p, d in get_objs(spec, "devices", "spec."))
    odd = "spec.perDeviceNodeSelection" if per_device else ""
    if not odd and get_list(spec, "sharedCounters", "spec."):
        odd = "spec.sharedCounters"
    return ResourceSlice(
        name=get_str(md, "name", "metadata."),
        resource_version=get_str(md, "resourceVersion", "metadata."),
        driver=driver,
        pool=pool_name,
        generation=get_int(pool, "generation", "spec.pool.") or 0,
        slice_count=get_int(pool, "resourceSliceCount", "spec.pool.") or 1,
        node_name=node_name,
        node_selector=node_selector,
        all_nodes=all_nodes,
        devices=devices,
        node_selector_raw=dict(spec.get("nodeSelector") or {}),
        unsupported=odd,
    )


def _selectors(obj: Mapping[str, Any], prefix: str) -> tuple[str, ...]:
    out = []
    for p, s in get_objs(obj, "selectors", prefix):
        cel = get_map(s, "cel", p)
        expr = get_str(cel, "expression", f"{p}cel.")
        if not expr:
            raise required(f"{p}cel.expression")
        if len(expr) > SELECTOR_EXPRESSION_MAX:
            raise ParseError(
                f"{p}cel.expression",
                f"Too long: may not be more than {SELECTOR_EXPRESSION_MAX} bytes",
            )
        out.append(expr)
    return tuple(out)


def _parse_class(obj: Mapping[str, Any]) -> DeviceClass:
    md = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    return DeviceClass(
        name=get_str(md, "name", "metadata."),
        resource_version=get_str(md, "resourceVersion", "metadata."),
        selectors=_selectors(spec, "spec."),
        extended_resource_name=get_str(spec, "extendedResourceName", "spec."),
        config=tuple(dict(c) for _, c in get_objs(spec, "config", "spec.")),
    )


def _exact(item: Mapping[str, Any], prefix: str, name: str) -> tuple[ExactRequest, str]:
    device_class = get_str(item, "deviceClassName", prefix)
    if not device_class:
        raise required(f"{prefix}deviceClassName")
    mode = get_str(item, "allocationMode", prefix) or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise unsupported(f"{prefix}allocationMode", mode, [ALL, EXACT_COUNT])
    count = get_int(item, "count", prefix)
    if mode == ALL and count is not None and count != 0:
        raise invalid(f"{prefix}count", count, "must not be specified when allocationMode is All")
    if count is None:
        count = 1
    if mode == EXACT_COUNT and count <= 0:
        raise invalid(f"{prefix}count", count, "must be greater than zero")
    tolerations = tuple(parse_toleration(t, p) for p, t in get_objs(item, "tolerations", prefix))
    odd = f"{prefix}capacity" if item.get("capacity") is not None else ""
    return (
        ExactRequest(
            name=name,
            device_class=device_class,
            selectors=_selectors(item, prefix),
            mode=mode,
            count=count,
            admin_access=get_bool(item, "adminAccess", prefix),
            tolerations=tolerations,
        ),
        odd,
    )


def _request(item: Mapping[str, Any], prefix: str) -> tuple[DeviceRequest, str]:
    name = get_str(item, "name", prefix)
    if not name:
        raise required(f"{prefix}name")
    exactly = item.get("exactly")
    first = get_objs(item, "firstAvailable", prefix)
    if (exactly is None) == (not first):
        raise ParseError(
            prefix.rstrip("."),
            "Invalid value: exactly one of `exactly` or `firstAvailable` is required",
        )
    if exactly is not None:
        if not isinstance(exactly, Mapping):
            raise invalid(f"{prefix}exactly", exactly, "must be an object")
        alt, odd = _exact(exactly, f"{prefix}exactly.", name)
        return DeviceRequest(name, (alt,)), odd
    alts = []
    odd = ""
    for p, sub in first:
        sub_name = get_str(sub, "name", p)
        if not sub_name:
            raise required(f"{p}name")
        alt, o = _exact(sub, p, f"{name}/{sub_name}")
        alts.append(alt)
        odd = odd or o
    return DeviceRequest(name, tuple(alts), first_available=True), odd


def _allocation(status: Mapping[str, Any]) -> Allocation | None:
    a = status.get("allocation")
    if a is None:
        return None
    if not isinstance(a, Mapping):
        raise invalid("status.allocation", a, "must be an object")
    devices = get_map(a, "devices", "status.allocation.")
    results = []
    for p, r in get_objs(devices, "results", "status.allocation.devices."):
        results.append(
            AllocationResult(
                request=get_str(r, "request", p),
                driver=get_str(r, "driver", p),
                pool=get_str(r, "pool", p),
                device=get_str(r, "device", p),
                admin_access=get_bool(r, "adminAccess", p),
            )
        )
    sel = parse_node_selector(a.get("nodeSelector"), "status.allocation.nodeSelector")
    return Allocation(tuple(results), sel, dict(a))


def _parse_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    md = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    devices = get_map(spec, "devices", "spec.")
    requests = []
    odd = ""
    for p, r in get_objs(devices, "requests", "spec.devices."):
        req, o = _request(r, p)
        requests.append(req)
        odd = odd or o
    if len(requests) > DEVICE_REQUESTS_MAX:
        raise ParseError(
            "spec.devices.requests",
            f"Too many: {len(requests)}: must have at most {DEVICE_REQUESTS_MAX} items",
        )
    names = {r.name for r in requests}
    constraints = []
    for p, c in get_objs(devices, "constraints", "spec.devices."):
        reqs = tuple(get_list(c, "requests", p))
        for i, r in enumerate(reqs):
            if not isinstance(r, str) or r.partition("/")[0] not in names:
                raise invalid(f"{p}requests[{i}]", r, "must be the name of a request in the claim")
        attr = get_str(c, "matchAttribute", p)
        if attr:
            constraints.append(Constraint(reqs, attr))
        elif c.get("distinctAttribute") is not None:
            odd = odd or f"{p}distinctAttribute"
        else:
            raise required(f"{p}matchAttribute")
    status = get_map(obj, "status", "")
    reserved = []
    for p, c in get_objs(status, "reservedFor", "status."):
        reserved.append(
            Consumer(
                resource=get_str(c, "resource", p),
                name=get_str(c, "name", p),
                uid=get_str(c, "uid", p),
                api_group=get_str(c, "apiGroup", p),
            )
        )
    owner = ""
    for ref_path, ref in get_objs(md, "ownerReferences", "metadata."):
        is_pod = ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1"
        if is_pod and ref.get("controller") is True:
            owner = get_str(ref, "uid", ref_path)
    return ResourceClaim(
        namespace=get_str(md, "namespace", "metadata.") or "default",
        name=get_str(md, "name", "metadata."),
        uid=get_str(md, "uid", "metadata."),
        resource_version=get_str(md, "resourceVersion", "metadata."),
        requests=tuple(requests),
        constraints=tuple(constraints),
        allocation=_allocation(status),
        reserved_for=tuple(reserved),
        deleting=md.get("deletionTimestamp") is not None,
        owner_pod_uid=owner,
        finalizers=tuple(str(f) for f in get_list(md, "finalizers", "metadata.")),
        # Opaque driver configuration: copied into the allocation, not read here.
        config=tuple(dict(c) for _, c in get_objs(devices, "config", "spec.devices.")),
        unsupported=odd,
    )


_PARSERS: Final[dict[str, tuple[bool, Callable[[Mapping[str, Any]], DraObject]]]] = {
    "ResourceClaim": (True, _parse_claim),
    "ResourceSlice": (False, _parse_slice),
    "DeviceClass": (False, _parse_class),
}
DRA_KINDS: Final = tuple(_PARSERS)


def parse_dra_object(kind: str, obj: Mapping[str, Any]) -> DraObject | InvalidObject:
    namespaced, parse = _PARSERS[kind]
    out: DraObject | InvalidObject = _guarded(kind, obj, namespaced, parse)
    return out


__all__ = [
    "ALL",
    "DRA_KINDS",
    "EXACT_COUNT",
    "RESERVED_FOR_MAX",
    "Allocation",
    "AllocationResult",
    "Constraint",
    "Consumer",
    "Device",
    "DeviceClass",
    "DeviceID",
    "DeviceRequest",
    "ExactRequest",
    "ResourceClaim",
    "ResourceSlice",
    "Version",
    "parse_dra_object",
    "qualified",
]
