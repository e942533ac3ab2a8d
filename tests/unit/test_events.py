"""The event recorder: client-go's correlation, aggregation and spam filter."""

from __future__ import annotations

from troupe.core.recorder import COMBINED_PREFIX, Create, EventRecorder, ObjectRef, Patch

POD = ObjectRef("Pod", "ml", "w-0", "uid-1", "v1", "42")


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


def recorder(clock: Clock, **kw: object) -> EventRecorder:
    return EventRecorder("troupe-scheduler", "troupe-scheduler-a", now=clock, **kw)  # type: ignore[arg-type]


def test_first_occurrence_creates_an_event_as_kube_scheduler_writes_it() -> None:
    op = recorder(Clock()).record(POD, "Warning", "FailedScheduling", "0/3 nodes", "Scheduling")
    assert isinstance(op, Create)
    body = op.body
    assert body["involvedObject"] == {
        "kind": "Pod",
        "namespace": "ml",
        "name": "w-0",
        "uid": "uid-1",
        "apiVersion": "v1",
        "resourceVersion": "42",
    }
    assert body["reportingComponent"] == "troupe-scheduler"
    assert body["reportingInstance"] == "troupe-scheduler-a"
    assert body["source"] == {"component": "troupe-scheduler"}
    assert body["count"] == 1 and body["firstTimestamp"] == body["lastTimestamp"]
    assert body["action"] == "Scheduling"
    assert body["metadata"]["name"].startswith("w-0.")


def test_a_repeat_patches_count_and_last_timestamp_of_the_same_event() -> None:
    clock = Clock()
    r = recorder(clock)
    first = r.record(POD, "Warning", "FailedScheduling", "0/3 nodes")
    assert isinstance(first, Create)
    clock.t += 60
    again = r.record(POD, "Warning", "FailedScheduling", "0/3 nodes")
    assert isinstance(again, Patch)
    assert again.name == first.body["metadata"]["name"]
    assert again.body["count"] == 2
    assert again.body["lastTimestamp"] != first.body["lastTimestamp"]
    # a different message is a different event
    assert isinstance(r.record(POD, "Warning", "FailedScheduling", "0/4 nodes"), Create)


def test_a_failed_create_is_forgotten_so_the_next_one_creates_again() -> None:
    r = recorder(Clock())
    op = r.record(POD, "Normal", "Scheduled", "ok")
    assert isinstance(op, Create)
    r.forget(op.key)
    assert isinstance(r.record(POD, "Normal", "Scheduled", "ok"), Create)


def test_similar_messages_are_combined_after_ten() -> None:
    r = recorder(Clock())
    ops = [r.record(POD, "Warning", "FailedScheduling", f"msg {i}") for i in range(12)]
    assert all(isinstance(o, Create) for o in ops[:9])
    tenth = ops[9]
    assert isinstance(tenth, Create)
    assert tenth.body["message"] == COMBINED_PREFIX + "msg 9"


def test_spam_filter_drops_beyond_the_burst_and_refills_slowly() -> None:
    clock = Clock()
    r = recorder(clock, burst=3)
    got = [r.record(POD, "Warning", "FailedScheduling", "same") for _ in range(5)]
    assert [type(o).__name__ for o in got] == ["Create", "Patch", "Patch", "NoneType", "NoneType"]
    assert r.dropped == 2
    clock.t += 300  # one token per 5 minutes
    assert isinstance(r.record(POD, "Warning", "FailedScheduling", "same"), Patch)
    assert r.record(POD, "Warning", "FailedScheduling", "same") is None
    # another object has its own bucket
    other = ObjectRef("Pod", "ml", "w-1", "uid-2")
    assert isinstance(r.record(other, "Warning", "FailedScheduling", "same"), Create)
