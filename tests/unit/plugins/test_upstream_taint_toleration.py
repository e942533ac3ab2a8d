"""TaintToleration: cases ported from kube-scheduler's
pkg/scheduler/framework/plugins/tainttoleration/taint_toleration_test.go
(TestTaintTolerationScore, TestTaintTolerationFilter,
TestIsSchedulableAfterNodeChange; the stored version with both queueing-hint
tables, pkg/scheduler/internal/cache era, ~v1.30).

Deliberate difference: Troupe's PreScore returns Skip when no candidate node
has a PreferNoSchedule taint the pod does not tolerate (upstream scores every
node 100 then); the case where that happens asserts the skip.

Upstream tolerations without an operator are written with an empty operator
here too (the API's default, Equal).

TestIsSchedulableAfterNodeChange needed a plugin change: Troupe registered the
node events without a hint (always QUEUE); it now has upstream's hint, and
"skip-queue-on-untoleratedtaint-node-added" and "skip-unrelated-change" pass.
Upstream's "backoff-wrong-*-object" cases return Queue with an error; Troupe's
hints have no error channel and return QUEUE.

Skipped: Test_isSchedulableAfterPodChange (a hint for updates of the pending
pod itself, when a toleration is added). Troupe's queue requeues a pending pod
on any update of that pod without asking plugins, so there is no such hint to
test.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score
from tests.unit.plugins.upstream_fit_helpers import filter_statuses
from troupe.framework.events import QueueingHint
from troupe.framework.status import Code
from troupe.plugins.taint_toleration import TaintToleration

PNS = "PreferNoSchedule"
NS = "NoSchedule"


def pod(*tolerations: tuple[str, str, str, str]) -> PodBuilder:
    """podWithTolerations: (key, operator, value, effect)."""
    pb = make_pod("pod1")
    for key, op, value, effect in tolerations:
        pb.toleration(key, value, effect, operator=op)
    return pb


def node(name: str, *taints: tuple[str, str, str]) -> NodeBuilder:
    """nodeWithTaints: (key, value, effect)."""
    n = make_node(name)
    for key, value, effect in taints:
        n.taint(key, value, effect)
    return n


# ---- TestTaintTolerationScore ------------------------------------------------------


@pytest.mark.parametrize(
    ("incoming", "nodes", "want"),
    [
        pytest.param(
            pod(("foo", "Equal", "bar", PNS)),
            [node("nodeA", ("foo", "bar", PNS)), node("nodeB", ("foo", "blah", PNS))],
            {"nodeA": 100, "nodeB": 0},
            id="upstream: node with taints tolerated by the pod, gets a higher score than those "
            "node with intolerable taints",
        ),
        pytest.param(
            pod(("cpu-type", "Equal", "arm64", PNS), ("disk-type", "Equal", "ssd", PNS)),
            [
                node("nodeA"),
                node("nodeB", ("cpu-type", "arm64", PNS)),
                node("nodeC", ("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)),
            ],
            # upstream: 100 for every node. Troupe's PreScore skips the plugin when no
            # node has an untolerated PreferNoSchedule taint (the same for every node,
            # so the same choice of node).
            None,
            id="upstream: the nodes that all of their taints are tolerated by the pod, get the "
            "same score, no matter how many tolerable taints a node has",
        ),
        pytest.param(
            pod(("foo", "Equal", "bar", PNS)),
            [
                node("nodeA"),
                node("nodeB", ("cpu-type", "arm64", PNS)),
                node("nodeC", ("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)),
            ],
            {"nodeA": 100, "nodeB": 50, "nodeC": 0},
            id="upstream: the more intolerable taints a node has, the lower score it gets.",
        ),
        pytest.param(
            pod(("cpu-type", "Equal", "arm64", NS), ("disk-type", "Equal", "ssd", NS)),
            [
                node("nodeA"),
                node("nodeB", ("cpu-type", "arm64", NS)),
                node("nodeC", ("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)),
            ],
            {"nodeA": 100, "nodeB": 100, "nodeC": 0},
            id="upstream: only taints and tolerations that have effect PreferNoSchedule are "
            "checked by taints-tolerations priority function",
        ),
        pytest.param(
            pod(),
            [node("nodeA"), node("nodeB", ("cpu-type", "arm64", PNS))],
            {"nodeA": 100, "nodeB": 0},
            id="upstream: Default behaviour No taints and tolerations, lands on node with no "
            "taints",
        ),
    ],
)
def test_taint_toleration_score(
    incoming: PodBuilder, nodes: list[NodeBuilder], want: dict[str, int] | None
) -> None:
    table = table_of([n.build() for n in nodes])
    plugin = TaintToleration.new({}, make_handle())
    assert run_score(plugin, incoming.build(), table) == want


# ---- TestTaintTolerationFilter -----------------------------------------------------

USER1 = ("dedicated", "user1", NS)


def untolerated(text: str) -> dict[str, tuple[Code, tuple[str, ...]]]:
    return {"nodeA": (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (text,))}


@pytest.mark.parametrize(
    ("incoming", "n", "want"),
    [
        pytest.param(
            pod(),
            node("nodeA", USER1),
            untolerated("node(s) had untolerated taint {dedicated: user1}"),
            id="upstream: A pod having no tolerations can't be scheduled onto a node with "
            "nonempty taints",
        ),
        pytest.param(
            pod(("dedicated", "", "user1", NS)),
            node("nodeA", USER1),
            {},
            id="upstream: A pod which can be scheduled on a dedicated node assigned to user1 "
            "with effect NoSchedule",
        ),
        pytest.param(
            pod(("dedicated", "Equal", "user2", NS)),
            node("nodeA", USER1),
            untolerated("node(s) had untolerated taint {dedicated: user1}"),
            id="upstream: A pod which can't be scheduled on a dedicated node assigned to user2 "
            "with effect NoSchedule",
        ),
        pytest.param(
            pod(("foo", "Exists", "", NS)),
            node("nodeA", ("foo", "bar", NS)),
            {},
            id="upstream: A pod can be scheduled onto the node, with a toleration uses operator "
            "Exists that tolerates the taints on the node",
        ),
        pytest.param(
            pod(("dedicated", "Equal", "user2", NS), ("foo", "Exists", "", NS)),
            node("nodeA", ("dedicated", "user2", NS), ("foo", "bar", NS)),
            {},
            id="upstream: A pod has multiple tolerations, node has multiple taints, all the "
            "taints are tolerated, pod can be scheduled onto the node",
        ),
        pytest.param(
            pod(("foo", "Equal", "bar", PNS)),
            node("nodeA", ("foo", "bar", NS)),
            untolerated("node(s) had untolerated taint {foo: bar}"),
            id="upstream: A pod has a toleration that keys and values match the taint on the "
            "node, but (non-empty) effect doesn't match, can't be scheduled onto the node",
        ),
        pytest.param(
            pod(("foo", "Equal", "bar", "")),
            node("nodeA", ("foo", "bar", NS)),
            {},
            id="upstream: The pod has a toleration that keys and values match the taint on the "
            "node, the effect of toleration is empty, and the effect of taint is NoSchedule. "
            "Pod can be scheduled onto the node",
        ),
        pytest.param(
            pod(("dedicated", "Equal", "user2", NS)),
            node("nodeA", ("dedicated", "user1", PNS)),
            {},
            id="upstream: The pod has a toleration that key and value don't match the taint on "
            "the node, but the effect of taint on node is PreferNoSchedule. Pod can be "
            "scheduled onto the node",
        ),
        pytest.param(
            pod(),
            node("nodeA", ("dedicated", "user1", PNS)),
            {},
            id="upstream: The pod has no toleration, but the effect of taint on node is "
            "PreferNoSchedule. Pod can be scheduled onto the node",
        ),
    ],
)
def test_taint_toleration_filter(
    incoming: PodBuilder, n: NodeBuilder, want: dict[str, tuple[Code, tuple[str, ...]]]
) -> None:
    table = table_of([n.build()])
    plugin = TaintToleration.new({}, make_handle())
    assert filter_statuses(plugin, incoming.build(), table) == want


# ---- TestIsSchedulableAfterNodeChange ----------------------------------------------

USER2_TOL = ("dedicated", "Equal", "user2", NS)


@pytest.mark.parametrize(
    ("incoming", "old", "new", "want"),
    [
        pytest.param(
            pod(),
            None,
            "not-a-node",
            QueueingHint.QUEUE,
            id="upstream: backoff-wrong-new-object",
        ),
        pytest.param(
            pod(),
            "not-a-node",
            node("nodeA", USER1),
            QueueingHint.QUEUE,
            id="upstream: backoff-wrong-old-object",
        ),
        pytest.param(
            pod(USER2_TOL),
            None,
            node("nodeA", USER1),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-untoleratedtaint-node-added",
        ),
        pytest.param(
            pod(USER2_TOL),
            None,
            node("nodeA", ("dedicated", "user2", NS)),
            QueueingHint.QUEUE,
            id="upstream: queue-on-toleratedtaint-node-added",
        ),
        pytest.param(
            pod(USER2_TOL),
            node("nodeA", USER1),
            node("nodeA", USER1, ("dedicated", "user3", NS)),
            QueueingHint.SKIP,
            id="upstream: skip-unrelated-change",
        ),
        pytest.param(
            pod(USER2_TOL),
            node("nodeA", USER1),
            node("nodeA", ("dedicated", "user2", NS)),
            QueueingHint.QUEUE,
            id="upstream: queue-on-taint-change",
        ),
    ],
)
def test_is_schedulable_after_node_change(
    incoming: PodBuilder, old: Any, new: Any, want: QueueingHint
) -> None:
    plugin = TaintToleration.new({}, make_handle())
    (registration,) = plugin.events_to_register()
    assert registration.hint is not None
    old_obj = old.build() if isinstance(old, NodeBuilder) else old
    new_obj = new.build() if isinstance(new, NodeBuilder) else new
    assert registration.hint(incoming.build(), old_obj, new_obj) is want
