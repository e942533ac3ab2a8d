"""NodeAffinity: spec.nodeSelector and required node affinity filter; preferred
node affinity scores (nodeaffinity/node_affinity.go).

PreFilter narrows the candidates to the node names that every term pins with
`matchFields metadata.name In`; terms whose pins do not intersect leave no node
("pod affinity terms conflict"). Queueing hint (isSchedulableAfterNodeChange):
a node added or relabelled helps only if it now matches the scheduler-enforced
affinity and the pod's required affinity, and did not match the pod's before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from troupe.api.parse import parse_node_selector, parse_preferred_terms
from troupe.api.selectors import labels_match_selector_map, node_selector_matches
from troupe.api.types import (
    Node,
    NodeSelector,
    ParseError,
    Pod,
    PreferredSchedulingTerm,
    SelectorOp,
)
from troupe.core.snapshot import NodeTable
from troupe.framework.columns import map_selector_mask, node_selector_mask, term_mask
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.filtering import FilterResult
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    EnqueueExtensions,
    FilterPlugin,
    Int64Array,
    IntpArray,
    PluginArgsError,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status

ERR_REASON_POD: Final = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED: Final = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT: Final = "pod affinity terms conflict"
_PRE_FILTER_KEY: Final = "PreFilterNodeAffinity"
_PRE_SCORE_KEY: Final = "PreScoreNodeAffinity"


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    added_required: NodeSelector | None = None
    added_preferred: tuple[PreferredSchedulingTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class _Required:
    selector: Mapping[str, str]
    affinity: NodeSelector | None


def _parse_args(args: Mapping[str, Any]) -> NodeAffinityArgs:
    added = args.get("addedAffinity")
    if added is None:
        return NodeAffinityArgs()
    if not isinstance(added, Mapping):
        raise PluginArgsError("addedAffinity", "must be an object")
    try:
        req = parse_node_selector(
            added.get("requiredDuringSchedulingIgnoredDuringExecution"),
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.",
        )
        pref_items = added.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if not isinstance(pref_items, list):
            raise ParseError(
                "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution", "must be a list"
            )
        pref = parse_preferred_terms(
            [
                (f"addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].", x)
                for i, x in enumerate(pref_items)
            ]
        )
    except ParseError as e:
        raise PluginArgsError(e.field_path, e.problem) from e
    return NodeAffinityArgs(req, pref)


class NodeAffinity(
    PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, ScoreExtensions, EnqueueExtensions
):
    NAME: Final = "NodeAffinity"
    # Its PreFilter state depends on the pod and the node only (see
    # troupe.framework.interface.pre_filter_is_node_local).
    PRE_FILTER_NODE_LOCAL: Final = True

    def __init__(self, args: NodeAffinityArgs) -> None:
        self.args = args

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(_parse_args(args))

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        aff = pod.required_node_affinity
        if not pod.node_selector and aff is None and self.args.added_required is None:
            return None, SKIP
        state.write(_PRE_FILTER_KEY, _Required(pod.node_selector, aff))
        if aff is None or not aff.terms:
            return None, SUCCESS
        # As kube-scheduler: if every term pins metadata.name with In, only those nodes.
        names: set[str] = set()
        for term in aff.terms:
            pinned = [
                f for f in term.match_fields if f.key == "metadata.name" and f.op is SelectorOp.IN
            ]
            if not pinned:
                return None, SUCCESS
            vals = set(pinned[0].values)
            for f in pinned[1:]:
                vals &= set(f.values)
            names |= vals
        if not names:
            return None, Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_CONFLICT,), self.NAME
            )
        return PreFilterResult(frozenset(names)), SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        req = state.read(_PRE_FILTER_KEY, _Required)
        reasons: list[str] = []
        cols: list[np.ndarray] = []
        ok = np.ones(len(rows), dtype=bool)
        if self.args.added_required is not None:
            enforced = node_selector_mask(self.args.added_required, nodes, rows)
            reasons.append(ERR_REASON_ENFORCED)
            cols.append(~enforced)
            ok &= enforced
        mask = np.ones(len(rows), dtype=bool)
        if req.selector:
            mask &= map_selector_mask(req.selector, nodes, rows)
        if req.affinity is not None:
            mask &= node_selector_mask(req.affinity, nodes, rows)
        reasons.append(ERR_REASON_POD)
        cols.append(~mask & ok)
        rejected = np.stack(cols, axis=1)
        return FilterResult(
            tuple(reasons), rejected, (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,) * len(reasons)
        )

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        terms = pod.preferred_node_affinity + self.args.added_preferred
        if not terms:
            return SKIP
        state.write(_PRE_SCORE_KEY, terms)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        terms = state.read(_PRE_SCORE_KEY, tuple)
        total = np.zeros(len(rows), dtype=np.int64)
        for t in terms:
            total += term_mask(t.preference, nodes, rows) * t.weight
        return total

    def normalize_score(self, state: CycleState, pod: Pod, scores: Int64Array) -> Int64Array:
        # DefaultNormalizeScore(MaxNodeScore, reverse=false)
        top = int(scores.max()) if len(scores) else 0
        if top == 0:
            return scores
        return scores * 100 // top

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """As node_affinity.go (an object that is not a Node queues, as upstream's
        error path)."""
        if not isinstance(new, Node) or (old is not None and not isinstance(old, Node)):
            return QueueingHint.QUEUE
        added = self.args.added_required
        if added is not None and not node_selector_matches(added, new.labels, new.name):
            return QueueingHint.SKIP
        if not _required_matches(pod, new):
            return QueueingHint.SKIP
        if old is not None and _required_matches(pod, old):
            return QueueingHint.SKIP
        return QueueingHint.QUEUE


def _required_matches(pod: Pod, node: Node) -> bool:
    """nodeaffinity.GetRequiredNodeAffinity(pod).Match(node): nodeSelector and the
    required terms."""
    if not labels_match_selector_map(pod.node_selector, node.labels):
        return False
    aff = pod.required_node_affinity
    return aff is None or node_selector_matches(aff, node.labels, node.name)
