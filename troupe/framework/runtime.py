"""The runtime that runs one profile's plugins at each extension point.

It owns the plugin boundary: a plugin's exception is logged and becomes an
ERROR status here, and nowhere else. Filter plugins run in configured order,
each only on the rows still feasible ("stop at the first failing predicate");
the first rejecting plugin and its reasons are kept per node for diagnostics.
Score plugins' results are normalised, range-checked, weighted and summed.
Plugins that implement only the per-node forms are adapted to columns here.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np

from troupe.api.types import NodeName, Pod, PodKey
from troupe.core.snapshot import NodeTable, pod_charge
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import ClusterEventWithHint
from troupe.framework.filtering import FilterOutcome, FilterResult, FilterStep
from troupe.framework.fit import NodeSubset
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    MAX_NODE_SCORE,
    BindPlugin,
    EnqueueExtensions,
    FilterPlugin,
    GroupPreemptionPlugin,
    GroupSchedulingPlugin,
    Int64Array,
    IntpArray,
    NodeFilterPlugin,
    NodeScorePlugin,
    NodeToStatus,
    PermitPlugin,
    PluginArgsError,
    PluginSpec,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreemptionCandidate,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    ScoreExtensions,
    ScorePlugin,
    TrialChargePlugin,
    implements,
    pre_enqueue_is_reported,
    pre_filter_is_node_local,
)
from troupe.framework.status import SUCCESS, Code, Status
from troupe.framework.waiting_pods import WaitingPod

if TYPE_CHECKING:
    from troupe.core.metrics import Metrics

log = logging.getLogger(__name__)

# kube-scheduler caps Permit timeouts at 15 minutes (framework/runtime maxTimeout).
MAX_PERMIT_TIMEOUT = 15 * 60.0


class ProfileError(ValueError):
    """A profile cannot be built (bad plugin arguments, a plugin at a wrong point)."""


STATUS_LABELS: Final = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


def status_label(result: object) -> str:
    """The status label of an extension point's result, as kube-scheduler's metrics."""
    if isinstance(result, tuple):
        result = next((r for r in result if isinstance(r, Status)), None)
    return STATUS_LABELS[result.code] if isinstance(result, Status) else "Success"


F = TypeVar("F", bound=Callable[..., Any])


def timed(point: str) -> Callable[[F], F]:
    """Record the extension point's duration (scheduler_framework_extension_point_...)."""

    def deco(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(self: Profile, *args: Any) -> Any:
                if self.metrics is None:
                    return await fn(self, *args)
                t0 = time.perf_counter()
                out = await fn(self, *args)
                self.metrics.extension_point_duration.labels(
                    point,
                    status_label(out),
                    self.scheduler_name,
                ).observe(time.perf_counter() - t0)
                return out

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(self: Profile, *args: Any) -> Any:
            if self.metrics is None:
                return fn(self, *args)
            t0 = time.perf_counter()
            out = fn(self, *args)
            self.metrics.extension_point_duration.labels(
                point, status_label(out), self.scheduler_name
            ).observe(time.perf_counter() - t0)
            return out

        return run  # type: ignore[return-value]

    return deco


INTERNAL_ERROR: Final = "internal error (see the scheduler's log)"

# The FailedScheduling message for a plugin that raised, by extension point, in
# kube-scheduler's wording (framework/runtime/framework.go) with the error text
# replaced: the exception stays in the log, users never see library internals.
_ERROR_MESSAGES: Final = {
    "PreEnqueue": 'running PreEnqueue plugin "{plugin}": {error}',
    "PreFilter": 'running PreFilter plugin "{plugin}": {error}',
    "Filter": 'running "{plugin}" filter plugin: {error}',
    "PostFilter": 'running PostFilter plugin "{plugin}": {error}',
    "PreScore": 'running PreScore plugin "{plugin}": {error}',
    "Score": 'running Score plugins: plugin "{plugin}" failed with: {error}',
    "NormalizeScore": (
        'running Normalize on Score plugins: plugin "{plugin}" failed with: {error}'
    ),
    "Reserve": 'running Reserve plugin "{plugin}": {error}',
    "Permit": 'running Permit plugin "{plugin}": {error}',
    "PreBind": 'running PreBind plugin "{plugin}": {error}',
    "Bind": 'bind plugin "{plugin}" failed to bind pod "{pod}": {error}',
    # no message reaches the pod from these two; the log and the counter remain
    "Unreserve": 'running Unreserve plugin "{plugin}": {error}',
    "PostBind": 'running PostBind plugin "{plugin}": {error}',
}

# How many (pod, plugin, point) triples are remembered so that a pod that keeps
# hitting the same bug logs its traceback once, not on every retry.
_LOGGED_LIMIT: Final = 10_000


def plugin_error_message(plugin: str, point: str, pod: Pod) -> str:
    """What the pod's FailedScheduling event and condition say when `plugin` raised."""
    return _ERROR_MESSAGES[point].format(plugin=plugin, pod=pod.key, error=INTERNAL_ERROR)


class PluginErrors:
    """The plugin boundary's bookkeeping: a plugin that raises is a bug. The
    exception is logged with its traceback once per pod (later repeats for the
    same pod, plugin and point log one line), counted by plugin and extension
    point, and turned into an ERROR status whose message names the plugin but
    not the exception."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics
        self.counts: Counter[tuple[str, str]] = Counter()
        self._logged: dict[tuple[str, str, str], None] = {}

    def statistics(self) -> dict[tuple[str, str], int]:
        """(plugin, extension point) -> how many calls raised."""
        return dict(self.counts)

    def record(self, plugin: str, point: str, pod: Pod, e: BaseException) -> Status:
        self.counts[plugin, point] += 1
        if self.metrics is not None:
            self.metrics.plugin_errors.labels(plugin, point).inc()
        key = (pod.uid or pod.key, plugin, point)
        if key in self._logged:
            log.error(
                "plugin %s raised again at %s for pod %s: %s: %s",
                plugin,
                point,
                pod.key,
                type(e).__name__,
                e,
            )
        else:
            if len(self._logged) >= _LOGGED_LIMIT:
                self._logged.pop(next(iter(self._logged)))
            self._logged[key] = None
            log.error(
                "plugin %s raised at %s for pod %s (a bug; the pod is retried with backoff)",
                plugin,
                point,
                pod.key,
                exc_info=e,
            )
        return Status(Code.ERROR, (plugin_error_message(plugin, point, pod),), plugin, e)


def _does_not_implement(name: str, point: str) -> str:
    return f'plugin "{name}" does not implement {point}'


class _NodeFilterAdapter:
    """Runs a per-node Filter plugin over rows, collecting reasons into columns."""

    def __init__(self, plugin: NodeFilterPlugin) -> None:
        self.plugin = plugin

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        reasons: dict[str, int] = {}
        codes: dict[str, Code] = {}
        hits: list[tuple[int, int]] = []
        for i, row in enumerate(rows.tolist()):
            st = self.plugin.filter_node(state, pod, nodes, row)
            if st.is_success:
                continue
            if st.code is Code.ERROR:
                raise RuntimeError(st.message or "filter error")
            for r in st.reasons or ("",):
                j = reasons.setdefault(r, len(reasons))
                codes[r] = st.code
                hits.append((i, j))
        rejected = np.zeros((len(rows), len(reasons)), dtype=bool)
        for i, j in hits:
            rejected[i, j] = True
        names = tuple(reasons)
        return FilterResult(names, rejected, tuple(codes[r] for r in names))


class _NodeScoreAdapter:
    def __init__(self, plugin: NodeScorePlugin) -> None:
        self.plugin = plugin

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        return np.fromiter(
            (self.plugin.score_node(state, pod, nodes, r) for r in rows.tolist()),
            dtype=np.int64,
            count=len(rows),
        )


class Profile:
    """The plugins of one profile, by extension point, in configured order."""

    def __init__(
        self,
        scheduler_name: str,
        plugins: Mapping[str, Sequence[PluginSpec]],
        registry: Mapping[str, type],
        handle: Handle,
        *,
        prefer_per_node: bool = False,
        percentage_of_nodes_to_score: int | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.handle = handle
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.metrics = metrics
        self.errors = PluginErrors(metrics)
        self.instances: dict[str, Any] = {}
        specs: dict[str, PluginSpec] = {}
        for entries in plugins.values():
            for spec in entries:
                specs.setdefault(spec.name, spec)
        for name, spec in specs.items():
            cls = registry.get(name)
            if cls is None:
                raise ProfileError(f'profile "{scheduler_name}": unknown plugin "{name}"')
            try:
                self.instances[name] = cls.new(spec.args, handle)  # type: ignore[attr-defined]
            except PluginArgsError as e:
                where = spec.args_path or f"pluginConfig[{name}].args"
                raise ProfileError(f"{where}.{e.field_path}: {e.problem}") from e

        def at(point: str) -> list[tuple[str, Any, int]]:
            out = []
            for spec in plugins.get(point, ()):
                inst = self.instances[spec.name]
                if not implements(inst, point):
                    raise ProfileError(_does_not_implement(spec.name, point))
                out.append((spec.name, inst, spec.weight or 1))
            return out

        self.pre_enqueue: list[tuple[str, PreEnqueuePlugin]] = [
            (n, p) for n, p, _ in at("preEnqueue")
        ]
        sorts = at("queueSort")
        if len(sorts) != 1:
            raise ProfileError(
                f'profile "{scheduler_name}": exactly one queueSort plugin is required'
            )
        self.queue_sort: QueueSortPlugin = sorts[0][1]
        self.pre_filter: list[tuple[str, PreFilterPlugin]] = [(n, p) for n, p, _ in at("preFilter")]
        self.filters: list[tuple[str, Any]] = []
        for n, p, _ in at("filter"):
            use_node = NodeFilterPlugin in type(p).__mro__ and (
                prefer_per_node or FilterPlugin not in type(p).__mro__
            )
            self.filters.append((n, _NodeFilterAdapter(p) if use_node else p))
        self.post_filter: list[tuple[str, PostFilterPlugin]] = [
            (n, p) for n, p, _ in at("postFilter")
        ]
        # The PostFilter plugins that preempt for gangs, in PostFilter's order.
        self.group_preemption_plugins: dict[str, GroupPreemptionPlugin] = {
            n: p for n, p, _ in at("postFilter") if GroupPreemptionPlugin in type(p).__mro__
        }
        self.pre_score: list[tuple[str, PreScorePlugin]] = [(n, p) for n, p, _ in at("preScore")]
        self.scores: list[tuple[str, Any, ScoreExtensions | None, int]] = []
        for n, p, w in at("score"):
            use_node = NodeScorePlugin in type(p).__mro__ and (
                prefer_per_node or ScorePlugin not in type(p).__mro__
            )
            scorer = _NodeScoreAdapter(p) if use_node else p
            norm = p if ScoreExtensions in type(p).__mro__ else None
            self.scores.append((n, scorer, norm, w))
        self.reserve: list[tuple[str, ReservePlugin]] = [(n, p) for n, p, _ in at("reserve")]
        # The plugins that charge a group trial's placements (devices at Filter,
        # quotas at PreFilter), each once, in PreFilter's then Filter's order.
        self.trial_charges: list[tuple[str, TrialChargePlugin]] = []
        for n, p, _ in at("preFilter") + at("filter"):
            if TrialChargePlugin in type(p).__mro__ and all(n != m for m, _ in self.trial_charges):
                self.trial_charges.append((n, p))
        self.permit: list[tuple[str, PermitPlugin]] = [(n, p) for n, p, _ in at("permit")]
        # The Permit plugin that schedules gangs in a group cycle, if any.
        self.group_scheduling: GroupSchedulingPlugin | None = next(
            (p for _, p, _ in at("permit") if GroupSchedulingPlugin in type(p).__mro__), None
        )
        self.pre_bind: list[tuple[str, PreBindPlugin]] = [(n, p) for n, p, _ in at("preBind")]
        self.bind: list[tuple[str, BindPlugin]] = [(n, p) for n, p, _ in at("bind")]
        if not self.bind:
            raise ProfileError(f'profile "{scheduler_name}": at least one bind plugin is required')
        self.post_bind: list[tuple[str, PostBindPlugin]] = [(n, p) for n, p, _ in at("postBind")]

    # ---- queueing ---------------------------------------------------------------

    def events_to_register(self) -> dict[str, list[ClusterEventWithHint]]:
        out: dict[str, list[ClusterEventWithHint]] = {}
        for name, inst in self.instances.items():
            if EnqueueExtensions in type(inst).__mro__:
                try:
                    out[name] = list(inst.events_to_register())
                except Exception:
                    log.exception("plugin %s: events_to_register failed", name)
        return out

    def reports_pre_enqueue(self, plugin: str) -> bool:
        """Whether the pod is told why PreEnqueue plugin `plugin` keeps it
        waiting (see troupe.framework.interface.pre_enqueue_is_reported)."""
        p = self.instances.get(plugin)
        return p is None or pre_enqueue_is_reported(p)

    def run_pre_enqueue(self, pod: Pod) -> Status:
        for name, p in self.pre_enqueue:
            try:
                st = p.pre_enqueue(pod)
            except Exception as e:
                return self.errors.record(name, "PreEnqueue", pod, e)
            if not st.is_success:
                return st.with_plugin(name)
        return SUCCESS

    # ---- scheduling cycle -------------------------------------------------------

    @timed("PreFilter")
    def run_pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        merged: frozenset[str] | None = None
        for name, p in self.pre_filter:
            try:
                result, st = p.pre_filter(state, pod, nodes)
            except Exception as e:
                return None, self.errors.record(name, "PreFilter", pod, e)
            if st.is_skip:
                state.skip_filter.add(name)
                continue
            if not st.is_success:
                return None, st.with_plugin(name)
            if result is not None and result.node_names is not None:
                merged = result.node_names if merged is None else merged & result.node_names
                if not merged:
                    return None, Status(
                        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                        ("node(s) didn't satisfy plugin(s) [" + name + "] simultaneously",),
                        name,
                    )
        return (PreFilterResult(merged) if merged is not None else None), SUCCESS

    @timed("Filter")
    def run_filters(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterOutcome | Status:
        """Filter `rows`. Returns the outcome, or an ERROR Status if a plugin broke."""
        feasible = np.ones(len(rows), dtype=bool)
        outcome = FilterOutcome(feasible, rows)
        live_idx: IntpArray = np.arange(len(rows))
        live_rows = rows
        skip = state.skip_filter
        for name, p in self.filters:
            if name in skip or len(live_rows) == 0:
                continue
            t0 = time.perf_counter() if state.sample_plugin_metrics else 0.0
            try:
                result = p.filter(state, pod, nodes, live_rows)
            except Exception as e:
                return self.errors.record(name, "Filter", pod, e)
            if state.sample_plugin_metrics and self.metrics is not None:
                self.metrics.plugin_duration.labels(name, "Filter", "Success").observe(
                    time.perf_counter() - t0
                )
            if result.rejected.shape[1] == 0:
                continue
            ok = result.feasible
            if ok.all():
                continue
            outcome.steps.append(FilterStep(name, result, live_rows))
            feasible[live_idx[~ok]] = False
            live_idx = live_idx[ok]
            live_rows = live_rows[ok]
        return outcome

    def pre_filter_is_node_local(self, state: CycleState) -> bool:
        """Whether the PreFilter state of this cycle depends only on the node being
        filtered: every PreFilter plugin either skipped or declares itself
        node-local (`pre_filter_is_node_local`)."""
        return all(
            name in state.skip_filter or pre_filter_is_node_local(p) for name, p in self.pre_filter
        )

    def run_filters_with_nominated(
        self,
        state: CycleState,
        pod: Pod,
        nodes: NodeTable,
        rows: IntpArray,
        nominated: Mapping[int, Sequence[Pod]],
    ) -> FilterOutcome | Status:
        """kube-scheduler's RunFilterPluginsWithNominatedPods over `rows`.
        `nominated`: per row, the pods nominated there of priority equal to or
        above the pod's (not the pod itself, not on the row already).

        A row with no such pods is filtered once. A row with some must pass
        twice: with its nominated pods charged (PreFilter run again when its
        state is not node-local: upstream's AddPod on a cloned state, here one
        row at a time) and without them, so that a pod neither takes the room
        that a preemption freed for a more important pod nor counts on pods that
        are not there yet (inter-pod affinity to a nominated pod). Every row is
        filtered without them first, in one columnar call; only the rows that
        pass and carry nominated pods are filtered again with them, so a
        cycle without nominations costs what it did. A row that fails both
        passes reports the reasons of the pass without the nominated pods
        (upstream reports those of the first pass it runs, the one with them)."""
        out = self.run_filters(state, pod, nodes, rows)
        if isinstance(out, Status) or not nominated:
            return out
        idx = [i for i, r in enumerate(rows.tolist()) if r in nominated and out.feasible[i]]
        if not idx:
            return out
        local = self.pre_filter_is_node_local(state)
        isolated = self.handle.isolated
        for group in [idx] if local else [[i] for i in idx]:
            at = np.array(group, dtype=np.intp)
            g_rows = rows[at]
            with nodes.overlay() as ov:
                for r in g_rows.tolist():
                    for p in nominated[r]:
                        ov.add(r, p, pod_charge(p, isolated))
                use = state
                if not local:
                    use = CycleState()
                    _, st = self.run_pre_filter(use, pod, nodes)
                    if st.code is Code.ERROR:
                        return st
                    if not st.is_success:
                        result = FilterResult.single(
                            st.message, np.ones(len(g_rows), dtype=bool), st.code
                        )
                        out.steps.append(FilterStep(st.plugin, result, g_rows))
                        out.feasible[at] = False
                        continue
                first = self.run_filters(use, pod, nodes, g_rows)
            if isinstance(first, Status):
                return first
            out.steps.extend(first.steps)
            out.feasible[at[~first.feasible]] = False
        return out

    @timed("PostFilter")
    def run_post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        last = Status(Code.UNSCHEDULABLE)
        for name, p in self.post_filter:
            try:
                nominated, st = p.post_filter(state, pod, filtered)
            except Exception as e:
                return None, self.errors.record(name, "PostFilter", pod, e)
            if st.is_success:
                return nominated, st.with_plugin(name)
            if st.code is Code.ERROR or st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return None, st.with_plugin(name)
            last = st.with_plugin(name)
        return None, last

    def group_preemption(self) -> str | None:
        """The PostFilter plugin that preempts for gangs (the first that
        subclasses GroupPreemptionPlugin), if any."""
        return next(iter(self.group_preemption_plugins), None)

    def run_member_preemption(
        self,
        plugin: str,
        state: CycleState,
        pod: Pod,
        priority: int,
        taken: Collection[PodKey],
        within: NodeSubset | None = None,
    ) -> PreemptionCandidate | Status | None:
        """A gang member's preemption candidate from `plugin` (see
        GroupPreemptionPlugin), None if it has none; a plugin that raises is an
        error Status, as at every point."""
        p = self.group_preemption_plugins[plugin]
        try:
            return p.member_candidate(state, pod, self, priority, taken, within)
        except Exception as e:
            return self.errors.record(plugin, "PostFilter", pod, e)

    def run_prepare_member(
        self, plugin: str, pod: Pod, candidate: PreemptionCandidate, gang: str
    ) -> Status:
        try:
            self.group_preemption_plugins[plugin].prepare_member(pod, candidate, gang)
        except Exception as e:
            return self.errors.record(plugin, "PostFilter", pod, e)
        return SUCCESS

    @timed("PreScore")
    def run_pre_score(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> Status:
        for name, p in self.pre_score:
            try:
                st = p.pre_score(state, pod, nodes, rows)
            except Exception as e:
                return self.errors.record(name, "PreScore", pod, e)
            if st.is_skip:
                state.skip_score.add(name)
            elif not st.is_success:
                return st.with_plugin(name)
        return SUCCESS

    @timed("Score")
    def run_score(
        self,
        state: CycleState,
        pod: Pod,
        nodes: NodeTable,
        rows: IntpArray,
        breakdown: dict[str, tuple[Int64Array, Int64Array, int]] | None = None,
    ) -> Int64Array | Status:
        """The weighted total per row; `breakdown`, if given, receives each
        plugin's raw and normalised scores and its weight (explanations)."""
        total = np.zeros(len(rows), dtype=np.int64)
        skip = state.skip_score
        for name, p, norm, weight in self.scores:
            if name in skip:
                continue
            t0 = time.perf_counter() if state.sample_plugin_metrics else 0.0
            try:
                s = np.asarray(p.score(state, pod, nodes, rows), dtype=np.int64)
            except Exception as e:
                return self.errors.record(name, "Score", pod, e)
            raw = s
            if norm is not None:
                try:
                    s = np.asarray(norm.normalize_score(state, pod, s), dtype=np.int64)
                except Exception as e:
                    return self.errors.record(name, "NormalizeScore", pod, e)
            if state.sample_plugin_metrics and self.metrics is not None:
                self.metrics.plugin_duration.labels(name, "Score", "Success").observe(
                    time.perf_counter() - t0
                )
            if len(s) and (s.min() < 0 or s.max() > MAX_NODE_SCORE):
                return Status(
                    Code.ERROR,
                    (f"plugin {name} returned a score outside [0, {MAX_NODE_SCORE}]",),
                    name,
                )
            total += s * weight
            if breakdown is not None:
                breakdown[name] = (raw, s, weight)
        return total

    @timed("Reserve")
    def run_reserve(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        for name, p in self.reserve:
            try:
                st = p.reserve(state, pod, node)
            except Exception as e:
                return self.errors.record(name, "Reserve", pod, e)
            if not st.is_success:
                return st.with_plugin(name)
        return SUCCESS

    def run_trial_charge(
        self, state: CycleState, pod: Pod, node: NodeName
    ) -> list[Callable[[], None]]:
        """Charge a group trial's placement with the plugins that keep resources
        outside the snapshot; returns the undos, to run in reverse order."""
        undos = []
        for name, p in self.trial_charges:
            try:
                undo = p.charge(state, pod, node)
            except Exception as e:
                self.errors.record(name, "Filter", pod, e)
                continue
            if undo is not None:
                undos.append(undo)
        return undos

    def run_trial_release(
        self, state: CycleState, pod: Pod, victims: Sequence[Pod]
    ) -> list[Callable[[], None]]:
        """Release the victims a gang's preemption plan takes off the snapshot
        from the plugins that keep resources outside it; returns the undos."""
        undos = []
        for name, p in self.trial_charges:
            try:
                undo = p.release(state, pod, victims)
            except Exception as e:
                self.errors.record(name, "PostFilter", pod, e)
                continue
            if undo is not None:
                undos.append(undo)
        return undos

    @timed("Unreserve")
    def run_unreserve(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        for name, p in reversed(self.reserve):
            try:
                p.unreserve(state, pod, node)
            except Exception as e:
                self.errors.record(name, "Unreserve", pod, e)

    @timed("Permit")
    def run_permit(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        """SUCCESS, a rejection, or WAIT (the pod was added to the waiting-pods map)."""
        timeouts: dict[str, float] = {}
        for name, p in self.permit:
            try:
                st, timeout = p.permit(state, pod, node)
            except Exception as e:
                return self.errors.record(name, "Permit", pod, e)
            if st.is_wait:
                timeouts[name] = min(max(timeout, 0.0), MAX_PERMIT_TIMEOUT)
            elif not st.is_success:
                return st.with_plugin(name)
        if timeouts:
            self.handle.waiting_pods.add(WaitingPod(pod, node, timeouts, self.handle.clock))
            return Status(Code.WAIT, (), next(iter(timeouts)))
        return SUCCESS

    # ---- binding cycle ----------------------------------------------------------

    async def wait_on_permit(self, pod: Pod) -> Status:
        wp = self.handle.waiting_pods.get(pod.key)
        if wp is None:
            return SUCCESS
        try:
            return await wp.wait()
        finally:
            self.handle.waiting_pods.remove(pod.key)

    @timed("PreBind")
    async def run_pre_bind(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        for name, p in self.pre_bind:
            try:
                st = await p.pre_bind(state, pod, node)
            except Exception as e:
                return self.errors.record(name, "PreBind", pod, e)
            if not st.is_success:
                return st.with_plugin(name)
        return SUCCESS

    @timed("Bind")
    async def run_bind(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        for name, p in self.bind:
            try:
                st = await p.bind(state, pod, node)
            except Exception as e:
                return self.errors.record(name, "Bind", pod, e)
            if st.is_skip:
                continue
            return st.with_plugin(name)
        return Status(Code.ERROR, ("no bind plugin bound the pod",))

    @timed("PostBind")
    async def run_post_bind(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        for name, p in self.post_bind:
            try:
                await p.post_bind(state, pod, node)
            except Exception as e:
                self.errors.record(name, "PostBind", pod, e)

    def sort_key(self, qpi: QueuedPodInfo) -> Any:
        return self.queue_sort.sort_key(qpi)

    def plugin(self, name: str) -> Any:
        return self.instances.get(name)

    def names(self) -> Iterable[str]:
        return self.instances.keys()
