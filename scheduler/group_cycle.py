"""The gang's group cycle: all the queued members of a PodGroup placed together
on the cycle's snapshot, each placement charged before the next is searched;
only if at least minMember fit are they assumed, reserved and permitted
together. Nothing is held otherwise."""

from __future__ import annotations

import logging
import time
from typing import Any

from scheduler.api.types import (
    GroupKey,
    NodeName,
    Pod,
    PodKey,
)
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import (
    QueuedPodInfo,
)
from scheduler.framework.runtime import Profile
from scheduler.framework.status import Code, Status
from scheduler.plugins.coscheduling.core import placed_members
from scheduler.schedule_one import FitError, ScheduleResult
from scheduler.snapshot import pod_charge
from scheduler.state import SchedulerState

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

    def _schedule_group(self, profile: Profile, first: QueuedPodInfo, min_member: int) -> None:
        """Place the gang's queued pods together on the snapshot, each placement charged
        before the next is searched; commit them only if minMember fit, else hold nothing.

        The snapshot serves as the scratch copy: placements are charged into it and
        undone before the real assumes, which then reach it through the cache.
        """
        group = first.pod.group_key
        assert group is not None
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
        self.group_failures += 1
        self.metrics.podgroup_attempts.labels("unschedulable").inc()
        why = failures[0][1].message if failures else "not enough member pods are pending"
        message = (
            f'PodGroup "{group}": {placed_before + len(placements)} of minMember '
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
