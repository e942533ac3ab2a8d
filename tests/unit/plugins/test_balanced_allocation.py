"""NodeResourcesBalancedAllocation (cases from kube-scheduler's
balanced_allocation_test.go, with its current semantics: actual requests, not
the non-zero defaults; best-effort pods skipped at PreScore).

As there, nodes have `cpu: "4000"` (cores) and memory in bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score
from troupe.framework.cycle_state import CycleState
from troupe.framework.handle import Handle
from troupe.framework.interface import PluginArgsError
from troupe.plugins.balanced_allocation import NodeResourcesBalancedAllocation, balanced_score

GPU = "nvidia.com/gpu"
ISO = "troupe.dev/isolated-cpu"


def plugin(args: dict[str, Any] | None = None) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation.new(args or {}, make_handle())


def node(name: str, cpu: str, memory: str, gpu: int = 0) -> NodeBuilder:
    n = make_node(name).capacity(cpu=cpu, memory=memory, pods=110)
    return n.ext(GPU, gpu) if gpu else n


def cpu_only(node_name: str = "", name: str = "c") -> PodBuilder:
    """cpuOnly: 1000 + 2000 cores, memory 0."""
    p = make_pod(name).req(cpu="1000", memory="0").container(cpu="2000", memory="0")
    return p.node(node_name) if node_name else p


def cpu_and_memory(node_name: str = "", name: str = "cm") -> PodBuilder:
    """cpuAndMemory: 1000 + 2000 cores, 2000 + 3000 bytes."""
    p = make_pod(name).req(cpu="1000", memory="2000").container(cpu="2000", memory="3000")
    return p.node(node_name) if node_name else p


WITH_GPU = {
    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": GPU}]
}


@pytest.mark.parametrize(
    ("pod", "nodes", "existing_pods", "args", "want"),
    [
        pytest.param(
            # node1: cpu 3000/4000 = 0.75, memory 5000/10000 = 0.5, std 0.125 -> 87
            # node2: cpu 3000/6000 = 0.5, memory 0.5, std 0 -> 100
            cpu_and_memory(),
            [node("node1", "4000", "10000"), node("node2", "6000", "10000")],
            [],
            {},
            {"node1": 87, "node2": 100},
            id="nothing scheduled, resources requested, differently sized nodes",
        ),
        pytest.param(
            # node1: cpu 6000/10000 = 0.6, memory 5000/20000 = 0.25, std 0.175 -> 82
            # node2: cpu 0.6, memory 10000/20000 = 0.5, std 0.05 -> 95
            cpu_and_memory(),
            [node("node1", "10000", "20000"), node("node2", "10000", "20000")],
            [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
            {},
            {"node1": 82, "node2": 95},
            id="resources requested, pods scheduled with resources",
        ),
        pytest.param(
            # node2: memory 10000/50000 = 0.2, std 0.2 -> 80
            cpu_and_memory(),
            [node("node1", "10000", "20000"), node("node2", "10000", "50000")],
            [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
            {},
            {"node1": 82, "node2": 80},
            id="resources requested, pods scheduled with resources, differently sized nodes",
        ),
        pytest.param(
            # cpu 6000/4000 capped at 1; node1 memory 0 -> std 0.5 -> 50;
            # node2 memory 5000/10000 -> std 0.25 -> 75
            cpu_only(),
            [node("node1", "4000", "10000"), node("node2", "4000", "10000")],
            [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
            {},
            {"node1": 50, "node2": 75},
            id="requested resources at node capacity",
        ),
        pytest.param(
            # allocatable 0 everywhere: no fractions, std 0
            cpu_only(),
            [node("node1", "0", "0"), node("node2", "0", "0")],
            [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
            {},
            {"node1": 100, "node2": 100},
            id="zero node resources, pods scheduled with resources",
        ),
        pytest.param(
            # the non-zero defaults are not used: the pod's memory fraction is 0
            make_pod("p").req(cpu="2000"),
            [node("node1", "4000", "10000")],
            [],
            {},
            {"node1": 75},
            id="actual requests, not the non-zero scoring defaults",
        ),
        pytest.param(
            # node1: cpu 3000/3500, memory 5000/40000, gpu (3+1)/8:
            # std = sqrt(((0.857-0.494)^2 + (0.125-0.494)^2 + (0.5-0.494)^2) / 3) = 0.299 -> 70
            # node2: gpu 1/8 -> std 0.345 -> 65
            make_pod("p").req(memory="0").ext(GPU, 1),
            [node("node1", "3500", "40000", gpu=8), node("node2", "3500", "40000", gpu=8)],
            [
                cpu_and_memory("node1", "a").ext(GPU, 3),
                cpu_and_memory("node2", "b"),
            ],
            WITH_GPU,
            {"node1": 70, "node2": 65},
            id="include scalar resource on a node for balanced resource allocation",
        ),
        pytest.param(
            # the pod does not request the gpu: only cpu and memory count, on both nodes
            # (3000 + 3000) / 3500 capped at 1, 5000 / 40000 -> std 0.4375 -> 56
            cpu_only(),
            [node("node1", "3500", "40000", gpu=8), node("node2", "3500", "40000")],
            [cpu_and_memory("node1", "a"), cpu_and_memory("node2", "b")],
            WITH_GPU,
            {"node1": 56, "node2": 56},
            id="node without the scalar resource scores as one with it",
        ),
        pytest.param(
            # the pod requests a gpu node2 lacks: node2 counts cpu and memory only
            # node1: 0.857, 0.125, 1/8 -> 65; node2: std (0.857 - 0.125) / 2 -> 63
            make_pod("p").req(memory="0").ext(GPU, 1),
            [node("node1", "3500", "40000", gpu=8), node("node2", "3500", "40000")],
            [cpu_and_memory("node1", "a"), cpu_and_memory("node2", "b")],
            WITH_GPU,
            {"node1": 65, "node2": 63},
            id="a node without a requested scalar resource leaves it out",
        ),
        pytest.param(
            # only cpu configured: one fraction, std 0
            cpu_only(),
            [node("node1", "4000", "10000")],
            [],
            {"resources": [{"name": "cpu"}]},
            {"node1": 100},
            id="one resource is always balanced",
        ),
    ],
)
def test_score(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    existing_pods: list[PodBuilder],
    args: dict[str, Any],
    want: dict[str, int],
) -> None:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing_pods])
    p = plugin(args)
    assert run_score(p, pod.build(), table) == want
    assert run_score(p, pod.build(), table, per_node=True) == want


@pytest.mark.parametrize(
    ("pod", "args"),
    [
        pytest.param(make_pod("p"), {}, id="no requests"),
        pytest.param(make_pod("p").req(ephemeral_storage="1Gi"), {}, id="requests nothing scored"),
        pytest.param(
            make_pod("p").req(cpu="1"), {"resources": [{"name": GPU}]}, id="only unrequested gpu"
        ),
    ],
)
def test_best_effort_pods_skip(pod: PodBuilder, args: dict[str, Any]) -> None:
    table = table_of([node("node1", "4000", "10000", gpu=4).build()])
    assert run_score(plugin(args), pod.build(), table) is None


class TestIsolatedCPUs:
    node = make_node("n").capacity(cpu=4, memory="8Gi", pods=10).ext(ISO, 4)

    @pytest.mark.parametrize(
        ("pod", "existing_pods", "want"),
        [
            pytest.param(
                # cpu on the isolated cores: 2/4 = 0.5 (the ordinary pod's 4 cpus do not
                # count), memory 2Gi/8Gi = 0.25: std 0.125 -> 87
                make_pod("p").req(cpu="2", memory="2Gi").isolated(),
                [make_pod("e").req(cpu="4").node("n")],
                87,
                id="isolated pod: cpu fraction on the isolated cores",
            ),
            pytest.param(
                # an ordinary pod: cpu 2/4 (the isolated pod's cores do not count)
                make_pod("p").req(cpu="2", memory="2Gi"),
                [make_pod("e").req(cpu="4").isolated().node("n")],
                87,
                id="ordinary pod: isolated pods use no ordinary cpu",
            ),
            pytest.param(
                # isolated (4 + 2) / 4 capped at 1, memory 0.25: std 0.375 -> 62
                make_pod("p").req(cpu="2", memory="2Gi").isolated(),
                [make_pod("e").req(cpu="4").isolated().node("n")],
                62,
                id="isolated cores full",
            ),
        ],
    )
    def test_score(self, pod: PodBuilder, existing_pods: list[PodBuilder], want: int) -> None:
        table = table_of([self.node.build()], [p.build() for p in existing_pods])
        assert run_score(plugin(), pod.build(), table) == {"n": want}
        assert run_score(plugin(), pod.build(), table, per_node=True) == {"n": want}


@pytest.mark.parametrize(
    ("requested", "allocatable", "want"),
    [
        pytest.param([0, 0], [0, 0], 100, id="nothing allocatable"),
        pytest.param([3, 5], [4, 10], 87, id="two fractions"),
        pytest.param([6, 0], [4, 10], 50, id="capped at one"),
        pytest.param([1, 1, 1], [2, 4, 8], 84, id="three fractions"),
        pytest.param([1, 1, 1], [2, 0, 8], 81, id="a resource with nothing allocatable is skipped"),
    ],
)
def test_balanced_score(requested: list[int], allocatable: list[int], want: int) -> None:
    # three fractions 0.5, 0.25, 0.125: mean 0.2917,
    # std sqrt((0.2083^2 + 0.0417^2 + 0.1667^2) / 3) = 0.1559 -> 84
    assert balanced_score(requested, allocatable) == want


@pytest.mark.parametrize(
    ("args", "field"),
    [
        pytest.param({"bogus": 1}, "bogus", id="unknown field"),
        pytest.param({"resources": "cpu"}, "resources", id="not a list"),
        pytest.param(
            {"resources": [{"name": "cpu", "weight": 2}]}, "resources[0].weight", id="weight not 1"
        ),
        pytest.param(
            {"resources": [{"name": "cpu"}, {"name": "cpu"}]}, "resources[1].name", id="duplicate"
        ),
        pytest.param({"resources": [{"weight": 1}]}, "resources[0].name", id="no name"),
        pytest.param({"resources": [{"name": "a b"}]}, "resources[0].name", id="bad name"),
        pytest.param(
            {"resources": [{"name": "cpu", "w": 1}]}, "resources[0].w", id="unknown item field"
        ),
    ],
)
def test_args_validation(args: dict[str, Any], field: str, handle: Handle) -> None:
    with pytest.raises(PluginArgsError) as e:
        NodeResourcesBalancedAllocation.new(args, handle)
    assert e.value.field_path == field


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param({}, ("cpu", "memory"), id="default"),
        pytest.param({"resources": []}, ("cpu", "memory"), id="empty list"),
        pytest.param(
            {"resources": [{"name": "cpu", "weight": 0}, {"name": GPU, "weight": 1}]},
            ("cpu", GPU),
            id="weight 0 or 1",
        ),
    ],
)
def test_args_defaults(args: dict[str, Any], want: tuple[str, ...], handle: Handle) -> None:
    assert NodeResourcesBalancedAllocation.new(args, handle).resources == want


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.integers(0, 8000), st.integers(0, 8), st.integers(0, 3), st.integers(0, 3)),
        min_size=1,
        max_size=10,
    ),
    used=st.lists(
        st.tuples(
            st.integers(0, 9),
            st.integers(0, 5000),
            st.integers(0, 9),
            st.booleans(),
            st.integers(0, 2),
        ),
        max_size=10,
    ),
    req=st.tuples(st.integers(0, 4000), st.integers(0, 6), st.booleans(), st.integers(0, 2)),
    resources=st.sampled_from(
        [["cpu", "memory"], ["cpu", "memory", GPU], ["memory", GPU, "cpu"], [GPU]]
    ),
    subset=st.lists(st.integers(0, 9), max_size=10),
)
def test_columnar_equals_per_node(
    nodes: list[Any], used: list[Any], req: Any, resources: list[str], subset: list[int]
) -> None:
    built = []
    for i, (cpu, mem, iso, gpu) in enumerate(nodes):
        n = make_node(f"n{i}").capacity(cpu=f"{cpu}m", memory=f"{mem}Gi", pods=110)
        if iso:
            n.ext(ISO, iso)
        if gpu:
            n.ext(GPU, gpu)
        built.append(n.build())
    existing = []
    for j, (i, cpu, mem, isolated, gpu) in enumerate(used):
        p = make_pod(f"e{j}").node(f"n{i % len(nodes)}")
        if cpu:
            p.req(cpu=f"{cpu}m")
        if mem:
            p.req(memory=f"{mem}Gi")
        if gpu:
            p.ext(GPU, gpu)
        if isolated:
            p.isolated()
        existing.append(p.build())
    table = table_of(built, existing)
    cpu, mem, isolated, gpu = req
    pb = make_pod("p")
    if cpu:
        pb.req(cpu=f"{cpu}m")
    if mem:
        pb.req(memory=f"{mem}Gi")
    if gpu:
        pb.ext(GPU, gpu)
    if isolated:
        pb.isolated()
    pod = pb.build()
    pl = plugin({"resources": [{"name": r} for r in resources]})
    scores = run_score(pl, pod, table)
    assert scores == run_score(pl, pod, table, per_node=True)
    if scores is not None:
        assert all(0 <= s <= 100 for s in scores.values())
        rows = np.array([i % len(nodes) for i in subset], dtype=np.intp)
        state = CycleState()
        assert pl.pre_score(state, pod, table, rows).is_success
        assert pl.score(state, pod, table, rows).tolist() == [
            pl.score_node(state, pod, table, r) for r in rows.tolist()
        ]
