"""NodeResourcesBalancedAllocation (cases from balanced_allocation_test.go)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.framework.interface import PluginArgsError
from scheduler.plugins.balanced_allocation import NodeResourcesBalancedAllocation
from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score


def plugin(args: dict[str, Any] | None = None) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation.new(args or {}, make_handle())


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "want"),
    [
        pytest.param(
            make_pod("p").req(cpu="3000m", memory="5000"),
            [
                make_node("node1").capacity(cpu="4000m", memory="10000", pods=110),
                make_node("node2").capacity(cpu="6000m", memory="10000", pods=110),
            ],
            [],
            {"node1": 87, "node2": 100},
            id="differently-sized-nodes",
        ),
        pytest.param(
            make_pod("p").req(cpu="1000m", memory="2000"),
            [make_node("node1").capacity(cpu="4000m", memory="10000", pods=110)],
            [make_pod("e").req(cpu="2000m", memory="3000").node("node1")],
            # cpu 3000/4000 = .75, memory 5000/10000 = .5
            {"node1": 87},
            id="existing-pods-count",
        ),
        pytest.param(
            make_pod("p").req(cpu="5000m", memory="1000"),
            [make_node("node1").capacity(cpu="4000m", memory="10000", pods=110)],
            [],
            # fractions capped at 1: 1 and .1 -> std .45
            {"node1": 55},
            id="fraction-capped",
        ),
    ],
)
def test_score(pod: Any, nodes: list[Any], existing: list[Any], want: dict[str, int]) -> None:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing])
    assert run_score(plugin(), pod.build(), table) == want
    assert run_score(plugin(), pod.build(), table, per_node=True) == want


def test_best_effort_pod_is_skipped() -> None:
    table = table_of([make_node("n").build()])
    assert run_score(plugin(), make_pod("p").build(), table) is None


def test_three_resources() -> None:
    node = make_node("n").capacity(cpu="4", memory="4Gi", pods=110).ext("example.com/gpu", 4)
    table = table_of([node.build()])
    pod = make_pod("p").req(cpu="2", memory="1Gi").ext("example.com/gpu", 4).build()
    args = {
        "resources": [
            {"name": "cpu", "weight": 1},
            {"name": "memory", "weight": 1},
            {"name": "example.com/gpu", "weight": 1},
        ]
    }
    # fractions .5, .25, 1 -> mean .5833, std .3118 -> 68
    assert run_score(plugin(args), pod, table) == {"n": 68}


def test_args() -> None:
    with pytest.raises(PluginArgsError) as e:
        plugin({"resources": [{"name": "cpu", "weight": 101}]})
    assert e.value.field_path == "resources[0].weight"


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8000), st.integers(1, 8)), min_size=1, max_size=8),
    st.integers(1, 4000),
    st.integers(0, 4),
)
def test_columnar_equals_per_node(nodes: list[Any], cpu: int, mem: int) -> None:
    table = table_of(
        [
            make_node(f"n{i}").capacity(cpu=f"{c}m", memory=f"{m}Gi", pods=9).build()
            for i, (c, m) in enumerate(nodes)
        ]
    )
    pod = make_pod("p").req(cpu=f"{cpu}m")
    if mem:
        pod.req(memory=f"{mem}Gi")
    p = pod.build()
    assert run_score(plugin(), p, table) == run_score(plugin(), p, table, per_node=True)
