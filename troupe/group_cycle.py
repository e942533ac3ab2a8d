"""The gang's group cycle: all the queued members of a PodGroup placed together
on the cycle's snapshot, each placement charged before the next is searched;
only if at least minMember fit are they assumed, reserved and permitted
together. Nothing is held otherwise."""

from __future__ import annotations

import logging
import time
from typing import Any

from troupe.api.types import (
    PREEMPT_NEVER,
    GroupKey,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
)
from troupe.events import ObjectRef
from troupe.framework.cycle_state import CycleState
from troupe.framework.interface import (
    QueuedPodInfo,
)
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status
from troupe.plugins.coscheduling.core import min_field, placed_members
from troupe.plugins.default_preemption import (
    Candidate,
    DefaultPreemption,
    num_candidates,
    pick_one,
)
from troupe.schedule_one import FitError, ScheduleResult
from troupe.snapshot import pod_charge
from troupe.state import SchedulerState, object_ref

log = logging.getLogger(__name__)


class GroupCycle(SchedulerState):
    """A gang's atomic group cycle, entered from `schedule_one` for the first
    member of a group that is not admitted yet."""

    @staticmethod
    def _gang_profile(profile: Profile) -> bool:
        return any(name == "Coscheduling" for name, _ in profile.permit)

    def _group_admitted(self, group: GroupKey, min_member: int) -> bool:
        """Whether minMember of the group are already bound or assumed (placed)."""
        return placed_members(self.cache, self.waiting_pods, group) >= min_member

    def _schedule_group(self, profile: Profile, first: QueuedPodInfo, pg: PodGroup) -> None:
        """Place the gang's queued pods together on the snapshot, each placement charged
        before the next is searched; commit them only if minMember fit, else hold nothing.

        The snapshot serves as the scratch copy: placements are charged into it and
        undone before the real assumes, which then reach it through the cache.
        """
        group = first.pod.group_key
        assert group is not None
        min_member = pg.min_member
        t0 = self.clock.now()
        members = [first]
        others = [
            p.key
            for p in self.cache.pods_in_group(group)
            if p.key != first.pod.key and p.key in self.queue
        ]
        taken = self.queue.take(others)
        self._cycle_pods.extend(taken)
        for q in taken:
            if self.cache.pod(q.pod.key) is not None:
                self._dropped_known += 1
                self.queue.done(q.pod.key)
            else:
                members.append(q)
        members.sort(key=profile.sort_key)
        placed_before = placed_members(self.cache, self.waiting_pods, group)
        snap = self.snapshot
        placements: list[tuple[QueuedPodInfo, CycleState, NodeName]] = []
        failures: list[tuple[QueuedPodInfo, FitError | Status]] = []
        charged: list[tuple[int, Pod, Any]] = []
        # Each member's attempt is counted as kube-scheduler counts a pod's: its own
        # search time, the outcome of the group decides the result label.
        seconds: dict[PodKey, float] = {}
        try:
            for qpi in members:
                t_pod = time.perf_counter()
                state = CycleState()
                result = self._schedule_pod(profile, state, qpi.pod, post_filter=False)
                seconds[qpi.pod.key] = time.perf_counter() - t_pod
                if isinstance(result, ScheduleResult):
                    row = snap.row_of[result.node]
                    charge = pod_charge(qpi.pod, self.isolated)
                    snap.charge(row, qpi.pod, charge, +1)
                    charged.append((row, qpi.pod, charge))
                    placements.append((qpi, state, result.node))
                else:
                    failures.append((qpi, result))
        finally:
            for row, pod, charge in reversed(charged):
                snap.charge(row, pod, charge, -1)
        self.group_attempts += 1
        if placed_before + len(placements) >= min_member:
            self.metrics.podgroup_attempts.labels("admitted").inc()
            started = min((q.initial_attempt_timestamp or q.timestamp) for q in members)
            self.metrics.podgroup_admission.observe(max(0.0, self.clock.now() - started))
            self.queue.record_attempt(True)
            for qpi, state, node in placements:
                t_pod = time.perf_counter()
                ok = self._commit(profile, state, qpi, node)
                took = seconds[qpi.pod.key] + time.perf_counter() - t_pod
                self._count_attempt(profile, "scheduled" if ok else "unschedulable", took)
            for qpi, result in failures:
                self._fail(profile, qpi, result)
                self._count_attempt(profile, self._outcome(result), seconds[qpi.pod.key])
            log.info(
                "gang %s admitted: %d pods placed in %.3fs",
                group,
                len(placements),
                self.clock.now() - t0,
            )
            return
        self._preempt_for_group(profile, group, members, min_member, placed_before)
        self.group_failures += 1
        self.metrics.podgroup_attempts.labels("unschedulable").inc()
        why = failures[0][1].message if failures else "not enough member pods are pending"
        message = (
            f'PodGroup "{group}": {placed_before + len(placements)} of {min_field(pg)} '
            f"{min_member} pods fit; {why}"
        )
        plugins: set[str] = {"Coscheduling"}
        for _, result in failures:
            if isinstance(result, FitError):
                plugins |= result.unschedulable_plugins
            elif result.plugin:
                plugins.add(result.plugin)
        errors = {q.pod.key for q, result in failures if self._outcome(result) == "error"}
        for qpi in members:
            self._failed += 1
            self._handle_failure(
                profile, qpi, message, Code.UNSCHEDULABLE, frozenset(plugins), frozenset()
            )
            outcome = "error" if qpi.pod.key in errors else "unschedulable"
            self._count_attempt(profile, outcome, seconds[qpi.pod.key])

    def _preempt_for_group(
        self,
        profile: Profile,
        group: GroupKey,
        members: list[QueuedPodInfo],
        min_member: int,
        placed_before: int,
    ) -> bool:
        """A gang that cannot be placed preempts as one unit: member by member on
        the snapshot, each member's victims (DefaultPreemption's dry run, a victim
        in a lower gang taken with its whole gang) uncharged before the next
        member is searched. Only if minMember then fit together is anything
        evicted; the members are nominated to their nodes. A gang whose victims
        are still terminating waits for them instead of preempting again."""
        plugin = profile.plugin(DefaultPreemption.NAME)
        if not isinstance(plugin, DefaultPreemption):
            return False
        if any(q.pod.preemption_policy == PREEMPT_NEVER for q in members):
            return False
        waiting = self._gang_victims.get(group, ())
        if any(self.cache.pod(k) is not None for k in waiting):
            return False
        self.metrics.preemption_attempts.inc()
        snap = self.snapshot
        gang = str(group)
        # The gang's priority (its lowest member's): no victim may reach it.
        priority = min(q.pod.priority for q in members)
        removed: list[tuple[int, Pod, Any]] = []
        charged: list[tuple[int, Pod, Any]] = []
        chosen: list[tuple[QueuedPodInfo, NodeName, Candidate | None]] = []
        try:
            for qpi in members:
                if placed_before + len(chosen) >= min_member:
                    break
                state = CycleState()
                result = self._schedule_pod(profile, state, qpi.pod, post_filter=False)
                cand: Candidate | None = None
                if isinstance(result, ScheduleResult):
                    node = result.node
                elif isinstance(result, FitError):
                    rows = snap.valid_rows()
                    # as a lone pod's PostFilter: a sample of candidates from a
                    # random offset (minCandidateNodesPercentage/Absolute)
                    want = num_candidates(plugin.args, len(rows))
                    offset = self.rng.randrange(len(rows)) if len(rows) else 0
                    # pods nominated with equal or higher priority keep the room
                    # they wait for, as in a lone pod's PostFilter
                    with self._nominated_charged(qpi.pod):
                        found, _ = plugin.find_candidates(
                            state, qpi.pod, snap, profile, rows, offset, want, whole_gangs=True
                        )
                    # A candidate whose victims' gangs cannot go whole (a member
                    # of the gang's priority or higher) is no candidate.
                    taken = {v.key for _, _, c in chosen if c is not None for v in c.victims}
                    usable = []
                    for c in found:
                        whole = plugin.expand_gangs(c.victims, priority, taken)
                        if whole is not None:
                            c.victims = whole
                            usable.append(c)
                    best = pick_one(usable)
                    if best is None:
                        return False
                    for v in best.victims:
                        vrow = snap.row_of.get(self.cache.pod_node(v.key) or "")
                        if vrow is not None and v.key in snap.pods[vrow]:
                            ch = pod_charge(v, self.isolated)
                            snap.charge(vrow, v, ch, -1)
                            removed.append((vrow, v, ch))
                    node, cand = best.node, best
                else:
                    return False
                row = snap.row_of[node]
                ch = pod_charge(qpi.pod, self.isolated)
                snap.charge(row, qpi.pod, ch, +1)
                charged.append((row, qpi.pod, ch))
                chosen.append((qpi, node, cand))
            if placed_before + len(chosen) < min_member:
                return False
        finally:
            for row, pod, ch in reversed(charged):
                snap.charge(row, pod, ch, -1)
            for row, pod, ch in reversed(removed):
                snap.charge(row, pod, ch, +1)
        victims: set[PodKey] = set()
        groups: set[GroupKey] = set()
        for qpi, node, cand in chosen:
            if cand is not None and cand.victims:
                plugin.prepare(qpi.pod, cand, gang)
                victims |= {v.key for v in cand.victims}
                groups |= {v.group_key for v in cand.victims if v.group_key is not None}
            self._nominate(qpi.pod, node)
        if not victims:
            return False
        self._gang_victims[group] = victims
        for g in groups:
            pg = self.cache.pod_group(g)
            if pg is not None:
                ref = object_ref(pg.raw, "PodGroup", pg.namespace, pg.name)
                self._spawn(self._record_group_preempted(ref, gang))
        log.info("gang %s preempted %d pods: %s", gang, len(victims), sorted(victims))
        return True

    async def _record_group_preempted(self, ref: ObjectRef, gang: str) -> None:
        try:
            await self.client.record_event(
                ref, "Normal", "Preempted", f"Preempted by gang {gang}", "Preempting"
            )
        except Exception as e:
            log.warning("could not record the Preempted event of %s: %s", ref.name, e)
