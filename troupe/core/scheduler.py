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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from troupe.api.parse import PodParser
from troupe.api.types import IsolatedCPU, PodKey
from troupe.config import SchedulerConfig
from troupe.core.binding_cycle import BindingCycle
from troupe.core.cache import Cache
from troupe.core.clock import Clock
from troupe.core.cluster import ClusterClient
from troupe.core.context import FailureMessages, SchedulerContext
from troupe.core.eventhandlers import EventHandlers
from troupe.core.explain import DecisionLog, LiveExplain
from troupe.core.failures import Failures
from troupe.core.group_cycle import GroupCycle
from troupe.core.metrics import Metrics
from troupe.core.queue import FifoFallback, SchedulingQueue
from troupe.core.schedule_one import PodCycle, num_feasible_nodes_to_find
from troupe.core.snapshot import Snapshot
from troupe.framework.fit import FitError, ScheduleResult, fit_error_message
from troupe.framework.handle import Handle
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status
from troupe.framework.waiting_pods import WaitingPods

__all__ = [
    "FitError",
    "ScheduleResult",
    "Scheduler",
    "SchedulerStats",
    "fit_error_message",
    "num_feasible_nodes_to_find",
]

log = logging.getLogger(__name__)

# The loop hands the event loop a turn after a pod once this long passed since
# the last turn (watch intake, binding cycles, the heartbeat leader election
# waits for), however many pods that was: one heavy pod is one turn late.
YIELD_AFTER_SECONDS: Final = 0.02


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
    """The scheduler: its parts built and put together (see troupe/core/context.py),
    start-up, the loop, shutdown and the gauges. Cluster events come in through
    the `on_*` handlers (EventHandlers'), the loop calls `schedule_one`.

    `registry` maps the plugin names a profile may enable to their classes
    (the in-tree registry, passed by the command, the operator and the
    tools): the core knows plugins only through it and the extension points."""

    def __init__(
        self,
        config: SchedulerConfig,
        client: ClusterClient,
        clock: Clock,
        *,
        registry: Mapping[str, type],
        prefer_per_node: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        metrics = metrics or Metrics()
        metrics.refreshers.append(self._refresh_gauges)
        isolated = config.isolated
        t = config.troupe
        cache = Cache(clock, isolated, t.assumed_pod_ttl_seconds)
        snapshot = Snapshot()
        waiting_pods = WaitingPods()
        rng = random.Random(t.seed)
        handle = Handle(
            clock=clock,
            client=client,
            waiting_pods=waiting_pods,
            lister=cache,
            isolated=isolated,
            rng=rng,
            snapshot=lambda: snapshot,
            volumes=cache.volumes,
            devices=cache.devices,
            activate=lambda keys: self.ctx.activate(keys),
            resort=lambda keys: self.ctx.queue.resort(keys),
            spawn=lambda coro: self.ctx.spawn(coro),
            failure=lambda key: self.ctx.records.failure(key),
            features=t.features,
            metrics=metrics,
        )
        profiles: dict[str, Profile] = {
            p.scheduler_name: Profile(
                p.scheduler_name,
                p.plugins,
                registry,
                handle,
                prefer_per_node=prefer_per_node,
                percentage_of_nodes_to_score=p.percentage_of_nodes_to_score,
                metrics=metrics,
            )
            for p in config.profiles
        }
        handle.profile_of = profiles.get
        first = next(iter(profiles.values()))
        hints: dict[str, Any] = {}
        for prof in profiles.values():
            hints.update(prof.events_to_register())
        queue = SchedulingQueue(
            clock=clock,
            sort_key=first.sort_key,
            pre_enqueue=lambda pod: self.events.pre_enqueue(pod),
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
        self.ctx = ctx = SchedulerContext(
            config=config,
            metrics=metrics,
            client=client,
            clock=clock,
            isolated=isolated,
            milli=frozenset({"cpu", isolated.resource}),
            pod_parser=PodParser(),
            cache=cache,
            snapshot=snapshot,
            waiting_pods=waiting_pods,
            rng=rng,
            handle=handle,
            profiles=profiles,
            queue=queue,
            priority_classes=handle.priority_classes,
        )
        # troupe.explain: the last decision of each pod (/debug/explain), and
        # the explanations written on the pods that ask.
        self.decisions: DecisionLog | None = None
        if t.explain_enabled:
            live = LiveExplain(ctx, t.explain_max_pods)
            self.decisions = live.decisions
            ctx.observe, ctx.gang_pending = live.observe, live.gang_pending
        self.events = EventHandlers(ctx)
        self.failures = Failures(ctx)
        self.binder = BindingCycle(ctx, self.failures)
        self.pods = PodCycle(ctx, self.failures, self.binder)
        self.groups = GroupCycle(ctx, self.pods, self.failures)
        # The handlers the operator and the simulator feed cluster events to.
        ev = self.events
        self.on_pod = ev.on_pod
        self.on_node = ev.on_node
        self.on_pod_group = ev.on_pod_group
        self.on_composite_pod_group = ev.on_composite_pod_group
        self.on_priority_class = ev.on_priority_class
        self.on_workload = ev.on_workload
        self.on_pdb = ev.on_pdb
        self.on_namespace = ev.on_namespace
        self.on_volume_object = ev.on_volume_object
        self.on_dra_object = ev.on_dra_object
        self.handles = ev.handles
        self.enable_writes = ev.enable_writes

    # What callers read (the simulator, the operator, tests): the shared state.
    @property
    def config(self) -> SchedulerConfig:
        return self.ctx.config

    @property
    def metrics(self) -> Metrics:
        return self.ctx.metrics

    @property
    def clock(self) -> Clock:
        return self.ctx.clock

    @property
    def cache(self) -> Cache:
        return self.ctx.cache

    @property
    def queue(self) -> SchedulingQueue:
        return self.ctx.queue

    @property
    def snapshot(self) -> Snapshot:
        return self.ctx.snapshot

    @property
    def handle(self) -> Handle:
        return self.ctx.handle

    @property
    def profiles(self) -> dict[str, Profile]:
        return self.ctx.profiles

    @property
    def waiting_pods(self) -> WaitingPods:
        return self.ctx.waiting_pods

    @property
    def isolated(self) -> IsolatedCPU:
        return self.ctx.isolated

    @property
    def invalid(self) -> Mapping[str, Any]:
        return self.ctx.invalid

    @property
    def writes_enabled(self) -> bool:
        return self.ctx.writes_enabled

    @writes_enabled.setter
    def writes_enabled(self, on: bool) -> None:
        """False: a standby replica (writes nothing until `enable_writes`)."""
        self.ctx.writes_enabled = on

    @property
    def last_failure(self) -> Mapping[PodKey, str]:
        """Pod key -> the message of its last failed attempt (what the pod says)."""
        return FailureMessages(self.ctx.records)

    @property
    def next_start_node_index(self) -> int:
        return self.ctx.next_start_node_index

    @property
    def cycle(self) -> int:
        return self.ctx.counters.cycles

    @property
    def group_attempts(self) -> int:
        return self.ctx.counters.group_attempts

    @property
    def binding_in_flight(self) -> int:
        return len(self.ctx.tasks)

    def progress(self) -> tuple[int, bool]:
        """(scheduling cycles started, whether one is running now). Read from
        another thread by what tells a busy loop from a hung one for leader
        election (troupe.operator.leader.CycleWatch), which times cycles by its own clock."""
        ctx = self.ctx
        return ctx.counters.cycles, bool(ctx.cycle_pods)

    def schedule_one(self) -> bool:
        """Run one scheduling cycle. Returns False when the active queue was empty.

        Never raises: a cycle that fails with an exception is logged with its
        traceback and counted (`statistics().loop_errors`), and the pods it held
        go back to the backoffQ (or are dropped if the cache holds them now).
        """
        ctx = self.ctx
        qpi = ctx.queue.pop()
        if qpi is None:
            return False
        ctx.counters.cycles += 1
        ctx.cycle_pods = [qpi]
        try:
            self._schedule_popped(qpi)
        except Exception:
            ctx.counters.loop_errors += 1
            ctx.metrics.loop_error("scheduling")
            log.exception("scheduling cycle %d of pod %s failed", ctx.counters.cycles, qpi.pod.key)
            self._give_back(ctx.cycle_pods)
        finally:
            ctx.cycle_pods = []
        return True

    def _schedule_popped(self, qpi: QueuedPodInfo) -> None:
        ctx = self.ctx
        pod = qpi.pod
        profile = ctx.profiles.get(pod.scheduler_name)
        if profile is None or pod.deleting:
            ctx.queue.done(pod.key)
            return
        if ctx.cache.pod(pod.key) is not None:
            # Bound or assumed already (a stale pending event got it queued).
            ctx.counters.dropped_known += 1
            log.info("dropping pod %s from the queue: the cache holds it already", pod.key)
            ctx.queue.done(pod.key)
            return
        ctx.cache.update_snapshot(ctx.snapshot)
        pg = self.groups.wants(profile, qpi)
        if pg is not None:
            self.groups.schedule(profile, qpi, pg)
            return
        # A pod of a group with required topology scheduled alone goes where its
        # group runs (or to nodes that have the labels, before any member runs).
        within = self.groups.within(qpi.pod, profile) if qpi.pod.group_key is not None else None
        if isinstance(within, str):
            gang = profile.group_scheduling
            rejector = gang.NAME if gang is not None else ""
            self.failures.fail(profile, qpi, Status(Code.UNSCHEDULABLE, (within,), rejector))
            self.failures.count_attempt(profile, "unschedulable", 0.0)
            return
        self.pods.schedule(profile, qpi, within)

    def _give_back(self, held: list[QueuedPodInfo]) -> None:
        """After a cycle raised: requeue with backoff what it held and did not place."""
        ctx = self.ctx
        for q in held:
            key = q.pod.key
            try:
                if ctx.cache.pod(key) is None and ctx.cache.known_pod(key) is not None:
                    ctx.queue.add_backoff(q)
                ctx.queue.done(key)
            except Exception:
                log.exception("could not requeue pod %s after a failed cycle", key)

    async def settle(self) -> None:
        """Let every task that can run without time passing do so.

        Binding tasks finish within a few loop turns unless they wait on a future
        that only a timer or another cycle can complete (Permit); we stop once
        the number of tasks has not moved for three turns in a row.
        """
        tasks = self.ctx.tasks
        idle = 0
        while idle < 3:
            before = len(tasks)
            await asyncio.sleep(0)
            idle = idle + 1 if len(tasks) == before else 0

    async def run(self, stop: asyncio.Event) -> None:
        """Schedule until `stop` is set (real clock)."""
        ctx = self.ctx
        ctx.wakeup = wakeup = asyncio.Event()
        while not stop.is_set():
            try:
                self.queue.flush()
                for expired in self.cache.cleanup_expired():
                    log.warning("assumed pod %s expired before its binding was confirmed", expired)
            except Exception:
                ctx.counters.loop_errors += 1
                self.metrics.loop_error("scheduling")
                log.exception("queue flush or cache cleanup failed")
            turn = self.clock.now()
            while self.schedule_one():  # never raises
                if not 0.0 <= self.clock.now() - turn < YIELD_AFTER_SECONDS:  # or a clock step
                    await asyncio.sleep(0)
                    turn = self.clock.now()
            wakeup.clear()
            nxt = self.queue.next_wakeup()
            timeout = 1.0 if nxt is None else max(0.0, min(1.0, nxt - self.clock.now()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout=timeout)

    async def shutdown(self) -> None:
        for wp in self.waiting_pods:
            wp.reject("", "scheduler shutting down")
        if self.ctx.tasks:
            await asyncio.gather(*list(self.ctx.tasks), return_exceptions=True)

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
            phase = self.group_phase(pg.api_version, pg.status)
            phases[phase] = phases.get(phase, 0) + 1
        m.podgroups.clear()
        for phase, n in phases.items():
            m.podgroups.labels(phase).set(n)
        m.unschedulable_pods.clear()
        for (plugin, profile), n in by_plugin.items():
            m.unschedulable_pods.labels(plugin, profile).set(n)

    def group_phase(self, api_version: str, status: Mapping[str, Any]) -> str:
        """A PodGroup's state in one word, as the first profile that schedules
        gangs (its GroupSchedulingPlugin) tells it; without one, status.phase."""
        for profile in self.profiles.values():
            if profile.group_scheduling is not None:
                return profile.group_scheduling.group_phase(api_version, status)
        return str(status.get("phase") or "Pending")

    def statistics(self) -> SchedulerStats:
        c = self.ctx.counters
        return SchedulerStats(
            c.cycles,
            c.scheduled,
            c.failed,
            c.bind_failures,
            len(self.ctx.tasks),
            c.loop_errors,
            c.dropped_known,
        )
