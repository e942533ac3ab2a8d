"""The pod's scheduling cycle (kube-scheduler's schedule_one.go): pop, snapshot,
PreFilter, Filter (sampled from a rotating start), PostFilter on failure,
PreScore, Score, select, assume, Reserve, Permit; failures requeued with the
plugins that rejected the pod. Diagnostics use kube-scheduler's FitError words."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

import numpy as np

from troupe.api.types import (
    NodeName,
    Pod,
)
from troupe.core.binding_cycle import BindingCycle
from troupe.core.cache import PodAlreadyInCache
from troupe.core.context import SchedulerContext
from troupe.core.failures import Failures
from troupe.core.metrics import PLUGIN_METRICS_SAMPLE_PERCENT
from troupe.framework.cycle_state import CycleState
from troupe.framework.filtering import FilterOutcome
from troupe.framework.fit import FitError, NodeSubset, ScheduleResult, fit_error_message
from troupe.framework.interface import (
    MAX_NODE_SCORE,
    IntpArray,
    NodeToStatus,
    QueuedPodInfo,
)
from troupe.framework.nominator import nominated_rows
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status

log = logging.getLogger(__name__)

MIN_FEASIBLE_NODES_TO_FIND: Final = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: Final = 5
NO_NODES_AVAILABLE: Final = "no nodes available to schedule pods"
UNREADABLE_NODE: Final = "node(s) could not be read"
# troupe.scoreWatermark: feasible nodes are scored this many at a time.
WATERMARK_CHUNK: Final = 100


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """As kube-scheduler's numFeasibleNodesToFind (schedule_one.go)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = 50 - num_all_nodes // 125
        if percentage < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            percentage = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    num = num_all_nodes * percentage // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


class PodCycle:
    """One pod's scheduling cycle, from a popped pod to its binding cycle started
    or its failure handled; `schedule_pod` (the search) is what the group cycle
    runs for each member too."""

    def __init__(self, ctx: SchedulerContext, failures: Failures, binder: BindingCycle) -> None:
        self.ctx = ctx
        self.failures = failures
        self.binder = binder

    def schedule(
        self, profile: Profile, qpi: QueuedPodInfo, within: NodeSubset | None = None
    ) -> None:
        """Search a node for the pod (among `within`) and commit it there, or
        handle the failure."""
        ctx = self.ctx
        t0 = time.perf_counter()
        state = CycleState()
        state.sample_plugin_metrics = ctx.rng.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        result = self.schedule_pod(profile, state, qpi.pod, within=within)
        if ctx.observe is not None:
            ctx.observe(profile, qpi.pod, result, "", within.reason if within else "")
        if isinstance(result, ScheduleResult):
            ctx.queue.record_attempt(True)
            ok = self.commit(profile, state, qpi, result.node)
            outcome = "scheduled" if ok else "unschedulable"
        else:
            self.failures.fail(profile, qpi, result)
            outcome = self.failures.outcome(result)
        self.failures.count_attempt(profile, outcome, time.perf_counter() - t0)

    def commit(
        self, profile: Profile, state: CycleState, qpi: QueuedPodInfo, node: NodeName
    ) -> bool:
        """Assume the pod on `node`, run Reserve and Permit, start its binding cycle."""
        ctx = self.ctx
        pod = qpi.pod
        try:
            ctx.cache.assume_pod(pod, node)
        except PodAlreadyInCache:
            ctx.counters.dropped_known += 1
            log.info("not assuming pod %s: the cache holds it already", pod.key)
            ctx.queue.done(pod.key)
            return False
        ctx.handle.nominator.delete(pod.key)
        try:
            st = profile.run_reserve(state, pod, node)
            if st.is_success:
                st = profile.run_permit(state, pod, node)
        except BaseException:
            # Nothing may stay assumed without a binding cycle to confirm or forget it.
            with contextlib.suppress(Exception):
                profile.run_unreserve(state, pod, node)
            ctx.cache.forget_pod(pod.key)
            raise
        if not (st.is_success or st.is_wait):
            profile.run_unreserve(state, pod, node)
            ctx.cache.forget_pod(pod.key)
            self.failures.fail(profile, qpi, st)
            return False
        ctx.spawn(self.binder.run(profile, state, qpi, node))
        return True

    def _nominated_rows(self, pod: Pod) -> dict[int, list[Pod]]:
        """Per snapshot row, the nominated pods Filter's first pass adds."""
        ctx = self.ctx
        return nominated_rows(
            ctx.handle.nominator, ctx.snapshot, pod, lambda k: ctx.cache.pod(k) is not None
        )

    def _no_nodes_message(self) -> str:
        """kube-scheduler's "no nodes available", unless nodes exist that could not
        be read: then they are counted, with the first one's problem (the field),
        so that the pod says why instead of that no node exists."""
        bad = sorted((b.name, b.message) for b in self.ctx.invalid.values() if b.kind == "Node")
        if not bad:
            return NO_NODES_AVAILABLE
        name, why = bad[0]
        return fit_error_message(len(bad), {f"{UNREADABLE_NODE} (node {name}: {why})": len(bad)})

    def schedule_pod(
        self,
        profile: Profile,
        state: CycleState,
        pod: Pod,
        post_filter: bool = True,
        within: NodeSubset | None = None,
    ) -> ScheduleResult | FitError | Status:
        """kube-scheduler's schedulePod: the node for `pod`, or why none. `within`:
        only those nodes are candidates (the others are counted under its reason)."""
        snap = self.ctx.snapshot
        n_all = snap.num_nodes
        if n_all == 0:
            return FitError(self._no_nodes_message(), frozenset(), frozenset())
        pre, st = profile.run_pre_filter(state, pod, snap)
        if not st.is_success:
            if st.code is Code.ERROR:
                return st
            msg = fit_error_message(n_all, {}, pre_filter_msg=st.message)
            pending = frozenset({st.plugin}) if st.code is Code.PENDING else frozenset()
            fe = FitError(msg, frozenset({st.plugin}), pending, st.code)
            if not post_filter:
                return fe
            return self._post_filter(profile, state, pod, n_all, {}, fe, absent=st)
        all_rows = snap.valid_rows()
        counts_outside: dict[str, int] = {}
        absent = 0
        absent_reason = ""
        if pre is not None and pre.node_names is not None:
            rows = np.array(
                sorted(snap.row_of[n] for n in pre.node_names if n in snap.row_of), dtype=np.intp
            )
            absent = n_all - len(rows)
            absent_reason = (
                "node(s) didn't satisfy plugin(s) ["
                + ", ".join(sorted(n for n, _ in profile.pre_filter))
                + "]"
            )
        else:
            rows = all_rows
        if within is not None:
            # A gang's domain: the nodes outside it are not candidates.
            if rows is all_rows:
                kept = within.rows  # valid rows already, sorted
            else:
                kept = rows[np.isin(rows, within.rows, assume_unique=True)]
            outside = len(rows) - len(kept)
            rows = kept
            if outside:
                counts_outside = {within.reason: outside}
        watermark = self.ctx.config.troupe.score_watermark
        if watermark is not None:
            to_find = len(rows)  # every feasible node is a candidate
        else:
            percentage = profile.percentage_of_nodes_to_score
            if percentage is None:
                percentage = self.ctx.config.percentage_of_nodes_to_score
            to_find = num_feasible_nodes_to_find(percentage, len(rows))
        start = self.ctx.next_start_node_index % len(rows) if len(rows) else 0
        on_rows = self._nominated_rows(pod)
        nominated = self._nominated_node_fits(profile, state, pod, rows, on_rows)
        if nominated is not None:
            return ScheduleResult(nominated, 1, 1)
        feasible, processed, outcomes = self._find_feasible(
            profile, state, pod, rows, to_find, on_rows
        )
        if isinstance(feasible, Status):
            return feasible
        if len(rows):
            self.ctx.next_start_node_index = (self.ctx.next_start_node_index + processed) % len(
                rows
            )
        if len(feasible) == 0:
            counts: dict[str, int] = {}
            unsched: set[str] = set()
            for o in outcomes:
                for reason, n in o.reason_counts().items():
                    counts[reason] = counts.get(reason, 0) + n
                unsched |= o.unschedulable_plugins()
            if absent:
                counts[absent_reason] = counts.get(absent_reason, 0) + absent
            for reason, n in counts_outside.items():
                counts[reason] = counts.get(reason, 0) + n
            fe = FitError(fit_error_message(n_all, counts), frozenset(unsched), frozenset())
            if not post_filter:
                return fe
            return self._post_filter(profile, state, pod, n_all, counts, fe, outcomes)
        if len(feasible) == 1:
            return ScheduleResult(snap.name(int(feasible[0])), processed, 1)
        st = profile.run_pre_score(state, pod, snap, feasible)
        if not st.is_success:
            return st
        if watermark is not None:
            got = self._score_to_watermark(profile, state, pod, feasible, watermark)
            if isinstance(got, Status):
                return got
            scores, scored = got
            if scored < len(feasible):
                # The next cycle starts after the last node scored, not after the
                # last node filtered (all of them), so that the rotation goes on.
                k = int(np.searchsorted(rows, feasible[scored - 1]))
                self.ctx.next_start_node_index = (start + (k - start) % len(rows) + 1) % len(rows)
            feasible = feasible[:scored]
        else:
            scores = profile.run_score(state, pod, snap, feasible)
            if isinstance(scores, Status):
                return scores
        best = np.flatnonzero(scores == scores.max())
        pick = int(best[0]) if len(best) == 1 else int(best[self.ctx.rng.randrange(len(best))])
        return ScheduleResult(snap.name(int(feasible[pick])), processed, len(feasible))

    def _score_to_watermark(
        self,
        profile: Profile,
        state: CycleState,
        pod: Pod,
        feasible: IntpArray,
        fraction: float,
    ) -> tuple[Any, int] | Status:
        """troupe.scoreWatermark: score the feasible nodes in the rotating order in
        which Filter found them, WATERMARK_CHUNK at a time, and stop after the
        first chunk in which some node's total score reaches the watermark
        (`fraction` x 100 x the sum of the Score weights of the plugins that
        score this pod: one whose PreScore said Skip adds nothing to any node,
        and counting its weight would put the watermark out of reach). The nodes
        scored so far are then scored as one set (NormalizeScore sees them
        together, as it sees a sample) and the best of them is chosen. If no
        chunk reaches the watermark, every feasible node was scored: the same
        choice as percentageOfNodesToScore 100. Returns (scores, how many of
        `feasible` were scored)."""
        snap = self.ctx.snapshot
        skip = state.skip_score
        mark = (
            fraction * MAX_NODE_SCORE * sum(w for name, *_, w in profile.scores if name not in skip)
        )
        n = len(feasible)
        scored = n
        scores: Any = None
        for pos in range(0, n, WATERMARK_CHUNK):
            part = feasible[pos : pos + WATERMARK_CHUNK]
            scores = profile.run_score(state, pod, snap, part)
            if isinstance(scores, Status):
                return scores
            if scores.max() >= mark:
                scored = pos + len(part)
                break
        if scored > WATERMARK_CHUNK:
            scores = profile.run_score(state, pod, snap, feasible[:scored])
            if isinstance(scores, Status):
                return scores
        return scores, scored

    def _nominated_node_fits(
        self,
        profile: Profile,
        state: CycleState,
        pod: Pod,
        rows: IntpArray,
        on_rows: Mapping[int, Sequence[Pod]],
    ) -> NodeName | None:
        """The pod's nominated node, if it passes Filter: tried first, and taken
        without scoring (kube-scheduler's evaluateNominatedNode)."""
        node = self.ctx.handle.nominator.node_of(pod.key)
        row = self.ctx.snapshot.row_of.get(node) if node else None
        if node is None or row is None or row not in rows:
            return None
        out = profile.run_filters_with_nominated(
            state, pod, self.ctx.snapshot, np.array([row], dtype=np.intp), on_rows
        )
        if isinstance(out, Status) or not out.feasible[0]:
            return None
        return node

    def _find_feasible(
        self,
        profile: Profile,
        state: CycleState,
        pod: Pod,
        rows: IntpArray,
        to_find: int,
        on_rows: Mapping[int, Sequence[Pod]],
    ) -> tuple[IntpArray | Status, int, list[FilterOutcome]]:
        n = len(rows)
        if n == 0:
            return rows, 0, []
        start = self.ctx.next_start_node_index % n
        ordered = rows if start == 0 else np.concatenate((rows[start:], rows[:start]))
        chunk = max(to_find * 2, 1024)
        found: list[IntpArray] = []
        n_found = 0
        outcomes: list[FilterOutcome] = []
        pos = 0
        while pos < n and n_found < to_find:
            part = ordered[pos : pos + chunk]
            out = profile.run_filters_with_nominated(state, pod, self.ctx.snapshot, part, on_rows)
            if isinstance(out, Status):
                return out, 0, outcomes
            outcomes.append(out)
            ok = np.flatnonzero(out.feasible)
            need = to_find - n_found
            if len(ok) >= need:
                ok = ok[:need]
                processed_here = int(ok[-1]) + 1
                found.append(part[ok])
                n_found += len(ok)
                pos += processed_here
                break
            found.append(part[ok])
            n_found += len(ok)
            pos += len(part)
        feasible = (
            found[0]
            if len(found) == 1
            else (np.concatenate(found) if found else np.empty(0, dtype=np.intp))
        )
        return feasible, pos, outcomes

    def _post_filter(
        self,
        profile: Profile,
        state: CycleState,
        pod: Pod,
        n_all: int,
        counts: Mapping[str, int],
        fe: FitError,
        outcomes: Iterable[FilterOutcome] = (),
        absent: Status | None = None,
    ) -> FitError:
        if not profile.post_filter:
            return fe
        statuses: dict[str, Status] = {}
        for o in outcomes:
            statuses.update(o.node_statuses(self.ctx.snapshot))
        nominated, st = profile.run_post_filter(state, pod, NodeToStatus(statuses, n_all, absent))
        if st.is_success or not st.message:
            return replace(fe, nominated_node=nominated)
        pending = fe.pending_plugins | ({st.plugin} if st.code is Code.PENDING else set())
        return FitError(
            fe.message + f" {st.message}.",
            fe.unschedulable_plugins | {st.plugin},
            frozenset(pending),
            fe.code,
            nominated,
        )
