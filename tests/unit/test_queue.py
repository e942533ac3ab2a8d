"""The scheduling queue: ordering, backoff, hints, in-flight events, flush, gating,
deletion, activation, statistics and the FIFO fallback. Virtual clock, no sleeps."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from tests.builders import make_pod
from troupe.api.types import Pod
from troupe.core.clock import VirtualClock
from troupe.core.queue import (
    MAX_INFLIGHT_EVENTS,
    FifoFallback,
    QueueStats,
    SchedulingQueue,
)
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.status import SUCCESS, Code, Status

NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)
POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
POD_UPDATE = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE)
GROUP_ADD = ClusterEvent(EventResource.POD_GROUP, ActionType.ADD)
WILDCARD = ClusterEvent(EventResource.WILDCARD, ActionType.ALL)
NO_FIFO = FifoFallback(enabled=False)

Hints = Mapping[str, Sequence[ClusterEventWithHint]]


def sort_key(q: QueuedPodInfo) -> Any:
    """PrioritySort: higher priority first, then earlier timestamp."""
    return (-q.pod.priority, q.timestamp)


def gate(pod: Pod) -> Status:
    """PreEnqueue: a pod with scheduling gates, or labelled hold=yes, may not enter."""
    if pod.scheduling_gates:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("gated",), "SchedulingGates")
    if pod.labels.get("hold") == "yes":
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("held",), "Holder")
    return SUCCESS


def make_queue(
    clock: VirtualClock | None = None,
    hints: Hints | None = None,
    fifo: FifoFallback = NO_FIFO,
    pre_enqueue: Callable[[Pod], Status] = gate,
    **kw: float,
) -> SchedulingQueue:
    return SchedulingQueue(
        clock=clock or VirtualClock(),
        sort_key=sort_key,
        pre_enqueue=pre_enqueue,
        hints=hints or {},
        fifo=fifo,
        **kw,
    )


def pop_names(q: SchedulingQueue) -> list[str]:
    out = []
    while (p := q.pop()) is not None:
        out.append(p.pod.name)
        q.done(p.pod.key)
    return out


def pop(q: SchedulingQueue) -> QueuedPodInfo:
    qpi = q.pop()
    assert qpi is not None
    return qpi


def fail(
    q: SchedulingQueue, qpi: QueuedPodInfo, *plugins: str, pending: Sequence[str] = ()
) -> None:
    """What the scheduler does after a failed attempt."""
    qpi.unschedulable_plugins = frozenset(plugins)
    qpi.pending_plugins = frozenset(pending)
    q.add_unschedulable(qpi, scheduling_cycle=1)
    q.done(qpi.pod.key)


def parked(q: SchedulingQueue, name: str, *plugins: str, pending: Sequence[str] = ()) -> None:
    """Add a pod, try it once and let it fail with `plugins`."""
    q.add(make_pod(name).build())
    qpi = q.pop()
    assert qpi is not None and qpi.pod.name == name
    fail(q, qpi, *plugins, pending=pending)


# ---- ordering ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,arrivals,want",
    [
        ("priority first", [("a", 0, 0), ("b", 10, 1), ("c", 5, 2)], ["b", "c", "a"]),
        ("then timestamp", [("a", 0, 3), ("b", 0, 1), ("c", 0, 2)], ["b", "c", "a"]),
        ("mixed", [("a", 0, 0), ("b", 10, 1), ("c", 0, 2), ("d", 10, 3)], ["b", "d", "a", "c"]),
        ("same key: arrival (seq)", [("x", 1, 0), ("y", 1, 0), ("z", 1, 0)], ["x", "y", "z"]),
    ],
)
def test_pop_order(name: str, arrivals: list[tuple[str, int, float]], want: list[str]) -> None:
    clock = VirtualClock()
    q = make_queue(clock)
    for pod, prio, at in sorted(arrivals, key=lambda a: a[2]):
        clock.advance_to(at)
        q.add(make_pod(pod).priority(prio).build())
    assert pop_names(q) == want


def test_pop_marks_the_attempt() -> None:
    clock = VirtualClock(5.0)
    q = make_queue(clock)
    assert q.pop() is None
    q.add(make_pod("p").build())
    clock.advance_to(7.0)
    qpi = pop(q)
    assert (qpi.attempts, qpi.initial_attempt_timestamp, qpi.seq) == (1, 7.0, 1)
    assert q.in_flight("default/p") and "default/p" not in q and len(q) == 0
    q.add_backoff(qpi)
    q.done(qpi.pod.key)
    clock.advance_to(20.0)
    q.flush()
    again = pop(q)
    assert (again.attempts, again.initial_attempt_timestamp) == (2, 7.0)


def test_update_in_active_queue_resorts_but_keeps_arrival() -> None:
    clock = VirtualClock()
    q = make_queue(clock)
    q.add(make_pod("a").build())
    clock.advance_by(1)
    old_b = make_pod("b").build()
    q.add(old_b)
    clock.advance_by(1)
    q.add(make_pod("c").build())
    clock.advance_by(1)
    q.update(old_b, make_pod("b").label("x", "y").build())  # no priority change
    b = q.get("default/b")
    assert b is not None and b.timestamp == 1.0 and b.pod.labels == {"x": "y"}
    q.update(old_b, make_pod("b").priority(5).build())
    assert pop_names(q) == ["b", "a", "c"]


def test_resort_reads_the_key_again_for_active_pods_only() -> None:
    """A sort key that reads changing state (CapacityFairSort's quota shares) is
    computed again on `resort`; pods elsewhere get theirs when they enter."""
    rank = {"a": 0, "b": 1, "c": 2}
    q = SchedulingQueue(
        clock=VirtualClock(),
        sort_key=lambda qpi: rank[qpi.pod.name],
        pre_enqueue=gate,
        hints={},
        fifo=NO_FIFO,
    )
    for name in ("a", "b", "c"):
        q.add(make_pod(name).build())
    q.add(make_pod("g").gate("example.com/wait").build())
    rank.update(a=5, g=-1)
    assert q.resort(["default/a", "default/g", "default/missing"]) == 1
    assert pop_names(q) == ["b", "c", "a"]


# ---- backoff -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attempts,want", [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0), (30, 10.0)]
)
def test_backoff_doubles_to_the_cap(attempts: int, want: float) -> None:
    q = make_queue()
    qpi = QueuedPodInfo(pod=make_pod("p").build(), timestamp=0.0, attempts=attempts)
    assert q.backoff_duration(qpi) == want


def test_backoff_grows_with_each_failed_attempt() -> None:
    """Fail, wait out the backoff exactly, retry: 1, 2, 4, 8, 10, 10 seconds."""
    clock = VirtualClock()
    q = make_queue(clock)
    q.add(make_pod("p").build())
    waits = []
    for _ in range(6):
        qpi = pop(q)
        q.add_backoff(qpi)
        q.done(qpi.pod.key)
        assert q.where("default/p") == "backoffQ"
        failed_at = clock.now()
        wake = q.next_wakeup()
        assert wake is not None
        clock.advance_to(wake - 0.001)
        assert q.flush() == 0 and q.pop() is None
        clock.advance_to(wake)
        assert q.flush() == 1 and q.where("default/p") == "activeQ"
        waits.append(round(wake - failed_at, 6))
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_flush_moves_backoff_pods_in_expiry_order() -> None:
    clock = VirtualClock()
    q = make_queue(clock, initial_backoff=2.0, max_backoff=60.0)
    for name in ("a", "b", "c"):
        q.add(make_pod(name).build())
    for name, at in (("a", 0.0), ("b", 0.5), ("c", 1.0)):
        clock.advance_to(at)
        qpi = pop(q)
        assert qpi.pod.name == name
        q.add_backoff(qpi)
        q.done(qpi.pod.key)
    assert q.statistics() == QueueStats(active=0, backoff=3, unschedulable=0, gated=0)
    assert q.next_backoff_expiry() == 2.0
    clock.advance_to(2.6)
    assert q.flush() == 2
    assert q.next_wakeup() == 3.0
    assert q.flush(now=3.0) == 1
    assert q.next_wakeup() is None


def test_backoff_and_pool_timeout_count_from_the_failure() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []})
    q.add(make_pod("p").build())
    clock.advance_to(100.0)
    qpi = pop(q)
    clock.advance_to(100.5)
    fail(q, qpi, "X")
    assert qpi.timestamp == 100.5
    assert q.next_wakeup() == 400.5
    q.activate([])  # nothing
    clock.advance_to(101.0)
    q.update(qpi.pod, make_pod("p").label("a", "b").build())
    assert q.where("default/p") == "backoffQ" and q.next_wakeup() == 101.5


def test_pod_without_rejecting_plugins_goes_to_backoff() -> None:
    q = make_queue(hints={"X": []})
    q.add(make_pod("p").build())
    fail(q, pop(q))  # no plugin named: an error, not a fit failure
    assert q.where("default/p") == "backoffQ"


# ---- queueing hints ------------------------------------------------------------------


def big_nodes_only(pod: Pod, old: Any, new: Any) -> QueueingHint:
    return QueueingHint.QUEUE if new == "big" else QueueingHint.SKIP


def broken_hint(pod: Pod, old: Any, new: Any) -> QueueingHint:
    raise RuntimeError("boom")


FIT_HINTS: Hints = {
    "NodeResourcesFit": [ClusterEventWithHint(NODE_ADD, big_nodes_only)],
    "TaintToleration": [ClusterEventWithHint(NODE_TAINT)],  # no hint function: QUEUE
    "Broken": [ClusterEventWithHint(NODE_ADD, broken_hint)],
    "Coscheduling": [ClusterEventWithHint(GROUP_ADD)],
}


@pytest.mark.parametrize(
    "name,plugins,pending,event,new,advance,want",
    [
        ("hint says QUEUE, backoff over", ["NodeResourcesFit"], [], NODE_ADD, "big", 5, "activeQ"),
        ("hint says QUEUE, backing off", ["NodeResourcesFit"], [], NODE_ADD, "big", 0, "backoffQ"),
        ("hint says SKIP", ["NodeResourcesFit"], [], NODE_ADD, "small", 5, "unschedulable"),
        ("event not registered", ["NodeResourcesFit"], [], POD_DELETE, None, 5, "unschedulable"),
        ("registered without hint fn", ["TaintToleration"], [], NODE_TAINT, None, 0, "backoffQ"),
        ("plugin not registered", ["Unknown"], [], POD_DELETE, None, 0, "backoffQ"),
        (
            "any plugin may say QUEUE",
            ["NodeResourcesFit", "Unknown"],
            [],
            NODE_ADD,
            "s",
            5,
            "activeQ",
        ),
        ("hint fn raises: QUEUE", ["Broken"], [], NODE_ADD, None, 5, "activeQ"),
        ("wildcard event", ["NodeResourcesFit"], [], WILDCARD, None, 0, "backoffQ"),
        ("pending: QUEUE skips backoff", [], ["Coscheduling"], GROUP_ADD, None, 0, "activeQ"),
        ("pending: other event", [], ["Coscheduling"], NODE_ADD, "big", 0, "unschedulable"),
        ("pending, not registered", [], ["Unknown"], NODE_ADD, None, 5, "unschedulable"),
        (
            "pending beats unschedulable",
            ["TaintToleration"],
            ["Coscheduling"],
            GROUP_ADD,
            None,
            0,
            "activeQ",
        ),
    ],
)
def test_move_on_event_follows_the_hints(
    name: str,
    plugins: list[str],
    pending: list[str],
    event: ClusterEvent,
    new: Any,
    advance: float,
    want: str,
) -> None:
    clock = VirtualClock()
    q = make_queue(clock, FIT_HINTS)
    parked(q, "p", *plugins, pending=pending)
    assert q.where("default/p") == "unschedulable"
    clock.advance_by(advance)
    moved = q.move_on_event(event, None, new)
    assert q.where("default/p") == want
    assert moved == (0 if want == "unschedulable" else 1)


def test_the_pool_knows_which_plugins_rejected_the_pods_it_holds() -> None:
    """An event none of the pooled pods' rejectors registered moves nothing
    (the queue skips the scan); the count follows a pod out of the pool and
    back in with another rejector."""
    clock = VirtualClock()
    calls: list[str] = []

    def counted(pod: Pod, old: Any, new: Any) -> QueueingHint:
        calls.append(pod.name)
        return QueueingHint.QUEUE

    q = make_queue(
        clock, {**FIT_HINTS, "TaintToleration": [ClusterEventWithHint(NODE_TAINT, counted)]}
    )
    parked(q, "p", "TaintToleration")
    assert q.move_on_event(NODE_ADD, None, "big") == 0
    assert q.move_on_event(NODE_TAINT, None, None) == 1 and calls == ["p"]
    clock.advance_by(5)
    q.flush()
    fail(q, pop(q), "NodeResourcesFit")
    assert q.move_on_event(NODE_TAINT, None, None) == 0 and calls == ["p"]
    assert q.move_on_event(NODE_ADD, None, "big") == 1


def test_failing_hint_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    q = make_queue(hints=FIT_HINTS)
    parked(q, "p", "Broken")
    with caplog.at_level(logging.ERROR, logger="troupe.core.queue"):
        assert q.move_on_event(NODE_ADD, None, None) == 1
    assert "queueing hint of Broken failed for pod default/p" in caplog.text


def test_pre_check_filters_the_pods_considered() -> None:
    q = make_queue()
    parked(q, "a", "Unknown")
    parked(q, "b", "Unknown")
    assert q.move_on_event(POD_DELETE, None, None, pre_check=lambda p: p.name == "b") == 1
    assert (q.where("default/a"), q.where("default/b")) == ("unschedulable", "backoffQ")


def test_hint_sees_the_waiting_pod_and_both_objects() -> None:
    seen: list[tuple[str, Any, Any]] = []

    def record(pod: Pod, old: Any, new: Any) -> QueueingHint:
        seen.append((pod.name, old, new))
        return QueueingHint.SKIP

    q = make_queue(hints={"P": [ClusterEventWithHint(NODE_TAINT, record)]})
    parked(q, "p", "P")
    q.move_on_event(NODE_TAINT, "before", "after")
    q.move_on_event(NODE_ADD, None, "n")  # P did not register it: not asked
    assert seen == [("p", "before", "after")]


# ---- events during an attempt (in flight) ----------------------------------------------


@pytest.mark.parametrize(
    "name,plugins,pending,events,want",
    [
        ("helpful event", ["NodeResourcesFit"], [], [(NODE_ADD, "big")], "backoffQ"),
        ("hint says SKIP", ["NodeResourcesFit"], [], [(NODE_ADD, "small")], "unschedulable"),
        ("not registered", ["NodeResourcesFit"], [], [(POD_DELETE, None)], "unschedulable"),
        ("no event", ["NodeResourcesFit"], [], [], "unschedulable"),
        (
            "one of several",
            ["NodeResourcesFit"],
            [],
            [(NODE_ADD, "s"), (NODE_ADD, "big")],
            "backoffQ",
        ),
        ("plugin not registered", ["Unknown"], [], [(POD_DELETE, None)], "backoffQ"),
        ("pending plugin's event", [], ["Coscheduling"], [(GROUP_ADD, None)], "activeQ"),
        (
            "pending after unschedulable",
            ["TaintToleration"],
            ["Coscheduling"],
            [(NODE_TAINT, None), (GROUP_ADD, None)],
            "activeQ",
        ),
    ],
)
def test_event_during_the_attempt(
    name: str,
    plugins: list[str],
    pending: list[str],
    events: list[tuple[ClusterEvent, Any]],
    want: str,
) -> None:
    q = make_queue(hints=FIT_HINTS)
    q.add(make_pod("p").build())
    qpi = pop(q)
    for event, new in events:
        assert q.move_on_event(event, None, new) == 0  # nothing in the pool yet
    fail(q, qpi, *plugins, pending=pending)
    assert q.where("default/p") == want


def test_events_before_the_pop_or_after_done_do_not_count() -> None:
    q = make_queue(hints=FIT_HINTS)
    q.add(make_pod("a").build())
    q.add(make_pod("b").build())
    a = pop(q)
    q.move_on_event(NODE_ADD, None, "big")  # during a's attempt, before b's
    b = pop(q)
    fail(q, b, "NodeResourcesFit")
    fail(q, a, "NodeResourcesFit")
    assert (q.where("default/a"), q.where("default/b")) == ("backoffQ", "unschedulable")
    q.add(make_pod("c").build())
    c = pop(q)
    fail(q, c, "NodeResourcesFit")
    assert q.where("default/c") == "unschedulable"


def test_event_log_overflow_retries_the_pods_in_flight() -> None:
    q = make_queue(hints=FIT_HINTS)
    q.add(make_pod("p").build())
    qpi = pop(q)
    for _ in range(MAX_INFLIGHT_EVENTS + 1):
        q.move_on_event(POD_DELETE, None, None)  # no use to NodeResourcesFit, but too many
    fail(q, qpi, "NodeResourcesFit")
    assert q.where("default/p") == "backoffQ"


def test_update_during_the_attempt_is_kept() -> None:
    q = make_queue(hints=FIT_HINTS)
    q.add(make_pod("p").build())
    qpi = pop(q)
    newer = make_pod("p").label("tier", "web").build()
    q.add(newer)  # the scheduler adds what it does not find queued
    assert "default/p" not in q and q.statistics().active == 0
    fail(q, qpi, "NodeResourcesFit")
    got = q.get("default/p")
    assert got is qpi and got.pod is newer
    assert q.where("default/p") == "backoffQ"  # changed: tried again, not parked


def test_same_object_during_the_attempt_changes_nothing() -> None:
    q = make_queue(hints=FIT_HINTS)
    q.add(make_pod("p").build())
    qpi = pop(q)
    q.update(qpi.pod, make_pod("p").build())
    fail(q, qpi, "NodeResourcesFit")
    assert q.where("default/p") == "unschedulable"


def test_update_of_a_successful_attempt_is_dropped() -> None:
    q = make_queue()
    q.add(make_pod("p").build())
    qpi = pop(q)
    q.add(make_pod("p").label("x", "y").build())
    q.done(qpi.pod.key)
    assert len(q) == 0 and not q.in_flight("default/p")


def test_pod_deleted_during_the_attempt_is_not_requeued() -> None:
    q = make_queue()
    for requeue in (q.add_backoff, lambda qpi: q.add_unschedulable(qpi, 1)):
        q.add(make_pod("p").build())
        qpi = pop(q)
        q.delete("default/p")
        qpi.unschedulable_plugins = frozenset({"X"})
        requeue(qpi)
        q.done("default/p")
        assert len(q) == 0 and q.pending_pods() == []


def test_pod_recreated_during_the_attempt_is_a_new_pod() -> None:
    q = make_queue()
    q.add(make_pod("p").build())
    old = pop(q)
    q.add(dataclasses.replace(make_pod("p").build(), uid="another"))  # delete event missed
    fail(q, old, "X")  # the old attempt is dropped
    new = q.get("default/p")
    assert new is not None and new is not old
    assert (new.pod.uid, new.attempts, q.where("default/p")) == ("another", 0, "activeQ")


def test_pod_already_queued_again_keeps_its_new_entry() -> None:
    q = make_queue()
    q.add(make_pod("p").build())
    qpi = pop(q)
    q.add(dataclasses.replace(make_pod("p").build(), uid="other"))
    q.add_backoff(qpi)
    assert q.where("default/p") == "activeQ" and q.get("default/p") is not qpi


# ---- the unschedulable pool's flush ------------------------------------------------------


def test_flush_after_five_minutes_in_the_pool() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []})
    parked(q, "p", "X")
    assert q.next_wakeup() == 300.0
    clock.advance_to(299.9)
    assert q.flush() == 0 and q.where("default/p") == "unschedulable"
    clock.advance_to(300.0)
    assert q.flush() == 1 and q.where("default/p") == "activeQ"
    assert q.next_wakeup() is None


def test_flush_timeout_counts_from_the_last_failure() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []}, max_in_unschedulable=60.0, initial_backoff=10.0)
    parked(q, "a", "X")
    clock.advance_to(50.0)
    parked(q, "b", "X")
    clock.advance_to(60.0)
    assert q.flush() == 1
    assert (q.where("default/a"), q.where("default/b")) == ("activeQ", "unschedulable")
    assert q.next_wakeup() == 110.0


def test_flush_sends_a_pod_still_backing_off_to_the_backoff_queue() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []}, max_in_unschedulable=5.0, initial_backoff=8.0)
    parked(q, "p", "X")
    clock.advance_to(5.0)
    assert q.flush() == 1 and q.where("default/p") == "backoffQ"
    assert q.next_wakeup() == 8.0


# ---- gated pods ------------------------------------------------------------------------


def test_gated_pod_waits_until_its_gates_are_removed() -> None:
    clock = VirtualClock()
    q = make_queue(clock)
    gated = make_pod("p").gate("example.com/wait").build()
    q.add(gated)
    qpi = q.get("default/p")
    assert qpi is not None
    assert (qpi.gated, qpi.gating_plugin, qpi.message) == (True, "SchedulingGates", "gated")
    assert q.where("default/p") == "gated" and q.pop() is None
    assert q.statistics() == QueueStats(active=0, backoff=0, unschedulable=0, gated=1)
    assert q.move_on_event(NODE_ADD, None, None) == 0
    assert q.move_on_event(POD_UPDATE, None, make_pod("other").build()) == 0
    q.update(gated, gated)
    assert q.where("default/p") == "gated"
    q.update(gated, make_pod("p").build())
    assert q.where("default/p") == "activeQ"
    assert (qpi.gated, qpi.gating_plugin) == (False, "")


def test_gated_pod_is_ungated_by_an_event_its_plugin_registered() -> None:
    held: set[str] = {"p"}

    def hold(pod: Pod) -> Status:
        if pod.name in held:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("no group",), "Coscheduling")
        return SUCCESS

    q = make_queue(hints=FIT_HINTS, pre_enqueue=hold)
    q.add(make_pod("p").build())
    assert q.where("default/p") == "gated"
    assert q.move_on_event(GROUP_ADD, None, None) == 0  # PreEnqueue still says no
    assert q.where("default/p") == "gated"
    held.clear()
    assert q.move_on_event(NODE_ADD, None, None) == 0  # Coscheduling did not register it
    assert q.move_on_event(GROUP_ADD, None, None) == 1
    assert q.where("default/p") == "activeQ"


def test_gated_pod_is_looked_at_again_by_the_flush() -> None:
    held = {"p"}

    def hold(pod: Pod) -> Status:
        return Status(Code.UNSCHEDULABLE, ("x",), "Holder") if pod.name in held else SUCCESS

    clock = VirtualClock()
    q = make_queue(clock, pre_enqueue=hold)
    q.add(make_pod("p").build())
    assert q.next_wakeup() == 300.0
    clock.advance_to(300.0)
    assert q.flush() == 0 and q.where("default/p") == "gated"
    assert q.next_wakeup() == 600.0
    held.clear()
    clock.advance_to(600.0)
    assert q.flush() == 1 and q.where("default/p") == "activeQ"


def test_pre_enqueue_runs_again_when_a_failed_pod_is_requeued() -> None:
    clock = VirtualClock()
    q = make_queue(clock)
    q.add(make_pod("p").build())
    qpi = pop(q)
    held = make_pod("p").label("hold", "yes").build()
    q.update(qpi.pod, held)  # arrives during the attempt
    fail(q, qpi, "X")
    assert q.where("default/p") == "gated" and qpi.gating_plugin == "Holder"
    q.update(held, make_pod("p").build())
    assert q.where("default/p") == "activeQ"


# ---- updates of pods in the pool --------------------------------------------------------


def test_the_same_object_again_does_not_requeue_but_a_change_does() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []})
    pod = make_pod("p").build()
    q.add(pod)
    fail(q, pop(q), "X")
    again = make_pod("p").phase("Pending").build()  # a re-list delivers an equal copy
    q.update(pod, again)
    assert q.where("default/p") == "unschedulable"
    q.update(again, make_pod("p").label("tier", "web").build())
    assert q.where("default/p") == "backoffQ"
    qpi = q.get("default/p")
    assert qpi is not None and qpi.pod.labels == {"tier": "web"}


def test_update_in_backoff_queue_stays_there() -> None:
    q = make_queue()
    q.add(make_pod("p").build())
    qpi = pop(q)
    q.add_backoff(qpi)
    q.done(qpi.pod.key)
    newer = make_pod("p").label("a", "b").build()
    q.update(qpi.pod, newer)
    assert q.where("default/p") == "backoffQ" and qpi.pod is newer


def test_update_of_an_unknown_pod_adds_it() -> None:
    q = make_queue()
    pod = make_pod("p").build()
    q.update(pod, pod)
    assert q.where("default/p") == "activeQ"


# ---- deleting, activating, statistics ----------------------------------------------------


def four_places(clock: VirtualClock) -> SchedulingQueue:
    """One pod in each place: active, gated, backoff, parked (unschedulable)."""
    q = make_queue(clock, {"X": []})
    q.add(make_pod("active").build())
    q.add(make_pod("gated").gate("g").build())
    q.add(make_pod("backoff").priority(5).build())
    q.add(make_pod("parked").priority(9).build())
    fail(q, pop(q), "X")
    backoff = pop(q)
    q.add_backoff(backoff)
    q.done(backoff.pod.key)
    return q


def test_statistics_and_pending_pods() -> None:
    q = four_places(VirtualClock())
    assert q.statistics() == QueueStats(active=1, backoff=1, unschedulable=1, gated=1)
    assert sorted((p.pod.name, w) for p, w in q.pending_pods()) == [
        ("active", "activeQ"),
        ("backoff", "backoffQ"),
        ("gated", "gated"),
        ("parked", "unschedulable"),
    ]
    assert len(q) == 4 and "default/parked" in q and "default/nope" not in q
    assert q.get("default/nope") is None


@pytest.mark.parametrize("name", ["active", "gated", "backoff", "parked"])
def test_delete_from_every_place(name: str) -> None:
    clock = VirtualClock()
    q = four_places(clock)
    key = f"default/{name}"
    q.delete(key)
    q.delete(key)  # twice is fine
    assert key not in q and q.get(key) is None and len(q) == 3
    assert name not in {p.pod.name for p, _ in q.pending_pods()}
    clock.advance_to(1000.0)
    q.flush()
    q.move_on_event(WILDCARD, None, None)
    popped = pop_names(q)
    assert name not in popped and len(popped) == (3 if name == "gated" else 2)


@pytest.mark.parametrize(
    "name,want_place,want_moved",
    [
        ("parked", "activeQ", 1),
        ("backoff", "activeQ", 1),
        ("active", "activeQ", 0),
        ("gated", "gated", 0),  # PreEnqueue still says no
    ],
)
def test_activate(name: str, want_place: str, want_moved: int) -> None:
    q = four_places(VirtualClock())
    assert q.activate([f"default/{name}", "default/missing"]) == want_moved
    assert q.where(f"default/{name}") == want_place


def test_activate_during_the_attempt_retries_the_pod() -> None:
    q = make_queue(hints=FIT_HINTS)
    q.add(make_pod("p").build())
    qpi = pop(q)
    assert q.activate(["default/p"]) == 0
    fail(q, qpi, "NodeResourcesFit")
    assert q.where("default/p") == "backoffQ"


def test_take_marks_pods_in_flight() -> None:
    q = four_places(VirtualClock())
    taken = q.take(["default/active", "default/backoff", "default/gated", "default/missing"])
    assert [t.pod.name for t in taken] == ["active", "backoff"]
    assert [t.attempts for t in taken] == [1, 2]
    assert q.in_flight("default/active") and q.where("default/gated") == "gated"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        make_queue(max_in_unschedulable=0.0)
    with pytest.raises(ValueError):
        make_queue(initial_backoff=-1.0)


# ---- the FIFO fallback -------------------------------------------------------------------


def run_starvation(fifo: FifoFallback, pops: int = 1000) -> list[int]:
    """The scheduler loop with 150 high-priority pods that never fit and come
    straight back (each failure is followed by a cluster event that helps them) and
    5 low-priority pods, queued first, that fit. Returns the pop numbers (1-based)
    at which the low-priority pods were scheduled."""
    clock = VirtualClock()
    hints = {"NodeResourcesFit": [ClusterEventWithHint(POD_DELETE)]}
    q = make_queue(clock, hints, fifo, initial_backoff=0.001, max_backoff=0.001)
    for i in range(5):
        q.add(make_pod(f"low-{i}").priority(0).build())
    clock.advance_by(1)
    for i in range(150):
        q.add(make_pod(f"high-{i}").priority(100).build())
    scheduled = []
    for n in range(1, pops + 1):
        clock.advance_by(0.01)
        q.flush()
        qpi = q.pop()
        assert qpi is not None
        if qpi.pod.priority == 0:
            scheduled.append(n)
            q.record_attempt(True)
            q.done(qpi.pod.key)
            continue
        q.record_attempt(False)
        fail(q, qpi, "NodeResourcesFit")
        q.move_on_event(POD_DELETE, None, None)  # churn: a pod elsewhere goes away
    return scheduled


@pytest.mark.parametrize(
    "name,fifo,want",
    [
        ("disabled: starved", NO_FIFO, []),
        ("default fallback", FifoFallback(), [51, 52, 53, 54, 55]),
        ("longer streak", FifoFallback(failure_streak=120), [121, 122, 123, 124, 125]),
        ("queue too short", FifoFallback(min_queue_length=200), []),
        ("no duration", FifoFallback(duration_seconds=0.0), []),
    ],
)
def test_fifo_fallback_against_starvation(name: str, fifo: FifoFallback, want: list[int]) -> None:
    assert run_starvation(fifo) == want


def test_fifo_fallback_pops_by_arrival_then_ends() -> None:
    clock = VirtualClock()
    q = make_queue(
        clock, fifo=FifoFallback(min_queue_length=3, failure_streak=2, duration_seconds=10)
    )
    for i, prio in enumerate([0, 5, 10, 5]):
        q.add(make_pod(f"p{i}").priority(prio).build())
        clock.advance_by(1)
    q.record_attempt(False)
    assert not q.fifo_active
    q.record_attempt(False)
    assert q.fifo_active and q.statistics().fifo_active
    assert [pop(q).pod.name for _ in range(2)] == ["p0", "p1"]
    clock.advance_by(10)
    assert not q.fifo_active
    assert pop(q).pod.name == "p2"  # sort order again


def test_fifo_streak_is_reset_by_a_success_and_by_the_end_of_the_window() -> None:
    clock = VirtualClock()
    q = make_queue(
        clock, fifo=FifoFallback(min_queue_length=1, failure_streak=3, duration_seconds=5)
    )
    q.add(make_pod("p").build())
    for ok in (False, False, True, False, False):
        q.record_attempt(ok)
    assert not q.fifo_active
    q.record_attempt(False)
    assert q.fifo_active
    clock.advance_by(5)
    q.record_attempt(False)  # the window ended: the streak starts again
    assert not q.fifo_active
    q.record_attempt(False)
    q.record_attempt(False)
    assert q.fifo_active


def test_fifo_disabled_ignores_failures() -> None:
    q = make_queue(fifo=FifoFallback(enabled=False, min_queue_length=0, failure_streak=1))
    q.add(make_pod("p").build())
    q.record_attempt(False)
    assert not q.fifo_active
