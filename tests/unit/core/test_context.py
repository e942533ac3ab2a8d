"""What the scheduler's parts share (troupe.core.context): the per-pod records,
the event fan-out to plugins' watchers and the queue, nominations and failure
reports written to the cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.builders import make_pod
from tests.unit.core.env import Env
from troupe.api.types import PodKey
from troupe.core.context import (
    FailureMessages,
    PodRecords,
    action_name,
    object_ref,
    pod_ref,
    pod_scheduled_condition,
)
from troupe.core.recorder import ObjectRef
from troupe.framework.events import ActionType, ClusterEvent, EventResource
from troupe.framework.status import Code

P = PodKey("default/p")


# ---- PodRecords -----------------------------------------------------------------------


def test_a_record_lives_while_it_holds_something() -> None:
    records = PodRecords()
    records.set_failure(P, "no room", Code.UNSCHEDULABLE)
    assert records.failure(P) == ("no room", Code.UNSCHEDULABLE)
    records.set_failure(P, "still no room")  # without a code: the last one's stays
    assert records.failure(P) == ("still no room", Code.UNSCHEDULABLE)
    records.of(P).gate_reported = "gated"
    records.clear_failure(P)
    assert records.failure(P) is None and P in records  # the report is still held
    records.of(P).gate_reported = None
    records.prune(P)
    assert P not in records and len(records) == 0


def test_forget_drops_everything_about_a_pod() -> None:
    records = PodRecords()
    records.set_failure(P, "no room")
    records.of(P).reported = ("uid", "bad")
    records.forget(P)
    assert records.get(P) is None and records.failure(P) is None


def test_a_failure_without_a_code_reads_as_unschedulable() -> None:
    records = PodRecords()
    records.set_failure(P, "no room")
    assert records.failure(P) == ("no room", Code.UNSCHEDULABLE)


def test_failure_messages_show_only_pods_with_a_failure() -> None:
    records = PodRecords()
    records.set_failure(P, "no room")
    records.of(PodKey("default/q")).gate_reported = "gated"
    view = FailureMessages(records)
    assert dict(view) == {P: "no room"}
    assert len(view) == 1
    with pytest.raises(KeyError):
        view[PodKey("default/q")]


# ---- small readers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "want"),
    [
        (ActionType.ADD, "Add"),
        (ActionType.DELETE, "Delete"),
        (ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT, "Update"),
        (ActionType.UPDATE_POD_SCALE_DOWN, "Update"),
    ],
)
def test_action_name(action: ActionType, want: str) -> None:
    assert action_name(action) == want


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        (
            {"metadata": {"uid": "u1", "resourceVersion": "7"}},
            ObjectRef("PodGroup", "ns", "g", "u1", "v1", "7"),
        ),
        ({"metadata": {"uid": 5}}, ObjectRef("PodGroup", "ns", "g", "", "v1", "")),
        ({}, ObjectRef("PodGroup", "ns", "g", "", "v1", "")),
    ],
)
def test_object_ref(obj: dict[str, Any], want: ObjectRef) -> None:
    assert object_ref(obj, "PodGroup", "ns", "g") == want


def test_pod_ref_names_the_pod() -> None:
    ref = pod_ref(make_pod("p").build())
    assert (ref.kind, ref.namespace, ref.name, ref.uid) == ("Pod", "default", "p", "uid-default-p")


@pytest.mark.parametrize(
    ("status", "want"),
    [
        ({}, None),
        ({"conditions": "not a list"}, None),
        ({"conditions": [{"type": "Ready", "status": "True"}]}, None),
        (
            {"conditions": [{"type": "Ready"}, {"type": "PodScheduled", "status": "False"}]},
            {"type": "PodScheduled", "status": "False"},
        ),
    ],
)
def test_pod_scheduled_condition(status: dict[str, Any], want: Any) -> None:
    assert pod_scheduled_condition({"status": status}) == want


# ---- the shared operations ----------------------------------------------------------------


def test_emit_tells_every_watcher_even_after_one_raises() -> None:
    e = Env()
    seen: list[ClusterEvent] = []

    def broken(event: ClusterEvent, old: Any, new: Any) -> None:
        raise RuntimeError("a plugin's bug")

    e.s.handle.watch(broken)
    e.s.handle.watch(lambda event, old, new: seen.append(event))
    event = ClusterEvent(EventResource.NODE, ActionType.ADD)
    e.s.ctx.emit(event, None, None)
    assert seen == [event]


async def test_nominate_writes_once_and_clears() -> None:
    e = Env()
    key = e.pod(make_pod("p").req(cpu="1").obj())
    pod = e.s.queue.get(key)
    assert pod is not None
    ctx = e.s.ctx
    ctx.nominate(pod.pod, "n1")
    ctx.nominate(pod.pod, "n1")  # the same again: nothing to write
    await e.s.settle()
    assert ctx.handle.nominator.node_of(key) == "n1"
    assert e.cluster.pods[key]["status"]["nominatedNodeName"] == "n1"
    ctx.nominate(pod.pod, "")
    await e.s.settle()
    assert ctx.handle.nominator.node_of(key) is None
    assert "nominatedNodeName" not in e.cluster.pods[key]["status"]


@pytest.mark.parametrize(
    ("current", "want_writes"),
    [
        (None, 1),
        ({"status": "False", "reason": "Unschedulable", "message": "no room"}, 0),
        ({"status": "False", "reason": "Unschedulable", "message": "other"}, 1),
        ({"status": "True", "reason": "", "message": "no room"}, 1),
    ],
)
async def test_report_failure_writes_the_condition_only_when_it_changes(
    current: dict[str, str] | None, want_writes: int
) -> None:
    e = Env()
    key = e.pod(make_pod("p").obj())
    ref = pod_ref(make_pod("p").build())
    await e.s.ctx.report_failure(ref, "no room", current)
    assert [(ev.type, ev.reason, ev.message) for ev in e.events(key)] == [
        ("Warning", "FailedScheduling", "no room")
    ]
    assert e.cluster.condition_writes == want_writes


# ---- failure reports: the newest message is the pod's reason -----------------------------


class SlowEvents:
    """A cluster client whose Event writes wait until released, in any order,
    and which records the condition patches it receives."""

    def __init__(self) -> None:
        self.gates: list[asyncio.Future[None]] = []
        self.conditions: list[tuple[PodKey, str]] = []

    async def record_event(self, *args: Any) -> None:
        gate = asyncio.get_running_loop().create_future()
        self.gates.append(gate)
        await gate

    async def set_pod_condition(self, key: PodKey, status: str, reason: str, message: str) -> None:
        self.conditions.append((key, message))


async def test_an_overtaken_failure_report_writes_no_condition() -> None:
    # Live, a PreEnqueue report and a cycle's report of one pod race; the
    # older one's Event write came back last and its patch overwrote the newer
    # reason (found by the live harness: composite-rush, late-watches, seed 1).
    e = Env()
    client = SlowEvents()
    e.s.ctx.client = client  # type: ignore[assignment]
    ref = ObjectRef("Pod", "default", "p", "uid", "v1", "")
    old = asyncio.create_task(e.s.ctx.report_failure(ref, "old reason", None))
    new = asyncio.create_task(e.s.ctx.report_failure(ref, "new reason", None))
    await asyncio.sleep(0)
    assert len(client.gates) == 2
    client.gates[1].set_result(None)  # the newer report's Event lands first
    await new
    client.gates[0].set_result(None)
    await old
    assert client.conditions == [(P, "new reason")]
    assert e.s.ctx.report_seq == {} and e.s.ctx.report_locks == {}


async def test_reports_in_order_each_write_their_condition() -> None:
    e = Env()
    client = SlowEvents()
    e.s.ctx.client = client  # type: ignore[assignment]
    ref = ObjectRef("Pod", "default", "p", "uid", "v1", "")
    first = asyncio.create_task(e.s.ctx.report_failure(ref, "first", None))
    await asyncio.sleep(0)
    client.gates[0].set_result(None)
    await first
    second = asyncio.create_task(e.s.ctx.report_failure(ref, "second", None))
    await asyncio.sleep(0)
    client.gates[1].set_result(None)
    await second
    assert client.conditions == [(P, "first"), (P, "second")]
