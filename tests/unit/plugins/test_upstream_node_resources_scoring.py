"""NodeResourcesFit scoring strategies: cases ported from kube-scheduler's
pkg/scheduler/framework/plugins/noderesources/least_allocated_test.go
(TestLeastAllocatedScoringStrategy), most_allocated_test.go
(TestMostAllocatedScoringStrategy) and requested_to_capacity_ratio_test.go
(TestRequestedToCapacityRatioScoringStrategy, TestBrokenLinearFunction,
TestResourceBinPackingSingleExtended, TestResourceBinPackingMultipleExtended),
the stored versions that use pkg/scheduler/backend/cache (v1.31+ layout).

Facts carried over: nodes give `cpu: "4000"` (cores) and memory in bytes, as
upstream's st.MakeNode().Capacity; pods are the same requests per container.
Upstream's pods with no containers (st.MakePod().Obj()) request nothing and
count nothing, not even the non-zero defaults; here they are one container
that states `cpu: 0, memory: 0`, which kube-scheduler counts the same way
(a stated request is not defaulted). TestResourceBinPacking*'s makeNode is
4 cpu, 10000Mi of memory and the extended resources.

Deliberate differences, asserted as Troupe's behaviour:
- "Resources not set, pods scheduled with error": upstream builds the plugin
  from internal args with no resources and Score returns Error. Troupe reads
  the v1 configuration, whose defaulting gives cpu and memory weight 1 when no
  resources are given, so the pod is scored on those.
- "resource with zero weight": upstream's internal-args validation rejects a
  weight of 0; Troupe reads v1 args, whose defaulting turns 0 into 1
  (SetDefaults_NodeResourcesFitArgs), so the plugin is built and scores.
The other weight-validation cases are ported as they are (same field path).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score
from troupe.framework.interface import PluginArgsError
from troupe.plugins.node_resources_fit import NodeResourcesFit, broken_linear

EXT = "abc.com/xyz"
DEFAULT = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
WITH_EXT = [*DEFAULT, {"name": EXT, "weight": 1}]
MAX = 100


def node(name: str, cpu: str, memory: str, **ext: str) -> NodeBuilder:
    n = make_node(name).capacity(cpu=cpu, memory=memory, pods=110)
    for k, v in ext.items():
        n.ext(k, v)
    return n


def bare_node(name: str) -> NodeBuilder:
    """st.MakeNode().Name(name).Obj(): no allocatable at all."""
    return make_node(name).capacity()


def pod(*containers: dict[str, str]) -> PodBuilder:
    """st.MakePod().Req(a).Req(b)...: one container per request list; none given is
    a pod requesting nothing (a container stating cpu: 0, memory: 0)."""
    pb = make_pod("p")
    if not containers:
        return pb.req(cpu="0", memory="0")
    first, *rest = containers
    pb._spec["containers"][0]["resources"] = {"requests": dict(first)}
    for r in rest:
        pb._spec["containers"].append(
            {
                "name": f"c{len(pb._spec['containers'])}",
                "image": "x",
                "resources": {"requests": dict(r)},
            }
        )
    return pb


_n = 0


def on(node_name: str, *containers: dict[str, str]) -> PodBuilder:
    global _n
    _n += 1
    pb = pod(*containers)
    pb._o["metadata"]["name"] = f"e{_n}"
    pb._o["metadata"]["uid"] = f"uid-e{_n}"
    return pb.node(node_name)


def cm(cpu: str, memory: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory}


TWO_CONTAINERS = (cm("1000", "2000"), cm("2000", "3000"))


def args(kind: str, resources: list[dict[str, Any]] | None, shape: Any = None) -> dict[str, Any]:
    ss: dict[str, Any] = {"type": kind}
    if resources is not None:
        ss["resources"] = resources
    if shape is not None:
        ss["requestedToCapacityRatio"] = {
            "shape": [{"utilization": u, "score": s} for u, s in shape]
        }
    return {"scoringStrategy": ss}


def check(
    a: dict[str, Any],
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    existing: list[PodBuilder],
    want: dict[str, int],
) -> None:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing])
    plugin = NodeResourcesFit.new(a, make_handle())
    assert run_score(plugin, incoming.build(), table) == want
    assert run_score(plugin, incoming.build(), table, per_node=True) == want


def n12(cpu1: str, mem1: str, cpu2: str, mem2: str) -> list[NodeBuilder]:
    return [node("node1", cpu1, mem1), node("node2", cpu2, mem2)]


# ---- TestLeastAllocatedScoringStrategy ----------------------------------------------

LEAST = [
    pytest.param(
        pod(),
        n12("4000", "10000", "4000", "10000"),
        [],
        DEFAULT,
        {"node1": MAX, "node2": MAX},
        id="upstream: nothing scheduled, nothing requested",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("4000", "10000", "6000", "10000"),
        [],
        DEFAULT,
        {"node1": 37, "node2": 50},
        id="upstream: nothing scheduled, resources requested, differently sized nodes",
    ),
    # Troupe: no resources given defaults to cpu and memory (v1 defaulting)
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("4000", "10000", "6000", "10000"),
        [],
        None,
        {"node1": 37, "node2": 50},
        id="upstream: Resources not set, pods scheduled with error",
    ),
    pytest.param(
        pod(),
        n12("4000", "10000", "4000", "10000"),
        [on("node1"), on("node1"), on("node2"), on("node2")],
        DEFAULT,
        {"node1": MAX, "node2": MAX},
        id="upstream: no resources requested, pods scheduled",
    ),
    pytest.param(
        pod(),
        n12("10000", "20000", "10000", "20000"),
        [
            on("node1", cm("3000", "0")),
            on("node1", cm("3000", "0")),
            on("node2", cm("3000", "0")),
            on("node2", cm("3000", "5000")),
        ],
        DEFAULT,
        {"node1": 70, "node2": 57},
        id="upstream: no resources requested, pods scheduled with resources",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("10000", "20000", "10000", "20000"),
        [on("node1", cm("3000", "0")), on("node2", cm("3000", "5000"))],
        DEFAULT,
        {"node1": 57, "node2": 45},
        id="upstream: resources requested, pods scheduled with resources",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("10000", "20000", "10000", "50000"),
        [on("node1", cm("3000", "0")), on("node2", cm("3000", "5000"))],
        DEFAULT,
        {"node1": 57, "node2": 60},
        id="upstream: resources requested, pods scheduled with resources, differently sized nodes",
    ),
    pytest.param(
        pod(cm("3000", "0")),
        n12("4000", "10000", "4000", "10000"),
        [on("node1", cm("3000", "0")), on("node2", cm("3000", "5000"))],
        DEFAULT,
        {"node1": 50, "node2": 25},
        id="upstream: requested resources exceed node capacity",
    ),
    pytest.param(
        pod(),
        [bare_node("node1"), bare_node("node2")],
        [on("node1", cm("3000", "0")), on("node2", cm("3000", "5000"))],
        DEFAULT,
        {"node1": 0, "node2": 0},
        id="upstream: zero node resources, pods scheduled with resources",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("4000", "10000", "6000", "10000"),
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        {"node1": 41, "node2": 50},
        id="upstream: nothing scheduled, resources requested with different weight on CPU and "
        "memory, differently sized nodes",
    ),
    # Troupe: a weight of 0 is defaulted to 1 (v1 args): cpu 25, memory 50
    pytest.param(
        pod(*TWO_CONTAINERS),
        [node("node1", "4000", "10000")],
        [],
        [{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 0}],
        {"node1": 37},
        id="upstream: resource with zero weight",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [],
        WITH_EXT,
        {"node1": 50, "node2": 50},
        id="upstream: bypass extended resource if the pod does not request",
    ),
    pytest.param(
        pod({**cm("3000", "5000"), EXT: "2"}),
        [
            node("node1", "6000", "10000", **{EXT: "4"}),
            node("node2", "6000", "10000", **{EXT: "10"}),
        ],
        [],
        WITH_EXT,
        {"node1": 50, "node2": 60},
        id="upstream: honor extended resource if the pod requests",
    ),
    pytest.param(
        pod(cm("3000", "4000")),
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [],
        [{"name": EXT, "weight": 2}, *DEFAULT],
        {"node1": 55, "node2": 55},
        id="upstream: if the node doesn't have a resource",
    ),
]


@pytest.mark.parametrize(("incoming", "nodes", "existing", "resources", "want"), LEAST)
def test_least_allocated(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    existing: list[PodBuilder],
    resources: list[dict[str, Any]] | None,
    want: dict[str, int],
) -> None:
    check(args("LeastAllocated", resources), incoming, nodes, existing, want)


# ---- TestMostAllocatedScoringStrategy -----------------------------------------------

MOST = [
    pytest.param(
        pod(),
        n12("4000", "10000", "4000", "10000"),
        [],
        DEFAULT,
        {"node1": 0, "node2": 0},
        id="upstream: nothing scheduled, nothing requested",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("4000", "10000", "6000", "10000"),
        [],
        DEFAULT,
        {"node1": 62, "node2": 50},
        id="upstream: nothing scheduled, resources requested, differently sized nodes",
    ),
    # Troupe: no resources given defaults to cpu and memory (v1 defaulting)
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("4000", "10000", "6000", "10000"),
        [],
        None,
        {"node1": 62, "node2": 50},
        id="upstream: Resources not set, pods scheduled with error",
    ),
    pytest.param(
        pod(),
        n12("10000", "20000", "10000", "20000"),
        [
            on("node1", cm("3000", "0")),
            on("node1", cm("3000", "0")),
            on("node2", cm("3000", "0")),
            on("node2", cm("3000", "5000")),
        ],
        DEFAULT,
        {"node1": 30, "node2": 42},
        id="upstream: no resources requested, pods scheduled with resources",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("10000", "20000", "10000", "20000"),
        [on("node1", cm("3000", "0")), on("node2", cm("3000", "5000"))],
        DEFAULT,
        {"node1": 42, "node2": 55},
        id="upstream: resources requested, pods scheduled with resources",
    ),
    pytest.param(
        pod(cm("2000", "4000"), cm("3000", "5000")),
        n12("5000", "10000", "10000", "9000"),
        [],
        DEFAULT,
        {"node1": 95, "node2": 75},
        id="upstream: resources requested equal node capacity",
    ),
    # upstream has two cases with this name; this one weighs memory 2, cpu 1
    pytest.param(
        pod(*TWO_CONTAINERS),
        n12("4000", "10000", "6000", "10000"),
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        {"node1": 58, "node2": 50},
        id="upstream: nothing scheduled, resources requested, differently sized nodes",
    ),
    # st.MakePod().Container("container"): no requests, so the non-zero defaults
    pytest.param(
        make_pod("p"),
        n12("250m", "1000Mi", "250m", "1000Mi"),
        [
            make_pod("e1").node("node1"),
            make_pod("e2").node("node1"),
        ],
        DEFAULT,
        {"node1": 80, "node2": 30},
        id="upstream: no resources requested, pods scheduled, nonzero request for resource",
    ),
    # Troupe: a weight of 0 is defaulted to 1 (v1 args): cpu 75, memory 50
    pytest.param(
        pod(*TWO_CONTAINERS),
        [node("node2", "4000", "10000")],
        [],
        [{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 0}],
        {"node2": 62},
        id="upstream: resource with zero weight",
    ),
    pytest.param(
        pod(*TWO_CONTAINERS),
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [],
        WITH_EXT,
        {"node1": 50, "node2": 50},
        id="upstream: bypass extended resource if the pod does not request",
    ),
    pytest.param(
        pod({**cm("3000", "5000"), EXT: "2"}),
        [
            node("node1", "6000", "10000", **{EXT: "4"}),
            node("node2", "6000", "10000", **{EXT: "10"}),
        ],
        [],
        WITH_EXT,
        {"node1": 50, "node2": 40},
        id="upstream: honor extended resource if the pod request",
    ),
    pytest.param(
        pod(cm("3000", "4000")),
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [],
        [{"name": EXT, "weight": 2}, *DEFAULT],
        {"node1": 45, "node2": 45},
        id="upstream: if the node doesn't have a resource",
    ),
]


@pytest.mark.parametrize(("incoming", "nodes", "existing", "resources", "want"), MOST)
def test_most_allocated(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    existing: list[PodBuilder],
    resources: list[dict[str, Any]] | None,
    want: dict[str, int],
) -> None:
    check(args("MostAllocated", resources), incoming, nodes, existing, want)


@pytest.mark.parametrize(
    ("kind", "resources", "field"),
    [
        pytest.param(
            "LeastAllocated",
            [{"name": "memory", "weight": -1}, {"name": "cpu", "weight": 1}],
            "scoringStrategy.resources[0].weight",
            id="upstream: resource with negative weight (least_allocated_test.go)",
        ),
        pytest.param(
            "LeastAllocated",
            [{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 101}],
            "scoringStrategy.resources[1].weight",
            id="upstream: resource weight larger than MaxNodeScore (least_allocated_test.go)",
        ),
        pytest.param(
            "MostAllocated",
            [{"name": "memory", "weight": -1}, {"name": "cpu", "weight": 1}],
            "scoringStrategy.resources[0].weight",
            id="upstream: resource with negative weight (most_allocated_test.go)",
        ),
        pytest.param(
            "MostAllocated",
            [{"name": "memory", "weight": 101}],
            "scoringStrategy.resources[0].weight",
            id="upstream: resource weight larger than MaxNodeScore (most_allocated_test.go)",
        ),
    ],
)
def test_weight_validation(kind: str, resources: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(PluginArgsError) as e:
        NodeResourcesFit.new(args(kind, resources), make_handle())
    assert e.value.field_path == field


# ---- TestRequestedToCapacityRatioScoringStrategy -----------------------------------

DOWN = [(0, 10), (100, 0)]


@pytest.mark.parametrize(
    ("incoming", "nodes", "existing", "want"),
    [
        pytest.param(
            pod(),
            n12("4000", "10000", "4000", "10000"),
            [on("node1"), on("node1")],
            {"node1": MAX, "node2": MAX},
            id="upstream: nothing scheduled, nothing requested (default - least requested "
            "nodes have priority)",
        ),
        pytest.param(
            pod(*TWO_CONTAINERS),
            n12("4000", "10000", "6000", "10000"),
            [on("node1"), on("node1")],
            {"node1": 38, "node2": 50},
            id="upstream: nothing scheduled, resources requested, differently sized nodes "
            "(default - least requested nodes have priority)",
        ),
        pytest.param(
            pod(),
            n12("4000", "10000", "6000", "10000"),
            [on("node1", cm("3000", "5000")), on("node2", cm("3000", "5000"))],
            {"node1": 38, "node2": 50},
            id="upstream: no resources requested, pods scheduled with resources (default - "
            "least requested nodes have priority)",
        ),
    ],
)
def test_requested_to_capacity_ratio(
    incoming: PodBuilder, nodes: list[NodeBuilder], existing: list[PodBuilder], want: dict[str, int]
) -> None:
    check(args("RequestedToCapacityRatio", DEFAULT, DOWN), incoming, nodes, existing, want)


# ---- TestBrokenLinearFunction -------------------------------------------------------


@pytest.mark.parametrize(
    ("points", "assertions"),
    [
        pytest.param(
            [(10, 1), (90, 9)],
            [
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ],
            id="upstream: TestBrokenLinearFunction case_0",
        ),
        pytest.param(
            [(0, 2), (40, 10), (100, 0)],
            [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)],
            id="upstream: TestBrokenLinearFunction case_1",
        ),
        pytest.param(
            [(0, 2), (40, 2), (100, 2)],
            [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)],
            id="upstream: TestBrokenLinearFunction case_2",
        ),
    ],
)
def test_broken_linear_function(
    points: list[tuple[int, int]], assertions: list[tuple[int, int]]
) -> None:
    for p, expected in assertions:
        assert broken_linear(points, p) == expected, (points, p)


# ---- TestResourceBinPacking* --------------------------------------------------------

FOO = "intel.com/foo"
BAR = "intel.com/bar"


def bp_node(name: str, **ext: int) -> NodeBuilder:
    """test_util.go makeNode(name, 4000, 10000*1024*1024, ext)."""
    n = make_node(name).capacity(cpu="4", memory=str(10000 * 1024 * 1024), pods=110)
    for k, v in ext.items():
        n.ext(f"intel.com/{k}", v)
    return n


UP_TO_1 = [(0, 0), (100, 1)]


@pytest.mark.parametrize(
    ("incoming", "existing", "want"),
    [
        pytest.param(
            pod(),
            [],
            {"node1": 0, "node2": 0},
            id="upstream: nothing scheduled, nothing requested",
        ),
        pytest.param(
            pod({FOO: "2"}),
            [],
            {"node1": 2, "node2": 5},
            id="upstream: resources requested, pods scheduled with less resources",
        ),
        pytest.param(
            pod({FOO: "2"}),
            [on("node2", {FOO: "2"})],
            {"node1": 2, "node2": 10},
            id="upstream: resources requested, pods scheduled with resources, on node with "
            "existing pod running ",
        ),
        pytest.param(
            pod({FOO: "4"}),
            [],
            {"node1": 5, "node2": 10},
            id="upstream: resources requested, pods scheduled with more resources",
        ),
    ],
)
def test_resource_bin_packing_single_extended(
    incoming: PodBuilder, existing: list[PodBuilder], want: dict[str, int]
) -> None:
    """The unscheduled empty pod of some upstream cases (no node) charges nothing."""
    nodes = [bp_node("node1", foo=8), bp_node("node2", foo=4)]
    a = args("RequestedToCapacityRatio", [{"name": FOO, "weight": 1}], UP_TO_1)
    check(a, incoming, nodes, existing, want)


@pytest.mark.parametrize(
    ("incoming", "existing", "want"),
    [
        pytest.param(
            pod(),
            [],
            {"node1": 0, "node2": 0},
            id="upstream: nothing scheduled, nothing requested",
        ),
        pytest.param(
            pod({FOO: "2", BAR: "2"}),
            [],
            {"node1": 4, "node2": 3},
            id="upstream: resources requested, pods scheduled with less resources",
        ),
        pytest.param(
            pod({FOO: "2", BAR: "2"}),
            [on("node2", {FOO: "4", BAR: "2"})],
            {"node1": 4, "node2": 7},
            id="upstream: resources requested, pods scheduled with resources, on node with "
            "existing pod running ",
        ),
        pytest.param(
            pod({FOO: "4", BAR: "2"}),
            [],
            {"node1": 5, "node2": 5},
            id="upstream: resources requested, pods scheduled with more resources",
        ),
    ],
)
def test_resource_bin_packing_multiple_extended(
    incoming: PodBuilder, existing: list[PodBuilder], want: dict[str, int]
) -> None:
    nodes = [bp_node("node1", foo=8, bar=4), bp_node("node2", foo=4, bar=8)]
    a = args(
        "RequestedToCapacityRatio",
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        UP_TO_1,
    )
    check(a, incoming, nodes, existing, want)
