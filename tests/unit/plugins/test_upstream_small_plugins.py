"""NodeName, NodePorts, NodeUnschedulable, SchedulingGates and PrioritySort:
cases ported from kube-scheduler's plugin tests, stored versions:

- nodename/node_name_test.go (TestNodeName; the version without PreFilter and
  hints, framework at pkg/scheduler/framework).
- nodeports/node_ports_test.go (TestNodePorts, TestPreFilterDisabled,
  Test_isSchedulableAfterPodDeleted).
- nodeunschedulable/node_unschedulable_test.go (TestNodeUnschedulable,
  TestIsSchedulableAfterNodeChange; test/utils/ktesting era).
- schedulinggates/scheduling_gates_test.go (TestPreEnqueue,
  Test_isSchedulableAfterPodChange).
- queuesort/priority_sort_test.go (TestLess).

Plugin changes these brought: NodeUnschedulable had no queueing hint (every
node add/taint update requeued); it now has upstream's
isSchedulableAfterNodeChange ("skip-queue-on-unschedulable-node-added",
"skip-unrelated-change-unschedulable-*" failed). NodePorts' and
SchedulingGates' hints returned Skip for an object that is not a Pod; upstream's
error path queues ("backoff-wrong-*-object"), and so do they now. Troupe's
hints have no error channel, so those cases assert QUEUE only.

Deliberate differences, asserted as Troupe's behaviour:
- NodeName "no host specified": Troupe's NodeName has a PreFilter that returns
  Skip for a pod without spec.nodeName (as newer kube-scheduler), so Filter is
  not run.
- NodePorts TestPreFilterDisabled: Filter without PreFilter's state raises.

Skipped: nodeports TestGetContainerPorts (an upstream helper Troupe does not
have) and nodeunschedulable TestIsSchedulableAfterPodTolerationChange (a hint
for updates of the pending pod itself; Troupe's queue requeues a pending pod on
any update of that pod without asking plugins).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle
from tests.unit.plugins.upstream_fit_helpers import filter_statuses
from troupe.framework.cycle_state import CycleState, StateKeyError
from troupe.framework.events import QueueingHint
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.status import Code
from troupe.plugins.node_name import ERR_REASON as NODE_NAME_REASON
from troupe.plugins.node_name import NodeName
from troupe.plugins.node_ports import ERR_REASON as PORTS_REASON
from troupe.plugins.node_ports import NodePorts
from troupe.plugins.node_unschedulable import ERR_REASON_UNSCHEDULABLE, NodeUnschedulable
from troupe.plugins.queuesort import PrioritySort
from troupe.plugins.scheduling_gates import SchedulingGates

U = Code.UNSCHEDULABLE
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE

# ---- TestNodeName ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "want_skip", "want"),
    [
        pytest.param(make_pod("p"), True, {}, id="upstream: no host specified"),
        pytest.param(make_pod("p").spec(nodeName="foo"), False, {}, id="upstream: host matches"),
        pytest.param(
            make_pod("p").spec(nodeName="bar"),
            False,
            {"foo": (UU, (NODE_NAME_REASON,))},
            id="upstream: host doesn't match",
        ),
    ],
)
def test_node_name(
    pod: PodBuilder, want_skip: bool, want: dict[str, tuple[Code, tuple[str, ...]]]
) -> None:
    table = table_of([make_node("foo").build()])
    plugin = NodeName.new({}, make_handle())
    p = pod.build()
    _, st = plugin.pre_filter(CycleState(), p, table)
    assert st.is_skip == want_skip
    if not want_skip:
        assert filter_statuses(plugin, p, table) == want


# ---- TestNodePorts -----------------------------------------------------------------


def ported(name: str, host: str | None, *infos: str) -> PodBuilder:
    """newPod(host, "PROTO/IP/port", ...)."""
    pb = make_pod(name)
    for info in infos:
        proto, ip, port = info.split("/")
        pb.host_port(int(port), proto, ip)
    return pb.node(host) if host else pb


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(
            ported("p", None, "UDP/127.0.0.1/8080"),
            ported("e", "m1", "UDP/127.0.0.1/9090"),
            {},
            id="upstream: other port",
        ),
        pytest.param(
            ported("p", None, "UDP/127.0.0.1/8080"),
            ported("e", "m1", "UDP/127.0.0.1/8080"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: same udp port",
        ),
        pytest.param(
            ported("p", None, "TCP/127.0.0.1/8080"),
            ported("e", "m1", "TCP/127.0.0.1/8080"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: same tcp port",
        ),
        pytest.param(
            ported("p", None, "TCP/127.0.0.1/8080"),
            ported("e", "m1", "TCP/127.0.0.2/8080"),
            {},
            id="upstream: different host ip",
        ),
        pytest.param(
            ported("p", None, "UDP/127.0.0.1/8080"),
            ported("e", "m1", "TCP/127.0.0.1/8080"),
            {},
            id="upstream: different protocol",
        ),
        pytest.param(
            ported("p", None, "UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
            ported("e", "m1", "UDP/127.0.0.1/8080"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: second udp port conflict",
        ),
        pytest.param(
            ported("p", None, "TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
            ported("e", "m1", "TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: first tcp port conflict",
        ),
        pytest.param(
            ported("p", None, "TCP/0.0.0.0/8001"),
            ported("e", "m1", "TCP/127.0.0.1/8001"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: first tcp port conflict due to 0.0.0.0 hostIP",
        ),
        pytest.param(
            ported("p", None, "TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
            ported("e", "m1", "TCP/127.0.0.1/8001"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: TCP hostPort conflict due to 0.0.0.0 hostIP",
        ),
        pytest.param(
            ported("p", None, "TCP/127.0.0.1/8001"),
            ported("e", "m1", "TCP/0.0.0.0/8001"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: second tcp port conflict to 0.0.0.0 hostIP",
        ),
        pytest.param(
            ported("p", None, "UDP/127.0.0.1/8001"),
            ported("e", "m1", "TCP/0.0.0.0/8001"),
            {},
            id="upstream: second different protocol",
        ),
        pytest.param(
            ported("p", None, "UDP/127.0.0.1/8001"),
            ported("e", "m1", "TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"),
            {"m1": (U, (PORTS_REASON,))},
            id="upstream: UDP hostPort conflict due to 0.0.0.0 hostIP",
        ),
    ],
)
def test_node_ports(
    pod: PodBuilder, existing: PodBuilder, want: dict[str, tuple[Code, tuple[str, ...]]]
) -> None:
    table = table_of([make_node("m1").build()], [existing.build()])
    plugin = NodePorts.new({}, make_handle())
    assert filter_statuses(plugin, pod.build(), table) == want


def test_node_ports_skip_filter() -> None:
    """upstream: skip filter (a pod without host ports: PreFilter returns Skip)."""
    table = table_of([make_node("m1").build()])
    _, st = NodePorts.new({}, make_handle()).pre_filter(CycleState(), make_pod("p").build(), table)
    assert st.is_skip


def test_node_ports_pre_filter_disabled() -> None:
    """upstream: TestPreFilterDisabled (ErrNotFound). Troupe: Filter raises."""
    table = table_of([make_node("m1").build()])
    plugin = NodePorts.new({}, make_handle())
    with pytest.raises(StateKeyError):
        plugin.filter(CycleState(), make_pod("p").build(), table, table.valid_rows())


@pytest.mark.parametrize(
    ("old", "want"),
    [
        pytest.param("not-a-pod", QueueingHint.QUEUE, id="upstream: backoff-wrong-old-object"),
        pytest.param(make_pod("d"), QueueingHint.SKIP, id="upstream: skip-queue-on-unscheduled"),
        pytest.param(
            make_pod("d").node("fake-node"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-non-hostport",
        ),
        pytest.param(
            make_pod("d").node("fake-node").host_port(8081),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-unrelated-hostport",
        ),
        pytest.param(
            make_pod("d").node("fake-node").host_port(8080),
            QueueingHint.QUEUE,
            id="upstream: queue-on-released-hostport",
        ),
    ],
)
def test_node_ports_is_schedulable_after_pod_deleted(old: Any, want: QueueingHint) -> None:
    plugin = NodePorts.new({}, make_handle())
    (deleted, _) = plugin.events_to_register()
    assert deleted.hint is not None
    old_obj = old.build() if isinstance(old, PodBuilder) else old
    assert deleted.hint(make_pod("p").host_port(8080).build(), old_obj, None) is want


# ---- TestNodeUnschedulable ---------------------------------------------------------


def unsched(flag: bool, name: str = "n") -> NodeBuilder:
    n = make_node(name)
    return n.unschedulable() if flag else n


@pytest.mark.parametrize(
    ("pod", "n", "want"),
    [
        pytest.param(
            make_pod("p"),
            unsched(True),
            {"n": (UU, (ERR_REASON_UNSCHEDULABLE,))},
            id="upstream: Does not schedule pod to unschedulable node "
            "(node.Spec.Unschedulable==true)",
        ),
        pytest.param(make_pod("p"), unsched(False), {}, id="upstream: Schedule pod to normal node"),
        pytest.param(
            make_pod("p").toleration("node.kubernetes.io/unschedulable", effect="NoSchedule"),
            unsched(True),
            {},
            id="upstream: Schedule pod with toleration to unschedulable node "
            "(node.Spec.Unschedulable==true)",
        ),
    ],
)
def test_node_unschedulable(
    pod: PodBuilder, n: NodeBuilder, want: dict[str, tuple[Code, tuple[str, ...]]]
) -> None:
    table = table_of([n.build()])
    plugin = NodeUnschedulable.new({}, make_handle())
    assert filter_statuses(plugin, pod.build(), table) == want


NOT_READY = ("node.kubernetes.io/not-ready", "", "NoExecute")


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param(None, "not-a-node", QueueingHint.QUEUE, id="upstream: error-wrong-new-object"),
        pytest.param(
            "not-a-node", unsched(True), QueueingHint.QUEUE, id="upstream: error-wrong-old-object"
        ),
        pytest.param(
            None,
            unsched(True),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-unschedulable-node-added",
        ),
        pytest.param(
            None, unsched(False), QueueingHint.QUEUE, id="upstream: queue-on-schedulable-node-added"
        ),
        pytest.param(
            unsched(True),
            unsched(True).taint(*NOT_READY),
            QueueingHint.SKIP,
            id="upstream: skip-unrelated-change-unschedulable-true",
        ),
        pytest.param(
            unsched(False),
            unsched(False).taint(*NOT_READY),
            QueueingHint.SKIP,
            id="upstream: skip-unrelated-change-unschedulable-false",
        ),
        pytest.param(
            unsched(True),
            unsched(False),
            QueueingHint.QUEUE,
            id="upstream: queue-on-unschedulable-field-change",
        ),
    ],
)
def test_node_unschedulable_is_schedulable_after_node_change(
    old: Any, new: Any, want: QueueingHint
) -> None:
    plugin = NodeUnschedulable.new({}, make_handle())
    (registration,) = plugin.events_to_register()
    assert registration.hint is not None
    old_obj = old.build() if isinstance(old, NodeBuilder) else old
    new_obj = new.build() if isinstance(new, NodeBuilder) else new
    assert registration.hint(make_pod("p").build(), old_obj, new_obj) is want


# ---- SchedulingGates ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(make_pod("p"), None, id="upstream: pod does not carry scheduling gates"),
        pytest.param(
            make_pod("p").gate("foo").gate("bar"),
            (UU, ("waiting for scheduling gates: [foo bar]",)),
            id="upstream: pod carries scheduling gates",
        ),
    ],
)
def test_pre_enqueue(pod: PodBuilder, want: tuple[Code, tuple[str, ...]] | None) -> None:
    st = SchedulingGates.new({}, make_handle()).pre_enqueue(pod.build())
    if want is None:
        assert st.is_success
    else:
        assert (st.code, st.reasons) == want


def gated(name: str, *gates: str) -> PodBuilder:
    pb = make_pod(name).spec(schedulingGates=[])
    for g in gates:
        pb.gate(g)
    return pb


@pytest.mark.parametrize(
    ("pod", "old", "new", "want"),
    [
        pytest.param(
            make_pod("p"),
            "not-a-pod",
            None,
            QueueingHint.QUEUE,
            id="upstream: backoff-wrong-old-object",
        ),
        pytest.param(
            make_pod("p"),
            None,
            "not-a-pod",
            QueueingHint.QUEUE,
            id="upstream: backoff-wrong-new-object",
        ),
        pytest.param(
            gated("p", "foo", "bar"),
            gated("p1", "foo", "bar"),
            gated("p1", "foo"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-other-pod-updated",
        ),
        pytest.param(
            gated("p", "foo"),
            gated("p", "foo"),
            gated("p"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-the-unsched-pod-updated",
        ),
    ],
)
def test_scheduling_gates_is_schedulable_after_pod_change(
    pod: PodBuilder, old: Any, new: Any, want: QueueingHint
) -> None:
    (registration,) = SchedulingGates.new({}, make_handle()).events_to_register()
    assert registration.hint is not None
    old_obj = old.build() if isinstance(old, PodBuilder) else old
    new_obj = new.build() if isinstance(new, PodBuilder) else new
    assert registration.hint(pod.build(), old_obj, new_obj) is want


# ---- PrioritySort TestLess ---------------------------------------------------------

LOW, HIGH = 10, 100
T1, T2 = 1000.0, 1001.0


def queued(priority: int, timestamp: float = 0.0) -> QueuedPodInfo:
    return QueuedPodInfo(pod=make_pod("p").priority(priority).build(), timestamp=timestamp)


@pytest.mark.parametrize(
    ("p1", "p2", "expected"),
    [
        pytest.param(
            queued(LOW), queued(HIGH), False, id="upstream: p1.priority less than p2.priority"
        ),
        pytest.param(
            queued(HIGH), queued(LOW), True, id="upstream: p1.priority greater than p2.priority"
        ),
        pytest.param(
            queued(HIGH, T1),
            queued(HIGH, T2),
            True,
            id="upstream: equal priority. p1 is added to schedulingQ earlier than p2",
        ),
        pytest.param(
            queued(HIGH, T2),
            queued(HIGH, T1),
            False,
            id="upstream: equal priority. p2 is added to schedulingQ earlier than p1",
        ),
    ],
)
def test_less(p1: QueuedPodInfo, p2: QueuedPodInfo, expected: bool) -> None:
    assert PrioritySort.new({}, make_handle()).less(p1, p2) is expected
