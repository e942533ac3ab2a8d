"""What the scheduler's parts share: one `SchedulerContext` (the cache, queue,
snapshot, profiles, client, clock and metrics, and the few operations every part
uses: spawn a task, wake the loop, tell the queue and the plugins about a cluster
event, write a pod's failure), and `PodRecords`, the one record per pod of what
failed and what was said about it.

The scheduler is split as kube-scheduler splits pkg/scheduler, into parts that
each get the context and the parts they call, nothing more (see `Scheduler` in
`scheduler.py`, which builds them):

    EventHandlers (eventhandlers.py)   cluster events -> cache, queue, plugins
    Failures      (failures.py)        a failed attempt: requeue, record, report
    BindingCycle  (binding_cycle.py)   Permit wait, PreBind, Bind; uses Failures
    PodCycle      (schedule_one.py)    one pod's cycle; uses Failures, BindingCycle
    GroupCycle    (group_cycle.py)     a gang's cycle; uses PodCycle, Failures
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from troupe.api.parse import PodParser
from troupe.api.types import (
    InvalidObject,
    IsolatedCPU,
    Pod,
    PodKey,
    PriorityClass,
)
from troupe.config import SchedulerConfig
from troupe.core.cache import Cache
from troupe.core.clock import Clock
from troupe.core.cluster import ClusterClient
from troupe.core.metrics import Metrics
from troupe.core.queue import SchedulingQueue
from troupe.core.recorder import ObjectRef
from troupe.core.snapshot import Snapshot
from troupe.framework.events import ActionType, ClusterEvent
from troupe.framework.handle import Handle
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.runtime import Profile
from troupe.framework.status import Code
from troupe.framework.waiting_pods import WaitingPods

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PodRecord:
    """What the scheduler remembers of one pod between its attempts."""

    # The message and code of its last failed attempt (shown on the pod; a gang's
    # status reports it).
    message: str | None = None
    code: Code | None = None
    # The PreEnqueue rejection last written on the pod, and one held back while
    # this replica stands by.
    gate_reported: str | None = None
    held_gate: tuple[Pod, str] | None = None
    # The malformed-object report last written on the pod ((uid, message)), and
    # one held back while standing by.
    reported: tuple[str, str] | None = None
    held_report: tuple[ObjectRef, str] | None = None

    def empty(self) -> bool:
        return (
            self.message is None
            and self.gate_reported is None
            and self.held_gate is None
            and self.reported is None
            and self.held_report is None
        )


class PodRecords:
    """One `PodRecord` per pod, created on first use and dropped when empty or
    when the pod is deleted (`forget`): nothing about a pod outlives it."""

    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        self._by_key: dict[PodKey, PodRecord] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def get(self, key: PodKey) -> PodRecord | None:
        return self._by_key.get(key)

    def of(self, key: PodKey) -> PodRecord:
        rec = self._by_key.get(key)
        if rec is None:
            rec = self._by_key[key] = PodRecord()
        return rec

    def items(self) -> Iterator[tuple[PodKey, PodRecord]]:
        return iter(list(self._by_key.items()))

    def prune(self, key: PodKey) -> None:
        rec = self._by_key.get(key)
        if rec is not None and rec.empty():
            del self._by_key[key]

    def forget(self, key: PodKey) -> None:
        self._by_key.pop(key, None)

    # -- the last failure ------------------------------------------------------------

    def set_failure(self, key: PodKey, message: str, code: Code | None = None) -> None:
        """The pod's last failure; without `code`, the code of the previous one stays."""
        rec = self.of(key)
        rec.message = message
        if code is not None:
            rec.code = code

    def clear_failure(self, key: PodKey) -> None:
        rec = self._by_key.get(key)
        if rec is not None:
            rec.message = rec.code = None
            self.prune(key)

    def failure(self, key: PodKey) -> tuple[str, Code] | None:
        """The message and code of the pod's last failed attempt (Handle.failure)."""
        rec = self._by_key.get(key)
        if rec is None or rec.message is None:
            return None
        return rec.message, rec.code or Code.UNSCHEDULABLE


class FailureMessages(Mapping[PodKey, str]):
    """Read-only view: pod key -> the message of its last failed attempt."""

    __slots__ = ("_records",)

    def __init__(self, records: PodRecords) -> None:
        self._records = records

    def __getitem__(self, key: PodKey) -> str:
        rec = self._records.get(key)
        if rec is None or rec.message is None:
            raise KeyError(key)
        return rec.message

    def __iter__(self) -> Iterator[PodKey]:
        return (k for k, r in self._records.items() if r.message is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(slots=True)
class Counters:
    """What `Scheduler.statistics()` reports, counted by the parts."""

    cycles: int = 0
    scheduled: int = 0
    failed: int = 0
    bind_failures: int = 0
    # Scheduling cycles that raised: logged with the traceback and survived.
    loop_errors: int = 0
    # Popped pods dropped because the cache already holds them (bound or assumed).
    dropped_known: int = 0
    group_attempts: int = 0
    group_failures: int = 0


@dataclass(eq=False)
class SchedulerContext:
    """The state every part of the scheduler reads and writes, built once by
    `Scheduler`. Parts keep their own state to themselves (the gang victims a
    group waits for, the binding tasks' results); what is here is shared."""

    config: SchedulerConfig
    metrics: Metrics
    client: ClusterClient
    clock: Clock
    isolated: IsolatedCPU
    # cpu and the isolated resource are kept in milli-units.
    milli: frozenset[str]
    pod_parser: PodParser
    cache: Cache
    snapshot: Snapshot
    waiting_pods: WaitingPods
    rng: random.Random
    handle: Handle
    profiles: dict[str, Profile]
    queue: SchedulingQueue
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    # Objects that could not be read, by key (their reasons).
    invalid: dict[str, InvalidObject] = field(default_factory=dict)
    records: PodRecords = field(default_factory=PodRecords)
    counters: Counters = field(default_factory=Counters)
    next_start_node_index: int = 0
    # The pods the current scheduling cycle holds (popped or taken from the
    # queue), so that a cycle that raises can give them back.
    cycle_pods: list[QueuedPodInfo] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    wakeup: asyncio.Event | None = None
    # Per pod with a failure report in flight, the number of its latest report
    # and the lock its condition patches take in turn (`report_failure`).
    report_seq: dict[PodKey, int] = field(default_factory=dict)
    report_locks: dict[PodKey, asyncio.Lock] = field(default_factory=dict)
    # Writes to the cluster outside the scheduling and binding cycles (reports
    # on malformed objects) are made only while `writes_enabled`: a standby
    # replica watches and keeps its cache warm, but writes nothing.
    writes_enabled: bool = True
    # Called after each scheduling attempt's search, before anything is assumed
    # (the snapshot is the one the attempt saw): `troupe simulate --explain`.
    # Arguments: profile, pod, result, and for a gang's member its group and
    # the domain tried ("" otherwise).
    observe: Callable[[Any, Pod, Any, str, str], None] | None = None
    # Called when a group cycle ends without placing its gang (after `observe`
    # saw each member's trial): profile, the members, the group, the message
    # they wait with, what preemption did for the gang ("" if not tried), and
    # the required topology level's domains not tried, with why.
    gang_pending: Callable[[Any, list[Pod], str, str, str, list[tuple[str, str]]], None] | None = (
        None
    )

    def activate(self, keys: Iterable[PodKey]) -> None:
        self.queue.activate(keys)
        self.notify()

    def emit(self, event: ClusterEvent, old: Any, new: Any) -> None:
        """Tell the queue (queueing hints) and the plugins' watchers about an event."""
        for watcher in self.handle.watchers:
            try:
                watcher(event, old, new)
            except Exception:
                log.exception("event watcher failed on %s", event)
        moved = self.queue.move_on_event(event, old, new)
        if moved:
            label = f"{event.resource.value}{action_name(event.action)}"
            self.metrics.queue_incoming.labels("active", label).inc(moved)

    def notify(self) -> None:
        if self.wakeup is not None:
            self.wakeup.set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def nominate(self, pod: Pod, node: str) -> None:
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
        self.spawn(self._write_nomination(pod, node or None))

    async def _write_nomination(self, pod: Pod, node: str | None) -> None:
        try:
            await self.client.set_nominated_node(pod.key, node)
        except Exception as e:
            log.warning("could not set the nominated node of %s: %s", pod.key, e)

    async def report_failure(
        self, ref: ObjectRef, message: str, current: Mapping[str, Any] | None
    ) -> None:
        """FailedScheduling event (the recorder aggregates repeats) and the
        PodScheduled condition, patched only when it changes (as kube-scheduler's
        updatePod).

        Reports are tasks, and two of one pod may be in flight at once (a
        PreEnqueue report and a cycle's, say): the later one's message is the
        pod's reason. A pod's condition patches go one at a time, in the order
        reported, and a report overtaken by a newer one of the same pod writes
        no condition: its message is stale (as kube-scheduler's API dispatcher
        keeps only the newest status update queued for an object). Its Event
        is still recorded: Events are the pod's history."""
        key = PodKey(f"{ref.namespace}/{ref.name}")
        seq = self.report_seq.get(key, 0) + 1
        self.report_seq[key] = seq
        lock = self.report_locks.setdefault(key, asyncio.Lock())
        try:
            await self.client.record_event(
                ref, "Warning", "FailedScheduling", message, "Scheduling"
            )
            async with lock:
                if self.report_seq.get(key) != seq:
                    return  # a newer report of the pod writes its own
                if not (
                    current is not None
                    and current.get("status") == "False"
                    and current.get("reason") == "Unschedulable"
                    and current.get("message") == message
                ):
                    await self.client.set_pod_condition(key, "False", "Unschedulable", message)
        except Exception as e:
            log.warning("could not report the scheduling failure of %s: %s", key, e)
        finally:
            if self.report_seq.get(key) == seq:  # the newest: nothing of the pod in flight
                del self.report_seq[key]
                del self.report_locks[key]


def as_mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def object_ref(obj: Mapping[str, Any], kind: str, namespace: str, name: str) -> ObjectRef:
    md = as_mapping(obj.get("metadata"))
    uid, rv = md.get("uid"), md.get("resourceVersion")
    return ObjectRef(
        kind,
        namespace,
        name,
        uid if isinstance(uid, str) else "",
        "v1",
        rv if isinstance(rv, str) else "",
    )


def pod_ref(pod: Pod) -> ObjectRef:
    return object_ref(pod.raw, "Pod", pod.namespace, pod.name)


def pod_scheduled_condition(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's current PodScheduled condition, if any."""
    status = obj.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conds, list):
        return None
    for c in conds:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled":
            return c
    return None


def action_name(action: ActionType) -> str:
    if action & ActionType.ADD:
        return "Add"
    if action & ActionType.DELETE:
        return "Delete"
    return "Update"
