"""TaintToleration: filter out nodes with an untolerated NoSchedule/NoExecute
taint; prefer nodes with fewer untolerated PreferNoSchedule taints
(tainttoleration/taint_toleration.go).

Queueing hint (isSchedulableAfterNodeChange): a node added or whose taints
changed helps a pod only if the pod tolerates every NoSchedule/NoExecute taint
the node has now and did not before (a new node had none before)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from troupe.api.types import Node, Pod, Taint, TaintEffect, Toleration
from troupe.core.snapshot import NodeTable
from troupe.framework.columns import hard_taint_columns
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
    BoolArray,
    EnqueueExtensions,
    FilterPlugin,
    Int64Array,
    IntpArray,
    NoArgs,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status

HARD_EFFECTS: Final = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
_STATE_KEY: Final = "PreScoreTaintToleration"


def untolerated_reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def tolerated(taint: Taint, tolerations: Sequence[Toleration]) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


class TaintToleration(
    NoArgs, FilterPlugin, PreScorePlugin, ScorePlugin, ScoreExtensions, EnqueueExtensions
):
    NAME: Final = "TaintToleration"

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        taints = nodes.taint_list
        bad_cols = hard_taint_columns(nodes, pod.tolerations)
        if not bad_cols:
            return FilterResult.all_pass(len(rows))
        m = nodes.taint_matrix[np.ix_(rows, np.array(bad_cols, dtype=np.intp))]
        hit: BoolArray = np.logical_or.reduce(m, axis=1)
        if not hit.any():
            return FilterResult.all_pass(len(rows))
        if len(bad_cols) == 1:
            return FilterResult.single(
                untolerated_reason(taints[bad_cols[0]]), hit, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            )
        # Each node reports its own first untolerated taint, in its own order.
        first = np.argmax(m, axis=1)
        multi = np.flatnonzero(m.sum(axis=1) > 1)
        bad_set = {taints[c] for c in bad_cols}
        for i in multi.tolist():
            node_taints = nodes.node(int(rows[i])).taints
            t0 = next(t for t in node_taints if t in bad_set)
            first[i] = bad_cols.index(nodes.taint_ids[t0])
        used = sorted(set(first[hit].tolist()))
        rejected = np.zeros((len(rows), len(used)), dtype=bool)
        for j, c in enumerate(used):
            rejected[:, j] = hit & (first == c)
        reasons = tuple(untolerated_reason(taints[bad_cols[c]]) for c in used)
        return FilterResult(reasons, rejected, (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,) * len(used))

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        prefer = [
            t
            for t in pod.tolerations
            if t.effect is None or t.effect is TaintEffect.PREFER_NO_SCHEDULE
        ]
        cols = [
            i
            for i, t in enumerate(nodes.taint_list)
            if t.effect is TaintEffect.PREFER_NO_SCHEDULE and not tolerated(t, prefer)
        ]
        if not cols:
            return SKIP
        state.write(_STATE_KEY, np.array(cols, dtype=np.intp))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        cols = state.read(_STATE_KEY, np.ndarray)
        counts: Int64Array = nodes.taint_matrix[np.ix_(rows, cols)].sum(axis=1).astype(np.int64)
        return counts

    def normalize_score(self, state: CycleState, pod: Pod, scores: Int64Array) -> Int64Array:
        # DefaultNormalizeScore(MaxNodeScore, reverse=true)
        top = int(scores.max()) if len(scores) else 0
        if top == 0:
            return np.full(len(scores), 100, dtype=np.int64)
        return 100 - scores * 100 // top

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """As taint_toleration.go: QUEUE when the node went from untolerated to
        tolerated (an object that is not a Node queues, as upstream's error path)."""
        if not isinstance(new, Node) or (old is not None and not isinstance(old, Node)):
            return QueueingHint.QUEUE
        was_untolerated = old is None or _has_untolerated_hard_taint(old, pod)
        if was_untolerated and not _has_untolerated_hard_taint(new, pod):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP


def _has_untolerated_hard_taint(node: Node, pod: Pod) -> bool:
    return any(t.effect in HARD_EFFECTS and not tolerated(t, pod.tolerations) for t in node.taints)
