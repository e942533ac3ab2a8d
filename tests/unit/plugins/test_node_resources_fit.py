"""NodeResourcesFit: filter and the three scoring strategies (cases from
kube-scheduler's fit_test.go, least/most_allocated_test.go, rtcr test)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.framework.handle import Handle
from scheduler.framework.interface import PluginArgsError
from scheduler.plugins.node_resources_fit import NodeResourcesFit
from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter, run_score


def fit(args: dict[str, Any] | None = None) -> NodeResourcesFit:
    return NodeResourcesFit.new(args or {}, make_handle())


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "want"),
    [
        pytest.param(
            make_pod("p").req(cpu="1", memory="1Gi"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10)],
            [],
            {},
            id="fits",
        ),
        pytest.param(
            make_pod("p").req(cpu="3"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10)],
            [],
            {"n1": ("Insufficient cpu",)},
            id="insufficient-cpu",
        ),
        pytest.param(
            make_pod("p").req(cpu="1", memory="3Gi"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10)],
            [make_pod("e").req(cpu="1500m").node("n1")],
            {"n1": ("Insufficient cpu", "Insufficient memory")},
            id="every-insufficient-resource-reported",
        ),
        pytest.param(
            make_pod("p"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=1)],
            [make_pod("e").node("n1")],
            {"n1": ("Too many pods",)},
            id="too-many-pods-even-with-no-requests",
        ),
        pytest.param(
            make_pod("p").ext("example.com/gpu", 1),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10)],
            [],
            {"n1": ("Insufficient example.com/gpu",)},
            id="extended-resource-the-node-lacks",
        ),
        pytest.param(
            make_pod("p").ext("example.com/gpu", 2),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10).ext("example.com/gpu", 4)],
            [make_pod("e").ext("example.com/gpu", 3).node("n1")],
            {"n1": ("Insufficient example.com/gpu",)},
            id="extended-resource-used",
        ),
        pytest.param(
            make_pod("p").req(ephemeral_storage="10Gi"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10, ephemeral_storage="5Gi")],
            [],
            {"n1": ("Insufficient ephemeral-storage",)},
            id="ephemeral-storage",
        ),
        pytest.param(
            make_pod("p").init_container(cpu="3").req(cpu="1"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10)],
            [],
            {"n1": ("Insufficient cpu",)},
            id="init-container-counts",
        ),
        pytest.param(
            make_pod("p").req(cpu="1").overhead(cpu="1500m"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10)],
            [],
            {"n1": ("Insufficient cpu",)},
            id="overhead-counts",
        ),
        pytest.param(
            make_pod("p").req(cpu="1"),
            [make_node("n1").capacity(cpu=2, memory="2Gi", pods=10)],
            [make_pod("done").req(cpu="2").node("n1").phase("Succeeded")],
            {},
            id="terminal-pods-free-their-resources",
        ),
    ],
)
def test_filter(
    pod: Any, nodes: list[Any], existing: list[Any], want: dict[str, tuple[str, ...]]
) -> None:
    table = table_of(
        [n.build() for n in nodes], [p.build() for p in existing if p.build().phase != "Succeeded"]
    )
    plugin = fit()
    assert run_filter(plugin, pod.build(), table) == want
    assert run_filter(plugin, pod.build(), table, per_node=True) == want


def test_ignored_resources() -> None:
    table = table_of([make_node("n1").build()])
    pod = make_pod("p").ext("example.com/gpu", 1).ext("vendor.io/fpga", 1).build()
    plugin = fit({"ignoredResources": ["example.com/gpu"], "ignoredResourceGroups": ["vendor.io"]})
    assert run_filter(plugin, pod, table) == {}


class TestIsolatedCPUs:
    node = make_node("iso").capacity(cpu=4, memory="8Gi", pods=10).ext("troupe.dev/isolated-cpu", 4)

    def test_isolated_and_ordinary_pods_share_a_node(self) -> None:
        iso = make_pod("iso").req(cpu="4").isolated()
        table = table_of([self.node.build()], [make_pod("e").req(cpu="4").node("iso").build()])
        assert run_filter(fit(), iso.build(), table) == {}
        table = table_of(
            [self.node.build()], [make_pod("e").req(cpu="4").isolated().node("iso").build()]
        )
        assert run_filter(fit(), make_pod("o").req(cpu="4").build(), table) == {}

    def test_fifth_isolated_core_refused(self) -> None:
        table = table_of(
            [self.node.build()], [make_pod("e").req(cpu="4").isolated().node("iso").build()]
        )
        got = run_filter(fit(), make_pod("p").req(cpu="1").isolated().build(), table)
        assert got == {"iso": ("Insufficient troupe.dev/isolated-cpu",)}

    def test_custom_names(self) -> None:
        node = make_node("rt").capacity(cpu=1, memory="1Gi", pods=10).ext("rt.io/cores", 2)
        plugin = fit(
            {"isolatedCPUAnnotation": "rt.io/isolated", "isolatedCPUResource": "rt.io/cores"}
        )
        pod = make_pod("p").req(cpu="2").annotate("rt.io/isolated", "true").build()
        handle = make_handle()
        handle.isolated = plugin.args.isolated
        from scheduler.snapshot import NodeTable

        t = NodeTable()
        from scheduler.api.parse import parse_node

        n = parse_node(node.obj(), frozenset({"cpu", "rt.io/cores"}))
        assert not isinstance(n, Exception)
        t.set_node(t.allocate_row("rt"), n)  # type: ignore[arg-type]
        assert run_filter(plugin, pod, t) == {}


SCORE_NODES = [
    make_node("node1").capacity(cpu="4000m", memory="10000", pods=110),
    make_node("node2").capacity(cpu="6000m", memory="10000", pods=110),
]


@pytest.mark.parametrize(
    ("strategy", "want"),
    [
        pytest.param({"type": "LeastAllocated"}, {"node1": 37, "node2": 50}, id="least"),
        pytest.param({"type": "MostAllocated"}, {"node1": 62, "node2": 50}, id="most"),
        pytest.param(
            {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
                },
            },
            {"node1": 38, "node2": 50},
            id="rtcr-like-least",
        ),
        pytest.param(
            {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
                },
            },
            {"node1": 63, "node2": 50},
            id="rtcr-like-most",
        ),
        pytest.param(
            {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}],
            },
            {"node1": 31, "node2": 50},
            id="weights",
        ),
    ],
)
def test_score_strategies(strategy: dict[str, Any], want: dict[str, int]) -> None:
    # "nothing scheduled, resources requested, differently sized nodes"
    pod = make_pod("p").req(cpu="3000m", memory="5000").build()
    table = table_of([n.build() for n in SCORE_NODES])
    plugin = fit({"scoringStrategy": strategy})
    assert run_score(plugin, pod, table) == want
    assert run_score(plugin, pod, table, per_node=True) == want


def test_score_uses_nonzero_defaults() -> None:
    # A pod that requests nothing counts as 100m / 200Mi when scoring.
    table = table_of([make_node("n").capacity(cpu="1", memory="2000Mi", pods=110).build()])
    got = run_score(fit(), make_pod("p").build(), table)
    assert got == {"n": ((900 * 100 // 1000) + (1800 * 100 // 2000)) // 2}


def test_isolated_pod_scores_on_the_isolated_resource() -> None:
    node = make_node("n").capacity(cpu=4, memory="4Gi", pods=10).ext("troupe.dev/isolated-cpu", 4)
    table = table_of([node.build()], [make_pod("e").req(cpu="4").node("n").build()])
    pod = make_pod("p").req(cpu="2", memory="2Gi").isolated().build()
    # cpu dimension: isolated 2 of 4 -> 50 (the ordinary pod's 4 cpus do not count);
    # memory: 2Gi plus the other pod's non-zero 200Mi of 4Gi -> 45
    assert run_score(fit(), pod, table) == {"n": (50 + (4096 - 2048 - 200) * 100 // 4096) // 2}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"scoringStrategy": {"type": "Fancy"}}, "scoringStrategy.type"),
        (
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}},
            "scoringStrategy.resources[0].weight",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            "scoringStrategy.requestedToCapacityRatio.shape",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]
                    },
                }
            },
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 11}]},
                }
            },
            "scoringStrategy.requestedToCapacityRatio.shape[0].score",
        ),
        ({"ignoredResources": "gpu"}, "ignoredResources"),
        ({"isolatedCPUResource": ""}, "isolatedCPUResource"),
        ({"bogus": 1}, "bogus"),
    ],
    ids=[
        "type",
        "weight",
        "shape-missing",
        "shape-order",
        "shape-score",
        "ignored",
        "iso",
        "unknown",
    ],
)
def test_args_validation(args: dict[str, Any], field: str, handle: Handle) -> None:
    with pytest.raises(PluginArgsError) as e:
        NodeResourcesFit.new(args, handle)
    assert e.value.field_path == field


@settings(max_examples=50, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.integers(0, 8000), st.integers(0, 8), st.integers(0, 4)),
        min_size=1,
        max_size=12,
    ),
    used=st.lists(
        st.tuples(st.integers(0, 11), st.integers(0, 3000), st.integers(0, 3)), max_size=10
    ),
    req=st.tuples(st.integers(0, 5000), st.integers(0, 6), st.integers(0, 3)),
    strategy=st.sampled_from(["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]),
)
def test_columnar_equals_per_node(
    nodes: list[Any], used: list[Any], req: Any, strategy: str
) -> None:
    built = [
        make_node(f"n{i}").capacity(cpu=f"{c}m", memory=f"{m}Gi", pods=p).build()
        for i, (c, m, p) in enumerate(nodes)
    ]
    existing = [
        make_pod(f"e{j}").req(cpu=f"{c}m", memory=f"{m}Gi").node(f"n{i % len(nodes)}").build()
        for j, (i, c, m) in enumerate(used)
    ]
    table = table_of(built, existing)
    pod = make_pod("p")
    if req[0]:
        pod.req(cpu=f"{req[0]}m")
    if req[1]:
        pod.req(memory=f"{req[1]}Gi")
    ss: dict[str, Any] = {"type": strategy}
    if strategy == "RequestedToCapacityRatio":
        ss["requestedToCapacityRatio"] = {
            "shape": [
                {"utilization": 0, "score": 2},
                {"utilization": 60, "score": 9},
                {"utilization": 100, "score": 4},
            ]
        }
    plugin = fit({"scoringStrategy": ss})
    p = pod.build()
    assert run_filter(plugin, p, table) == run_filter(plugin, p, table, per_node=True)
    assert run_score(plugin, p, table) == run_score(plugin, p, table, per_node=True)
    assert np.all(np.array(list((run_score(plugin, p, table) or {}).values())) <= 100)
