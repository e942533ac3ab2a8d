"""CapacityScheduling: scheduler-plugins' unit tests
(pkg/capacityscheduling/capacity_scheduling_test.go), case by case under their
upstream names, then Troupe's own cases for what upstream tests elsewhere (its
README's demo, the controller's status.used) or not at all.

Upstream's builders: makePod(name, namespace, memReq bytes, cpuReq milli,
gpuReq, priority, uid, node); a quota's resources as scaled amounts here
(milli-cpu, bytes). Upstream keys a quota's pods by UID (its tests make the
UID the name); Troupe by namespace/name. Where Troupe differs on purpose, the
case says so.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Final

import pytest

from tests.builders import make_node, make_pod
from tests.unit.test_preemption import Harness
from troupe.api.elasticquota import ElasticQuota, parse_elastic_quota
from troupe.api.types import InvalidObject, NodeName, Pod, PodKey
from troupe.config import parse_config
from troupe.core.cluster import NotLeader
from troupe.core.scheduler import Scheduler
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import EventResource
from troupe.framework.interface import NodeToStatus
from troupe.framework.status import Code, Status
from troupe.kube.reflector import Known
from troupe.plugins.capacity_scheduling import (
    ELASTIC_QUOTA_SNAPSHOT_KEY,
    NAME,
    PRE_FILTER_STATE_KEY,
    CapacityScheduling,
    ElasticQuotaInfo,
    ElasticQuotaInfos,
    ElasticQuotaSnapshotState,
    PreFilterState,
)
from troupe.plugins.registry import IN_TREE
from troupe.quota.info import (
    UPPER_BOUND_OF_MAX,
    new_elastic_quota_info,
)

REGISTRY: Final = IN_TREE
MID, HIGH = 100, 1000
# scheduler-plugins' documented profile: multiPoint, and postFilter alone.
PROFILE: Final = {
    "schedulerName": "troupe-scheduler",
    "plugins": {
        "multiPoint": {"enabled": [{"name": NAME}]},
        "postFilter": {"enabled": [{"name": NAME}], "disabled": [{"name": "*"}]},
    },
}


def pod(
    name: str,
    namespace: str,
    mem: int,
    cpu: int,
    priority: int,
    node: str = "",
    phase: str = "",
) -> dict[str, Any]:
    """Upstream's makePod (gpu 0: Troupe omits zero requests)."""
    b = make_pod(name, namespace).req(memory=mem, cpu=f"{cpu}m").priority(priority)
    if node:
        b = b.node(node)
    if phase:
        b = b.phase(phase)
    obj = b.obj()
    obj["metadata"]["uid"] = name
    return obj


def parsed(obj: dict[str, Any]) -> Pod:
    from troupe.api.parse import parse_pod

    p = parse_pod(obj)
    assert isinstance(p, Pod), p
    return p


def eq(
    namespace: str,
    name: str,
    max: dict[str, Any] | None,
    min: dict[str, Any] | None,
    used: dict[str, Any] | None = None,
) -> ElasticQuota:
    """Upstream's makeEQ(namespace, name, max, min)."""
    spec: dict[str, Any] = {}
    if max is not None:
        spec["max"] = max
    if min is not None:
        spec["min"] = min
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if used is not None:
        obj["status"] = {"used": used}
    q = parse_elastic_quota(obj)
    assert isinstance(q, ElasticQuota), q
    return q


def rl(cpu: int, mem: int) -> dict[str, Any]:
    """Upstream's makeResourceList(cpu milli, memory bytes)."""
    return {"cpu": f"{cpu}m", "memory": mem}


def info(
    ns: str,
    min: dict[str, int],
    max: dict[str, int],
    used: dict[str, int],
    pods: tuple[str, ...] = (),
) -> ElasticQuotaInfo:
    return ElasticQuotaInfo(ns, min, max, used, [PodKey(f"{ns}/{p}") for p in pods])


def scheduler(nodes: tuple[str, ...] = (), memory: int = 150) -> Scheduler:
    h = Harness(nodes=0)
    cfg = parse_config({"profiles": [PROFILE]}, REGISTRY)
    s = Scheduler(cfg, h.cluster, h.clock, registry=REGISTRY)
    for n in nodes:
        s.on_node(make_node(n).capacity(memory=memory, cpu="100", pods=110).obj())
    return s


def plugin(s: Scheduler) -> CapacityScheduling:
    p = s.profiles["troupe-scheduler"].instances[NAME]
    assert isinstance(p, CapacityScheduling)
    return p


def with_states(state: CycleState, p: Pod, infos: ElasticQuotaInfos) -> None:
    """What upstream's tests write after PreFilter: the pod's request as all
    three requests, and the given quotas as the cycle's snapshot."""
    req = dict(p.requests)
    state.write(PRE_FILTER_STATE_KEY, PreFilterState(req, dict(req), dict(req)))
    state.write(ELASTIC_QUOTA_SNAPSHOT_KEY, ElasticQuotaSnapshotState(infos))


# ---- TestPreFilter ------------------------------------------------------------------------

PRE_FILTER_CASES: Final = [
    (
        "pod subjects to ElasticQuota",
        [("ns1-p1", "ns1", 500), ("ns1-p2", "ns1", 1800)],
        {"ns1": info("ns1", {"memory": 1000}, {"memory": 2000}, {"memory": 300})},
        [Code.SUCCESS, Code.UNSCHEDULABLE],
    ),
    (
        "the sum of used is bigger than the sum of min",
        [("ns2-p1", "ns2", 500)],
        {
            "ns1": info("ns1", {"memory": 1000}, {"memory": 2000}, {"memory": 1800}),
            "ns2": info("ns2", {"memory": 1000}, {"memory": 2000}, {"memory": 200}),
        },
        [Code.UNSCHEDULABLE],
    ),
    ("without elasticQuotaInfo", [("ns2-p1", "ns2", 500)], {}, [Code.SUCCESS]),
]


@pytest.mark.parametrize(
    ("name", "pods", "quotas", "expected"), PRE_FILTER_CASES, ids=[c[0] for c in PRE_FILTER_CASES]
)
def test_pre_filter(
    name: str,
    pods: list[tuple[str, str, int]],
    quotas: dict[str, ElasticQuotaInfo],
    expected: list[Code],
) -> None:
    """Troupe's PreFilter says Skip where upstream says Success: the plugin has
    no Filter, and Skip is how a PreFilter says so (the pod passes)."""
    s = scheduler()
    cs = plugin(s)
    cs.quotas.infos = ElasticQuotaInfos(quotas)
    state = CycleState()
    for (pname, ns, mem), want in zip(pods, expected, strict=True):
        _, st = cs.pre_filter(state, parsed(pod(pname, ns, mem, 0, 0)), s.snapshot)
        got = Code.SUCCESS if st.code is Code.SKIP else st.code
        assert got is want, st.message


# ---- TestPostFilter and TestDryRunPreemption -----------------------------------------------

IN_NAMESPACE: Final = {
    "ns1": info("ns1", {"memory": 50}, {"memory": 200}, {"memory": 50}),
    "ns2": info("ns2", {"memory": 200}, {"memory": 200}, {"memory": 100}),
}
CROSS_NAMESPACE: Final = {
    "ns1": info("ns1", {"memory": 150}, {"memory": 200}, {"memory": 50}),
    "ns2": info("ns2", {"memory": 50}, {"memory": 200}, {"memory": 100}),
}


def node_a_with(existing: list[dict[str, Any]], quotas: dict[str, ElasticQuotaInfo]) -> Scheduler:
    """node-a (memory 150) full with the existing pods; the quotas set after them,
    so that their pod sets are upstream's (empty)."""
    s = scheduler(("node-a",))
    for o in existing:
        s.on_pod(o)
    plugin(s).quotas.infos = ElasticQuotaInfos({ns: i.clone() for ns, i in quotas.items()})
    s.cache.update_snapshot(s.snapshot)
    return s


POST_FILTER_CASES: Final = [
    (
        "in-namespace preemption",
        [
            pod("t1-p2", "ns1", 50, 0, MID, "node-a"),
            pod("t1-p3", "ns2", 50, 0, MID, "node-a"),
            pod("t1-p4", "ns2", 50, 0, MID, "node-a"),
        ],
        IN_NAMESPACE,
    ),
    (
        "cross-namespace preemption",
        [
            pod("t1-p2", "ns1", 50, 0, MID, "node-a"),
            pod("t1-p3", "ns2", 50, 0, MID, "node-a"),
            pod("t1-p4", "ns2", 50, 0, MID, "node-a"),
        ],
        CROSS_NAMESPACE,
    ),
    (
        "without elasticQuotas",
        [
            pod("t1-p2", "ns1", 50, 0, MID, "node-a"),
            pod("t1-p3", "ns2", 50, 0, MID, "node-a"),
            pod("t1-p4", "ns2", 50, 0, MID, "node-a"),
        ],
        {},
    ),
]


@pytest.mark.parametrize(
    ("name", "existing", "quotas"), POST_FILTER_CASES, ids=[c[0] for c in POST_FILTER_CASES]
)
def test_post_filter(
    name: str, existing: list[dict[str, Any]], quotas: dict[str, ElasticQuotaInfo]
) -> None:
    s = node_a_with(existing, quotas)
    cs = plugin(s)
    preemptor = parsed(pod("t1-p1", "ns1", 50, 0, HIGH))
    state = CycleState()
    s.profiles["troupe-scheduler"].run_pre_filter(state, preemptor, s.snapshot)
    with_states(state, preemptor, ElasticQuotaInfos(quotas))
    filtered = NodeToStatus({"node-a": Status(Code.UNSCHEDULABLE)}, 1)

    async def go() -> tuple[str | None, Status]:
        return cs.post_filter(state, preemptor, filtered)

    nominated, st = asyncio.run(go())
    assert st.code is Code.SUCCESS, st.message
    assert nominated == "node-a"


DRY_RUN_CASES: Final = [
    (
        "in-namespace preemption",
        [
            pod("t1-p1", "ns1", 50, 0, MID, "node-a"),
            pod("t1-p2", "ns2", 50, 0, MID, "node-a"),
            pod("t1-p3", "ns2", 50, 0, MID, "node-a"),
        ],
        IN_NAMESPACE,
        ["t1-p1"],
    ),
    (
        "cross-namespace preemption",
        [
            pod("t1-p1", "ns1", 50, 0, MID, "node-a"),
            pod("t1-p2", "ns2", 50, 0, HIGH, "node-a"),
            pod("t1-p3", "ns2", 50, 0, MID, "node-a"),
        ],
        CROSS_NAMESPACE,
        ["t1-p3"],
    ),
]


@pytest.mark.parametrize(
    ("name", "existing", "quotas", "want"), DRY_RUN_CASES, ids=[c[0] for c in DRY_RUN_CASES]
)
def test_dry_run_preemption(
    name: str, existing: list[dict[str, Any]], quotas: dict[str, ElasticQuotaInfo], want: list[str]
) -> None:
    s = node_a_with(existing, quotas)
    cs = plugin(s)
    preemptor = parsed(pod("t1-p", "ns1", 50, 0, HIGH))
    profile = s.profiles["troupe-scheduler"]
    state = CycleState()
    profile.run_pre_filter(state, preemptor, s.snapshot)
    with_states(state, preemptor, ElasticQuotaInfos(quotas))
    cs.preemptor.state = state
    rows = s.snapshot.valid_rows()
    got, _ = cs.evaluator.dry_run_preemption(
        state, preemptor, s.snapshot, profile, rows, 0, len(rows)
    )
    assert [c.node for c in got] == ["node-a"]
    assert sorted(p.name for p in got[0].victims) == want


# ---- TestPodEligibleToPreemptOthers --------------------------------------------------------


def terminating(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return obj


def bare(name: str, ns: str, priority: int) -> Any:
    """st.MakePod(): no requests."""
    b = make_pod(name, ns).priority(priority)
    b.obj()["spec"]["containers"][0].pop("resources", None)
    return b


Q150_50_0: Final = {"ns1": info("ns1", {"memory": 50}, {"memory": 150}, {"memory": 0})}
ELIGIBLE_CASES: Final = [
    (
        "Pod with PreemptNever preemption policy",
        make_pod("t1-p1").priority(HIGH).spec(preemptionPolicy="Never").obj(),
        [pod("t1-p0", "ns1", 50, 10, MID, "node-a")],
        Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) had untolerated taint",)),
        Q150_50_0,
        False,
    ),
    (
        "Pod with unschedulableAndUnresolvable nominated node",
        make_pod("t1-p1").priority(HIGH).nominated("node-a").obj(),
        [pod("t1-p0", "ns1", 50, 10, MID, "node-a")],
        Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) had untolerated taint",)),
        Q150_50_0,
        True,
    ),
    (
        "Pod with terminating pod in the same namespace",
        make_pod("t1-p1", "ns1").priority(HIGH).nominated("node-a").obj(),
        [terminating(make_pod("t1-p0", "ns1").priority(MID).node("node-a").obj())],
        None,
        Q150_50_0,
        False,
    ),
    (
        "Pod with terminating pod in another namespace",
        make_pod("t1-p1", "ns1").priority(HIGH).nominated("node-a").obj(),
        [terminating(make_pod("t1-p0", "ns2").priority(MID).node("node-a").obj())],
        None,
        {
            **Q150_50_0,
            "ns2": info("ns2", {"memory": 50}, {"memory": 150}, {"memory": 100}),
        },
        False,
    ),
    (
        "Pod without elasticQuotas and terminating pod exists in the same namespace",
        make_pod("t1-p1", "ns1").priority(HIGH).nominated("node-a").obj(),
        [terminating(make_pod("t1-p0", "ns2").priority(MID).node("node-a").obj())],
        None,
        {},
        False,
    ),
    (
        "Pod without ElasticQuotas and terminating pod exists in another namespace",
        make_pod("t1-p1", "ns1").priority(HIGH).nominated("node-a").obj(),
        [terminating(make_pod("t1-p0", "ns2").priority(MID).node("node-a").obj())],
        None,
        {"ns2": info("ns2", {"memory": 50}, {"memory": 150}, {"memory": 100})},
        True,
    ),
]


@pytest.mark.parametrize(
    ("name", "preemptor", "existing", "nominated_status", "quotas", "expected"),
    ELIGIBLE_CASES,
    ids=[c[0] for c in ELIGIBLE_CASES],
)
def test_pod_eligible_to_preempt_others(
    name: str,
    preemptor: dict[str, Any],
    existing: list[dict[str, Any]],
    nominated_status: Status | None,
    quotas: dict[str, ElasticQuotaInfo],
    expected: bool,
) -> None:
    s = node_a_with(existing, quotas)
    cs = plugin(s)
    p = parsed(preemptor)
    state = CycleState()
    with_states(state, p, ElasticQuotaInfos(quotas))
    cs.preemptor.state = state
    got, _ = cs.preemptor.pod_eligible_to_preempt_others(p, nominated_status)
    assert got is expected


# ---- TestReserve and TestUnreserve ----------------------------------------------------------


def test_reserve() -> None:
    """Reserve pods."""
    s = scheduler()
    cs = plugin(s)
    cs.quotas.infos = ElasticQuotaInfos(
        {"ns1": info("ns1", {"memory": 1000}, {"memory": 2000}, {"memory": 300})}
    )
    want = info("ns1", {"memory": 1000}, {"memory": 2000}, {"memory": 350}, ("t1-p1",))
    for obj in (pod("t1-p1", "ns1", 50, 0, MID, "node-a"), pod("t1-p2", "ns2", 50, 0, MID)):
        st = cs.reserve(CycleState(), parsed(obj), NodeName("node-a"))
        assert st.code is Code.SUCCESS
        assert cs.quotas.infos["ns1"] == want


def test_unreserve() -> None:
    """Unreserve pods."""
    s = scheduler()
    cs = plugin(s)
    cs.quotas.infos = ElasticQuotaInfos(
        {
            "ns1": info(
                "ns1", {"memory": 1000}, {"memory": 2000}, {"memory": 300}, ("t1-p3", "t1-p4")
            )
        }
    )
    before = info("ns1", {"memory": 1000}, {"memory": 2000}, {"memory": 300}, ("t1-p3", "t1-p4"))
    after = info("ns1", {"memory": 1000}, {"memory": 2000}, {"memory": 250}, ("t1-p4",))
    for obj, want in (
        (pod("t1-p1", "ns1", 50, 0, MID, "node-a"), before),
        (pod("t1-p2", "ns2", 50, 0, MID, "node-a"), before),
        (pod("t1-p3", "ns1", 50, 0, MID, "node-a"), after),
    ):
        cs.unreserve(CycleState(), parsed(obj), NodeName("node-a"))
        assert cs.quotas.infos["ns1"] == want


# ---- TestAddElasticQuota, TestUpdateElasticQuota, TestDeleteElasticQuota -----------------

MAXED: Final = dict.fromkeys(("cpu", "memory", "ephemeral-storage"), UPPER_BOUND_OF_MAX)
ZEROED: Final = dict.fromkeys(("cpu", "memory", "ephemeral-storage"), 0)
ADD_EQ_CASES: Final = [
    (
        "Add ElasticQuota",
        eq("ns1", "t1-eq1", rl(100, 1000), rl(10, 100)),
        ElasticQuotaInfo("ns1", {"cpu": 10, "memory": 100}, {"cpu": 100, "memory": 1000}),
    ),
    (
        "Add ElasticQuota without Max",
        eq("ns1", "t1-eq1", None, rl(10, 100)),
        ElasticQuotaInfo("ns1", {"cpu": 10, "memory": 100}, MAXED),
    ),
    (
        "Add ElasticQuota without Min",
        eq("ns1", "t1-eq1", rl(100, 1000), None),
        ElasticQuotaInfo("ns1", ZEROED, {"cpu": 100, "memory": 1000}),
    ),
    (
        "Add ElasticQuota without Max and Min",
        eq("ns1", "t1-eq1", None, None),
        ElasticQuotaInfo("ns1", ZEROED, MAXED),
    ),
]


@pytest.mark.parametrize(("name", "quota", "want"), ADD_EQ_CASES, ids=[c[0] for c in ADD_EQ_CASES])
def test_add_elastic_quota(name: str, quota: ElasticQuota, want: ElasticQuotaInfo) -> None:
    cs = plugin(scheduler())
    cs.quotas.add_elastic_quota(quota)
    assert cs.quotas.infos["ns1"] == want


def test_update_elastic_quota() -> None:
    """Update ElasticQuota without Used."""
    cs = plugin(scheduler())
    old = eq("ns1", "t1-eq1", rl(100, 1000), rl(10, 100))
    new = eq("ns1", "t1-eq1", rl(300, 1000), rl(10, 100))
    cs.quotas.add_elastic_quota(old)
    cs.quotas.update_elastic_quota(old, new)
    assert cs.quotas.infos["ns1"] == ElasticQuotaInfo(
        "ns1", {"cpu": 10, "memory": 100}, {"cpu": 300, "memory": 1000}
    )


def test_delete_elastic_quota() -> None:
    """Delete ElasticQuota."""
    cs = plugin(scheduler())
    q = eq("ns1", "t1-eq1", rl(300, 1000), rl(10, 100))
    cs.quotas.add_elastic_quota(q)
    cs.quotas.delete_elastic_quota(q)
    assert "ns1" not in cs.quotas.infos


# ---- TestAddPod, TestUpdatePod, TestDeletePod ----------------------------------------------

EQ1: Final = eq("ns1", "t1-eq1", rl(100, 1000), rl(10, 100))


def quota_info(pods: tuple[str, ...], cpu: int, mem: int) -> ElasticQuotaInfo:
    used = {"cpu": cpu, "memory": mem}
    return info("ns1", {"cpu": 10, "memory": 100}, {"cpu": 100, "memory": 1000}, used, pods)


def test_add_pod() -> None:
    """AddPod."""
    cs = plugin(scheduler())
    cs.quotas.add_elastic_quota(EQ1)
    for name in ("t1-p1", "t1-p2", "t1-p3"):
        cs.quotas.add_pod(parsed(pod(name, "ns1", 50, 10, MID, "node-a")))
    assert cs.quotas.infos["ns1"] == quota_info(("t1-p1", "t1-p2", "t1-p3"), 30, 150)


UPDATE_POD_CASES: Final = [
    (
        # Upstream counts the Succeeded pod when it is added and ignores the
        # update from Succeeded; Troupe never counts a terminal pod and counts
        # it when an update shows it running: the same use either way.
        "Update Pod With Pod Status PodSucceeded and PodRunning",
        pod("t1-p1", "ns1", 100, 30, MID, "node-a", "Succeeded"),
        pod("t1-p1", "ns1", 100, 30, HIGH, "node-a", "Running"),
        quota_info(("t1-p1",), 30, 100),
    ),
    (
        "Update Pod With Pod Status PodPending and PodFailed",
        pod("t1-p2", "ns1", 100, 30, MID, "node-a", "Pending"),
        pod("t1-p2", "ns1", 100, 30, HIGH, "node-a", "Failed"),
        quota_info((), 0, 0),
    ),
]


@pytest.mark.parametrize(
    ("name", "old", "new", "want"), UPDATE_POD_CASES, ids=[c[0] for c in UPDATE_POD_CASES]
)
def test_update_pod(
    name: str, old: dict[str, Any], new: dict[str, Any], want: ElasticQuotaInfo
) -> None:
    cs = plugin(scheduler())
    cs.quotas.add_elastic_quota(EQ1)
    cs.quotas.add_pod(parsed(old))
    cs.quotas.update_pod(parsed(old), parsed(new))
    assert cs.quotas.infos["ns1"] == want


DELETE_POD_CASES: Final = [
    ("Delete All Pods", ("t1-p1", "t1-p2"), quota_info((), 0, 0)),
    ("Delete one Pod", ("t1-p1",), quota_info(("t1-p2",), 30, 100)),
]


@pytest.mark.parametrize(
    ("name", "deleted", "want"), DELETE_POD_CASES, ids=[c[0] for c in DELETE_POD_CASES]
)
def test_delete_pod(name: str, deleted: tuple[str, ...], want: ElasticQuotaInfo) -> None:
    cs = plugin(scheduler())
    cs.quotas.add_elastic_quota(EQ1)
    existing = {
        "t1-p1": pod("t1-p1", "ns1", 100, 30, MID, "node-a"),
        "t1-p2": pod("t1-p2", "ns1", 100, 30, HIGH, "node-a"),
    }
    for o in existing.values():
        cs.quotas.add_pod(parsed(o))
    for n in deleted:
        cs.quotas.delete_pod(parsed(existing[n]))
    assert cs.quotas.infos["ns1"] == want


# ---- elasticquota_test.go: the comparisons -------------------------------------------------


def test_used_over_max_with_limits_what_a_non_empty_max_leaves_out() -> None:
    """cpu, memory and ephemeral-storage left out of a non-empty max are limited
    to 0; other resources left out are not limited; no max limits nothing."""
    gpu_only = new_elastic_quota_info("ns", None, {"example.com/gpu": 2})
    assert gpu_only.used_over_max_with({"cpu": 1})
    assert not gpu_only.used_over_max_with({"example.com/gpu": 2})
    assert gpu_only.used_over_max_with({"example.com/gpu": 3})
    cpu_only = new_elastic_quota_info("ns", None, {"cpu": 1000})
    assert not cpu_only.used_over_max_with({"cpu": 1000, "example.com/gpu": 8})
    assert not new_elastic_quota_info("ns", None, None).used_over_max_with({"memory": 2**40})


def test_used_over_min_counts_other_resources_only_when_asked() -> None:
    q = new_elastic_quota_info("ns", {"cpu": 1000}, None, {"cpu": 500, "example.com/gpu": 1})
    assert not q.used_over_min_with({"cpu": 500})
    assert q.used_over_min_with({"cpu": 501})
    # the request names no gpu: the gpu used over its min (0) is not looked at
    assert not q.used_over_min_with({"cpu": 1})
    assert q.used_over_min()  # used itself names the gpu


def test_aggregated_used_over_min_with() -> None:
    infos = ElasticQuotaInfos(
        {
            "a": new_elastic_quota_info("a", {"cpu": 4000}, None, {"cpu": 6000}),
            "b": new_elastic_quota_info("b", {"cpu": 4000}, None, {"cpu": 0}),
        }
    )
    assert not infos.aggregated_used_over_min_with({"cpu": 2000})
    assert infos.aggregated_used_over_min_with({"cpu": 2001})


# ---- Troupe: the plugin in a scheduler -----------------------------------------------------


class Cluster(Harness):
    """A Harness whose scheduler runs scheduler-plugins' CapacityScheduling profile."""

    def __init__(self, nodes: int, cpu: str) -> None:
        super().__init__(nodes=0)
        cfg = parse_config({"profiles": [PROFILE]}, REGISTRY)
        self.s = Scheduler(cfg, self.cluster, self.clock, registry=REGISTRY)
        for i in range(nodes):
            self.s.on_node(make_node(f"n{i}").capacity(cpu=cpu, pods=110).obj())

    def quota(self, ns: str, min: dict[str, Any], max: dict[str, Any]) -> str:
        obj = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": ns, "namespace": ns},
            "spec": {"min": min, "max": max},
        }
        self.cluster.elastic_quotas[f"{ns}/{ns}"] = obj
        self.s.events.on_elastic_quota(obj)
        return f"{ns}/{ns}"

    def app(self, ns: str, name: str, cpu: str, priority: int = 0) -> PodKey:
        obj = make_pod(name, ns).req(cpu=cpu).priority(priority).obj()
        obj["spec"]["terminationGracePeriodSeconds"] = 1
        return self.add(obj)

    def running_all(self) -> None:
        """The kubelets start every bound pod."""
        for key, obj in list(self.cluster.pods.items()):
            if obj["spec"].get("nodeName") and obj["status"].get("phase") != "Running":
                obj = self.cluster.pods[key] = copy.deepcopy(obj)
                obj["status"]["phase"] = "Running"
                self.s.on_pod(obj)

    def used(self, key: str) -> dict[str, str]:
        status = self.cluster.elastic_quotas[key].get("status") or {}
        return dict(status.get("used") or {})

    def reason(self, key: PodKey) -> str:
        return self.cluster.conditions.get(key, {}).get("message", "")


def kept_totals_agree(cs: CapacityScheduling) -> None:
    """The sums kept as quotas and pods change are the quotas' own sums."""
    kept = cs.quotas.totals()
    summed = cs.quotas.infos.totals()
    for got, want in zip(kept, summed, strict=True):
        assert {r: q for r, q in got.items() if q} == {r: q for r, q in want.items() if q}


def test_the_readme_demo_borrowing_then_reclaiming_min() -> None:
    """scheduler-plugins' README: quota1 and quota2 (min 4, max 6 cpu), 8 cpus.
    quota1's app of 4 pods of 2 cpus gets 3 (its max); quota2's first pod takes
    the 2 cpus left, and its second reclaims its min from quota1, over its min."""
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        q1 = h.quota("quota1", {"cpu": 4}, {"cpu": 6})
        h.quota("quota2", {"cpu": 4}, {"cpu": 6})
        app1 = [h.app("quota1", f"nginx-{i}", "2") for i in range(4)]
        await h.drain()
        assert sum(1 for k in app1 if h.node_of(k)) == 3
        pending = next(k for k in app1 if not h.node_of(k))
        assert (
            f"Pod {pending} is rejected in PreFilter because ElasticQuota quota1 is more than Max."
            in h.reason(pending)
        )
        # over its min, with no pod of lower priority in its quota to take
        name = pending.partition("/")[2]
        assert (
            f"preemption: 0/4 nodes are available: 4 No victims found for preemptor pod {name}."
            in (h.reason(pending))
        )
        h.running_all()
        await h.advance(1)
        assert h.used(q1) == {"cpu": "6"}
        app2 = [h.app("quota2", f"nginx-{i}", "2") for i in range(2)]
        await h.drain()
        deleted = [k for k, _ in h.cluster.deletions]
        assert len(deleted) == 1 and deleted[0].startswith("quota1/")
        await h.advance(2)
        assert all(h.node_of(k) for k in app2)
        h.running_all()
        await h.advance(1)
        assert h.used(q1) == {"cpu": "4"}
        assert h.used("quota2/quota2") == {"cpu": "4"}
        kept_totals_agree(plugin(h.s))

    asyncio.run(go())


def test_a_pod_over_its_min_preempts_only_lower_priority_pods_of_its_quota() -> None:
    h = Cluster(nodes=1, cpu="4")

    async def go() -> None:
        h.quota("a", {"cpu": 2}, {"cpu": 4})
        h.quota("b", {"cpu": 2}, {"cpu": 4})
        low_b = h.app("b", "low", "2", priority=1)
        a1 = h.app("a", "a1", "2", priority=100)
        await h.drain()
        assert h.node_of(low_b) and h.node_of(a1)
        # a is at its min: its next pod is over it. b's pod is of lower priority
        # but b is within its min, and a1 is not of lower priority.
        a2 = h.app("a", "a2", "2", priority=100)
        await h.drain()
        assert h.cluster.deletions == []
        assert "preemption: " in h.reason(a2)
        assert not h.node_of(a2)
        # A more important pod of a takes a1, never b's.
        a3 = h.app("a", "a3", "2", priority=1000)
        await h.drain()
        assert [k for k, _ in h.cluster.deletions] == [a1]
        await h.advance(2)
        assert h.node_of(a3) == "n0"
        assert h.node_of(low_b) == "n0"
        kept_totals_agree(plugin(h.s))

    asyncio.run(go())


def test_a_namespace_without_quota_is_not_limited() -> None:
    h = Cluster(nodes=2, cpu="2")

    async def go() -> None:
        h.quota("a", {"cpu": 1}, {"cpu": 1})
        free = [h.app("free", f"p{i}", "2") for i in range(2)]
        await h.drain()
        assert all(h.node_of(k) for k in free)

    asyncio.run(go())


def test_the_reason_says_a_resource_left_out_of_max_is_limited_to_0() -> None:
    h = Cluster(nodes=1, cpu="4")

    async def go() -> None:
        h.quota("a", {"example.com/gpu": 1}, {"example.com/gpu": 2})
        p = h.add(make_pod("p", "a").req(cpu="1", memory="1Gi").obj())
        await h.drain()
        assert not h.node_of(p)
        assert (
            "ElasticQuota a is more than Max (cpu, memory: not in its spec.max, so limited to 0)"
            in (h.reason(p))
        )

    asyncio.run(go())


def test_a_quota_created_after_its_pods_counts_them() -> None:
    """Upstream counts only the pods that arrive after their quota; Troupe counts
    those already running too (and after a restart, the quotas are listed before
    the pods)."""
    h = Cluster(nodes=1, cpu="4")

    async def go() -> None:
        running = h.app("a", "early", "3")
        await h.drain()
        assert h.node_of(running)
        h.quota("a", {"cpu": 1}, {"cpu": 3})
        late = h.app("a", "late", "1")
        await h.drain()
        assert not h.node_of(late)
        assert "is more than Max" in h.reason(late)

    asyncio.run(go())


def test_reclaim_with_a_pre_filter_run_again_in_the_dry_run() -> None:
    """A pod whose spreading makes the dry run run PreFilter again per node (its
    state is not node-local) still reclaims: the plugin's PreFilter does not
    judge the quota inside its own preemption, the dry run's check does."""
    h = Cluster(nodes=1, cpu="4")

    async def go() -> None:
        h.quota("a", {"cpu": 2}, {"cpu": 4})
        h.quota("b", {"cpu": 2}, {"cpu": 4})
        b = [h.app("b", f"b{i}", "1") for i in range(4)]
        await h.drain()
        assert all(h.node_of(k) for k in b)
        obj = make_pod("spread", "a").req(cpu="2").label("app", "x").obj()
        obj["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "x"}},
            }
        ]
        spread = h.add(obj)
        await h.drain()
        assert len(h.cluster.deletions) == 2
        assert all(k.startswith("b/") for k, _ in h.cluster.deletions)
        await h.advance(2)
        assert h.node_of(spread) == "n0"

    asyncio.run(go())


def test_status_used_is_written_on_change_only_and_at_a_bounded_rate() -> None:
    h = Cluster(nodes=2, cpu="4")

    async def go() -> None:
        q = h.quota("a", {"cpu": 2, "memory": "1Gi"}, {"cpu": 8})
        for i in range(4):
            h.app("a", f"p{i}", "500m")
        await h.drain()
        h.running_all()
        await h.advance(1)
        assert h.used(q) == {"cpu": "2", "memory": "0"}
        writes = h.cluster.status_patches
        await h.advance(10)
        assert h.cluster.status_patches == writes  # nothing changed, nothing written
        # min no longer names memory: upstream's merge patch removes it
        obj = h.cluster.elastic_quotas[q]
        obj["spec"] = {"min": {"cpu": 2}, "max": {"cpu": 8}}
        h.s.events.on_elastic_quota(obj)
        await h.advance(1)
        assert h.used(q) == {"cpu": "2"}

    asyncio.run(go())


def test_an_invalid_quota_is_reported_and_ignored() -> None:
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "q", "namespace": "a"},
        "spec": {"max": {"cpu": "lots"}},
    }
    bad = parse_elastic_quota(obj)
    assert isinstance(bad, InvalidObject) and bad.message.startswith("spec.max.cpu: ")
    h = Cluster(nodes=1, cpu="1")
    h.s.events.on_elastic_quota(obj)
    assert "a" not in plugin(h.s).quotas.infos


def test_a_quotas_own_status_coming_back_is_no_event() -> None:
    """Only a change of min or max wakes the pods the quota refused; the status
    Troupe writes, coming back through the watch, is kept but is no event."""
    h = Cluster(nodes=1, cpu="1")
    seen: list[Any] = []
    h.s.handle.watch(lambda event, old, new: seen.append(event.resource))
    key = h.quota("a", {"cpu": 1}, {"cpu": 2})
    obj = copy.deepcopy(h.cluster.elastic_quotas[key])
    obj["status"] = {"used": {"cpu": "1"}}
    h.s.events.on_elastic_quota(obj)
    assert h.s.handle.elastic_quotas[key].used == {"cpu": 1000}
    obj = copy.deepcopy(obj)
    obj["spec"]["max"] = {"cpu": 3}
    h.s.events.on_elastic_quota(obj)
    h.s.events.on_elastic_quota(obj, deleted=True)
    assert [r for r in seen if r is EventResource.ELASTIC_QUOTA] == [
        EventResource.ELASTIC_QUOTA
    ] * 3
    assert "a" not in plugin(h.s).quotas.infos


def test_status_used_waits_for_the_lease_and_is_written_once_leading() -> None:
    """A replica that does not lead writes nothing; it tries again later and
    writes once it leads."""
    h = Cluster(nodes=1, cpu="4")
    leading = False
    real = h.cluster.patch_elastic_quota_status

    async def fenced(key: str, status: Any) -> None:
        if not leading:
            raise NotLeader()
        await real(key, status)

    h.cluster.patch_elastic_quota_status = fenced  # type: ignore[method-assign]

    async def go() -> None:
        nonlocal leading
        q = h.quota("a", {"cpu": 4}, {"cpu": 4})
        h.app("a", "p", "1")
        await h.drain()
        h.running_all()
        await h.advance(5)
        assert h.used(q) == {}
        leading = True
        await h.advance(60)
        assert h.used(q) == {"cpu": "1"}

    asyncio.run(go())


@pytest.mark.parametrize("relisted", [False, True], ids=["watched", "relisted"])
def test_status_used_counts_a_pod_we_bound_once_it_runs(relisted: bool) -> None:
    """A pod Troupe assumed and bound counts in status.used once it is Running,
    whether the watch brings its binding and then its start, or the watch breaks
    after the bind and the re-list (the reflector's replace) brings the pod
    already Running while the cache still holds it assumed. Either way it
    counts once against its quota: the watch confirming it charges nothing
    more than Reserve did."""
    h = Cluster(nodes=1, cpu="4")
    if relisted:
        h.cluster.on_pod_bound = lambda key, node: None  # the bound event is lost
    known = Known()

    async def go() -> None:
        q = h.quota("a", {"cpu": 2}, {"cpu": 4})
        key = h.app("a", "p", "1")
        pending = copy.deepcopy(h.cluster.pods[key])
        pending["metadata"]["resourceVersion"] = "1"
        assert known.upsert(pending)  # the reflector delivered it pending
        await h.drain()
        assert h.node_of(key) == "n0"
        assert h.s.cache.is_assumed(key) == relisted
        running = copy.deepcopy(h.cluster.pods[key])
        running["status"]["phase"] = "Running"
        running["metadata"]["resourceVersion"] = "3"
        h.cluster.pods[key] = running
        if relisted:
            for obj, deleted in known.replace([copy.deepcopy(running)], "3"):
                h.s.on_pod(obj, deleted)
        else:
            h.s.on_pod(copy.deepcopy(running))
        assert not h.s.cache.is_assumed(key)
        await h.advance(1)
        assert h.used(q) == {"cpu": "1"}
        cs = plugin(h.s)
        assert cs.quotas.infos["a"].used == {"cpu": 1000}
        kept_totals_agree(cs)

    asyncio.run(go())
