"""DefaultPreemption: the PostFilter plugin that makes room for a pod that does
not fit by evicting lower-priority pods (kube-scheduler's
plugins/defaultpreemption/default_preemption.go; facts carried over, code not).

The plugin is thin: the engine (candidates, dry runs, the choice of one, the
evictions, gangs) is troupe/framework/preemption's Evaluator, and this plugin
implements its Interface, kube-scheduler's policy:

1. Eligibility: `preemptionPolicy: Never` (the pod's or its PriorityClass's)
   never preempts; a pod whose nominated node still holds lower-priority pods
   terminating by preemption waits for them instead of preempting again.
2. How many candidates: `max(minCandidateNodesAbsolute,
   minCandidateNodesPercentage % of the potential nodes)`, searched from a
   random offset.
3. Victims on a node: every pod of strictly lower priority as a victim (its
   PodGroup's priority when the group sets one), within the gang rules every
   preemption keeps (a PodGroup whose disruptionMode is All goes whole, its
   members on other nodes too), then as many units reprieved as still let the
   pod fit (the Evaluator's dry runs).
4. Ranking: kube-scheduler's pickOneNodeForPreemption (no score functions of
   its own).

It serves gang preemption too (GroupPreemptionPlugin), through the same
Evaluator and the same victim selection.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

from troupe.api.types import PREEMPT_NEVER, PREEMPTION_BY_SCHEDULER, NodeName, Pod, PodKey
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import ClusterEventWithHint
from troupe.framework.filtering import FilterRunner
from troupe.framework.fit import NodeSubset
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    EnqueueExtensions,
    GroupPreemptionPlugin,
    IntpArray,
    NodeToStatus,
    PluginArgsError,
    PostFilterPlugin,
    PreemptionCandidate,
)
from troupe.framework.preemption import (
    Candidate,
    DryRun,
    Evaluator,
    Interface,
    ScoreFunc,
    Victims,
    nominated_node,
)
from troupe.framework.status import Code, Status

NAME: Final = "DefaultPreemption"

# Reasons and messages with kube-scheduler's text.
NOT_ELIGIBLE_NEVER: Final = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING: Final = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS: Final = "No preemption victims found for incoming pod"


@dataclass(frozen=True, slots=True)
class DefaultPreemptionArgs:
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


def parse_args(args: Mapping[str, Any]) -> DefaultPreemptionArgs:
    """As kube-scheduler's ValidateDefaultPreemptionArgs."""
    known = {"minCandidateNodesPercentage", "minCandidateNodesAbsolute"}
    for k in args:
        if k not in known:
            raise PluginArgsError(str(k), "unknown field")
    out: dict[str, int] = {}
    for k, default in (("minCandidateNodesPercentage", 10), ("minCandidateNodesAbsolute", 100)):
        v = args.get(k, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise PluginArgsError(k, f"Invalid value: {v!r}: must be an integer")
        out[k] = v
    pct, absolute = out["minCandidateNodesPercentage"], out["minCandidateNodesAbsolute"]
    if not 0 <= pct <= 100:
        raise PluginArgsError(
            "minCandidateNodesPercentage", f"Invalid value: {pct}: not in valid range [0, 100]"
        )
    if absolute < 0:
        raise PluginArgsError(
            "minCandidateNodesAbsolute", f"Invalid value: {absolute}: not in valid range [0, inf)"
        )
    if pct == 0 and absolute == 0:
        raise PluginArgsError(
            "minCandidateNodesAbsolute",
            "Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage",
        )
    return DefaultPreemptionArgs(pct, absolute)


def num_candidates(args: DefaultPreemptionArgs, num_nodes: int) -> int:
    """kube-scheduler's calculateNumCandidates."""
    n = num_nodes * args.min_candidate_nodes_percentage // 100
    return min(max(n, args.min_candidate_nodes_absolute), num_nodes)


def terminating_by_preemption(pod: Pod) -> bool:
    """upstream's podTerminatingByPreemption: being deleted, with a True
    DisruptionTarget condition whose reason is PreemptionByScheduler."""
    return pod.deleting and pod.disruption_reason == PREEMPTION_BY_SCHEDULER


class DefaultPreemption(PostFilterPlugin, GroupPreemptionPlugin, EnqueueExtensions, Interface):
    NAME: Final = NAME

    def __init__(self, handle: Handle, args: DefaultPreemptionArgs) -> None:
        self.handle = handle
        self.args = args
        self.evaluator = Evaluator(NAME, handle, self)

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(handle, parse_args(args))

    # ---- queueing hints ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        """None. kube-scheduler does not count the PostFilter plugin among those
        that rejected the pod (its Diagnosis.UnschedulablePlugins), so no event
        moves the pod on its account; Troupe keeps it among them (its message is
        part of the reason) and registering nothing leaves the choice to the
        plugins that filtered the pod out. A rejector that registers nothing
        would otherwise be moved by every event (every pod we bind coming back
        through the watch included)."""
        return []

    # ---- PostFilter -------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        self.handle.metrics.preemption_attempts.inc()
        nominated, st = self.evaluator.preempt(state, pod, filtered)
        if st.message:
            return nominated, Status(st.code, (f"preemption: {st.message}",), NAME)
        return nominated, st

    # ---- preemption.Interface ---------------------------------------------------------

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """A random offset, and kube-scheduler's calculateNumCandidates."""
        offset = self.handle.rng.randrange(num_nodes) if num_nodes else 0
        return offset, num_candidates(self.args, num_nodes)

    def candidates_to_victims_map(self, candidates: Sequence[Candidate]) -> dict[NodeName, Victims]:
        return {c.node: Victims(c.victims, c.pdb_violations) for c in candidates}

    def pod_eligible_to_preempt_others(
        self, pod: Pod, nominated_node_status: Status | None
    ) -> tuple[bool, str]:
        """kube-scheduler's PodEligibleToPreemptOthers."""
        if pod.preemption_policy == PREEMPT_NEVER:
            return False, NOT_ELIGIBLE_NEVER
        node = nominated_node(self.handle, pod)
        if not node:
            return True, ""
        st = nominated_node_status
        if st is not None and st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return True, ""
        snap = self.handle.snapshot()
        row = snap.row_of.get(node)
        if row is None:
            return True, ""
        victims_of = self.evaluator.victims_of
        units = self.evaluator.units()
        for p in snap.pods[row].values():
            if units.priority(p) < pod.priority and (
                terminating_by_preemption(p) or victims_of.get(p.key) == pod.key
            ):
                return False, NOT_ELIGIBLE_TERMINATING
        return True, ""

    def select_victims_on_node(
        self, state: CycleState, pod: Pod, snap: NodeTable, rows: IntpArray, dry: DryRun
    ) -> list[Candidate]:
        """kube-scheduler's SelectVictimsOnNode for each of `rows`: every pod of
        strictly lower priority as a victim (`Units.priority`) may go; a node
        without one makes no candidate."""
        prio = pod.priority
        victim_priority = dry.units.priority
        for row in rows.tolist():
            lower = [p for p in snap.pods[row].values() if victim_priority(p) < prio]
            if not dry.add(row, lower):
                dry.reject(row, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_VICTIMS,), NAME))
        return dry.run()

    def ordered_score_funcs(
        self, nodes_to_victims: Mapping[NodeName, Victims]
    ) -> list[ScoreFunc] | None:
        return None  # kube-scheduler's default ranking

    # ---- gangs (GroupPreemptionPlugin), served by the Evaluator ---------------------------

    def member_candidate(
        self,
        state: CycleState,
        pod: Pod,
        runner: FilterRunner,
        priority: int,
        taken: Collection[PodKey],
        within: NodeSubset | None = None,
    ) -> Candidate | None:
        return self.evaluator.member_candidate(state, pod, runner, priority, taken, within)

    def prepare_member(self, pod: Pod, candidate: PreemptionCandidate, gang: str) -> None:
        self.evaluator.prepare_member(pod, candidate, gang)
