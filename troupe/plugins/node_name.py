"""NodeName: a pod that names its node may only go there (nodename/node_name.go)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from troupe.api.types import Pod
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
)
from troupe.framework.filtering import FilterResult
from troupe.framework.interface import (
    EnqueueExtensions,
    FilterPlugin,
    IntpArray,
    NoArgs,
    PreFilterPlugin,
    PreFilterResult,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status

ERR_REASON: Final = "node(s) didn't match the requested node name"


class NodeName(NoArgs, PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME: Final = "NodeName"
    # Its PreFilter state depends on the pod and the node only (see
    # troupe.framework.interface.pre_filter_is_node_local).
    PRE_FILTER_NODE_LOCAL: Final = True

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        if not pod.node_name:
            return None, SKIP
        return PreFilterResult(frozenset({pod.node_name})), SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        want = nodes.row_of.get(pod.node_name, -1)
        return FilterResult.single(ERR_REASON, rows != want, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]
