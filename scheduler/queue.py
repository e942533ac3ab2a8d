"""The scheduling queue: activeQ, backoffQ, the unschedulable pool, gated pods.

As kube-scheduler's PriorityQueue (backend/queue/scheduling_queue.go):

- activeQ holds pods ready to be tried, ordered by the QueueSort plugin's key;
- backoffQ holds pods that failed and wait out their backoff
  (podInitialBackoffSeconds doubling per attempt up to podMaxBackoffSeconds);
- the unschedulable pool holds pods that did not fit; a cluster event moves a
  pod back only if one of the plugins that rejected it registered for that
  event and its queueing hint says QUEUE; pods left there longer than
  `max_in_unschedulable` (5 minutes) are flushed back anyway;
- gated pods (a PreEnqueue plugin said no) wait in the pool until an update of
  the pod, or an event the gating plugin registered for, lets them in.

Events that arrive while a pod is being scheduled (in flight) are remembered,
so a pod that fails after the event that could have helped it is retried
instead of parked.

Troupe adds the FIFO fallback: when the activeQ is backed up and the pods at
its head keep failing, it pops in arrival order (the time a pod last entered
the activeQ) for a while, so schedulable low-priority pods are not starved by
unschedulable high-priority ones that keep coming back.

Everything is synchronous and timed by an injected Clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sortedcontainers import SortedList

from scheduler.api.types import Pod, PodKey
from scheduler.clock import Clock
from scheduler.framework.interface import (
    ClusterEvent,
    ClusterEventWithHint,
    QueuedPodInfo,
    QueueingHint,
)
from scheduler.framework.status import Status

log = logging.getLogger(__name__)

ACTIVE: Final = "activeQ"
BACKOFF: Final = "backoffQ"
UNSCHEDULABLE: Final = "unschedulable"
GATED: Final = "gated"
MAX_INFLIGHT_EVENTS: Final = 256


@dataclass(frozen=True, slots=True)
class FifoFallback:
    enabled: bool = True
    min_queue_length: int = 100
    failure_streak: int = 50
    duration_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class QueueStats:
    active: int
    backoff: int
    unschedulable: int
    gated: int
    fifo_active: bool


_Event = tuple[ClusterEvent, Any, Any]


_VOLATILE_METADATA: Final = ("resourceVersion", "generation", "managedFields")


def _comparable(pod: Pod) -> dict[str, Any]:
    raw = dict(pod.raw)
    md = raw.get("metadata")
    if isinstance(md, dict):
        raw["metadata"] = {k: v for k, v in md.items() if k not in _VOLATILE_METADATA}
    raw.pop("status", None)
    return raw


def pod_updated(old: Pod, new: Pod) -> bool:
    """Whether anything but the status and bookkeeping metadata changed."""
    return old.raw is not new.raw and _comparable(old) != _comparable(new)


class SchedulingQueue:
    def __init__(
        self,
        *,
        clock: Clock,
        sort_key: Callable[[QueuedPodInfo], Any],
        pre_enqueue: Callable[[Pod], Status],
        hints: Mapping[str, Sequence[ClusterEventWithHint]],
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = 300.0,
        fifo: FifoFallback | None = None,
    ) -> None:
        self.clock = clock
        self.sort_key = sort_key
        self.pre_enqueue = pre_enqueue
        self.hints = dict(hints)
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_in_unschedulable = max_in_unschedulable
        self.fifo = fifo or FifoFallback()
        self._info: dict[PodKey, QueuedPodInfo] = {}
        self._where: dict[PodKey, str] = {}
        self._active: SortedList = SortedList()  # (sort key, seq, pod key)
        self._active_entry: dict[PodKey, tuple[Any, int, PodKey]] = {}
        self._arrival: SortedList = SortedList()  # (timestamp, seq, pod key)
        self._arrival_entry: dict[PodKey, tuple[float, int, PodKey]] = {}
        self._backoff: SortedList = SortedList()  # (expiry, seq, pod key)
        self._backoff_entry: dict[PodKey, tuple[float, int, PodKey]] = {}
        self._unschedulable: dict[PodKey, QueuedPodInfo] = {}
        self._in_flight: dict[PodKey, list[_Event] | None] = {}
        self._seq = 0
        self._streak = 0
        self._fifo_until: float | None = None

    # ---- bookkeeping -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._info)

    def __contains__(self, key: object) -> bool:
        return key in self._info

    def get(self, key: str) -> QueuedPodInfo | None:
        return self._info.get(PodKey(key))

    def where(self, key: str) -> str | None:
        return self._where.get(PodKey(key))

    @property
    def fifo_active(self) -> bool:
        return self._fifo_until is not None and self.clock.now() < self._fifo_until

    def statistics(self) -> QueueStats:
        gated = sum(1 for q in self._unschedulable.values() if q.gated)
        return QueueStats(
            len(self._active),
            len(self._backoff),
            len(self._unschedulable) - gated,
            gated,
            self.fifo_active,
        )

    def pending_pods(self) -> list[tuple[QueuedPodInfo, str]]:
        out = []
        for key, qpi in self._info.items():
            where = self._where[key]
            out.append((qpi, GATED if where == UNSCHEDULABLE and qpi.gated else where))
        return out

    def _remove(self, key: PodKey) -> QueuedPodInfo | None:
        where = self._where.pop(key, None)
        qpi = self._info.pop(key, None)
        if where == ACTIVE:
            self._active.remove(self._active_entry.pop(key))
            self._arrival.remove(self._arrival_entry.pop(key))
        elif where == BACKOFF:
            self._backoff.remove(self._backoff_entry.pop(key))
        elif where == UNSCHEDULABLE:
            self._unschedulable.pop(key, None)
        return qpi

    def _to_active(self, qpi: QueuedPodInfo) -> None:
        key = qpi.pod.key
        self._remove(key)
        qpi.gated = False
        qpi.gating_plugin = ""
        qpi.timestamp = self.clock.now()
        entry = (self.sort_key(qpi), qpi.seq, key)
        arrival = (qpi.timestamp, qpi.seq, key)
        self._active.add(entry)
        self._active_entry[key] = entry
        self._arrival.add(arrival)
        self._arrival_entry[key] = arrival
        self._info[key] = qpi
        self._where[key] = ACTIVE

    def _to_backoff(self, qpi: QueuedPodInfo) -> None:
        key = qpi.pod.key
        self._remove(key)
        entry = (self.backoff_expiry(qpi), qpi.seq, key)
        self._backoff.add(entry)
        self._backoff_entry[key] = entry
        self._info[key] = qpi
        self._where[key] = BACKOFF

    def _to_unschedulable(self, qpi: QueuedPodInfo) -> None:
        key = qpi.pod.key
        self._remove(key)
        self._unschedulable[key] = qpi
        self._info[key] = qpi
        self._where[key] = UNSCHEDULABLE

    def backoff_duration(self, qpi: QueuedPodInfo) -> float:
        """initial * 2^(attempts-1), capped (kube-scheduler's calculateBackoffDuration)."""
        d = self.initial_backoff
        for _ in range(1, max(qpi.attempts, 1)):
            d *= 2
            if d >= self.max_backoff:
                return self.max_backoff
        return min(d, self.max_backoff)

    def backoff_expiry(self, qpi: QueuedPodInfo) -> float:
        return qpi.timestamp + self.backoff_duration(qpi)

    def _backing_off(self, qpi: QueuedPodInfo) -> bool:
        return qpi.attempts > 0 and self.backoff_expiry(qpi) > self.clock.now()

    def _requeue(self, qpi: QueuedPodInfo) -> None:
        """Back to the activeQ, or to the backoffQ while its backoff lasts."""
        if self._backing_off(qpi):
            self._to_backoff(qpi)
        else:
            self._to_active(qpi)

    def _gate(self, qpi: QueuedPodInfo) -> bool:
        """Run PreEnqueue; park the pod as gated and return True if it may not enter."""
        st = self.pre_enqueue(qpi.pod)
        if st.is_success:
            return False
        qpi.gated = True
        qpi.gating_plugin = st.plugin
        qpi.message = st.message
        qpi.timestamp = self.clock.now()
        self._to_unschedulable(qpi)
        return True

    # ---- adding and removing -----------------------------------------------------

    def add(self, pod: Pod) -> None:
        key = pod.key
        old = self._info.get(key)
        if old is not None:
            self.update(old.pod, pod)
            return
        self._seq += 1
        qpi = QueuedPodInfo(pod=pod, timestamp=self.clock.now(), seq=self._seq)
        if not self._gate(qpi):
            self._to_active(qpi)
        log.debug("pod %s added to %s", key, self._where.get(key))

    def update(self, old: Pod, new: Pod) -> None:
        key = new.key
        qpi = self._info.get(key)
        if qpi is None:
            if key in self._in_flight:
                return  # being scheduled; the cycle's outcome decides where it goes
            self.add(new)
            return
        qpi.pod = new
        where = self._where[key]
        if where == ACTIVE:
            self._to_active(qpi)  # the sort key may have changed
        elif where == BACKOFF:
            pass
        elif qpi.gated:
            if not self._gate(qpi):
                self._to_active(qpi)
        elif pod_updated(old, new):
            # As kube-scheduler (isPodUpdated): a changed unschedulable pod is tried
            # again; the same object delivered again (a re-list) is not a change.
            self._requeue(qpi)

    def delete(self, key: str) -> None:
        self._remove(PodKey(key))
        self._in_flight.pop(PodKey(key), None)

    def take(self, keys: Iterable[str]) -> list[QueuedPodInfo]:
        """Remove the named pods from wherever they wait and mark them in flight
        (the gang cycle schedules them together with the pod it popped)."""
        out = []
        for key in keys:
            qpi = self._remove(PodKey(key))
            if qpi is None or qpi.gated:
                if qpi is not None:
                    self._to_unschedulable(qpi)
                continue
            self._mark_popped(qpi)
            out.append(qpi)
        return out

    # ---- popping -------------------------------------------------------------------

    def _mark_popped(self, qpi: QueuedPodInfo) -> None:
        qpi.attempts += 1
        if qpi.initial_attempt_timestamp is None:
            qpi.initial_attempt_timestamp = self.clock.now()
        self._in_flight[qpi.pod.key] = []

    def pop(self) -> QueuedPodInfo | None:
        if not self._active:
            return None
        if self._fifo_until is not None and self.clock.now() >= self._fifo_until:
            self._fifo_until = None
            self._streak = 0
        if self._fifo_until is not None:
            _, _, key = self._arrival[0]
        else:
            _, _, key = self._active[0]
        qpi = self._remove(key)
        assert qpi is not None
        self._mark_popped(qpi)
        return qpi

    def record_attempt(self, succeeded: bool) -> None:
        """The scheduler reports each cycle's outcome; drives the FIFO fallback."""
        if succeeded:
            self._streak = 0
            return
        self._streak += 1
        f = self.fifo
        if (
            f.enabled
            and self._fifo_until is None
            and self._streak >= f.failure_streak
            and len(self._active) >= f.min_queue_length
        ):
            self._fifo_until = self.clock.now() + f.duration_seconds
            log.info(
                "activeQ backed up (%d pods, %d failures in a row): popping in arrival "
                "order for %gs",
                len(self._active),
                self._streak,
                f.duration_seconds,
            )

    def done(self, key: str) -> None:
        """The pod's scheduling (and binding) attempt is over."""
        self._in_flight.pop(PodKey(key), None)

    # ---- after a failed attempt ------------------------------------------------------

    def add_unschedulable(self, qpi: QueuedPodInfo, scheduling_cycle: int = 0) -> None:
        key = qpi.pod.key
        if key in self._info:
            return
        qpi.timestamp = self.clock.now()
        events = self._in_flight.get(key, [])
        plugins = qpi.unschedulable_plugins | qpi.pending_plugins
        if not plugins:
            self._to_backoff(qpi)
            return
        if events is None or any(self._helps(qpi, e) for e in events):
            self._requeue(qpi)
            return
        self._to_unschedulable(qpi)

    def add_backoff(self, qpi: QueuedPodInfo) -> None:
        if qpi.pod.key in self._info:
            return
        qpi.timestamp = self.clock.now()
        self._to_backoff(qpi)

    def activate(self, keys: Iterable[str]) -> None:
        for key in keys:
            qpi = self._info.get(PodKey(key))
            if qpi is not None and self._where[PodKey(key)] != ACTIVE and not qpi.gated:
                self._to_active(qpi)

    # ---- events ---------------------------------------------------------------------

    def _helps(self, qpi: QueuedPodInfo, ev: _Event) -> bool:
        """Whether the event may make the pod schedulable (queueing hints).

        A plugin that registered no events is assumed to care about every event,
        as in kube-scheduler, except a plugin that answered PENDING: such a pod
        waits for something the plugin itself must announce.
        """
        event, old, new = ev
        plugins = (
            frozenset({qpi.gating_plugin})
            if qpi.gated
            else qpi.unschedulable_plugins | qpi.pending_plugins
        )
        for name in plugins:
            registered = self.hints.get(name)
            if registered is None:
                if name in qpi.pending_plugins:
                    continue
                return True
            for reg in registered:
                if not reg.event.matches(event):
                    continue
                if reg.hint is None:
                    return True
                try:
                    if reg.hint(qpi.pod, old, new) is QueueingHint.QUEUE:
                        return True
                except Exception:
                    log.exception("queueing hint of %s failed for %s", name, qpi.pod.key)
                    return True
        return False

    def move_on_event(
        self,
        event: ClusterEvent,
        old: Any,
        new: Any,
        pre_check: Callable[[Pod], bool] | None = None,
    ) -> int:
        """Move the pods this event may help; returns how many moved."""
        for key, events in self._in_flight.items():
            if events is not None:
                if len(events) >= MAX_INFLIGHT_EVENTS:
                    self._in_flight[key] = None  # too many: retry it whatever happens
                else:
                    events.append((event, old, new))
        moved = 0
        for qpi in list(self._unschedulable.values()):
            if pre_check is not None and not pre_check(qpi.pod):
                continue
            if not self._helps(qpi, (event, old, new)):
                continue
            if qpi.gated:
                if self._gate(qpi):
                    continue
                self._to_active(qpi)
            else:
                self._requeue(qpi)
            moved += 1
        if moved:
            log.debug("%s moved %d pods", event, moved)
        return moved

    # ---- time ------------------------------------------------------------------------

    def flush(self, now: float | None = None) -> int:
        """Move pods whose backoff ended, and pods parked too long, to the activeQ."""
        now = self.clock.now() if now is None else now
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            _, _, key = self._backoff[0]
            qpi = self._info[key]
            self._to_active(qpi)
            moved += 1
        for qpi in list(self._unschedulable.values()):
            if qpi.gated:
                continue
            if now - qpi.timestamp >= self.max_in_unschedulable:
                self._requeue(qpi)
                moved += 1
        return moved

    def next_wakeup(self) -> float | None:
        """The earliest time at which `flush` would move a pod."""
        times = []
        if self._backoff:
            times.append(self._backoff[0][0])
        parked = [q.timestamp for q in self._unschedulable.values() if not q.gated]
        if parked:
            times.append(min(parked) + self.max_in_unschedulable)
        return min(times) if times else None

    def next_backoff_expiry(self) -> float | None:
        return self._backoff[0][0] if self._backoff else None
