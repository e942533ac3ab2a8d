"""PodGroup status: phases from counts, and coalesced writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_pod
from tests.unit.plugins.conftest import FakeLister
from troupe.api.parse import parse_pod, parse_pod_group
from troupe.api.types import Pod, PodGroup
from troupe.core.clock import VirtualClock
from troupe.core.cluster import NotLeader
from troupe.core.memory_cluster import InMemoryCluster
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    EventResource,
)
from troupe.framework.handle import Handle
from troupe.framework.waiting_pods import WaitingPods
from troupe.plugins.coscheduling.status import PodGroupStatusTracker, compute_status

PG = parse_pod_group({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
assert isinstance(PG, PodGroup)


def pod(i: int, node: str = "", phase: str = "Pending") -> Pod:
    b = make_pod(f"p{i}").group("g")
    if node:
        b.node(node)
    return b.phase(phase).build()


@pytest.mark.parametrize(
    ("pods", "started", "phase", "counts"),
    [
        pytest.param([pod(0)], None, "Pending", (0, 0, 0), id="too-few-pods"),
        pytest.param([pod(0), pod(1)], None, "Scheduling", (0, 0, 0), id="enough-pods"),
        pytest.param([pod(0, "n"), pod(1)], 5.0, "Scheduling", (0, 0, 0), id="one-placed"),
        pytest.param([pod(0, "n"), pod(1, "n")], 5.0, "Scheduling", (0, 0, 0), id="all-placed"),
        pytest.param(
            [pod(0, "n", "Running"), pod(1, "n")], 5.0, "Scheduling", (1, 0, 0), id="one-running"
        ),
        pytest.param(
            [pod(0, "n", "Running"), pod(1, "n", "Running")],
            5.0,
            "Running",
            (2, 0, 0),
            id="running",
        ),
        pytest.param(
            [pod(0, "n", "Running"), pod(1, "n", "Succeeded")],
            5.0,
            "Running",
            (1, 1, 0),
            id="running-and-done",
        ),
        pytest.param(
            [pod(0, "n", "Succeeded"), pod(1, "n", "Succeeded")],
            5.0,
            "Finished",
            (0, 2, 0),
            id="finished",
        ),
        pytest.param(
            [pod(0, "n", "Failed"), pod(1, "n", "Running")], 5.0, "Failed", (1, 0, 1), id="failed"
        ),
        pytest.param(
            [pod(0, "n", "Failed"), pod(1)], 5.0, "Scheduling", (0, 0, 1), id="one-failed"
        ),
        pytest.param(  # upstream sets Finished after Failed: Finished wins
            [pod(0, "n", "Succeeded"), pod(1, "n", "Succeeded"), pod(2, "n", "Failed")],
            5.0,
            "Finished",
            (0, 2, 1),
            id="finished-wins",
        ),
    ],
)
def test_phase(
    pods: list[Pod], started: float | None, phase: str, counts: tuple[int, int, int]
) -> None:
    st = compute_status(PG, pods, started)
    assert st["phase"] == phase
    assert (st["running"], st["succeeded"], st["failed"]) == counts
    assert ("scheduleStartTime" in st) is (started is not None)
    assert "scheduled" not in st


def test_occupied_by_names_the_owners_of_a_member_sorted() -> None:
    owned = make_pod("p0").group("g").build()
    raw = dict(owned.raw)
    raw["metadata"] = dict(raw["metadata"])
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "zeta", "uid": "u1"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "alpha", "uid": "u2"},
    ]
    p = parse_pod(raw)
    assert isinstance(p, Pod)
    st = compute_status(PG, [pod(1), p], None)
    assert st["occupiedBy"] == "default/alpha,default/zeta"
    assert "occupiedBy" not in compute_status(PG, [pod(0), pod(1)], None)


@dataclass
class Rig:
    """A tracker of PodGroup g (PG) over the in-memory cluster and a virtual
    clock; the patches it spawns wait in `tasks`."""

    clock: VirtualClock = field(default_factory=lambda: VirtualClock(start=1_700_000_000))
    cluster: InMemoryCluster = field(default_factory=InMemoryCluster)
    lister: FakeLister = field(default_factory=FakeLister)
    tasks: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster.pod_groups["default/g"] = {"metadata": {"name": "g"}, "status": {}}
        self.lister.groups["default/g"] = PG
        self.handle = Handle(
            clock=self.clock,
            client=self.cluster,
            waiting_pods=WaitingPods(),
            lister=self.lister,
            spawn=self.tasks.append,
        )
        self.tracker = PodGroupStatusTracker(self.handle, 1.0, {})

    def status(self) -> Any:
        return self.cluster.pod_groups["default/g"]["status"]

    async def run_for(self, seconds: int) -> None:
        for _ in range(seconds):
            self.clock.advance_by(1)
            while self.tasks:
                await self.tasks.pop()


async def test_a_thousand_binds_cost_one_patch() -> None:
    rig = Rig()
    clock, cluster, tasks = rig.clock, rig.cluster, rig.tasks
    event = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)
    for i in range(1000):
        p = pod(i, "n", "Running")
        rig.lister.pods[p.key] = p
        for w in rig.handle.watchers:
            w(event, None, p)
        clock.advance_by(0.0005)
    assert cluster.status_patches == 0 and not tasks
    clock.advance_by(1)
    assert len(tasks) == 1
    await tasks.pop()
    assert cluster.status_patches == 1
    assert rig.status()["phase"] == "Running"
    assert rig.status()["running"] == 1000
    # Nothing changed: no new patch.
    rig.tracker.mark(PG.key)
    clock.advance_by(1)
    assert not tasks and rig.tracker.patches == 1


async def test_a_replica_that_does_not_lead_writes_the_status_once_it_leads() -> None:
    """Refused by the fence (NotLeader), the status is not forgotten: it is
    tried again later, and written once the replica leads."""
    rig = Rig()
    leading = False
    real = rig.cluster.patch_pod_group_status

    async def fenced(group: str, status: Mapping[str, Any]) -> None:
        if not leading:
            raise NotLeader("not sent")
        await real(group, status)

    rig.cluster.patch_pod_group_status = fenced  # type: ignore[method-assign]
    rig.tracker.mark(PG.key)
    await rig.run_for(10)
    assert rig.status() == {} and rig.tracker.failed_patches == 0
    leading = True
    await rig.run_for(60)
    assert rig.status()["phase"] == "Pending"
