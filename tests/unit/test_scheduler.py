"""The scheduling and binding cycles: sampling, diagnostics, failures."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.api.types import PodKey
from scheduler.clock import VirtualClock
from scheduler.cluster import BindConflict, InMemoryCluster
from scheduler.config import default_config, parse_config
from scheduler.plugins.registry import IN_TREE
from scheduler.scheduler import Scheduler, fit_error_message, num_feasible_nodes_to_find
from tests.builders import make_node, make_pod


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
    s = Scheduler(cfg, cluster, VirtualClock())

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
        # Someone else bound this very pod (same uid) meanwhile.
        cluster.pods[key]["spec"]["nodeName"] = "n001"
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
        msg = "0/1 nodes are available: 1 Insufficient cpu."
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
    s = Scheduler(cfg, cluster, VirtualClock())
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
