"""The scheduler: event intake, the serial scheduling cycle, concurrent binding cycles.

`Scheduler` is driven from outside: the operator (or the simulator) feeds it
cluster events through the `on_*` handlers, and a loop calls `schedule_one()`
while the queue has pods (`run()` is that loop for a real clock). Each call is
one scheduling cycle, synchronous and serial: pop the best pod, bring the
snapshot up to date, PreFilter, Filter (sampled as kube-scheduler samples, from
a rotating start index), PostFilter on failure, PreScore, Score, select a
node (random tie-break, seeded), assume the pod in the cache, Reserve, Permit.
Then the binding cycle runs as an asyncio task: wait on Permit, PreBind, Bind,
PostBind. Any failure runs Unreserve in reverse order, forgets the assumed pod
and requeues the pod with backoff.

Diagnostics use kube-scheduler's words: "0/5 nodes are available: 2 node(s)
had untolerated taint {dedicated: gpu}, 3 Insufficient cpu." — a reason
histogram sorted as strings, as kube-scheduler's FitError does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from scheduler.api.parse import (
    parse_node,
    parse_pod,
    parse_pod_group,
    parse_priority_class,
    parse_workload,
)
from scheduler.api.types import (
    NATIVE_POD_GROUP_API,
    GroupKey,
    InvalidObject,
    Node,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
    PriorityClass,
    pod_group_key,
)
from scheduler.cache import Cache, PodAlreadyInCache
from scheduler.clock import Clock
from scheduler.cluster import BIND_CONFLICT, ClusterClient
from scheduler.config import SchedulerConfig
from scheduler.events import ObjectRef
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.handle import Handle
from scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    EventResource,
    IntpArray,
    NodeToStatus,
    QueuedPodInfo,
)
from scheduler.framework.runtime import FilterOutcome, Profile
from scheduler.framework.status import Code, Status
from scheduler.framework.waiting_pods import WaitingPods
from scheduler.metrics import PLUGIN_METRICS_SAMPLE_PERCENT, Metrics
from scheduler.plugins.coscheduling.core import min_field, placed_members
from scheduler.plugins.coscheduling.status import native_phase
from scheduler.plugins.registry import IN_TREE
from scheduler.plugins.scheduling_gates import SchedulingGates
from scheduler.queue import FifoFallback, SchedulingQueue, pod_updated
from scheduler.snapshot import IsolatedCPU, Snapshot, pod_charge

log = logging.getLogger(__name__)

MIN_FEASIBLE_NODES_TO_FIND: Final = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: Final = 5
NO_NODES_AVAILABLE: Final = "no nodes available to schedule pods"
SCHEDULING_GATES: Final = SchedulingGates.NAME


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


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    cycles: int
    scheduled: int
    failed_attempts: int
    bind_failures: int
    binding_in_flight: int
    # Scheduling cycles that raised: logged with the traceback and survived.
    loop_errors: int = 0
    # Popped pods dropped because the cache already holds them (bound or assumed).
    dropped_known: int = 0


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        client: ClusterClient,
        clock: Clock,
        *,
        registry: Mapping[str, type] = IN_TREE,
        prefer_per_node: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.metrics.refreshers.append(self._refresh_gauges)
        self.client = client
        self.clock = clock
        self.isolated = _isolated_from(config)
        # cpu and the isolated resource are kept in milli-units.
        self.milli = frozenset({"cpu", self.isolated.resource})
        self.cache = Cache(clock, self.isolated, config.troupe.assumed_pod_ttl_seconds)
        self.snapshot = Snapshot()
        self.waiting_pods = WaitingPods()
        self.rng = random.Random(config.troupe.seed)
        self.handle = Handle(
            clock=clock,
            client=client,
            waiting_pods=self.waiting_pods,
            lister=self.cache,
            isolated=self.isolated,
            rng=self.rng,
            snapshot=lambda: self.snapshot,
            activate=self._activate,
            spawn=self._spawn,
            failure=self._failure_of,
        )
        self.profiles: dict[str, Profile] = {
            p.scheduler_name: Profile(
                p.scheduler_name,
                p.plugins,
                registry,
                self.handle,
                prefer_per_node=prefer_per_node,
                percentage_of_nodes_to_score=p.percentage_of_nodes_to_score,
                metrics=self.metrics,
            )
            for p in config.profiles
        }
        first = next(iter(self.profiles.values()))
        hints: dict[str, Any] = {}
        for prof in self.profiles.values():
            hints.update(prof.events_to_register())
        t = config.troupe
        self.queue = SchedulingQueue(
            clock=clock,
            sort_key=first.sort_key,
            pre_enqueue=self._pre_enqueue,
            hints=hints,
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
            max_in_unschedulable=t.unschedulable_flush_seconds,
            fifo=FifoFallback(
                enabled=t.fifo_enabled,
                min_queue_length=t.fifo_min_queue_length,
                failure_streak=t.fifo_failure_streak,
                duration_seconds=t.fifo_duration_seconds,
            ),
        )
        self.priority_classes: dict[str, PriorityClass] = {}
        self.invalid: dict[str, InvalidObject] = {}
        self.last_failure: dict[PodKey, str] = {}
        # The code of each pod's last failed attempt (ERROR or a rejection).
        self._failure_codes: dict[PodKey, Code] = {}
        # The PreEnqueue rejection last written on each gated pod (see _report_gate).
        self._gate_reported: dict[PodKey, str] = {}
        self.next_start_node_index = 0
        self.cycle = 0
        self._scheduled = 0
        self._failed = 0
        self._bind_failures = 0
        self._loop_errors = 0
        self._dropped_known = 0
        # The pods the current scheduling cycle holds (popped or taken from the
        # queue), so that a cycle that raises can give them back.
        self._cycle_pods: list[QueuedPodInfo] = []
        self.group_attempts = 0
        self.group_failures = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wakeup: asyncio.Event | None = None
        # Writes to the cluster outside the scheduling and binding cycles (reports
        # on malformed objects) are made only while `writes_enabled`: a standby
        # replica watches and keeps its cache warm, but writes nothing. Reports
        # held back meanwhile are written by `enable_writes()`.
        self.writes_enabled = True
        self._held_reports: dict[str, tuple[ObjectRef, str]] = {}
        # The last report written per object key, so that a report is written
        # once per change, not once per watch event.
        self._reported: dict[str, tuple[str, str]] = {}
        self._held_gates: dict[PodKey, tuple[Pod, str]] = {}

    # ---- intake: cluster events --------------------------------------------------

    def handles(self, pod: Pod) -> bool:
        return pod.scheduler_name in self.profiles

    def _pre_enqueue(self, pod: Pod) -> Status:
        st = self.profiles[pod.scheduler_name].run_pre_enqueue(pod)
        self._report_gate(pod, st)
        return st

    def _report_gate(self, pod: Pod, st: Status) -> None:
        """Say on the pod why PreEnqueue keeps it waiting (a missing or invalid
        PodGroup...): PodScheduled=False, reason Unschedulable, and an event, once
        per change of the message, however often the pod's events repeat.
        SchedulingGates is left out: the pod's own spec says why it waits."""
        key = pod.key
        if st.is_success or st.plugin == SCHEDULING_GATES:
            self._gate_reported.pop(key, None)
            self._held_gates.pop(key, None)
            return
        message = st.message or f"rejected by PreEnqueue plugin {st.plugin}"
        if self._gate_reported.get(key) == message:
            return
        self.last_failure[key] = message
        self._failure_codes[key] = st.code
        if not self.writes_enabled:
            self._held_gates[key] = (pod, message)
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no running loop (a synchronous caller): next time
            return
        self._spawn(self._report_failure(_pod_ref(pod), message, _condition_of(pod.raw)))
        self._gate_reported[key] = message

    def _failure_of(self, key: PodKey) -> tuple[str, Code] | None:
        """The message and code of the pod's last failed attempt (Handle.failure)."""
        message = self.last_failure.get(key)
        if message is None:
            return None
        return message, self._failure_codes.get(key, Code.UNSCHEDULABLE)

    def _activate(self, keys: Iterable[PodKey]) -> None:
        self.queue.activate(keys)
        self._notify()

    def _emit(self, event: ClusterEvent, old: Any, new: Any) -> None:
        """Tell the queue (queueing hints) and the plugins' watchers about an event."""
        for watcher in self.handle.watchers:
            try:
                watcher(event, old, new)
            except Exception:
                log.exception("event watcher failed on %s", event)
        moved = self.queue.move_on_event(event, old, new)
        if moved:
            label = f"{event.resource.value}{_action_name(event.action)}"
            self.metrics.queue_incoming.labels("active", label).inc(moved)

    def _notify(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def on_priority_class(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        pc = parse_priority_class(obj)
        if isinstance(pc, InvalidObject):
            self._report_invalid(pc)
            return
        if deleted:
            self.priority_classes.pop(pc.name, None)
        else:
            self.priority_classes[pc.name] = pc

    def on_workload(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A Service, ReplicaSet, StatefulSet or ReplicationController (spreading
        defaults build their selector from them)."""
        w = parse_workload(obj)
        if isinstance(w, InvalidObject):
            self._report_invalid(w)
            return
        self.cache.set_workload(w.kind, w.namespace, w.name, None if deleted else w)

    def on_namespace(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        md = obj.get("metadata")
        if not isinstance(md, Mapping) or not isinstance(md.get("name"), str):
            log.warning("ignoring a Namespace without metadata.name")
            return
        labels = md.get("labels") if isinstance(md.get("labels"), Mapping) else {}
        self.cache.set_namespace(md["name"], None if deleted else labels)

    def on_node(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        if deleted:
            name = str((obj.get("metadata") or {}).get("name", ""))
            old = self.cache.node(name)
            self.cache.remove_node(name)
            self.invalid.pop(name, None)
            self._emit(ClusterEvent(EventResource.NODE, ActionType.DELETE), old, None)
            return
        node = parse_node(obj, self.milli)
        if isinstance(node, InvalidObject):
            self._report_invalid(node)
            # A node we cannot read is not one we place pods on: a known node
            # updated to an unreadable state leaves scheduling (its pods stay
            # known and are charged again when a readable version arrives).
            # kube's admission would have refused such an update.
            gone = self.cache.node(node.name)
            if gone is not None:
                self.cache.remove_node(node.name)
                self._emit(ClusterEvent(EventResource.NODE, ActionType.DELETE), gone, None)
            return
        self.invalid.pop(node.name, None)
        old = self.cache.node(node.name)
        if old is None:
            self.cache.add_node(node)
            event = ClusterEvent(EventResource.NODE, ActionType.ADD)
        else:
            self.cache.update_node(node)
            action = _node_update_action(old, node)
            if not action:
                return
            event = ClusterEvent(EventResource.NODE, action)
        self._emit(event, old, node)
        self._notify()

    def on_pod(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        pod = parse_pod(obj, self.priority_classes, self.milli)
        if isinstance(pod, InvalidObject):
            if deleted:
                self.invalid.pop(pod.key, None)
                self._reported.pop(pod.key, None)
                self._held_reports.pop(pod.key, None)
            else:
                self._report_invalid(pod, obj)
            return
        self.invalid.pop(pod.key, None)
        if deleted:
            self._reported.pop(pod.key, None)
        key = pod.key
        if deleted:
            self._on_pod_deleted(pod)
            return
        if pod.node_name:
            self._on_assigned_pod(pod)
            return
        if not self.handles(pod):
            return
        if self._known_elsewhere(pod):
            return
        old = self.queue.get(key)
        self.cache.track_pending(pod)
        if pod.deleting:
            self.queue.delete(key)
            return
        if old is None:
            if self.cache.is_assumed(key):
                return  # being bound by us; the bound event will follow
            self.queue.add(pod)
            qpi = self.queue.get(key)
            where = "gated" if qpi is not None and qpi.gated else "active"
            self.metrics.queue_incoming.labels(where, "PodAdd").inc()
            self._emit(ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD), None, pod)
        else:
            changed = pod_updated(old.pod, pod)
            self.queue.update(old.pod, pod)
            if not changed:
                # Only status or bookkeeping changed (our own PodScheduled condition
                # coming back, a re-list): kube-scheduler ignores such updates.
                return
            self._emit(ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE), old.pod, pod)
        self._notify()

    def _known_elsewhere(self, pod: Pod) -> bool:
        """Whether a pending pod's event is stale: the cache holds the pod bound.

        A new leader's first list, a replayed watch or a simulator input may show a
        pod pending after we saw it bound; queueing it would schedule it twice.
        A different uid under the same name is a re-created pod: the bound one
        is gone (its delete was missed), so it leaves the cache.
        """
        key = pod.key
        cached = self.cache.pod(key)
        if cached is None or self.cache.is_assumed(key):
            return False  # an assumed pod's pending updates are tracked below
        if pod.uid and cached.uid and pod.uid != cached.uid:
            log.info("pod %s was re-created (uid %s); dropping the old one", key, pod.uid)
            self.cache.remove_pod(key)
            self._emit(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), cached, None)
            return False
        log.info("ignoring a pending event of pod %s: it is bound to %s", key, cached.node_name)
        if key in self.queue:
            self.queue.delete(key)
        return True

    def _on_assigned_pod(self, pod: Pod) -> None:
        key = pod.key
        self._gate_reported.pop(key, None)
        if key in self.queue:
            self.queue.delete(key)
        self.cache.untrack_pending(key)
        old = self.cache.pod(key)
        if old is None or self.cache.is_assumed(key):
            self.cache.add_pod(pod)
            self.last_failure.pop(key, None)
            self._failure_codes.pop(key, None)
            if old is None:
                self._emit(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD), None, pod)
        else:
            self.cache.update_pod(old, pod)
            action = _pod_update_action(old, pod)
            if action:
                self._emit(ClusterEvent(EventResource.ASSIGNED_POD, action), old, pod)
        self._notify()

    def _on_pod_deleted(self, pod: Pod) -> None:
        key = pod.key
        self._gate_reported.pop(key, None)
        self.queue.delete(key)
        self.cache.untrack_pending(key)
        wp = self.waiting_pods.get(key)
        if wp is not None:
            wp.reject("", "pod deleted while waiting at Permit")
        old = self.cache.pod(key)
        if old is None:
            self._emit(ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.DELETE), pod, None)
        elif not self.cache.is_assumed(key):
            self.cache.remove_pod(key)
            self._emit(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), old, None)
            self._notify()

    def on_pod_group(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        pg = parse_pod_group(obj)
        if isinstance(pg, InvalidObject):
            api = str(obj.get("apiVersion") or "")
            native = api.split("/")[0] == NATIVE_POD_GROUP_API
            self._on_invalid_pod_group(pg, deleted, pod_group_key(pg.namespace, pg.name, native))
            return
        old = self.cache.pod_group(pg.key)
        if deleted:
            self.cache.remove_pod_group(pg.key)
            action = ActionType.DELETE
        elif old is None:
            self.cache.add_pod_group(pg)
            action = ActionType.ADD
        else:
            self.cache.update_pod_group(pg)
            action = ActionType.UPDATE
            if replace(old, status=pg.status) == pg:
                return  # only the status changed (our own patch coming back)
        self._emit(ClusterEvent(EventResource.POD_GROUP, action), old, pg)
        self._notify()

    def _on_invalid_pod_group(self, bad: InvalidObject, deleted: bool, key: GroupKey) -> None:
        """An unreadable PodGroup: its members wait and say why ("is invalid:
        spec.minMember: ..."), not "not found"; a readable version known before
        stops being used."""
        old = self.cache.pod_group(key)
        if deleted:
            self.cache.remove_pod_group(key)
            self.invalid.pop(bad.key, None)
        else:
            self._report_invalid(bad)
            self.cache.set_invalid_pod_group(key, bad.message)
        if old is not None:
            self._emit(ClusterEvent(EventResource.POD_GROUP, ActionType.DELETE), old, None)
        # Members gated on the group run PreEnqueue again, so their reason changes.
        self._activate(p.key for p in self.cache.pods_in_group(key))

    def _report_invalid(self, bad: InvalidObject, obj: Mapping[str, Any] | None = None) -> None:
        """Log a malformed object once per change and, for a pod that is ours,
        report it on the pod (FailedScheduling event and PodScheduled condition)."""
        if bad.kind != "Pod":
            if self.invalid.get(bad.key) != bad:
                log.warning("ignoring malformed %s %s: %s", bad.kind, bad.key, bad.message)
            self.invalid[bad.key] = bad
            return
        raw: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
        spec = _mapping(raw.get("spec"))
        key = PodKey(bad.key)
        if self.invalid.get(bad.key) != bad:
            log.warning("ignoring malformed %s %s: %s", bad.kind, bad.key, bad.message)
        self.invalid[bad.key] = bad
        self.last_failure[key] = bad.message
        if spec.get("schedulerName", "default-scheduler") not in self.profiles:
            return  # not ours: another scheduler reports it
        node = spec.get("nodeName")
        if isinstance(node, str) and node:
            return  # already bound: nothing for a scheduler to say
        ref = _ref_of(raw, "Pod", bad.namespace, bad.name)
        if self._reported.get(key) == (ref.uid, bad.message):
            return  # said already for this pod and this problem
        if not self.writes_enabled:
            self._held_reports[key] = (ref, bad.message)
            return
        self._reported[key] = (ref.uid, bad.message)
        self._spawn(self._report_failure(ref, bad.message, _condition_of(raw)))

    def enable_writes(self) -> None:
        """This replica leads now: write what was held back while standing by."""
        self.writes_enabled = True
        # Statuses computed while standing by were not written: recompute them.
        for pg in self.cache.pod_groups():
            event = ClusterEvent(EventResource.POD_GROUP, ActionType.UPDATE)
            for watcher in self.handle.watchers:
                try:
                    watcher(event, pg, pg)
                except Exception:
                    log.exception("event watcher failed on %s", event)
        gates, self._held_gates = self._held_gates, {}
        for pk, (gated, why) in gates.items():
            if pk in self.queue and self._gate_reported.get(pk) != why:
                self._gate_reported[pk] = why
                self._spawn(self._report_failure(_pod_ref(gated), why, _condition_of(gated.raw)))
        held, self._held_reports = self._held_reports, {}
        for key, (ref, message) in held.items():
            if self.invalid.get(key) is None:
                continue  # fixed or deleted meanwhile
            self._reported[key] = (ref.uid, message)
            self._spawn(self._report_failure(ref, message, None))

    # ---- the scheduling cycle ------------------------------------------------------

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
        self.metrics.schedule_attempts.labels(outcome, profile.scheduler_name).inc()
        self.metrics.attempt_duration.labels(outcome, profile.scheduler_name).observe(seconds)

    @staticmethod
    def _outcome(result: FitError | Status) -> str:
        return (
            "error" if isinstance(result, Status) and result.code is Code.ERROR else "unschedulable"
        )

    def _fail(self, profile: Profile, qpi: QueuedPodInfo, result: FitError | Status) -> None:
        self._failed += 1
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

    # ---- the atomic group cycle -----------------------------------------------------

    @staticmethod
    def _gang_profile(profile: Profile) -> bool:
        return any(name == "Coscheduling" for name, _ in profile.permit)

    def _group_admitted(self, group: GroupKey, min_member: int) -> bool:
        """Whether minMember of the group are already bound or assumed (placed)."""
        return placed_members(self.cache, self.waiting_pods, group) >= min_member

    def _schedule_group(self, profile: Profile, first: QueuedPodInfo, pg: PodGroup) -> None:
        """Place the gang's queued pods together on the snapshot, each placement charged
        before the next is searched; commit them only if minMember fit, else hold nothing.

        The snapshot serves as the scratch copy: placements are charged into it and
        undone before the real assumes, which then reach it through the cache.
        """
        group = first.pod.group_key
        assert group is not None
        min_member = pg.min_member
        t0 = self.clock.now()
        members = [first]
        others = [
            p.key
            for p in self.cache.pods_in_group(group)
            if p.key != first.pod.key and p.key in self.queue
        ]
        taken = self.queue.take(others)
        self._cycle_pods.extend(taken)
        for q in taken:
            if self.cache.pod(q.pod.key) is not None:
                self._dropped_known += 1
                self.queue.done(q.pod.key)
            else:
                members.append(q)
        members.sort(key=profile.sort_key)
        placed_before = placed_members(self.cache, self.waiting_pods, group)
        snap = self.snapshot
        placements: list[tuple[QueuedPodInfo, CycleState, NodeName]] = []
        failures: list[tuple[QueuedPodInfo, FitError | Status]] = []
        charged: list[tuple[int, Pod, Any]] = []
        # Each member's attempt is counted as kube-scheduler counts a pod's: its own
        # search time, the outcome of the group decides the result label.
        seconds: dict[PodKey, float] = {}
        try:
            for qpi in members:
                t_pod = time.perf_counter()
                state = CycleState()
                result = self._schedule_pod(profile, state, qpi.pod, post_filter=False)
                seconds[qpi.pod.key] = time.perf_counter() - t_pod
                if isinstance(result, ScheduleResult):
                    row = snap.row_of[result.node]
                    charge = pod_charge(qpi.pod, self.isolated)
                    snap.charge(row, qpi.pod, charge, +1)
                    charged.append((row, qpi.pod, charge))
                    placements.append((qpi, state, result.node))
                else:
                    failures.append((qpi, result))
        finally:
            for row, pod, charge in reversed(charged):
                snap.charge(row, pod, charge, -1)
        self.group_attempts += 1
        if placed_before + len(placements) >= min_member:
            self.metrics.podgroup_attempts.labels("admitted").inc()
            started = min((q.initial_attempt_timestamp or q.timestamp) for q in members)
            self.metrics.podgroup_admission.observe(max(0.0, self.clock.now() - started))
            self.queue.record_attempt(True)
            for qpi, state, node in placements:
                t_pod = time.perf_counter()
                ok = self._commit(profile, state, qpi, node)
                took = seconds[qpi.pod.key] + time.perf_counter() - t_pod
                self._count_attempt(profile, "scheduled" if ok else "unschedulable", took)
            for qpi, result in failures:
                self._fail(profile, qpi, result)
                self._count_attempt(profile, self._outcome(result), seconds[qpi.pod.key])
            log.info(
                "gang %s admitted: %d pods placed in %.3fs",
                group,
                len(placements),
                self.clock.now() - t0,
            )
            return
        self.group_failures += 1
        self.metrics.podgroup_attempts.labels("unschedulable").inc()
        why = failures[0][1].message if failures else "not enough member pods are pending"
        message = (
            f'PodGroup "{group}": {placed_before + len(placements)} of {min_field(pg)} '
            f"{min_member} pods fit; {why}"
        )
        plugins: set[str] = {"Coscheduling"}
        for _, result in failures:
            if isinstance(result, FitError):
                plugins |= result.unschedulable_plugins
            elif result.plugin:
                plugins.add(result.plugin)
        errors = {q.pod.key for q, result in failures if self._outcome(result) == "error"}
        for qpi in members:
            self._failed += 1
            self._handle_failure(
                profile, qpi, message, Code.UNSCHEDULABLE, frozenset(plugins), frozenset()
            )
            outcome = "error" if qpi.pod.key in errors else "unschedulable"
            self._count_attempt(profile, outcome, seconds[qpi.pod.key])

    def _schedule_pod(
        self, profile: Profile, state: CycleState, pod: Pod, post_filter: bool = True
    ) -> ScheduleResult | FitError | Status:
        snap = self.snapshot
        n_all = snap.num_nodes
        if n_all == 0:
            return FitError(NO_NODES_AVAILABLE, frozenset(), frozenset())
        pre, st = profile.run_pre_filter(state, pod, snap)
        if not st.is_success:
            if st.code is Code.ERROR:
                return st
            msg = fit_error_message(n_all, {}, pre_filter_msg=st.message)
            pending = frozenset({st.plugin}) if st.code is Code.PENDING else frozenset()
            fe = FitError(msg, frozenset({st.plugin}), pending, st.code)
            if not post_filter:
                return fe
            return self._post_filter(profile, state, pod, n_all, {}, fe)
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
        percentage = profile.percentage_of_nodes_to_score
        if percentage is None:
            percentage = self.config.percentage_of_nodes_to_score
        to_find = num_feasible_nodes_to_find(percentage, len(rows))
        feasible, processed, outcomes = self._find_feasible(profile, state, pod, rows, to_find)
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
        scores = profile.run_score(state, pod, snap, feasible)
        if isinstance(scores, Status):
            return scores
        best = np.flatnonzero(scores == scores.max())
        pick = int(best[0]) if len(best) == 1 else int(best[self.rng.randrange(len(best))])
        return ScheduleResult(snap.name(int(feasible[pick])), processed, len(feasible))

    def _find_feasible(
        self, profile: Profile, state: CycleState, pod: Pod, rows: IntpArray, to_find: int
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
            out = profile.run_filters(state, pod, self.snapshot, part)
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
    ) -> FitError:
        if not profile.post_filter:
            return fe
        statuses: dict[str, Status] = {}
        for o in outcomes:
            statuses.update(o.node_statuses(self.snapshot))
        _, st = profile.run_post_filter(state, pod, NodeToStatus(statuses, n_all))
        if st.is_success or not st.message:
            return fe
        pending = fe.pending_plugins | ({st.plugin} if st.code is Code.PENDING else set())
        return FitError(
            fe.message + f" {st.message}.",
            fe.unschedulable_plugins | {st.plugin},
            frozenset(pending),
            fe.code,
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
        self._spawn(self._report_failure(_pod_ref(pod), message, _condition_of(pod.raw)))

    async def _report_failure(
        self, ref: ObjectRef, message: str, current: Mapping[str, Any] | None
    ) -> None:
        """FailedScheduling event (the recorder aggregates repeats) and the
        PodScheduled condition, patched only when it changes (as kube-scheduler's
        updatePod)."""
        key = PodKey(f"{ref.namespace}/{ref.name}")
        try:
            await self.client.record_event(
                ref, "Warning", "FailedScheduling", message, "Scheduling"
            )
            if not (
                current is not None
                and current.get("status") == "False"
                and current.get("reason") == "Unschedulable"
                and current.get("message") == message
            ):
                await self.client.set_pod_condition(key, "False", "Unschedulable", message)
        except Exception as e:
            log.warning("could not report the scheduling failure of %s: %s", key, e)

    # ---- the binding cycle ---------------------------------------------------------

    async def _binding_cycle(
        self, profile: Profile, state: CycleState, qpi: QueuedPodInfo, node: NodeName
    ) -> None:
        pod = qpi.pod
        waited_from = self.clock.now()
        waiting = self.waiting_pods.get(pod.key) is not None
        st = await profile.wait_on_permit(pod)
        if waiting:
            self.metrics.permit_wait.labels(
                "Success" if st.is_success else "Unschedulable"
            ).observe(self.clock.now() - waited_from)
        if st.is_success:
            st = await profile.run_pre_bind(state, pod, node)
        if st.is_success:
            st = await profile.run_bind(state, pod, node)
        if not st.is_success:
            bound_elsewhere = st.message.startswith(BIND_CONFLICT) and await self._bound_by_someone(
                pod
            )
            self._binding_failed(profile, state, qpi, node, st, bound_elsewhere)
            return
        self.cache.finish_binding(pod.key)
        self._scheduled += 1
        self.metrics.pod_scheduling_attempts.observe(qpi.attempts)
        if qpi.initial_attempt_timestamp is not None:
            self.metrics.pod_scheduling_sli.labels(str(qpi.attempts)).observe(
                max(0.0, self.clock.now() - qpi.initial_attempt_timestamp)
            )
        self.last_failure.pop(pod.key, None)
        self._failure_codes.pop(pod.key, None)
        self.queue.done(pod.key)
        try:
            await self.client.record_event(
                _pod_ref(pod),
                "Normal",
                "Scheduled",
                f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
                "Binding",
            )
        except Exception as e:
            log.warning("could not record the Scheduled event of %s: %s", pod.key, e)
        await profile.run_post_bind(state, pod, node)

    async def _bound_by_someone(self, pod: Pod) -> bool:
        """After a 409 on bind: is this very pod (same uid) bound now? A 409 is
        also what a pod deleted and re-created under the same name gets (the
        binding's UID precondition fails); that pod must be scheduled, not
        forgotten. When the pod cannot be read, assume it is not bound: it is
        requeued, and the watch removes it from the queue if it is."""
        try:
            cur = await self.client.read_pod(pod.key)
        except Exception as e:
            log.warning("could not read %s after a bind conflict: %s", pod.key, e)
            return False
        if cur is None:
            return False
        md, spec = _mapping(cur.get("metadata")), _mapping(cur.get("spec"))
        return bool(spec.get("nodeName")) and (not pod.uid or md.get("uid") == pod.uid)

    def _binding_failed(
        self,
        profile: Profile,
        state: CycleState,
        qpi: QueuedPodInfo,
        node: NodeName,
        st: Status,
        bound_elsewhere: bool = False,
    ) -> None:
        pod = qpi.pod
        self._bind_failures += 1
        profile.run_unreserve(state, pod, node)
        self.cache.forget_pod(pod.key)
        self._emit(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), pod, None)
        if bound_elsewhere:
            log.info("pod %s was bound by someone else; forgetting it", pod.key)
            self.queue.done(pod.key)
            return
        if self.cache.known_pod(pod.key) is None:
            self.queue.done(pod.key)
            return  # deleted meanwhile
        self._handle_failure(
            profile,
            qpi,
            st.message or "binding rejected",
            st.code,
            frozenset({st.plugin}) if st.plugin else frozenset(),
            frozenset(),
        )
        self._notify()

    # ---- running -------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def binding_in_flight(self) -> int:
        return len(self._tasks)

    async def settle(self) -> None:
        """Let every task that can run without time passing do so.

        Binding tasks finish within a few loop turns unless they wait on a future
        that only a timer or another cycle can complete (Permit); we stop once
        the number of tasks has not moved for three turns in a row.
        """
        idle = 0
        while idle < 3:
            before = len(self._tasks)
            await asyncio.sleep(0)
            idle = idle + 1 if len(self._tasks) == before else 0

    async def run(self, stop: asyncio.Event) -> None:
        """Schedule until `stop` is set (real clock)."""
        self._wakeup = asyncio.Event()
        while not stop.is_set():
            try:
                self.queue.flush()
                for expired in self.cache.cleanup_expired():
                    log.warning("assumed pod %s expired before its binding was confirmed", expired)
            except Exception:
                self._loop_errors += 1
                self.metrics.loop_error("scheduling")
                log.exception("queue flush or cache cleanup failed")
            worked = 0
            while self.schedule_one():  # never raises
                worked += 1
                if worked % 64 == 0:
                    await asyncio.sleep(0)
            self._wakeup.clear()
            nxt = self.queue.next_wakeup()
            timeout = 1.0 if nxt is None else max(0.0, min(1.0, nxt - self.clock.now()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=timeout)

    async def shutdown(self) -> None:
        for wp in self.waiting_pods:
            wp.reject("", "scheduler shutting down")
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _refresh_gauges(self) -> None:
        """Set the gauges from the queue and cache (at scrape time, not per cycle)."""
        m = self.metrics
        q = self.queue.statistics()
        for queue, n in (
            ("active", q.active),
            ("backoff", q.backoff),
            ("unschedulable", q.unschedulable),
            ("gated", q.gated),
        ):
            m.pending_pods.labels(queue).set(n)
        c = self.cache.statistics()
        m.cache_size.labels("nodes").set(c.nodes)
        m.cache_size.labels("pods").set(c.pods)
        m.cache_size.labels("assumed_pods").set(c.assumed_pods)
        # As kube-scheduler's UnschedulableReason gauge: a pod counts for each plugin
        # that rejected (or gated) it from its failed attempt until its next pop,
        # wherever it waits meanwhile (pool, backoffQ, activeQ after a move).
        by_plugin: dict[tuple[str, str], int] = {}
        for qpi, _ in self.queue.pending_pods():
            plugins = qpi.unschedulable_plugins | qpi.pending_plugins
            if qpi.gated and qpi.gating_plugin:
                plugins = plugins | {qpi.gating_plugin}
            for plugin in plugins:
                k = (plugin, qpi.pod.scheduler_name)
                by_plugin[k] = by_plugin.get(k, 0) + 1
        phases: dict[str, int] = {}
        for pg in self.cache.pod_groups():
            phase = (
                native_phase(pg.status) if pg.native else str(pg.status.get("phase") or "Pending")
            )
            phases[phase] = phases.get(phase, 0) + 1
        m.podgroups.clear()
        for phase, n in phases.items():
            m.podgroups.labels(phase).set(n)
        m.unschedulable_pods.clear()
        for (plugin, profile), n in by_plugin.items():
            m.unschedulable_pods.labels(plugin, profile).set(n)

    def statistics(self) -> SchedulerStats:
        return SchedulerStats(
            self.cycle,
            self._scheduled,
            self._failed,
            self._bind_failures,
            len(self._tasks),
            self._loop_errors,
            self._dropped_known,
        )


def _action_name(action: ActionType) -> str:
    if action & ActionType.ADD:
        return "Add"
    if action & ActionType.DELETE:
        return "Delete"
    return "Update"


def _isolated_from(config: SchedulerConfig) -> IsolatedCPU:
    """The isolated-CPU names from NodeResourcesFit's args (the cache charges by them)."""
    default = IsolatedCPU()
    for p in config.profiles:
        for specs in p.plugins.values():
            for spec in specs:
                if spec.name == "NodeResourcesFit":
                    a = spec.args
                    return IsolatedCPU(
                        annotation=str(a.get("isolatedCPUAnnotation", default.annotation)),
                        resource=str(a.get("isolatedCPUResource", default.resource)),
                    )
    return default


def _node_update_action(old: Node, new: Node) -> ActionType:
    """Which scheduling properties changed (kube-scheduler's nodeSchedulingPropertiesChange)."""
    action = ActionType(0)
    if old.allocatable != new.allocatable:
        action |= ActionType.UPDATE_NODE_ALLOCATABLE
    if old.labels != new.labels:
        action |= ActionType.UPDATE_NODE_LABEL
    if old.taints != new.taints or old.unschedulable != new.unschedulable:
        action |= ActionType.UPDATE_NODE_TAINT
    if old.images != new.images:
        action |= ActionType.UPDATE_OTHER
    return action


def _pod_update_action(old: Pod, new: Pod) -> ActionType:
    action = ActionType(0)
    if old.labels != new.labels:
        action |= ActionType.UPDATE_POD_LABEL
    if old.requests != new.requests or (new.terminal and not old.terminal):
        action |= ActionType.UPDATE_POD_SCALE_DOWN
    if not action and old.raw is not new.raw:
        action |= ActionType.UPDATE_OTHER
    return action


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _ref_of(obj: Mapping[str, Any], kind: str, namespace: str, name: str) -> ObjectRef:
    md = _mapping(obj.get("metadata"))
    uid, rv = md.get("uid"), md.get("resourceVersion")
    return ObjectRef(
        kind,
        namespace,
        name,
        uid if isinstance(uid, str) else "",
        "v1",
        rv if isinstance(rv, str) else "",
    )


def _pod_ref(pod: Pod) -> ObjectRef:
    return _ref_of(pod.raw, "Pod", pod.namespace, pod.name)


def _condition_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's current PodScheduled condition, if any."""
    status = obj.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conds, list):
        return None
    for c in conds:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled":
            return c
    return None
