"""Preemption at the scheduler level (DefaultPreemption with the in-memory cluster
and the virtual clock): victims marked, deleted after their grace period, the
preemptor nominated and then placed; messages and events with upstream's text."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.builders import make_node, make_pod
from troupe.api.types import NodeName, PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE


class Harness:
    """A scheduler wired to an in-memory cluster that behaves as the API server and
    kubelets would: binds come back as updates, deleted pods terminate after
    their grace period on the virtual clock."""

    def __init__(self, nodes: int = 1, cpu: str = "1", config: dict[str, Any] | None = None):
        self.clock = VirtualClock()
        self.cluster = InMemoryCluster()
        cfg = parse_config(config or {}, IN_TREE)
        self.s = Scheduler(cfg, self.cluster, self.clock, registry=IN_TREE)
        self.cluster.on_pod_bound = self._bound
        self.cluster.on_pod_deleted = self._deleted
        for i in range(nodes):
            self.s.on_node(make_node(f"n{i}").capacity(cpu=cpu, pods=110).obj())

    def _bound(self, key: PodKey, node: NodeName) -> None:
        self.s.on_pod(self.cluster.pods[key])

    def _deleted(self, key: PodKey, grace: int) -> None:
        self.s.on_pod(self.cluster.pods[key])  # the update with deletionTimestamp

        def gone() -> None:
            obj = self.cluster.pods.pop(key, None)
            if obj is not None:
                self.s.on_pod(obj, deleted=True)

        self.clock.call_at(self.clock.now() + grace, gone)

    def add(self, obj: dict[str, Any]) -> PodKey:
        key = PodKey(f"{obj['metadata'].get('namespace', 'default')}/{obj['metadata']['name']}")
        self.cluster.pods[key] = obj
        self.s.on_pod(obj)
        return key

    def running(self, name: str, node: str, cpu: str, priority: int, **kw: Any) -> PodKey:
        b = make_pod(name).req(cpu=cpu).priority(priority).node(node).phase("Running")
        obj = b.obj()
        obj["spec"].update(kw)
        return self.add(obj)

    async def drain(self) -> None:
        while self.s.schedule_one():
            await self.s.settle()
        await self.s.settle()

    async def advance(self, seconds: float) -> None:
        end = self.clock.now() + seconds
        while True:
            nxt = self.clock.next_deadline()
            if nxt is None or nxt > end:
                break
            self.clock.advance_to(nxt)
            await self.s.settle()
            self.s.queue.flush()
            await self.drain()
        self.clock.advance_to(end)
        self.s.queue.flush()
        await self.drain()

    def node_of(self, key: PodKey) -> str | None:
        obj = self.cluster.pods.get(key)
        return obj["spec"].get("nodeName") if obj else None

    def events(self, reason: str) -> list[tuple[str, str]]:
        return [(e.pod, e.message) for e in self.cluster.events if e.reason == reason]


def test_a_high_priority_pod_preempts_a_lower_one_and_takes_its_place() -> None:
    h = Harness()

    async def go() -> None:
        low = h.running("low", "n0", "1", 1, terminationGracePeriodSeconds=10)
        high_obj = make_pod("high").req(cpu="1").priority(100).obj()
        high_obj["metadata"]["uid"] = "uid-high"
        high = h.add(high_obj)
        await h.drain()
        # The victim: DisruptionTarget, deleted with its grace period, Preempted event.
        conds = h.cluster.pods[low]["status"]["conditions"]
        assert {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "troupe-scheduler: preempting to accommodate a higher priority pod",
        } in conds
        assert h.cluster.deletions == [(low, 10)]
        assert h.events("Preempted") == [(low, "Preempted by pod uid-high on node n0")]
        # The preemptor: nominated, not bound yet (the victim is terminating).
        assert h.cluster.pods[high]["status"]["nominatedNodeName"] == "n0"
        assert h.node_of(high) is None
        assert h.s.last_failure[high] == "0/1 nodes are available: 1 Insufficient cpu."
        await h.advance(10)
        assert low not in h.cluster.pods
        assert h.node_of(high) == "n0"
        assert len(h.cluster.deletions) == 1  # no second preemption meanwhile
        # kube-scheduler's metrics: one attempt (the first cycle's PostFilter; the
        # second cycle found the nominated node), one candidate of one victim.
        text = h.s.metrics.render().decode()
        assert "scheduler_preemption_attempts_total 1.0" in text
        assert 'scheduler_preemption_victims_bucket{le="1.0"} 1.0' in text
        assert 'scheduler_preemption_victims_bucket{le="64.0"} 1.0' in text
        assert "scheduler_preemption_victims_count 1.0" in text
        assert "scheduler_preemption_victims_sum 1.0" in text

    asyncio.run(go())


def test_preemption_metrics_help_and_buckets() -> None:
    """Names, help texts and buckets as kube-scheduler's metrics.go."""
    h = Harness()
    families = {f.name: f for f in text_string_to_metric_families(h.s.metrics.render().decode())}
    attempts = families["scheduler_preemption_attempts"]
    assert attempts.type == "counter"
    assert attempts.documentation == "Total preemption attempts in the cluster till now"
    victims = families["scheduler_preemption_victims"]
    assert victims.type == "histogram"
    assert victims.documentation == "Number of selected preemption victims"
    bounds = [s.labels["le"] for s in victims.samples if s.name.endswith("_bucket")]
    assert bounds == ["1.0", "2.0", "4.0", "8.0", "16.0", "32.0", "64.0", "+Inf"]


def test_preemption_policy_never_waits() -> None:
    h = Harness()

    async def go() -> None:
        h.running("low", "n0", "1", 1)
        obj = make_pod("high").req(cpu="1").priority(100).obj()
        obj["spec"]["preemptionPolicy"] = "Never"
        high = h.add(obj)
        await h.drain()
        assert h.cluster.deletions == []
        assert h.s.last_failure[high] == (
            "0/1 nodes are available: 1 Insufficient cpu. "
            "preemption: not eligible due to preemptionPolicy=Never.."
        )

    asyncio.run(go())


def test_preemption_policy_from_the_priority_class() -> None:
    h = Harness()

    async def go() -> None:
        h.s.on_priority_class(
            {
                "metadata": {"name": "batch"},
                "value": 100,
                "preemptionPolicy": "Never",
            }
        )
        h.running("low", "n0", "1", 1)
        high = h.add(make_pod("high").req(cpu="1").priority_class("batch").obj())
        await h.drain()
        assert h.cluster.deletions == []
        assert "preemptionPolicy=Never" in h.s.last_failure[high]

    asyncio.run(go())


def test_no_victims_of_equal_or_higher_priority() -> None:
    h = Harness(nodes=2)

    async def go() -> None:
        h.running("same", "n0", "1", 100)
        h.running("higher", "n1", "1", 200)
        high = h.add(make_pod("high").req(cpu="1").priority(100).obj())
        await h.drain()
        assert h.cluster.deletions == []
        assert h.s.last_failure[high] == (
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are "
            "available: 2 No preemption victims found for incoming pod.."
        )

    asyncio.run(go())


def test_not_helpful_when_every_node_is_unresolvable() -> None:
    h = Harness(nodes=2)

    async def go() -> None:
        h.running("low", "n0", "1", 1)
        high = h.add(make_pod("high").req(cpu="1").priority(100).node_selector(x="y").obj())
        await h.drain()
        assert h.cluster.deletions == []
        assert h.s.last_failure[high].endswith(
            "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.."
        )

    asyncio.run(go())


def test_the_nominated_room_is_not_taken_by_a_lower_priority_pod() -> None:
    h = Harness()

    async def go() -> None:
        h.running("low", "n0", "1", 1, terminationGracePeriodSeconds=30)
        high = h.add(make_pod("high").req(cpu="1").priority(100).obj())
        await h.drain()
        assert h.cluster.pods[high]["status"]["nominatedNodeName"] == "n0"
        mid = h.add(make_pod("mid").req(cpu="1").priority(50).obj())
        await h.advance(30)
        assert h.node_of(high) == "n0"
        assert h.node_of(mid) is None
        # mid (priority 50) may not preempt high (100).
        assert len(h.cluster.deletions) == 1

    asyncio.run(go())


def test_minimal_victims_and_pdb_respected() -> None:
    h = Harness(nodes=2, cpu="2")

    async def go() -> None:
        # n0: two small victims protected by a PDB with no disruptions allowed.
        h.running("a", "n0", "1", 1, terminationGracePeriodSeconds=0)
        h.running("b", "n0", "1", 1, terminationGracePeriodSeconds=0)
        for k in ("default/a", "default/b"):
            h.cluster.pods[k]["metadata"]["labels"] = {"app": "db"}
            h.s.on_pod(h.cluster.pods[k])
        h.s.on_pdb(
            {
                "metadata": {"name": "db", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "db"}}},
                "status": {"disruptionsAllowed": 0},
            }
        )
        # n1: one low pod of 1 cpu and one of higher (but still lower) priority.
        h.running("c", "n1", "1", 5, terminationGracePeriodSeconds=0)
        h.running("d", "n1", "1", 1, terminationGracePeriodSeconds=0)
        high = h.add(make_pod("high").req(cpu="1").priority(100).obj())
        await h.drain()
        # Fewest PDB violations wins: n1, and only its least important pod goes.
        assert [k for k, _ in h.cluster.deletions] == ["default/d"]
        await h.advance(1)
        assert h.node_of(high) == "n1"

    asyncio.run(go())


# ---- gangs ---------------------------------------------------------------------------


def pod_group(h: Harness, name: str, min_member: int) -> None:
    h.s.on_pod_group(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"minMember": min_member},
        }
    )
    h.cluster.pod_groups[f"default/{name}"] = {"metadata": {"name": name}, "status": {}}


def gang_member(name: str, group: str, priority: int, cpu: str = "1") -> dict[str, Any]:
    obj = make_pod(name).req(cpu=cpu).priority(priority).group(group).obj()
    obj["spec"]["terminationGracePeriodSeconds"] = 5
    return obj


def test_a_gang_preempts_lone_pods_as_one_unit() -> None:
    h = Harness(nodes=3)

    async def go() -> None:
        for i in range(3):
            h.running(f"low{i}", f"n{i}", "1", 1, terminationGracePeriodSeconds=5)
        pod_group(h, "job", 2)
        a = h.add(gang_member("a", "job", 100))
        b = h.add(gang_member("b", "job", 100))
        await h.drain()
        assert len(h.cluster.deletions) == 2  # exactly the quorum's room
        assert all("Preempted by gang default/job on node" in m for _, m in h.events("Preempted"))
        await h.advance(5)
        assert h.node_of(a) and h.node_of(b)
        assert len(h.cluster.deletions) == 2

    asyncio.run(go())


def test_a_gang_evicts_nothing_unless_its_quorum_then_fits() -> None:
    h = Harness(nodes=2)

    async def go() -> None:
        h.running("low", "n0", "1", 1)
        h.running("same", "n1", "1", 100)
        pod_group(h, "job", 2)
        h.add(gang_member("a", "job", 100))
        h.add(gang_member("b", "job", 100))
        await h.drain()
        assert h.cluster.deletions == []

    asyncio.run(go())


def test_a_gang_takes_a_lower_gang_whole() -> None:
    h = Harness(nodes=3)

    async def go() -> None:
        pod_group(h, "old", 3)
        for i in range(3):
            obj = gang_member(f"o{i}", "old", 1)
            obj["spec"]["nodeName"] = f"n{i}"
            obj["status"]["phase"] = "Running"
            h.add(obj)
        pod_group(h, "new", 1)
        h.add(gang_member("x", "new", 100))
        await h.drain()
        # One node's room needed, but the old gang goes whole, never below minMember.
        assert sorted(k for k, _ in h.cluster.deletions) == [f"default/o{i}" for i in range(3)]
        groups = [e for e in h.cluster.events if e.obj is not None and e.obj.kind == "PodGroup"]
        assert [e.message for e in groups] == ["Preempted by gang default/new"]

    asyncio.run(go())


def test_two_gangs_of_equal_priority_never_evict_each_other() -> None:
    h = Harness(nodes=2)

    async def go() -> None:
        pod_group(h, "first", 2)
        f = [h.add(gang_member(f"f{i}", "first", 100)) for i in range(2)]
        await h.drain()
        assert all(h.node_of(k) for k in f)
        pod_group(h, "second", 2)
        h.add(gang_member("s0", "second", 100))
        h.add(gang_member("s1", "second", 100))
        await h.drain()
        await h.advance(60)
        assert h.cluster.deletions == []
        assert all(h.node_of(k) for k in f)

    asyncio.run(go())
