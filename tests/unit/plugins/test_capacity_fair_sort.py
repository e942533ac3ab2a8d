"""CapacityFairSort: the least-used quota's pods first, then priority, then
arrival; the queue re-sorted when a quota's share crosses a step; and, in a
scheduler, pods bound in that order."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.unit.dra_helpers import claim, device_class, request
from tests.unit.plugins.conftest import make_handle
from tests.unit.test_preemption import Harness
from troupe.api.elasticquota import ElasticQuota, parse_elastic_quota
from troupe.api.types import InvalidObject, NodeName, Pod, PodKey
from troupe.dra.types import parse_dra_object
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import ActionType, ClusterEvent, EventResource
from troupe.framework.handle import Handle
from troupe.framework.interface import PluginArgsError, QueuedPodInfo
from troupe.plugins.capacity_fair_sort import (
    SHARE_STEPS,
    CapacityFairSort,
    dominant_share,
    step,
)

GIB = 1 << 30
GPU = "example.com/gpu"


def quota(ns: str, min: dict[str, Any] | None, name: str = "") -> ElasticQuota:
    spec: dict[str, Any] = {"max": {"cpu": "1000"}}
    if min is not None:
        spec["min"] = min
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name or ns, "namespace": ns},
        "spec": spec,
    }
    q = parse_elastic_quota(obj)
    assert isinstance(q, ElasticQuota), q
    return q


def pod(ns: str, name: str, cpu: str = "1", priority: int = 0, node: str = "") -> Pod:
    b = make_pod(name, ns).req(cpu=cpu).priority(priority)
    if node:
        b = b.node(node).phase("Running")
    return b.build()


EQ_ADD = ClusterEvent(EventResource.ELASTIC_QUOTA, ActionType.ADD)
EQ_DELETE = ClusterEvent(EventResource.ELASTIC_QUOTA, ActionType.DELETE)
BOUND = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)
BOUND_UPDATE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE)
BOUND_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
PENDING_DELETE = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.DELETE)


@dataclass
class Setup:
    """A plugin over a Handle whose resort calls are recorded."""

    handle: Handle = field(default_factory=make_handle)
    resorted: list[list[PodKey]] = field(default_factory=list)
    plugin: CapacityFairSort = field(init=False)

    def __post_init__(self) -> None:
        self.handle.resort = lambda keys: self.resorted.append(sorted(keys))
        self.plugin = CapacityFairSort.new({}, self.handle)

    def quota(self, q: ElasticQuota) -> None:
        self.handle.elastic_quotas[q.key] = q
        self.emit(EQ_ADD, None, q)

    def drop_quota(self, q: ElasticQuota) -> None:
        del self.handle.elastic_quotas[q.key]
        self.emit(EQ_DELETE, q, None)

    def emit(self, event: ClusterEvent, old: Any, new: Any) -> None:
        for w in self.handle.watchers:
            w(event, old, new)

    def bound(self, *pods: Pod) -> None:
        for p in pods:
            self.emit(BOUND, None, p)

    def order(self, pods: list[Pod]) -> list[str]:
        qpis = [QueuedPodInfo(pod=p, timestamp=float(i), seq=i) for i, p in enumerate(pods)]
        return [q.pod.name for q in sorted(qpis, key=self.plugin.sort_key)]


# ---- the share -------------------------------------------------------------------------

SHARE_CASES = [
    # name, used, min, want
    ("nothing used", {}, {"cpu": 4000}, 0.0),
    ("half of the one resource", {"cpu": 2000}, {"cpu": 4000}, 0.5),
    (
        "the dominant resource counts",
        {"cpu": 1000, "memory": 3 * GIB},
        {"cpu": 4000, "memory": 4 * GIB},
        0.75,
    ),
    ("over min", {"cpu": 6000}, {"cpu": 4000}, 1.5),
    (
        "a resource min does not name is left out",
        {"cpu": 1000, "example.com/gpu": 3},
        {"cpu": 4000},
        0.25,
    ),
    ("a zero min is left out", {"cpu": 1000, "memory": GIB}, {"cpu": 2000, "memory": 0}, 0.5),
    ("no min, nothing used", {}, None, 0.0),
    ("no min, something used: only borrowing", {"cpu": 1}, None, math.inf),
    ("an all-zero min is no min", {"cpu": 1}, {"cpu": 0}, math.inf),
]


@pytest.mark.parametrize(
    ("name", "used", "min_", "want"), SHARE_CASES, ids=[c[0] for c in SHARE_CASES]
)
def test_dominant_share(
    name: str, used: dict[str, int], min_: dict[str, int] | None, want: float
) -> None:
    assert dominant_share(used, min_) == want


@pytest.mark.parametrize(
    ("share", "want"),
    [(0.0, 0.0), (0.004, 0.0), (0.256, 0.25), (1.0, 1.0), (2.999, 2.99), (math.inf, math.inf)],
)
def test_step_rounds_down_to_a_hundredth(share: float, want: float) -> None:
    assert SHARE_STEPS == 100
    assert step(share) == want


# ---- the order -------------------------------------------------------------------------

ORDER_CASES: list[tuple[str, dict[str, dict[str, Any] | None], list[Pod], list[Pod], list[str]]] = [
    # name, quotas (namespace: min), bound pods, queued pods in arrival order, want
    (
        "the least-used quota first, whatever the arrival",
        {"a": {"cpu": "4"}, "b": {"cpu": "4"}},
        [pod("a", "r1", node="n"), pod("a", "r2", node="n"), pod("b", "r3", node="n")],
        [pod("a", "a1"), pod("a", "a2"), pod("b", "b1"), pod("b", "b2")],
        ["b1", "b2", "a1", "a2"],
    ),
    (
        "share before priority",
        {"a": {"cpu": "4"}, "b": {"cpu": "4"}},
        [pod("a", "r1", cpu="3", node="n")],
        [pod("a", "high", priority=1000), pod("b", "low", priority=1)],
        ["low", "high"],
    ),
    (
        "equal shares: priority, then arrival",
        {"a": {"cpu": "4"}, "b": {"cpu": "8"}},
        [pod("a", "r1", node="n"), pod("b", "r2", cpu="2", node="n")],
        [pod("a", "a1"), pod("b", "b1", priority=5), pod("a", "a2", priority=5)],
        ["b1", "a2", "a1"],
    ),
    (
        "min is the entitlement: a bigger min is a smaller share",
        {"a": {"cpu": "2"}, "b": {"cpu": "10"}},
        [pod("a", "r1", node="n"), pod("b", "r2", cpu="4", node="n")],
        [pod("a", "a1"), pod("b", "b1")],
        ["b1", "a1"],
    ),
    (
        "shares within one step: priority decides",
        {"a": {"cpu": "1000"}, "b": {"cpu": "1000"}},
        [pod("a", "r1", cpu="2", node="n")],
        [pod("b", "b1"), pod("a", "a1", priority=1)],
        ["a1", "b1"],
    ),
    (
        "a namespace without a quota sorts at share 0",
        {"a": {"cpu": "4"}},
        [pod("a", "r1", node="n"), pod("free", "r2", cpu="8", node="n")],
        [pod("a", "a1"), pod("free", "f1")],
        ["f1", "a1"],
    ),
    (
        "a quota without min that uses something comes last",
        {"a": {"cpu": "1"}, "borrower": None},
        [pod("a", "r1", cpu="5", node="n"), pod("borrower", "r2", cpu="100m", node="n")],
        [pod("borrower", "x1", priority=1000), pod("a", "a1")],
        ["a1", "x1"],
    ),
    (
        "terminal pods do not count",
        {"a": {"cpu": "4"}, "b": {"cpu": "4"}},
        [
            pod("a", "r1", node="n"),
            make_pod("done", "b").req(cpu="4").node("n").phase("Succeeded").build(),
        ],
        [pod("a", "a1"), pod("b", "b1")],
        ["b1", "a1"],
    ),
]


@pytest.mark.parametrize(
    ("name", "quotas", "bound", "queued", "want"), ORDER_CASES, ids=[c[0] for c in ORDER_CASES]
)
def test_order(
    name: str,
    quotas: dict[str, dict[str, Any] | None],
    bound: list[Pod],
    queued: list[Pod],
    want: list[str],
) -> None:
    s = Setup()
    for ns, min_ in quotas.items():
        s.quota(quota(ns, min_))
    s.bound(*bound)
    assert s.order(queued) == want
    a, b = (QueuedPodInfo(pod=p, timestamp=0.0, seq=i) for i, p in enumerate(queued[:2]))
    assert s.plugin.less(a, b) == (s.plugin.sort_key(a) < s.plugin.sort_key(b))


def test_takes_no_arguments() -> None:
    with pytest.raises(PluginArgsError, match="unknown field"):
        CapacityFairSort.new({"weights": {}}, make_handle())


def test_quotas_already_in_the_handle_count_from_the_start() -> None:
    handle = make_handle()
    q = quota("a", {"cpu": "2"})
    handle.elastic_quotas[q.key] = q
    plugin = CapacityFairSort.new({}, handle)
    for w in handle.watchers:
        w(BOUND, None, pod("a", "r1", node="n"))
    assert plugin.share("a") == 0.5


def test_devices_of_claims_count_in_the_share() -> None:
    """A team using GPUs through ResourceClaims sorts after a team that has used
    nothing: its claim's devices count in its share, once however many of its
    pods share the claim, as CapacityScheduling counts them."""
    s = Setup()
    cls = parse_dra_object("DeviceClass", device_class(extended=GPU))
    assert not isinstance(cls, InvalidObject)
    s.handle.devices.set(cls)
    obj = claim("gpus", request("gpu", 2))
    obj["metadata"]["namespace"] = "a"
    two = parse_dra_object("ResourceClaim", obj)
    assert not isinstance(two, InvalidObject)
    s.handle.devices.set(two)
    s.quota(quota("a", {"cpu": "4", GPU: 4}))
    s.quota(quota("b", {"cpu": "4", GPU: 4}))
    for name in ("r1", "r2"):
        s.bound(
            make_pod(name, "a")
            .req(cpu="1m")
            .node("n")
            .phase("Running")
            .spec(resourceClaims=[{"name": "gpu", "resourceClaimName": "gpus"}])
            .build()
        )
    assert s.plugin.share("a") == 0.5  # 2 of 4 GPUs; 1m of 4 cpus is under a step
    assert s.plugin.share("b") == 0.0
    assert s.order([pod("a", "a1"), pod("b", "b1")]) == ["b1", "a1"]


# ---- use changing: re-sorting ------------------------------------------------------------


def test_a_share_crossing_a_step_resorts_the_namespaces_queued_pods() -> None:
    s = Setup()
    s.quota(quota("a", {"cpu": "4"}))
    s.quota(quota("b", {"cpu": "4"}))
    assert s.order([pod("a", "a1"), pod("a", "a2"), pod("b", "b1")]) == ["a1", "a2", "b1"]
    s.bound(pod("a", "r1", node="n"))
    assert s.resorted == [["a/a1", "a/a2"]]
    assert s.plugin.share("a") == 0.25
    # a pod of another namespace bound: b's queued pod only
    s.bound(pod("b", "r2", cpu="2", node="n"))
    assert s.resorted[-1] == ["b/b1"]
    # the same pod again (a re-list) changes nothing
    s.bound(pod("b", "r2", cpu="2", node="n"))
    assert len(s.resorted) == 2


def test_a_change_within_a_step_resorts_nothing() -> None:
    s = Setup()
    s.quota(quota("a", {"cpu": "100"}))
    s.order([pod("a", "a1")])
    s.bound(pod("a", "r1", cpu="500m", node="n"))  # 0.005: still step 0
    assert s.resorted == []
    assert s.plugin.share("a") == 0.0
    s.bound(pod("a", "r2", cpu="500m", node="n"))  # 0.01
    assert s.resorted == [["a/a1"]]


def test_reserve_counts_before_the_binding_and_unreserve_gives_back() -> None:
    s = Setup()
    s.quota(quota("a", {"cpu": "4"}))
    s.order([pod("a", "a1"), pod("a", "a2")])
    p = pod("a", "a1")
    s.plugin.reserve(CycleState(), p, NodeName("n"))
    assert s.plugin.share("a") == 0.25
    assert s.resorted == [["a/a2"]]  # a1 left the queue when reserved
    s.bound(pod("a", "a1", node="n"))  # its binding comes back: counted once
    assert s.plugin.share("a") == 0.25
    s.plugin.unreserve(CycleState(), p, NodeName("n"))
    assert s.plugin.share("a") == 0.0


@pytest.mark.parametrize(
    ("name", "event", "old", "new", "want"),
    [
        ("deleted", BOUND_DELETE, pod("a", "r1", cpu="2", node="n"), None, 0.0),
        (
            "ended",
            BOUND_UPDATE,
            pod("a", "r1", cpu="2", node="n"),
            make_pod("r1", "a").req(cpu="2").node("n").phase("Failed").build(),
            0.0,
        ),
        (
            "resized",
            BOUND_UPDATE,
            pod("a", "r1", cpu="2", node="n"),
            pod("a", "r1", cpu="3", node="n"),
            0.75,
        ),
        ("reserved, deleted before bound", PENDING_DELETE, pod("a", "r1", cpu="2"), None, 0.0),
    ],
)
def test_a_counted_pod(
    name: str, event: ClusterEvent, old: Pod, new: Pod | None, want: float
) -> None:
    s = Setup()
    s.quota(quota("a", {"cpu": "4"}))
    s.plugin.reserve(CycleState(), pod("a", "r1", cpu="2"), NodeName("n"))
    assert s.plugin.share("a") == 0.5
    s.emit(event, old, new)
    assert s.plugin.share("a") == want


def test_quota_events() -> None:
    s = Setup()
    s.bound(pod("a", "r1", cpu="2", node="n"))
    assert s.order([pod("a", "a1")]) == ["a1"]
    assert s.plugin.share("a") == 0.0  # no quota yet
    first, second = quota("a", {"cpu": "4"}, "first"), quota("a", {"cpu": "8"}, "second")
    s.quota(first)
    assert s.plugin.share("a") == 0.5 and s.resorted == [["a/a1"]]
    s.quota(second)  # another in the same namespace: the first seen counts
    assert s.plugin.share("a") == 0.5
    s.drop_quota(first)  # the next one counts
    assert s.plugin.share("a") == 0.25
    s.drop_quota(second)
    assert s.plugin.share("a") == 0.0
    assert len(s.resorted) == 3


# ---- in a scheduler ------------------------------------------------------------------------

FAIR_PROFILE: dict[str, Any] = {
    "profiles": [
        {
            "schedulerName": "troupe-scheduler",
            "plugins": {
                "multiPoint": {"enabled": [{"name": "CapacityFairSort"}]},
                "queueSort": {
                    "enabled": [{"name": "CapacityFairSort"}],
                    "disabled": [{"name": "*"}],
                },
            },
        }
    ]
}


@pytest.mark.parametrize(
    ("config", "want"),
    [
        # a: 2 of its min of 4 cpus running; b: none. 3 cpus free, a's pods first in.
        ({}, {"a1", "a2", "a3"}),  # the default sort: arrival
        # fair: b1 (b 0 -> 1/4), b2 (b -> 1/2, a's share), a1 (earlier), then
        # b3 would be next (b 1/2 < a 3/4) but the cpus are gone
        (FAIR_PROFILE, {"b1", "b2", "a1"}),
    ],
    ids=["default", "CapacityFairSort"],
)
def test_a_scheduler_binds_in_fair_order(config: dict[str, Any], want: set[str]) -> None:
    h = Harness(nodes=0, config=config)
    h.s.on_node(make_node("n0").capacity(cpu="5", pods=110).obj())
    for ns in ("a", "b"):
        obj = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": ns, "namespace": ns},
            "spec": {"min": {"cpu": "4"}},
        }
        h.cluster.elastic_quotas[f"{ns}/{ns}"] = obj
        h.s.events.on_elastic_quota(obj)
    for i in range(2):
        h.add(make_pod(f"run{i}", "a").req(cpu="1").node("n0").phase("Running").obj())
    pending = [(ns, f"{ns}{i}") for ns in ("a", "b") for i in (1, 2, 3)]
    keys = {name: h.add(make_pod(name, ns).req(cpu="1").obj()) for ns, name in pending}

    async def go() -> None:
        await h.drain()

    asyncio.run(go())
    assert {name for name, key in keys.items() if h.node_of(key)} == want


# The README's profile: CapacityScheduling's quotas, in fair order.
QUOTAS_IN_FAIR_ORDER: dict[str, Any] = {
    "profiles": [
        {
            "schedulerName": "troupe-scheduler",
            "plugins": {
                "multiPoint": {
                    "enabled": [{"name": "CapacityScheduling"}, {"name": "CapacityFairSort"}]
                },
                "queueSort": {
                    "enabled": [{"name": "CapacityFairSort"}],
                    "disabled": [{"name": "*"}],
                },
                "postFilter": {
                    "enabled": [{"name": "CapacityScheduling"}],
                    "disabled": [{"name": "*"}],
                },
            },
        }
    ]
}


@pytest.mark.parametrize(
    ("config", "want"),
    [
        # a: 2 of its min of 4 cpus running; 4 cpus free. a's two lone pods
        # arrive before b's gang of 3: by arrival they take 2 cpus and the gang
        # does not fit in the 2 left
        ({}, {"a1", "a2"}),
        # fair: b's gang first (b at 0), whole; then a1 (a at 1/2 < b at 3/4)
        (QUOTAS_IN_FAIR_ORDER, {"g-0", "g-1", "g-2", "a1"}),
    ],
    ids=["default", "CapacityScheduling with CapacityFairSort"],
)
def test_a_gang_of_the_least_used_quota_goes_first_and_whole(
    config: dict[str, Any], want: set[str]
) -> None:
    h = Harness(nodes=0, config=config)
    h.s.on_node(make_node("n0").capacity(cpu="6", pods=110).obj())
    for ns in ("a", "b"):
        obj = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": ns, "namespace": ns},
            "spec": {"min": {"cpu": "4"}, "max": {"cpu": "6"}},
        }
        h.cluster.elastic_quotas[f"{ns}/{ns}"] = obj
        h.s.events.on_elastic_quota(obj)
    for i in range(2):
        h.add(make_pod(f"run{i}", "a").req(cpu="1").node("n0").phase("Running").obj())
    keys = {name: h.add(make_pod(name, "a").req(cpu="1").obj()) for name in ("a1", "a2")}
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "b", "uid": "uid-b-g"},
        "spec": {"minMember": 3},
    }
    h.cluster.pod_groups["b/g"] = group
    h.s.on_pod_group(group)
    for i in range(3):
        keys[f"g-{i}"] = h.add(make_pod(f"g-{i}", "b").req(cpu="1").group("g").obj())

    async def go() -> None:
        await h.drain()

    asyncio.run(go())
    assert {name for name, key in keys.items() if h.node_of(key)} == want
