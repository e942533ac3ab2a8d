"""The scheduling queue: ordering, backoff, hints, flush, gating, FIFO fallback."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.types import Pod
from scheduler.clock import VirtualClock
from scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueuedPodInfo,
    QueueingHint,
)
from scheduler.framework.status import SUCCESS, Code, Status
from scheduler.queue import FifoFallback, SchedulingQueue
from tests.builders import make_pod

NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)


def sort_key(q: QueuedPodInfo) -> Any:
    return (-q.pod.priority, q.timestamp, q.seq)


def gate(pod: Pod) -> Status:
    if pod.scheduling_gates:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("gated",), "SchedulingGates")
    return SUCCESS


def make_queue(
    clock: VirtualClock, hints: dict[str, Any] | None = None, fifo: FifoFallback | None = None
) -> SchedulingQueue:
    return SchedulingQueue(
        clock=clock,
        sort_key=sort_key,
        pre_enqueue=gate,
        hints=hints or {},
        fifo=fifo or FifoFallback(enabled=False),
    )


def pop_names(q: SchedulingQueue) -> list[str]:
    out = []
    while (p := q.pop()) is not None:
        out.append(p.pod.name)
    return out


def fail(q: SchedulingQueue, qpi: QueuedPodInfo, *plugins: str) -> None:
    qpi.unschedulable_plugins = frozenset(plugins)
    q.add_unschedulable(qpi)
    q.done(qpi.pod.key)


def test_priority_then_arrival_order() -> None:
    clock = VirtualClock()
    q = make_queue(clock)
    for name, prio in [("a", 0), ("b", 10), ("c", 0), ("d", 10)]:
        q.add(make_pod(name).priority(prio).build())
        clock.advance_by(1)
    assert pop_names(q) == ["b", "d", "a", "c"]


@pytest.mark.parametrize(
    "attempts,want", [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)]
)
def test_backoff_doubles_to_the_cap(attempts: int, want: float) -> None:
    q = make_queue(VirtualClock())
    qpi = QueuedPodInfo(pod=make_pod("p").build(), timestamp=0.0, attempts=attempts)
    assert q.backoff_duration(qpi) == want


def test_error_goes_to_backoff_then_back_to_active() -> None:
    clock = VirtualClock()
    q = make_queue(clock)
    q.add(make_pod("p").build())
    qpi = q.pop()
    assert qpi is not None
    q.add_backoff(qpi)
    q.done(qpi.pod.key)
    assert q.where("default/p") == "backoffQ"
    assert q.next_wakeup() == 1.0
    clock.advance_to(0.5)
    assert q.flush() == 0 and q.pop() is None
    clock.advance_to(1.0)
    assert q.flush() == 1 and q.pop() is not None


def test_unschedulable_pod_moves_only_on_a_helpful_event() -> None:
    clock = VirtualClock()

    def only_big_nodes(pod: Pod, old: Any, new: Any) -> QueueingHint:
        return QueueingHint.QUEUE if new == "big" else QueueingHint.SKIP

    hints = {"NodeResourcesFit": [ClusterEventWithHint(NODE_ADD, only_big_nodes)]}
    q = make_queue(clock, hints)
    q.add(make_pod("p").build())
    qpi = q.pop()
    assert qpi is not None
    fail(q, qpi, "NodeResourcesFit")
    assert q.where("default/p") == "unschedulable"
    assert q.move_on_event(POD_DELETE, None, None) == 0  # not registered
    assert q.move_on_event(NODE_ADD, None, "small") == 0  # hint says SKIP
    clock.advance_by(5)
    assert q.move_on_event(NODE_ADD, None, "big") == 1
    assert q.where("default/p") == "activeQ"  # backoff (1s) already over


def test_plugin_without_registration_moves_on_every_event() -> None:
    q = make_queue(VirtualClock())
    q.add(make_pod("p").build())
    qpi = q.pop()
    assert qpi is not None
    fail(q, qpi, "SomePlugin")
    assert q.move_on_event(POD_DELETE, None, None) == 1
    assert q.where("default/p") == "backoffQ"  # still backing off


def test_event_while_in_flight_sends_pod_to_backoff() -> None:
    q = make_queue(VirtualClock(), {"NodeResourcesFit": [ClusterEventWithHint(NODE_ADD)]})
    q.add(make_pod("p").build())
    qpi = q.pop()
    assert qpi is not None
    q.move_on_event(NODE_ADD, None, "n")  # arrives during the cycle
    fail(q, qpi, "NodeResourcesFit")
    assert q.where("default/p") == "backoffQ"


def test_flush_after_five_minutes_in_the_pool() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []})
    q.add(make_pod("p").build())
    qpi = q.pop()
    assert qpi is not None
    fail(q, qpi, "X")
    assert q.next_wakeup() == 300.0
    clock.advance_to(299)
    assert q.flush() == 0
    clock.advance_to(300)
    assert q.flush() == 1 and q.where("default/p") == "activeQ"


def test_gated_pod_waits_until_its_gates_are_removed() -> None:
    q = make_queue(VirtualClock())
    gated = make_pod("p").gate("wait").build()
    q.add(gated)
    assert q.statistics().gated == 1 and q.pop() is None
    q.move_on_event(NODE_ADD, None, None)
    assert q.statistics().gated == 1
    q.update(gated, make_pod("p").build())
    assert q.where("default/p") == "activeQ"


def test_delete_from_every_place() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []})
    q.add(make_pod("active").build())
    q.add(make_pod("gated").gate("g").build())
    q.add(make_pod("backoff").priority(5).build())
    q.add(make_pod("parked").priority(9).build())
    parked = q.pop()
    backoff = q.pop()
    assert parked is not None and backoff is not None
    fail(q, parked, "X")
    q.add_backoff(backoff)
    assert {w for _, w in q.pending_pods()} == {"activeQ", "gated", "backoffQ", "unschedulable"}
    for name in ("active", "gated", "backoff", "parked"):
        q.delete(f"default/{name}")
    assert len(q) == 0 and q.pending_pods() == []


def test_activate_and_take() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []})
    for n in ("a", "b", "c"):
        q.add(make_pod(n).build())
    first = q.pop()
    assert first is not None
    fail(q, first, "X")
    q.activate([first.pod.key])
    assert q.where(first.pod.key) == "activeQ"
    taken = q.take(["default/b", "default/c", "default/missing"])
    assert [t.pod.name for t in taken] == ["b", "c"]
    assert all(t.attempts == 1 for t in taken)


def run_starvation(fifo: FifoFallback, rounds: int = 400) -> list[str]:
    """High-priority pods never fit and come straight back (every failure is
    followed by an event that helps them); low-priority pods would fit."""
    clock = VirtualClock()
    q = SchedulingQueue(
        clock=clock,
        sort_key=sort_key,
        pre_enqueue=gate,
        hints={},
        initial_backoff=0.001,
        max_backoff=0.001,
        fifo=fifo,
    )
    for i in range(150):
        q.add(make_pod(f"high-{i}").priority(100).build())
    clock.advance_by(1)
    for i in range(5):
        q.add(make_pod(f"low-{i}").priority(0).build())
    scheduled = []
    for _ in range(rounds):
        clock.advance_by(0.01)
        q.flush()
        qpi = q.pop()
        if qpi is None:
            break
        if qpi.pod.priority == 0:
            scheduled.append(qpi.pod.name)
            q.record_attempt(True)
            q.done(qpi.pod.key)
            continue
        q.record_attempt(False)
        fail(q, qpi, "NodeResourcesFit")
        q.move_on_event(POD_DELETE, None, None)  # cluster churn sends them back
    return scheduled


def test_starvation_without_fifo_fallback() -> None:
    assert run_starvation(FifoFallback(enabled=False)) == []


def test_fifo_fallback_schedules_the_starved_pods() -> None:
    got = run_starvation(
        FifoFallback(enabled=True, min_queue_length=100, failure_streak=50, duration_seconds=30)
    )
    assert sorted(got) == [f"low-{i}" for i in range(5)]


def test_fifo_fallback_ends_after_its_duration() -> None:
    clock = VirtualClock()
    q = SchedulingQueue(
        clock=clock,
        sort_key=sort_key,
        pre_enqueue=gate,
        hints={},
        fifo=FifoFallback(True, min_queue_length=2, failure_streak=2, duration_seconds=10),
    )
    for i in range(5):
        q.add(make_pod(f"p{i}").build())
    q.record_attempt(False)
    q.record_attempt(False)
    assert q.fifo_active and q.statistics().fifo_active
    clock.advance_by(10)
    assert not q.fifo_active


def test_the_same_object_again_does_not_requeue_but_a_change_does() -> None:
    clock = VirtualClock()
    q = make_queue(clock, {"X": []})
    pod = make_pod("p").build()
    q.add(pod)
    qpi = q.pop()
    assert qpi is not None
    fail(q, qpi, "X")
    again = make_pod("p").build()  # a re-list delivers an equal copy
    q.update(pod, again)
    assert q.where("default/p") == "unschedulable"
    q.update(again, make_pod("p").label("tier", "web").build())
    assert q.where("default/p") in ("backoffQ", "activeQ")
