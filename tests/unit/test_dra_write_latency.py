"""Devices while Troupe's own claim writes are slow: the pipeline with the
in-memory cluster and a virtual clock, where every ResourceClaim write takes
200 ms and comes back at once as a watch event, and a pod is tried every 50 ms
(the probe that found one GPU given to four claims: the finalizer write's echo
replaced the allocation the scheduler held, so the device looked free until
the allocation write came back).

What must hold whatever the timing: no device in two allocations, no more pods
bound than there are devices, every bound pod's claim allocated and reserved
for it, and a pod whose device has binding conditions not bound before the
driver reports them."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tests.unit.dra_helpers import (
    DRIVER,
    claim,
    device,
    device_class,
    node,
    pod,
    request,
    slice_,
    template,
)
from troupe.config import default_config
from troupe.dra.store import DeviceStore
from troupe.dra.types import DeviceID, ResourceClaim, parse_dra_object
from troupe.plugins.registry import IN_TREE
from troupe.tools import simulate as simulate_module
from troupe.tools.simulate import Simulation

WRITE_LATENCY = 0.2
POD_EVERY = 0.05


def one_gpu_nodes(n: int) -> list[dict[str, Any]]:
    """n nodes with one GPU each."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(node(f"n{i}"))
        out.append(slice_(f"n{i}-gpu", device("gpu-0"), node=f"n{i}"))
    return out


def late_watch(sim: Simulation, delay: float) -> None:
    """ResourceClaim watch events arrive `delay` of virtual time after the write
    landed (call once the objects are loaded)."""
    feed = sim.cluster.on_claim_write
    assert feed is not None

    def late(o: dict[str, Any]) -> None:
        copy = {
            **o,
            "metadata": dict(o.get("metadata") or {}),
            "status": dict(o.get("status") or {}),
        }
        sim.clock.call_at(sim.clock.now() + delay, lambda: feed(copy))

    sim.cluster.on_claim_write = late


def slow_claim_writes(sim: Simulation, latency: float) -> None:
    """Every ResourceClaim write (patch, create) takes `latency` of virtual time;
    its watch event comes back the moment it lands, as with a fast watch."""
    cluster = sim.cluster
    patch, create = cluster.patch_resource_claim, cluster.create_resource_claim

    async def slow_patch(key: str, body: Mapping[str, Any], status: bool = False) -> Any:
        await sim.clock.sleep(latency)
        return await patch(key, body, status)

    async def slow_create(namespace: str, body: Mapping[str, Any]) -> Any:
        await sim.clock.sleep(latency)
        return await create(namespace, body)

    cluster.patch_resource_claim = slow_patch  # type: ignore[method-assign]
    cluster.create_resource_claim = slow_create  # type: ignore[method-assign]


async def drive(sim: Simulation, seconds: float, loaded: Callable[[], None] | None = None) -> None:
    """One scheduling attempt every POD_EVERY of virtual time, binding cycles
    running in between, for `seconds` (`loaded` is called once the objects are in)."""
    s = sim.scheduler
    sim._load()
    if loaded is not None:
        loaded()
    end = sim.clock.now() + seconds
    while sim.clock.now() < end:
        s.schedule_one()
        await s.settle()
        sim.clock.advance_by(POD_EVERY)
        s.queue.flush()
        await s.settle()


def check_devices(sim: Simulation) -> tuple[int, int]:
    """Devices given once at most; each bound pod's claims allocated and
    reserved for it. Returns (pods bound, devices allocated)."""
    owners: Counter[tuple[str, str, str]] = Counter()
    claims = sim.cluster.resource_claims
    for c in claims.values():
        alloc = (c.get("status") or {}).get("allocation")
        if alloc:
            for r in alloc["devices"]["results"]:
                owners[(r["driver"], r["pool"], r["device"])] += 1
    twice = {d: n for d, n in owners.items() if n > 1}
    assert not twice, f"devices in more than one allocation: {twice}"
    bound = 0
    for key, p in sim.cluster.pods.items():
        if not (p.get("spec") or {}).get("nodeName"):
            continue
        bound += 1
        ns = key.partition("/")[0]
        for st in (p.get("status") or {}).get("resourceClaimStatuses") or []:
            c = claims[f"{ns}/{st['resourceClaimName']}"]
            status = c.get("status") or {}
            assert status.get("allocation"), f"{key} bound with {st} not allocated"
            uids = [r["uid"] for r in status.get("reservedFor") or []]
            assert p["metadata"]["uid"] in uids, f"{key} bound, not in {c['metadata']['name']}"
    return bound, sum(owners.values())


def gpu_pods(n: int) -> list[dict[str, Any]]:
    return [template("t", request()), *(pod(f"p{i}", template="t") for i in range(n))]


def test_a_device_is_never_given_twice_while_claim_writes_are_in_flight() -> None:
    sim = Simulation([device_class(), *one_gpu_nodes(8), *gpu_pods(14)], default_config(IN_TREE))
    slow_claim_writes(sim, WRITE_LATENCY)
    asyncio.run(drive(sim, 30.0))
    bound, allocated = check_devices(sim)
    assert bound == 8 and allocated == 8


def test_an_older_view_of_a_claim_never_replaces_the_one_written() -> None:
    """The watch event of the finalizer write comes back only after the
    allocation write returned (a slow watch): it is older than what PreBind
    wrote and must not take the allocation back."""
    sim = Simulation([device_class(), *one_gpu_nodes(2), *gpu_pods(4)], default_config(IN_TREE))
    slow_claim_writes(sim, WRITE_LATENCY)
    held: list[dict[str, Any]] = []
    feeds: list[Callable[[dict[str, Any]], None]] = []

    def late(o: dict[str, Any]) -> None:
        # Each write's event is held back until the next write's event comes.
        held.append(o)
        if len(held) > 1:
            feeds[0](held.pop(0))

    def loaded() -> None:
        assert sim.cluster.on_claim_write is not None
        feeds.append(sim.cluster.on_claim_write)
        sim.cluster.on_claim_write = late

    asyncio.run(drive(sim, 30.0, loaded))
    for o in held:
        feeds[0](o)
    bound, allocated = check_devices(sim)
    assert bound == 2 and allocated == 2


def fabric_gpu(name: str) -> dict[str, Any]:
    d = device(name)
    d["bindingConditions"] = ["Attached"]
    d["bindingFailureConditions"] = ["AttachFailed"]
    return d


@pytest.mark.parametrize("watch_delay", [0.05, 1.0])
def test_binding_conditions_hold_the_pod_while_claim_writes_are_slow(
    monkeypatch: pytest.MonkeyPatch, watch_delay: float
) -> None:
    """A driver that never reports its devices attached: no pod binds, each
    waits until the binding timeout, with the BindingConditionsPending event.
    With a watch a little slower than the writes' answers, the finalizer's echo
    came in while the allocation was written, and PreBind, reading the claim
    without an allocation, bound the pod at once."""
    monkeypatch.setattr(simulate_module, "readied_devices", lambda claim, stamp: None)
    objs: list[dict[str, Any]] = [device_class()]
    for i in range(2):
        objs.append(node(f"n{i}"))
        objs.append(slice_(f"n{i}-gpu", fabric_gpu("gpu-0"), node=f"n{i}"))
    sim = Simulation([*objs, *gpu_pods(3)], default_config(IN_TREE))
    slow_claim_writes(sim, WRITE_LATENCY)
    asyncio.run(drive(sim, 30.0, lambda: late_watch(sim, watch_delay)))
    bound = [k for k, p in sim.cluster.pods.items() if (p.get("spec") or {}).get("nodeName")]
    assert bound == []
    assert any(e.reason == "BindingConditionsPending" for e in sim.cluster.events)
    check_devices(sim)


def test_the_store_holds_an_assumed_claim_until_its_write_returns() -> None:
    """The device store's rules, one at a time: an in-flight allocation
    survives every watch event of its claim but deletion (or a new claim under
    the name); PreBind's answer replaces it; an older view is ignored."""

    def parsed(o: dict[str, Any]) -> ResourceClaim:
        c = parse_dra_object("ResourceClaim", o)
        assert isinstance(c, ResourceClaim)
        return c

    def version(rv: int, allocated: bool, uid: str = "u1") -> ResourceClaim:
        o = claim("c", request())
        o["metadata"].update(resourceVersion=str(rv), uid=uid)
        if allocated:
            o["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-0"}
                        ]
                    }
                }
            }
        return parsed(o)

    gpu = DeviceID(DRIVER, "n0", "gpu-0")
    store = DeviceStore()
    store.set(version(1, False))
    store.assume(version(1, True))
    assert store.in_use(gpu)
    store.set(version(2, False))  # the finalizer write's echo
    assert store.in_use(gpu) and store.claim("default/c").allocation is not None  # type: ignore[union-attr]
    store.written(version(3, True))  # the allocation write's answer
    assert store.in_use(gpu)
    assert store.stale(version(2, False))
    store.set(version(2, False))  # a late echo of the finalizer write
    assert store.in_use(gpu) and store.claim("default/c").resource_version == "3"  # type: ignore[union-attr]
    store.set(version(4, False))  # deallocated by someone, newer: taken
    assert not store.in_use(gpu)
    store.assume(version(4, True))
    store.set(version(1, False, uid="u2"))  # deleted and made again: a new claim
    assert not store.in_use(gpu)
    store.assume(version(1, True, uid="u2"))
    store.set(version(1, True, uid="u2"), deleted=True)
    assert not store.in_use(gpu) and store.claim("default/c") is None


def test_a_bind_made_but_answered_409_keeps_the_pods_claim() -> None:
    """The bind is made, but its answer is a 409 (a retried request): the pod
    read back is bound where Troupe bound it, so the bind was ours. Unreserve
    took the claim back from a pod that runs (found by the live harness: 9 pods
    bound on 8 GPUs, one bound with its claim deallocated)."""
    from troupe.core.cluster import BindConflict

    sim = Simulation([device_class(), *one_gpu_nodes(2), *gpu_pods(1)], default_config(IN_TREE))
    bind = sim.cluster.bind

    async def made_then_409(pod: Any, uid: str, node: Any) -> None:
        await bind(pod, uid, node)
        raise BindConflict(f"pod {pod} is already assigned to node {node!r}")

    sim.cluster.bind = made_then_409  # type: ignore[method-assign]
    result = asyncio.run(sim.run())
    out = result.to_json_obj()["pods"]["default/p0"]
    assert out["node"] in ("n0", "n1")
    bound, allocated = check_devices(sim)
    assert bound == 1 and allocated == 1
    assert sim.scheduler.statistics().scheduled == 1
