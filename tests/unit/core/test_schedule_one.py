"""The pod's scheduling cycle (troupe.core.schedule_one): the search's answer for
one pod (`PodCycle.schedule_pod`: a node, or kube-scheduler's FitError with the
plugins that rejected it), and what a cycle commits or requeues."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.builders import make_node, make_pod
from tests.unit.core.env import Env
from troupe.api.parse import parse_pod
from troupe.api.types import NodeName, Pod
from troupe.core.schedule_one import NO_NODES_AVAILABLE
from troupe.framework.cycle_state import CycleState
from troupe.framework.fit import FitError, NodeSubset, ScheduleResult
from troupe.framework.interface import QueuedPodInfo


def node(name: str, cpu: str) -> Any:
    return make_node(name).capacity(cpu=cpu, memory="8Gi", pods="110")


def search(e: Env, pod: dict[str, Any], within: list[str] | None = None) -> Any:
    s = e.s
    s.cache.update_snapshot(s.snapshot)
    subset = None
    if within is not None:
        rows = np.array(sorted(s.snapshot.row_of[n] for n in within), dtype=np.intp)
        subset = NodeSubset(rows, "node(s) outside the domain")
    profile = s.profiles["troupe-scheduler"]
    parsed = parse_pod(pod)
    assert isinstance(parsed, Pod)
    # The search alone: PostFilter (preemption) is the cycle's business.
    return s.pods.schedule_pod(profile, CycleState(), parsed, False, subset)


@pytest.mark.parametrize(
    ("name", "nodes", "pod", "within", "want"),
    [
        (
            "no nodes",
            [],
            make_pod("p").req(cpu="1").obj(),
            None,
            FitError(NO_NODES_AVAILABLE, frozenset(), frozenset()),
        ),
        (
            "one node fits",
            [node("a", "1"), node("b", "4")],
            make_pod("p").req(cpu="2").obj(),
            None,
            ScheduleResult(NodeName("b"), 2, 1),
        ),
        (
            "no node has the cpu",
            [node("a", "1"), node("b", "1")],
            make_pod("p").req(cpu="2").obj(),
            None,
            FitError(
                "0/2 nodes are available: 2 Insufficient cpu.",
                frozenset({"NodeResourcesFit"}),
                frozenset(),
            ),
        ),
        (
            "reasons of two plugins, sorted as kube-scheduler sorts them",
            [node("a", "1"), node("b", "4").unschedulable()],
            make_pod("p").req(cpu="2").obj(),
            None,
            FitError(
                "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable.",
                frozenset({"NodeResourcesFit", "NodeUnschedulable"}),
                frozenset(),
            ),
        ),
        (
            "nodes outside `within` are counted under its reason",
            [node("a", "4"), node("b", "1")],
            make_pod("p").req(cpu="2").obj(),
            ["b"],
            FitError(
                "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) outside the domain.",
                frozenset({"NodeResourcesFit"}),
                frozenset(),
            ),
        ),
        (
            "the nominated node is taken without scoring when it fits",
            [node("a", "8"), node("b", "2")],
            make_pod("p").req(cpu="2").nominated("b").obj(),
            None,
            ScheduleResult(NodeName("b"), 1, 1),
        ),
    ],
)
def test_schedule_pod(
    name: str, nodes: list[Any], pod: dict[str, Any], within: list[str] | None, want: Any
) -> None:
    e = Env()
    for n in nodes:
        e.s.on_node(n.obj())
    e.pod(pod)  # tracked as the watch would (its nomination too)
    assert search(e, pod, within) == want


def test_a_node_that_cannot_be_read_is_named_instead_of_no_nodes() -> None:
    e = Env()
    bad = make_node("broken").obj()
    bad["status"]["allocatable"]["cpu"] = "lots"
    e.s.on_node(bad)
    got = search(e, make_pod("p").req(cpu="1").obj())
    assert isinstance(got, FitError)
    assert got.message.startswith(
        "0/1 nodes are available: 1 node(s) could not be read (node broken: "
    )
    assert "status.allocatable" in got.message


async def test_a_cycle_binds_the_pod_and_a_failed_one_requeues_it_with_its_reasons() -> None:
    e = Env()
    e.node("n0", cpu="2")
    fits = e.pod(make_pod("fits").req(cpu="1").obj())
    big = e.pod(make_pod("big").req(cpu="3").obj())
    assert await e.run() == 2
    assert e.node_of(fits) == "n0"
    assert [ev.message for ev in e.events(fits, "Scheduled")] == [
        "Successfully assigned default/fits to n0"
    ]
    assert e.node_of(big) is None
    qpi = e.s.queue.get(big)
    assert qpi is not None
    assert qpi.unschedulable_plugins == {"NodeResourcesFit", "DefaultPreemption"}
    assert e.s.queue.where(big) == "unschedulable"
    message = (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 Preemption is not helpful for scheduling.."
    )
    assert [ev.message for ev in e.events(big, "FailedScheduling")] == [message]
    assert e.condition(big) == {"status": "False", "reason": "Unschedulable", "message": message}
    stats = e.s.statistics()
    assert (stats.cycles, stats.scheduled, stats.failed_attempts) == (2, 1, 1)


async def test_commit_drops_a_pod_the_cache_holds_already() -> None:
    e = Env()
    e.node("n0")
    e.s.on_pod(make_pod("p").node("n0").obj())  # bound: the cache holds it
    pod = make_pod("p").build()
    profile = e.s.profiles["troupe-scheduler"]
    ok = e.s.pods.commit(profile, CycleState(), QueuedPodInfo(pod, 0.0), NodeName("n0"))
    assert not ok
    assert e.s.statistics().dropped_known == 1
    await e.s.settle()
    assert e.cluster.binds == 0
