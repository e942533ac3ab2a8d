"""NodeResourcesBalancedAllocation: cases ported from kube-scheduler's
pkg/scheduler/framework/plugins/noderesources/balanced_allocation_test.go
(TestNodeResourcesBalancedAllocation; the stored version with the
DRAExtendedResource cases and TestBalancedAllocationSignPod, v1.35-era).

Facts carried over: test_util.go's makeNode(name, milliCPU, memory, scalars)
gives cpu in millicores and memory in bytes; the pods are upstream's PodSpecs
(cpuAndMemory: 1000m/2000 + 2000m/3000; cpuOnly: 1000m/0 + 2000m/0, memory
stated as 0; cpuAndMemoryAndGPU: cpuAndMemory plus 3 nvidia.com/gpu), each on
the node its spec names.

Skipped: the two "include DRA resource ..." cases (Troupe has no DRA) and
TestBalancedAllocationSignPod (pod signatures for opportunistic batching, not
in Troupe). "resources requested, pods scheduled with resources if PreScore not
called" asserts Troupe's behaviour: Score reads PreScore's state and fails
loudly without it (docs/design.md, "CycleState"; the runtime always runs PreScore first).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score
from troupe.framework.cycle_state import CycleState, StateKeyError
from troupe.plugins.balanced_allocation import NodeResourcesBalancedAllocation

GPU = "nvidia.com/gpu"
DEFAULT = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
WITH_GPU = [*DEFAULT, {"name": GPU, "weight": 1}]


def make_node_(name: str, milli_cpu: int, memory: int, gpu: int | None = None) -> NodeBuilder:
    """test_util.go makeNode."""
    n = make_node(name).capacity(cpu=f"{milli_cpu}m", memory=str(memory), pods=110)
    if gpu is not None:
        n.ext(GPU, gpu)
    return n


def two(name: str, first: dict[str, str], second: dict[str, str]) -> PodBuilder:
    pb = make_pod(name)
    pb._spec["containers"] = [
        {"name": "c0", "image": "x", "resources": {"requests": first}},
        {"name": "c1", "image": "x", "resources": {"requests": second}},
    ]
    return pb


def cpu_and_memory(name: str = "p") -> PodBuilder:
    return two(name, {"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"})


def cpu_only(name: str = "p") -> PodBuilder:
    return two(name, {"cpu": "1000m", "memory": "0"}, {"cpu": "2000m", "memory": "0"})


def cpu_and_memory_and_gpu(name: str = "p") -> PodBuilder:
    return two(
        name, {"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000", GPU: "3"}
    )


def plugin(resources: list[dict[str, Any]]) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation.new({"resources": resources}, make_handle())


EXISTING = [cpu_only("e1").node("node1"), cpu_and_memory("e2").node("node2")]


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "resources", "want"),
    [
        pytest.param(
            make_pod("p"),
            [make_node_("node1", 4000, 10000), make_node_("node2", 4000, 10000)],
            [],
            DEFAULT,
            None,
            id="upstream: nothing scheduled, nothing requested, skip in PreScore",
        ),
        pytest.param(
            cpu_and_memory(),
            [make_node_("node1", 4000, 10000), make_node_("node2", 6000, 10000)],
            [],
            DEFAULT,
            {"node1": 87, "node2": 100},
            id="upstream: nothing scheduled, resources requested, differently sized nodes",
        ),
        pytest.param(
            cpu_and_memory(),
            [make_node_("node1", 10000, 20000), make_node_("node2", 10000, 20000)],
            EXISTING,
            DEFAULT,
            {"node1": 82, "node2": 95},
            id="upstream: resources requested, pods scheduled with resources",
        ),
        pytest.param(
            cpu_and_memory(),
            [make_node_("node1", 10000, 20000), make_node_("node2", 10000, 50000)],
            EXISTING,
            DEFAULT,
            {"node1": 82, "node2": 80},
            id="upstream: resources requested, pods scheduled with resources, differently sized "
            "nodes",
        ),
        pytest.param(
            cpu_only(),
            [make_node_("node1", 6000, 10000), make_node_("node2", 6000, 10000)],
            EXISTING,
            DEFAULT,
            {"node1": 50, "node2": 75},
            id="upstream: requested resources at node capacity",
        ),
        pytest.param(
            make_pod("p").req(memory="0").ext(GPU, 1),
            [make_node_("node1", 3500, 40000, 8), make_node_("node2", 3500, 40000, 8)],
            [cpu_and_memory("e1").node("node2"), cpu_and_memory_and_gpu("e2").node("node1")],
            WITH_GPU,
            {"node1": 70, "node2": 65},
            id="upstream: include scalar resource on a node for balanced resource allocation",
        ),
        pytest.param(
            cpu_and_memory(),
            [make_node_("node1", 3500, 40000, 8), make_node_("node2", 3500, 40000)],
            [],
            WITH_GPU,
            {"node1": 63, "node2": 63},
            id="upstream: node without the scalar resource should skip the scalar resource",
        ),
    ],
)
def test_node_resources_balanced_allocation(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    existing: list[PodBuilder],
    resources: list[dict[str, Any]],
    want: dict[str, int] | None,
) -> None:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing])
    pl = plugin(resources)
    assert run_score(pl, pod.build(), table) == want
    if want is not None:
        assert run_score(pl, pod.build(), table, per_node=True) == want


def test_score_without_pre_score() -> None:
    """upstream: resources requested, pods scheduled with resources if PreScore not
    called. Troupe: Score without PreScore's state raises."""
    nodes = [make_node_("node1", 10000, 20000), make_node_("node2", 10000, 20000)]
    table = table_of([n.build() for n in nodes], [p.build() for p in EXISTING])
    pl = plugin(DEFAULT)
    pod = cpu_and_memory().build()
    with pytest.raises(StateKeyError):
        pl.score(CycleState(), pod, table, table.valid_rows())
    with pytest.raises(StateKeyError):
        pl.score_node(CycleState(), pod, table, 0)
