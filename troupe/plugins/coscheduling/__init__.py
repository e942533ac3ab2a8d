"""Coscheduling: gang scheduling of PodGroups (scheduler-plugins' coscheduling).

A thin shell: every extension point forwards to `PodGroupManager` (core.py),
which owns the gang state; PodGroup status is kept by `PodGroupStatusTracker`
(status.py). It serves Troupe's atomic group cycle (troupe.core.group_cycle)
as its GroupSchedulingPlugin: the core asks it which group a pod starts, the
group's minMember and how many members are placed, and a gang's pods are then
placed together and only admitted when minMember fit; Permit-based waiting
remains for members that arrive later, and is the whole mechanism when the
group cycle is switched off (scheduler-plugins' behaviour).

Groups come from troupe-plugins' PodGroup CRD or from Kubernetes' own
PodGroup API (scheduling.k8s.io); both reach here as one `PodGroup`. A native
group with the `basic` policy (`gang` False) only has to exist: its pods are
scheduled one by one, nobody waits at Permit for its siblings and a failure
rejects no one else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Self

from troupe.api.types import (
    MAX_DURATION_SECONDS,
    NATIVE_POD_GROUP_API,
    CompositePodGroup,
    GroupKey,
    NodeName,
    Pod,
    PodGroup,
    describe_int,
)
from troupe.core.snapshot import NodeTable
from troupe.core.topology import DEFAULT_DOMAINS_PER_CYCLE, PlacementWeights
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.group_tree import GroupTree
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    EnqueueExtensions,
    GroupSchedulingPlugin,
    NodeToStatus,
    PermitPlugin,
    PluginArgsError,
    PostBindPlugin,
    PostFilterPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status
from troupe.plugins.coscheduling.composite import Composites, CompositeStatusWriter
from troupe.plugins.coscheduling.core import NAME, CoschedulingArgs, PodGroupManager, min_field
from troupe.plugins.coscheduling.status import PodGroupStatusTracker, native_phase

__all__ = ["Coscheduling", "CoschedulingArgs", "PodGroupManager"]


def _seconds(args: Mapping[str, Any], key: str, default: float, minimum: float) -> float:
    v = args.get(key, default)
    shown = describe_int(v) if isinstance(v, int) else repr(v)[:40]
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < minimum:
        raise PluginArgsError(key, f"must be a number >= {minimum:g}, got {shown}")
    if v > MAX_DURATION_SECONDS:
        raise PluginArgsError(key, f"must be at most {MAX_DURATION_SECONDS} seconds, got {shown}")
    return float(v)


def _count(args: Mapping[str, Any], key: str, default: int, minimum: int, maximum: int) -> int:
    v = args.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= maximum:
        shown = describe_int(v) if isinstance(v, int) else repr(v)[:40]
        raise PluginArgsError(key, f"must be an integer from {minimum} to {maximum}, got {shown}")
    return v


class Coscheduling(
    QueueSortPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PostFilterPlugin,
    PermitPlugin,
    ReservePlugin,
    PostBindPlugin,
    EnqueueExtensions,
    GroupSchedulingPlugin,
):
    NAME: Final = NAME
    # Its PreFilter state depends on the pod and the node only (see
    # troupe.framework.interface.pre_filter_is_node_local).
    PRE_FILTER_NODE_LOCAL: Final = True

    def __init__(self, handle: Handle, args: CoschedulingArgs) -> None:
        self.handle = handle
        self.args = args
        self.manager = PodGroupManager(handle, args)
        # CompositePodGroups and their conditions, with the CompositePodGroup gate on.
        self.composites: Composites | None = None
        self.composite_status: CompositeStatusWriter | None = None
        if handle.features.composite_pod_group:
            self.composites = Composites(
                handle.lister, self.manager.placed, handle.priority_classes
            )
            self.composite_status = CompositeStatusWriter(
                handle, self.composites, args.status_coalesce_seconds
            )
        self.status = PodGroupStatusTracker(
            handle, args.status_coalesce_seconds, self.manager.schedule_start
        )

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            if k not in (
                "permitWaitingTimeSeconds",
                "podGroupBackoffSeconds",
                "statusCoalesceSeconds",
                "topologyDomainsPerCycle",
                "placementPodsCountWeight",
                "placementAllocationWeight",
            ):
                raise PluginArgsError(str(k), "unknown field")
        return cls(
            handle,
            CoschedulingArgs(
                permit_waiting_time_seconds=_seconds(args, "permitWaitingTimeSeconds", 60, 1),
                pod_group_backoff_seconds=_seconds(args, "podGroupBackoffSeconds", 0, 0),
                status_coalesce_seconds=_seconds(args, "statusCoalesceSeconds", 1, 0),
                topology_domains_per_cycle=_count(
                    args, "topologyDomainsPerCycle", DEFAULT_DOMAINS_PER_CYCLE, 1, 100_000
                ),
                placement_pods_count_weight=_count(args, "placementPodsCountWeight", 1, 0, 100),
                placement_allocation_weight=_count(args, "placementAllocationWeight", 1, 0, 100),
            ),
        )

    # ---- QueueSort: priority, then the group's creation time, then the group ------

    def sort_key(self, p: QueuedPodInfo) -> tuple[int, float, str, int]:
        key, pg = self.manager.group(p.pod)
        if pg is not None and pg.creation_timestamp:
            created = pg.creation_timestamp
        elif p.pod.creation_timestamp:
            created = p.pod.creation_timestamp
        else:
            created = p.initial_attempt_timestamp or p.timestamp
        return (-p.pod.priority, created, key or p.pod.key, p.seq)

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)

    # ---- PreEnqueue / PreFilter -----------------------------------------------------

    def _mark(self, key: GroupKey) -> None:
        """The group's status, and its composites', may change."""
        self.status.mark(key)
        if self.composite_status is not None:
            self.composite_status.mark_above(key)

    def pre_enqueue(self, pod: Pod) -> Status:
        st = self.manager.check_group(pod)
        if st.is_success and self.composites is not None:
            _, pg = self.manager.group(pod)
            problem = self.composites.problem(pg) if pg is not None and pg.parent else None
            if problem is not None:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (problem,), NAME)
        return st

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        key, pg = self.manager.group(pod)
        if key is None:
            return None, SKIP
        st = self.manager.check_group(pod)
        if not st.is_success:
            return None, st
        assert pg is not None
        self.manager.schedule_start.setdefault(key, self.handle.clock.now())
        self._mark(key)  # an attempt: its outcome goes into a native group's status
        for check in (self.manager.check_denied(key), self.manager.check_min_resources(key, pg)):
            if not check.is_success:
                return None, check
        return None, SKIP  # nothing for Filter to do

    # ---- PostFilter -------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        key, pg = self.manager.group(pod)
        if key is None or pg is None:
            return None, Status(Code.UNSCHEDULABLE, (), NAME)
        if not pg.gang or self.manager.placed(key) >= pg.min_member:
            return None, Status(Code.UNSCHEDULABLE, (), NAME)
        if self.manager.within_ten_percent(key, pg):
            return None, Status(Code.UNSCHEDULABLE, (), NAME)
        self.manager.reject_waiting(key, "optimistic rejection in PostFilter")
        self.manager.deny(key)
        return None, Status(
            Code.UNSCHEDULABLE,
            (
                f'PodGroup "{key}" gets rejected due to Pod "{pod.name}" is unschedulable even '
                "after PostFilter",
            ),
            NAME,
        )

    # ---- Reserve / Permit -------------------------------------------------------------

    def reserve(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        key, pg = self.manager.group(pod)
        if key is None:
            return
        if pg is None or pg.gang:
            self.manager.reject_waiting(key, f"rejected due to failure of group member {pod.key}")
            self.manager.deny(key)
        self._mark(key)

    def permit(self, state: CycleState, pod: Pod, node: NodeName) -> tuple[Status, float]:
        key, pg = self.manager.group(pod)
        if key is None:
            return SUCCESS, 0.0
        if pg is None:
            return Status(Code.UNSCHEDULABLE, (self.manager.missing(key),), NAME), 0.0
        self._mark(key)
        if self.manager.placed(key) >= pg.min_member:
            self.manager.allow_waiting(key)
            return SUCCESS, 0.0
        return Status(Code.WAIT, (), NAME), self.manager.timeout(pg)

    async def post_bind(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        if pod.group_key is not None:
            self._mark(pod.group_key)

    # ---- the group cycle (GroupSchedulingPlugin) -------------------------------------

    def group_to_schedule(self, pod: Pod) -> PodGroup | None:
        key, pg = self.manager.group(pod)
        if key is None or pg is None or not pg.gang:
            return None
        if self.manager.placed(key) >= pg.min_member:
            return None  # admitted: minMember already bound or assumed
        return pg

    def tree_to_schedule(self, pod: Pod) -> GroupTree | None:
        """With the CompositePodGroup gate on, for a pod whose PodGroup has a
        parent: the topmost gang composite above it while that is not satisfied;
        else its own gang PodGroup while that is not, as a tree of one group (so
        that the composites above keep it in their domains)."""
        c = self.composites
        if c is None:
            return None
        _, pg = self.manager.group(pod)
        if pg is None or not pg.parent:
            return None
        chain, problem = c.chain(pg)
        if problem is not None:
            return None  # PreEnqueue keeps its pods waiting, saying why
        root = c.gang_root(chain)
        if root is not None:
            tree = c.tree(root)
            if not tree.satisfied:
                return tree
        if pg.gang and self.manager.placed(pg.key) < pg.min_member:
            return c.leaf(pg)
        return None

    def enclosing_trees(self, pod: Pod) -> Sequence[GroupTree]:
        c = self.composites
        if c is None:
            return ()
        _, pg = self.manager.group(pod)
        if pg is None or not pg.parent:
            return ()
        chain, _ = c.chain(pg)
        return [c.tree(x) for x in chain if x.topology_key]

    def min_count(self, pg: PodGroup) -> int:
        return pg.min_member

    def min_count_name(self, pg: PodGroup) -> str:
        return min_field(pg)

    def placed_members(self, group: GroupKey) -> int:
        return self.manager.placed(group)

    def domains_per_cycle(self) -> int:
        return self.args.topology_domains_per_cycle

    def placement_weights(self) -> PlacementWeights:
        return PlacementWeights(
            self.args.placement_pods_count_weight, self.args.placement_allocation_weight
        )

    def group_phase(self, api_version: str, status: Mapping[str, Any]) -> str:
        """scheduler-plugins' phase for its PodGroups (status.phase); for
        Kubernetes' own, which have none, the reason of the scheduled condition."""
        if api_version.partition("/")[0] == NATIVE_POD_GROUP_API:
            return native_phase(status)
        return str(status.get("phase") or "Pending")

    # ---- queueing hints -----------------------------------------------------------------

    def _same_tree(self, pod: Pod, other: GroupKey) -> bool:
        """Whether `other` is a group of the tree of groups `pod`'s group is in
        (a sibling's pods may complete the tree's gang)."""
        c = self.composites
        if c is None or pod.group_key is None:
            return False
        a, b = self.handle.lister.pod_group(pod.group_key), self.handle.lister.pod_group(other)
        if a is None or b is None or not a.parent or not b.parent or a.namespace != b.namespace:
            return False
        top_a, top_b = c.chain(a)[0], c.chain(b)[0]
        return bool(top_a) and bool(top_b) and top_a[-1].key == top_b[-1].key

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def same_group(pod: Pod, old: Any, new: Any) -> QueueingHint:
            obj = new if new is not None else old
            if (
                isinstance(obj, Pod)
                and obj.group_key is not None
                and (obj.group_key == pod.group_key or self._same_tree(pod, obj.group_key))
            ):
                return QueueingHint.QUEUE
            if isinstance(obj, PodGroup) and (
                obj.key == pod.group_key or self._same_tree(pod, obj.key)
            ):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP

        def same_namespace_tree(pod: Pod, old: Any, new: Any) -> QueueingHint:
            obj = new if new is not None else old
            _, pg = self.manager.group(pod)
            if (
                isinstance(obj, CompositePodGroup)
                and pg is not None
                and pg.parent
                and pg.namespace == obj.namespace
            ):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP

        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD_GROUP, ActionType.ALL), same_group),
            ClusterEventWithHint(
                ClusterEvent(EventResource.COMPOSITE_POD_GROUP, ActionType.ALL),
                same_namespace_tree,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD | ActionType.UPDATE),
                same_group,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
                )
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE,
                    ActionType.ADD
                    | ActionType.UPDATE_NODE_ALLOCATABLE
                    | ActionType.UPDATE_NODE_LABEL
                    | ActionType.UPDATE_NODE_TAINT,
                )
            ),
        ]
