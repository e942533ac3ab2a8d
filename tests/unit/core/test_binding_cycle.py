"""The binding cycle (troupe.core.binding_cycle): Bind's outcome, and what a
409 on bind means once the pod is read back (ours and made, someone else's,
or a pod re-created under the same name)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import make_pod
from tests.unit.core.env import Env
from troupe.api.types import PodKey
from troupe.core.cluster import BindConflict, NotFound


def bound_there(node: str) -> Any:
    def edit(obj: dict[str, Any]) -> None:
        obj["spec"]["nodeName"] = node

    return edit


def recreated(obj: dict[str, Any]) -> None:
    obj["metadata"]["uid"] = "uid-of-the-new-pod"


def gone(obj: dict[str, Any]) -> None:
    obj.clear()


@pytest.mark.parametrize(
    ("name", "error", "then", "want_node", "want_where", "want_bind_failures"),
    [
        ("bound", None, None, "n0", None, 0),
        # An answer lost: the retried request got 409, but the pod is bound where we bound it.
        ("409, read back bound here", BindConflict("conflict"), bound_there("n0"), "n0", None, 0),
        # Someone else bound it: it is forgotten, not retried.
        (
            "409, read back bound elsewhere",
            BindConflict("conflict"),
            bound_there("n9"),
            None,
            None,
            1,
        ),
        # Deleted and re-created under the same name: the new pod must be scheduled.
        ("409, a re-created pod", BindConflict("conflict"), recreated, None, "backoffQ", 1),
        ("an API error", RuntimeError("HTTP 500 (InternalError): etcd"), None, None, "backoffQ", 1),
    ],
)
async def test_bind_outcomes(
    name: str,
    error: Exception | None,
    then: Any,
    want_node: str | None,
    want_where: str | None,
    want_bind_failures: int,
) -> None:
    e = Env(feed_binds=False)
    e.node("n0")
    key = e.pod(make_pod("p").req(cpu="1").obj())
    if error is not None:
        e.cluster.fail_binds[key] = [error]
    if then is not None:
        then(e.cluster.pods[key])  # what a read after the 409 finds
    assert await e.run() == 1
    stats = e.s.statistics()
    assert stats.bind_failures == want_bind_failures
    assert stats.scheduled == (1 if want_node else 0)
    assert e.s.queue.where(key) == want_where
    scheduled = [ev.message for ev in e.events(key, "Scheduled")]
    if want_node is not None:
        assert e.s.cache.pod(key) is not None  # held (assumed) until the watch confirms
        assert scheduled == [f"Successfully assigned default/p to {want_node}"]
    else:
        assert e.s.cache.pod(key) is None  # forgotten: nothing stays assumed
        assert scheduled == []


async def test_a_failed_bind_says_why_on_the_pod() -> None:
    e = Env(feed_binds=False)
    e.node("n0")
    key = e.pod(make_pod("p").req(cpu="1").obj())
    e.cluster.fail_binds[key] = [RuntimeError("HTTP 500 (InternalError): etcd")]
    await e.run()
    (ev,) = e.events(key, "FailedScheduling")
    assert ev.message == "binding default/p to n0: HTTP 500 (InternalError): etcd"
    assert e.condition(key) == {"status": "False", "reason": "Unschedulable", "message": ev.message}
    assert e.s.last_failure[key] == ev.message
    # Its backoff over, the next cycle binds it.
    e.later(10)
    await e.run()
    assert e.cluster.pods[key]["spec"]["nodeName"] == "n0"
    assert e.s.statistics().scheduled == 1
    assert key not in e.s.last_failure  # a success clears the record


async def test_a_pod_deleted_while_binding_is_not_requeued() -> None:
    e = Env(feed_binds=False)
    e.node("n0")
    obj = make_pod("p").req(cpu="1").obj()
    key = e.pod(obj)
    e.cluster.fail_binds[key] = [NotFound(key)]
    e.s.schedule_one()
    e.s.on_pod(copy.deepcopy(obj), True)  # the delete arrives before the bind's answer
    await e.s.settle()
    assert e.s.statistics().bind_failures == 1
    assert e.s.queue.where(key) is None and key not in e.s.queue
    assert e.s.cache.pod(key) is None
    assert e.events(PodKey(key), "FailedScheduling") == []
