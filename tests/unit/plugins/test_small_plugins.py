"""NodePorts, NodeName, NodeUnschedulable, SchedulingGates, PrioritySort, DefaultBinder."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter
from troupe.api.types import NodeName as NodeNameT
from troupe.core.cluster import BindConflict
from troupe.core.memory_cluster import InMemoryCluster
from troupe.framework.cycle_state import CycleState
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.status import Code
from troupe.plugins.default_binder import BIND_CONFLICT, DefaultBinder
from troupe.plugins.node_name import NodeName
from troupe.plugins.node_ports import NodePorts
from troupe.plugins.node_unschedulable import NodeUnschedulable
from troupe.plugins.queuesort import PrioritySort
from troupe.plugins.scheduling_gates import SchedulingGates

PORTS = ("node(s) didn't have free ports for the requested pod ports",)


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(make_pod("p").host_port(8080), [], {}, id="free"),
        pytest.param(
            make_pod("p").host_port(8080),
            [make_pod("e").host_port(8080).node("n")],
            {"n": PORTS},
            id="same-port",
        ),
        pytest.param(
            make_pod("p").host_port(8080, "UDP"),
            [make_pod("e").host_port(8080).node("n")],
            {},
            id="other-protocol",
        ),
        pytest.param(
            make_pod("p").host_port(8080, host_ip="10.0.0.1"),
            [make_pod("e").host_port(8080, host_ip="10.0.0.2").node("n")],
            {},
            id="different-ips",
        ),
        pytest.param(
            make_pod("p").host_port(8080, host_ip="10.0.0.1"),
            [make_pod("e").host_port(8080).node("n")],
            {"n": PORTS},
            id="wildcard-ip-conflicts",
        ),
        pytest.param(
            make_pod("p").host_port(8080),
            [make_pod("e").host_port(8080, host_ip="10.0.0.2").node("n")],
            {"n": PORTS},
            id="pod-wildcard-conflicts",
        ),
    ],
)
def test_node_ports(pod: Any, existing: list[Any], want: dict[str, Any]) -> None:
    table = table_of(
        [make_node("n").build(), make_node("m").build()], [p.build() for p in existing]
    )
    assert run_filter(NodePorts.new({}, make_handle()), pod.build(), table) == want


def test_node_ports_skipped_without_host_ports() -> None:
    table = table_of([make_node("n").build()])
    _, st = NodePorts.new({}, make_handle()).pre_filter(CycleState(), make_pod("p").build(), table)
    assert st.is_skip


def test_node_name() -> None:
    table = table_of([make_node("a").build(), make_node("b").build()])
    pod = make_pod("p").spec(nodeName="b").build()
    assert run_filter(NodeName.new({}, make_handle()), pod, table) == {
        "a": ("node(s) didn't match the requested node name",)
    }
    assert run_filter(NodeName.new({}, make_handle()), make_pod("q").build(), table) == {}


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(make_pod("p"), {"cordoned": ("node(s) were unschedulable",)}, id="plain"),
        pytest.param(
            make_pod("p").toleration(
                "node.kubernetes.io/unschedulable", effect="NoSchedule", operator="Exists"
            ),
            {},
            id="tolerates-unschedulable",
        ),
    ],
)
def test_node_unschedulable(pod: Any, want: dict[str, Any]) -> None:
    table = table_of([make_node("cordoned").unschedulable().build(), make_node("ok").build()])
    assert run_filter(NodeUnschedulable.new({}, make_handle()), pod.build(), table) == want


def test_scheduling_gates() -> None:
    plugin = SchedulingGates.new({}, make_handle())
    st = plugin.pre_enqueue(make_pod("p").gate("a").gate("b").build())
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ("waiting for scheduling gates: [a b]",)
    assert plugin.pre_enqueue(make_pod("p").build()).is_success


def qpi(name: str, priority: int, ts: float, seq: int) -> QueuedPodInfo:
    return QueuedPodInfo(pod=make_pod(name).priority(priority).build(), timestamp=ts, seq=seq)


def test_priority_sort() -> None:
    s = PrioritySort.new({}, make_handle())
    high, low_early, low_late = qpi("h", 10, 5.0, 3), qpi("a", 0, 1.0, 1), qpi("b", 0, 2.0, 2)
    assert s.less(high, low_early) and not s.less(low_early, high)
    assert s.less(low_early, low_late)
    assert sorted([low_late, high, low_early], key=s.sort_key) == [high, low_early, low_late]


async def test_default_binder() -> None:
    handle = make_handle()
    cluster = handle.client
    assert isinstance(cluster, InMemoryCluster)
    pod = make_pod("p").build()
    cluster.pods[pod.key] = make_pod("p").obj()
    binder = DefaultBinder.new({}, handle)
    st = await binder.bind(CycleState(), pod, NodeNameT("n1"))
    assert st.is_success and cluster.pods[pod.key]["spec"]["nodeName"] == "n1"
    st = await binder.bind(CycleState(), pod, NodeNameT("n2"))
    assert st.code is Code.ERROR and st.message.startswith(BIND_CONFLICT)
    cluster.fail_binds[pod.key] = [BindConflict("x")]
    st = await binder.bind(CycleState(), pod, NodeNameT("n2"))
    assert st.message.startswith(BIND_CONFLICT)


def test_plugins_without_arguments_refuse_them() -> None:
    from troupe.framework.interface import PluginArgsError

    with pytest.raises(PluginArgsError) as e:
        NodePorts.new({"ports": [1]}, make_handle())
    assert e.value.field_path == "ports"
