"""PodTopologySpread: spread matching pods evenly across topology domains
(podtopologyspread/filtering.go, scoring.go, common.go, plugin.go).

Counting is columnar: the node table keeps, per registered pod matcher
(namespace + selector), a per-node count of matching pods that `charge`
maintains incrementally; a constraint's domain counts are one `np.bincount`
of those node counts by the topology key's value ids, over the nodes that
count for the constraint (they have every constraint's key, and pass the
nodeAffinityPolicy / nodeTaintsPolicy). Nothing walks the pods per cycle.

Filter: a node is rejected if it lacks a constraint's key ("missing required
label") or if placing the pod would make `count(domain) + selfMatch -
globalMin` exceed maxSkew, where globalMin is 0 while fewer than minDomains
domains exist. Score (ScheduleAnyway constraints, or the default constraints
for pods that have none): sum of `count * log(domains + 2) + maxSkew - 1`,
normalised so the emptiest domain scores 100.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from troupe.api.types import (
    LabelSelector,
    Pod,
    Requirement,
    SelectorOp,
    TopologySpreadConstraint,
)
from troupe.core.snapshot import MATCH_NOTHING, NodeTable, PodMatcher
from troupe.framework.columns import (
    at_domain,
    domain_ids,
    map_selector_mask,
    node_selector_mask,
    tolerated_mask,
)
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
    BoolArray,
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

ERR_REASON_CONSTRAINTS_NOT_MATCH: Final = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH: Final = ERR_REASON_CONSTRAINTS_NOT_MATCH + (
    " (missing required label)"
)
HOSTNAME: Final = "kubernetes.io/hostname"
ZONE: Final = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE: Final = "DoNotSchedule"
SCHEDULE_ANYWAY: Final = "ScheduleAnyway"
SYSTEM_DEFAULT_CONSTRAINTS: Final = (
    # as kube-scheduler podtopologyspread/plugin.go systemDefaultConstraints
    TopologySpreadConstraint(3, HOSTNAME, SCHEDULE_ANYWAY, None),
    TopologySpreadConstraint(5, ZONE, SCHEDULE_ANYWAY, None),
)
_PRE_FILTER_KEY: Final = "PreFilterPodTopologySpread"
_PRE_SCORE_KEY: Final = "PreScorePodTopologySpread"


@dataclass(frozen=True, slots=True)
class _Constraint:
    max_skew: int
    key: str
    min_domains: int | None
    matcher: PodMatcher
    self_match: int
    honor_affinity: bool
    honor_taints: bool


@dataclass(frozen=True, slots=True)
class _FilterState:
    constraints: tuple[_Constraint, ...]
    domain_counts: tuple[Int64Array, ...]  # per constraint, indexed by value id
    min_match: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _ScoreState:
    constraints: tuple[_Constraint, ...]
    weights: tuple[float, ...]
    domain_counts: tuple[Int64Array, ...]
    ignored: BoolArray  # over the rows being scored


def _parse_defaults(args: Mapping[str, Any]) -> tuple[TopologySpreadConstraint, ...] | None:
    """None means System defaulting."""
    defaulting = args.get("defaultingType", "System")
    if defaulting not in ("System", "List"):
        raise PluginArgsError(
            "defaultingType",
            f'unsupported value: "{defaulting}": supported values: "System", "List"',
        )
    raw = args.get("defaultConstraints") or []
    if not isinstance(raw, list):
        raise PluginArgsError("defaultConstraints", "must be a list")
    if defaulting == "System":
        if raw:
            raise PluginArgsError(
                "defaultConstraints", 'must be empty when defaultingType is "System"'
            )
        return None
    out = []
    for i, c in enumerate(raw):
        path = f"defaultConstraints[{i}]"
        if not isinstance(c, Mapping):
            raise PluginArgsError(path, "must be an object")
        if "labelSelector" in c:
            raise PluginArgsError(
                f"{path}.labelSelector",
                "constraint must not define a selector, as they deduced for each pod",
            )
        ms, tk, wu = c.get("maxSkew"), c.get("topologyKey"), c.get("whenUnsatisfiable")
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 1:
            raise PluginArgsError(f"{path}.maxSkew", "must be greater than zero")
        if not isinstance(tk, str) or not tk:
            raise PluginArgsError(f"{path}.topologyKey", "can not be empty")
        if wu not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            raise PluginArgsError(f"{path}.whenUnsatisfiable", f'unsupported value: "{wu}"')
        out.append(TopologySpreadConstraint(ms, tk, wu, None))
    return tuple(out)


class PodTopologySpread(
    PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, ScoreExtensions, EnqueueExtensions
):
    NAME: Final = "PodTopologySpread"

    def __init__(self, handle: Handle, defaults: tuple[TopologySpreadConstraint, ...] | None):
        self.handle = handle
        self.system_defaulted = defaults is None
        self.defaults = SYSTEM_DEFAULT_CONSTRAINTS if defaults is None else defaults

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            if k not in ("defaultConstraints", "defaultingType"):
                raise PluginArgsError(str(k), "unknown field")
        return cls(handle, _parse_defaults(args))

    # ---- constraints ---------------------------------------------------------------

    def _constraints(self, pod: Pod, when: str) -> tuple[_Constraint, ...]:
        ns = frozenset({pod.namespace})
        if pod.topology_spread_constraints:
            out = []
            for c in pod.topology_spread_constraints:
                if c.when_unsatisfiable != when:
                    continue
                sel = c.label_selector if c.label_selector is not None else MATCH_NOTHING
                extra = tuple(
                    Requirement(k, SelectorOp.IN, (pod.labels[k],))
                    for k in c.match_label_keys
                    if k in pod.labels
                )
                sel = LabelSelector(sel.requirements + extra)
                out.append(
                    _Constraint(
                        c.max_skew,
                        c.topology_key,
                        c.min_domains,
                        PodMatcher(ns, sel),
                        int(sel.matches(pod.labels)),
                        c.node_affinity_policy == "Honor",
                        c.node_taints_policy == "Honor",
                    )
                )
            return tuple(out)
        dsel = self.handle.lister.default_selector(pod)
        if dsel is None or not dsel.requirements:
            return ()
        return tuple(
            _Constraint(
                c.max_skew,
                c.topology_key,
                c.min_domains,
                PodMatcher(ns, dsel),
                int(dsel.matches(pod.labels)),
                True,
                False,
            )
            for c in self.defaults
            if c.when_unsatisfiable == when
        )

    def _counting_nodes(
        self,
        pod: Pod,
        nodes: NodeTable,
        rows: IntpArray,
        constraints: Sequence[_Constraint],
        require_all: bool,
    ) -> list[BoolArray]:
        """Per constraint, which of `rows` count towards its domains."""
        base = np.ones(len(rows), dtype=bool)
        if require_all:
            for c in constraints:
                base &= nodes.label_column(c.key)[rows] >= 0
        affinity: BoolArray | None = None
        taints: BoolArray | None = None
        out = []
        for c in constraints:
            mask = base
            if c.honor_affinity and (pod.node_selector or pod.required_node_affinity):
                if affinity is None:
                    affinity = map_selector_mask(pod.node_selector, nodes, rows)
                    if pod.required_node_affinity is not None:
                        affinity &= node_selector_mask(pod.required_node_affinity, nodes, rows)
                mask = mask & affinity
            if c.honor_taints:
                if taints is None:
                    taints = tolerated_mask(nodes, rows, pod.tolerations)
                mask = mask & taints
            out.append(mask)
        return out

    @staticmethod
    def _domain_counts(
        nodes: NodeTable, rows: IntpArray, c: _Constraint, counting: BoolArray
    ) -> tuple[Int64Array, BoolArray]:
        """(matching pods per value id, which value ids are domains)."""
        size = len(nodes.label_values.get(c.key, ()))
        dom = nodes.label_column(c.key)[rows][counting]
        dom = dom[dom >= 0]
        counts = nodes.match_counts(c.matcher)[rows][counting]
        counts = counts[nodes.label_column(c.key)[rows][counting] >= 0]
        per_domain = np.bincount(dom, weights=counts, minlength=size).astype(np.int64)
        present = np.zeros(size, dtype=bool)
        present[dom] = True
        return per_domain, present

    # ---- filter --------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        if not constraints:
            return None, SKIP
        rows = nodes.valid_rows()
        counting = self._counting_nodes(pod, nodes, rows, constraints, True)
        counts, mins = [], []
        for c, mask in zip(constraints, counting, strict=True):
            per_domain, present = self._domain_counts(nodes, rows, c, mask)
            n_domains = int(present.sum())
            if n_domains == 0 or (c.min_domains is not None and n_domains < c.min_domains):
                mins.append(0)
            else:
                mins.append(int(per_domain[present].min()))
            counts.append(per_domain)
        state.write(_PRE_FILTER_KEY, _FilterState(constraints, tuple(counts), tuple(mins)))
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        s = state.read(_PRE_FILTER_KEY, _FilterState)
        # as kube-scheduler podtopologyspread/filtering.go: constraints are checked in
        # order and the first one a node fails gives its reason.
        missing = np.zeros(len(rows), dtype=bool)
        skewed = np.zeros(len(rows), dtype=bool)
        for c, per_domain, lo in zip(s.constraints, s.domain_counts, s.min_match, strict=True):
            undecided = ~missing & ~skewed
            dom = domain_ids(nodes, c.key, rows)
            has = dom >= 0
            missing |= undecided & ~has
            match = at_domain(per_domain, dom)
            skewed |= undecided & has & (match + c.self_match - lo > c.max_skew)
        rejected = np.stack([missing, skewed & ~missing], axis=1)
        return FilterResult(
            (ERR_REASON_NODE_LABEL_NOT_MATCH, ERR_REASON_CONSTRAINTS_NOT_MATCH),
            rejected,
            (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.UNSCHEDULABLE),
        )

    # ---- score ---------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        constraints = self._constraints(pod, SCHEDULE_ANYWAY)
        if not constraints:
            return SKIP
        require_all = bool(pod.topology_spread_constraints) or not self.system_defaulted
        ignored = np.zeros(len(rows), dtype=bool)
        if require_all:
            for c in constraints:
                ignored |= nodes.label_column(c.key)[rows] < 0
        scored = rows[~ignored]
        all_rows = nodes.valid_rows()
        counting = self._counting_nodes(pod, nodes, all_rows, constraints, require_all)
        weights, counts = [], []
        for c, mask in zip(constraints, counting, strict=True):
            if c.key == HOSTNAME:
                size = len(scored)
                counts.append(np.zeros(0, dtype=np.int64))
            else:
                dom = nodes.label_column(c.key)[scored]
                size = len(np.unique(dom[dom >= 0]))
                # as kube-scheduler podtopologyspread/scoring.go: with system defaults
                # the nodes lacking the key form one more (empty-valued) domain
                if not require_all and bool((dom < 0).any()):
                    size += 1
                per_domain, _ = self._domain_counts(nodes, all_rows, c, mask)
                counts.append(per_domain)
            weights.append(math.log(size + 2))
        state.write(
            _PRE_SCORE_KEY, _ScoreState(constraints, tuple(weights), tuple(counts), ignored)
        )
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        s = state.read(_PRE_SCORE_KEY, _ScoreState)
        total = np.zeros(len(rows), dtype=np.float64)
        for c, w, per_domain in zip(s.constraints, s.weights, s.domain_counts, strict=True):
            dom = domain_ids(nodes, c.key, rows)
            has = dom >= 0
            if c.key == HOSTNAME:
                cnt = nodes.match_counts(c.matcher)[rows]
            else:
                cnt = at_domain(per_domain, dom)
            total += np.where(has, cnt * w + (c.max_skew - 1), 0.0)
        # Go's math.Round: halves away from zero
        return np.floor(total + 0.5).astype(np.int64)

    def normalize_score(self, state: CycleState, pod: Pod, scores: Int64Array) -> Int64Array:
        s = state.read(_PRE_SCORE_KEY, _ScoreState)
        live = ~s.ignored
        if not live.any():
            return np.zeros(len(scores), dtype=np.int64)
        lo, hi = int(scores[live].min()), int(scores[live].max())
        if hi == 0:
            out = np.full(len(scores), 100, dtype=np.int64)
        else:
            out = 100 * (hi + lo - scores) // hi
        return np.where(live, out, 0)

    # ---- queueing hints ------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def pod_changed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            for obj in (old, new):
                if isinstance(obj, Pod) and obj.namespace == pod.namespace:
                    for c in pod.topology_spread_constraints:
                        if c.label_selector is not None and c.label_selector.matches(obj.labels):
                            return QueueingHint.QUEUE
            return QueueingHint.SKIP

        def node_changed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            return QueueingHint.QUEUE

        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.ASSIGNED_POD,
                    ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_POD_LABEL,
                ),
                pod_changed,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE,
                    ActionType.ADD
                    | ActionType.DELETE
                    | ActionType.UPDATE_NODE_LABEL
                    | ActionType.UPDATE_NODE_TAINT,
                ),
                node_changed,
            ),
        ]
