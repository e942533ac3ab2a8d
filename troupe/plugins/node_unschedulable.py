"""NodeUnschedulable: nodes with spec.unschedulable are filtered out unless the
pod tolerates node.kubernetes.io/unschedulable:NoSchedule
(nodeunschedulable/node_unschedulable.go).

Queueing hint (isSchedulableAfterNodeChange): a node added or updated helps only
if it is schedulable now and was not before (a new node was not before)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from troupe.api.types import Node, Pod, Taint, TaintEffect
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.filtering import FilterResult
from troupe.framework.interface import (
    EnqueueExtensions,
    FilterPlugin,
    IntpArray,
    NoArgs,
)
from troupe.framework.status import Code

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
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """As node_unschedulable.go (an object that is not a Node queues, as
        upstream's error path)."""
        if not isinstance(new, Node) or (old is not None and not isinstance(old, Node)):
            return QueueingHint.QUEUE
        was_schedulable = old is not None and not old.unschedulable
        if not was_schedulable and not new.unschedulable:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP
