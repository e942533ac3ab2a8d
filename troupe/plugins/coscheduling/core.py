"""PodGroupManager: the gang state behind the Coscheduling plugin.

As scheduler-plugins' coscheduling/core: it answers whether a pod's group
exists and has enough members, whether its minResources can be met, how many
of its members are placed (bound or assumed), and keeps a short deny list of
groups that just failed. The plugin shell forwards every extension point here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from troupe.api.types import GroupKey, Pod, PodGroup
from troupe.core.topology import DEFAULT_DOMAINS_PER_CYCLE
from troupe.framework.handle import ClusterLister, Handle
from troupe.framework.status import SUCCESS, Code, Status
from troupe.framework.waiting_pods import WaitingPods

NAME: Final = "Coscheduling"


@dataclass(frozen=True, slots=True)
class CoschedulingArgs:
    permit_waiting_time_seconds: float = 60.0
    pod_group_backoff_seconds: float = 0.0
    status_coalesce_seconds: float = 1.0
    # Topology-aware placement (troupe.core.topology): domains placed per group cycle
    # and level, and the weights of the placement scores.
    topology_domains_per_cycle: int = DEFAULT_DOMAINS_PER_CYCLE
    placement_pods_count_weight: int = 1
    placement_allocation_weight: int = 1


def min_field(pg: PodGroup) -> str:
    """How the group's API names its quorum, for messages: minMember or minCount."""
    return "minCount" if pg.native else "minMember"


def placed_members(lister: ClusterLister, waiting: WaitingPods, key: GroupKey) -> int:
    """How many of a group's members hold a place: bound, or assumed and not rejected.

    A member rejected at Permit (PostFilter's optimistic rejection, a sibling's
    Unreserve, a timeout) stays assumed until its binding cycle runs and forgets
    it; counting it meanwhile would let a later member pass Permit on a quorum
    that no longer exists and bind below minMember (issue #14).
    """
    n = 0
    for p in lister.pods_in_group(key):
        if lister.pod(p.key) is None:
            continue
        if lister.is_assumed(p.key):
            wp = waiting.get(p.key)
            if wp is not None and wp.rejected:
                continue
        n += 1
    return n


class PodGroupManager:
    def __init__(self, handle: Handle, args: CoschedulingArgs) -> None:
        self.handle = handle
        self.args = args
        self._denied_until: dict[GroupKey, float] = {}
        self.schedule_start: dict[GroupKey, float] = {}

    # ---- looking things up -------------------------------------------------------

    def group(self, pod: Pod) -> tuple[GroupKey | None, PodGroup | None]:
        key = pod.group_key
        if key is None:
            return None, None
        return key, self.handle.lister.pod_group(key)

    def members(self, key: GroupKey) -> list[Pod]:
        return [p for p in self.handle.lister.pods_in_group(key) if not p.terminal or p.node_name]

    def placed(self, key: GroupKey) -> int:
        """Members bound or assumed (kube's CalculateAssignedPods, assumed included)."""
        return placed_members(self.handle.lister, self.handle.waiting_pods, key)

    def waiting(self, key: GroupKey) -> Iterable[object]:
        return self.handle.waiting_pods.in_group(key)

    def timeout(self, pg: PodGroup) -> float:
        if pg.schedule_timeout_seconds:
            return float(pg.schedule_timeout_seconds)
        return self.args.permit_waiting_time_seconds

    # ---- the checks -----------------------------------------------------------------

    def check_group(self, pod: Pod) -> Status:
        """A missing group, or one with fewer schedulable (ungated) pods than
        minMember, keeps the pod waiting; so does a pod that names a group in
        both APIs."""
        conflict = pod.group_conflict
        if conflict is not None:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (conflict,), NAME)
        key, pg = self.group(pod)
        if key is None:
            return SUCCESS
        if pg is None:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (self.missing(key),), NAME)
        # as scheduler-plugins core.go PreFilter: members held back by schedulingGates
        # cannot be scheduled, so they do not count towards minMember
        if sum(1 for p in self.members(key) if not p.scheduling_gates) < pg.min_member:
            # No member count in the text: it is shown on every waiting member
            # (once per change), and a count would change with each arrival.
            return Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                (f'PodGroup "{key}" has fewer pods than {min_field(pg)} {pg.min_member}',),
                NAME,
            )
        return SUCCESS

    def missing(self, key: GroupKey) -> str:
        """Why a pod's group is not there: invalid (naming the field) or not found."""
        problem = self.handle.lister.invalid_pod_group(key)
        if problem is not None:
            return f'PodGroup "{key}" is invalid: {problem}'
        return f'PodGroup "{key}" not found'

    def check_denied(self, key: GroupKey) -> Status:
        until = self._denied_until.get(key)
        if until is not None and self.handle.clock.now() < until:
            return Status(Code.UNSCHEDULABLE, (f'podGroup "{key}" failed recently',), NAME)
        self._denied_until.pop(key, None)
        return SUCCESS

    def check_min_resources(self, key: GroupKey, pg: PodGroup) -> Status:
        """minResources against the cluster's free capacity, counting back what the
        group's own placed members hold (scheduler-plugins' CheckClusterResource)."""
        if not pg.min_resources:
            return SUCCESS
        nodes = self.handle.snapshot()
        rows = nodes.valid_rows()
        lister = self.handle.lister
        own: dict[str, int] = {}
        for p in lister.pods_in_group(key):
            if lister.pod(p.key) is not None:
                for r, v in p.requests.items():
                    own[r] = own.get(r, 0) + v
        for resource, want in pg.min_resources.items():
            c = nodes.col.get(resource)
            free = 0
            if c is not None:
                # Summed as Python ints: many large nodes would overflow an int64 sum.
                free = sum((nodes.allocatable[rows, c] - nodes.requested[rows, c]).tolist())
            if free + own.get(resource, 0) < want:
                return Status(
                    Code.UNSCHEDULABLE,
                    (f'PodGroup "{key}" minResources cannot be met: insufficient {resource}',),
                    NAME,
                )
        return SUCCESS

    # ---- rejecting -------------------------------------------------------------------

    def deny(self, key: GroupKey) -> None:
        if self.args.pod_group_backoff_seconds > 0:
            self._denied_until[key] = self.handle.clock.now() + self.args.pod_group_backoff_seconds

    def reject_waiting(self, key: GroupKey, message: str) -> int:
        n = 0
        for wp in self.handle.waiting_pods.in_group(key):
            wp.reject(NAME, message)
            n += 1
        return n

    def allow_waiting(self, key: GroupKey) -> None:
        for wp in self.handle.waiting_pods.in_group(key):
            wp.allow(NAME)

    def within_ten_percent(self, key: GroupKey, pg: PodGroup) -> bool:
        """scheduler-plugins: if at most 10% of minMember is missing, keep trying."""
        missing = pg.min_member - self.placed(key)
        return missing / pg.min_member <= 0.1 or math.isclose(missing / pg.min_member, 0.1)
