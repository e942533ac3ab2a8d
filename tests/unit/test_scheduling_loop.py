"""The scheduling loop (`Scheduler.run`) gives the event loop a turn by time,
not by a count of pods, so a heavy pod never holds back the watch intake, the
binding cycles and the heartbeat leader election waits for (issue 33)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tests.builders import SCHEDULER, make_node, make_pod
from troupe.api.types import Pod, PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import YIELD_AFTER_SECONDS, Scheduler
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.filtering import FilterResult
from troupe.framework.handle import Handle
from troupe.framework.interface import FilterPlugin, IntpArray
from troupe.plugins.registry import IN_TREE

# What filtering one pod takes: claims with many distinct CEL selectors, say.
HEAVY_SECONDS = 0.5


class Heavy(FilterPlugin):
    """Passes every node, after the time a heavy pod's filtering takes."""

    NAME = "Heavy"

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Heavy:
        assert isinstance(handle.clock, VirtualClock)
        return cls(handle.clock)

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        self.clock.advance_by(HEAVY_SECONDS)
        return FilterResult.all_pass(len(rows))


def make(pods: int) -> Scheduler:
    cluster = InMemoryCluster()
    registry = {**IN_TREE, "Heavy": Heavy}
    cfg = parse_config(
        {
            "profiles": [
                {
                    "schedulerName": SCHEDULER,
                    "plugins": {"filter": {"enabled": [{"name": "Heavy"}]}},
                }
            ]
        },
        registry,
    )
    s = Scheduler(cfg, cluster, VirtualClock(start=1000.0), registry=registry)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    for i in range(4):
        s.on_node(make_node(f"n{i}").capacity(cpu=64, pods=110).build().raw)  # type: ignore[arg-type]
    for i in range(pods):
        obj = make_pod(f"p{i}").req(cpu="100m").obj()
        cluster.pods[PodKey(f"default/p{i}")] = obj
        s.on_pod(obj)
    return s


async def test_the_loop_yields_between_heavy_pods() -> None:
    """Found by a hostile probe: the loop gave the event loop a turn only every 64
    pods, so 64 heavy pods in a row starved it past the Lease's renew deadline.
    Each pod here takes longer than YIELD_AFTER_SECONDS: the event loop gets a
    turn after every one of them."""
    assert HEAVY_SECONDS > YIELD_AFTER_SECONDS
    n = 10
    s = make(n)
    stop = asyncio.Event()
    seen: list[int] = []  # the cycles run, each time the event loop had a turn

    async def watch() -> None:
        while not (s.cycle == n and s.statistics().binding_in_flight == 0):
            seen.append(s.cycle)
            await asyncio.sleep(0)
        stop.set()
        assert s.ctx.wakeup is not None
        s.ctx.wakeup.set()

    watcher = asyncio.create_task(watch())
    await s.run(stop)
    await watcher
    assert s.statistics().scheduled == n
    # The event loop had a turn between every two pods.
    assert set(range(1, n)) <= set(seen), seen
