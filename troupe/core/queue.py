"""The scheduling queue: activeQ, backoffQ, the unschedulable pool, gated pods.

As kube-scheduler's PriorityQueue (backend/queue/scheduling_queue.go):

- activeQ holds pods ready to be tried, ordered by the QueueSort plugin's key
  (a smaller key pops first; ties go to the earlier arrival);
- backoffQ holds pods that failed and wait out their backoff, ordered by its
  end (podInitialBackoffSeconds doubling per attempt up to
  podMaxBackoffSeconds, counted from the failure);
- the unschedulable pool holds pods that did not fit. A cluster event moves a
  pod back only if a plugin that rejected it registered for that event and its
  queueing hint says QUEUE (a plugin that registered nothing is moved by every
  event); pods left there longer than `max_in_unschedulable` (5 minutes) are
  flushed back anyway;
- gated pods (a PreEnqueue plugin said no) wait in the pool too, until an
  update of the pod, or an event the gating plugin registered for, lets
  PreEnqueue pass. PreEnqueue runs whenever a pod enters the activeQ or the
  backoffQ from outside (as kube 1.33, not again when its backoff ends).

Each pod has exactly one place, found through its PodKey. A popped pod is
*in flight* until `done`: the cluster events that arrive meanwhile are logged
(one shared log; each in-flight pod remembers where it started reading), so a
pod that fails after an event that could have helped it is retried instead of
parked (kube's inFlightEvents). Updates and deletions of an in-flight pod are
kept for when its attempt ends.

Troupe adds the FIFO fallback: when the activeQ is backed up and attempts keep
failing, the queue pops in arrival order (the time a pod last entered the
activeQ) for a while, so schedulable low-priority pods are not starved by
unschedulable high-priority ones that keep coming back.

Everything is synchronous and timed by an injected Clock. Each operation is
O(log n) in the queue's size, except `move_on_event` (O(pods in the pool), and
O(1) when no pooled pod was rejected by a plugin the event concerns) and
`pending_pods`.
"""

from __future__ import annotations

import enum
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sortedcontainers import SortedList

from troupe.api.types import Pod, PodKey
from troupe.core.clock import Clock
from troupe.core.explain_notes import is_explain_note
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.status import Status

log = logging.getLogger(__name__)

ACTIVE: Final = "activeQ"
BACKOFF: Final = "backoffQ"
UNSCHEDULABLE: Final = "unschedulable"
GATED: Final = "gated"

MAX_INFLIGHT_EVENTS: Final = 4096
"""Events kept for in-flight pods. Past this, every pod then in flight is retried
after its backoff whatever it failed on, and the log starts afresh."""

_POD_RESOURCES: Final = frozenset(
    {EventResource.POD, EventResource.UNSCHEDULED_POD, EventResource.ASSIGNED_POD}
)
_MAX_INTEREST_CACHE: Final = 1024


@dataclass(frozen=True, slots=True)
class FifoFallback:
    """When `failure_streak` attempts in a row fail while the activeQ holds at
    least `min_queue_length` pods, pop in arrival order for `duration_seconds`."""

    enabled: bool = True
    min_queue_length: int = 100
    failure_streak: int = 50
    duration_seconds: float = 30.0


DEFAULT_FIFO: Final = FifoFallback()


@dataclass(frozen=True, slots=True)
class QueueStats:
    active: int
    backoff: int
    unschedulable: int  # in the pool and not gated
    gated: int
    fifo_active: bool = False


class _Strategy(enum.Enum):
    """Where an event sends a pod of the pool (kube's queueingStrategy)."""

    SKIP = 0  # stays where it is
    AFTER_BACKOFF = 1  # backoffQ while its backoff lasts, else activeQ
    IMMEDIATELY = 2  # activeQ (a Pending plugin's wait is over)


@dataclass(slots=True)
class _Flight:
    """A popped pod whose attempt is not over."""

    start: int  # index in the event log of the first event it has not seen
    uid: str
    newer: Pod | None = None  # the pod as updated meanwhile
    deleted: bool = False  # deleted meanwhile: the attempt's outcome is dropped
    forced: bool = False  # activated meanwhile, or the event log overflowed


_Event = tuple[ClusterEvent, Any, Any]
_Entry = tuple[Any, int, PodKey]  # (order key, seq, pod key)

_VOLATILE_METADATA: Final = ("resourceVersion", "generation", "managedFields")


def _comparable(pod: Pod) -> dict[str, Any]:
    raw = dict(pod.raw)
    md = raw.get("metadata")
    if isinstance(md, dict):
        md = {k: v for k, v in md.items() if k not in _VOLATILE_METADATA}
        notes = md.get("annotations")
        if isinstance(notes, dict) and any(is_explain_note(k) for k in notes):
            # The scheduler's own explanation of its decision (troupe.explain)
            # comes back through the watch: it is not a change to the pod.
            md["annotations"] = {k: v for k, v in notes.items() if not is_explain_note(k)}
        raw["metadata"] = md
    raw.pop("status", None)
    return raw


def pod_updated(old: Pod, new: Pod) -> bool:
    """Whether anything but the status and bookkeeping metadata changed
    (kube-scheduler's isPodUpdated)."""
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
        fifo: FifoFallback = DEFAULT_FIFO,
    ) -> None:
        if initial_backoff < 0 or max_backoff < 0:
            raise ValueError("backoff durations must not be negative")
        if max_in_unschedulable <= 0:
            raise ValueError("max_in_unschedulable must be positive")
        self.clock = clock
        self.sort_key = sort_key
        self.pre_enqueue = pre_enqueue
        self.hints: dict[str, tuple[ClusterEventWithHint, ...]] = {
            name: tuple(regs) for name, regs in hints.items()
        }
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_in_unschedulable = max_in_unschedulable
        self._fifo = fifo

        self._info: dict[PodKey, QueuedPodInfo] = {}
        self._where: dict[PodKey, str] = {}
        # activeQ in sort-key order, and (FIFO fallback only) in arrival order.
        self._active: SortedList = SortedList()
        self._active_entry: dict[PodKey, _Entry] = {}
        self._arrival: SortedList = SortedList()
        self._arrival_entry: dict[PodKey, _Entry] = {}
        # backoffQ by the end of the backoff.
        self._backoff: SortedList = SortedList()
        self._backoff_entry: dict[PodKey, _Entry] = {}
        # The pool (unschedulable and gated), and by when flush must look at each.
        self._pool: dict[PodKey, QueuedPodInfo] = {}
        self._deadline: SortedList = SortedList()
        self._deadline_entry: dict[PodKey, _Entry] = {}
        self._n_gated = 0
        # Pool pods rejected by a plugin that registered no events: every event moves them.
        self._wild: set[PodKey] = set()
        # Unschedulable pool pods by the plugins that rejected them ("" for none,
        # which any event of interest moves): an event no such plugin registered
        # moves nothing, and move_on_event skips the scan (one per bound pod).
        self._rejectors: dict[PodKey, frozenset[str]] = {}
        self._n_rejected: Counter[str] = Counter()
        self._interest: dict[ClusterEvent, frozenset[str]] = {}

        # In flight, in pop order (so the first one started reading the log earliest).
        self._in_flight: dict[PodKey, _Flight] = {}
        self._events: list[_Event] = []
        self._events_base = 0  # log index of self._events[0]

        self._seq = 0
        self._streak = 0
        self._fifo_until: float | None = None

    # ---- looking -------------------------------------------------------------------

    @property
    def fifo(self) -> FifoFallback:
        return self._fifo

    def __len__(self) -> int:
        return len(self._info)

    def __contains__(self, key: object) -> bool:
        return key in self._info

    def get(self, key: str) -> QueuedPodInfo | None:
        return self._info.get(PodKey(key))

    def where(self, key: str) -> str | None:
        """activeQ, backoffQ, unschedulable or gated; None if not queued (or in flight)."""
        return self._where.get(PodKey(key))

    def in_flight(self, key: str) -> bool:
        return PodKey(key) in self._in_flight

    @property
    def fifo_active(self) -> bool:
        return self._fifo_until is not None and self.clock.now() < self._fifo_until

    def statistics(self) -> QueueStats:
        return QueueStats(
            active=len(self._active),
            backoff=len(self._backoff),
            unschedulable=len(self._pool) - self._n_gated,
            gated=self._n_gated,
            fifo_active=self.fifo_active,
        )

    def pending_pods(self) -> list[tuple[QueuedPodInfo, str]]:
        return [(self._info[key], where) for key, where in self._where.items()]

    def backoff_duration(self, qpi: QueuedPodInfo) -> float:
        """initial * 2^(attempts-1), capped (kube-scheduler's calculateBackoffDuration)."""
        d = self.initial_backoff
        for _ in range(1, qpi.attempts):
            if d >= self.max_backoff - d:
                return self.max_backoff
            d += d
        return min(d, self.max_backoff)

    def backoff_expiry(self, qpi: QueuedPodInfo) -> float:
        return qpi.timestamp + self.backoff_duration(qpi)

    def next_backoff_expiry(self) -> float | None:
        return self._backoff[0][0] if self._backoff else None

    def next_wakeup(self) -> float | None:
        """The earliest time at which `flush` would move a pod (or re-check a gated one)."""
        t: float | None = self._backoff[0][0] if self._backoff else None
        if self._deadline:
            d: float = self._deadline[0][0]
            t = d if t is None else min(t, d)
        return t

    # ---- places --------------------------------------------------------------------
    # Every move goes through _unplace and one _place_*: each pod has one place.

    def _unplace(self, key: PodKey) -> QueuedPodInfo | None:
        where = self._where.pop(key, None)
        if where is None:
            return None
        qpi = self._info.pop(key)
        if where == ACTIVE:
            self._active.remove(self._active_entry.pop(key))
            if self._fifo.enabled:
                self._arrival.remove(self._arrival_entry.pop(key))
        elif where == BACKOFF:
            self._backoff.remove(self._backoff_entry.pop(key))
        else:
            del self._pool[key]
            self._deadline.remove(self._deadline_entry.pop(key))
            if where == GATED:
                self._n_gated -= 1
            else:
                self._wild.discard(key)
                self._n_rejected.subtract(self._rejectors.pop(key))
        return qpi

    def _place_active(self, qpi: QueuedPodInfo, now: float) -> None:
        key = qpi.pod.key
        qpi.gated = False
        qpi.gating_plugin = ""
        qpi.timestamp = now
        entry = (self.sort_key(qpi), qpi.seq, key)
        self._active.add(entry)
        self._active_entry[key] = entry
        if self._fifo.enabled:
            arrival = (now, qpi.seq, key)
            self._arrival.add(arrival)
            self._arrival_entry[key] = arrival
        self._info[key] = qpi
        self._where[key] = ACTIVE

    def _place_backoff(self, qpi: QueuedPodInfo) -> None:
        key = qpi.pod.key
        entry = (self.backoff_expiry(qpi), qpi.seq, key)
        self._backoff.add(entry)
        self._backoff_entry[key] = entry
        self._info[key] = qpi
        self._where[key] = BACKOFF

    def _place_pool(self, qpi: QueuedPodInfo) -> None:
        """Unschedulable or gated; flush looks again max_in_unschedulable after timestamp."""
        key = qpi.pod.key
        entry = (qpi.timestamp + self.max_in_unschedulable, qpi.seq, key)
        self._deadline.add(entry)
        self._deadline_entry[key] = entry
        self._pool[key] = qpi
        self._info[key] = qpi
        if qpi.gated:
            self._n_gated += 1
            self._where[key] = GATED
            return
        self._where[key] = UNSCHEDULABLE
        pending = qpi.pending_plugins
        rejectors = (qpi.unschedulable_plugins | pending) or frozenset({""})
        self._rejectors[key] = rejectors
        self._n_rejected.update(rejectors)
        if any(p not in self.hints and p not in pending for p in qpi.unschedulable_plugins):
            self._wild.add(key)

    def _to_active(self, qpi: QueuedPodInfo, now: float) -> None:
        self._unplace(qpi.pod.key)
        self._place_active(qpi, now)

    def _to_backoff(self, qpi: QueuedPodInfo) -> None:
        self._unplace(qpi.pod.key)
        self._place_backoff(qpi)

    def _to_pool(self, qpi: QueuedPodInfo) -> None:
        self._unplace(qpi.pod.key)
        self._place_pool(qpi)

    def _to_gated(self, qpi: QueuedPodInfo, st: Status, now: float) -> None:
        qpi.gated = True
        qpi.gating_plugin = st.plugin
        qpi.message = st.message
        qpi.timestamp = now
        self._to_pool(qpi)

    def _requeue(self, qpi: QueuedPodInfo, strategy: _Strategy, now: float) -> str:
        """Send the pod where `strategy` says (kube's requeuePodWithQueueingStrategy),
        through PreEnqueue unless it stays in the pool. Returns its new place."""
        if strategy is _Strategy.SKIP:
            self._to_pool(qpi)
            return UNSCHEDULABLE
        st = self.pre_enqueue(qpi.pod)
        if not st.is_success:
            self._to_gated(qpi, st, now)
            return GATED
        if (
            strategy is _Strategy.AFTER_BACKOFF
            and qpi.attempts > 0
            and self.backoff_expiry(qpi) > now
        ):
            self._to_backoff(qpi)
            return BACKOFF
        self._to_active(qpi, now)
        return ACTIVE

    def _ungate(self, qpi: QueuedPodInfo, now: float) -> bool:
        """Run PreEnqueue again for a gated pod; to the activeQ if it passes."""
        st = self.pre_enqueue(qpi.pod)
        if not st.is_success:
            qpi.gating_plugin = st.plugin
            qpi.message = st.message
            return False
        self._to_active(qpi, now)
        log.debug("pod %s passed PreEnqueue: to %s", qpi.pod.key, ACTIVE)
        return True

    # ---- adding, updating, deleting ---------------------------------------------------

    def add(self, pod: Pod) -> None:
        """A new pending pod: through PreEnqueue into the activeQ (or gated)."""
        key = pod.key
        qpi = self._info.get(key)
        if qpi is not None:
            self.update(qpi.pod, pod)
            return
        flight = self._in_flight.get(key)
        if flight is not None and not flight.deleted:
            if flight.uid == pod.uid:
                flight.newer = pod  # its attempt's outcome will carry the new version
                return
            flight.deleted = True  # re-created under the same name: a different pod
        self._seq += 1
        now = self.clock.now()
        qpi = QueuedPodInfo(pod=pod, timestamp=now, seq=self._seq)
        st = self.pre_enqueue(pod)
        if st.is_success:
            self._place_active(qpi, now)
        else:
            self._to_gated(qpi, st, now)
        log.debug("pod %s added to %s", key, self._where[key])

    def update(self, old: Pod, new: Pod) -> None:
        """A new version of a pending pod, updated wherever it is.

        In the activeQ it is re-sorted (keeping its arrival time), in the backoffQ
        it stays. A gated pod goes through PreEnqueue again. A pod in the pool moves
        to the backoffQ/activeQ if anything but its status changed (kube-scheduler's
        isPodUpdated); the same object delivered again (a re-list) is no change.
        """
        key = new.key
        where = self._where.get(key)
        if where is None:
            self.add(new)
            return
        qpi = self._info[key]
        now = self.clock.now()
        if where == ACTIVE:
            qpi.pod = new
            self.resort((key,))
        elif where == BACKOFF:
            qpi.pod = new
        elif where == GATED:
            qpi.pod = new
            self._ungate(qpi, now)
        else:
            changed = pod_updated(qpi.pod, new)
            qpi.pod = new
            if changed:
                to = self._requeue(qpi, _Strategy.AFTER_BACKOFF, now)
                log.debug("pod %s updated: from %s to %s", key, UNSCHEDULABLE, to)

    def resort(self, keys: Iterable[str]) -> int:
        """Compute the sort key again for the named pods waiting in the activeQ (a
        QueueSort plugin whose key reads state that changed, as CapacityFairSort's
        quota shares); pods elsewhere get theirs when they enter it. Returns how
        many were re-sorted."""
        n = 0
        for key in keys:
            k = PodKey(key)
            if self._where.get(k) != ACTIVE:
                continue
            qpi = self._info[k]
            self._active.remove(self._active_entry[k])
            entry = (self.sort_key(qpi), qpi.seq, k)
            self._active.add(entry)
            self._active_entry[k] = entry
            n += 1
        return n

    def delete(self, key: str) -> None:
        k = PodKey(key)
        self._unplace(k)
        flight = self._in_flight.get(k)
        if flight is not None:
            flight.deleted = True
            flight.newer = None

    # ---- popping -------------------------------------------------------------------

    def pop(self) -> QueuedPodInfo | None:
        """The next pod to try (sort order, or arrival order during the FIFO fallback),
        now in flight; None when the activeQ is empty. Never blocks."""
        if not self._active:
            return None
        now = self.clock.now()
        if self._fifo_until is not None and now >= self._fifo_until:
            self._end_fifo()
        key: PodKey
        if self._fifo_until is not None:
            _, _, key = self._arrival.pop(0)
            del self._arrival_entry[key]
            self._active.remove(self._active_entry.pop(key))
        else:
            _, _, key = self._active.pop(0)
            del self._active_entry[key]
            if self._fifo.enabled:
                self._arrival.remove(self._arrival_entry.pop(key))
        del self._where[key]
        qpi = self._info.pop(key)
        self._mark_popped(qpi, now)
        return qpi

    def take(self, keys: Iterable[str]) -> list[QueuedPodInfo]:
        """Remove the named pods from wherever they wait, except gated ones, and mark
        them in flight (the gang cycle schedules them with the pod it popped)."""
        now = self.clock.now()
        out = []
        for key in keys:
            k = PodKey(key)
            if self._where.get(k) in (None, GATED):
                continue
            qpi = self._unplace(k)
            assert qpi is not None
            self._mark_popped(qpi, now)
            out.append(qpi)
        return out

    def _mark_popped(self, qpi: QueuedPodInfo, now: float) -> None:
        qpi.attempts += 1
        if qpi.initial_attempt_timestamp is None:
            qpi.initial_attempt_timestamp = now
        key = qpi.pod.key
        self._in_flight.pop(key, None)  # re-insert at the end: pop order == start order
        self._in_flight[key] = _Flight(self._events_base + len(self._events), qpi.pod.uid)

    def done(self, key: str) -> None:
        """The pod's attempt (scheduling and binding cycle) is over."""
        if self._in_flight.pop(PodKey(key), None) is not None:
            self._prune_events()

    # ---- the FIFO fallback ----------------------------------------------------------

    def record_attempt(self, succeeded: bool) -> None:
        """The scheduler reports each cycle's outcome; drives the FIFO fallback."""
        f = self._fifo
        if not f.enabled:
            return
        now = self.clock.now()
        if self._fifo_until is not None and now >= self._fifo_until:
            self._end_fifo()
        if succeeded:
            self._streak = 0
            return
        self._streak += 1
        if (
            self._fifo_until is None
            and self._streak >= f.failure_streak
            and len(self._active) >= f.min_queue_length
            and f.duration_seconds > 0
        ):
            self._fifo_until = now + f.duration_seconds
            log.info(
                "activeQ backed up (%d pods, %d failures in a row): popping in arrival "
                "order for %gs",
                len(self._active),
                self._streak,
                f.duration_seconds,
            )

    def _end_fifo(self) -> None:
        self._fifo_until = None
        self._streak = 0
        log.info("FIFO fallback over: popping in sort order again")

    # ---- after an attempt ------------------------------------------------------------

    def _returning(self, qpi: QueuedPodInfo) -> tuple[_Flight | None, bool] | None:
        """The pod's flight and whether it was updated meanwhile (its newest version
        is put in `qpi`); None if the pod must not be queued again."""
        key = qpi.pod.key
        if key in self._info:
            log.debug("pod %s is queued already; dropping its failed attempt", key)
            return None
        flight = self._in_flight.get(key)
        if flight is None:
            return None, False
        if flight.deleted:
            log.debug("pod %s was deleted during its attempt", key)
            return None
        changed = False
        if flight.newer is not None:
            changed = pod_updated(qpi.pod, flight.newer)
            qpi.pod = flight.newer
            flight.newer = None
        return flight, changed

    def add_unschedulable(self, qpi: QueuedPodInfo, scheduling_cycle: int = 0) -> None:
        """After a failed attempt; the caller set `unschedulable_plugins` and
        `pending_plugins`. To the pool, unless an event logged during the attempt may
        help it (kube's determineSchedulingHintForInFlightPod), the pod was updated
        or activated meanwhile, or no plugin rejected it (then backoffQ)."""
        got = self._returning(qpi)
        if got is None:
            return
        flight, changed = got
        now = self.clock.now()
        qpi.timestamp = now
        rejected = qpi.unschedulable_plugins or qpi.pending_plugins
        if not rejected or changed or (flight is not None and flight.forced):
            strategy = _Strategy.AFTER_BACKOFF
        elif flight is None:
            strategy = _Strategy.SKIP
        else:
            strategy = self._in_flight_strategy(qpi, flight)
        to = self._requeue(qpi, strategy, now)
        log.debug(
            "pod %s unschedulable (%s) in cycle %d: to %s",
            qpi.pod.key,
            ", ".join(sorted(qpi.unschedulable_plugins | qpi.pending_plugins)),
            scheduling_cycle,
            to,
        )

    def add_backoff(self, qpi: QueuedPodInfo) -> None:
        """After an error: straight to the backoffQ (through PreEnqueue)."""
        if self._returning(qpi) is None:
            return
        now = self.clock.now()
        qpi.timestamp = now
        st = self.pre_enqueue(qpi.pod)
        if not st.is_success:
            self._to_gated(qpi, st, now)
            return
        self._to_backoff(qpi)
        log.debug("pod %s failed: to %s", qpi.pod.key, BACKOFF)

    def activate(self, keys: Iterable[str]) -> int:
        """Move the named pods from the pool or the backoffQ to the activeQ (gated ones
        only if PreEnqueue now passes); an in-flight pod is retried after backoff
        whatever its attempt fails on. Returns how many moved."""
        now = self.clock.now()
        moved = 0
        for key in keys:
            k = PodKey(key)
            where = self._where.get(k)
            if where is None:
                flight = self._in_flight.get(k)
                if flight is not None:
                    flight.forced = True
                continue
            if where == ACTIVE:
                continue
            qpi = self._info[k]
            if where == GATED:
                moved += self._ungate(qpi, now)
            elif self._requeue(qpi, _Strategy.IMMEDIATELY, now) == ACTIVE:
                moved += 1
        if moved:
            log.debug("activated %d pods", moved)
        return moved

    # ---- events ---------------------------------------------------------------------

    def _interested(self, event: ClusterEvent) -> frozenset[str]:
        """Plugins with a registered event that matches `event`."""
        got = self._interest.get(event)
        if got is None:
            got = frozenset(
                name
                for name, regs in self.hints.items()
                if any(r.event.matches(event) for r in regs)
            )
            if len(self._interest) < _MAX_INTEREST_CACHE:
                self._interest[event] = got
        return got

    def _says_queue(
        self, plugin: str, qpi: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any
    ) -> bool:
        for reg in self.hints[plugin]:
            if not reg.event.matches(event):
                continue
            if reg.hint is None:
                return True
            try:
                if reg.hint(qpi.pod, old, new) is QueueingHint.QUEUE:
                    return True
            except Exception:
                log.exception(
                    "queueing hint of %s failed for pod %s on %s; queueing it",
                    plugin,
                    qpi.pod.key,
                    event,
                )
                return True
        return False

    def _strategy(
        self,
        qpi: QueuedPodInfo,
        event: ClusterEvent,
        old: Any,
        new: Any,
        interested: frozenset[str],
    ) -> _Strategy:
        """What the event means for a pod rejected by some plugins (kube's
        isPodWorthRequeuing). A Pending plugin's QUEUE ends the wait at once; a
        Pending plugin that registered nothing waits for its own announcement."""
        pending = qpi.pending_plugins
        if not (qpi.unschedulable_plugins or pending):
            return _Strategy.AFTER_BACKOFF
        if event.resource is EventResource.WILDCARD:
            return _Strategy.AFTER_BACKOFF
        for name in pending:
            if name in interested and self._says_queue(name, qpi, event, old, new):
                return _Strategy.IMMEDIATELY
        for name in qpi.unschedulable_plugins:
            if name in pending:
                continue
            if name not in self.hints:
                return _Strategy.AFTER_BACKOFF
            if name in interested and self._says_queue(name, qpi, event, old, new):
                return _Strategy.AFTER_BACKOFF
        return _Strategy.SKIP

    def _may_ungate(self, qpi: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> bool:
        """Whether to run PreEnqueue again for a gated pod on this event: the gating
        plugin's hints say so, or (a plugin that registered nothing) it is an update
        of the pod itself."""
        if event.resource is EventResource.WILDCARD:
            return True
        plugin = qpi.gating_plugin
        if plugin in self.hints:
            return self._says_queue(plugin, qpi, event, old, new)
        return (
            event.resource in _POD_RESOURCES
            and bool(event.action & ActionType.UPDATE)
            and isinstance(new, Pod)
            and new.key == qpi.pod.key
        )

    def _in_flight_strategy(self, qpi: QueuedPodInfo, flight: _Flight) -> _Strategy:
        """The strongest strategy among the events logged since the pod was popped."""
        best = _Strategy.SKIP
        for i in range(flight.start - self._events_base, len(self._events)):
            event, old, new = self._events[i]
            s = self._strategy(qpi, event, old, new, self._interested(event))
            if s is _Strategy.IMMEDIATELY:
                return s
            if s is _Strategy.AFTER_BACKOFF:
                best = s
                if not qpi.pending_plugins:
                    return s  # only a Pending plugin could make it IMMEDIATELY
        return best

    def _record(self, event: ClusterEvent, old: Any, new: Any) -> None:
        if not self._in_flight:
            return
        if len(self._events) >= MAX_INFLIGHT_EVENTS:
            self._prune_events(force=True)
            if len(self._events) >= MAX_INFLIGHT_EVENTS:
                end = self._events_base + len(self._events)
                for flight in self._in_flight.values():
                    flight.forced = True
                    flight.start = end
                self._events.clear()
                self._events_base = end
                log.debug("in-flight event log full: in-flight pods will be retried")
        self._events.append((event, old, new))

    def _prune_events(self, force: bool = False) -> None:
        """Drop the events no in-flight pod still has to read."""
        if not self._in_flight:
            self._events_base += len(self._events)
            self._events.clear()
            return
        oldest = next(iter(self._in_flight.values())).start
        drop = oldest - self._events_base
        if drop > 0 and (force or 2 * drop >= len(self._events)):
            del self._events[:drop]
            self._events_base = oldest

    def move_on_event(
        self,
        event: ClusterEvent,
        old: Any,
        new: Any,
        pre_check: Callable[[Pod], bool] | None = None,
    ) -> int:
        """Move the pods of the pool this event may help (queueing hints) to the
        backoffQ or activeQ, and log it for in-flight pods. `pre_check`, if given,
        must accept a pod for it to be considered. Returns how many moved."""
        self._record(event, old, new)
        if not self._pool:
            return 0
        interested = self._interested(event)
        if (
            not interested
            and not self._wild
            and event.resource is not EventResource.WILDCARD
            and not (self._n_gated and event.resource in _POD_RESOURCES)
        ):
            return 0
        if (
            not self._n_gated
            and not self._wild
            and event.resource is not EventResource.WILDCARD
            and self._n_rejected[""] <= 0
            and not any(self._n_rejected[name] > 0 for name in interested)
        ):
            return 0  # no pod in the pool was rejected by a plugin this event concerns
        now = self.clock.now()
        moved = 0
        for qpi in list(self._pool.values()):
            if pre_check is not None and not pre_check(qpi.pod):
                continue
            if qpi.gated:
                if self._may_ungate(qpi, event, old, new) and self._ungate(qpi, now):
                    moved += 1
                continue
            strategy = self._strategy(qpi, event, old, new, interested)
            if strategy is _Strategy.SKIP:
                continue
            if self._requeue(qpi, strategy, now) != GATED:
                moved += 1
        if moved:
            log.debug("%s moved %d pods", event, moved)
        return moved

    # ---- time ------------------------------------------------------------------------

    def flush(self, now: float | None = None) -> int:
        """Move pods whose backoff is over to the activeQ, and pods that stayed in the
        pool `max_in_unschedulable` to the backoffQ/activeQ (gated ones only if
        PreEnqueue now passes). Returns how many moved."""
        now = self.clock.now() if now is None else now
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            _, _, key = self._backoff.pop(0)
            del self._backoff_entry[key]
            del self._where[key]
            self._place_active(self._info.pop(key), now)
            moved += 1
        if self._deadline and self._deadline[0][0] <= now:
            due = list(self._deadline.islice(0, self._deadline.bisect_right((now, math.inf))))
            for _, _, key in due:
                qpi = self._info[key]
                if not qpi.gated:
                    moved += self._requeue(qpi, _Strategy.AFTER_BACKOFF, now) != GATED
                elif self._ungate(qpi, now):
                    moved += 1
                else:
                    qpi.timestamp = now  # look again in max_in_unschedulable
                    self._to_pool(qpi)
        if moved:
            log.debug("flush moved %d pods", moved)
        return moved
