"""A stuck pod stays quiet (#8.4): the scheduler's own writes come back as watch
events, and they must not make it retry.

`EchoCluster` returns every write as the API server's watch would: a new
object with a new resourceVersion, delivered to the scheduler's handlers. With
nothing else changing, a pod or gang that cannot fit is retried no more often
than the unschedulable flush interval (kube-scheduler ignores updates that
change only a pod's status), and its condition is written once.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from troupe.api.types import PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE


class EchoCluster(InMemoryCluster):
    scheduler: Scheduler | None = None
    rv: int = 1000

    def _echo_pod(self, key: str) -> None:
        assert self.scheduler is not None
        self.rv += 1
        obj = copy.deepcopy(self.pods[key])
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.pods[key] = obj
        self.scheduler.on_pod(obj)

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        await super().set_pod_condition(pod, status, reason, message)
        obj = self.pods[pod]
        obj.setdefault("status", {})["conditions"] = [
            {"type": "PodScheduled", "status": status, "reason": reason, "message": message}
        ]
        self._echo_pod(pod)

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        await super().patch_pod_group_status(group, status)
        assert self.scheduler is not None
        self.rv += 1
        obj = copy.deepcopy(self.pod_groups[group])
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.pod_groups[group] = obj
        self.scheduler.on_pod_group(obj)


def run_for(s: Scheduler, clock: VirtualClock, seconds: float) -> None:
    async def go() -> None:
        end = clock.now() + seconds
        while clock.now() < end:
            while s.schedule_one():
                await s.settle()
            await s.settle()
            nxt = [t for t in (s.queue.next_wakeup(), clock.next_deadline()) if t is not None]
            step = min([*nxt, end]) if nxt else end
            clock.advance_to(max(step, clock.now() + 0.001))
            s.queue.flush()
            await s.settle()

    asyncio.run(go())


def setup(objs: list[dict[str, Any]]) -> tuple[Scheduler, EchoCluster, VirtualClock]:
    clock = VirtualClock()
    cluster = EchoCluster()
    s = Scheduler(parse_config({}, IN_TREE), cluster, clock, registry=IN_TREE)
    cluster.scheduler = s
    for i in range(3):
        s.on_node(make_node(f"n{i}").capacity(cpu=4, memory="8Gi", pods=110).obj())
    for o in objs:
        md = o["metadata"]
        md.setdefault("resourceVersion", "1")
        if o.get("kind") == "PodGroup":
            cluster.pod_groups[f"{md['namespace']}/{md['name']}"] = o
            s.on_pod_group(o)
    for o in objs:
        if o.get("kind") != "PodGroup":
            cluster.pods[f"{o['metadata']['namespace']}/{o['metadata']['name']}"] = o
            s.on_pod(o)
    return s, cluster, clock


FLUSH = 300.0  # unschedulableFlushSeconds (podMaxInUnschedulablePodsDuration)


def test_an_unfittable_pod_is_retried_no_more_often_than_the_flush_interval() -> None:
    s, cluster, clock = setup([make_pod("huge").req(cpu="64").obj()])
    run_for(s, clock, 600)
    # the first attempt, then one per flush interval
    assert s.statistics().cycles <= 1 + 600 / FLUSH
    assert cluster.condition_writes == 1  # the same condition is not written again
    assert {e.reason for e in cluster.events} == {"FailedScheduling"}


@pytest.mark.parametrize("group_cycle", [True, False])
def test_an_unfittable_gang_is_retried_no_more_often_than_the_flush_interval(
    group_cycle: bool,
) -> None:
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"minMember": 3, "scheduleTimeoutSeconds": 10},
    }
    pods = [make_pod(f"w-{i}").group("job").req(cpu="5").obj() for i in range(4)]
    s, cluster, clock = setup([pg, *pods])
    if not group_cycle:
        from dataclasses import replace

        s.ctx.config = replace(s.config, troupe=replace(s.config.troupe, group_cycle=False))
    run_for(s, clock, 600)
    # A group attempt is one cycle for the whole gang; without the group cycle,
    # one cycle per member. Either way: the first try, then one per flush.
    attempts = s.statistics().cycles / (1 if group_cycle else len(pods))
    assert attempts <= 1 + 600 / FLUSH
    assert cluster.condition_writes == len(pods)  # each member's condition, once


def test_issue14_a_standby_writes_nothing_and_a_malformed_pod_is_reported_once() -> None:
    """#14.8: a standby writes nothing; the leader reports a malformed pod once
    per change of the problem, not on every watch event."""
    clock = VirtualClock()
    cluster = EchoCluster()
    s = Scheduler(parse_config({}, IN_TREE), cluster, clock, registry=IN_TREE)
    cluster.scheduler = s
    s.writes_enabled = False
    bad = make_pod("bad").obj()
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    cluster.pods["default/bad"] = bad

    async def go() -> None:
        for _ in range(10):
            s.on_pod(copy.deepcopy(bad))
        await s.settle()
        assert cluster.events == [] and cluster.condition_writes == 0
        s.enable_writes()  # this replica now leads
        await s.settle()
        for _ in range(10):
            s.on_pod(copy.deepcopy(cluster.pods["default/bad"]))
        await s.settle()
        assert [e.reason for e in cluster.events] == ["FailedScheduling"]
        assert cluster.events[0].message.startswith("spec.containers[0].resources.requests.cpu")
        assert cluster.condition_writes == 1
        # a different problem is a new report
        worse = copy.deepcopy(cluster.pods["default/bad"])
        worse["spec"]["containers"][0]["resources"] = {"requests": {"memory": "x"}}
        cluster.pods["default/bad"] = worse
        s.on_pod(worse)
        await s.settle()
        assert len(cluster.events) == 2 and cluster.condition_writes == 2

    asyncio.run(go())


def test_issue14_podgroup_status_patch_failures_are_retried_until_they_land() -> None:
    """#14.9: status absent 60 s after 6 x 500 with 3 of 3 pods bound."""
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"minMember": 3},
    }
    pods = [make_pod(f"w-{i}").group("job").req(cpu="1").obj() for i in range(3)]
    s, cluster, clock = setup([pg, *pods])
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    real = cluster.patch_pod_group_status
    failures = {"left": 6}

    async def flaky(group: str, status: Mapping[str, Any]) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("HTTP 500 (Internal Server Error)")
        await real(group, status)

    cluster.patch_pod_group_status = flaky  # type: ignore[method-assign]
    run_for(s, clock, 120)
    assert failures["left"] == 0
    assert all(p["spec"].get("nodeName") for p in cluster.pods.values())
    status = cluster.pod_groups["default/job"].get("status") or {}
    assert status.get("phase") == "Scheduling" and "scheduleStartTime" in status
