"""The pod's scheduling cycle (kube-scheduler's schedule_one.go): pop, snapshot,
PreFilter, Filter (sampled from a rotating start), PostFilter on failure,
PreScore, Score, select, assume, Reserve, Permit; failures requeued with the
plugins that rejected the pod. Diagnostics use kube-scheduler's FitError words."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from troupe.api.types import (
    NodeName,
    Pod,
)
from troupe.cache import PodAlreadyInCache
from troupe.framework.cycle_state import CycleState
from troupe.framework.filtering import FilterOutcome
from troupe.framework.interface import (
    MAX_NODE_SCORE,
    IntpArray,
    NodeToStatus,
    QueuedPodInfo,
)
from troupe.framework.nominator import nominated_rows
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status
from troupe.metrics import PLUGIN_METRICS_SAMPLE_PERCENT
from troupe.snapshot import pod_charge
from troupe.state import SchedulerState, pod_ref, pod_scheduled_condition

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


def fit_error_message(
    num_all_nodes: int,
    counts: Mapping[str, int],
    pre_filter_msg: str = "",
    post_filter_msg: str = "",
) -> str:
    """kube-scheduler's FitError.Error()."""
    msg = f"0/{num_all_nodes} nodes are available:"
    if pre_filter_msg:
        msg += f" {pre_filter_msg}."
    else:
        parts = sorted(f"{n} {reason}" for reason, n in counts.items())
        if parts:
            msg += f" {', '.join(parts)}."
    if post_filter_msg:
        msg += f" {post_filter_msg}."
    return msg


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    node: NodeName
    evaluated: int
    feasible: int


@dataclass(frozen=True, slots=True)
class FitError:
    message: str
    unschedulable_plugins: frozenset[str]
    pending_plugins: frozenset[str]
    code: Code = Code.UNSCHEDULABLE
    # PostFilter's nomination: a node (preemption made room there), "" (clear the
    # pod's nomination), or None (leave it as it is).
    nominated_node: str | None = None


class PodCycle(SchedulerState):
    """One pod's scheduling cycle; `schedule_one` is what the loop calls."""

    def schedule_one(self) -> bool:
        """Run one scheduling cycle. Returns False when the active queue was empty.

        Never raises: a cycle that fails with an exception is logged with its
        traceback and counted (`statistics().loop_errors`), and the pods it held
        go back to the backoffQ (or are dropped if the cache holds them now).
        """
        qpi = self.queue.pop()
        if qpi is None:
            return False
        self.cycle += 1
        self._cycle_pods = [qpi]
        try:
            self._schedule_popped(qpi)
        except Exception:
            self._loop_errors += 1
            self.metrics.loop_error("scheduling")
            log.exception("scheduling cycle %d of pod %s failed", self.cycle, qpi.pod.key)
            self._give_back(self._cycle_pods)
        finally:
            self._cycle_pods = []
        return True

    def _give_back(self, held: list[QueuedPodInfo]) -> None:
        """After a cycle raised: requeue with backoff what it held and did not place."""
        for q in held:
            key = q.pod.key
            try:
                if self.cache.pod(key) is None and self.cache.known_pod(key) is not None:
                    self.queue.add_backoff(q)
                self.queue.done(key)
            except Exception:
                log.exception("could not requeue pod %s after a failed cycle", key)

    def _schedule_popped(self, qpi: QueuedPodInfo) -> None:
        pod = qpi.pod
        profile = self.profiles.get(pod.scheduler_name)
        if profile is None or pod.deleting:
            self.queue.done(pod.key)
            return
        if self.cache.pod(pod.key) is not None:
            # Bound or assumed already (a stale pending event got it queued).
            self._dropped_known += 1
            log.info("dropping pod %s from the queue: the cache holds it already", pod.key)
            self.queue.done(pod.key)
            return
        self.cache.update_snapshot(self.snapshot)
        t0 = time.perf_counter()
        group = pod.group_key
        if group is not None and self.config.troupe.group_cycle and self._gang_profile(profile):
            pg = self.cache.pod_group(group)
            if pg is not None and pg.gang and not self._group_admitted(group, pg.min_member):
                self._schedule_group(profile, qpi, pg)
                return
        state = CycleState()
        state.sample_plugin_metrics = self.rng.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        result = self._schedule_pod(profile, state, pod)
        if isinstance(result, ScheduleResult):
            self.queue.record_attempt(True)
            ok = self._commit(profile, state, qpi, result.node)
            outcome = "scheduled" if ok else "unschedulable"
        else:
            self._fail(profile, qpi, result)
            outcome = self._outcome(result)
        self._count_attempt(profile, outcome, time.perf_counter() - t0)

    def _count_attempt(self, profile: Profile, outcome: str, seconds: float) -> None:
        """One pod's scheduling attempt: "scheduled", "unschedulable" or "error"."""
        m = self.metrics
        m.schedule_attempts.labels(outcome, profile.scheduler_name).inc()
        m.attempt_duration.labels(outcome, profile.scheduler_name).observe(seconds)

    @staticmethod
    def _outcome(result: FitError | Status) -> str:
        return (
            "error" if isinstance(result, Status) and result.code is Code.ERROR else "unschedulable"
        )

    def _fail(self, profile: Profile, qpi: QueuedPodInfo, result: FitError | Status) -> None:
        self._failed += 1
        if isinstance(result, FitError) and result.nominated_node is not None:
            self._nominate(qpi.pod, result.nominated_node)
        if isinstance(result, FitError):
            self._handle_failure(
                profile,
                qpi,
                result.message,
                result.code,
                result.unschedulable_plugins,
                result.pending_plugins,
            )
        else:
            self._handle_failure(
                profile,
                qpi,
                result.message,
                result.code,
                frozenset({result.plugin}) if result.plugin else frozenset(),
                frozenset(),
            )

    def _nominate(self, pod: Pod, node: str) -> None:
        """Record (or, with "", clear) the pod's nominated node, here and in its status."""
        nominator = self.handle.nominator
        if node:
            if nominator.node_of(pod.key) == node:
                return
            nominator.add(pod, node)
        else:
            status = pod.raw.get("status")
            had = isinstance(status, Mapping) and bool(status.get("nominatedNodeName"))
            if nominator.delete(pod.key) is None and not had:
                return
        self._spawn(self._write_nomination(pod, node or None))

    async def _write_nomination(self, pod: Pod, node: str | None) -> None:
        try:
            await self.client.set_nominated_node(pod.key, node)
        except Exception as e:
            log.warning("could not set the nominated node of %s: %s", pod.key, e)

    def _nominated_rows(self, pod: Pod) -> dict[int, list[Pod]]:
        """Per snapshot row, the nominated pods Filter's first pass adds."""
        return nominated_rows(
            self.handle.nominator, self.snapshot, pod, lambda k: self.cache.pod(k) is not None
        )

    @contextlib.contextmanager
    def _nominated_charged(self, pod: Pod) -> Iterator[None]:
        """Charge the pods nominated with equal or higher priority where they are
        nominated (kube-scheduler's addGENominatedPods), for the group cycle's
        search. A pod's Filter passes and preemption's dry runs use
        `Profile.run_filters_with_nominated` instead (both passes)."""
        nominator = self.handle.nominator
        if not len(nominator):
            yield
            return
        snap = self.snapshot
        charged = []
        try:
            for node in list(nominator.nodes()):
                row = snap.row_of.get(node)
                if row is None:
                    continue
                for p in nominator.pods_on(node):
                    if p.key == pod.key or p.priority < pod.priority or p.key in snap.pods[row]:
                        continue
                    if self.cache.pod(p.key) is not None:
                        continue
                    ch = pod_charge(p, self.isolated)
                    snap.charge(row, p, ch, +1)
                    charged.append((row, p, ch))
            yield
        finally:
            for row, p, ch in reversed(charged):
                snap.charge(row, p, ch, -1)

    def _commit(
        self, profile: Profile, state: CycleState, qpi: QueuedPodInfo, node: NodeName
    ) -> bool:
        """Assume the pod on `node`, run Reserve and Permit, start its binding cycle."""
        pod = qpi.pod
        try:
            self.cache.assume_pod(pod, node)
        except PodAlreadyInCache:
            self._dropped_known += 1
            log.info("not assuming pod %s: the cache holds it already", pod.key)
            self.queue.done(pod.key)
            return False
        self.handle.nominator.delete(pod.key)
        try:
            st = profile.run_reserve(state, pod, node)
            if st.is_success:
                st = profile.run_permit(state, pod, node)
        except BaseException:
            # Nothing may stay assumed without a binding cycle to confirm or forget it.
            with contextlib.suppress(Exception):
                profile.run_unreserve(state, pod, node)
            self.cache.forget_pod(pod.key)
            raise
        if not (st.is_success or st.is_wait):
            profile.run_unreserve(state, pod, node)
            self.cache.forget_pod(pod.key)
            self._fail(profile, qpi, st)
            return False
        self._spawn(self._binding_cycle(profile, state, qpi, node))
        return True

    def _no_nodes_message(self) -> str:
        """kube-scheduler's "no nodes available", unless nodes exist that could not
        be read: then they are counted, with the first one's problem (the field),
        so that the pod says why instead of that no node exists."""
        bad = sorted((b.name, b.message) for b in self.invalid.values() if b.kind == "Node")
        if not bad:
            return NO_NODES_AVAILABLE
        name, why = bad[0]
        return fit_error_message(len(bad), {f"{UNREADABLE_NODE} (node {name}: {why})": len(bad)})

    def _schedule_pod(
        self, profile: Profile, state: CycleState, pod: Pod, post_filter: bool = True
    ) -> ScheduleResult | FitError | Status:
        snap = self.snapshot
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
        watermark = self.config.troupe.score_watermark
        if watermark is not None:
            to_find = len(rows)  # every feasible node is a candidate
        else:
            percentage = profile.percentage_of_nodes_to_score
            if percentage is None:
                percentage = self.config.percentage_of_nodes_to_score
            to_find = num_feasible_nodes_to_find(percentage, len(rows))
        start = self.next_start_node_index % len(rows) if len(rows) else 0
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
            self.next_start_node_index = (self.next_start_node_index + processed) % len(rows)
        if len(feasible) == 0:
            counts: dict[str, int] = {}
            unsched: set[str] = set()
            for o in outcomes:
                for reason, n in o.reason_counts().items():
                    counts[reason] = counts.get(reason, 0) + n
                unsched |= o.unschedulable_plugins()
            if absent:
                counts[absent_reason] = counts.get(absent_reason, 0) + absent
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
                self.next_start_node_index = (start + (k - start) % len(rows) + 1) % len(rows)
            feasible = feasible[:scored]
        else:
            scores = profile.run_score(state, pod, snap, feasible)
            if isinstance(scores, Status):
                return scores
        best = np.flatnonzero(scores == scores.max())
        pick = int(best[0]) if len(best) == 1 else int(best[self.rng.randrange(len(best))])
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
        snap = self.snapshot
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
        node = self.handle.nominator.node_of(pod.key)
        row = self.snapshot.row_of.get(node) if node else None
        if node is None or row is None or row not in rows:
            return None
        out = profile.run_filters_with_nominated(
            state, pod, self.snapshot, np.array([row], dtype=np.intp), on_rows
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
        start = self.next_start_node_index % n
        ordered = rows if start == 0 else np.concatenate((rows[start:], rows[:start]))
        chunk = max(to_find * 2, 1024)
        found: list[IntpArray] = []
        n_found = 0
        outcomes: list[FilterOutcome] = []
        pos = 0
        while pos < n and n_found < to_find:
            part = ordered[pos : pos + chunk]
            out = profile.run_filters_with_nominated(state, pod, self.snapshot, part, on_rows)
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
            statuses.update(o.node_statuses(self.snapshot))
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

    def _handle_failure(
        self,
        profile: Profile,
        qpi: QueuedPodInfo,
        message: str,
        code: Code,
        plugins: frozenset[str],
        pending: frozenset[str],
    ) -> None:
        self.queue.record_attempt(False)
        pod = qpi.pod
        qpi.message = message
        self.last_failure[pod.key] = message
        self._failure_codes[pod.key] = code
        log.info("pod %s is unschedulable: %s", pod.key, message)
        if code is Code.ERROR:
            # No plugin rejected it: it no longer counts for the last attempt's rejectors.
            qpi.unschedulable_plugins = qpi.pending_plugins = frozenset()
            self.queue.add_backoff(qpi)
        else:
            qpi.unschedulable_plugins = plugins
            qpi.pending_plugins = pending
            self.queue.add_unschedulable(qpi, self.cycle)
        self.queue.done(pod.key)
        self._spawn(self._report_failure(pod_ref(pod), message, pod_scheduled_condition(pod.raw)))
