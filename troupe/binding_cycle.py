"""The binding cycle (kube-scheduler's bindingCycle in schedule_one.go): wait on
Permit, PreBind, Bind, PostBind, as an asyncio task; any failure runs
Unreserve, forgets the assumed pod and requeues it, except a pod that someone
else bound (read back after a 409)."""

from __future__ import annotations

import logging

from troupe.api.types import (
    NodeName,
    Pod,
)
from troupe.cluster import BindConflict
from troupe.context import SchedulerContext, as_mapping, pod_ref
from troupe.failures import Failures
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    EventResource,
)
from troupe.framework.interface import QueuedPodInfo
from troupe.framework.runtime import Profile
from troupe.framework.status import Status

log = logging.getLogger(__name__)


class BindingCycle:
    """The binding cycle of one assumed pod, run as its own task (`run`)."""

    def __init__(self, ctx: SchedulerContext, failures: Failures) -> None:
        self.ctx = ctx
        self.failures = failures

    async def run(
        self, profile: Profile, state: CycleState, qpi: QueuedPodInfo, node: NodeName
    ) -> None:
        ctx = self.ctx
        pod = qpi.pod
        waited_from = ctx.clock.now()
        waiting = ctx.waiting_pods.get(pod.key) is not None
        st = await profile.wait_on_permit(pod)
        if waiting:
            ctx.metrics.permit_wait.labels("Success" if st.is_success else "Unschedulable").observe(
                ctx.clock.now() - waited_from
            )
        if st.is_success:
            st = await profile.run_pre_bind(state, pod, node)
        if st.is_success:
            st = await profile.run_bind(state, pod, node)
        if not st.is_success:
            bound_elsewhere = isinstance(st.cause, BindConflict) and await self._bound_by_someone(
                pod
            )
            self._failed(profile, state, qpi, node, st, bound_elsewhere)
            return
        ctx.cache.finish_binding(pod.key)
        ctx.counters.scheduled += 1
        ctx.metrics.pod_scheduling_attempts.observe(qpi.attempts)
        if qpi.initial_attempt_timestamp is not None:
            ctx.metrics.pod_scheduling_sli.labels(str(qpi.attempts)).observe(
                max(0.0, ctx.clock.now() - qpi.initial_attempt_timestamp)
            )
        ctx.records.clear_failure(pod.key)
        ctx.queue.done(pod.key)
        try:
            await ctx.client.record_event(
                pod_ref(pod),
                "Normal",
                "Scheduled",
                f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
                "Binding",
            )
        except Exception as e:
            log.warning("could not record the Scheduled event of %s: %s", pod.key, e)
        await profile.run_post_bind(state, pod, node)

    async def _bound_by_someone(self, pod: Pod) -> bool:
        """After a 409 on bind: is this very pod (same uid) bound now? A 409 is
        also what a pod deleted and re-created under the same name gets (the
        binding's UID precondition fails); that pod must be scheduled, not
        forgotten. When the pod cannot be read, assume it is not bound: it is
        requeued, and the watch removes it from the queue if it is."""
        try:
            cur = await self.ctx.client.read_pod(pod.key)
        except Exception as e:
            log.warning("could not read %s after a bind conflict: %s", pod.key, e)
            return False
        if cur is None:
            return False
        md, spec = as_mapping(cur.get("metadata")), as_mapping(cur.get("spec"))
        return bool(spec.get("nodeName")) and (not pod.uid or md.get("uid") == pod.uid)

    def _failed(
        self,
        profile: Profile,
        state: CycleState,
        qpi: QueuedPodInfo,
        node: NodeName,
        st: Status,
        bound_elsewhere: bool = False,
    ) -> None:
        ctx = self.ctx
        pod = qpi.pod
        ctx.counters.bind_failures += 1
        profile.run_unreserve(state, pod, node)
        ctx.cache.forget_pod(pod.key)
        ctx.emit(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), pod, None)
        if bound_elsewhere:
            log.info("pod %s was bound by someone else; forgetting it", pod.key)
            ctx.queue.done(pod.key)
            return
        if ctx.cache.known_pod(pod.key) is None:
            ctx.queue.done(pod.key)
            return  # deleted meanwhile
        self.failures.handle(
            profile,
            qpi,
            st.message or "binding rejected",
            st.code,
            frozenset({st.plugin}) if st.plugin else frozenset(),
            frozenset(),
        )
        ctx.notify()
