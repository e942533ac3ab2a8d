"""NodeResourcesFit: Filter, the three scoring strategies, isolated CPUs, queueing
hints and argument validation.

Cases are ported from kube-scheduler's noderesources fit_test.go,
least_allocated_test.go, most_allocated_test.go and
requested_to_capacity_ratio_test.go with their expected values. Those tests
give nodes `cpu: "4000"` (cores) and memory in bytes; the same numbers are used
here. Their pods with no containers at all cannot be written (a Pod needs one),
so the cases that rely on them are left out; every pod here has at least one
container, which counts as 100m / 200Mi when scoring if it requests nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter, run_score
from troupe.api.parse import parse_node
from troupe.api.types import InvalidObject, IsolatedCPU, Pod
from troupe.core.snapshot import NodeTable, pod_charge
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    EventResource,
    QueueingHint,
)
from troupe.framework.handle import Handle
from troupe.framework.interface import PluginArgsError
from troupe.framework.status import Code
from troupe.plugins.node_resources_fit import (
    NodeResourcesFit,
    ShapePoint,
)

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
HUGE_A = "hugepages-2Mi"
ISO = "troupe.dev/isolated-cpu"


def fit(args: dict[str, Any] | None = None) -> NodeResourcesFit:
    return NodeResourcesFit.new(args or {}, make_handle())


def built_table(nodes: list[NodeBuilder], existing: list[PodBuilder]) -> NodeTable:
    table: NodeTable = table_of([n.build() for n in nodes], [p.build() for p in existing])
    return table


# ---- Filter -------------------------------------------------------------------------


def fit_node(name: str = "n1", pods: int = 32) -> NodeBuilder:
    """fit_test.go's makeAllocatableResources(10, 20, 32, 5, 20, 5): 10m cpu,
    20 bytes of memory, 32 pods, 5 example.com/aaa, 20 ephemeral-storage, 5 hugepages."""
    return (
        make_node(name)
        .capacity(cpu="10m", memory="20", pods=pods, ephemeral_storage="20")
        .ext(EXT_A, 5)
        .ext(HUGE_A, 5)
    )


def on_n1(cpu: str, memory: str, name: str = "e") -> PodBuilder:
    return make_pod(name).req(cpu=cpu, memory=memory).node("n1")


def init_ext(pod: PodBuilder, name: str, *amounts: int) -> PodBuilder:
    """Init containers requesting `amounts` of extended resource `name`."""
    return pod.spec(
        initContainers=[
            {"name": f"i{i}", "image": "x", "resources": {"requests": {name: str(a)}}}
            for i, a in enumerate(amounts)
        ]
    )


@pytest.mark.parametrize(
    ("pod", "nodes", "existing_pods", "want"),
    [
        pytest.param(
            make_pod("p"),
            [fit_node()],
            [on_n1("10m", "20")],
            {},
            id="no resources requested always fits",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1"),
            [fit_node()],
            [on_n1("10m", "20")],
            {"n1": ("Insufficient cpu", "Insufficient memory")},
            id="too many resources fails",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1").init_container(cpu="3m", memory="1"),
            [fit_node()],
            [on_n1("8m", "19")],
            {"n1": ("Insufficient cpu",)},
            id="too many resources fails due to init container cpu",
        ),
        pytest.param(
            make_pod("p")
            .req(cpu="1m", memory="1")
            .init_container(cpu="3m", memory="1")
            .init_container(cpu="2m", memory="1"),
            [fit_node()],
            [on_n1("8m", "19")],
            {"n1": ("Insufficient cpu",)},
            id="too many resources fails due to highest init container cpu",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1").init_container(cpu="1m", memory="3"),
            [fit_node()],
            [on_n1("9m", "19")],
            {"n1": ("Insufficient memory",)},
            id="too many resources fails due to init container memory",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1").init_container(cpu="1m", memory="1"),
            [fit_node()],
            [on_n1("9m", "19")],
            {},
            id="init container fits because it's the max, not sum, of containers and init",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1"),
            [fit_node()],
            [on_n1("5m", "5")],
            {},
            id="both resources fit",
        ),
        pytest.param(
            make_pod("p").req(cpu="2m", memory="1"),
            [fit_node()],
            [on_n1("9m", "5")],
            {"n1": ("Insufficient cpu",)},
            id="one resource memory fits",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="2"),
            [fit_node()],
            [on_n1("5m", "19")],
            {"n1": ("Insufficient memory",)},
            id="one resource cpu fits",
        ),
        pytest.param(
            make_pod("p").req(cpu="5m", memory="1"),
            [fit_node()],
            [on_n1("5m", "19")],
            {},
            id="equal edge case",
        ),
        pytest.param(
            make_pod("p").ext(EXT_A, 1),
            [fit_node()],
            [on_n1("0", "0")],
            {},
            id="extended resource fits",
        ),
        pytest.param(
            make_pod("p").ext(EXT_A, 10),
            [fit_node()],
            [on_n1("0", "0")],
            {"n1": (f"Insufficient {EXT_A}",)},
            id="extended resource capacity enforced",
        ),
        pytest.param(
            make_pod("p").ext(EXT_A, 1),
            [fit_node()],
            [make_pod("e").ext(EXT_A, 5).node("n1")],
            {"n1": (f"Insufficient {EXT_A}",)},
            id="extended resource allocatable enforced",
        ),
        pytest.param(
            init_ext(make_pod("p"), EXT_A, 10),
            [fit_node()],
            [on_n1("0", "0")],
            {"n1": (f"Insufficient {EXT_A}",)},
            id="extended resource capacity enforced for init container",
        ),
        pytest.param(
            init_ext(make_pod("p"), EXT_A, 3, 2),
            [fit_node()],
            [make_pod("e").ext(EXT_A, 2).node("n1")],
            {},
            id="extended resource allocatable admits multiple init containers",
        ),
        pytest.param(
            init_ext(make_pod("p"), EXT_A, 6, 3),
            [fit_node()],
            [make_pod("e").ext(EXT_A, 2).node("n1")],
            {"n1": (f"Insufficient {EXT_A}",)},
            id="extended resource allocatable enforced for multiple init containers",
        ),
        pytest.param(
            make_pod("p").ext(EXT_B, 1),
            [fit_node()],
            [on_n1("0", "0")],
            {"n1": (f"Insufficient {EXT_B}",)},
            id="extended resource allocatable enforced for unknown resource",
        ),
        pytest.param(
            make_pod("p").ext("kubernetes.io/something", 1),
            [fit_node()],
            [on_n1("0", "0")],
            {"n1": ("Insufficient kubernetes.io/something",)},
            id="kubernetes.io resource capacity enforced",
        ),
        pytest.param(
            make_pod("p").ext(HUGE_A, 10),
            [fit_node()],
            [on_n1("0", "0")],
            {"n1": (f"Insufficient {HUGE_A}",)},
            id="hugepages resource capacity enforced",
        ),
        pytest.param(
            make_pod("p").ext(HUGE_A, 3).container("busybox", **{HUGE_A: 3}),
            [fit_node()],
            [make_pod("e").ext(HUGE_A, 2).node("n1")],
            {"n1": (f"Insufficient {HUGE_A}",)},
            id="hugepages resource allocatable enforced for multiple containers",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1").overhead(cpu="3m", memory="13"),
            [fit_node()],
            [on_n1("5m", "5")],
            {},
            id="resources + pod overhead fits",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1").overhead(cpu="1m", memory="15"),
            [fit_node()],
            [on_n1("5m", "5")],
            {"n1": ("Insufficient memory",)},
            id="requests + overhead does not fit for memory",
        ),
        pytest.param(
            make_pod("p").ext(EXT_A, 0),
            [fit_node()],
            [on_n1("0", "0")],
            {},
            id="skip checking resource request with quantity zero",
        ),
        pytest.param(
            make_pod("p").req(ephemeral_storage="25"),
            [fit_node()],
            [on_n1("2m", "2")],
            {"n1": ("Insufficient ephemeral-storage",)},
            id="storage ephemeral local storage request exceeds allocatable",
        ),
        pytest.param(
            make_pod("p").req(ephemeral_storage="10"),
            [fit_node()],
            [on_n1("2m", "2")],
            {},
            id="ephemeral local storage is sufficient",
        ),
        # enoughPodsTests: the pod count is checked even for a pod requesting nothing.
        pytest.param(
            make_pod("p"),
            [fit_node(pods=1)],
            [on_n1("10m", "20")],
            {"n1": ("Too many pods",)},
            id="even without specified resources, fails when there's no space for another pod",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1"),
            [fit_node(pods=1)],
            [on_n1("5m", "5")],
            {"n1": ("Too many pods",)},
            id="even if both resources fit, fails when there's no space for another pod",
        ),
        pytest.param(
            make_pod("p").req(cpu="5m", memory="1"),
            [fit_node(pods=1)],
            [on_n1("5m", "19")],
            {"n1": ("Too many pods",)},
            id="even for equal edge case, fails when there's no space for another pod",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1").init_container(cpu="5m", memory="1"),
            [fit_node(pods=1)],
            [on_n1("5m", "19")],
            {"n1": ("Too many pods",)},
            id="even for equal edge case with init container, fails with no space for another pod",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1"),
            [fit_node(pods=1)],
            [on_n1("10m", "20")],
            {"n1": ("Too many pods", "Insufficient cpu", "Insufficient memory")},
            id="every insufficient resource is reported, pods first",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m").ext(EXT_B, 1).ext(EXT_A, 9),
            [fit_node(), fit_node("n2").ext(EXT_B, 1).ext(EXT_A, 9)],
            [on_n1("10m", "0")],
            {"n1": ("Insufficient cpu", f"Insufficient {EXT_A}", f"Insufficient {EXT_B}")},
            id="per node: only the nodes that lack something, extended reasons by name",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1"),
            [fit_node()],
            [make_pod("done").req(cpu="10m", memory="20").node("n1").phase("Succeeded")],
            {},
            id="finished pods free their resources",
        ),
    ],
)
def test_filter(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    existing_pods: list[PodBuilder],
    want: dict[str, tuple[str, ...]],
) -> None:
    built = [p.build() for p in existing_pods]
    table = table_of([n.build() for n in nodes], [p for p in built if not p.terminal])
    plugin = fit()
    assert run_filter(plugin, pod.build(), table) == want
    assert run_filter(plugin, pod.build(), table, per_node=True) == want


@pytest.mark.parametrize(
    ("args", "pod", "want"),
    [
        pytest.param(
            {"ignoredResources": [EXT_B]},
            make_pod("p").ext(EXT_B, 2),
            {},
            id="skip checking ignored extended resource",
        ),
        pytest.param(
            {"ignoredResourceGroups": ["example.com"]},
            make_pod("p").ext(EXT_B, 2).ext(EXT_A, 9),
            {},
            id="skip checking ignored extended resource via resource groups",
        ),
        pytest.param(
            {"ignoredResources": [EXT_B]},
            make_pod("p").ext(EXT_B, 2).ext(EXT_A, 9),
            {"n1": (f"Insufficient {EXT_A}",)},
            id="only the ignored resource is skipped",
        ),
        pytest.param(
            {"ignoredResourceGroups": ["hugepages-2Mi"]},
            make_pod("p").ext(HUGE_A, 9),
            {"n1": (f"Insufficient {HUGE_A}",)},
            id="hugepages are not extended resources and are never ignored",
        ),
        pytest.param(
            {"ignoredResources": [ISO], "ignoredResourceGroups": ["troupe.dev"]},
            make_pod("p").req(cpu="1").isolated(),
            {"n1": (f"Insufficient {ISO}",)},
            id="the isolated-cpu resource is cpu and is never ignored",
        ),
    ],
)
def test_ignored_resources(
    args: dict[str, Any], pod: PodBuilder, want: dict[str, tuple[str, ...]]
) -> None:
    table = built_table([fit_node()], [])
    plugin = fit(args)
    assert run_filter(plugin, pod.build(), table) == want
    assert run_filter(plugin, pod.build(), table, per_node=True) == want


def test_filter_reports_rows_in_given_order() -> None:
    nodes = [fit_node(f"n{i}") for i in range(6)]
    table = built_table(nodes, [make_pod("e").req(cpu="10m").node("n3")])
    plugin = fit()
    pod = make_pod("p").req(cpu="1m").build()
    state = CycleState()
    plugin.pre_filter(state, pod, table)
    rows = np.array([5, 3, 1], dtype=np.intp)  # few rows: the gather-first path
    res = plugin.filter(state, pod, table, rows)
    # cpu has two columns: short of free cpu (Unschedulable), short of allocatable
    # cpu (UnschedulableAndUnresolvable)
    assert res.reasons == ("Too many pods", "Insufficient cpu", "Insufficient cpu")
    assert res.rejected.tolist() == [
        [False, False, False],
        [False, True, False],
        [False, False, False],
    ]
    assert res.feasible.tolist() == [True, False, True]
    big = make_pod("q").req(cpu="11m").build()
    plugin.pre_filter(state, big, table)
    res = plugin.filter(state, big, table, rows)
    assert res.rejected.tolist() == [[False, False, True]] * 3
    assert res.code_of(2) is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


# ---- isolated CPUs ------------------------------------------------------------------


class TestIsolatedCPUs:
    """A 4-CPU node with 4 isolated cores (docs/design.md, "Isolated CPUs")."""

    node = make_node("iso").capacity(cpu=4, memory="8Gi", pods=10).ext(ISO, 4)

    @pytest.mark.parametrize(
        ("pod", "existing_pods", "want"),
        [
            pytest.param(
                make_pod("p").req(cpu="4").isolated(),
                [make_pod("e").req(cpu="4").node("iso")],
                {"plain": (f"Insufficient {ISO}",)},
                id="isolated pod of 4 cpus fits beside an ordinary pod of 4 cpus",
            ),
            pytest.param(
                make_pod("p").req(cpu="4"),
                [make_pod("e").req(cpu="4").isolated().node("iso")],
                {},
                id="ordinary pod of 4 cpus fits beside an isolated pod of 4 cpus",
            ),
            pytest.param(
                make_pod("p").req(cpu="1").isolated(),
                [make_pod("e").req(cpu="4").isolated().node("iso")],
                {"iso": (f"Insufficient {ISO}",), "plain": (f"Insufficient {ISO}",)},
                id="a fifth isolated core is refused",
            ),
            pytest.param(
                make_pod("p").req(cpu="1"),
                [
                    make_pod("e").req(cpu="4").isolated().node("iso"),
                    make_pod("f").req(cpu="4").node("iso"),
                ],
                {"iso": ("Insufficient cpu",)},  # the plain node takes it
                id="a fifth ordinary core is refused",
            ),
            pytest.param(
                make_pod("p").req(cpu="1").isolated(),
                [],
                {"plain": (f"Insufficient {ISO}",)},
                id="a node without isolated cores cannot take an isolated pod",
            ),
        ],
    )
    def test_filter(
        self,
        pod: PodBuilder,
        existing_pods: list[PodBuilder],
        want: dict[str, tuple[str, ...]],
    ) -> None:
        nodes = [self.node, make_node("plain").capacity(cpu=8, memory="8Gi", pods=10)]
        table = built_table(nodes, existing_pods)
        assert run_filter(fit(), pod.build(), table) == want
        assert run_filter(fit(), pod.build(), table, per_node=True) == want

    def test_custom_names(self) -> None:
        milli = frozenset({"cpu", "rt.io/cores"})
        iso = IsolatedCPU("rt.io/isolated", "rt.io/cores")
        node = parse_node(
            make_node("rt").capacity(cpu=1, memory="1Gi", pods=10).ext("rt.io/cores", 2).obj(),
            milli,
        )
        assert not isinstance(node, InvalidObject)
        table = NodeTable()
        table.set_node(table.allocate_row("rt"), node)
        plugin = fit(
            {"isolatedCPUAnnotation": "rt.io/isolated", "isolatedCPUResource": "rt.io/cores"}
        )
        assert plugin.isolated == iso
        pod = make_pod("p").req(cpu="2").annotate("rt.io/isolated", "true").build()
        assert run_filter(plugin, pod, table) == {}
        table.charge(0, pod, pod_charge(pod, iso), +1)
        again = make_pod("q").req(cpu="1").annotate("rt.io/isolated", "true").build()
        assert run_filter(plugin, again, table) == {"rt": ("Insufficient rt.io/cores",)}
        # the default annotation means nothing to this plugin: an ordinary pod
        assert run_filter(plugin, make_pod("o").req(cpu="2").isolated().build(), table) == {
            "rt": ("Insufficient cpu",)
        }

    @pytest.mark.parametrize(
        ("pod", "existing_pods", "want"),
        [
            pytest.param(
                # cpu on the isolated column: 2 of 4 -> 50; memory: 2Gi + the other
                # pod's default 200Mi of 8Gi -> (8192 - 2048 - 200) * 100 / 8192 = 72
                make_pod("p").req(cpu="2", memory="2Gi").isolated(),
                [make_pod("e").req(cpu="4").node("iso")],
                (50 + 72) // 2,
                id="isolated pod scores its cpu on the isolated cores",
            ),
            pytest.param(
                # cpu: the isolated pod uses no ordinary cpu; 2 of 4 -> 50;
                # memory: 2Gi + the isolated pod's default 200Mi -> 72
                make_pod("p").req(cpu="2", memory="2Gi"),
                [make_pod("e").req(cpu="4").isolated().node("iso")],
                (50 + 72) // 2,
                id="ordinary pod does not see isolated pods' cpu",
            ),
            pytest.param(
                # isolated 4 + 2 of 4 -> over capacity -> 0
                make_pod("p").req(cpu="2", memory="2Gi").isolated(),
                [make_pod("e").req(cpu="4").isolated().node("iso")],
                (0 + 72) // 2,
                id="isolated cores full",
            ),
        ],
    )
    def test_score(self, pod: PodBuilder, existing_pods: list[PodBuilder], want: int) -> None:
        table = built_table([self.node], existing_pods)
        assert run_score(fit(), pod.build(), table) == {"iso": want}
        assert run_score(fit(), pod.build(), table, per_node=True) == {"iso": want}


# ---- Score --------------------------------------------------------------------------

EXT_RES = "abc.com/xyz"
DEFAULT = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
WITH_EXT = [*DEFAULT, {"name": EXT_RES, "weight": 1}]
REQ_3000_5000 = make_pod("p").req(cpu="1000", memory="2000").container(cpu="2000", memory="3000")


def node(name: str, cpu: str, memory: str, **ext: int) -> NodeBuilder:
    n = make_node(name).capacity(cpu=cpu, memory=memory, pods=110)
    for k, v in ext.items():
        n.ext(k.replace("__", "/").replace("_", "."), v)
    return n


def on(node_name: str, name: str, **requests: str) -> PodBuilder:
    return make_pod(name).req(**requests).node(node_name)


@pytest.mark.parametrize(
    ("pod", "nodes", "existing_pods", "resources", "want"),
    [
        pytest.param(
            # cpu (4000-3000)*100/4000 = 25, memory (10000-5000)*100/10000 = 50 -> 37
            # cpu (6000-3000)*100/6000 = 50, memory 50 -> 50
            REQ_3000_5000,
            [node("node1", "4000", "10000"), node("node2", "6000", "10000")],
            [],
            DEFAULT,
            {"node1": 37, "node2": 50},
            id="nothing scheduled, resources requested, differently sized nodes",
        ),
        pytest.param(
            # cpu (10000-6000)*100/10000 = 40, memory (20000-5000)*100/20000 = 75 -> 57
            # cpu 40, memory (20000-10000)*100/20000 = 50 -> 45
            REQ_3000_5000,
            [node("node1", "10000", "20000"), node("node2", "10000", "20000")],
            [on("node1", "a", cpu="3000", memory="0"), on("node2", "b", cpu="3000", memory="5000")],
            DEFAULT,
            {"node1": 57, "node2": 45},
            id="resources requested, pods scheduled with resources",
        ),
        pytest.param(
            # node2 memory (50000-10000)*100/50000 = 80 -> (40 + 80) / 2 = 60
            REQ_3000_5000,
            [node("node1", "10000", "20000"), node("node2", "10000", "50000")],
            [on("node1", "a", cpu="3000", memory="0"), on("node2", "b", cpu="3000", memory="5000")],
            DEFAULT,
            {"node1": 57, "node2": 60},
            id="resources requested, pods scheduled with resources, differently sized nodes",
        ),
        pytest.param(
            # cpu 6000 of 4000 -> 0, memory 100 -> 50; memory 50 -> 25
            make_pod("p").req(cpu="3000", memory="0"),
            [node("node1", "4000", "10000"), node("node2", "4000", "10000")],
            [on("node1", "a", cpu="3000", memory="0"), on("node2", "b", cpu="3000", memory="5000")],
            DEFAULT,
            {"node1": 50, "node2": 25},
            id="requested resources exceed node capacity",
        ),
        pytest.param(
            # (25 * 1 + 50 * 2) / 3 = 41; (50 + 100) / 3 = 50
            REQ_3000_5000,
            [node("node1", "4000", "10000"), node("node2", "6000", "10000")],
            [],
            [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
            {"node1": 41, "node2": 50},
            id="resources requested with different weight on CPU and memory",
        ),
        pytest.param(
            REQ_3000_5000,
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", abc_com__xyz=4)],
            [],
            WITH_EXT,
            {"node1": 50, "node2": 50},
            id="bypass extended resource if the pod does not request",
        ),
        pytest.param(
            # extended: (4-2)*100/4 = 50 and (10-2)*100/10 = 80 -> (50+50+50)/3, (50+50+80)/3
            make_pod("p").req(cpu="3000", memory="5000").ext(EXT_RES, 2),
            [
                node("node1", "6000", "10000", abc_com__xyz=4),
                node("node2", "6000", "10000", abc_com__xyz=10),
            ],
            [],
            WITH_EXT,
            {"node1": 50, "node2": 60},
            id="honor extended resource if the pod requests",
        ),
        pytest.param(
            # the pod does not request the extended resource: (50 + 60) / 2 on both
            make_pod("p").req(cpu="3000", memory="4000"),
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", abc_com__xyz=4)],
            [],
            [{"name": EXT_RES, "weight": 2}, *DEFAULT],
            {"node1": 55, "node2": 55},
            id="if the node doesn't have a resource",
        ),
        pytest.param(
            # a node without the requested resource leaves it out of its average:
            # node1 (50 + 50) / 2; node2 (50 + 50 + 2 * 50) / 4
            make_pod("p").req(cpu="3000", memory="5000").ext(EXT_RES, 2),
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", abc_com__xyz=4)],
            [],
            [{"name": EXT_RES, "weight": 2}, *DEFAULT],
            {"node1": 50, "node2": 50},
            id="a resource a node lacks is skipped in both sums",
        ),
        pytest.param(
            # 1 container, no requests: 100m / 200Mi. node1 has two such pods:
            # cpu (1000-300)*100/1000 = 70, memory (2000-600)*100/2000 = 70
            # node2: 90, 90
            make_pod("p"),
            [node("node1", "1", "2000Mi"), node("node2", "1", "2000Mi")],
            [make_pod("a").node("node1"), make_pod("b").node("node1")],
            DEFAULT,
            {"node1": 70, "node2": 90},
            id="no resources requested: the non-zero defaults are scored",
        ),
    ],
)
def test_least_allocated(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    existing_pods: list[PodBuilder],
    resources: list[dict[str, Any]],
    want: dict[str, int],
) -> None:
    plugin = fit({"scoringStrategy": {"type": "LeastAllocated", "resources": resources}})
    table = built_table(nodes, existing_pods)
    assert run_score(plugin, pod.build(), table) == want
    assert run_score(plugin, pod.build(), table, per_node=True) == want


@pytest.mark.parametrize(
    ("pod", "nodes", "existing_pods", "resources", "want"),
    [
        pytest.param(
            # cpu 3000*100/4000 = 75, memory 50 -> 62; node2 50, 50 -> 50
            REQ_3000_5000,
            [node("node1", "4000", "10000"), node("node2", "6000", "10000")],
            [],
            DEFAULT,
            {"node1": 62, "node2": 50},
            id="nothing scheduled, resources requested, differently sized nodes",
        ),
        pytest.param(
            # cpu 60, memory 5000*100/20000 = 25 -> 42; cpu 60, memory 50 -> 55
            REQ_3000_5000,
            [node("node1", "10000", "20000"), node("node2", "10000", "20000")],
            [on("node1", "a", cpu="3000", memory="0"), on("node2", "b", cpu="3000", memory="5000")],
            DEFAULT,
            {"node1": 42, "node2": 55},
            id="resources requested, pods scheduled with resources",
        ),
        pytest.param(
            # cpu 5000/5000 -> 100, memory 9000/10000 -> 90 -> 95; 50 and 100 -> 75
            make_pod("p").req(cpu="2000", memory="4000").container(cpu="3000", memory="5000"),
            [node("node1", "5000", "10000"), node("node2", "10000", "9000")],
            [],
            DEFAULT,
            {"node1": 95, "node2": 75},
            id="resources requested equal node capacity",
        ),
        pytest.param(
            # (75 * 1 + 50 * 2) / 3 = 58; 50
            REQ_3000_5000,
            [node("node1", "4000", "10000"), node("node2", "6000", "10000")],
            [],
            [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
            {"node1": 58, "node2": 50},
            id="resources requested with different weight on CPU and memory",
        ),
        pytest.param(
            # cpu 300m of 250m -> capped, 100; memory 600Mi of 1000Mi -> 60 -> 80
            # node2: cpu 100/250 -> 40, memory 200/1000 -> 20 -> 30
            make_pod("p"),
            [node("node1", "250m", "1000Mi"), node("node2", "250m", "1000Mi")],
            [make_pod("a").node("node1"), make_pod("b").node("node1")],
            DEFAULT,
            {"node1": 80, "node2": 30},
            id="no resources requested, pods scheduled, nonzero request for resource",
        ),
        pytest.param(
            REQ_3000_5000,
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", abc_com__xyz=4)],
            [],
            WITH_EXT,
            {"node1": 50, "node2": 50},
            id="bypass extended resource if the pod does not request",
        ),
        pytest.param(
            # extended 2/4 -> 50, 2/10 -> 20: (50+50+50)/3, (50+50+20)/3
            make_pod("p").req(cpu="3000", memory="5000").ext(EXT_RES, 2),
            [
                node("node1", "6000", "10000", abc_com__xyz=4),
                node("node2", "6000", "10000", abc_com__xyz=10),
            ],
            [],
            WITH_EXT,
            {"node1": 50, "node2": 40},
            id="honor extended resource if the pod request",
        ),
        pytest.param(
            make_pod("p").req(cpu="3000", memory="4000"),
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", abc_com__xyz=4)],
            [],
            [{"name": EXT_RES, "weight": 2}, *DEFAULT],
            {"node1": 45, "node2": 45},
            id="if the node doesn't have a resource",
        ),
    ],
)
def test_most_allocated(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    existing_pods: list[PodBuilder],
    resources: list[dict[str, Any]],
    want: dict[str, int],
) -> None:
    plugin = fit({"scoringStrategy": {"type": "MostAllocated", "resources": resources}})
    table = built_table(nodes, existing_pods)
    assert run_score(plugin, pod.build(), table) == want
    assert run_score(plugin, pod.build(), table, per_node=True) == want


LEAST_SHAPE = [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
BIN_PACKING = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 1}]
FOO, BAR = "intel.com/foo", "intel.com/bar"


def ext_node(name: str, **ext: int) -> NodeBuilder:
    n = make_node(name).capacity(cpu="4000m", memory=f"{10000 * 1024 * 1024}", pods=110)
    for k, v in ext.items():
        n.ext(f"intel.com/{k}", v)
    return n


@pytest.mark.parametrize(
    ("pod", "nodes", "existing_pods", "resources", "shape", "want"),
    [
        pytest.param(
            # utilization 75 and 50 -> shape scores 25 and 50 -> round(37.5) = 38; 50
            REQ_3000_5000,
            [node("node1", "4000", "10000"), node("node2", "6000", "10000")],
            [],
            DEFAULT,
            LEAST_SHAPE,
            {"node1": 38, "node2": 50},
            id="nothing scheduled, resources requested, differently sized nodes (least shape)",
        ),
        pytest.param(
            make_pod("p").req(cpu="1m", memory="1"),
            [node("node1", "4000", "10000"), node("node2", "6000", "10000")],
            [
                on("node1", "a", cpu="3000", memory="5000"),
                on("node2", "b", cpu="3000", memory="5000"),
            ],
            DEFAULT,
            LEAST_SHAPE,
            {"node1": 38, "node2": 50},
            id="no resources requested, pods scheduled with resources",
        ),
        pytest.param(
            # 2 of 8 -> utilization 25 -> 10 * 25 / 100 = 2 (truncated); 2 of 4 -> 5
            make_pod("p").ext(FOO, 2),
            [ext_node("node1", foo=8), ext_node("node2", foo=4)],
            [],
            [{"name": FOO, "weight": 1}],
            BIN_PACKING,
            {"node1": 2, "node2": 5},
            id="single extended: resources requested, pods scheduled with less resources",
        ),
        pytest.param(
            make_pod("p").ext(FOO, 2),
            [ext_node("node1", foo=8), ext_node("node2", foo=4)],
            [make_pod("e").ext(FOO, 2).node("node2")],
            [{"name": FOO, "weight": 1}],
            BIN_PACKING,
            {"node1": 2, "node2": 10},
            id="single extended: on node with existing pod running",
        ),
        pytest.param(
            make_pod("p").ext(FOO, 4),
            [ext_node("node1", foo=8), ext_node("node2", foo=4)],
            [],
            [{"name": FOO, "weight": 1}],
            BIN_PACKING,
            {"node1": 5, "node2": 10},
            id="single extended: resources requested, pods scheduled with more resources",
        ),
        pytest.param(
            make_pod("p"),
            [ext_node("node1", foo=8), ext_node("node2", foo=4)],
            [],
            [{"name": FOO, "weight": 1}],
            BIN_PACKING,
            {"node1": 0, "node2": 0},
            id="single extended: nothing requested",
        ),
        pytest.param(
            # node1: foo 2/8 -> 2 (w3), bar 2/4 -> 5 (w5): round(31 / 8) = 4
            # node2: foo 2/4 -> 5, bar 2/8 -> 2: round(25 / 8) = 3
            make_pod("p").ext(FOO, 2).ext(BAR, 2),
            [ext_node("node1", foo=8, bar=4), ext_node("node2", foo=4, bar=8)],
            [],
            [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
            BIN_PACKING,
            {"node1": 4, "node2": 3},
            id="multiple extended: resources requested, pods scheduled with less resources",
        ),
        pytest.param(
            # node1: foo 2/8 -> 2, bar (2+2)/4 -> 10: round((6 + 50) / 8) = 7
            # node2: foo (2+2)/4 -> 10, bar 2/8 -> 2: round((30 + 10) / 8) = 5
            make_pod("p").ext(FOO, 2).ext(BAR, 2),
            [ext_node("node1", foo=8, bar=4), ext_node("node2", foo=4, bar=8)],
            [
                make_pod("a").ext(FOO, 0).ext(BAR, 2).node("node1"),
                make_pod("b").ext(FOO, 2).ext(BAR, 0).node("node2"),
            ],
            [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
            BIN_PACKING,
            {"node1": 7, "node2": 5},
            id="multiple extended: on node with existing pod running",
        ),
        pytest.param(
            # a resource scoring 0 counts in neither sum: node1 foo 0/8 is impossible
            # (requested), so use a rising shape from 50: foo 1/8 -> 12 -> 0 (left out),
            # bar 3/4 -> 75 -> 5 * (75 - 50) / 50 * 10 = 50 -> 50
            make_pod("p").ext(FOO, 1).ext(BAR, 3),
            [ext_node("node1", foo=8, bar=4)],
            [],
            [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
            [{"utilization": 50, "score": 0}, {"utilization": 100, "score": 10}],
            {"node1": 50},
            id="zero resource scores are left out of both sums",
        ),
        pytest.param(
            # decreasing segment: Go's division truncates toward zero. Shape (0,10),
            # (60,0): utilization 1 -> 100 + (-100 * 1) / 60 = 100 - 1 = 99 (not 98)
            make_pod("p").ext(FOO, 1),
            [ext_node("node1", foo=100)],
            [],
            [{"name": FOO, "weight": 1}],
            [{"utilization": 0, "score": 10}, {"utilization": 60, "score": 0}],
            {"node1": 99},
            id="negative slopes truncate toward zero",
        ),
    ],
)
def test_requested_to_capacity_ratio(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    existing_pods: list[PodBuilder],
    resources: list[dict[str, Any]],
    shape: list[dict[str, int]],
    want: dict[str, int],
) -> None:
    plugin = fit(
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": resources,
                "requestedToCapacityRatio": {"shape": shape},
            }
        }
    )
    table = built_table(nodes, existing_pods)
    assert run_score(plugin, pod.build(), table) == want
    assert run_score(plugin, pod.build(), table, per_node=True) == want


def test_shape_scores_scale_to_node_scores() -> None:
    plugin = fit(
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 3}]},
            }
        }
    )
    assert plugin.args.shape == (ShapePoint(0, 3),)
    table = built_table([node("n", "4", "4Gi")], [])
    assert run_score(plugin, make_pod("p").req(cpu="1").build(), table) == {"n": 30}


# ---- columnar == per-node on random tables --------------------------------------------

SHAPES = [
    [
        {"utilization": 0, "score": 2},
        {"utilization": 60, "score": 9},
        {"utilization": 100, "score": 4},
    ],
    [{"utilization": 0, "score": 10}, {"utilization": 70, "score": 1}],
    [{"utilization": 30, "score": 0}, {"utilization": 90, "score": 7}],
]


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(
            st.integers(0, 8000),  # cpu milli
            st.integers(0, 8),  # memory Gi
            st.integers(0, 4),  # pods
            st.integers(0, 3),  # isolated cores
            st.integers(0, 2),  # gpus
        ),
        min_size=1,
        max_size=12,
    ),
    used=st.lists(
        st.tuples(
            st.integers(0, 11),
            st.integers(0, 3000),
            st.integers(0, 3),
            st.booleans(),
            st.integers(0, 1),
        ),
        max_size=12,
    ),
    req=st.tuples(
        st.integers(0, 5000), st.integers(0, 6), st.booleans(), st.integers(0, 2), st.integers(0, 3)
    ),
    strategy=st.sampled_from(["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]),
    shape=st.sampled_from(SHAPES),
    weights=st.tuples(st.integers(1, 100), st.integers(1, 100), st.integers(1, 100)),
    subset=st.lists(st.integers(0, 11), max_size=12),
)
def test_columnar_equals_per_node(
    nodes: list[Any],
    used: list[Any],
    req: Any,
    strategy: str,
    shape: list[dict[str, int]],
    weights: tuple[int, int, int],
    subset: list[int],
) -> None:
    built = []
    for i, (cpu, mem, pods, iso, gpu) in enumerate(nodes):
        n = make_node(f"n{i}").capacity(cpu=f"{cpu}m", memory=f"{mem}Gi", pods=pods)
        if iso:
            n.ext(ISO, iso)
        if gpu:
            n.ext("nvidia.com/gpu", gpu)
        built.append(n.build())
    existing = []
    for j, (i, cpu, mem, isolated, gpu) in enumerate(used):
        p = make_pod(f"e{j}").node(f"n{i % len(nodes)}")
        if cpu:
            p.req(cpu=f"{cpu}m")
        if mem:
            p.req(memory=f"{mem}Gi")
        if gpu:
            p.ext("nvidia.com/gpu", gpu)
        if isolated:
            p.isolated()
        existing.append(p.build())
    table = table_of(built, existing)
    cpu, mem, isolated, gpu, ephemeral = req
    pb = make_pod("p")
    if cpu:
        pb.req(cpu=f"{cpu}m")
    if mem:
        pb.req(memory=f"{mem}Gi")
    if gpu:
        pb.ext("nvidia.com/gpu", gpu)
    if ephemeral:
        pb.req(ephemeral_storage=f"{ephemeral}Gi")
    if isolated:
        pb.isolated()
    pod = pb.build()
    ss: dict[str, Any] = {
        "type": strategy,
        "resources": [
            {"name": "cpu", "weight": weights[0]},
            {"name": "memory", "weight": weights[1]},
            {"name": "nvidia.com/gpu", "weight": weights[2]},
        ],
    }
    if strategy == "RequestedToCapacityRatio":
        ss["requestedToCapacityRatio"] = {"shape": shape}
    plugin = fit({"scoringStrategy": ss})
    assert run_filter(plugin, pod, table) == run_filter(plugin, pod, table, per_node=True)
    scores = run_score(plugin, pod, table)
    assert scores == run_score(plugin, pod, table, per_node=True)
    assert scores is not None and all(0 <= s <= 100 for s in scores.values())

    # Any subset of rows, in any order (few rows take the gather-first path).
    rows = np.array([i % len(nodes) for i in subset], dtype=np.intp)
    state = CycleState()
    plugin.pre_filter(state, pod, table)
    res = plugin.filter(state, pod, table, rows)
    for i, r in enumerate(rows.tolist()):
        per_node = plugin.filter_node(state, pod, table, r)
        got = tuple(res.reasons[j] for j in range(len(res.reasons)) if res.rejected[i, j])
        assert got == per_node.reasons
    plugin.pre_score(state, pod, table, rows)
    assert plugin.score(state, pod, table, rows).tolist() == [
        plugin.score_node(state, pod, table, r) for r in rows.tolist()
    ]


# ---- queueing hints -------------------------------------------------------------------


def hint(
    plugin: NodeResourcesFit, event: ClusterEvent, pod: Pod, old: Any, new: Any
) -> QueueingHint:
    hits = [r for r in plugin.events_to_register() if r.event.matches(event)]
    if not hits:
        return QueueingHint.SKIP
    answers = [r.hint(pod, old, new) if r.hint else QueueingHint.QUEUE for r in hits]
    return QueueingHint.QUEUE if QueueingHint.QUEUE in answers else QueueingHint.SKIP


POD_DELETED = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
POD_SCALED_DOWN = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN)
UNSCHEDULED_DELETED = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.DELETE)
NODE_ADDED = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_RESIZED = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_ALLOCATABLE)
NODE_LABELED = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)

WAITING = make_pod("w").req(cpu="2", memory="1Gi")


@pytest.mark.parametrize(
    ("pod", "event", "old", "new", "want"),
    [
        pytest.param(
            WAITING,
            POD_DELETED,
            make_pod("x").req(cpu="1").node("n1"),
            None,
            QueueingHint.QUEUE,
            id="assigned pod deleted",
        ),
        pytest.param(
            WAITING,
            POD_DELETED,
            make_pod("x").req(cpu="1"),
            None,
            QueueingHint.QUEUE,
            id="assumed pod forgotten (reported as an assigned pod deleted)",
        ),
        pytest.param(
            WAITING,
            UNSCHEDULED_DELETED,
            make_pod("x").req(cpu="1"),
            None,
            QueueingHint.SKIP,
            id="unscheduled pod deleted",
        ),
        pytest.param(
            WAITING,
            POD_SCALED_DOWN,
            make_pod("x").req(cpu="2").node("n1"),
            make_pod("x").req(cpu="1").node("n1"),
            QueueingHint.QUEUE,
            id="assigned pod scaled down a resource the pod requests",
        ),
        pytest.param(
            make_pod("w").req(cpu="1"),
            POD_SCALED_DOWN,
            make_pod("x").req(cpu="1", memory="2Gi").node("n1"),
            make_pod("x").req(cpu="1", memory="1Gi").node("n1"),
            QueueingHint.SKIP,
            id="assigned pod scaled down a resource the pod does not request",
        ),
        pytest.param(
            make_pod("w").req(cpu="1").isolated(),
            POD_SCALED_DOWN,
            make_pod("x").req(cpu="2").node("n1"),
            make_pod("x").req(cpu="1").node("n1"),
            QueueingHint.SKIP,
            id="ordinary cpu freed does not help an isolated pod",
        ),
        pytest.param(
            make_pod("w").req(cpu="1").isolated(),
            POD_SCALED_DOWN,
            make_pod("x").req(cpu="2").isolated().node("n1"),
            make_pod("x").req(cpu="1").isolated().node("n1"),
            QueueingHint.QUEUE,
            id="isolated cores freed help an isolated pod",
        ),
        pytest.param(
            WAITING,
            POD_SCALED_DOWN,
            make_pod("x").req(cpu="2").node("n1"),
            make_pod("x").req(cpu="2").node("n1").phase("Succeeded"),
            QueueingHint.QUEUE,
            id="assigned pod finished",
        ),
    ],
)
def test_pod_event_hints(
    pod: PodBuilder,
    event: ClusterEvent,
    old: PodBuilder,
    new: PodBuilder | None,
    want: QueueingHint,
) -> None:
    got = hint(fit(), event, pod.build(), old.build(), new.build() if new else None)
    assert got is want


@pytest.mark.parametrize(
    ("pod", "event", "old", "new", "want"),
    [
        pytest.param(
            WAITING,
            NODE_ADDED,
            None,
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10),
            QueueingHint.QUEUE,
            id="node added that fits",
        ),
        pytest.param(
            WAITING,
            NODE_ADDED,
            None,
            make_node("n").capacity(cpu=1, memory="4Gi", pods=10),
            QueueingHint.SKIP,
            id="node added too small",
        ),
        pytest.param(
            WAITING,
            NODE_ADDED,
            None,
            make_node("n").capacity(cpu=4, memory="4Gi", pods=0),
            QueueingHint.SKIP,
            id="node added that takes no pods",
        ),
        pytest.param(
            WAITING,
            NODE_RESIZED,
            make_node("n").capacity(cpu=1, memory="4Gi", pods=10),
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10),
            QueueingHint.QUEUE,
            id="node cpu grew",
        ),
        pytest.param(
            WAITING,
            NODE_RESIZED,
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10),
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10, ephemeral_storage="1Gi"),
            QueueingHint.SKIP,
            id="node grew a resource the pod does not request",
        ),
        pytest.param(
            WAITING,
            NODE_RESIZED,
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10),
            make_node("n").capacity(cpu=4, memory="4Gi", pods=20),
            QueueingHint.QUEUE,
            id="node pod capacity grew",
        ),
        pytest.param(
            make_pod("w").req(cpu="2").isolated(),
            NODE_RESIZED,
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10).ext(ISO, 1),
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10).ext(ISO, 2),
            QueueingHint.QUEUE,
            id="isolated cores added for an isolated pod",
        ),
        pytest.param(
            make_pod("w").req(cpu="2").isolated(),
            NODE_ADDED,
            None,
            make_node("n").capacity(cpu=8, memory="4Gi", pods=10),
            QueueingHint.SKIP,
            id="a node without isolated cores does not help an isolated pod",
        ),
        pytest.param(
            WAITING,
            NODE_LABELED,
            None,
            make_node("n").capacity(cpu=4, memory="4Gi", pods=10),
            QueueingHint.SKIP,
            id="label changes are not registered",
        ),
    ],
)
def test_node_event_hints(
    pod: PodBuilder,
    event: ClusterEvent,
    old: NodeBuilder | None,
    new: NodeBuilder,
    want: QueueingHint,
) -> None:
    got = hint(fit(), event, pod.build(), old.build() if old else None, new.build())
    assert got is want


# ---- arguments -------------------------------------------------------------------------


def rtcr(shape: object) -> dict[str, Any]:
    return {
        "scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": shape},
        }
    }


@pytest.mark.parametrize(
    ("args", "field"),
    [
        pytest.param({"bogus": 1}, "bogus", id="unknown field"),
        pytest.param(
            {"ignoredResources": "gpu"}, "ignoredResources", id="ignoredResources not a list"
        ),
        pytest.param(
            {"ignoredResources": ["example.com/a", "-bad-"]},
            "ignoredResources[1]",
            id="ignoredResources invalid name",
        ),
        pytest.param(
            {"ignoredResourceGroups": ["example.com/aaa"]},
            "ignoredResourceGroups[0]",
            id="ignoredResourceGroups with a slash",
        ),
        pytest.param(
            {"scoringStrategy": "LeastAllocated"}, "scoringStrategy", id="strategy not an object"
        ),
        pytest.param(
            {"scoringStrategy": {"type": "Fancy"}}, "scoringStrategy.type", id="unsupported type"
        ),
        pytest.param(
            {"scoringStrategy": {"kind": "x"}}, "scoringStrategy.kind", id="unknown strategy field"
        ),
        pytest.param(
            {"scoringStrategy": {"resources": [{"name": "memory", "weight": -1}, {"name": "cpu"}]}},
            "scoringStrategy.resources[0].weight",
            id="resource with negative weight",
        ),
        pytest.param(
            {
                "scoringStrategy": {
                    "resources": [{"name": "memory"}, {"name": "cpu", "weight": 101}]
                }
            },
            "scoringStrategy.resources[1].weight",
            id="resource weight larger than MaxNodeScore",
        ),
        pytest.param(
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": "2"}]}},
            "scoringStrategy.resources[0].weight",
            id="weight not an integer",
        ),
        pytest.param(
            {"scoringStrategy": {"resources": [{"weight": 1}]}},
            "scoringStrategy.resources[0].name",
            id="resource without a name",
        ),
        pytest.param(
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            "scoringStrategy.requestedToCapacityRatio.shape",
            id="rtcr without shape",
        ),
        pytest.param(rtcr([]), "scoringStrategy.requestedToCapacityRatio.shape", id="empty shape"),
        pytest.param(
            rtcr([{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]),
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
            id="utilization not increasing",
        ),
        pytest.param(
            rtcr([{"utilization": 10, "score": 1}, {"utilization": 10, "score": 2}]),
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
            id="utilization repeated",
        ),
        pytest.param(
            rtcr([{"utilization": 10, "score": 1}, {"utilization": 110, "score": 2}]),
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
            id="utilization over 100",
        ),
        pytest.param(
            rtcr([{"utilization": -10, "score": 1}]),
            "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
            id="utilization under 0",
        ),
        pytest.param(
            rtcr([{"utilization": 50, "score": 11}]),
            "scoringStrategy.requestedToCapacityRatio.shape[0].score",
            id="score over 10",
        ),
        pytest.param(
            rtcr([{"utilization": 50, "score": -1}]),
            "scoringStrategy.requestedToCapacityRatio.shape[0].score",
            id="score under 0",
        ),
        pytest.param(
            {"isolatedCPUResource": ""}, "isolatedCPUResource", id="empty isolated resource"
        ),
        pytest.param(
            {"isolatedCPUResource": "cpu"},
            "isolatedCPUResource",
            id="isolated resource not extended",
        ),
        pytest.param(
            {"isolatedCPUAnnotation": 3},
            "isolatedCPUAnnotation",
            id="isolated annotation not a string",
        ),
    ],
)
def test_args_validation(args: dict[str, Any], field: str, handle: Handle) -> None:
    with pytest.raises(PluginArgsError) as e:
        NodeResourcesFit.new(args, handle)
    assert e.value.field_path == field


@pytest.mark.parametrize(
    ("args", "want_resources"),
    [
        pytest.param({}, (("cpu", 1), ("memory", 1)), id="no args"),
        pytest.param(
            {"scoringStrategy": {"resources": []}}, (("cpu", 1), ("memory", 1)), id="empty list"
        ),
        pytest.param(
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}, {"name": "memory"}]}},
            (("cpu", 1), ("memory", 1)),
            id="weight 0 or left out means 1",
        ),
        pytest.param(
            {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": [{"name": "nvidia.com/gpu", "weight": 100}],
                }
            },
            (("nvidia.com/gpu", 100),),
            id="extended resource with the largest weight",
        ),
    ],
)
def test_args_defaults(
    args: dict[str, Any], want_resources: tuple[tuple[str, int], ...], handle: Handle
) -> None:
    p = NodeResourcesFit.new(args, handle)
    assert tuple((r.name, r.weight) for r in p.args.resources) == want_resources
    assert p.args.isolated == IsolatedCPU()


# ---- issue #9: explicit zero requests, pod-level resources ------------------------------


def _nodes_1cpu_2000mi() -> list[NodeBuilder]:
    return [node("node1", "1", "2000Mi"), node("node2", "1", "2000Mi")]


@pytest.mark.parametrize(
    ("strategy", "want"),
    [
        # requests stated as 0 get no 100m / 200Mi default (kube applies those only to
        # absent requests): both nodes are empty to the scorer
        pytest.param("LeastAllocated", {"node1": 100, "node2": 100}, id="least-allocated"),
        pytest.param("MostAllocated", {"node1": 0, "node2": 0}, id="most-allocated"),
    ],
)
def test_explicit_zero_requests_get_no_scoring_default(strategy: str, want: dict[str, int]) -> None:
    zero = {"cpu": "0", "memory": "0"}
    plugin = fit({"scoringStrategy": {"type": strategy, "resources": DEFAULT}})
    existing = [make_pod(n).req(**zero).node("node1") for n in ("a", "b")]
    table = built_table(_nodes_1cpu_2000mi(), existing)
    assert run_score(plugin, make_pod("p").req(**zero).build(), table) == want
    # absent requests do get them: node1 carries 2 x (100m, 200Mi), the pod adds its own
    absent = [make_pod(n).node("node1") for n in ("a", "b")]
    table = built_table(_nodes_1cpu_2000mi(), absent)
    got = run_score(plugin, make_pod("p").build(), table)
    assert got == (
        {"node1": 70, "node2": 90} if strategy == "LeastAllocated" else {"node1": 30, "node2": 10}
    )


def test_pod_level_cpu_that_does_not_fit_is_rejected() -> None:
    pod = make_pod("p").req(cpu="100m").pod_resources({"cpu": "5"})
    table = built_table([node("node1", "4", "8Gi"), node("node2", "8", "8Gi")], [])
    assert run_filter(fit(), pod.build(), table) == {"node1": ("Insufficient cpu",)}
    # the containers' sum would have fit everywhere
    assert run_filter(fit(), make_pod("q").req(cpu="100m").build(), table) == {}


def test_pod_level_requests_are_charged_to_the_node() -> None:
    """An existing pod is charged its pod-level requests, not its containers' sum."""
    placed = make_pod("a").req(cpu="100m").pod_resources({"cpu": "3"}).node("node1")
    table = built_table([node("node1", "4", "8Gi")], [placed])
    pod = make_pod("p").req(cpu="2")
    assert run_filter(fit(), pod.build(), table) == {"node1": ("Insufficient cpu",)}
