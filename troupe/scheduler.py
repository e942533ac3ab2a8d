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
from typing import Any

from troupe.api.parse import PodParser
from troupe.api.types import (
    GroupKey,
    InvalidObject,
    Pod,
    PodKey,
    PriorityClass,
)
from troupe.binding_cycle import BindingCycle
from troupe.cache import Cache
from troupe.clock import Clock
from troupe.cluster import ClusterClient
from troupe.config import SchedulerConfig
from troupe.eventhandlers import EventHandlers
from troupe.events import ObjectRef
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    QueuedPodInfo,
)
from troupe.framework.runtime import Profile
from troupe.framework.status import Code
from troupe.framework.waiting_pods import WaitingPods
from troupe.group_cycle import GroupCycle
from troupe.metrics import Metrics
from troupe.plugins.coscheduling.status import native_phase
from troupe.plugins.registry import IN_TREE
from troupe.queue import FifoFallback, SchedulingQueue
from troupe.schedule_one import (
    FitError,
    PodCycle,
    ScheduleResult,
    fit_error_message,
    num_feasible_nodes_to_find,
)
from troupe.snapshot import IsolatedCPU, Snapshot

__all__ = [
    "FitError",
    "ScheduleResult",
    "Scheduler",
    "SchedulerStats",
    "fit_error_message",
    "num_feasible_nodes_to_find",
]

log = logging.getLogger(__name__)


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


class Scheduler(EventHandlers, PodCycle, GroupCycle, BindingCycle):
    """The scheduler: its parts put together (see troupe/state.py), start-up,
    the loop, shutdown and the gauges."""

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
        self.pod_parser = PodParser()
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
            volumes=self.cache.volumes,
            activate=self._activate,
            spawn=self._spawn,
            failure=self._failure_of,
            features=config.troupe.features,
            metrics=self.metrics,
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
        self.handle.profile_of = self.profiles.get
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
        # Victims of each gang's last preemption: it waits for them to go.
        self._gang_victims: dict[GroupKey, set[PodKey]] = {}
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
