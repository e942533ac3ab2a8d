"""The structured allocator against more cases of kube's allocator test table
(kubernetes/kubernetes, staging/src/k8s.io/dynamic-resource-allocation/
structured/internal/allocatortesting/allocator_testing.go), case by case under
their upstream names (the test ids): partitionable devices (shared counters,
counter sets in other slices of the pool, invalid pools, devices on other nodes
using a pool's counters, per-device node selection), consumable capacity
(allowMultipleAllocations, request policies, capacity requests, shares already
allocated), distinctAttribute constraints, bindsToNode devices and devices with
binding conditions. The other cases of the table are in
test_dra_allocator_upstream.py.

Troupe behaves as kube with DRAPartitionableDevices, DRAConsumableCapacity,
DRADeviceBindingConditions and DRADeviceTaints on: a device with binding
conditions is allocated, pools that have such devices are tried after all
others, and each result for such a device carries the device's
bindingConditions and bindingFailureConditions. Upstream's allocated state is
expressed as claims already allocated in the store: `allocatedDevices` as whole
devices, `allocatedCapacityDevices` as shares (results with shareID and
consumedCapacity). As upstream, results are compared without order within an
allocation (allocations: one a claim, in the claims' order), share IDs are
replaced by a marker (they must be fresh UUIDs, none twice), binding conditions
and binding failure conditions are compared in order (absent as empty), and
node selectors are compared without order of terms, requirements and values.
Each case also asks whether the claims fit without building the allocation
(`build=False`, what Filter asks): the answer must agree.
Where kube reports "invalid resource pools were encountered" (not fatal),
Troupe finds no allocation (None).

Changed facts: upstream builds some objects the API server would refuse (its
allocator tests skip validation). Here counter sets and device counter
consumptions that upstream leaves empty have one counter (the case's point,
which counter set or counter is missing or named twice, is kept), and a third
subrequest that repeats the name `subReq-1` is named `subReq-2` (it is never
reached).

Not ported:
- feature gate off: partitionable-devices-disabled-device-consumes-counters,
  partitionable-devices-disabled-other-device-do-not-consume-counters,
  partitionable-devices-disabled-per-device-node-selection,
  consumable-capacity-disabled-feature,
  consumable-capacity-disabled-feature-with-prioritized-list,
  binding-conditions-without-feature-gate;
- with-distinct-constraints-unknown-type-attribute: an attribute without a
  value, which the parser refuses (as the API server), so the allocator never
  sees it;
- the list-attributes-* cases with list-typed attribute values
  (DRAListTypeAttributes, not part of these features); the two with scalar
  values (list-attributes-distinct-constraint-scalar-string-values-*) are
  ported as distinctAttribute cases.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Final, NamedTuple

import pytest

from tests.unit.test_dra_allocator_upstream import (
    API,
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    NODE2,
    PLANET_KEY,
    REGION_KEY,
    claim,
    cls,
    dev,
    label_selector,
    local_selector,
    req,
    store_of,
)
from troupe.api.quantity import parse_quantity
from troupe.dra.allocator import allocate
from troupe.dra.types import ResourceClaim, parse_dra_object

LABELS = {REGION_KEY: "r1", PLANET_KEY: "earth"}
POOL1, POOL2 = "pool-1", "pool-2"
REQ0, REQ1, REQ2, REQ3 = "req-0", "req-1", "req-2", "req-3"
SUB0, SUB1 = "subReq-0", "subReq-1"
D1, D2, D3, D4 = "device-1", "device-2", "device-3", "device-4"
CS1, CS2 = "counter-set-1", "counter-set-2"
CAP0, CAP1 = "capacity-0", "capacity-1"
ALL_NODES, PER_DEVICE = "<all nodes>", "<per device>"
LOCAL = "local"  # the allocation's node selector names node-1

Quantities = Mapping[str, str]


# ---- builders ---------------------------------------------------------------------


def multi_cls(name: str, driver: str, multi: bool) -> dict[str, Any]:
    """A class selecting the driver's devices that do (or do not) allow
    multiple allocations."""
    c = cls(name, driver)
    flag = "true" if multi else "false"
    expr = f'device.driver == "{driver}" && device.allowMultipleAllocations == {flag}'
    c["spec"]["selectors"] = [{"cel": {"expression": expr}}]
    return c


def _values(q: Quantities) -> dict[str, Any]:
    return {k: {"value": v} for k, v in q.items()}


def pdev(
    name: str,
    capacity: Quantities | None = None,
    *,
    attrs: Mapping[str, Any] | None = None,
    consumes: Mapping[str, Quantities] | None = None,
    from_counters: bool = False,
    multi: bool = False,
    ranged: Quantities | None = None,
    valid_values: tuple[str, Quantities, Sequence[str]] | None = None,
    node: str = "",
    selector: Mapping[str, Any] | None = None,
    all_nodes: bool = False,
    binds_to_node: bool = False,
    binding: tuple[list[str], list[str]] | None = None,
    taints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A device. `consumes`: counter set -> counters it uses; `from_counters`:
    its capacity is those counters (a name used in two sets: the later one).
    `ranged`: capacities with the request policy default 2, valid range 2 to 4
    in steps of 2. `valid_values`: (default, capacities, more valid values)."""
    out = dev(name, **(attrs or {}))
    if capacity:
        out["capacity"] = _values(capacity)
    if consumes:
        out["consumesCounters"] = [
            {"counterSet": s, "counters": _values(c)} for s, c in consumes.items()
        ]
        if from_counters:
            out["capacity"] = {k: {"value": v} for c in consumes.values() for k, v in c.items()}
    if multi:
        out["allowMultipleAllocations"] = True
    for k, v in (ranged or {}).items():
        out.setdefault("capacity", {})[k] = {
            "value": v,
            "requestPolicy": {
                "default": "2",
                "validRange": {"min": "2", "step": "2", "max": "4"},
            },
        }
    if valid_values is not None:
        default, caps, more = valid_values
        for k, v in caps.items():
            out.setdefault("capacity", {})[k] = {
                "value": v,
                "requestPolicy": {"default": default, "validValues": [default, *more]},
            }
    if node:
        out["nodeName"] = node
    if selector is not None:
        out["nodeSelector"] = selector
    if all_nodes:
        out["allNodes"] = True
    if binds_to_node:
        out["bindsToNode"] = True
    if binding is not None:
        out["bindingConditions"], out["bindingFailureConditions"] = binding
    if taints:
        out["taints"] = taints
    return out


# Slice names in the order the slices are written: the store goes through a
# pool's slices by name, upstream's allocator in the order it is given them.
_slice_names = itertools.count()


def _slice(pool: str, driver: str, where: str | Mapping[str, Any], count: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
    }
    if isinstance(where, Mapping):
        spec["nodeSelector"] = dict(where)
    elif where == ALL_NODES:
        spec["allNodes"] = True
    elif where == PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = where
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"slice-{next(_slice_names):06d}", "resourceVersion": "1"},
        "spec": spec,
    }


def devices_slice(
    pool: str,
    *devices: dict[str, Any],
    driver: str = DRIVER_A,
    where: str | Mapping[str, Any] = NODE1,
    count: int = 1,
) -> dict[str, Any]:
    s = _slice(pool, driver, where, count)
    s["spec"]["devices"] = list(devices)
    return s


def counters_slice(
    pool: str,
    counter_sets: Mapping[str, Quantities],
    *,
    driver: str = DRIVER_A,
    where: str | Mapping[str, Any] = NODE1,
    count: int = 1,
) -> dict[str, Any]:
    s = _slice(pool, driver, where, count)
    s["spec"]["sharedCounters"] = [
        {"name": n, "counters": _values(c)} for n, c in counter_sets.items()
    ]
    return s


def asks(q: str) -> dict[str, Any]:
    """A request's `capacity`: q of capacity-0."""
    return {"requests": {CAP0: q}}


def cel(expr: str) -> dict[str, Any]:
    return {"cel": {"expression": expr}}


def memory_at_least(q: str) -> dict[str, Any]:
    return cel(f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("{q}")) >= 0')


def sub(name: str, cls_name: str, count: int = 1, **fields: Any) -> dict[str, Any]:
    return {"name": name, "deviceClassName": cls_name, "count": count, **fields}


def first(name: str, *subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subs)}


def all_of(name: str, cls_name: str, **exactly: Any) -> dict[str, Any]:
    return req(name, cls_name, None, allocationMode="All", **exactly)


def whole(device: str, pool: str = POOL1, driver: str = DRIVER_A) -> dict[str, Any]:
    """A result holding the whole device (upstream's allocatedDevices)."""
    return {"request": REQ0, "driver": driver, "pool": pool, "device": device}


def share(
    device: str, consumed: Quantities, pool: str = POOL1, driver: str = DRIVER_A
) -> dict[str, Any]:
    """A result holding a share of the device (upstream's allocatedCapacityDevices)."""
    return {
        **whole(device, pool, driver),
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": dict(consumed),
    }


def held(*results: dict[str, Any]) -> list[dict[str, Any]]:
    """Claims already allocated, one a result."""
    out = []
    for i, r in enumerate(results):
        c = claim(f"other-{i}", req(REQ0, CLASS_A))
        c["status"] = {"allocation": {"devices": {"results": [r]}}}
        out.append(c)
    return out


class Got(NamedTuple):
    """One allocation result, as compared."""

    request: str
    driver: str
    pool: str
    device: str
    admin: bool
    shared: bool  # has a shareID
    consumed: tuple[tuple[str, Fraction], ...]
    binding: tuple[str, ...]  # bindingConditions
    binding_failure: tuple[str, ...]  # bindingFailureConditions
    tolerations: tuple[str, ...] = ()  # the request's, as JSON


def _consumed(q: Mapping[str, Any] | None) -> tuple[tuple[str, Fraction], ...]:
    return tuple(sorted((k, parse_quantity(v)) for k, v in (q or {}).items()))


def res(
    request: str,
    device: str,
    pool: str = POOL1,
    driver: str = DRIVER_A,
    shared: Quantities | None = None,
    binding: tuple[Sequence[str], Sequence[str]] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> Got:
    """An expected result; `shared`: a share of the device taking that much;
    `binding`: the device's (bindingConditions, bindingFailureConditions);
    `tolerations`: the request's, which the result records."""
    conditions, failures = binding or ((), ())
    return Got(
        request,
        driver,
        pool,
        device,
        False,
        shared is not None,
        _consumed(shared),
        tuple(conditions),
        tuple(failures),
        tuple(json.dumps(t, sort_keys=True) for t in tolerations),
    )


Case = dict[str, Any]
TOLERATE_KEY1: Final = {"operator": "Exists", "key": "key1", "effect": "NoSchedule"}

# ---- partitionable devices --------------------------------------------------------

PARTITIONABLE: dict[str, Case] = {
    "partitionable-devices-single-device": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, pdev(D1, consumes={CS1: {"memory": "4Gi"}}), count=2),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [([res(REQ0, D1)], LOCAL)],
    },
    "partitionable-devices-prioritized-list": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A),
                first(
                    REQ1,
                    sub(SUB0, CLASS_A, selectors=[memory_at_least("6Gi")]),
                    sub(SUB1, CLASS_A, selectors=[memory_at_least("4Gi")]),
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "4Gi"}}, from_counters=True),
                pdev(D2, consumes={CS1: {"memory": "6Gi"}}, from_counters=True),
                pdev(D3, consumes={CS1: {"memory": "4Gi"}}, from_counters=True),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [([res(REQ0, D1), res(f"{REQ1}/{SUB1}", D3)], LOCAL)],
    },
    "partitionable-devices-multiple-devices": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A), req(REQ1, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "4Gi"}}, from_counters=True),
                pdev(D2, consumes={CS1: {"memory": "6Gi"}}, from_counters=True),
                pdev(D3, consumes={CS1: {"memory": "4Gi"}}, from_counters=True),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [([res(REQ0, D1), res(REQ1, D3)], LOCAL)],
    },
    "partitionable-devices-multiple-capacity-pools": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A),
                first(
                    REQ1,
                    sub(SUB0, CLASS_A, selectors=[memory_at_least("6Gi")]),
                    sub(SUB1, CLASS_A, selectors=[memory_at_least("4Gi")]),
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                *(
                    pdev(d, consumes={CS1: {"memory": m}, CS2: {"cpus": c}}, from_counters=True)
                    for d, m, c in ((D1, "4Gi", "4"), (D2, "6Gi", "6"), (D3, "4Gi", "4"))
                ),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "18Gi"}, CS2: {"cpus": "8"}}, count=2),
        ],
        "expect": [([res(REQ0, D1), res(f"{REQ1}/{SUB1}", D3)], LOCAL)],
    },
    "partitionable-devices-multiple-counters": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A), req(REQ1, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(
                    D1,
                    consumes={
                        CS1: {"memory": "4Gi", "cpus": "6"},
                        CS2: {"cpus": "4", "memory": "2Gi"},
                    },
                    from_counters=True,
                ),
                pdev(
                    D2,
                    consumes={
                        CS1: {"memory": "6Gi", "cpus": "4"},
                        CS2: {"cpus": "6", "memory": "6Gi"},
                    },
                    from_counters=True,
                ),
                pdev(
                    D3,
                    consumes={
                        CS1: {"memory": "4Gi", "cpus": "4"},
                        CS2: {"cpus": "4", "memory": "4Gi"},
                    },
                    from_counters=True,
                ),
                count=2,
            ),
            counters_slice(
                POOL1,
                {CS1: {"cpus": "8", "memory": "18Gi"}, CS2: {"cpus": "12", "memory": "18Gi"}},
                count=2,
            ),
        ],
        "expect": [([res(REQ0, D2), res(REQ1, D3)], LOCAL)],
    },
    "partitionable-devices-multiple-pools": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A), req(REQ1, CLASS_A))],
        "held": held(whole(D2), whole(D3), whole(D1, POOL2)),
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                *(
                    pdev(d, consumes={CS1: {"cpus": c, "memory": m}}, from_counters=True)
                    for d, c, m in ((D1, "6", "4Gi"), (D2, "4", "6Gi"), (D3, "4", "4Gi"))
                ),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"cpus": "8", "memory": "18Gi"}}, count=2),
            devices_slice(
                POOL2,
                *(
                    pdev(d, consumes={CS1: {"cpus": c, "memory": m}}, from_counters=True)
                    for d, c, m in ((D1, "6", "4Gi"), (D2, "1", "7Gi"), (D3, "1", "7Gi"))
                ),
                count=2,
            ),
            counters_slice(POOL2, {CS1: {"cpus": "8", "memory": "18Gi"}}, count=2),
        ],
        "expect": [([res(REQ0, D2, POOL2), res(REQ1, D3, POOL2)], LOCAL)],
    },
    "partitionable-devices-unused-counters-in-counter-set": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, 2))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "5Gi"}}),
                pdev(D2, consumes={CS1: {"memory": "4Gi"}}),
                pdev(D3, consumes={CS1: {"memory": "4Gi"}}),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi", "unused": "1Gi"}}, count=2),
        ],
        "expect": [([res(REQ0, D2), res(REQ0, D3)], LOCAL)],
    },
    "partitionable-devices-no-capacity-available": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "held": held(whole(D2)),
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "4Gi"}}, from_counters=True),
                pdev(D2, consumes={CS1: {"memory": "16Gi"}}, from_counters=True),
            ),
            counters_slice(POOL1, {CS1: {"memory": "18Gi"}}),
        ],
        "expect": None,
    },
    "partitionable-devices-overallocated-capacity-pool": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "held": held(whole(D2)),
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "4Gi"}}, from_counters=True),
                pdev(D2, consumes={CS1: {"memory": "20Gi"}}, from_counters=True),
            ),
            counters_slice(POOL1, {CS1: {"memory": "18Gi"}}),
        ],
        "expect": None,
    },
    "partitionable-devices-per-device-node-selection-nodename": {
        "claims": [
            claim(
                "claim-0",
                first(
                    REQ0,
                    sub(SUB0, CLASS_A, selectors=[memory_at_least("6Gi")]),
                    sub(SUB1, CLASS_A, selectors=[memory_at_least("4Gi")]),
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "4Gi"}}, from_counters=True, node=NODE1),
                pdev(D2, consumes={CS1: {"memory": "6Gi"}}, from_counters=True, node=NODE2),
                where=PER_DEVICE,
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "18Gi"}}, where=PER_DEVICE, count=2),
        ],
        "expect": [([res(f"{REQ0}/{SUB1}", D1)], LOCAL)],
    },
    "partitionable-devices-per-device-node-selection-node-selector": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(
                    D1,
                    consumes={CS1: {"memory": "4Gi"}},
                    from_counters=True,
                    selector=label_selector(REGION_KEY, "r1"),
                ),
                where=PER_DEVICE,
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "18Gi"}}, where=PER_DEVICE, count=2),
        ],
        "expect": [([res(REQ0, D1)], label_selector(REGION_KEY, "r1"))],
    },
    "partitionable-devices-per-device-node-selection-node-selector-multiple-devices": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, 3), req(REQ1, CLASS_B, 3))],
        "classes": [cls(CLASS_A, DRIVER_A), cls(CLASS_B, DRIVER_B)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(
                    D1,
                    consumes={CS1: {"memory": "4Gi"}},
                    from_counters=True,
                    selector=label_selector(REGION_KEY, "r1"),
                ),
                pdev(D2, consumes={CS1: {"memory": "4Gi"}}, from_counters=True, node=NODE1),
                pdev(D3, consumes={CS1: {"memory": "4Gi"}}, from_counters=True, all_nodes=True),
                where=PER_DEVICE,
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "18Gi"}}, where=PER_DEVICE, count=2),
            devices_slice(
                POOL2,
                *(
                    pdev(d, consumes={CS2: {"memory": "4Gi"}}, from_counters=True)
                    for d in (D1, D2, D3)
                ),
                driver=DRIVER_B,
                count=2,
            ),
            counters_slice(POOL2, {CS2: {"memory": "12Gi"}}, driver=DRIVER_B, count=2),
        ],
        "expect": [
            (
                [
                    *(res(REQ0, d) for d in (D1, D2, D3)),
                    *(res(REQ1, d, POOL2, DRIVER_B) for d in (D1, D2, D3)),
                ],
                LOCAL,
            )
        ],
    },
    "partitionable-devices-with-attribute-selector": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A, 2),
                req(REQ1, CLASS_A, 1, selectors=[cel(f'device.attributes["{DRIVER_A}"].special')]),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                *(
                    pdev(
                        d,
                        attrs={"special": special},
                        consumes={CS1: {cpu: "1"}, CS2: {"mem": "10Gi"}},
                    )
                    for d, special, cpu in (
                        (D1, True, "cpu1"),
                        (D2, False, "cpu2"),
                        (D3, False, "cpu3"),
                    )
                ),
                count=2,
            ),
            counters_slice(
                POOL1,
                {CS1: {"cpu1": "1", "cpu2": "1", "cpu3": "1"}, CS2: {"mem": "30Gi"}},
                count=2,
            ),
        ],
        "expect": [([res(REQ0, D2), res(REQ0, D3), res(REQ1, D1)], LOCAL)],
    },
    # Invalid pools: kube's "invalid resource pools were encountered".
    "partitionable-devices-same-counter-set-name-in-different-resource-slices": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, pdev(D1), count=4),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=4),
            devices_slice(POOL1, pdev(D2), count=4),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=4),
        ],
        "expect": None,
    },
    "partitionable-devices-device-counter-consumption-references-unknown-counter-set": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, pdev(D1, consumes={CS2: {"memory": "4Gi"}}), count=2),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": None,
    },
    "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, pdev(D1, consumes={CS1: {"memory": "8Gi"}}), count=2),
            counters_slice(POOL1, {CS1: {"other-memory": "8Gi"}}, count=2),
        ],
        "expect": None,
    },
    "partitionable-devices-device-counter-consumption-references-counter-set-in-other-pool": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, pdev(D1, consumes={CS1: {"memory": "8Gi"}})),
            counters_slice(POOL2, {CS1: {"memory": "8Gi"}}),
        ],
        "expect": None,
    },
    # A device of the pool published for another node uses the same counters.
    "partitionable-devices-devices-on-different-nodes-consume-same-counter-set": {
        "claims": [
            claim(
                "claim-0",
                first(
                    REQ0,
                    sub(SUB0, CLASS_A, selectors=[memory_at_least("6Gi")]),
                    sub(SUB1, CLASS_A, selectors=[memory_at_least("2Gi")]),
                ),
            )
        ],
        "held": held(whole(D3)),
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=3),
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "6Gi"}}, from_counters=True),
                pdev(D2, consumes={CS1: {"memory": "2Gi"}}, from_counters=True),
                count=3,
            ),
            devices_slice(POOL1, pdev(D3, consumes={CS1: {"memory": "6Gi"}}), where=NODE2, count=3),
        ],
        "expect": [([res(f"{REQ0}/{SUB1}", D2)], LOCAL)],
    },
    "partitionable-devices-validation-error-on-non-targeting-slice": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=3),
            devices_slice(
                POOL1,
                pdev(D1, consumes={CS1: {"memory": "6Gi"}}, from_counters=True),
                count=3,
            ),
            devices_slice(POOL1, pdev(D3, consumes={CS2: {"memory": "6Gi"}}), where=NODE2, count=3),
        ],
        "expect": None,
    },
}

# ---- bindsToNode, binding conditions ---------------------------------------------

PREPARE = (["IsPrepare"], ["BindingFailed"])
NO_SCHEDULE_KEY1 = {"key": "key1", "value": "value1", "effect": "NoSchedule"}


def _counted(name: str, memory: str, counter_set: str = CS1, **kw: Any) -> dict[str, Any]:
    """A device whose capacity is the memory it uses of the counter set."""
    return pdev(name, consumes={counter_set: {"memory": memory}}, from_counters=True, **kw)


BINDING: dict[str, Case] = {
    "node-restriction": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1, pdev(D1, binds_to_node=True), where=label_selector(PLANET_KEY, "earth")
            )
        ],
        "expect": [([res(REQ0, D1)], LOCAL)],
    },
    "device-binding-conditions": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [devices_slice(POOL1, pdev(D1, binding=PREPARE))],
        "expect": [([res(REQ0, D1, binding=PREPARE)], LOCAL)],
    },
    "binding-conditions-multiple-devices": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, 2), req(REQ1, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, binding=PREPARE),
                pdev(D2, binding=(["IsPrepare2"], ["BindingFailed2"])),
                pdev(D3, binding=(["IsPrepare3"], ["BindingFailed3"])),
            )
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, binding=PREPARE),
                    res(REQ0, D2, binding=(["IsPrepare2"], ["BindingFailed2"])),
                    res(REQ1, D3, binding=(["IsPrepare3"], ["BindingFailed3"])),
                ],
                LOCAL,
            )
        ],
    },
    "binding-conditions-with-and-without": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A), req(REQ1, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [devices_slice(POOL1, pdev(D1), pdev(D2, binding=PREPARE))],
        "expect": [([res(REQ0, D1), res(REQ1, D2, binding=PREPARE)], LOCAL)],
    },
    "partitionable-devices-with-binding-conditions": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, _counted(D1, "4Gi", binding=PREPARE), count=2),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [([res(REQ0, D1, binding=PREPARE)], LOCAL)],
    },
    "partitionable-devices-with-binding-conditions-multiple": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, 2))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                _counted(D1, "4Gi", binding=PREPARE),
                _counted(D2, "4Gi", binding=(["IsPrepare2"], ["BindingFailed2"])),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, binding=PREPARE),
                    res(REQ0, D2, binding=(["IsPrepare2"], ["BindingFailed2"])),
                ],
                LOCAL,
            )
        ],
    },
    "partitionable-devices-with-binding-conditions-some-devices-no-conditions": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, 3))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                _counted(D1, "2Gi", binding=PREPARE),
                _counted(D2, "2Gi"),
                _counted(D3, "4Gi", binding=(["IsReady"], ["BindingTimeout"])),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, binding=PREPARE),
                    res(REQ0, D2),
                    res(REQ0, D3, binding=(["IsReady"], ["BindingTimeout"])),
                ],
                LOCAL,
            )
        ],
    },
    # Upstream's slices come as slice-4, slice-3, slice-2, slice-1: the two
    # devices and their counter sets in different slices of the pool.
    "partitionable-devices-with-binding-conditions-multi-slices": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, 2))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, _counted(D1, "4Gi", binding=PREPARE), count=4),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=4),
            devices_slice(POOL1, _counted(D2, "4Gi", CS2), count=4),
            counters_slice(POOL1, {CS2: {"memory": "8Gi"}}, count=4),
        ],
        "expect": [([res(REQ0, D2), res(REQ0, D1, binding=PREPARE)], LOCAL)],
    },
    # device-1's NoSchedule taint is not tolerated: one device is left for a
    # request of two. (Upstream's two slices each say the pool has one slice,
    # which makes the pool incomplete there, a second reason for no allocation;
    # Troupe allocates from it, see the tolerated case below.)
    "partitionable-devices-with-binding-conditions-and-taints": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, 2))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                _counted(D1, "4Gi", binding=PREPARE, taints=[NO_SCHEDULE_KEY1]),
                _counted(D2, "4Gi"),
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}),
        ],
        "expect": None,
    },
    "partitionable-devices-with-binding-conditions-and-taints-tolerated": {
        "claims": [
            claim(
                "claim-0",
                req(
                    REQ0,
                    CLASS_A,
                    2,
                    tolerations=[TOLERATE_KEY1],
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                _counted(D1, "4Gi", binding=PREPARE, taints=[NO_SCHEDULE_KEY1]),
                _counted(D2, "4Gi"),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, binding=PREPARE, tolerations=[TOLERATE_KEY1]),
                    res(REQ0, D2, tolerations=[TOLERATE_KEY1]),
                ],
                LOCAL,
            )
        ],
    },
    # req-1 first takes device-1 and device-2 (pool-1 comes first: pool-2 has a
    # device with binding conditions), which leaves nothing for req-2 (type
    # X: device-1); backtracking gives req-1 device-2 and pool-2's device-3.
    "check-combinations-with-backtracking-across-slices-and-pools": {
        "claims": [
            claim(
                "claim-0",
                req(REQ1, CLASS_A, 2),
                req(
                    REQ2,
                    CLASS_A,
                    1,
                    selectors=[cel(f'device.attributes["{DRIVER_A}"].type == "X"')],
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(POOL1, pdev(D1, attrs={"type": "X"}), count=2),
            devices_slice(POOL1, pdev(D2, attrs={"type": "Y"}), count=2),
            devices_slice(POOL2, pdev(D3, attrs={"type": "Y"}, binding=(["IsPrepare"], []))),
        ],
        "expect": [
            (
                [
                    res(REQ1, D2),
                    res(REQ1, D3, POOL2, binding=(["IsPrepare"], [])),
                    res(REQ2, D1),
                ],
                LOCAL,
            )
        ],
    },
}

# ---- consumable capacity -----------------------------------------------------------

MULTI_A = multi_cls(CLASS_A, DRIVER_A, True)
DEDICATED_A = multi_cls(CLASS_A, DRIVER_A, False)


def _two_claims(*requests: dict[str, Any]) -> list[dict[str, Any]]:
    return [claim("claim-0", *requests), claim("claim-1", *requests)]


CONSUMABLE: dict[str, Case] = {
    "consumable-capacity-multi-allocatable-device-with-missing-capacity-request": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("1")))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [devices_slice(POOL1, pdev(D1, {CAP1: "1"}, multi=True))],
        "expect": None,
    },
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-"
        "capacity-request"
    ): {
        "claims": [claim("claim-0", all_of(REQ0, CLASS_A, capacity=asks("1")))],
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, {CAP1: "1"}, multi=True))],
        "expect": None,
    },
    "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request": {
        "claims": _two_claims(req(REQ0, CLASS_A)),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True))],
        # Both share the device; no capacity is consumed since none is defined.
        "expect": [([res(REQ0, D1, shared={})], LOCAL)] * 2,
    },
    "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request": {
        "claims": _two_claims(req(REQ0, CLASS_A)),
        "classes": [MULTI_A],
        "slices": [
            devices_slice(
                POOL1, pdev(D1, {CAP0: "1"}, multi=True), pdev(D2, {CAP0: "1"}, multi=True)
            )
        ],
        # Each takes the whole capacity, of a device of its own.
        "expect": [
            ([res(REQ0, D1, shared={CAP0: "1"})], LOCAL),
            ([res(REQ0, D2, shared={CAP0: "1"})], LOCAL),
        ],
    },
    (
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block"
    ): {
        "claims": _two_claims(req(REQ0, CLASS_A)),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, {CAP0: "2"}, multi=True))],
        "expect": None,
    },
    "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request": {
        "claims": _two_claims(req(REQ0, CLASS_A, capacity=asks("1"))),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, {CAP0: "2"}, multi=True))],
        "expect": [([res(REQ0, D1, shared={CAP0: "1"})], LOCAL)] * 2,
    },
    "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request": {
        "claims": _two_claims(req(REQ0, CLASS_A)),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "4"}))],
        # Both take the policy's default.
        "expect": [([res(REQ0, D1, shared={CAP0: "2"})], LOCAL)] * 2,
    },
    "consumable-capacity-multi-allocatable-device-with-zero-request-policy": {
        "claims": _two_claims(req(REQ0, CLASS_A)),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, valid_values=("0", {CAP0: "1"}, ())))],
        "expect": [([res(REQ0, D1, shared={CAP0: "0"})], LOCAL)] * 2,
    },
    "consumable-capacity-multi-allocatable-device-violates-zero-request-policy": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("1")))],
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, valid_values=("0", {CAP0: "1"}, ())))],
        "expect": None,
    },
    "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request": {
        "claims": _two_claims(req(REQ0, CLASS_A, capacity=asks("1"))),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "4"}))],
        # Rounded up to the range's minimum.
        "expect": [([res(REQ0, D1, shared={CAP0: "2"})], LOCAL)] * 2,
    },
    "consumable-capacity-multi-allocatable-device-with-range-policy-step": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("3")))],
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "4"}))],
        # Rounded up to a step: 3 to 2 + 2.
        "expect": [([res(REQ0, D1, shared={CAP0: "4"})], LOCAL)],
    },
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("2")))],
        "classes": [MULTI_A],
        "slices": [
            devices_slice(POOL1, pdev(D1, multi=True, valid_values=("1", {CAP0: "4"}, ["2"])))
        ],
        "expect": [([res(REQ0, D1, shared={CAP0: "2"})], LOCAL)],
    },
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("2")))],
        "classes": [MULTI_A],
        "slices": [
            devices_slice(POOL1, pdev(D1, multi=True, valid_values=("1", {CAP0: "3"}, ["3"])))
        ],
        "expect": [([res(REQ0, D1, shared={CAP0: "3"})], LOCAL)],
    },
    ("consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request"): {
        "claims": [
            claim("claim-0", req(REQ0, CLASS_A, capacity=asks("1"))),
            claim("claim-1", req(REQ0, CLASS_A, capacity=asks("2"))),
        ],
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "2"}))],
        "expect": None,
    },
    "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("6")))],
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "10"}))],
        # Over the range's maximum (4), though 6 < 10.
        "expect": None,
    },
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("2")))],
        "held": held(share(D1, {CAP0: "2"})),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "4"}))],
        "expect": [([res(REQ0, D1, shared={CAP0: "2"})], LOCAL)],
    },
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("2")))],
        "held": held(share(D1, {CAP0: "2"})),
        "classes": [MULTI_A],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, multi=True, ranged={CAP0: "2"}),
                pdev(D2, multi=True, ranged={CAP0: "2"}),
            )
        ],
        "expect": [([res(REQ0, D2, shared={CAP0: "2"})], LOCAL)],
    },
    "consumable-capacity-with-multi-allocatable-device-backtrack": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A, capacity=asks("2")),
                req(REQ1, CLASS_A, capacity=asks("2")),
                constraints=[{"matchAttribute": f"{DRIVER_A}/stringAttribute"}],
            ),
            claim("claim-1", req(REQ0, CLASS_A, capacity=asks("2"))),
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(
                    D2,
                    attrs={"stringAttribute": "stringAttributeValue1"},
                    multi=True,
                    ranged={CAP0: "2"},
                ),
                pdev(
                    D1,
                    attrs={"stringAttribute": "stringAttributeValue2"},
                    multi=True,
                    ranged={CAP0: "4"},
                ),
            )
        ],
        "expect": [
            ([res(REQ0, D1, shared={CAP0: "2"}), res(REQ1, D1, shared={CAP0: "2"})], LOCAL),
            ([res(REQ0, D2, shared={CAP0: "2"})], LOCAL),
        ],
    },
    "consumable-capacity-multi-allocatable-device-with-subrequest": {
        "claims": [
            claim(
                "claim-0",
                first(
                    REQ0,
                    sub(SUB0, CLASS_A, capacity=asks("4")),
                    sub(SUB1, CLASS_A, capacity=asks("2")),
                    sub("subReq-2", CLASS_A),  # upstream: a second subReq-1
                ),
            )
        ],
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "2"}))],
        "expect": [([res(f"{REQ0}/{SUB1}", D1, shared={CAP0: "2"})], LOCAL)],
    },
    ("consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity"): {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("2")))],
        "held": held(share(D1, {CAP0: "2"})),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "2"}))],
        "expect": None,
    },
    ("consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity"): {
        "claims": [claim("claim-0", all_of(REQ0, CLASS_A, capacity=asks("2")))],
        "classes": [MULTI_A],
        "slices": [
            devices_slice(POOL1, pdev(D1, {CAP0: "2"}, multi=True), pdev(D2, multi=True)),
        ],
        # Only the device that has the capacity.
        "expect": [([res(REQ0, D1, shared={CAP0: "2"})], LOCAL)],
    },
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-"
        "insufficient-capacity"
    ): {
        "claims": [claim("claim-0", all_of(REQ0, CLASS_A, capacity=asks("2")))],
        "classes": [MULTI_A],
        "slices": [
            devices_slice(
                POOL1, pdev(D1, {CAP0: "2"}, multi=True), pdev(D2, {CAP0: "1"}, multi=True)
            ),
        ],
        "expect": [([res(REQ0, D1, shared={CAP0: "2"})], LOCAL)],
    },
    ("consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient"): {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A, capacity=asks("1")),
                all_of(REQ1, CLASS_A, capacity=asks("1")),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1, pdev(D1, {CAP0: "2"}, multi=True), pdev(D2, {CAP0: "1"}, multi=True)
            ),
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, shared={CAP0: "1"}),
                    res(REQ1, D1, shared={CAP0: "1"}),
                    res(REQ1, D2, shared={CAP0: "1"}),
                ],
                LOCAL,
            )
        ],
    },
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient": {
        "claims": [claim("claim-0", all_of(REQ0, CLASS_A, capacity=asks("1")))],
        "held": held(share(D1, {CAP0: "1"})),
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1, pdev(D1, {CAP0: "2"}, multi=True), pdev(D2, {CAP0: "1"}, multi=True)
            ),
        ],
        "expect": [([res(REQ0, D1, shared={CAP0: "1"}), res(REQ0, D2, shared={CAP0: "1"})], LOCAL)],
    },
    ("consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient"): {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A, capacity=asks("1")),
                all_of(REQ1, CLASS_A, capacity=asks("1")),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1, pdev(D1, {CAP0: "1"}, multi=True), pdev(D2, {CAP0: "1"}, multi=True)
            ),
        ],
        "expect": None,
    },
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient": {
        "claims": [claim("claim-0", all_of(REQ0, CLASS_A, capacity=asks("1")))],
        "held": held(share(D1, {CAP0: "1"})),
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1, pdev(D1, {CAP0: "1"}, multi=True), pdev(D2, {CAP0: "1"}, multi=True)
            ),
        ],
        # The device with nothing left is not one of "all".
        "expect": [([res(REQ0, D2, shared={CAP0: "1"})], LOCAL)],
    },
    "consumable-capacity-dedicated-device-with-consumable-capacity-request": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("1")))],
        "classes": [DEDICATED_A],
        "slices": [devices_slice(POOL1, pdev(D1, {CAP0: "1"}))],
        "expect": [([res(REQ0, D1)], LOCAL)],
    },
    "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request": {
        "claims": _two_claims(req(REQ0, CLASS_A, capacity=asks("1"))),
        "classes": [DEDICATED_A],
        "slices": [devices_slice(POOL1, pdev(D1, ranged={CAP0: "2"}))],
        "expect": None,
    },
    "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector": {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("1")))],
        "classes": [DEDICATED_A],
        "slices": [devices_slice(POOL1, pdev(D1, {CAP0: "1"}, multi=True))],
        "expect": None,
    },
    ("allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated"): {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("1")))],
        "held": held(whole(D1)),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True, ranged={CAP0: "2"}))],
        "expect": None,
    },
    (
        "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-"
        "allocatable"
    ): {
        "claims": [claim("claim-0", req(REQ0, CLASS_A, capacity=asks("1")))],
        "held": held(share(D1, {CAP0: "1"})),
        "classes": [MULTI_A],
        "slices": [devices_slice(POOL1, pdev(D1, ranged={CAP0: "2"}))],
        "expect": None,
    },
    "allow-multiple-allocations-with-partitionable-device": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A),
                first(
                    REQ1,
                    sub(SUB0, CLASS_A, selectors=[memory_at_least("6Gi")]),
                    sub(SUB1, CLASS_A, selectors=[memory_at_least("4Gi")]),
                ),
            )
        ],
        "classes": [MULTI_A],
        "slices": [
            devices_slice(
                POOL1,
                *(
                    pdev(d, consumes={CS1: {"memory": m}}, from_counters=True, multi=True)
                    for d, m in ((D1, "4Gi"), (D2, "6Gi"), (D3, "4Gi"))
                ),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {"memory": "8Gi"}}, count=2),
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, shared={"memory": "4Gi"}),
                    res(f"{REQ1}/{SUB1}", D3, shared={"memory": "4Gi"}),
                ],
                LOCAL,
            )
        ],
    },
    # Counter set 1 has 4 of capacity-0, devices 1, 2, 3 use 2, 4, 2 of it:
    # devices 1 and 3, or device 2. capacity-1 is taken by the range policy
    # (default 2). req-0 gets device 1 (1 of capacity-0); req-2 (2) finds 1
    # left on device 1 and device 2 out by the counters: device 3; req-1's
    # first subrequest (capacity-0 >= 4: device 2) cannot be had, its second
    # takes the last 1 on device 1.
    "consumable-capacity-with-partitionable-device-multiple-capacity-pools": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A, capacity=asks("1")),
                req(REQ2, CLASS_A, capacity=asks("2")),
                first(
                    REQ1,
                    sub(
                        SUB0,
                        CLASS_A,
                        selectors=[
                            cel(
                                f'device.capacity["{DRIVER_A}"]["{CAP0}"]'
                                '.compareTo(quantity("4")) >= 0'
                            )
                        ],
                        capacity=asks("1"),
                    ),
                    sub(
                        SUB1,
                        CLASS_A,
                        selectors=[
                            cel(
                                f'device.capacity["{DRIVER_A}"]["{CAP0}"]'
                                '.compareTo(quantity("2")) >= 0'
                            )
                        ],
                        capacity=asks("1"),
                    ),
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                *(
                    pdev(
                        d,
                        consumes={CS1: {CAP0: c0}, CS2: {CAP1: "4"}},
                        from_counters=True,
                        multi=True,
                        ranged={CAP1: "4"},
                    )
                    for d, c0 in ((D1, "2"), (D2, "4"), (D3, "2"))
                ),
                count=2,
            ),
            counters_slice(POOL1, {CS1: {CAP0: "4"}, CS2: {CAP1: "8"}}, count=2),
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, shared={CAP0: "1", CAP1: "2"}),
                    res(REQ2, D3, shared={CAP0: "2", CAP1: "2"}),
                    res(f"{REQ1}/{SUB1}", D1, shared={CAP0: "1", CAP1: "2"}),
                ],
                LOCAL,
            )
        ],
    },
}

# ---- distinctAttribute -------------------------------------------------------------


def distinct(attr: str, *requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"distinctAttribute": f"{DRIVER_A}/{attr}"}
    if requests:
        out["requests"] = list(requests)
    return out


def _bool_or_any(name: str) -> dict[str, Any]:
    return first(
        name,
        sub(SUB0, CLASS_A, selectors=[cel(f'device.attributes["{DRIVER_A}"].boolAttribute')]),
        sub(SUB1, CLASS_A),
    )


DISTINCT: dict[str, Case] = {
    "with-distinct-constraints": {
        "claims": [
            claim(
                "claim-0",
                *(req(r, CLASS_A) for r in (REQ0, REQ1, REQ2, REQ3)),
                constraints=[
                    distinct("boolAttribute", REQ0, REQ1),
                    distinct("driverVersion", REQ0, REQ1, REQ2),
                    distinct("numa", REQ0, REQ1, REQ2, REQ3),
                ],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                *(
                    pdev(
                        d,
                        attrs={"driverVersion": v, "numa": n, "boolAttribute": b},
                        multi=True,
                    )
                    for d, v, n, b in (
                        (D1, "1.0.0", 0, True),
                        (D2, "1.0.1", 1, False),
                        (D3, "1.0.2", 2, True),
                        (D4, "1.0.0", 3, True),
                    )
                ),
            )
        ],
        "expect": [
            (
                [
                    res(REQ0, D1, shared={}),
                    res(REQ1, D2, shared={}),
                    res(REQ2, D3, shared={}),
                    res(REQ3, D4, shared={}),
                ],
                LOCAL,
            )
        ],
    },
    "with-distinct-constraints-attribute-not-set": {
        "claims": [
            claim("claim-0", req(REQ0, CLASS_A), constraints=[distinct("boolAttribute", REQ0)])
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [devices_slice(POOL1, pdev(D1, multi=True))],
        "expect": None,
    },
    # The constraint binds req-0 and req-1 only: req-1 cannot have device 1
    # again (subReq-0) and takes device 2 (subReq-1); req-2 can.
    "with-distinct-constraints-with-subrequests": {
        "claims": [
            claim(
                "claim-0",
                _bool_or_any(REQ0),
                _bool_or_any(REQ1),
                _bool_or_any(REQ2),
                constraints=[distinct("boolAttribute", REQ0, REQ1)],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, attrs={"boolAttribute": True}, multi=True),
                pdev(D2, attrs={"boolAttribute": False}, multi=True),
            )
        ],
        "expect": [
            (
                [
                    res(f"{REQ0}/{SUB0}", D1, shared={}),
                    res(f"{REQ1}/{SUB1}", D2, shared={}),
                    res(f"{REQ2}/{SUB0}", D1, shared={}),
                ],
                LOCAL,
            )
        ],
    },
    "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A, capacity=asks("1")),
                req(REQ1, CLASS_A, capacity=asks("1")),
                constraints=[distinct("stringAttribute")],
            )
        ],
        "classes": [MULTI_A],
        "slices": [
            devices_slice(
                POOL1,
                pdev(
                    D1,
                    attrs={"stringAttribute": "stringAttributeValue"},
                    multi=True,
                    ranged={CAP0: "2"},
                ),
            )
        ],
        "expect": None,
    },
    "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint": {
        "claims": [
            claim(
                "claim-0",
                req(REQ0, CLASS_A, capacity=asks("2")),
                req(REQ1, CLASS_A, capacity=asks("2")),
                constraints=[distinct("stringAttribute")],
            )
        ],
        "classes": [MULTI_A],
        "slices": [
            devices_slice(
                POOL1,
                pdev(
                    d,
                    attrs={"stringAttribute": v},
                    multi=True,
                    ranged={CAP0: "4"},
                ),
                count=2,
            )
            for d, v in ((D1, "stringAttributeValue1"), (D2, "stringAttributeValue2"))
        ],
        "expect": [([res(REQ0, D1, shared={CAP0: "2"}), res(REQ1, D2, shared={CAP0: "2"})], LOCAL)],
    },
    "list-attributes-distinct-constraint-scalar-string-values-all-distinct": {
        "claims": [
            claim("claim-0", req(REQ0, CLASS_A, 2), constraints=[distinct("stringAttribute")])
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, attrs={"stringAttribute": "value1"}),
                pdev(D2, attrs={"stringAttribute": "value2"}),
            )
        ],
        "expect": [([res(REQ0, D1), res(REQ0, D2)], LOCAL)],
    },
    "list-attributes-distinct-constraint-scalar-string-values-not-distinct": {
        "claims": [
            claim("claim-0", req(REQ0, CLASS_A, 2), constraints=[distinct("stringAttribute")])
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            devices_slice(
                POOL1,
                pdev(D1, attrs={"stringAttribute": "value1"}),
                pdev(D2, attrs={"stringAttribute": "value1"}),
            )
        ],
        "expect": None,
    },
}

CASES: dict[str, Case] = {**PARTITIONABLE, **BINDING, **CONSUMABLE, **DISTINCT}
assert len(CASES) == len(PARTITIONABLE) + len(BINDING) + len(CONSUMABLE) + len(DISTINCT)


# ---- the test ----------------------------------------------------------------------


def _parsed(kind: str, obj: dict[str, Any]) -> Any:
    got = parse_dra_object(kind, obj)
    assert not hasattr(got, "message"), got
    return got


def _selector(sel: Mapping[str, Any] | None) -> Any:
    """A node selector without the order of its terms, requirements and values."""
    if sel is None:
        return None
    terms = []
    for t in sel.get("nodeSelectorTerms") or []:
        terms.append(
            tuple(
                tuple(
                    sorted(
                        (r["key"], r["operator"], tuple(sorted(r.get("values") or [])))
                        for r in t.get(kind) or []
                    )
                )
                for kind in ("matchExpressions", "matchFields")
            )
        )
    return sorted(terms)


def _conditions(r: Mapping[str, Any], field: str) -> tuple[str, ...]:
    """A result's list of condition types (absent: none)."""
    got = r.get(field)
    if got is None:
        return ()
    assert isinstance(got, list) and all(isinstance(c, str) for c in got), r
    return tuple(got)


def _got(r: Mapping[str, Any], share_ids: list[str]) -> Got:
    share_id = r.get("shareID")
    if share_id is not None:
        assert isinstance(share_id, str), r
        uuid.UUID(share_id)  # a UUID
        share_ids.append(share_id)
    return Got(
        r["request"],
        r["driver"],
        r["pool"],
        r["device"],
        bool(r.get("adminAccess")),
        share_id is not None,
        _consumed(r.get("consumedCapacity")),
        _conditions(r, "bindingConditions"),
        _conditions(r, "bindingFailureConditions"),
        tuple(json.dumps(t, sort_keys=True) for t in r.get("tolerations") or ()),
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_upstream_allocator_partitionable(name: str) -> None:
    case = CASES[name]
    store = store_of(case, "held")
    held_ids = set()
    for o in case.get("held", []):
        for r in o["status"]["allocation"]["devices"]["results"]:
            if "shareID" in r:
                held_ids.add(r["shareID"])
    claims: list[ResourceClaim] = [_parsed("ResourceClaim", o) for o in case["claims"]]

    got = allocate(store, claims, NODE1, LABELS)
    if case["expect"] is None:
        assert got is None
    else:
        assert got is not None
        share_ids: list[str] = []
        actual = []
        for a in got:
            devices = a.raw["devices"]
            assert not devices.get("config"), devices
            results = sorted(_got(r, share_ids) for r in devices["results"])
            actual.append((results, _selector(a.raw.get("nodeSelector"))))
        want = [
            (sorted(results), _selector(local_selector(NODE1) if sel == LOCAL else sel))
            for results, sel in case["expect"]
        ]
        assert actual == want
        # Each share is a new one.
        assert len(set(share_ids)) == len(share_ids), share_ids
        assert not set(share_ids) & held_ids

    # Filter's question (whether the claims fit, nothing built) has the same answer.
    fits = allocate(store, claims, NODE1, LABELS, build=False)
    assert (fits is not None) == (case["expect"] is not None), fits
