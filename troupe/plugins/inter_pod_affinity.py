"""InterPodAffinity: required and preferred pod affinity and anti-affinity,
including the symmetric check against existing pods' anti-affinity
(interpodaffinity/filtering.go, scoring.go).

Columnar like PodTopologySpread: the incoming pod's terms are counted from the
node table's per-node match counters, and the terms that placed pods carry
are kept by the node table as per-node term counters (`term_counters`); one
`np.bincount` by the topology key's value ids turns either into per-domain
counts. No cycle walks the existing pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from troupe.api.types import LabelSelector, Pod, PodAffinityTerm, Requirement
from troupe.core.snapshot import NodeTable, PodMatcher, term_matcher
from troupe.framework.columns import at_domain, domain_ids, per_domain_sum
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

ERR_REASON_EXISTING_ANTI_AFFINITY: Final = (
    "node(s) didn't satisfy existing pods anti-affinity rules"
)
ERR_REASON_AFFINITY: Final = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY: Final = "node(s) didn't match pod anti-affinity rules"
_PRE_FILTER_KEY: Final = "PreFilterInterPodAffinity"
_PRE_SCORE_KEY: Final = "PreScoreInterPodAffinity"


@dataclass(frozen=True, slots=True)
class _Term:
    key: str
    matcher: PodMatcher


@dataclass(frozen=True, slots=True)
class _FilterState:
    affinity: tuple[tuple[_Term, Int64Array], ...]  # per term, pods matching all terms per domain
    first_of_group: bool  # no pod matches all affinity terms, and the pod matches them all
    anti: tuple[tuple[_Term, Int64Array], ...]
    existing_anti: tuple[tuple[str, Int64Array], ...]  # (key, blocked pods per domain)


@dataclass(frozen=True, slots=True)
class _ScoreState:
    by_key: tuple[tuple[str, Any], ...]  # (topology key, score per domain)


def _per_domain(nodes: NodeTable, key: str, per_row: Int64Array) -> Int64Array:
    """Sum a per-row count over the rows of each value of `key` (empty if no node has it)."""
    return per_domain_sum(nodes, key, nodes.valid_rows(), per_row).astype(np.int64)


def _at(nodes: NodeTable, key: str, per_domain: Any, rows: IntpArray) -> tuple[Any, Any]:
    """(value of the per-domain array at each row's domain, whether the row has the key)."""
    dom = domain_ids(nodes, key, rows)
    return at_domain(per_domain, dom), dom >= 0


def _all_terms_matcher(terms: Sequence[_Term]) -> PodMatcher:
    """The pods that match every term (kube-scheduler's podMatchesAllAffinityTerms):
    the namespace sets intersected, the selectors' requirements joined."""
    namespaces: frozenset[str] | None = None
    requirements: list[Requirement] = []
    for t in terms:
        ns = t.matcher.namespaces
        if ns is not None:
            namespaces = ns if namespaces is None else namespaces & ns
        requirements += t.matcher.selector.requirements
    return PodMatcher(namespaces, LabelSelector(tuple(requirements)))


class InterPodAffinity(
    PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, ScoreExtensions, EnqueueExtensions
):
    NAME: Final = "InterPodAffinity"

    def __init__(self, handle: Handle, hard_weight: int, ignore_preferred_of_existing: bool):
        self.handle = handle
        self.hard_weight = hard_weight
        self.ignore_preferred_of_existing = ignore_preferred_of_existing

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            if k not in ("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"):
                raise PluginArgsError(str(k), "unknown field")
        w = args.get("hardPodAffinityWeight", 1)
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w <= 100:
            raise PluginArgsError("hardPodAffinityWeight", f"must be in the range 0-100, got {w!r}")
        ign = args.get("ignorePreferredTermsOfExistingPods", False)
        if not isinstance(ign, bool):
            raise PluginArgsError("ignorePreferredTermsOfExistingPods", "must be true or false")
        return cls(handle, w, ign)

    def _terms(self, pod: Pod, terms: Sequence[PodAffinityTerm], nodes: NodeTable) -> list[_Term]:
        return [_Term(t.topology_key, term_matcher(t, pod, nodes.namespace_labels)) for t in terms]

    # ---- filter --------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        aff = pod.pod_affinity.required if pod.pod_affinity else ()
        anti = pod.pod_anti_affinity.required if pod.pod_anti_affinity else ()
        existing = [(tk, c) for tk, c in nodes.term_counters.items() if tk.kind == "anti"]
        if not aff and not anti and not existing:
            return None, SKIP
        aff_terms = self._terms(pod, aff, nodes)
        # as kube-scheduler interpodaffinity/filtering.go: an existing pod counts for
        # the required affinity only if it matches all of the pod's terms, and then in
        # the domain of every term's key on its node.
        affinity: tuple[tuple[_Term, Int64Array], ...] = ()
        if aff_terms:
            all_match = nodes.match_counts(_all_terms_matcher(aff_terms))
            affinity = tuple((t, _per_domain(nodes, t.key, all_match)) for t in aff_terms)
        # "the first pod of a collection": no pod matching all terms sits on a node
        # with the terms' keys, and the pod matches its own terms.
        first = (
            bool(aff_terms)
            and all(int(c.sum()) == 0 for _, c in affinity)
            and all(t.matcher.matches(pod) for t in aff_terms)
        )
        anti_counts = tuple(
            (t, _per_domain(nodes, t.key, nodes.match_counts(t.matcher)))
            for t in self._terms(pod, anti, nodes)
        )
        blocked = tuple(
            (tk.topology_key, _per_domain(nodes, tk.topology_key, c))
            for tk, c in existing
            if tk.matcher.matches(pod)
        )
        if not aff and not anti and all(int(c.sum()) == 0 for _, c in blocked):
            # as kube-scheduler: no term of the pod, and no existing pod's anti-affinity
            # term matches it in a domain that some node carries
            return None, SKIP
        state.write(_PRE_FILTER_KEY, _FilterState(affinity, first, anti_counts, blocked))
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        s = state.read(_PRE_FILTER_KEY, _FilterState)
        n = len(rows)
        aff_fail = np.zeros(n, dtype=bool)
        if s.affinity:
            all_keys = np.ones(n, dtype=bool)
            pods_exist = np.ones(n, dtype=bool)
            for t, per_domain in s.affinity:
                cnt, has = _at(nodes, t.key, per_domain, rows)
                all_keys &= has
                pods_exist &= cnt > 0
            aff_fail = ~all_keys | (~pods_exist & (not s.first_of_group))
        anti_fail = np.zeros(n, dtype=bool)
        for t, per_domain in s.anti:
            cnt, _ = _at(nodes, t.key, per_domain, rows)
            anti_fail |= cnt > 0
        existing_fail = np.zeros(n, dtype=bool)
        for key, per_domain in s.existing_anti:
            cnt, _ = _at(nodes, key, per_domain, rows)
            existing_fail |= cnt > 0
        anti_fail &= ~aff_fail
        existing_fail &= ~aff_fail & ~anti_fail
        return FilterResult(
            (ERR_REASON_AFFINITY, ERR_REASON_ANTI_AFFINITY, ERR_REASON_EXISTING_ANTI_AFFINITY),
            np.stack([aff_fail, anti_fail, existing_fail], axis=1),
            (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE),
        )

    # ---- score ---------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        scores: dict[str, Any] = {}

        def add(key: str, per_domain: Int64Array, weight: int) -> None:
            cur = scores.get(key)
            if cur is None:
                scores[key] = per_domain.astype(np.float64) * weight
            else:
                n = max(len(cur), len(per_domain))
                out = np.zeros(n)
                out[: len(cur)] += cur
                out[: len(per_domain)] += per_domain * weight
                scores[key] = out

        aff, anti = pod.pod_affinity, pod.pod_anti_affinity
        for sign, terms in (
            (1, aff.preferred if aff else ()),
            (-1, anti.preferred if anti else ()),
        ):
            for w in terms:
                m = term_matcher(w.term, pod, nodes.namespace_labels)
                add(
                    w.term.topology_key,
                    _per_domain(nodes, w.term.topology_key, nodes.match_counts(m)),
                    sign * w.weight,
                )
        for tk, per_row in nodes.term_counters.items():
            if tk.kind == "affinity":
                weight = self.hard_weight
            elif tk.kind == "preferred" and not self.ignore_preferred_of_existing:
                weight = tk.weight
            elif tk.kind == "preferred-anti" and not self.ignore_preferred_of_existing:
                weight = -tk.weight
            else:
                continue
            if weight and tk.matcher.matches(pod):
                add(tk.topology_key, _per_domain(nodes, tk.topology_key, per_row), weight)
        if not scores:
            return SKIP
        state.write(_PRE_SCORE_KEY, _ScoreState(tuple(scores.items())))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        s = state.read(_PRE_SCORE_KEY, _ScoreState)
        total = np.zeros(len(rows), dtype=np.float64)
        for key, per_domain in s.by_key:
            val, _ = _at(nodes, key, per_domain, rows)
            total += val
        return total.astype(np.int64)

    def normalize_score(self, state: CycleState, pod: Pod, scores: Int64Array) -> Int64Array:
        if not len(scores):
            return scores
        lo, hi = int(scores.min()), int(scores.max())
        if hi == lo:
            return np.zeros(len(scores), dtype=np.int64)
        return (100 * ((scores - lo) / (hi - lo))).astype(np.int64)

    # ---- queueing hints ------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def pod_changed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            """Queue if the changed pod is one the waiting pod's terms select (an
            affinity target appeared, an anti-affinity one left), or carried
            anti-affinity of its own (it may have been what blocked the pod)."""
            aff = pod.pod_affinity.required if pod.pod_affinity else ()
            anti = pod.pod_anti_affinity.required if pod.pod_anti_affinity else ()
            if isinstance(old, Pod) and old.pod_anti_affinity is not None:
                return QueueingHint.QUEUE
            for changed in (old, new):
                if isinstance(changed, Pod) and any(
                    term_matcher(t, pod, {}).matches(changed) for t in (*aff, *anti)
                ):
                    return QueueingHint.QUEUE
            return QueueingHint.SKIP

        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.ASSIGNED_POD,
                    ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_POD_LABEL,
                ),
                pod_changed,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
        ]
