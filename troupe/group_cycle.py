"""The gang's group cycle: all the queued members of a PodGroup placed together
on the cycle's snapshot, each placement charged before the next is searched;
only if at least minMember fit are they assumed, reserved and permitted
together. Nothing is held otherwise. A gang that does not fit preempts as one
unit, through the profile's GroupPreemptionPlugin."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from troupe.api.types import (
    PREEMPT_NEVER,
    GroupKey,
    NodeName,
    PodGroup,
    PodKey,
)
from troupe.context import SchedulerContext, object_ref
from troupe.events import ObjectRef
from troupe.failures import Failures
from troupe.framework.cycle_state import CycleState
from troupe.framework.fit import FitError, NodeSubset, ScheduleResult
from troupe.framework.interface import PreemptionCandidate, QueuedPodInfo
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status
from troupe.plugins.coscheduling.core import min_field, placed_members
from troupe.schedule_one import PodCycle
from troupe.snapshot import pod_charge

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Trial:
    """One search of a gang's members: where each fit (with the CycleState its
    search left for Reserve and Permit), why the others did not, and how long
    each member's search took."""

    placements: list[tuple[QueuedPodInfo, CycleState, NodeName]] = field(default_factory=list)
    failures: list[tuple[QueuedPodInfo, FitError | Status]] = field(default_factory=list)
    seconds: dict[PodKey, float] = field(default_factory=dict)


@dataclass(slots=True)
class PreemptionPlan:
    """What a gang would evict: per member, its node and the candidate that
    makes room there (None where it fits without evicting)."""

    plugin: str
    chosen: list[tuple[QueuedPodInfo, NodeName, PreemptionCandidate | None]] = field(
        default_factory=list
    )

    def victims(self) -> set[PodKey]:
        return {v.key for _, _, c in self.chosen if c is not None for v in c.victims}


class GroupCycle:
    """A gang's atomic group cycle, entered for the first member of a group that
    is not admitted yet (`wants`, then `schedule`)."""

    def __init__(self, ctx: SchedulerContext, pods: PodCycle, failures: Failures) -> None:
        self.ctx = ctx
        self.pods = pods
        self.failures = failures
        # Victims of each gang's last preemption: it waits for them to go.
        self.gang_victims: dict[GroupKey, set[PodKey]] = {}

    def wants(self, profile: Profile, qpi: QueuedPodInfo) -> PodGroup | None:
        """The PodGroup whose group cycle this popped pod starts, if any: a gang
        (a profile with Coscheduling at Permit) not admitted yet."""
        ctx = self.ctx
        group = qpi.pod.group_key
        if group is None or not ctx.config.troupe.group_cycle:
            return None
        if not any(name == "Coscheduling" for name, _ in profile.permit):
            return None
        pg = ctx.cache.pod_group(group)
        if pg is None or not pg.gang:
            return None
        if placed_members(ctx.cache, ctx.waiting_pods, group) >= pg.min_member:
            return None  # admitted: minMember already bound or assumed
        return pg

    def schedule(self, profile: Profile, first: QueuedPodInfo, pg: PodGroup) -> None:
        """Place the gang's queued pods together on the snapshot, each placement charged
        before the next is searched; commit them only if minMember fit, else hold nothing.

        The snapshot serves as the scratch copy: placements are charged into an
        overlay, undone before the real assumes, which then reach it through the cache.
        """
        ctx = self.ctx
        group = first.pod.group_key
        assert group is not None
        min_member = pg.min_member
        t0 = ctx.clock.now()
        members = [first]
        others = [
            p.key
            for p in ctx.cache.pods_in_group(group)
            if p.key != first.pod.key and p.key in ctx.queue
        ]
        taken = ctx.queue.take(others)
        ctx.cycle_pods.extend(taken)
        for q in taken:
            if ctx.cache.pod(q.pod.key) is not None:
                ctx.counters.dropped_known += 1
                ctx.queue.done(q.pod.key)
            else:
                members.append(q)
        members.sort(key=profile.sort_key)
        placed_before = placed_members(ctx.cache, ctx.waiting_pods, group)
        trial = self._place(profile, members, None)
        ctx.counters.group_attempts += 1
        if placed_before + len(trial.placements) >= min_member:
            self._admit(profile, group, members, trial, t0)
            return
        plan = self._plan_preemption(profile, group, members, min_member, placed_before, None)
        if plan is not None:
            self._preempt(profile, group, plan)
        ctx.counters.group_failures += 1
        ctx.metrics.podgroup_attempts.labels("unschedulable").inc()
        failures = trial.failures
        why = failures[0][1].message if failures else "not enough member pods are pending"
        message = (
            f'PodGroup "{group}": {placed_before + len(trial.placements)} of {min_field(pg)} '
            f"{min_member} pods fit; {why}"
        )
        plugins: set[str] = {"Coscheduling"}
        for _, result in failures:
            if isinstance(result, FitError):
                plugins |= result.unschedulable_plugins
            elif result.plugin:
                plugins.add(result.plugin)
        errors = {q.pod.key for q, result in failures if self.failures.outcome(result) == "error"}
        for qpi in members:
            ctx.counters.failed += 1
            self.failures.handle(
                profile, qpi, message, Code.UNSCHEDULABLE, frozenset(plugins), frozenset()
            )
            outcome = "error" if qpi.pod.key in errors else "unschedulable"
            self.failures.count_attempt(profile, outcome, trial.seconds[qpi.pod.key])

    def _place(
        self, profile: Profile, members: list[QueuedPodInfo], within: NodeSubset | None
    ) -> Trial:
        """Search every member in turn on the snapshot (`within` those nodes),
        each placement charged before the next member is searched; nothing stays
        charged afterwards."""
        ctx = self.ctx
        snap = ctx.snapshot
        trial = Trial()
        with snap.overlay() as placed:
            for qpi in members:
                t_pod = time.perf_counter()
                state = CycleState()
                result = self.pods.schedule_pod(
                    profile, state, qpi.pod, post_filter=False, within=within
                )
                trial.seconds[qpi.pod.key] = time.perf_counter() - t_pod
                if isinstance(result, ScheduleResult):
                    row = snap.row_of[result.node]
                    placed.add(row, qpi.pod, pod_charge(qpi.pod, ctx.isolated))
                    trial.placements.append((qpi, state, result.node))
                else:
                    trial.failures.append((qpi, result))
        return trial

    def _admit(
        self,
        profile: Profile,
        group: GroupKey,
        members: list[QueuedPodInfo],
        trial: Trial,
        t0: float,
    ) -> None:
        """Commit the trial's placements (assume, Reserve, Permit, binding cycles);
        the members that did not fit fail alone (the gang has its quorum)."""
        ctx = self.ctx
        ctx.metrics.podgroup_attempts.labels("admitted").inc()
        started = min((q.initial_attempt_timestamp or q.timestamp) for q in members)
        ctx.metrics.podgroup_admission.observe(max(0.0, ctx.clock.now() - started))
        ctx.queue.record_attempt(True)
        for qpi, state, node in trial.placements:
            t_pod = time.perf_counter()
            ok = self.pods.commit(profile, state, qpi, node)
            took = trial.seconds[qpi.pod.key] + time.perf_counter() - t_pod
            self.failures.count_attempt(profile, "scheduled" if ok else "unschedulable", took)
        for qpi, result in trial.failures:
            self.failures.fail(profile, qpi, result)
            self.failures.count_attempt(
                profile, self.failures.outcome(result), trial.seconds[qpi.pod.key]
            )
        log.info(
            "gang %s admitted: %d pods placed in %.3fs",
            group,
            len(trial.placements),
            ctx.clock.now() - t0,
        )

    def _plan_preemption(
        self,
        profile: Profile,
        group: GroupKey,
        members: list[QueuedPodInfo],
        min_member: int,
        placed_before: int,
        within: NodeSubset | None,
    ) -> PreemptionPlan | None:
        """A gang that cannot be placed preempts as one unit: member by member on
        the snapshot (`within` those nodes), each member's victims (a victim in a
        lower gang taken with its whole gang) taken off before the next member is
        searched. A plan only if minMember then fit together; nothing is evicted
        here. None also for a gang that may not preempt, or whose victims of its
        last preemption are still terminating (it waits for them)."""
        ctx = self.ctx
        plugin = profile.group_preemption()
        if plugin is None:
            return None
        if any(q.pod.preemption_policy == PREEMPT_NEVER for q in members):
            return None
        waiting = self.gang_victims.get(group, ())
        if any(ctx.cache.pod(k) is not None for k in waiting):
            return None
        ctx.metrics.preemption_attempts.inc()
        snap = ctx.snapshot
        # The gang's priority (its lowest member's): no victim may reach it.
        priority = min(q.pod.priority for q in members)
        plan = PreemptionPlan(plugin)
        with snap.overlay() as ov:
            for qpi in members:
                if placed_before + len(plan.chosen) >= min_member:
                    break
                state = CycleState()
                result = self.pods.schedule_pod(
                    profile, state, qpi.pod, post_filter=False, within=within
                )
                cand: PreemptionCandidate | None = None
                if isinstance(result, ScheduleResult):
                    node = result.node
                elif isinstance(result, FitError):
                    found = profile.run_member_preemption(
                        plugin, state, qpi.pod, priority, plan.victims(), within
                    )
                    if found is None or isinstance(found, Status):
                        return None
                    for v in found.victims:
                        vrow = snap.row_of.get(ctx.cache.pod_node(v.key) or "")
                        if vrow is not None and v.key in snap.pods[vrow]:
                            ov.remove(vrow, v, pod_charge(v, ctx.isolated))
                    node, cand = found.node, found
                else:
                    return None
                ov.add(snap.row_of[node], qpi.pod, pod_charge(qpi.pod, ctx.isolated))
                plan.chosen.append((qpi, node, cand))
        if placed_before + len(plan.chosen) < min_member:
            return None
        return plan

    def _preempt(self, profile: Profile, group: GroupKey, plan: PreemptionPlan) -> bool:
        """Carry a plan out: each member's victims evicted, the members nominated
        to their nodes; the gang then waits for its victims to go."""
        ctx = self.ctx
        gang = str(group)
        victims: set[PodKey] = set()
        groups: set[GroupKey] = set()
        for qpi, node, cand in plan.chosen:
            if cand is not None and cand.victims:
                profile.run_prepare_member(plan.plugin, qpi.pod, cand, gang)
                victims |= {v.key for v in cand.victims}
                groups |= {v.group_key for v in cand.victims if v.group_key is not None}
            ctx.nominate(qpi.pod, node)
        if not victims:
            return False
        self.gang_victims[group] = victims
        for g in groups:
            pg = ctx.cache.pod_group(g)
            if pg is not None:
                ref = object_ref(pg.raw, "PodGroup", pg.namespace, pg.name)
                ctx.spawn(self._record_group_preempted(ref, gang))
        log.info("gang %s preempted %d pods: %s", gang, len(victims), sorted(victims))
        return True

    async def _record_group_preempted(self, ref: ObjectRef, gang: str) -> None:
        try:
            await self.ctx.client.record_event(
                ref, "Normal", "Preempted", f"Preempted by gang {gang}", "Preempting"
            )
        except Exception as e:
            log.warning("could not record the Preempted event of %s: %s", ref.name, e)
