"""NodePorts: a pod's host ports must be free on the node (nodeports/node_ports.go).

The node table keeps a sparse index (protocol, port) -> row -> host IPs in use,
so the filter looks only at the few rows that use one of the pod's ports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from troupe.api.types import HostPort, Pod
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
    PreFilterPlugin,
    PreFilterResult,
)
from troupe.framework.status import SKIP, SUCCESS, Status

ERR_REASON: Final = "node(s) didn't have free ports for the requested pod ports"
_STATE_KEY: Final = "PreFilterNodePorts"


def conflicting_rows(nodes: NodeTable, ports: Sequence[HostPort]) -> set[int]:
    """Rows where one of `ports` is taken (0.0.0.0 conflicts with every IP)."""
    bad: set[int] = set()
    for hp in ports:
        by_row = nodes.port_index.get((hp.protocol, hp.port))
        if not by_row:
            continue
        for row, ips in by_row.items():
            if hp.host_ip == "" or "" in ips or hp.host_ip in ips:
                bad.add(row)
    return bad


class NodePorts(NoArgs, PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME: Final = "NodePorts"
    # Its PreFilter state depends on the pod and the node only (see
    # troupe.framework.interface.pre_filter_is_node_local).
    PRE_FILTER_NODE_LOCAL: Final = True

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        if not pod.host_ports:
            return None, SKIP
        state.write(_STATE_KEY, pod.host_ports)
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        ports = state.read(_STATE_KEY, tuple)
        bad = conflicting_rows(nodes, ports)
        if not bad:
            return FilterResult.all_pass(len(rows))
        return FilterResult.single(ERR_REASON, np.isin(rows, list(bad)))

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def freed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            if not isinstance(old, Pod):
                return QueueingHint.QUEUE  # as upstream's error path
            if old.host_ports and set(old.host_ports) & set(pod.host_ports):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP

        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), freed
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
        ]
