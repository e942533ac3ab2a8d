"""Cluster events into the cache, the queue and the plugins
(troupe.core.eventhandlers), and what the scheduler says on the objects it
cannot take: PreEnqueue's reasons, unreadable pods, stale events. The dispatch
from the table of kinds is tests/unit/test_eventhandlers.py's."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

import pytest

from tests.builders import make_node, make_pod
from tests.unit.core.env import Env
from troupe.api.types import Pod, PodKey
from troupe.framework.events import ActionType, ClusterEvent, EventResource
from troupe.framework.interface import NoArgs, PreEnqueuePlugin
from troupe.framework.status import SUCCESS, Code, Status
from troupe.plugins.registry import IN_TREE


class Hold(NoArgs, PreEnqueuePlugin):
    """Keeps out pods labelled hold; the scheduler says why on the pod."""

    NAME: Final = "Hold"

    def pre_enqueue(self, pod: Pod) -> Status:
        if pod.labels.get("hold") != "yes":
            return SUCCESS
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("held by Hold",), self.NAME)


class QuietHold(Hold):
    """The same, declaring that the pod's own spec says why it waits."""

    NAME: Final = "QuietHold"  # type: ignore[misc]
    PRE_ENQUEUE_REPORTED: Final = False


def holding(plugin: str) -> Env:
    config = {"profiles": [{"plugins": {"preEnqueue": {"enabled": [{"name": plugin}]}}}]}
    return Env(config, registry={**IN_TREE, "Hold": Hold, "QuietHold": QuietHold})


GATE_MESSAGE: Final = 'PodGroup "default/nope" not found'


@pytest.mark.parametrize(
    ("name", "env", "pod", "want_where", "want_message"),
    [
        (
            "scheduling gates: the spec says why",
            Env,
            make_pod("p").gate("example.com/a"),
            "gated",
            None,
        ),
        ("a missing group", Env, make_pod("p").group("nope"), "gated", GATE_MESSAGE),
        (
            "a plugin that reports",
            lambda: holding("Hold"),
            make_pod("p").label("hold", "yes"),
            "gated",
            "held by Hold",
        ),
        (
            "a plugin that declares itself unreported",
            lambda: holding("QuietHold"),
            make_pod("p").label("hold", "yes"),
            "gated",
            None,
        ),
        ("let in", lambda: holding("QuietHold"), make_pod("p"), "activeQ", None),
    ],
)
async def test_pre_enqueue_reasons_are_said_on_the_pod_once(
    name: str, env: Any, pod: Any, want_where: str, want_message: str | None
) -> None:
    e = env()
    obj = pod.obj()
    key = e.pod(obj)
    changed = copy.deepcopy(obj)
    changed["metadata"]["labels"]["again"] = "1"  # an update: PreEnqueue runs again
    e.s.on_pod(changed)
    await e.s.settle()
    assert e.s.queue.where(key) == want_where
    reported = [ev.message for ev in e.events(key, "FailedScheduling")]
    if want_message is None:
        assert reported == [] and e.condition(key) is None
    else:
        assert reported == [want_message]
        assert e.condition(key) == {
            "status": "False",
            "reason": "Unschedulable",
            "message": want_message,
        }


async def test_a_standby_replica_holds_its_reports_until_it_leads() -> None:
    e = Env()
    e.s.writes_enabled = False
    key = e.pod(make_pod("p").group("nope").obj())
    await e.s.settle()
    assert e.events(key) == [] and e.condition(key) is None
    e.s.enable_writes()
    await e.s.settle()
    assert [ev.message for ev in e.events(key, "FailedScheduling")] == [GATE_MESSAGE]


async def test_an_unreadable_pod_of_ours_says_why_and_another_schedulers_does_not() -> None:
    e = Env()
    ours = make_pod("ours").obj()
    ours["spec"]["priority"] = "high"
    theirs = make_pod("theirs").scheduler("default-scheduler").obj()
    theirs["spec"]["priority"] = "high"
    for obj in (ours, theirs):
        e.pod(obj)
    await e.s.settle()
    (ev,) = e.events(PodKey("default/ours"), "FailedScheduling")
    assert ev.message.startswith("spec.priority")
    assert e.condition(PodKey("default/ours")) == {
        "status": "False",
        "reason": "Unschedulable",
        "message": ev.message,
    }
    assert e.events(PodKey("default/theirs")) == []
    assert "default/ours" not in e.s.queue and "default/theirs" not in e.s.queue


def test_a_stale_pending_event_of_a_bound_pod_is_ignored() -> None:
    e = Env()
    e.node("n0")
    pending = make_pod("p").req(cpu="1").obj()
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "n0"
    e.s.on_pod(bound)
    e.s.on_pod(pending)  # a replayed watch, a new leader's first list
    assert "default/p" not in e.s.queue
    cached = e.s.cache.pod(PodKey("default/p"))
    assert cached is not None and cached.node_name == "n0"


def test_a_pod_recreated_under_the_same_name_replaces_the_bound_one() -> None:
    e = Env()
    e.node("n0")
    seen: list[tuple[EventResource, ActionType]] = []
    e.s.handle.watch(lambda ev, old, new: seen.append((ev.resource, ev.action)))
    bound = make_pod("p").req(cpu="1").node("n0").obj()
    e.s.on_pod(bound)
    again = make_pod("p").req(cpu="1").obj()
    again["metadata"]["uid"] = "uid-new"
    e.s.on_pod(again)
    assert e.s.cache.pod(PodKey("default/p")) is None
    qpi = e.s.queue.get("default/p")
    assert qpi is not None and qpi.pod.uid == "uid-new"
    assert (EventResource.ASSIGNED_POD, ActionType.DELETE) in seen
    assert seen[-1] == (EventResource.UNSCHEDULED_POD, ActionType.ADD)


def _relabel(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"]["zone"] = "b"


def _taint(obj: dict[str, Any]) -> None:
    obj["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]


def _grow(obj: dict[str, Any]) -> None:
    obj["status"]["allocatable"]["cpu"] = "8"


def _cordon(obj: dict[str, Any]) -> None:
    obj["spec"]["unschedulable"] = True


def _annotate(obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("annotations", {})["note"] = "x"


def _break(obj: dict[str, Any]) -> None:
    obj["status"]["allocatable"]["cpu"] = "lots"


@pytest.mark.parametrize(
    ("name", "edit", "want", "want_known"),
    [
        ("labels", _relabel, [(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)], True),
        ("taints", _taint, [(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)], True),
        ("cordoned", _cordon, [(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)], True),
        ("allocatable", _grow, [(EventResource.NODE, ActionType.UPDATE_NODE_ALLOCATABLE)], True),
        ("nothing the scheduler reads", _annotate, [], True),
        (
            "unreadable: it leaves scheduling",
            _break,
            [(EventResource.NODE, ActionType.DELETE)],
            False,
        ),
    ],
)
def test_a_node_update_is_the_event_of_what_changed(
    name: str, edit: Any, want: list[tuple[EventResource, ActionType]], want_known: bool
) -> None:
    e = Env()
    obj = make_node("n0").label("zone", "a").capacity(cpu="4", memory="8Gi", pods="110").obj()
    e.s.on_node(copy.deepcopy(obj))
    seen: list[tuple[EventResource, ActionType]] = []
    e.s.handle.watch(lambda ev, old, new: seen.append((ev.resource, ev.action)))
    edit(obj)
    e.s.on_node(obj)
    assert seen == want
    assert (e.s.cache.node("n0") is not None) == want_known


def test_a_pod_group_status_coming_back_is_no_event() -> None:
    e = Env()
    seen: list[ClusterEvent] = []
    e.s.handle.watch(lambda ev, old, new: seen.append(ev))
    e.pod_group("job", 2)
    obj: Mapping[str, Any] = copy.deepcopy(e.cluster.pod_groups["default/job"])
    e.s.on_pod_group({**obj, "status": {"phase": "Scheduling"}})
    e.s.on_pod_group({**obj, "spec": {"minMember": 3}})
    assert [(ev.resource, ev.action) for ev in seen] == [
        (EventResource.POD_GROUP, ActionType.ADD),
        (EventResource.POD_GROUP, ActionType.UPDATE),
    ]


async def test_a_pod_deleted_while_waiting_at_permit_is_rejected() -> None:
    # Without the group cycle a gang's first member waits at Permit for its siblings.
    e = Env({"troupe": {"gangGroupCycle": False}})
    e.node("n0")
    e.pod_group("job", 2)
    first = make_pod("job-0").group("job").req(cpu="1").obj()
    key = e.pod(first)
    e.pod(make_pod("job-1").group("job").req(cpu="1").obj())
    assert e.s.schedule_one()
    await e.s.settle()
    assert e.s.waiting_pods.get(key) is not None
    e.s.on_pod(copy.deepcopy(first), True)
    await e.s.settle()
    assert e.s.waiting_pods.get(key) is None
    assert e.cluster.binds == 0
    assert e.s.cache.pod(key) is None  # forgotten, not bound
    assert key not in e.s.queue


# ---- a pod we bound, coming back through the watch --------------------------------------


def _pod_events(e: Env) -> list[tuple[EventResource, ActionType, Pod | None, Pod | None]]:
    seen: list[tuple[EventResource, ActionType, Pod | None, Pod | None]] = []

    def record(ev: ClusterEvent, old: Any, new: Any) -> None:
        if ev.resource in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD):
            seen.append((ev.resource, ev.action, old, new))

    e.s.handle.watch(record)
    return seen


async def test_a_pod_we_bound_is_an_assigned_pod_add_when_the_watch_confirms_it() -> None:
    """As kube-scheduler's addAssignedPodToCache: the watch's first bound version
    of a pod the scheduler assumed is AssignedPod/Add (the cache's add confirms
    the assumed pod), once; the kubelet starting it is an AssignedPod update."""
    e = Env()
    e.node("n0")
    key = e.pod(make_pod("p").req(cpu="1").obj())
    seen = _pod_events(e)
    await e.run()
    assert e.node_of(key) == "n0"
    assert not e.s.cache.is_assumed(key)
    ((resource, action, old, new),) = seen
    assert (resource, action, old) == (EventResource.ASSIGNED_POD, ActionType.ADD, None)
    assert isinstance(new, Pod) and new.key == key and new.node_name == "n0"
    running = copy.deepcopy(e.cluster.pods[key])
    running["status"]["phase"] = "Running"
    e.s.on_pod(running)
    assert [(r, a) for r, a, _, _ in seen[1:]] == [
        (EventResource.ASSIGNED_POD, ActionType.UPDATE_OTHER)
    ]


async def test_a_pod_we_bound_first_seen_running_by_a_relist_is_an_assigned_pod_add() -> None:
    """The bound event lost (the watch broke), the re-list brings the pod bound
    and Running while the cache still holds it assumed: the same event as a
    fresh add, carrying the listed pod."""
    e = Env(feed_binds=False)
    e.node("n0")
    key = e.pod(make_pod("p").req(cpu="1").obj())
    await e.run()
    assert e.s.cache.is_assumed(key)
    seen = _pod_events(e)
    listed = copy.deepcopy(e.cluster.pods[key])
    listed["status"]["phase"] = "Running"
    e.s.on_pod(listed)
    assert not e.s.cache.is_assumed(key)
    ((resource, action, old, new),) = seen
    assert (resource, action, old) == (EventResource.ASSIGNED_POD, ActionType.ADD, None)
    assert isinstance(new, Pod) and new.phase == "Running"


async def test_a_pod_waiting_for_an_affinity_target_we_bind_is_moved_when_it_is_confirmed() -> None:
    """InterPodAffinity rejected `web` (no pod app=db yet); binding `db` is the
    AssignedPod/Add its queueing hint answers, so `web` leaves the pool after its
    backoff instead of waiting out the pool's five minutes. `db` arriving
    pending is no event InterPodAffinity (nor DefaultPreemption, whose attempt
    failed too) answers."""
    e = Env()
    e.node("n0")
    e.node("n1")
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    web = make_pod("web").req(cpu="1").obj()
    web["spec"]["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    web_key = e.pod(web)
    await e.run()
    assert e.s.queue.where(web_key) == "unschedulable"
    db_key = e.pod(make_pod("db").req(cpu="1").label("app", "db").obj())
    assert e.s.queue.where(web_key) == "unschedulable"
    await e.run()
    assert e.node_of(db_key) is not None
    assert e.s.queue.where(web_key) in ("backoffQ", "activeQ")
    e.later(10)
    await e.run()
    assert e.node_of(web_key) == e.node_of(db_key)
