"""Builders of resource.k8s.io/v1 objects for the DRA tests."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tests.builders import make_node, make_pod
from troupe.config import default_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import Simulation, SimulationResult

DRIVER = "gpu.example.com"
API = "resource.k8s.io/v1"


def device(name: str, **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    a: dict[str, Any] = {}
    cap: dict[str, Any] = {}
    for k, v in attrs.items():
        if k == "memory":
            cap["memory"] = {"value": v}
        elif k == "taints":
            out["taints"] = v
        elif isinstance(v, bool):
            a[k] = {"bool": v}
        elif isinstance(v, int):
            a[k] = {"int": v}
        elif k.endswith("version"):
            a[k] = {"version": v}
        else:
            a[k] = {"string": v}
    if a:
        out["attributes"] = a
    if cap:
        out["capacity"] = cap
    return out


def slice_(
    name: str,
    *devices: dict[str, Any],
    node: str | None = None,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    node_selector: dict[str, Any] | None = None,
    all_nodes: bool = False,
    driver: str = DRIVER,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {
            "name": pool or node or name,
            "generation": generation,
            "resourceSliceCount": count,
        },
        "devices": list(devices),
    }
    if node:
        spec["nodeName"] = node
    elif node_selector is not None:
        spec["nodeSelector"] = node_selector
    elif all_nodes:
        spec["allNodes"] = True
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def gpus(node_name: str, n: int, **attrs: Any) -> dict[str, Any]:
    """The slice of `node_name` with GPUs gpu-0 .. gpu-(n-1)."""
    return slice_(
        f"{node_name}-gpus", *(device(f"gpu-{i}", **attrs) for i in range(n)), node=node_name
    )


def gang(name: str, min_member: int) -> dict[str, Any]:
    """A scheduler-plugins PodGroup."""
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member},
    }


def device_class(name: str = DRIVER, *exprs: str, extended: str = "") -> dict[str, Any]:
    exprs = exprs or (f'device.driver == "{DRIVER}"',)
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def request(
    name: str = "gpu",
    count: int | None = None,
    *selectors: str,
    cls: str = DRIVER,
    mode: str | None = None,
    admin: bool = False,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        exactly["count"] = count
    if mode:
        exactly["allocationMode"] = mode
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"name": name, "exactly": exactly}


def claim_spec(*requests: dict[str, Any], constraints: Any = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests or [request()])}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def claim(name: str, *requests: dict[str, Any], constraints: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"claim-uid-{name}",
            "resourceVersion": "1",
        },
        "spec": claim_spec(*requests, constraints=constraints),
    }


def template(name: str, *requests: dict[str, Any], constraints: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": claim_spec(*requests, constraints=constraints)},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    b = make_node(name).capacity(cpu=16, memory="64Gi", pods=110)
    for k, v in labels.items():
        b = b.label(k, v)
    return b.obj()


_created = itertools.count()


def pod(name: str, *, template: str = "", claim: str = "", group: str = "") -> dict[str, Any]:
    """A pod claiming "gpu"; pods are created in the order they are built."""
    n = next(_created)
    b = (
        make_pod(name)
        .req(cpu="1")
        .created(f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z")
    )
    if group:
        b = b.group(group)
    o = b.obj()
    refs = []
    if template:
        refs.append({"name": "gpu", "resourceClaimTemplateName": template})
    if claim:
        refs.append({"name": "gpu", "resourceClaimName": claim})
    o["spec"]["resourceClaims"] = refs
    return o


def run(objects: list[dict[str, Any]]) -> tuple[Simulation, SimulationResult]:
    sim = Simulation(objects, default_config(IN_TREE))
    result = asyncio.run(sim.run())
    return sim, result


def placed(result: SimulationResult) -> dict[str, tuple[str | None, dict[str, Any]]]:
    out = {}
    for k, v in result.to_json_obj()["pods"].items():
        out[k.partition("/")[2]] = (v["node"], v.get("devices") or {})
    return out
