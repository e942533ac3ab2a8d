"""A failed scheduling attempt (kube-scheduler's handleSchedulingFailure): the pod
goes back to the queue with the plugins that rejected it, its record keeps the
message and code, and the pod says why (FailedScheduling event and PodScheduled
condition). Shared by the pod cycle, the group cycle and the binding cycle."""

from __future__ import annotations

import logging

from troupe.core.context import SchedulerContext, pod_ref, pod_scheduled_condition
from troupe.framework.fit import FitError
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status

log = logging.getLogger(__name__)


class Failures:
    def __init__(self, ctx: SchedulerContext) -> None:
        self.ctx = ctx

    def count_attempt(self, profile: Profile, outcome: str, seconds: float) -> None:
        """One pod's scheduling attempt: "scheduled", "unschedulable" or "error"."""
        m = self.ctx.metrics
        m.schedule_attempts.labels(outcome, profile.scheduler_name).inc()
        m.attempt_duration.labels(outcome, profile.scheduler_name).observe(seconds)

    @staticmethod
    def outcome(result: FitError | Status) -> str:
        return (
            "error" if isinstance(result, Status) and result.code is Code.ERROR else "unschedulable"
        )

    def fail(self, profile: Profile, qpi: QueuedPodInfo, result: FitError | Status) -> None:
        """A pod's attempt failed with a FitError (Filter, PostFilter) or a Status."""
        self.ctx.counters.failed += 1
        if isinstance(result, FitError):
            if result.nominated_node is not None:
                self.ctx.nominate(qpi.pod, result.nominated_node)
            self.handle(
                profile,
                qpi,
                result.message,
                result.code,
                result.unschedulable_plugins,
                result.pending_plugins,
            )
        else:
            self.handle(
                profile,
                qpi,
                result.message,
                result.code,
                frozenset({result.plugin}) if result.plugin else frozenset(),
                frozenset(),
            )

    def handle(
        self,
        profile: Profile,
        qpi: QueuedPodInfo,
        message: str,
        code: Code,
        plugins: frozenset[str],
        pending: frozenset[str],
    ) -> None:
        ctx = self.ctx
        ctx.queue.record_attempt(False)
        pod = qpi.pod
        qpi.message = message
        ctx.records.set_failure(pod.key, message, code)
        log.info("pod %s is unschedulable: %s", pod.key, message)
        if code is Code.ERROR:
            # No plugin rejected it: it no longer counts for the last attempt's rejectors.
            qpi.unschedulable_plugins = qpi.pending_plugins = frozenset()
            ctx.queue.add_backoff(qpi)
        else:
            qpi.unschedulable_plugins = plugins
            qpi.pending_plugins = pending
            ctx.queue.add_unschedulable(qpi, ctx.counters.cycles)
        ctx.queue.done(pod.key)
        ctx.spawn(ctx.report_failure(pod_ref(pod), message, pod_scheduled_condition(pod.raw)))
