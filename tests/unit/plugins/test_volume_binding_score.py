"""VolumeBinding's PreScore/Score (StorageCapacityScoring) and its args:
scorer_test.go TestScore, TestValidateVolumeBindingArgs (apis/config/validation),
SetDefaults_VolumeBindingArgs, and Score over static bindings and dynamic
provisioning as volume_binding.go scores them."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np
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
)
from troupe.api.parse import parse_pod
from troupe.api.types import Pod, PodKey
from troupe.config import ConfigError, parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.framework.cycle_state import CycleState
from troupe.framework.features import Features
from troupe.framework.interface import PluginArgsError
from troupe.plugins.helper import ShapePoint, scaled, shape_table
from troupe.plugins.registry import IN_TREE
from troupe.plugins.volume_binding import (
    DEFAULT_SHAPE,
    VolumeBinding,
    score_classes,
)
from troupe.tools.volume_sim import VolumeControllers

# ---- scorer.go (scorer_test.go TestScore) ------------------------------------------

# helper.FunctionShape points, scores already scaled to 0..100.
INCREASING = ((0, 0), (100, 100))  # the VolumeCapacityPriority-era default
CUSTOM = ((50, 0), (80, 30), (100, 50))
DEFAULT = scaled(DEFAULT_SHAPE)  # StorageCapacityScoring's: (0, 100), (100, 0)

# (shape, [(requested, capacity) per class], want)
SCORER_CASES: list[tuple[str, tuple[tuple[int, int], ...], list[tuple[int, int]], int]] = [
    ("increasing shape, single class, 0%", INCREASING, [(0, 100)], 0),
    ("increasing shape, single class, 30%", INCREASING, [(30, 100)], 30),
    ("increasing shape, single class, 50%", INCREASING, [(50, 100)], 50),
    ("increasing shape, single class, 100%", INCREASING, [(100, 100)], 100),
    ("increasing shape, multiple classes, 0/0", INCREASING, [(0, 100), (0, 100)], 0),
    ("increasing shape, multiple classes, 0/30", INCREASING, [(0, 100), (30, 100)], 15),
    ("increasing shape, multiple classes, 30/30", INCREASING, [(30, 100), (30, 100)], 30),
    ("increasing shape, multiple classes, 30/60", INCREASING, [(30, 100), (60, 100)], 45),
    ("increasing shape, multiple classes, 50/50", INCREASING, [(50, 100), (50, 100)], 50),
    ("increasing shape, multiple classes, 50/100", INCREASING, [(50, 100), (100, 100)], 75),
    ("increasing shape, multiple classes, 100/100", INCREASING, [(100, 100), (100, 100)], 100),
    ("custom shape, multiple classes, 0/0", CUSTOM, [(0, 100), (0, 100)], 0),
    ("custom shape, multiple classes, 0/30", CUSTOM, [(0, 100), (30, 100)], 0),
    ("custom shape, multiple classes, 30/30", CUSTOM, [(30, 100), (30, 100)], 0),
    ("custom shape, multiple classes, 30/60", CUSTOM, [(30, 100), (60, 100)], 5),
    ("custom shape, multiple classes, 50/100", CUSTOM, [(50, 100), (100, 100)], 25),
    ("custom shape, multiple classes, 90/90", CUSTOM, [(90, 100), (90, 100)], 40),
    ("custom shape, multiple classes, 100/100", CUSTOM, [(100, 100), (100, 100)], 50),
    # StorageCapacityScoring's default shape: the most room left scores highest.
    ("default shape, single class, 0%", DEFAULT, [(0, 100)], 100),
    ("default shape, single class, 30%", DEFAULT, [(30, 100)], 70),
    ("default shape, single class, 100%", DEFAULT, [(100, 100)], 0),
    ("default shape, multiple classes, 0/30", DEFAULT, [(0, 100), (30, 100)], 85),
    ("default shape, multiple classes, 25/30 rounds half up", DEFAULT, [(25, 100), (30, 100)], 73),
    # capacity == 0 or requested > capacity: maximum utilization
    ("no capacity is full utilization", DEFAULT, [(10, 0)], 0),
    ("requested above capacity is full utilization", INCREASING, [(150, 100)], 100),
    ("utilization truncates", INCREASING, [(1, 3)], 33),
    ("no class scores 0", DEFAULT, [], 0),
]


@pytest.mark.parametrize(
    ("name", "shape", "classes", "want"), SCORER_CASES, ids=[c[0] for c in SCORER_CASES]
)
def test_scorer(
    name: str, shape: tuple[tuple[int, int], ...], classes: list[tuple[int, int]], want: int
) -> None:
    cols = [
        (
            np.array([req], dtype=np.int64),
            np.array([cap], dtype=np.int64),
            np.array([True]),
        )
        for req, cap in classes
    ]
    assert score_classes(shape_table(shape), 1, cols).tolist() == [want]


def test_scorer_rows_score_only_the_classes_present_on_them() -> None:
    table = shape_table(DEFAULT)
    hdd = (
        np.array([30, 0, 50], dtype=np.int64),
        np.array([100, 0, 100], dtype=np.int64),
        np.array([True, False, True]),
    )
    ssd = (
        np.array([60, 60, 0], dtype=np.int64),
        np.array([100, 100, 0], dtype=np.int64),
        np.array([True, True, False]),
    )
    # row 0: (70 + 40) / 2; row 1: ssd alone; row 2: hdd alone
    assert score_classes(table, 3, [hdd, ssd]).tolist() == [55, 40, 50]


# ---- args: SetDefaults_VolumeBindingArgs, TestValidateVolumeBindingArgs -----------------

ON = Features(storage_capacity_scoring=True)
OFF = Features(storage_capacity_scoring=False)

ARG_CASES: list[tuple[str, Features, dict[str, Any], str | None]] = [
    ("zero is a valid config", ON, {"bindTimeoutSeconds": 0}, None),
    ("positive value is valid config", ON, {"bindTimeoutSeconds": 10}, None),
    (
        "negative value is invalid config",
        ON,
        {"bindTimeoutSeconds": -10},
        "bindTimeoutSeconds: Invalid value: -10: invalid BindTimeoutSeconds, "
        "should not be a negative value",
    ),
    ("[StorageCapacityScoring=off] shape should be nil when the feature is off", OFF, {}, None),
    (
        "[StorageCapacityScoring=off] error if the shape is not nil when the feature is off",
        OFF,
        {"shape": [{"utilization": 1, "score": 1}, {"utilization": 3, "score": 3}]},
        "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
    ),
    (
        "[StorageCapacityScoring=on] shape points must be sorted in increasing order",
        ON,
        {"shape": [{"utilization": 3, "score": 3}, {"utilization": 1, "score": 1}]},
        "shape[1].utilization: values must be sorted in increasing order",
    ),
    (
        "[StorageCapacityScoring=on] shape point: invalid utilization",
        ON,
        {"shape": [{"utilization": -1, "score": 1}]},
        "shape[0].utilization: not in valid range [0, 100]",
    ),
    (
        "[StorageCapacityScoring=on] shape point: invalid score",
        ON,
        {"shape": [{"utilization": 10, "score": 11}]},
        "shape[0].score: not in valid range [0, 10]",
    ),
    ("unknown field", ON, {"shap": []}, "shap: unknown field"),
]


@pytest.mark.parametrize(
    ("name", "features", "args", "want_err"), ARG_CASES, ids=[c[0] for c in ARG_CASES]
)
def test_validate_args(
    name: str, features: Features, args: dict[str, Any], want_err: str | None
) -> None:
    w = World(1)
    handle = dataclasses.replace(w.handle, features=features)
    if want_err is None:
        VolumeBinding.new(args, handle)
        return
    with pytest.raises(PluginArgsError) as e:
        VolumeBinding.new(args, handle)
    assert want_err in str(e.value)


def test_defaults() -> None:
    w = World(1)
    on = VolumeBinding.new({}, w.handle).args
    assert (on.bind_timeout_seconds, on.shape) == (600, DEFAULT_SHAPE)
    assert (ShapePoint(0, 10), ShapePoint(100, 0)) == DEFAULT_SHAPE
    # v1 defaulting: an empty shape is defaulted too (len(Shape) == 0)
    assert VolumeBinding.new({"shape": []}, w.handle).args.shape == DEFAULT_SHAPE
    custom = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
    got = VolumeBinding.new({"shape": custom}, w.handle).args.shape
    assert got == (ShapePoint(0, 0), ShapePoint(100, 10))
    off = VolumeBinding.new({}, dataclasses.replace(w.handle, features=OFF)).args
    assert (off.bind_timeout_seconds, off.shape) == (600, ())


# ---- Score through the plugin ----------------------------------------------------------

GI = 1 << 30
LOCAL = storage_class("local")  # WaitForFirstConsumer, no provisioner: static PVs only
LOCAL2 = storage_class("local2")
CSI_SC = storage_class("csi", provisioner="csi.example.com")
DRIVER = csi_driver("csi.example.com")


def zoned(name: str, zone: str) -> dict[str, Any]:
    return make_node(name).label("topology.kubernetes.io/zone", zone).obj()


def zoned_world() -> World:
    return World([zoned("n0", "z0"), zoned("n1", "z1"), zoned("n2", "z2")])


def run_score(
    w: World, pod_obj: dict[str, Any], args: dict[str, Any] | None = None
) -> dict[str, int] | str:
    """PreFilter, Filter, PreScore and Score on every node: the scores of the
    nodes that pass Filter, or "Skip" when PreScore skips."""
    plugin = VolumeBinding.new(args or {}, w.handle)
    pod = parse_pod(pod_obj)
    assert isinstance(pod, Pod)
    nodes = w.table()
    state = CycleState()
    _, st = plugin.pre_filter(state, pod, nodes)
    assert st.is_success, st
    rows = nodes.valid_rows()
    res = plugin.filter(state, pod, nodes, rows)
    feasible = rows[res.feasible]
    st = plugin.pre_score(state, pod, nodes, feasible)
    if st.is_skip:
        return "Skip"
    assert st.is_success, st
    scores = plugin.score(state, pod, nodes, feasible)
    return {nodes.names[int(r)]: int(s) for r, s in zip(feasible, scores, strict=True)}


def pod_with(*claims: str) -> dict[str, Any]:
    return with_claims(make_pod("p").obj(), *claims)


SCORE_CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], Any]] = [
    (
        "pod with bound claims only: every node would score 0, PreScore skips",
        [pvc("c", volume="pv-a"), pv("pv-a", claim="c", phase="Bound")],
        pod_with("c"),
        "Skip",
    ),
    (
        "static PVs: the node whose PV leaves the most room scores highest",
        [
            LOCAL,
            pvc("c", sc="local", size="50Gi"),
            pv("pv-0", size="100Gi", sc="local", node="n0"),
            pv("pv-1", size="200Gi", sc="local", node="n1"),
        ],
        pod_with("c"),
        {"n0": 50, "n1": 75},  # n2 has no PV: filtered out
    ),
    (
        "static PVs, two claims of one class on one node: summed (80 of 150)",
        [
            LOCAL,
            pvc("a", sc="local", size="30Gi"),
            pvc("b", sc="local", size="50Gi"),
            pv("pv-0a", size="50Gi", sc="local", node="n0"),
            pv("pv-0b", size="100Gi", sc="local", node="n0"),
        ],
        pod_with("a", "b"),
        {"n0": 47},
    ),
    (
        "static PVs of two classes: the class scores are averaged",
        [
            LOCAL,
            LOCAL2,
            pvc("a", sc="local", size="30Gi"),
            pvc("b", sc="local2", size="60Gi"),
            pv("pv-a", size="100Gi", sc="local", node="n0"),
            pv("pv-b", size="100Gi", sc="local2", node="n0"),
        ],
        pod_with("a", "b"),
        {"n0": 55},
    ),
    (
        "dynamic provisioning: the node with the most CSIStorageCapacity scores highest",
        [
            CSI_SC,
            DRIVER,
            pvc("c", sc="csi", size="50Gi"),
            capacity("cap-0", "csi", "100Gi", "z0"),
            capacity("cap-1", "csi", "200Gi", "z1"),
        ],
        pod_with("c"),
        {"n0": 50, "n1": 75},  # n2: no capacity, not enough free storage
    ),
    (
        "dynamic provisioning, two claims of one class: requests summed, the "
        "node's capacity taken once",
        [
            CSI_SC,
            DRIVER,
            pvc("a", sc="csi", size="30Gi"),
            pvc("b", sc="csi", size="30Gi"),
            capacity("cap-0", "csi", "100Gi", "z0"),
            capacity("cap-1", "csi", "200Gi", "z1"),
        ],
        pod_with("a", "b"),
        {"n0": 40, "n1": 70},
    ),
    (
        "dynamic provisioning without capacity tracking: every node 0, skipped",
        [CSI_SC, csi_driver("csi.example.com", capacity=False), pvc("c", sc="csi", size="50Gi")],
        pod_with("c"),
        "Skip",
    ),
    (
        "a node with a static binding scores it and not the claims it provisions",
        [
            LOCAL,
            CSI_SC,
            DRIVER,
            pvc("s", sc="local", size="10Gi"),
            pvc("d", sc="csi", size="50Gi"),
            pv("pv-0", size="100Gi", sc="local", node="n0"),
            pv("pv-1", size="100Gi", sc="local", node="n1"),
            capacity("cap-0", "csi", "100Gi", "z0"),
            capacity("cap-1", "csi", "1000Gi", "z1"),
        ],
        pod_with("s", "d"),
        {"n0": 90, "n1": 90},
    ),
]


@pytest.mark.parametrize(
    ("name", "objs", "pod_obj", "want"), SCORE_CASES, ids=[c[0] for c in SCORE_CASES]
)
def test_score(name: str, objs: list[dict[str, Any]], pod_obj: dict[str, Any], want: Any) -> None:
    w = zoned_world().add(*objs)
    assert run_score(w, pod_obj) == want


def test_score_with_custom_shape_prefers_the_fullest_node() -> None:
    w = zoned_world().add(
        LOCAL,
        pvc("c", sc="local", size="50Gi"),
        pv("pv-0", size="100Gi", sc="local", node="n0"),
        pv("pv-1", size="200Gi", sc="local", node="n1"),
    )
    shape = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
    assert run_score(w, pod_with("c"), {"shape": shape}) == {"n0": 50, "n1": 25}


def test_capacity_with_only_maximum_volume_size_scores_as_full() -> None:
    cap = capacity("cap-0", "csi", "100Gi", "z0")
    del cap["capacity"]
    cap["maximumVolumeSize"] = "100Gi"
    w = zoned_world().add(CSI_SC, DRIVER, pvc("c", sc="csi", size="50Gi"), cap)
    assert run_score(w, pod_with("c")) == {"n0": 0}


def test_feature_off_skips_score() -> None:
    w = zoned_world().add(
        LOCAL,
        pvc("c", sc="local", size="50Gi"),
        pv("pv-0", size="100Gi", sc="local", node="n0"),
        pv("pv-1", size="200Gi", sc="local", node="n1"),
    )
    w.handle = dataclasses.replace(w.handle, features=OFF)
    assert run_score(w, pod_with("c")) == "Skip"


# ---- through the scheduler -----------------------------------------------------------


def _place(config: dict[str, Any]) -> str | None:
    """Two nodes that can each provision a 50Gi claim of class csi: 100Gi left
    on n0, 400Gi on n1. Where does the pod go (the simulated provisioner binds
    the claim there)?"""
    cluster = InMemoryCluster()
    s = Scheduler(parse_config(config, IN_TREE), cluster, VirtualClock(), registry=IN_TREE)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    VolumeControllers(cluster, s.on_volume_object, {"csi": CSI_SC})
    for name, zone in (("n0", "z0"), ("n1", "z1")):
        s.on_node(zoned(name, zone))
    for kind, obj in (
        ("StorageClass", CSI_SC),
        ("CSIDriver", DRIVER),
        ("CSIStorageCapacity", capacity("cap-0", "csi", "100Gi", "z0")),
        ("CSIStorageCapacity", capacity("cap-1", "csi", "400Gi", "z1")),
    ):
        s.on_volume_object(kind, obj)
    claim = pvc("c", sc="csi", size="50Gi")
    cluster.claims["default/c"] = claim
    s.on_volume_object("PersistentVolumeClaim", claim)
    key = PodKey("default/p")
    cluster.pods[key] = pod_with("c")
    s.on_pod(cluster.pods[key])

    async def run() -> None:
        s.queue.flush()
        while s.schedule_one():
            pass
        await s.settle()

    asyncio.run(run())
    node: str | None = cluster.pods[key]["spec"].get("nodeName")
    return node


def test_default_profile_scores_storage_capacity() -> None:
    # n1 (50 of 400 Gi, score 88) wins over n0 (50 of 100, score 50) on VolumeBinding
    # alone: every other score is equal on two empty nodes.
    for seed in range(4):
        assert _place({"troupe": {"seed": seed}}) == "n1"


def test_feature_gate_in_the_configuration() -> None:
    cfg = parse_config({"troupe": {"featureGates": {"StorageCapacityScoring": False}}}, IN_TREE)
    assert cfg.troupe.features == OFF
    assert parse_config({}, IN_TREE).troupe.features == ON
    with pytest.raises(ConfigError, match=r"troupe\.featureGates\.Nope: unknown field"):
        parse_config({"troupe": {"featureGates": {"Nope": True}}}, IN_TREE)
    with pytest.raises(ConfigError, match="Invalid value: 1: must be a boolean"):
        parse_config({"troupe": {"featureGates": {"StorageCapacityScoring": 1}}}, IN_TREE)
    # With the gate off, the same two nodes tie and the seed decides.
    got = {
        _place({"troupe": {"seed": seed, "featureGates": {"StorageCapacityScoring": False}}})
        for seed in range(8)
    }
    assert got == {"n0", "n1"}


def test_score_reads_what_filter_found_over_its_chunks() -> None:
    """Filter runs over chunks of rows (and again for a nominated node); Score
    reads back what it found for each row (podVolumesByNode) and matches afresh
    only rows Filter never saw: the same scores either way."""
    nodes = [zoned(f"n{i}", f"z{i % 3}") for i in range(6)]
    w = World(nodes).add(
        LOCAL,
        CSI_SC,
        DRIVER,
        pvc("s", sc="local", size="10Gi"),
        pvc("d", sc="csi", size="50Gi"),
        *[pv(f"pv-{i}", size=f"{20 * (i + 1)}Gi", sc="local", node=f"n{i}") for i in (0, 2, 4)],
        capacity("cap-0", "csi", "100Gi", "z0"),
        capacity("cap-1", "csi", "200Gi", "z1"),
        capacity("cap-2", "csi", "400Gi", "z2"),
    )
    plugin = VolumeBinding.new({}, w.handle)
    pod = parse_pod(pod_with("s", "d"))
    assert isinstance(pod, Pod)
    snap = w.table()
    rows = snap.valid_rows()
    fresh = CycleState()
    plugin.pre_filter(fresh, pod, snap)
    want = plugin.score(fresh, pod, snap, rows[::-1])
    chunked = CycleState()
    plugin.pre_filter(chunked, pod, snap)
    plugin.filter(chunked, pod, snap, rows[3:])
    plugin.filter(chunked, pod, snap, rows[:2])  # row 2 left to match afresh
    plugin.filter(chunked, pod, snap, rows[4:5])
    got = plugin.score(chunked, pod, snap, rows[::-1])
    assert got.tolist() == want.tolist()
    # n0/n2/n4 bind a static PV (10 of 20/60/100 Gi: utilization 50, 16, 10); n1/n3/n5
    # provision (50 of 200/100/400 Gi: 25, 50, 12)
    by_node = dict(zip([snap.names[int(r)] for r in rows[::-1]], got.tolist(), strict=True))
    assert by_node == {"n0": 50, "n1": 75, "n2": 84, "n3": 50, "n4": 90, "n5": 88}
