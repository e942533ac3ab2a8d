"""kube-scheduler's tests of topology-aware workload scheduling, ported:
topologyaware TestGeneratePlacements (candidate domains from node labels) and
noderesources TestPlacementBinPackingScore (the placement's allocation score),
plus PodGroupPodsCount's normalization."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.builders import make_node, make_pod, table_of
from troupe.api.types import Node, Pod
from troupe.core.snapshot import NodeTable
from troupe.core.topology import (
    TopologyError,
    TopologySpec,
    allocation_score,
    domains,
    label_missing,
    members_domain,
    pods_count_scores,
    preferred_order_problem,
)


def node(name: str, **labels: str) -> Node:
    b = make_node(name)
    for k, v in labels.items():
        b = b.label(k, v)
    return b.build()


def rows_of(t: NodeTable, *names: str) -> np.ndarray:
    return np.asarray(sorted(t.row_of[n] for n in names), dtype=np.intp)


def placements(t: NodeTable, key: str, rows: Any) -> dict[str, list[str]]:
    return {d.values[0]: [t.name(int(r)) for r in d.rows] for d in domains(t, (key,), rows)}


# ---- TestGeneratePlacements ---------------------------------------------------------------


def test_upstream_with_topology_key_constraint_returns_placement_for_each_topology_domain() -> None:
    """upstream: with topology key constraint, returns placement for each topology domain"""
    t = table_of(
        [
            node("node0", topology2="d1"),
            node("node1", topology2="d4"),
            node("node2", topology1="d1"),
            node("node3", topology1="d2"),
            node("node4", topology1="d1"),
            node("node5", topology1="d3"),
        ]
    )
    assert placements(t, "topology1", t.valid_rows()) == {
        "d1": ["node2", "node4"],
        "d2": ["node3"],
        "d3": ["node5"],
    }


def test_upstream_without_matching_topology_label_returns_empty() -> None:
    """upstream: without matching topology label, returns empty"""
    t = table_of(
        [
            node("node0", topology2="d1"),
            node("node1", topology2="d4"),
            node("node2", topology1="d1"),
        ]
    )
    assert placements(t, "topology3", t.valid_rows()) == {}
    assert label_missing(t, "topology3") and not label_missing(t, "topology1")


def test_upstream_domains_come_from_the_parent_placement_only() -> None:
    """upstream: with pods already scheduled in a single domain, returns that domain
    (the generation half: only the parent placement's nodes, node1, form domains;
    node2 and node3 outside it are in none)"""
    t = table_of(
        [
            node("node0", topology="d2"),
            node("node1", topology="d1"),
            node("node2", topology="d1"),
            node("node3", topology="d1"),
        ]
    )
    parent = rows_of(t, "node0", "node1")
    assert placements(t, "topology", parent) == {"d1": ["node1"], "d2": ["node0"]}


# ---- TestPlacementBinPackingScore -----------------------------------------------------------

GPU = "nvidia.com/gpu"
CPU_MEM = (("cpu", 1), ("memory", 1))
CPU4_MEM1 = (("cpu", 4), ("memory", 1))
WITH_GPU = (*CPU_MEM, (GPU, 1))


def cap_node(name: str, gpu: str = "") -> Node:
    b = make_node(name).capacity(cpu="5000m", memory="5000")
    return (b.ext(GPU, gpu) if gpu else b).build()


def pod(name: str, cpu: str, memory: str, gpu: str = "", on: str = "") -> Pod:
    b = make_pod(name).req(cpu=cpu, memory=memory)
    if gpu:
        b = b.ext(GPU, gpu)
    return (b.node(on) if on else b).build()


@pytest.mark.parametrize(
    ("assign", "existing", "resources", "want"),
    [
        pytest.param(
            {"foo": "node1", "bar": "node2"},
            [],
            CPU_MEM,
            25,
            id="upstream: Computes score based on total requests",
        ),
        pytest.param(
            {"foo": "node1", "bar": "node2"},
            [],
            CPU4_MEM1,
            28,
            id="upstream: Computes score using weights",
        ),
        pytest.param(
            {"foo": "node1", "bar": "node1"},
            [],
            CPU4_MEM1,
            28,
            id="upstream: Handles multiple pods per node",
        ),
        pytest.param(
            {"foo": "node1", "bar": "node2"},
            [],
            CPU_MEM,
            25,
            id="upstream: Does not include nodes from outside of placement",
        ),
        pytest.param(
            {"foo": "node1", "bar": "node2"},
            [pod("baz", "1000m", "0", on="node1")],
            CPU_MEM,
            30,
            id="upstream: Includes pre-existing pods from outside of pod group",
        ),
    ],
)
def test_upstream_placement_bin_packing_score(
    assign: dict[str, str],
    existing: list[Pod],
    resources: tuple[tuple[str, int], ...],
    want: int,
) -> None:
    t = table_of([cap_node("node1"), cap_node("node2"), cap_node("node3")], existing)
    group = [pod("foo", "1000m", "0"), pod("bar", "2000m", "2000")]
    rows = rows_of(t, "node1", "node2")  # the placement; node3 is outside it
    assert allocation_score(t, rows, group, resources) == want
    # the same with the group charged where it was assigned
    charged = table_of(
        [cap_node("node1"), cap_node("node2"), cap_node("node3")],
        [*existing, *(pod(n, c, m, on=assign[n]) for n, c, m in CHARGED)],
    )
    assert allocation_score(charged, rows, group, resources, charged=True) == want


CHARGED = [("foo", "1000m", "0"), ("bar", "2000m", "2000")]


def test_upstream_includes_scalar_resources_if_any_pod_in_pod_group_has_nonzero_requests() -> None:
    """upstream: Includes scalar resources if any pod in pod group has nonzero requests"""
    t = table_of(
        [cap_node("node1", "5"), cap_node("node2", "5")],
        [pod("baz", "1000m", "0", "0", on="node1")],
    )
    group = [pod("foo", "1000m", "0", "0"), pod("bar", "1000m", "2000", "1")]
    # cpu 30, memory 20, gpu 10
    assert allocation_score(t, t.valid_rows(), group, WITH_GPU) == 20


def test_upstream_does_not_include_scalar_resources_if_all_pods_have_zero_requests() -> None:
    """upstream: Does not include scalar resources if all pods in pod group have zero
    requests"""
    t = table_of(
        [cap_node("node1", "5"), cap_node("node2", "5")],
        [pod("baz", "1000m", "0", "1", on="node1")],
    )
    group = [pod("foo", "1000m", "0", "0"), pod("bar", "1000m", "2000", "0")]
    assert allocation_score(t, t.valid_rows(), group, WITH_GPU) == 25


def test_upstream_placement_bin_packing_strategies_most_allocated() -> None:
    """upstream: TestPlacementBinPackingScore_Strategies/MostAllocated (the strategy
    placements are scored with, whatever the per-pod one)"""
    t = table_of(
        [
            make_node("node1").capacity(cpu="100m", memory="100").build(),
            make_node("node2").capacity(cpu="200m", memory="200").build(),
            make_node("node3").capacity(cpu="300m", memory="300").build(),
        ]
    )
    group = [pod("foo", "100m", "0"), pod("bar", "200m", "60")]
    assert allocation_score(t, t.valid_rows(), group, CPU_MEM) == 30


def test_cpu_and_memory_count_non_zero_requests() -> None:
    t = table_of([make_node("n").capacity(cpu="1", memory="1000Mi").build()])
    # a pod that states no request counts 100m and 200Mi, as NonMissingContainerRequests
    assert allocation_score(t, t.valid_rows(), [make_pod("p").build()]) == (10 + 20) // 2


def test_an_isolated_pod_counts_toward_the_isolated_resource_not_cpu() -> None:
    iso = "troupe.dev/isolated-cpu"
    t = table_of([make_node("n").capacity(cpu="4", memory="4Gi").ext(iso, 4).build()])
    p = make_pod("p").req(cpu="2", memory="0").isolated().build()
    assert allocation_score(t, t.valid_rows(), [p], (("cpu", 1),)) == 0
    assert allocation_score(t, t.valid_rows(), [p], ((iso, 1),)) == 50


# ---- PodGroupPodsCount's NormalizePlacementScore ------------------------------------------------


def test_pods_count_normalizes_by_the_highest_count() -> None:
    assert pods_count_scores([2, 4, 8]) == [25, 50, 100]
    assert pods_count_scores([3, 7]) == [42, 100]
    with pytest.raises(ValueError, match="no pods from the pod group"):
        pods_count_scores([0, 0])


# ---- where a running group runs (TestGeneratePlacements' scheduled-pods cases) -----------------


def scheduled_table() -> NodeTable:
    return table_of(
        [
            node("node0", topology="d2"),
            node("node1", topology="d1"),
            node("node2", topology="d1"),
            node("node3", topology="d1"),
            node("node5", foo="bar"),
        ]
    )


def test_upstream_with_pods_already_scheduled_in_a_single_domain() -> None:
    """upstream: with pods already scheduled in a single domain, returns that domain"""
    assert members_domain(scheduled_table(), ("topology",), ["node2", "node3"]) == ("d1",)
    assert members_domain(scheduled_table(), ("topology",), []) is None


@pytest.mark.parametrize(
    ("placed", "problem"),
    [
        pytest.param(
            ["node2", "node0"],
            "members run in more than one domain: 'node2' in topology=d1, 'node0' in topology=d2",
            id="upstream: with pods already scheduled in conflicting domains, returns error",
        ),
        pytest.param(
            ["node2", "node4"],
            "a member runs on node 'node4', which is not in the snapshot",
            id="upstream: with already scheduled pod on node outside of snapshot, returns error",
        ),
        pytest.param(
            ["node5"],
            "a member runs on node 'node5', which has no label 'topology'",
            id="upstream: with already scheduled pod on node without topology label, returns error",
        ),
    ],
)
def test_upstream_scheduled_pods_that_cannot_be_followed(placed: list[str], problem: str) -> None:
    with pytest.raises(TopologyError) as e:
        members_domain(scheduled_table(), ("topology",), placed)
    assert str(e.value) == problem


def test_preferred_levels_written_widest_first_are_a_problem() -> None:
    t = table_of(
        [
            node(f"n{i}", **{"troupe.dev/rack": f"r{i // 2}", "troupe.dev/block": f"b{i // 4}"})
            for i in range(8)
        ]
    )
    right = TopologySpec(preferred=("troupe.dev/rack", "troupe.dev/block"))
    wrong = TopologySpec(
        preferred=("troupe.dev/block", "troupe.dev/rack"),
        source={"troupe.dev/block": "metadata.annotations[troupe.dev/topology-preferred]"},
    )
    assert preferred_order_problem(t, right) is None
    assert preferred_order_problem(t, wrong) == (
        "metadata.annotations[troupe.dev/topology-preferred]: preferred levels go from the "
        "narrowest to the widest, but 'troupe.dev/rack' lies within 'troupe.dev/block'"
    )
    # levels that do not nest say nothing about their order
    loose = table_of([node("a", x="1", y="1"), node("b", x="1", y="2"), node("c", x="2", y="1")])
    assert preferred_order_problem(loose, TopologySpec(preferred=("x", "y"))) is None
