"""The structured allocator against cases of kube's allocator test table
(k8s.io/dynamic-resource-allocation/structured, allocator_testing.go), case by
case under their upstream names (`upstream:` ids). Ported: the cases of the
GA features (ExactCount and All, admin access, prioritized lists, node-local
and network-attached slices, matchAttribute, the limit of 32 devices a claim)
and of device taints. Partitionable devices,
consumable capacity, distinctAttribute, bindsToNode and binding conditions
are in test_dra_allocator_upstream_partitionable.py; not ported: the
feature-gate-off cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from troupe.dra.allocator import AllocationError, allocate
from troupe.dra.store import DeviceStore
from troupe.dra.types import ResourceClaim, parse_dra_object

DRIVER_A, DRIVER_B = "driver-a", "driver-b"
CLASS_A, CLASS_B = "class-a", "class-b"
NODE1, NODE2 = "node-1", "node-2"
REGION_KEY, PLANET_KEY = "region", "planet"
API = "resource.k8s.io/v1"


def cls(name: str, driver: str) -> dict[str, Any]:
    expr = f'device.driver == "{driver}"'
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expr}}]},
    }


def dev(name: str, *, taints: tuple[dict[str, Any], ...] = (), **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if taints:
        out["taints"] = list(taints)
    if attrs:
        out["attributes"] = {}
        for k, v in attrs.items():
            kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string"
            if k == "driverVersion":
                kind = "version"
            out["attributes"][k] = {kind: v}
    return out


_slices = iter(range(10**6))


def slice_(
    pool: str,
    driver: str,
    *devices: dict[str, Any],
    node: str = "",
    selector: dict[str, Any] | None = None,
    all_nodes: bool = False,
    count: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
        "devices": list(devices),
    }
    if node:
        spec["nodeName"] = node
    elif selector is not None:
        spec["nodeSelector"] = selector
    elif all_nodes:
        spec["allNodes"] = True
    name = f"slice-{next(_slices)}"
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": spec,
    }


def label_selector(key: str, value: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        ]
    }


def local_selector(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def req(name: str, cls_name: str, count: int | None = 1, **exactly: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls_name, **exactly}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def claim(name: str, *requests: dict[str, Any], constraints: Any = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": "1"},
        "spec": {"devices": devices},
    }


def allocated(name: str, driver: str, pool: str, device: str) -> dict[str, Any]:
    """A claim already holding the device (kube's allocatedDevices)."""
    c = claim(name, req("req-0", CLASS_A))
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "req-0", "driver": driver, "pool": pool, "device": device}]
            }
        }
    }
    return c


def result(req_name: str, driver: str, pool: str, device: str, admin: bool = False) -> str:
    return f"{req_name}:{driver}/{pool}/{device}" + (" admin" if admin else "")


def devices(n: int) -> list[dict[str, Any]]:
    """Upstream's sliceWithMultipleDevices: device-0 ... device-<n-1>."""
    return [dev(f"device-{i}") for i in range(n)]


def results(req_name: str, driver: str, pool: str, n: int, start: int = 0) -> list[str]:
    """Upstream's multipleDeviceAllocationResults."""
    return [result(req_name, driver, pool, f"device-{i}") for i in range(start, start + n)]


def first_available(name: str, *subrequests: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subrequests)}


def sub(name: str, cls_name: str, count: int | None = 1, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "deviceClassName": cls_name, **fields}
    if count is not None:
        body["count"] = count
    return body


MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize
TAINT_NO_SCHEDULE = {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}
TAINT_NO_EXECUTE = {"key": "taint-key", "value": "taint-value-2", "effect": "NoExecute"}
TAINT_NONE = {"key": "taint-key", "value": "taint-value", "effect": "None"}
TOLERATE_NO_SCHEDULE = {"operator": "Exists", "key": "taint-key", "effect": "NoSchedule"}
TOLERATE_NO_EXECUTE = {
    "operator": "Equal",
    "key": "taint-key",
    "value": "taint-value-2",
    "effect": "NoExecute",
}

Case = dict[str, Any]

CASES: dict[str, Case] = {
    "simple": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": [([result("req-0", DRIVER_A, "pool-1", "device-1")], "local")],
    },
    "other-node": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE2)],
        "expect": None,
    },
    "small-and-large": {
        "claims": [claim("claim-0", req("req-0", CLASS_A), req("req-1", CLASS_A, 2))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1", DRIVER_A, dev("device-1"), dev("device-2"), dev("device-3"), node=NODE1
            )
        ],
        "expect": [
            (
                [
                    result("req-0", DRIVER_A, "pool-1", "device-1"),
                    result("req-1", DRIVER_A, "pool-1", "device-2"),
                    result("req-1", DRIVER_A, "pool-1", "device-3"),
                ],
                "local",
            )
        ],
    },
    "no-slices": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [],
        "expect": None,
    },
    "not-enough-suitable-devices": {
        "claims": [
            claim("claim-0", req("req-0", CLASS_A)),
            claim("claim-1", req("req-1", CLASS_A)),
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": None,
    },
    "no-classes": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "error": "could not retrieve device class class-a",
    },
    "unknown-class": {
        "claims": [claim("claim-0", req("req-0", "unknown-class"))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "error": "could not retrieve device class unknown-class",
    },
    "all-devices-single": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All"))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": [([result("req-0", DRIVER_A, "pool-1", "device-1")], "local")],
    },
    "all-devices-many": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All"))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1),
            slice_("pool-2", DRIVER_A, dev("device-1"), node=NODE1),
        ],
        "expect": [
            (
                [
                    result("req-0", DRIVER_A, "pool-1", "device-1"),
                    result("req-0", DRIVER_A, "pool-2", "device-1"),
                ],
                "local",
            )
        ],
    },
    "all-devices-of-the-incomplete-pool": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All"))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1, count=2)],
        "error": "asks for all devices, but resource pool driver-a/pool-1 is currently being "
        "updated",
    },
    "all-devices-plus-another": {
        "claims": [
            claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All")),
            claim("claim-1", req("req-0", CLASS_B)),
        ],
        "classes": [cls(CLASS_A, DRIVER_A), cls(CLASS_B, DRIVER_B)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1),
            slice_("pool-1", DRIVER_B, dev("device-1"), node=NODE1),
        ],
        "expect": [
            ([result("req-0", DRIVER_A, "pool-1", "device-1")], "local"),
            ([result("req-0", DRIVER_B, "pool-1", "device-1")], "local"),
        ],
    },
    "all-devices-no-solution": {
        "claims": [
            claim("claim-1", req("req-0", CLASS_A)),
            claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All")),
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": None,
    },
    "all-devices-no-solution-reversed": {
        "claims": [
            claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All")),
            claim("claim-1", req("req-0", CLASS_A)),
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": None,
    },
    "all-devices-slice-without-devices": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All"))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, node=NODE1)],
        "expect": None,
    },
    "all-devices-some-allocated": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All"))],
        "allocated": [allocated("other", DRIVER_A, "pool-1", "device-1")],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), dev("device-2"), node=NODE1)],
        "expect": None,
    },
    "all-devices-some-allocated-admin-access": {
        "claims": [
            claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All", adminAccess=True))
        ],
        "allocated": [allocated("other", DRIVER_A, "pool-1", "device-1")],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), dev("device-2"), node=NODE1)],
        "expect": [
            (
                [
                    result("req-0", DRIVER_A, "pool-1", "device-1", True),
                    result("req-0", DRIVER_A, "pool-1", "device-2", True),
                ],
                "local",
            )
        ],
    },
    "all-devices-some-allocating-admin-access": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A, adminAccess=True),
                req("req-1", CLASS_A, None, allocationMode="All", adminAccess=True),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), dev("device-2"), node=NODE1)],
        "expect": None,
    },
    "count-devices-some-allocated-admin-access": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, 2, adminAccess=True))],
        "allocated": [allocated("other", DRIVER_A, "pool-1", "device-1")],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), dev("device-2"), node=NODE1)],
        "expect": [
            (
                [
                    result("req-0", DRIVER_A, "pool-1", "device-1", True),
                    result("req-0", DRIVER_A, "pool-1", "device-2", True),
                ],
                "local",
            )
        ],
    },
    "separate-claims-share-device-admin-access": {
        "claims": [
            claim("claim-0", req("req-0", CLASS_A, adminAccess=True)),
            claim("claim-1", req("req-0", CLASS_A, adminAccess=True)),
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), dev("device-2"), node=NODE1)],
        "expect": [
            ([result("req-0", DRIVER_A, "pool-1", "device-1", True)], "local"),
            ([result("req-0", DRIVER_A, "pool-1", "device-1", True)], "local"),
        ],
    },
    "admin-access-claims-device-allocating-for-non-admin-access": {
        "claims": [
            claim("claim-0", req("req-0", CLASS_A)),
            claim("claim-1", req("req-0", CLASS_A, adminAccess=True)),
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), dev("device-2"), node=NODE1)],
        "expect": [
            ([result("req-0", DRIVER_A, "pool-1", "device-1")], "local"),
            ([result("req-0", DRIVER_A, "pool-1", "device-1", True)], "local"),
        ],
    },
    "all-devices-slice-without-devices-prioritized-list": {
        "claims": [
            claim(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [
                        {"name": "subreq-0", "deviceClassName": CLASS_A, "allocationMode": "All"},
                        {"name": "subreq-1", "deviceClassName": CLASS_B, "count": 1},
                    ],
                },
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A), cls(CLASS_B, DRIVER_B)],
        "slices": [
            slice_("pool-1", DRIVER_A, node=NODE1),
            slice_("pool-2", DRIVER_B, dev("device-1"), node=NODE1),
        ],
        "expect": [([result("req-0/subreq-1", DRIVER_B, "pool-2", "device-1")], "local")],
    },
    "all-devices-some-allocated-prioritized-list": {
        "claims": [
            claim(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [
                        {"name": "subreq-0", "deviceClassName": CLASS_A, "allocationMode": "All"},
                        {"name": "subreq-1", "deviceClassName": CLASS_B, "count": 1},
                    ],
                },
            )
        ],
        "allocated": [allocated("other", DRIVER_A, "pool-1", "device-1")],
        "classes": [cls(CLASS_A, DRIVER_A), cls(CLASS_B, DRIVER_B)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1"), dev("device-2"), node=NODE1),
            slice_("pool-2", DRIVER_B, dev("device-1"), node=NODE1),
        ],
        "expect": [([result("req-0/subreq-1", DRIVER_B, "pool-2", "device-1")], "local")],
    },
    "network-attached-device": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1"), selector=label_selector(REGION_KEY, "r1"))
        ],
        "expect": [
            ([result("req-0", DRIVER_A, "pool-1", "device-1")], label_selector(REGION_KEY, "r1"))
        ],
    },
    "unsuccessful-allocation-network-attached-device": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1"), selector=label_selector(REGION_KEY, "r2"))
        ],
        "expect": None,
    },
    "many-network-attached-devices": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, 4))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1"), selector=label_selector(REGION_KEY, "r1")),
            slice_("pool-2", DRIVER_A, dev("device-1"), all_nodes=True),
            slice_(
                "pool-3", DRIVER_A, dev("device-1"), selector=label_selector(PLANET_KEY, "earth")
            ),
            slice_("pool-4", DRIVER_A, dev("device-1"), selector=local_selector(NODE1)),
        ],
        "expect": [
            (
                [result("req-0", DRIVER_A, f"pool-{i}", "device-1") for i in range(1, 5)],
                {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": REGION_KEY, "operator": "In", "values": ["r1"]},
                                {"key": PLANET_KEY, "operator": "In", "values": ["earth"]},
                            ],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [NODE1]}
                            ],
                        }
                    ]
                },
            )
        ],
    },
    "local-and-network-attached-devices": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, 2))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1"), selector=label_selector(REGION_KEY, "r1")),
            slice_("pool-2", DRIVER_A, dev("device-1"), node=NODE1),
        ],
        "expect": [
            (
                [
                    result("req-0", DRIVER_A, "pool-1", "device-1"),
                    result("req-0", DRIVER_A, "pool-2", "device-1"),
                ],
                "local",
            )
        ],
    },
    "already-allocated-devices": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "allocated": [allocated("other", DRIVER_A, "pool-1", "device-1")],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": None,
    },
    "with-constraint": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A),
                req("req-1", CLASS_A),
                constraints=[
                    {"matchAttribute": f"{DRIVER_A}/numa"},
                    {"matchAttribute": f"{DRIVER_A}/driverVersion"},
                    {"matchAttribute": f"{DRIVER_A}/stringAttribute"},
                    {"matchAttribute": f"{DRIVER_A}/boolAttribute"},
                ],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                *(
                    dev(d, driverVersion="1.0.0", numa=1, stringAttribute="s", boolAttribute=True)
                    for d in ("device-1", "device-2")
                ),
                node=NODE1,
            )
        ],
        "expect": [
            (
                [
                    result("req-0", DRIVER_A, "pool-1", "device-1"),
                    result("req-1", DRIVER_A, "pool-1", "device-2"),
                ],
                "local",
            )
        ],
    },
    "with-constraint-non-existent-attribute": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A),
                constraints=[{"matchAttribute": f"{DRIVER_A}/nope"}],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": None,
    },
    "with-constraint-not-matching-int-attribute": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A, 2),
                constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1", numa=1), dev("device-2", numa=2), node=NODE1)
        ],
        "expect": None,
    },
    "with-constraint-not-matching-int-attribute-all-devices": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A, None, allocationMode="All"),
                constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1", numa=1), dev("device-2", numa=2), node=NODE1)
        ],
        "error": "cannot add device driver-a/pool-1/device-2 because a claim constraint would not "
        "be satisfied",
    },
    "with-constraint-not-matching-version-attribute": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A, 2),
                constraints=[{"matchAttribute": f"{DRIVER_A}/driverVersion"}],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                dev("device-1", driverVersion="1.0.0"),
                dev("device-2", driverVersion="2.0.0"),
                node=NODE1,
            )
        ],
        "expect": None,
    },
    "with-constraint-for-request": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A),
                req("req-1", CLASS_A),
                constraints=[
                    {"requests": ["req-0"], "matchAttribute": f"{DRIVER_A}/driverVersion"}
                ],
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                dev("device-1", driverVersion="1.0.0"),
                dev("device-2", driverVersion="2.0.0"),
                node=NODE1,
            )
        ],
        "expect": [
            (
                [
                    result("req-0", DRIVER_A, "pool-1", "device-1"),
                    result("req-1", DRIVER_A, "pool-1", "device-2"),
                ],
                "local",
            )
        ],
    },
    # resourceapi.AllocationResultsMaxSize: at most 32 devices a claim.
    "too-many-devices-single-request": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, 500))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [],
        "error": "claim default/claim-0: number of requested devices 500 exceeds the claim "
        "limit of 32",
    },
    "many-devices-okay": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, MAX_RESULTS))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [],
        "expect": None,
    },
    "too-many-devices-total": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, MAX_RESULTS), req("req-1", CLASS_A, 1))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, *devices(MAX_RESULTS + 1), node=NODE1)],
        "error": "number of requested devices 33 exceeds the claim limit of 32",
    },
    "all-devices-invalid-CEL": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, 500))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [],
        "error": "exceeds the claim limit",
    },
    "max-number-devices": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, MAX_RESULTS))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, *devices(MAX_RESULTS), node=NODE1)],
        "expect": [(results("req-0", DRIVER_A, "pool-1", MAX_RESULTS), "local")],
    },
    "prioritized-list-too-many-in-first-subrequest": {
        "claims": [
            claim(
                "claim-0",
                first_available("req-0", sub("subreq-0", CLASS_B, 500), sub("subreq-1", CLASS_A)),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A), cls(CLASS_B, DRIVER_B)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1"), node=NODE1)],
        "expect": [([result("req-0/subreq-1", DRIVER_A, "pool-1", "device-1")], "local")],
    },
    "prioritized-list-max-allocation-limit-request": {
        "claims": [
            claim(
                "claim-0",
                *(
                    first_available(
                        name,
                        sub("subreq-0", CLASS_A, MAX_RESULTS),
                        sub("subreq-1", CLASS_A, MAX_RESULTS // 2),
                    )
                    for name in ("req-0", "req-1")
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, *devices(MAX_RESULTS * 2), node=NODE1)],
        "expect": [
            (
                results("req-0/subreq-1", DRIVER_A, "pool-1", MAX_RESULTS // 2)
                + results("req-1/subreq-1", DRIVER_A, "pool-1", MAX_RESULTS // 2, MAX_RESULTS // 2),
                "local",
            )
        ],
    },
    "prioritized-list-max-allocation-allocation-mode-all": {
        "claims": [
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subreq-0", CLASS_A, None, allocationMode="All"),
                    sub("subreq-1", CLASS_A, 2),
                ),
                req("req-1", CLASS_B, 2),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A), cls(CLASS_B, DRIVER_B)],
        "slices": [
            slice_("pool-1", DRIVER_A, *devices(MAX_RESULTS - 1), node=NODE1),
            slice_("pool-2", DRIVER_B, *devices(2), node=NODE1),
        ],
        "expect": [
            (
                results("req-0/subreq-1", DRIVER_A, "pool-1", 2)
                + results("req-1", DRIVER_B, "pool-2", 2),
                "local",
            )
        ],
    },
    # Device taints (DRADeviceTaints on).
    "tainted-two-devices": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                dev("device-1", taints=(TAINT_NO_SCHEDULE,)),
                dev("device-2", taints=(TAINT_NO_EXECUTE,)),
                node=NODE1,
            )
        ],
        "expect": None,
    },
    "tainted-one-device-two-taints": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                dev("device-1", taints=(TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE)),
                node=NODE1,
            )
        ],
        "expect": None,
    },
    "tainted-two-devices-tolerated": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, tolerations=[TOLERATE_NO_EXECUTE]))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                dev("device-1", taints=(TAINT_NO_SCHEDULE,)),
                dev("device-2", taints=(TAINT_NO_EXECUTE,)),
                node=NODE1,
            )
        ],
        # Only the second device's taints are tolerated.
        "expect": [([result("req-0", DRIVER_A, "pool-1", "device-2")], "local")],
    },
    "tainted-two-devices-prioritized-list-tolerated": {
        "claims": [
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subreq-0", CLASS_A),
                    sub("subreq-1", CLASS_A, tolerations=[TOLERATE_NO_EXECUTE]),
                ),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                dev("device-1", taints=(TAINT_NO_SCHEDULE,)),
                dev("device-2", taints=(TAINT_NO_EXECUTE,)),
                node=NODE1,
            )
        ],
        "expect": [([result("req-0/subreq-1", DRIVER_A, "pool-1", "device-2")], "local")],
    },
    "tainted-no-effect": {
        "claims": [claim("claim-0", req("req-0", CLASS_A))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [slice_("pool-1", DRIVER_A, dev("device-1", taints=(TAINT_NONE,)), node=NODE1)],
        "expect": [([result("req-0", DRIVER_A, "pool-1", "device-1")], "local")],
    },
    "tainted-one-device-two-taints-both-tolerated": {
        "claims": [
            claim(
                "claim-0",
                req("req-0", CLASS_A, tolerations=[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE]),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_(
                "pool-1",
                DRIVER_A,
                dev("device-1", taints=(TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE)),
                node=NODE1,
            )
        ],
        "expect": [([result("req-0", DRIVER_A, "pool-1", "device-1")], "local")],
    },
    "tainted-prioritized-list": {
        "claims": [
            claim(
                "claim-0",
                first_available("req-0", sub("subreq-0", CLASS_B), sub("subreq-1", CLASS_A)),
            )
        ],
        "classes": [cls(CLASS_A, DRIVER_A), cls(CLASS_B, DRIVER_B)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1", taints=(TAINT_NO_SCHEDULE,)), node=NODE1)
        ],
        "expect": None,
    },
    "tainted-admin-access": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, adminAccess=True))],
        "allocated": [
            allocated("other-1", DRIVER_A, "pool-1", "device-1"),
            allocated("other-2", DRIVER_A, "pool-1", "device-2"),
        ],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1", taints=(TAINT_NO_SCHEDULE,)), node=NODE1)
        ],
        "expect": None,
    },
    # "All" takes every device the request selects: one it may not take
    # (tainted) rules the node out, it does not shrink "all".
    "tainted-all-devices-single": {
        "claims": [claim("claim-0", req("req-0", CLASS_A, None, allocationMode="All"))],
        "classes": [cls(CLASS_A, DRIVER_A)],
        "slices": [
            slice_("pool-1", DRIVER_A, dev("device-1", taints=(TAINT_NO_SCHEDULE,)), node=NODE1)
        ],
        "expect": None,
    },
}


def _parsed(kind: str, obj: dict[str, Any]) -> Any:
    got = parse_dra_object(kind, obj)
    assert not hasattr(got, "message"), got
    return got


def store_of(case: Case, held: str = "allocated") -> DeviceStore:
    """The case's classes, slices and claims already allocated (`held`), stored."""
    store = DeviceStore()
    for kind, key in (("DeviceClass", "classes"), ("ResourceSlice", "slices")):
        for o in case[key]:
            store.set(_parsed(kind, o))
    for o in case.get(held, []):
        store.set(_parsed("ResourceClaim", o))
    return store


@pytest.mark.parametrize("name", sorted(CASES))
def test_upstream_allocator(name: str) -> None:
    case = CASES[name]
    store = store_of(case)
    claims: list[ResourceClaim] = [_parsed("ResourceClaim", o) for o in case["claims"]]
    labels = {REGION_KEY: "r1", PLANET_KEY: "earth"}
    run: Callable[[], Any] = lambda: allocate(store, claims, NODE1, labels)  # noqa: E731
    if "error" in case:
        with pytest.raises(AllocationError, match=case["error"]):
            run()
        return
    got = run()
    if case["expect"] is None:
        assert got is None
        return
    assert got is not None
    want = []
    for results, selector in case["expect"]:
        want.append(
            (
                results,
                {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [NODE1]}
                            ]
                        }
                    ]
                }
                if selector == "local"
                else selector,
            )
        )
    assert [
        (
            [result(r.request, r.driver, r.pool, r.device, r.admin_access) for r in a.results],
            a.raw.get("nodeSelector"),
        )
        for a in got
    ] == want
