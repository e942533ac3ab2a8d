"""What the scheduler's parts share: its state, and the few operations every
part uses (spawn a task, wake the loop, tell the queue and the plugins about a
cluster event, report a pod's failure).

The scheduler is split as kube-scheduler splits pkg/scheduler: event handling
(`eventhandlers.py`, eventhandlers.go), the pod's scheduling cycle
(`schedule_one.py`, schedule_one.go), the gang's group cycle
(`group_cycle.py`), and the binding cycle (`binding_cycle.py`); `Scheduler` in
`troupe.py` puts them together and owns start-up, the loop and the gauges.
Each part is a mixin over `SchedulerState`; what one part calls in another is
declared here for the type checker only.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from troupe.api.parse import PodParser
from troupe.api.types import (
    GroupKey,
    InvalidObject,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
    PriorityClass,
)
from troupe.cache import Cache
from troupe.clock import Clock
from troupe.cluster import ClusterClient
from troupe.config import SchedulerConfig
from troupe.events import ObjectRef
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
)
from troupe.framework.handle import Handle
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status
from troupe.framework.waiting_pods import WaitingPods
from troupe.metrics import Metrics
from troupe.queue import SchedulingQueue
from troupe.snapshot import IsolatedCPU, Snapshot

if TYPE_CHECKING:
    from troupe.schedule_one import FitError, ScheduleResult

log = logging.getLogger(__name__)


class SchedulerState:
    """The state every part of the scheduler reads and writes (set up by
    `Scheduler.__init__`)."""

    config: SchedulerConfig
    metrics: Metrics
    client: ClusterClient
    clock: Clock
    isolated: IsolatedCPU
    milli: frozenset[str]
    pod_parser: PodParser
    cache: Cache
    snapshot: Snapshot
    waiting_pods: WaitingPods
    rng: random.Random
    handle: Handle
    profiles: dict[str, Profile]
    queue: SchedulingQueue
    priority_classes: dict[str, PriorityClass]
    invalid: dict[str, InvalidObject]
    last_failure: dict[PodKey, str]
    _failure_codes: dict[PodKey, Code]
    _gate_reported: dict[PodKey, str]
    next_start_node_index: int
    cycle: int
    _scheduled: int
    _failed: int
    _bind_failures: int
    _loop_errors: int
    _dropped_known: int
    _cycle_pods: list[QueuedPodInfo]
    group_attempts: int
    group_failures: int
    _gang_victims: dict[GroupKey, set[PodKey]]
    _tasks: set[asyncio.Task[None]]
    _wakeup: asyncio.Event | None
    writes_enabled: bool
    _held_reports: dict[str, tuple[ObjectRef, str]]
    _reported: dict[str, tuple[str, str]]
    _held_gates: dict[PodKey, tuple[Pod, str]]

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
            label = f"{event.resource.value}{action_name(event.action)}"
            self.metrics.queue_incoming.labels("active", label).inc(moved)

    def _notify(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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

    if TYPE_CHECKING:
        # Implemented by the other parts (see the module docstring).
        async def _binding_cycle(
            self, profile: Profile, state: CycleState, qpi: QueuedPodInfo, node: NodeName
        ) -> None: ...
        @staticmethod
        def _gang_profile(profile: Profile) -> bool: ...
        def _group_admitted(self, group: GroupKey, min_member: int) -> bool: ...
        def _schedule_group(self, profile: Profile, first: QueuedPodInfo, pg: PodGroup) -> None: ...
        def _commit(
            self, profile: Profile, state: CycleState, qpi: QueuedPodInfo, node: NodeName
        ) -> bool: ...
        def _count_attempt(self, profile: Profile, outcome: str, seconds: float) -> None: ...
        def _fail(
            self, profile: Profile, qpi: QueuedPodInfo, result: FitError | Status
        ) -> None: ...
        def _handle_failure(
            self,
            profile: Profile,
            qpi: QueuedPodInfo,
            message: str,
            code: Code,
            plugins: frozenset[str],
            pending: frozenset[str],
        ) -> None: ...
        @staticmethod
        def _outcome(result: FitError | Status) -> str: ...
        def _schedule_pod(
            self, profile: Profile, state: CycleState, pod: Pod, post_filter: bool = True
        ) -> ScheduleResult | FitError | Status: ...
        def _pre_enqueue(self, pod: Pod) -> Status: ...
        def _nominate(self, pod: Pod, node: str) -> None: ...
        def _nominated_charged(self, pod: Pod) -> AbstractContextManager[None]: ...
        def _refresh_gauges(self) -> None: ...


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
