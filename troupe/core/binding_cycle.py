"""The binding cycle (kube-scheduler's bindingCycle in schedule_one.go): wait on
Permit, PreBind, Bind, PostBind, as an asyncio task; any failure runs
Unreserve, forgets the assumed pod and requeues it, except a pod read back
bound after a 409: bound where we bound it, the bind was ours (its answer was
lost); bound elsewhere, someone else bound it and it is forgotten."""

from __future__ import annotations

import logging

from troupe.api.types import (
    NodeName,
    Pod,
)
from troupe.core.cluster import BindConflict
from troupe.core.context import SchedulerContext, as_mapping, pod_ref
from troupe.core.failures import Failures
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
            where = await self._bound_to(pod) if isinstance(st.cause, BindConflict) else None
            if where != node:
                self._failed(profile, state, qpi, node, st, bound_elsewhere=where is not None)
                return
            # Bound where we bound it: our bind was made and its answer lost (a
            # retried request answered 409). Undoing it would take the claims
            # and volumes of a pod that runs.
            log.info("bind of %s to %s answered a conflict, but it was made", pod.key, node)
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

    async def _bound_to(self, pod: Pod) -> str | None:
        """After a 409 on bind: the node this very pod (same uid) is bound to
        now, if any (ours, when the bind was made but its answer lost). A 409
        is also what a pod deleted and re-created under the same name gets (the
        binding's UID precondition fails); that pod must be scheduled, not
        forgotten. When the pod cannot be read, assume it is not bound: it is
        requeued, and the watch removes it from the queue if it is."""
        try:
            cur = await self.ctx.client.read_pod(pod.key)
        except Exception as e:
            log.warning("could not read %s after a bind conflict: %s", pod.key, e)
            return None
        if cur is None:
            return None
        md, spec = as_mapping(cur.get("metadata")), as_mapping(cur.get("spec"))
        if pod.uid and md.get("uid") != pod.uid:
            return None
        return str(spec.get("nodeName") or "") or None

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
