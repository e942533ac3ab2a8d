"""The scheduling and binding cycles: sampling, diagnostics, failures."""

from __future__ import annotations

import asyncio

import pytest

from tests.builders import make_node, make_pod
from troupe.api.types import NodeName, PodKey
from troupe.config import default_config, parse_config
from troupe.core.clock import VirtualClock
from troupe.core.cluster import BindConflict
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler, fit_error_message, num_feasible_nodes_to_find
from troupe.framework.cycle_state import CycleState
from troupe.plugins.registry import IN_TREE


@pytest.mark.parametrize(
    ("percentage", "nodes", "want"),
    [
        (0, 50, 50),  # fewer than 100 nodes: all of them
        (0, 1000, 420),  # adaptive: 50 - 1000/125 = 42 %
        (0, 5000, 500),  # 10 %
        (0, 10000, 500),  # floor of 5 %
        (0, 100000, 5000),
        (10, 500, 100),  # never fewer than 100
        (50, 1000, 500),
        (100, 300, 300),
    ],
)
def test_num_feasible_nodes_to_find(percentage: int, nodes: int, want: int) -> None:
    assert num_feasible_nodes_to_find(percentage, nodes) == want


def test_fit_error_message_sorts_as_kube_scheduler() -> None:
    msg = fit_error_message(
        13, {"Insufficient cpu": 2, "node(s) were unschedulable": 10, "Insufficient memory": 1}
    )
    assert msg == (
        "0/13 nodes are available: 1 Insufficient memory, 10 node(s) were "
        "unschedulable, 2 Insufficient cpu."
    )
    assert fit_error_message(3, {}, pre_filter_msg="x") == "0/3 nodes are available: x."


def make(n_nodes: int, **troupe: object) -> tuple[Scheduler, InMemoryCluster]:
    cluster = InMemoryCluster()
    cfg = parse_config({"percentageOfNodesToScore": 50, "troupe": troupe}, IN_TREE)
    s = Scheduler(cfg, cluster, VirtualClock(), registry=IN_TREE)

    def bound(key: PodKey, node: str) -> None:
        s.on_pod(cluster.pods[key])

    cluster.on_pod_bound = bound
    for i in range(n_nodes):
        s.on_node(make_node(f"n{i:03d}").build().raw)  # type: ignore[arg-type]
    return s, cluster


def add_pod(s: Scheduler, cluster: InMemoryCluster, name: str, cpu: str = "100m") -> PodKey:
    obj = make_pod(name).req(cpu=cpu).obj()
    key = PodKey(f"default/{name}")
    cluster.pods[key] = obj
    s.on_pod(obj)
    return key


def test_search_rotates_from_where_the_last_cycle_stopped() -> None:
    s, cluster = make(200)

    async def go() -> list[int]:
        starts = []
        for i in range(3):
            add_pod(s, cluster, f"p{i}")
            starts.append(s.next_start_node_index)
            s.schedule_one()
            await s.settle()
        starts.append(s.next_start_node_index)
        return starts

    # 200 nodes at 50 %: each cycle stops after 100 feasible nodes.
    assert asyncio.run(go()) == [0, 100, 0, 100]


def test_score_watermark_stops_after_the_first_chunk_that_reaches_it() -> None:
    # 300 empty nodes score alike and far above 1 % of the highest total: each
    # cycle filters every node but scores only the first chunk of 100, and the
    # next cycle starts after it.
    s, cluster = make(300, scoreWatermark=0.01)

    async def go() -> list[tuple[int, str]]:
        seen = []
        for i in range(4):
            key = add_pod(s, cluster, f"p{i}")
            start = s.next_start_node_index
            s.schedule_one()
            await s.settle()
            seen.append((start, cluster.pods[key]["spec"]["nodeName"]))
        return seen

    seen = asyncio.run(go())
    assert [start for start, _ in seen] == [0, 100, 200, 0]
    for start, node in seen:
        assert start <= int(node[1:]) < start + 100


def test_score_watermark_counts_only_the_plugins_that_score_the_pod() -> None:
    # A plain pod on plain nodes: PreScore skips TaintToleration, NodeAffinity,
    # PodTopologySpread, InterPodAffinity and ImageLocality (weights 3+2+2+2+1),
    # so only NodeResourcesFit and BalancedAllocation (1+1) score, 195 of 200 on
    # an empty node. Half of the highest total is 100 of those 200, reached in the
    # first chunk; counted against all weights (600 of 1200) it never would be.
    s, cluster = make(300, scoreWatermark=0.5)

    async def go() -> list[int]:
        starts = []
        for i in range(3):
            add_pod(s, cluster, f"p{i}")
            starts.append(s.next_start_node_index)
            s.schedule_one()
            await s.settle()
        return starts

    assert asyncio.run(go()) == [0, 100, 200]


def test_score_watermark_not_reached_scores_every_feasible_node() -> None:
    # No node reaches 100 % of the highest total: every feasible node is scored,
    # and the best one (a large node past the 50 % sample) is chosen.
    s, cluster = make(300, scoreWatermark=1.0)
    s.on_node(make_node("n250").capacity(cpu=64, memory="256Gi", pods=110).build().raw)  # type: ignore[arg-type]

    async def go() -> str:
        key = add_pod(s, cluster, "p")
        s.schedule_one()
        await s.settle()
        return str(cluster.pods[key]["spec"]["nodeName"])

    assert asyncio.run(go()) == "n250"
    assert s.next_start_node_index == 0  # every node was filtered and scored
    sampled, cluster2 = make(300)
    sampled.on_node(make_node("n250").capacity(cpu=64, memory="256Gi", pods=110).build().raw)  # type: ignore[arg-type]

    async def go2() -> str:
        key = add_pod(sampled, cluster2, "p")
        sampled.schedule_one()
        await sampled.settle()
        return str(cluster2.pods[key]["spec"]["nodeName"])

    assert asyncio.run(go2()) != "n250"  # the 50 % sample stops before it


def test_bind_conflict_forgets_a_pod_bound_by_someone_else() -> None:
    s, cluster = make(2)

    async def go() -> None:
        key = add_pod(s, cluster, "p")
        cluster.fail_binds[key] = [BindConflict("already assigned")]
        # Someone else bound this very pod (same uid) meanwhile, elsewhere.
        cluster.pods[key]["spec"]["nodeName"] = "n-other"
        s.schedule_one()
        await s.settle()
        assert s.cache.pod(key) is None and not s.cache.is_assumed(key)
        assert key not in s.queue
        assert s.statistics().bind_failures == 1

    asyncio.run(go())


def test_issue14_bind_conflict_on_a_recreated_pod_requeues_it() -> None:
    """#14.4: a 409 is not proof that the pod is bound. A pod deleted and
    re-created under the same name (new uid) fails the binding's UID
    precondition; it must be scheduled, not forgotten."""
    s, cluster = make(2)

    async def go() -> None:
        key = add_pod(s, cluster, "p")
        cluster.fail_binds[key] = [BindConflict("Precondition failed: UID in precondition")]
        recreated = make_pod("p").req(cpu="100m").obj()
        recreated["metadata"]["uid"] = "uid-new"
        cluster.pods[key] = recreated  # deleted and re-created: a new uid, unbound
        s.schedule_one()
        await s.settle()
        assert key in s.queue  # requeued with backoff, not forgotten
        assert s.statistics().bind_failures == 1
        s.clock.advance_by(11)  # type: ignore[attr-defined]
        s.queue.flush()
        while s.schedule_one():
            await s.settle()
        assert cluster.pods[key]["spec"].get("nodeName")
        assert key not in s.queue

    asyncio.run(go())


def test_bind_error_requeues_with_backoff_then_binds() -> None:
    s, cluster = make(2)
    clock = s.clock
    assert isinstance(clock, VirtualClock)

    async def go() -> None:
        key = add_pod(s, cluster, "p", cpu="1")
        cluster.fail_binds[key] = [RuntimeError("500 Internal Server Error")]
        s.schedule_one()
        await s.settle()
        assert s.queue.where(key) == "backoffQ"
        assert s.last_failure[key].endswith("500 Internal Server Error")
        s.cache.update_snapshot(s.snapshot)
        assert int(s.snapshot.requested[:, s.snapshot.col["cpu"]].sum()) == 0  # forgotten
        clock.advance_by(1)
        s.queue.flush()
        s.schedule_one()
        await s.settle()
        assert cluster.pods[key]["spec"]["nodeName"]
        assert key not in s.last_failure

    asyncio.run(go())


def test_failed_scheduling_is_reported_as_kube_scheduler_does() -> None:
    s, cluster = make(1)

    async def go() -> None:
        key = add_pod(s, cluster, "big", cpu="64")
        s.schedule_one()
        await s.settle()
        # More cpu than the node has at all: UnschedulableAndUnresolvable, which
        # preemption cannot help (kube-scheduler's wording, double period included).
        msg = "0/1 nodes are available: 1 Insufficient cpu." + (
            " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.."
        )
        assert [(e.type, e.reason, e.message) for e in cluster.events] == [
            ("Warning", "FailedScheduling", msg)
        ]
        assert cluster.conditions[key] == {
            "status": "False",
            "reason": "Unschedulable",
            "message": msg,
        }
        small = add_pod(s, cluster, "small")
        s.schedule_one()
        await s.settle()
        assert cluster.events[-1].reason == "Scheduled"
        assert cluster.events[-1].message == "Successfully assigned default/small to n000"
        assert small not in s.queue

    asyncio.run(go())


def test_two_profiles_by_scheduler_name() -> None:
    cluster = InMemoryCluster()
    cfg = parse_config(
        {
            "profiles": [
                {"schedulerName": "troupe-scheduler"},
                {
                    "schedulerName": "packer",
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {"scoringStrategy": {"type": "MostAllocated"}},
                        }
                    ],
                },
            ]
        },
        IN_TREE,
    )
    s = Scheduler(cfg, cluster, VirtualClock(), registry=IN_TREE)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    s.on_node(make_node("busy").capacity(cpu=4, memory="8Gi", pods=10).build().raw)  # type: ignore[arg-type]
    s.on_node(make_node("idle").capacity(cpu=4, memory="8Gi", pods=10).build().raw)  # type: ignore[arg-type]
    seed = make_pod("seed").req(cpu="2").node("busy").obj()
    s.on_pod(seed)

    async def go() -> dict[str, str]:
        for name, sched in (("spread", "troupe-scheduler"), ("pack", "packer")):
            obj = make_pod(name).req(cpu="1").scheduler(sched).obj()
            cluster.pods[f"default/{name}"] = obj
            s.on_pod(obj)
        while s.schedule_one():
            await s.settle()
        return {n: cluster.pods[f"default/{n}"]["spec"]["nodeName"] for n in ("spread", "pack")}

    got = asyncio.run(go())
    assert got["spread"] == "idle"  # LeastAllocated
    assert got["pack"] == "busy"  # MostAllocated


def test_default_config_has_one_profile() -> None:
    assert [p.scheduler_name for p in default_config(IN_TREE).profiles] == ["troupe-scheduler"]


# ---- issue #14: a pod the cache holds is never queued again; no cycle escapes --------


def test_issue14_stale_pending_event_of_a_bound_pod_is_not_queued() -> None:
    """A new leader's list replays a pod pending after we saw it bound."""
    s, cluster = make(2)

    async def go() -> None:
        key = add_pod(s, cluster, "p", cpu="1")
        s.schedule_one()
        await s.settle()
        node = cluster.pods[key]["spec"]["nodeName"]
        assert s.cache.pod(key) is not None and not s.cache.is_assumed(key)
        stale = make_pod("p").req(cpu="1").obj()  # no nodeName: the old pending version
        for _ in range(3):
            s.on_pod(stale)
        assert key not in s.queue
        assert s.schedule_one() is False
        await s.settle()
        assert cluster.binds == 1 and cluster.pods[key]["spec"]["nodeName"] == node
        s.cache.update_snapshot(s.snapshot)
        assert int(s.snapshot.requested[:, s.snapshot.col["cpu"]].sum()) == 1000
        assert s.statistics().loop_errors == 0

    asyncio.run(go())


def test_issue14_popped_pod_already_in_the_cache_is_dropped() -> None:
    s, cluster = make(2)

    async def go() -> None:
        key = add_pod(s, cluster, "p", cpu="1")
        assert key in s.queue
        # The bound pod reaches the cache while the pod is still queued (a race
        # between the informer and the queue): the cycle must drop it.
        s.cache.add_pod(make_pod("p").req(cpu="1").node("n001").build())
        assert s.schedule_one() is True
        await s.settle()
        stats = s.statistics()
        assert stats.dropped_known == 1 and stats.loop_errors == 0
        assert cluster.binds == 0 and key not in s.queue
        s.cache.update_snapshot(s.snapshot)
        assert s.cache.recompute_requested().tolist() == s.cache.table.requested.tolist()
        assert int(s.snapshot.requested[:, s.snapshot.col["cpu"]].sum()) == 1000

    asyncio.run(go())


def test_issue14_recreated_pod_with_a_new_uid_replaces_the_bound_one() -> None:
    s, cluster = make(1)

    async def go() -> None:
        s.on_pod(make_pod("p").req(cpu="1").node("n000").obj())
        old = s.cache.pod(PodKey("default/p"))
        assert old is not None
        obj = make_pod("p").req(cpu="1").obj()
        obj["metadata"]["uid"] = "new-uid"
        cluster.pods["default/p"] = obj
        s.on_pod(obj)
        assert "default/p" in s.queue
        s.schedule_one()
        await s.settle()
        assert cluster.binds == 1
        s.cache.update_snapshot(s.snapshot)
        assert int(s.snapshot.requested[:, s.snapshot.col["cpu"]].sum()) == 1000

    asyncio.run(go())


def test_issue14_an_exception_in_a_cycle_is_counted_and_survived() -> None:
    s, cluster = make(2)
    clock = s.clock
    assert isinstance(clock, VirtualClock)
    real = s.cache.update_snapshot
    calls = {"n": 0}

    def flaky(snapshot: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        real(snapshot)  # type: ignore[arg-type]

    s.cache.update_snapshot = flaky  # type: ignore[method-assign]

    async def go() -> None:
        key = add_pod(s, cluster, "p", cpu="1")
        other = add_pod(s, cluster, "q", cpu="1")
        assert s.schedule_one() is True  # raised inside: logged, counted, survived
        assert s.statistics().loop_errors == 1
        first = key if s.queue.where(key) == "backoffQ" else other
        assert s.queue.where(first) == "backoffQ"
        assert not s.queue.in_flight(first)
        assert s.schedule_one() is True  # the loop carries on with the other pod
        await s.settle()
        clock.advance_by(2)
        s.queue.flush()
        while s.schedule_one():
            pass
        await s.settle()
        assert cluster.binds == 2
        assert all(cluster.pods[k]["spec"].get("nodeName") for k in (key, other))
        assert s.statistics().loop_errors == 1

    asyncio.run(go())


def test_issue14_assume_of_a_pod_in_the_cache_is_handled_by_the_cycle() -> None:
    """Even if the early check is bypassed, assume_pod's specific error is handled:
    the pod is dropped, nothing is charged twice, nothing escapes."""
    s, cluster = make(1)

    async def go() -> None:
        key = add_pod(s, cluster, "p", cpu="1")
        qpi = s.queue.pop()
        assert qpi is not None
        s.cache.add_pod(make_pod("p").req(cpu="1").node("n000").build())
        profile = s.profiles[qpi.pod.scheduler_name]
        assert s.pods.commit(profile, CycleState(), qpi, NodeName("n000")) is False
        await s.settle()
        assert cluster.binds == 0 and key not in s.queue
        assert s.statistics().dropped_known == 1
        assert s.cache.recompute_requested().tolist() == s.cache.table.requested.tolist()

    asyncio.run(go())


def test_issue14_node_updated_to_absurd_values_leaves_scheduling() -> None:
    """A cordoned, tainted node whose allocatable goes beyond int64: no half-written
    row, no ghost row per update, no pod lands on it; a readable version brings it
    back in one row."""
    s, cluster = make(0)

    def node(alloc: dict[str, str]) -> dict[str, object]:
        obj = make_node("big").taint("dedicated", "x").unschedulable().obj()
        obj["status"]["allocatable"] = alloc
        return obj

    async def go() -> None:
        s.on_node(make_node("small").capacity(cpu="1", memory="1Gi", pods="10").obj())
        s.on_node(node({"cpu": "64", "memory": "64Gi", "pods": "110"}))
        assert s.cache.table.num_nodes == 2
        for alloc in (
            {"cpu": "1e30", "memory": "64Gi", "pods": "110"},
            {"cpu": "64", "memory": "8Ei", "pods": "110"},
            {"cpu": "64", "memory": "10Ei", "pods": "110"},
        ):
            for _ in range(3):
                s.on_node(node(alloc))
                t = s.cache.table
                assert (t.num_nodes, len(t.valid_rows())) == (1, 1)
                assert s.cache.node("big") is None
                assert s.invalid["big"].message.startswith("status.allocatable.")
        for i in range(7):
            obj = make_pod(f"p{i}").req(cpu="2").toleration("dedicated", "x", "NoSchedule").obj()
            cluster.pods[f"default/p{i}"] = obj
            s.on_pod(obj)
        while s.schedule_one():
            pass
        await s.settle()
        assert cluster.binds == 0  # small is too small; big is not a node now
        s.on_node(node({"cpu": "64", "memory": "64Gi", "pods": "110"}))
        t = s.cache.table
        assert (t.num_nodes, len(t.valid_rows())) == (2, 2)
        row = t.row_of["big"]
        assert t.unschedulable[row] and t.taint_matrix[row].any()
        assert "big" not in s.invalid

    asyncio.run(go())


# ---- issue #14: a missing or invalid PodGroup is said on the pod, once per change -----


class CountingCluster(InMemoryCluster):
    def __init__(self) -> None:
        super().__init__()
        self.condition_writes: list[tuple[str, str, str]] = []

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        self.condition_writes.append((pod, reason, message))
        await super().set_pod_condition(pod, status, reason, message)


def gang_scheduler() -> tuple[Scheduler, CountingCluster]:
    cluster = CountingCluster()
    s = Scheduler(default_config(IN_TREE), cluster, VirtualClock(), registry=IN_TREE)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    s.on_node(make_node("n").build().raw)  # type: ignore[arg-type]
    return s, cluster


def pod_group(min_member: object) -> dict[str, object]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": min_member},
    }


@pytest.mark.parametrize(
    ("min_member", "problem"),
    [
        (0, "spec.minMember: Invalid value: 0: must be greater than or equal to 1"),
        (-3, "spec.minMember: Invalid value: -3: must be greater than or equal to 1"),
        (1.5, "spec.minMember: Invalid value: 1.5: must be an integer"),
        ("two", 'spec.minMember: Invalid value: "two": must be an integer'),
    ],
)
def test_issue14_pod_of_an_invalid_podgroup_says_invalid_once(
    min_member: object, problem: str
) -> None:
    s, cluster = gang_scheduler()
    key = PodKey("default/p")
    want = f'PodGroup "default/g" is invalid: {problem}'

    async def go() -> None:
        s.on_pod_group(pod_group(min_member))
        obj = make_pod("p").group("g").req(cpu="1").obj()
        cluster.pods[key] = obj
        for _ in range(10):  # the same pod event again and again
            s.on_pod(obj)
            await s.settle()
        assert s.schedule_one() is False
        await s.settle()
        assert cluster.condition_writes == [(key, "Unschedulable", want)]
        assert [(e.reason, e.message) for e in cluster.events] == [("FailedScheduling", want)]
        assert cluster.conditions[key]["status"] == "False"
        # Fixed: the pod is scheduled.
        s.on_pod_group(pod_group(1))
        while s.schedule_one():
            pass
        await s.settle()
        assert cluster.pods[key]["spec"].get("nodeName") == "n"

    asyncio.run(go())


def test_issue14_missing_then_invalid_podgroup_one_write_per_change() -> None:
    s, cluster = gang_scheduler()
    key = PodKey("default/p")

    async def go() -> None:
        obj = make_pod("p").group("g").req(cpu="1").obj()
        cluster.pods[key] = obj
        for _ in range(10):
            s.on_pod(obj)
        await s.settle()
        assert cluster.condition_writes == [
            (key, "Unschedulable", 'PodGroup "default/g" not found')
        ]
        for _ in range(3):  # the group arrives, unreadable; its event repeats
            s.on_pod_group(pod_group(0))
            s.on_pod(obj)
        await s.settle()
        assert [m for _, _, m in cluster.condition_writes] == [
            'PodGroup "default/g" not found',
            'PodGroup "default/g" is invalid: spec.minMember: Invalid value: 0: must be '
            "greater than or equal to 1",
        ]
        assert len(cluster.events) == 2

    asyncio.run(go())


def test_issue14_valid_podgroup_updated_to_invalid_stops_being_used() -> None:
    s, _ = gang_scheduler()

    async def go() -> None:
        s.on_pod_group(pod_group(2))
        assert s.cache.pod_group("default/g") is not None  # type: ignore[arg-type]
        s.on_pod_group(pod_group(0))
        assert s.cache.pod_group("default/g") is None  # type: ignore[arg-type]
        assert s.cache.invalid_pod_group("default/g").startswith("spec.minMember: ")  # type: ignore[arg-type, union-attr]
        s.on_pod_group(pod_group(0), deleted=True)
        assert s.cache.invalid_pod_group("default/g") is None  # type: ignore[arg-type]

    asyncio.run(go())


def _per_pod_records(s: Scheduler) -> dict[str, object]:
    return {
        "invalid": s.invalid,
        "records": dict(s.ctx.records.items()),
    }


def test_a_deleted_pod_leaves_no_failure_record_behind() -> None:
    """Found in review: a pending pod that failed and was then deleted kept its
    failure message and code forever (a leak on a long run with churn). Whatever
    was recorded of a pod (it did not fit, it waits at PreEnqueue for its
    PodGroup, it could not be read), its deletion removes it, in one place."""
    s, cluster = make(1)

    async def go() -> None:
        s.enable_writes()
        too_big = make_pod("big").req(cpu="1000").obj()
        gated = make_pod("member").group("missing").obj()
        bad = make_pod("bad").req(cpu="lots").obj()
        for obj in (too_big, gated, bad):
            cluster.pods[PodKey(f"default/{obj['metadata']['name']}")] = obj
            s.on_pod(obj)
        while s.schedule_one():
            await s.settle()
        await s.settle()
        recorded = {k for d in _per_pod_records(s).values() for k in d}  # type: ignore[attr-defined]
        assert {"default/big", "default/member", "default/bad"} <= recorded
        for obj in (too_big, gated, bad):
            s.on_pod(obj, deleted=True)
        await s.settle()
        assert {name: dict(d) for name, d in _per_pod_records(s).items() if d} == {}  # type: ignore[call-overload]

    asyncio.run(go())
