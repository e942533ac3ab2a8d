"""VolumeBinding: PreFilter, Filter, Reserve/Unreserve, PreBind (cases named
after volumebinding/volume_binding_test.go where ported)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.volume_builders import (
    World,
    capacity,
    csi_driver,
    pv,
    pvc,
    storage_class,
    with_claims,
    with_volume,
)
from troupe.api.parse import parse_pod
from troupe.api.storage import ANN_SELECTED_NODE
from troupe.api.types import NodeName, Pod
from troupe.core.clock import VirtualClock
from troupe.framework.cycle_state import CycleState
from troupe.framework.interface import PluginArgsError
from troupe.plugins.volume_binding import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
    ERR_UNBOUND_IMMEDIATE,
    VolumeBinding,
)
from troupe.tools.volume_sim import VolumeControllers

OK: list[str] = []


def zoned(name: str, zone: str) -> dict[str, Any]:
    return make_node(name).label("topology.kubernetes.io/zone", zone).obj()


def pod(*claims: str) -> dict[str, Any]:
    return with_claims(make_pod("p").obj(), *claims)


CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], Any]] = [
    ("pod has not pvcs", [], make_pod("p").obj(), "Skip"),
    (
        "all bound",
        [pvc("c", volume="pv-a"), pv("pv-a", claim="c", phase="Bound")],
        pod("c"),
        {"n0": OK, "n1": OK, "n2": OK},
    ),
    (
        "PVC does not exist",
        [],
        pod("c"),
        'UNSCHEDULABLE_AND_UNRESOLVABLE: persistentvolumeclaim "c" not found',
    ),
    (
        "Part of PVCs do not exist",
        [pvc("c", volume="pv-a"), pv("pv-a", claim="c", phase="Bound")],
        pod("c", "d"),
        'UNSCHEDULABLE_AND_UNRESOLVABLE: persistentvolumeclaim "d" not found',
    ),
    (
        "immediate claims not bound",
        [storage_class("imm", wffc=False), pvc("c", sc="imm")],
        pod("c"),
        f"UNSCHEDULABLE_AND_UNRESOLVABLE: {ERR_UNBOUND_IMMEDIATE}",
    ),
    (
        "unbound claim with an unknown class is immediate",
        [pvc("c", sc="nope")],
        pod("c"),
        f"UNSCHEDULABLE_AND_UNRESOLVABLE: {ERR_UNBOUND_IMMEDIATE}",
    ),
    (
        "unbound claims no matches",
        [storage_class("wait"), pvc("c", sc="wait")],
        pod("c"),
        {n: [ERR_REASON_BIND_CONFLICT] for n in ("n0", "n1", "n2")},
    ),
    (
        "bound and unbound unsatisfied",
        [
            storage_class("wait"),
            pvc("c", volume="pv-a"),
            pv("pv-a", claim="c", node="n1", phase="Bound"),
            pvc("d", sc="wait"),
        ],
        pod("c", "d"),
        {
            "n0": [ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT],
            "n1": [ERR_REASON_BIND_CONFLICT],
            "n2": [ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT],
        },
    ),
    (
        "pvc not found for pv: bound to a missing PV",
        [pvc("c", volume="gone")],
        pod("c"),
        {n: [ERR_REASON_PV_NOT_EXIST] for n in ("n0", "n1", "n2")},
    ),
    (
        "static PV on one node",
        [storage_class("wait"), pvc("c", sc="wait"), pv("local", sc="wait", node="n2")],
        pod("c"),
        {"n0": [ERR_REASON_BIND_CONFLICT], "n1": [ERR_REASON_BIND_CONFLICT], "n2": OK},
    ),
    (
        "static PV too small, wrong mode or taken",
        [
            storage_class("wait"),
            pvc("c", sc="wait", size="2Gi"),
            pv("small", sc="wait", node="n0", size="1Gi"),
            pv("rox", sc="wait", node="n1", size="5Gi", modes=("ReadOnlyMany",)),
            pv("taken", sc="wait", node="n2", size="5Gi", claim="other"),
        ],
        pod("c"),
        {n: [ERR_REASON_BIND_CONFLICT] for n in ("n0", "n1", "n2")},
    ),
    (
        "two claims cannot share one PV",
        [
            storage_class("wait"),
            pvc("c", sc="wait"),
            pvc("d", sc="wait"),
            pv("a", sc="wait", node="n0"),
            pv("b", sc="wait", node="n1"),
            pv("c2", sc="wait", node="n1"),
        ],
        pod("c", "d"),
        {"n0": [ERR_REASON_BIND_CONFLICT], "n1": OK, "n2": [ERR_REASON_BIND_CONFLICT]},
    ),
    (
        "provisioning where no static PV fits",
        [storage_class("fast", provisioner="csi.example.com"), pvc("c", sc="fast")],
        pod("c"),
        {"n0": OK, "n1": OK, "n2": OK},
    ),
    (
        "selected-node annotation pins the node",
        [
            storage_class("fast", provisioner="csi.example.com"),
            pvc("c", sc="fast", annotations={ANN_SELECTED_NODE: "n1"}),
        ],
        pod("c"),
        {"n0": [ERR_REASON_BIND_CONFLICT], "n1": OK, "n2": [ERR_REASON_BIND_CONFLICT]},
    ),
]


@pytest.mark.parametrize(("name", "objs", "pod_obj", "want"), CASES, ids=[c[0] for c in CASES])
def test_filter(name: str, objs: list[dict[str, Any]], pod_obj: dict[str, Any], want: Any) -> None:
    w = World(3).add(*objs)
    assert w.filter(VolumeBinding.new({}, w.handle), pod_obj) == want


def test_allowed_topologies_and_storage_capacity() -> None:
    w = World([zoned("n0", "a"), zoned("n1", "b"), zoned("n2", "c")])
    w.add(
        storage_class("zonal", provisioner="csi.example.com", zones=("a", "b")),
        csi_driver("csi.example.com"),
        capacity("cap-a", "zonal", "10Gi", "a"),
        capacity("cap-b", "zonal", "1Gi", "b"),
        pvc("c", sc="zonal", size="5Gi"),
    )
    assert w.filter(VolumeBinding.new({}, w.handle), pod("c")) == {
        "n0": OK,
        "n1": [ERR_REASON_NOT_ENOUGH_SPACE],
        "n2": [ERR_REASON_BIND_CONFLICT],
    }
    # A driver that does not publish capacity is not checked.
    w.add(csi_driver("csi.example.com", capacity=False))
    assert w.filter(VolumeBinding.new({}, w.handle), pod("c"))["n1"] == OK  # type: ignore[index]


def test_ephemeral_volume_counts_as_its_generated_claim() -> None:
    obj = with_volume(make_pod("p").obj(), {"name": "scratch", "ephemeral": {}})
    obj["metadata"]["uid"] = "uid-p"
    w = World(2).add(storage_class("fast", provisioner="csi.example.com"))
    got = w.filter(VolumeBinding.new({}, w.handle), obj)
    assert got == (
        "UNSCHEDULABLE_AND_UNRESOLVABLE: waiting for ephemeral volume controller to create "
        'the persistentvolumeclaim "p-scratch"'
    )
    w.add(pvc("p-scratch", sc="fast", owner_uid="someone-else"))
    got = w.filter(VolumeBinding.new({}, w.handle), obj)
    assert isinstance(got, str) and "(pod is not owner)" in got
    w.add(pvc("p-scratch", sc="fast", owner_uid="uid-p"))
    assert w.filter(VolumeBinding.new({}, w.handle), obj) == {"n0": OK, "n1": OK}


def test_two_claims_skip_the_pv_the_first_one_took_on_a_single_node() -> None:
    """findMatchingVolumes passes chosenPVs to FindMatchingVolume, which skips a
    PV an earlier claim of the pod took and goes on to the next one: on the one
    node, claim a (30Gi) takes the 50Gi PV and b (50Gi) the 100Gi one."""
    w = World(1).add(
        storage_class("wait"),
        pvc("a", sc="wait", size="30Gi"),
        pvc("b", sc="wait", size="50Gi"),
        pv("small", size="50Gi", sc="wait", node="n0"),
        pv("big", size="100Gi", sc="wait", node="n0"),
    )
    plugin = VolumeBinding.new({}, w.handle)
    assert w.filter(plugin, pod("a", "b")) == {"n0": OK}
    state = _reserve(w, plugin, pod("a", "b"), "n0")
    assert state is not None
    claimed = {
        name: p.claim_ref.name if p and p.claim_ref else None
        for name in ("small", "big")
        for p in [w.cache.volumes.pv(name)]
    }
    assert claimed == {"small": "a", "big": "b"}


def test_args() -> None:
    w = World(1)
    assert VolumeBinding.new({}, w.handle).args.bind_timeout_seconds == 600
    assert VolumeBinding.new({"bindTimeoutSeconds": 5}, w.handle).args.bind_timeout_seconds == 5
    with pytest.raises(PluginArgsError, match="should not be a negative value"):
        VolumeBinding.new({"bindTimeoutSeconds": -1}, w.handle)
    with pytest.raises(PluginArgsError, match="unknown field"):
        VolumeBinding.new({"bindTimeout": 5}, w.handle)


def _reserve(w: World, plugin: VolumeBinding, obj: dict[str, Any], node: str) -> CycleState:
    p = parse_pod(obj)
    assert isinstance(p, Pod)
    state = CycleState()
    w.table()
    plugin.pre_filter(state, p, w.snapshot)
    assert plugin.reserve(state, p, NodeName(node)).is_success
    return state


def test_reserve_assumes_and_unreserve_restores() -> None:
    w = World(2).add(
        storage_class("wait"),
        storage_class("fast", provisioner="csi.example.com"),
        pvc("c", sc="wait"),
        pvc("d", sc="fast"),
        pv("local", sc="wait", node="n1"),
    )
    plugin = VolumeBinding.new({}, w.handle)
    p = parse_pod(pod("c", "d"))
    assert isinstance(p, Pod)
    state = _reserve(w, plugin, pod("c", "d"), "n1")
    store = w.cache.volumes
    assumed_pv = store.pv("local")
    assert assumed_pv is not None and assumed_pv.claim_ref is not None
    assert assumed_pv.claim_ref.name == "c"
    claim = store.pvc("default/d")
    assert claim is not None and claim.annotations[ANN_SELECTED_NODE] == "n1"
    # The next pod's claim does not see "local" as free.
    w.add(pvc("e", sc="wait"))
    got = w.filter(plugin, with_claims(make_pod("q").obj(), "e"))
    assert isinstance(got, dict) and got["n1"] == [ERR_REASON_BIND_CONFLICT]
    plugin.unreserve(state, p, NodeName("n1"))
    restored = store.pv("local")
    assert restored is not None and restored.claim_ref is None
    restored_claim = store.pvc("default/d")
    assert restored_claim is not None and ANN_SELECTED_NODE not in restored_claim.annotations
    assert w.client.volume_writes == 0


def test_pre_bind_writes_and_waits_for_the_controllers() -> None:
    w = World(2).add(
        storage_class("wait"),
        storage_class("fast", provisioner="csi.example.com"),
        pvc("c", sc="wait"),
        pvc("d", sc="fast"),
        pv("local", sc="wait", node="n1"),
    )
    for o in (pvc("c", sc="wait"), pvc("d", sc="fast")):
        w.client.claims[f"default/{o['metadata']['name']}"] = o
    w.client.volumes["local"] = pv("local", sc="wait", node="n1")

    def feed(kind: str, obj: Any) -> None:
        w.add(obj)

    VolumeControllers(
        w.client, feed, {"fast": storage_class("fast", provisioner="csi.example.com")}
    )
    plugin = VolumeBinding.new({}, w.handle)
    p = parse_pod(pod("c", "d"))
    assert isinstance(p, Pod)
    state = _reserve(w, plugin, pod("c", "d"), "n1")
    st = asyncio.run(plugin.pre_bind(state, p, NodeName("n1")))
    assert st.is_success, st
    c, d = w.cache.volumes.api_pvc("default/c"), w.cache.volumes.api_pvc("default/d")
    assert c is not None and c.volume_name == "local" and c.fully_bound
    assert d is not None and d.fully_bound and d.annotations[ANN_SELECTED_NODE] == "n1"
    provisioned = w.cache.volumes.api_pv(d.volume_name)
    assert provisioned is not None and provisioned.node_affinity is not None


def test_pre_bind_times_out_and_unreserve_undoes_the_selected_node() -> None:
    clock = VirtualClock()
    w = World(2).add(storage_class("fast", provisioner="csi.example.com"), pvc("d", sc="fast"))
    w.handle.clock = clock
    w.client.claims["default/d"] = pvc("d", sc="fast")
    w.client.on_volume_write = lambda kind, obj: w.add(obj)  # no provisioner runs
    spawned: list[Any] = []
    w.handle.spawn = spawned.append
    plugin = VolumeBinding.new({"bindTimeoutSeconds": 30}, w.handle)
    p = parse_pod(pod("d"))
    assert isinstance(p, Pod)
    state = _reserve(w, plugin, pod("d"), "n0")

    async def go() -> None:
        task = asyncio.create_task(plugin.pre_bind(state, p, NodeName("n0")))
        for _ in range(40):
            await asyncio.sleep(0)
            clock.advance_by(1.0)
        st = await task
        assert st.message == "binding volumes: timed out waiting for the condition"
        assert w.client.claims["default/d"]["metadata"]["annotations"][ANN_SELECTED_NODE] == "n0"
        plugin.unreserve(state, p, NodeName("n0"))
        await spawned.pop()
        assert ANN_SELECTED_NODE not in w.client.claims["default/d"]["metadata"]["annotations"]

    asyncio.run(go())
