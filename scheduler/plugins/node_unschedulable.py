"""NodeUnschedulable: nodes with spec.unschedulable are filtered out unless the
pod tolerates node.kubernetes.io/unschedulable:NoSchedule
(nodeunschedulable/node_unschedulable.go)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from scheduler.api.types import Pod, Taint, TaintEffect
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EnqueueExtensions,
    EventResource,
    FilterPlugin,
    FilterResult,
    IntpArray,
    NoArgs,
)
from scheduler.framework.status import Code
from scheduler.snapshot import NodeTable

ERR_REASON_UNSCHEDULABLE: Final = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT: Final = Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE)


class NodeUnschedulable(NoArgs, FilterPlugin, EnqueueExtensions):
    NAME: Final = "NodeUnschedulable"

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        if any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.tolerations):
            return FilterResult.all_pass(len(rows))
        bad = nodes.unschedulable[rows]
        if not bad.any():
            return FilterResult.all_pass(len(rows))
        return FilterResult.single(
            ERR_REASON_UNSCHEDULABLE, bad, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        )

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT)
            )
        ]
