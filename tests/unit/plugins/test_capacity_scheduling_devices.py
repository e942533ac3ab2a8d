"""CapacityScheduling counts DRA devices, where Troupe goes beyond
scheduler-plugins: a device allocated through a ResourceClaim counts against
the quota of the claim's namespace under its DeviceClass's extended resource
name (`spec.extendedResourceName`, else
`deviceclass.resource.kubernetes.io/<class>`), so `max: {example.com/gpu: 2}`
limits a team to two GPUs whether its pods ask for them as an extended
resource or through claims; a claim shared by several pods counts once; a
gang's members count together; a restart counts the allocated claims again."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.builders import make_pod
from tests.unit.dra_helpers import (
    claim,
    device_class,
    gpus,
    node,
    pod,
    request,
    template,
)
from tests.unit.plugins.test_capacity_scheduling import PROFILE, Cluster, plugin
from troupe.api.parse import parse_pod
from troupe.api.types import Pod
from troupe.config import parse_config
from troupe.framework.cycle_state import CycleState
from troupe.framework.status import Code
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import Simulation, SimulationResult

GPU = "example.com/gpu"
MORE_THAN_MAX = "is rejected in PreFilter because ElasticQuota default is more than Max"


def quota(max_: dict[str, Any], min_: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "team", "namespace": "default"},
        "spec": {"min": min_ or max_, "max": max_},
    }


def simulate(objects: list[dict[str, Any]]) -> tuple[Simulation, dict[str, Any]]:
    sim = Simulation(objects, parse_config({"profiles": [PROFILE]}, IN_TREE))
    result: SimulationResult = asyncio.run(sim.run())
    return sim, result.to_json_obj()["pods"]


def cluster(extended: str = GPU) -> list[dict[str, Any]]:
    """Two nodes of 4 GPUs each, their class backing `extended`."""
    return [
        device_class(extended=extended),
        node("n0"),
        node("n1"),
        gpus("n0", 4),
        gpus("n1", 4),
    ]


def test_devices_of_claims_count_against_the_quota() -> None:
    """Three pods of one GPU each under max 2 GPUs: two run, the third is
    refused by the quota, though the nodes have GPUs left."""
    objects = [
        *cluster(),
        quota({"cpu": 64, GPU: 2}),
        template("one-gpu", request("gpu", 1)),
        *(pod(f"p{i}", template="one-gpu") for i in range(3)),
    ]
    _, pods = simulate(objects)
    placed = [k for k, v in pods.items() if v["node"]]
    assert len(placed) == 2
    (refused,) = [v for v in pods.values() if not v["node"]]
    assert MORE_THAN_MAX in refused["reason"]


def test_the_class_name_stands_for_a_class_without_an_extended_resource_name() -> None:
    implicit = "deviceclass.resource.kubernetes.io/gpu.example.com"
    objects = [
        device_class(),
        node("n0"),
        gpus("n0", 4),
        quota({"cpu": 64, implicit: 3}),
        claim("two", request("gpu", 2)),
        claim("other-two", request("gpu", 2)),
        pod("a", claim="two"),
        pod("b", claim="other-two"),
    ]
    _, pods = simulate(objects)
    assert pods["default/a"]["node"] == "n0"
    assert pods["default/b"]["node"] is None
    assert MORE_THAN_MAX in pods["default/b"]["reason"]


def test_a_shared_claim_counts_once() -> None:
    """Three pods share one claim of 2 GPUs: with max 2 GPUs all run; a pod with
    a claim of its own is then over the quota."""
    objects = [
        *cluster(),
        quota({"cpu": 64, GPU: 2}),
        claim("shared", request("gpu", 2)),
        *(pod(f"s{i}", claim="shared") for i in range(3)),
        template("one-gpu", request("gpu", 1)),
        pod("own", template="one-gpu"),
    ]
    _, pods = simulate(objects)
    assert all(pods[f"default/s{i}"]["node"] for i in range(3))
    assert pods["default/own"]["node"] is None
    assert MORE_THAN_MAX in pods["default/own"]["reason"]


def test_extended_resources_and_claims_count_together() -> None:
    """One pod asks for a GPU as an extended resource (DRA serves it through the
    class), another through a claim, a third as an extended resource again:
    max 2 GPUs lets two of them run."""
    asks = make_pod("ext").req(cpu="1").obj()
    asks["spec"]["containers"][0]["resources"]["requests"][GPU] = "1"
    asks2 = copy.deepcopy(asks)
    asks2["metadata"]["name"] = "ext2"
    asks2["metadata"]["uid"] = "uid-ext2"
    objects = [
        *cluster(),
        quota({"cpu": 64, GPU: 2}),
        asks,
        template("one-gpu", request("gpu", 1)),
        pod("claimed", template="one-gpu"),
        asks2,
    ]
    _, pods = simulate(objects)
    placed = sorted(k for k, v in pods.items() if v["node"])
    assert len(placed) == 2, pods
    (refused,) = [v for v in pods.values() if not v["node"]]
    assert MORE_THAN_MAX in refused["reason"]


def test_a_gangs_devices_count_together() -> None:
    """A gang of 3 members of one GPU each (minMember 3) under max 2 GPUs is
    refused whole, the quota named; nothing of it runs."""
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"minMember": 3},
    }
    objects = [
        *cluster(),
        quota({"cpu": 64, GPU: 2}),
        group,
        template("one-gpu", request("gpu", 1)),
        *(pod(f"m{i}", template="one-gpu", group="job") for i in range(3)),
    ]
    _, pods = simulate(objects)
    assert not any(v["node"] for v in pods.values())
    reason = pods["default/m0"]["reason"]
    assert 'PodGroup "default/job": 2 of minMember 3 pods fit' in reason
    assert MORE_THAN_MAX in reason


def allocated_claim(name: str, devices: list[str]) -> dict[str, Any]:
    obj = claim(name, request("gpu", len(devices)))
    obj["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.example.com", "pool": "n0", "device": d}
                    for d in devices
                ]
            }
        }
    }
    return obj


def test_a_restart_counts_allocated_claims_once_from_the_api() -> None:
    """A new scheduler lists the class, the claims (allocated, in status), the
    quota and the bound pods: the devices count again, a shared claim once."""
    h = Cluster(nodes=1, cpu="16")

    async def go() -> None:
        h.s.events.on_dra_object("DeviceClass", device_class(extended=GPU))
        h.s.events.on_dra_object("ResourceClaim", allocated_claim("shared", ["gpu-0", "gpu-1"]))
        h.quota("default", {"cpu": 64, GPU: 3}, {"cpu": 64, GPU: 3})
        for name in ("a", "b"):
            obj = pod(name, claim="shared")
            obj["spec"]["nodeName"] = "n0"
            obj["status"] = {"phase": "Running"}
            h.add(obj)
        await h.drain()
        info = plugin(h.s).quotas.infos["default"]
        assert info.used.get(GPU) == 2
        assert info.used.get("cpu") == 2000
        # status.used: the Running pods' requests and their claim's devices, once
        await h.advance(1)
        assert h.used("default/default") == {"cpu": "2", GPU: "2"}
        # One GPU left of max 3: a pod with a claim of two is refused.
        h.s.events.on_dra_object("ResourceClaim", claim("two", request("gpu", 2)))
        p = h.add(pod("c", claim="two"))
        await h.drain()
        assert not h.node_of(p)
        assert MORE_THAN_MAX in h.reason(p)
        # The pods sharing the claim end: the claim no longer counts.
        for name in ("a", "b"):
            obj = copy.deepcopy(h.cluster.pods[f"default/{name}"])
            obj["status"]["phase"] = "Succeeded"
            h.s.on_pod(obj)
        assert info.used.get(GPU, 0) == 0

    asyncio.run(go())


def test_a_gang_plans_release_of_a_victim_is_undone_with_its_claims() -> None:
    """The victims a gang's preemption plan takes stop counting, their claims'
    devices with them, and count again, claims included, when the plan ends."""
    h = Cluster(nodes=1, cpu="16")

    async def go() -> None:
        h.s.events.on_dra_object("DeviceClass", device_class(extended=GPU))
        h.s.events.on_dra_object("ResourceClaim", allocated_claim("shared", ["gpu-0", "gpu-1"]))
        h.quota("default", {"cpu": 64, GPU: 3}, {"cpu": 64, GPU: 3})
        keys = []
        for name in ("a", "b"):
            obj = pod(name, claim="shared")
            obj["spec"]["nodeName"] = "n0"
            obj["status"] = {"phase": "Running"}
            keys.append(h.add(obj))
        await h.drain()
        cs = plugin(h.s)
        info = cs.quotas.infos["default"]
        before = dict(info.used)
        victims = [p for k in keys if (p := h.s.cache.pod(k)) is not None]
        assert len(victims) == 2
        undo = cs.release(CycleState(), victims[0], victims)
        assert undo is not None
        assert info.used.get(GPU, 0) == 0 and info.used.get("cpu", 0) == 0
        undo()
        assert info.used == before
        # the claim is counted once again: its pods end, and it stops counting
        for name in ("a", "b"):
            obj = copy.deepcopy(h.cluster.pods[f"default/{name}"])
            obj["status"]["phase"] = "Succeeded"
            h.s.on_pod(obj)
        assert info.used.get(GPU, 0) == 0

    asyncio.run(go())


def test_a_nominated_pods_claim_devices_count_at_pre_filter() -> None:
    """A pod nominated to a node (preemption made room for it, not bound yet)
    counts in its quota's used + nominated with the devices of its claims, as
    with its requests: under max 2 GPUs, with a nominated pod holding a claim of
    2, a second pod's claim of 1 is refused at PreFilter with upstream's text.
    A claim the pod shares with the nominated pod counts once."""
    h = Cluster(nodes=1, cpu="16")
    h.s.events.on_dra_object("DeviceClass", device_class(extended=GPU))
    h.s.events.on_dra_object("ResourceClaim", claim("two", request("gpu", 2)))
    h.s.events.on_dra_object("ResourceClaim", claim("one", request("gpu", 1)))
    h.quota("default", {"cpu": 64, GPU: 2}, {"cpu": 64, GPU: 2})
    cs = plugin(h.s)
    b = parse_pod(pod("b", claim="one"))
    assert isinstance(b, Pod)
    _, st = cs.pre_filter(CycleState(), b, h.s.ctx.snapshot)
    assert st.code is Code.SKIP  # alone, it fits

    a = parse_pod(pod("a", claim="two"))
    assert isinstance(a, Pod)
    cs.handle.nominator.add(a, "n0")
    _, st = cs.pre_filter(CycleState(), b, h.s.ctx.snapshot)
    assert st.code is Code.UNSCHEDULABLE
    assert st.reasons == (
        "Pod default/b is rejected in PreFilter because ElasticQuota default is more than Max",
    )
    # the nominated pod's claim, shared: its 2 GPUs count once
    c = parse_pod(pod("c", claim="two"))
    assert isinstance(c, Pod)
    _, st = cs.pre_filter(CycleState(), c, h.s.ctx.snapshot)
    assert st.code is Code.SKIP
