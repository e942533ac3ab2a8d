"""The resource.k8s.io/v1 objects the scheduler reads, as values: DeviceClasses,
ResourceSlices (the devices drivers publish) and ResourceClaims (what pods ask
for, and what was allocated), with their readers.

A reader raises `ParseError` naming the field, with the API server's wording;
`parse_dra_object` turns that into an `InvalidObject`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, NamedTuple

from troupe.api.kinds import CLUSTER_SCOPED
from troupe.api.parse import _guarded, parse_timestamp
from troupe.api.quantity import parse_quantity
from troupe.api.readers import (
    as_map,
    get_bool,
    get_int,
    get_list,
    get_map,
    get_objs,
    get_str,
    get_str_list,
    invalid,
    required,
    show,
    unsupported,
)
from troupe.api.selectors import parse_node_selector
from troupe.api.taints import parse_toleration
from troupe.api.types import (
    InvalidObject,
    NodeSelector,
    ParseError,
    Taint,
    TaintEffect,
    Toleration,
)
from troupe.dra.semver import parse_semver

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
class CapacityPolicy:
    """How a claim may take part of a capacity (`capacity[...].requestPolicy`):
    what it takes when it asks for nothing, and the amounts it may take (a
    range from `min` in steps of `step` up to `max`, or a list of values)."""

    default: Fraction | None = None
    min: Fraction | None = None
    max: Fraction | None = None
    step: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()


@dataclass(frozen=True, slots=True)
class CounterUse:
    """What a device takes from one of its pool's counter sets while allocated."""

    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class Device:
    id: DeviceID
    # Fully qualified names ("<domain>/<name>"; unqualified ones take the driver's).
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, Fraction]
    taints: tuple[Taint, ...] = ()
    # Partitionable devices: the shared counters this device uses up.
    consumes: tuple[CounterUse, ...] = ()
    # Consumable capacity: claims share the device, each taking part of its capacity.
    multi: bool = False
    policies: Mapping[str, CapacityPolicy] = field(default_factory=dict, compare=False)
    # The capacity names as the device publishes them (qualified -> published),
    # which is how allocation results name what they consume.
    published: Mapping[str, str] = field(default_factory=dict, compare=False)
    binds_to_node: bool = False
    # Where the device is usable, when its slice leaves that to each device
    # (`perDeviceNodeSelection`).
    node_name: str = ""
    node_selector: NodeSelector | None = None
    node_selector_raw: Mapping[str, Any] = field(default_factory=dict, compare=False)
    all_nodes: bool = False
    # Conditions the driver sets in the claim's status.devices before the pod may
    # bind (all True), or that make the binding fail (any True).
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()


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
    # Each device says where it is usable (nodeName, nodeSelector or allNodes).
    per_device: bool = False
    # Counter sets shared by the pool's partitionable devices: name -> counter -> value.
    counter_sets: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict, compare=False)
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
    # Consumable capacity asked of each device (`capacity.requests`), names as written.
    capacity: tuple[tuple[str, Fraction], ...] = ()
    # The tolerations as written: allocation results record them.
    tolerations_raw: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    # `exactly`: one alternative; `firstAvailable`: in the order of preference.
    alternatives: tuple[ExactRequest, ...]
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request of the claim
    match_attribute: str = ""  # all devices have it, with one value
    distinct_attribute: str = ""  # all devices have it, each with another value


@dataclass(frozen=True, slots=True)
class AllocationResult:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    # A device claims share: this allocation's share of it, and what it takes.
    share_id: str = ""
    consumed: Mapping[str, Fraction] = field(default_factory=dict, compare=False)
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    @property
    def device_id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[AllocationResult, ...]
    node_selector: NodeSelector | None = None
    # allocationTimestamp (epoch seconds; None when not written): when the
    # binding conditions' time started.
    timestamp: float | None = field(default=None, compare=False)
    # The allocation as written (status.allocation), to write back unchanged.
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class DeviceCondition:
    """A condition the driver reports for an allocated device (status.devices)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


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
    # status.devices: the conditions drivers report for the allocated devices.
    device_status: Mapping[DeviceID, tuple[DeviceCondition, ...]] = field(
        default_factory=dict, compare=False
    )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """An admin's taint on the devices its selector picks (all of driver,
    pool, device, class and CEL selectors that are set must match)."""

    name: str
    resource_version: str
    taint: Taint | None  # None: an effect that does not keep pods off (None)
    driver: str = ""
    pool: str = ""
    device: str = ""
    device_class: str = ""
    selectors: tuple[str, ...] = ()
    selected: bool = True  # False: no deviceSelector, which taints nothing

    @property
    def key(self) -> str:
        return self.name


DraObject = ResourceClaim | ResourceSlice | DeviceClass | DeviceTaintRule


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
        if parse_semver(value) is None:
            raise invalid(f"{path}.version", value, "must be a semantic version")
        return Version(value)
    return value


def _quantity(m: Mapping[str, Any], key: str, prefix: str) -> Fraction | None:
    v = m.get(key)
    return None if v is None else parse_quantity(v, f"{prefix}{key}")


def _policy(v: Mapping[str, Any], path: str) -> CapacityPolicy:
    prefix = f"{path}."
    rng = get_map(v, "validRange", prefix)
    values = tuple(
        parse_quantity(q, f"{prefix}validValues[{i}]")
        for i, q in enumerate(get_list(v, "validValues", prefix))
    )
    if rng and values:
        raise ParseError(
            path, "Invalid value: only one of `validRange` or `validValues` may be set"
        )
    rp = f"{prefix}validRange."
    policy = CapacityPolicy(
        default=_quantity(v, "default", prefix),
        min=_quantity(rng, "min", rp) if rng else None,
        max=_quantity(rng, "max", rp) if rng else None,
        step=_quantity(rng, "step", rp) if rng else None,
        valid_values=values,
    )
    if rng and policy.min is None:
        raise required(f"{rp}min")
    if policy.step is not None and policy.step <= 0:
        raise invalid(f"{rp}step", str(v["validRange"]["step"]), "must be greater than zero")
    return policy


def _node_choice(
    item: Mapping[str, Any], prefix: str
) -> tuple[str, NodeSelector | None, Mapping[str, Any], bool]:
    """nodeName, nodeSelector (parsed and as written), allNodes."""
    raw = item.get("nodeSelector")
    return (
        get_str(item, "nodeName", prefix),
        parse_node_selector(raw, f"{prefix}nodeSelector"),
        dict(raw or {}),
        get_bool(item, "allNodes", prefix),
    )


def _device(
    item: Mapping[str, Any], prefix: str, driver: str, pool: str, per_device: bool
) -> Device:
    name = get_str(item, "name", prefix)
    if not name:
        raise required(f"{prefix}name")
    attrs = {
        qualified(k, driver): _attribute(v, f"{prefix}attributes[{k}]")
        for k, v in get_map(item, "attributes", prefix).items()
    }
    capacity: dict[str, Fraction] = {}
    policies: dict[str, CapacityPolicy] = {}
    published: dict[str, str] = {}
    for k, v in get_map(item, "capacity", prefix).items():
        path = f"{prefix}capacity[{k}]"
        if not isinstance(v, Mapping) or v.get("value") is None:
            raise required(f"{path}.value")
        q = qualified(k, driver)
        if q in capacity and "/" not in k:
            continue  # the name with the driver's domain wins over the bare one (kube)
        capacity[q] = parse_quantity(v["value"], f"{path}.value")
        published[q] = k
        if v.get("requestPolicy") is not None:
            policies[q] = _policy(
                as_map(v["requestPolicy"], f"{path}.requestPolicy"), f"{path}.requestPolicy"
            )
        else:
            policies.pop(q, None)
    taints = device_taints(item, prefix)
    consumes = []
    seen_sets: set[str] = set()
    for p, c in get_objs(item, "consumesCounters", prefix):
        counter_set = get_str(c, "counterSet", p)
        if not counter_set:
            raise required(f"{p}counterSet")
        if counter_set in seen_sets:
            raise ParseError(f"{p}counterSet", f"Duplicate value: {show(counter_set)}")
        seen_sets.add(counter_set)
        counters = {
            k: _counter(v, f"{p}counters[{k}]") for k, v in get_map(c, "counters", p).items()
        }
        consumes.append(CounterUse(counter_set, counters))
    node_name, node_selector, node_selector_raw, all_nodes = _node_choice(item, prefix)
    chosen = sum((bool(node_name), node_selector is not None, all_nodes))
    if per_device and chosen != 1:
        raise ParseError(
            prefix.rstrip("."),
            "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes` is required "
            "when `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
        )
    if not per_device and chosen:
        raise ParseError(
            prefix.rstrip("."),
            "Forbidden: `nodeName`, `nodeSelector` and `allNodes` can only be set when "
            "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
        )
    return Device(
        DeviceID(driver, pool, name),
        attrs,
        capacity,
        taints,
        consumes=tuple(consumes),
        multi=get_bool(item, "allowMultipleAllocations", prefix),
        policies=policies,
        published=published,
        binds_to_node=get_bool(item, "bindsToNode", prefix),
        node_name=node_name,
        node_selector=node_selector,
        node_selector_raw=node_selector_raw,
        all_nodes=all_nodes,
        binding_conditions=get_str_list(item, "bindingConditions", prefix),
        binding_failure_conditions=get_str_list(item, "bindingFailureConditions", prefix),
    )


def _counter(v: object, path: str) -> Fraction:
    if not isinstance(v, Mapping) or v.get("value") is None:
        raise required(f"{path}.value")
    return parse_quantity(v["value"], f"{path}.value")


def _counter_sets(spec: Mapping[str, Any]) -> dict[str, dict[str, Fraction]]:
    out: dict[str, dict[str, Fraction]] = {}
    for p, c in get_objs(spec, "sharedCounters", "spec."):
        name = get_str(c, "name", p)
        if not name:
            raise required(f"{p}name")
        if name in out:
            raise ParseError(f"{p}name", f"Duplicate value: {show(name)}")
        out[name] = {
            k: _counter(v, f"{p}counters[{k}]") for k, v in get_map(c, "counters", p).items()
        }
    return out


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
    node_name, node_selector, node_selector_raw, all_nodes = _node_choice(spec, "spec.")
    per_device = get_bool(spec, "perDeviceNodeSelection", "spec.")
    chosen = sum((bool(node_name), node_selector is not None, all_nodes, per_device))
    if chosen != 1:
        raise ParseError(
            "spec",
            "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            "`perDeviceNodeSelection` is required",
        )
    devices = tuple(
        _device(d, p, driver, pool_name, per_device) for p, d in get_objs(spec, "devices", "spec.")
    )
    counter_sets = _counter_sets(spec)
    if devices and counter_sets:
        raise ParseError(
            "spec", "Invalid value: only one of `devices` or `sharedCounters` may be set"
        )
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
        node_selector_raw=node_selector_raw,
        per_device=per_device,
        counter_sets=counter_sets,
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


def _exact(item: Mapping[str, Any], prefix: str, name: str) -> ExactRequest:
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
    raw_tolerations = get_objs(item, "tolerations", prefix)
    tolerations = tuple(parse_toleration(t, p) for p, t in raw_tolerations)
    capacity = get_map(get_map(item, "capacity", prefix), "requests", f"{prefix}capacity.")
    asked = tuple(
        (k, parse_quantity(v, f"{prefix}capacity.requests[{k}]")) for k, v in capacity.items()
    )
    return ExactRequest(
        name=name,
        device_class=device_class,
        selectors=_selectors(item, prefix),
        mode=mode,
        count=count,
        admin_access=get_bool(item, "adminAccess", prefix),
        tolerations=tolerations,
        capacity=asked,
        tolerations_raw=tuple(dict(t) for _, t in raw_tolerations),
    )


def _request(item: Mapping[str, Any], prefix: str) -> DeviceRequest:
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
        return DeviceRequest(name, (_exact(exactly, f"{prefix}exactly.", name),))
    alts = []
    for p, sub in first:
        sub_name = get_str(sub, "name", p)
        if not sub_name:
            raise required(f"{p}name")
        alts.append(_exact(sub, p, f"{name}/{sub_name}"))
    return DeviceRequest(name, tuple(alts), first_available=True)


def _allocation(status: Mapping[str, Any]) -> Allocation | None:
    a = status.get("allocation")
    if a is None:
        return None
    if not isinstance(a, Mapping):
        raise invalid("status.allocation", a, "must be an object")
    devices = get_map(a, "devices", "status.allocation.")
    results = []
    for p, r in get_objs(devices, "results", "status.allocation.devices."):
        driver = get_str(r, "driver", p)
        consumed = {
            qualified(k, driver): parse_quantity(v, f"{p}consumedCapacity[{k}]")
            for k, v in get_map(r, "consumedCapacity", p).items()
        }
        results.append(
            AllocationResult(
                request=get_str(r, "request", p),
                driver=driver,
                pool=get_str(r, "pool", p),
                device=get_str(r, "device", p),
                admin_access=get_bool(r, "adminAccess", p),
                share_id=get_str(r, "shareID", p),
                consumed=consumed,
                binding_conditions=get_str_list(r, "bindingConditions", p),
                binding_failure_conditions=get_str_list(r, "bindingFailureConditions", p),
            )
        )
    sel = parse_node_selector(a.get("nodeSelector"), "status.allocation.nodeSelector")
    raw_stamp = a.get("allocationTimestamp")
    stamp = (
        None
        if raw_stamp is None
        else parse_timestamp(raw_stamp, "status.allocation.allocationTimestamp")
    )
    return Allocation(tuple(results), sel, stamp, dict(a))


def _device_status(status: Mapping[str, Any]) -> dict[DeviceID, tuple[DeviceCondition, ...]]:
    out: dict[DeviceID, tuple[DeviceCondition, ...]] = {}
    for p, d in get_objs(status, "devices", "status."):
        conditions = tuple(
            DeviceCondition(
                get_str(c, "type", cp),
                get_str(c, "status", cp),
                get_str(c, "reason", cp),
                get_str(c, "message", cp),
            )
            for cp, c in get_objs(d, "conditions", p)
        )
        out[DeviceID(get_str(d, "driver", p), get_str(d, "pool", p), get_str(d, "device", p))] = (
            conditions
        )
    return out


def _parse_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    md = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    devices = get_map(spec, "devices", "spec.")
    requests = [_request(r, p) for p, r in get_objs(devices, "requests", "spec.devices.")]
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
        match = get_str(c, "matchAttribute", p)
        distinct = get_str(c, "distinctAttribute", p)
        if bool(match) == bool(distinct):
            raise ParseError(
                p.rstrip("."),
                "Invalid value: exactly one of `matchAttribute` or `distinctAttribute` is required",
            )
        constraints.append(Constraint(reqs, match, distinct))
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
        device_status=_device_status(status),
    )


def device_taint(item: Mapping[str, Any], prefix: str) -> Taint | None:
    """A device taint; None for the effects that keep no pod off a device
    ("None", and any effect this version does not know, as kube treats them)."""
    key = get_str(item, "key", prefix)
    if not key:
        raise required(f"{prefix}key")
    effect = get_str(item, "effect", prefix)
    if not effect:
        raise required(f"{prefix}effect")
    if effect not in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE):
        return None
    return Taint(key, get_str(item, "value", prefix), TaintEffect(effect))


def device_taints(item: Mapping[str, Any], prefix: str) -> tuple[Taint, ...]:
    return tuple(
        t for p, x in get_objs(item, "taints", prefix) if (t := device_taint(x, p)) is not None
    )


def _parse_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    md = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    raw = spec.get("taint")
    if not isinstance(raw, Mapping):
        raise required("spec.taint")
    sel = spec.get("deviceSelector")
    if sel is not None and not isinstance(sel, Mapping):
        raise invalid("spec.deviceSelector", sel, "must be an object")
    sel = sel or {}
    p = "spec.deviceSelector."
    return DeviceTaintRule(
        name=get_str(md, "name", "metadata."),
        resource_version=get_str(md, "resourceVersion", "metadata."),
        taint=device_taint(raw, "spec.taint."),
        driver=get_str(sel, "driver", p),
        pool=get_str(sel, "pool", p),
        device=get_str(sel, "device", p),
        device_class=get_str(sel, "deviceClassName", p),
        selectors=_selectors(sel, p),
        selected=spec.get("deviceSelector") is not None,
    )


_PARSERS: Final[dict[str, Callable[[Mapping[str, Any]], DraObject]]] = {
    "ResourceClaim": _parse_claim,
    "ResourceSlice": _parse_slice,
    "DeviceClass": _parse_class,
    "DeviceTaintRule": _parse_taint_rule,
}


def parse_dra_object(kind: str, obj: Mapping[str, Any]) -> DraObject | InvalidObject:
    """A resource.k8s.io object of `kind` (its scope as troupe.api.kinds says)."""
    parse = _PARSERS[kind]
    out: DraObject | InvalidObject = _guarded(kind, obj, kind not in CLUSTER_SCOPED, parse)
    return out


__all__ = [
    "ALL",
    "EXACT_COUNT",
    "RESERVED_FOR_MAX",
    "Allocation",
    "AllocationResult",
    "CapacityPolicy",
    "Constraint",
    "Consumer",
    "CounterUse",
    "Device",
    "DeviceClass",
    "DeviceCondition",
    "DeviceID",
    "DeviceRequest",
    "DeviceTaintRule",
    "ExactRequest",
    "ResourceClaim",
    "ResourceSlice",
    "Version",
    "parse_dra_object",
    "qualified",
]
