"""A failed attempt (troupe.core.failures, kube-scheduler's
handleSchedulingFailure): where the pod waits, with which rejectors, what its
record keeps and what the pod says."""

from __future__ import annotations

import pytest

from tests.builders import make_pod
from tests.unit.core.env import Env
from troupe.framework.fit import FitError
from troupe.framework.status import Code, Status

MESSAGE = "0/1 nodes are available: 1 Insufficient cpu."


@pytest.mark.parametrize(
    ("name", "result", "want_where", "want_plugins", "want_pending", "want_code"),
    [
        (
            "rejected by Filter",
            FitError(MESSAGE, frozenset({"NodeResourcesFit"}), frozenset()),
            "unschedulable",
            {"NodeResourcesFit"},
            set(),
            Code.UNSCHEDULABLE,
        ),
        (
            "pending on a plugin",
            FitError(MESSAGE, frozenset({"VolumeBinding"}), frozenset({"VolumeBinding"})),
            "unschedulable",
            {"VolumeBinding"},
            {"VolumeBinding"},
            Code.UNSCHEDULABLE,
        ),
        (
            "rejected by a plugin's Status",
            Status(Code.UNSCHEDULABLE, (MESSAGE,), "Coscheduling"),
            "unschedulable",
            {"Coscheduling"},
            set(),
            Code.UNSCHEDULABLE,
        ),
        (
            "an error: backoff, no rejector",
            Status(Code.ERROR, (MESSAGE,), "NodeResourcesFit"),
            "backoffQ",
            set(),
            set(),
            Code.ERROR,
        ),
    ],
)
async def test_fail(
    name: str,
    result: FitError | Status,
    want_where: str,
    want_plugins: set[str],
    want_pending: set[str],
    want_code: Code,
) -> None:
    e = Env()
    key = e.pod(make_pod("p").req(cpu="1").obj())
    qpi = e.s.queue.pop()
    assert qpi is not None
    profile = e.s.profiles[qpi.pod.scheduler_name]
    e.s.failures.fail(profile, qpi, result)
    await e.s.settle()
    assert e.s.queue.where(key) == want_where
    assert (set(qpi.unschedulable_plugins), set(qpi.pending_plugins)) == (
        want_plugins,
        want_pending,
    )
    assert qpi.message == MESSAGE
    assert e.s.ctx.records.failure(key) == (MESSAGE, want_code)
    assert [ev.message for ev in e.events(key, "FailedScheduling")] == [MESSAGE]
    assert e.condition(key) == {"status": "False", "reason": "Unschedulable", "message": MESSAGE}
    assert e.s.statistics().failed_attempts == 1


async def test_a_fit_error_with_a_nomination_nominates_the_pod() -> None:
    e = Env()
    e.node("n1")
    key = e.pod(make_pod("p").req(cpu="1").obj())
    qpi = e.s.queue.pop()
    assert qpi is not None
    fe = FitError(MESSAGE, frozenset({"NodeResourcesFit"}), frozenset(), nominated_node="n1")
    e.s.failures.fail(e.s.profiles[qpi.pod.scheduler_name], qpi, fe)
    await e.s.settle()
    assert e.s.handle.nominator.node_of(key) == "n1"
    assert e.cluster.pods[key]["status"]["nominatedNodeName"] == "n1"


@pytest.mark.parametrize(
    ("result", "want"),
    [
        (FitError(MESSAGE, frozenset(), frozenset()), "unschedulable"),
        (Status(Code.UNSCHEDULABLE, (MESSAGE,)), "unschedulable"),
        (Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (MESSAGE,)), "unschedulable"),
        (Status(Code.ERROR, (MESSAGE,)), "error"),
    ],
)
def test_outcome(result: FitError | Status, want: str) -> None:
    assert Env().s.failures.outcome(result) == want


def test_count_attempt_counts_by_outcome_and_profile() -> None:
    e = Env()
    profile = e.s.profiles["troupe-scheduler"]
    e.s.failures.count_attempt(profile, "error", 0.25)
    e.s.failures.count_attempt(profile, "error", 0.5)
    labels = {"result": "error", "profile": "troupe-scheduler"}
    registry = e.s.metrics.registry
    assert registry.get_sample_value("scheduler_schedule_attempts_total", labels) == 2
    assert registry.get_sample_value(
        "scheduler_scheduling_attempt_duration_seconds_sum", labels
    ) == pytest.approx(0.75)
