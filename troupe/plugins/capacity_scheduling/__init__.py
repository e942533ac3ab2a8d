"""CapacityScheduling: elastic quotas per namespace (scheduler-plugins'
pkg/capacityscheduling; facts carried over, code not).

A namespace's ElasticQuota guarantees it `min` and lets it borrow up to `max`
what other quotas leave unused. A thin shell: the live quotas are kept by
`QuotaManager` (manager.py), the shared quota ledger (`troupe.quota.ledger`,
which counts use, over `ElasticQuotaInfos` of `troupe.quota.info`) with this
plugin's reclaim counts and statistics,
`status.used` is written by `ElasticQuotaStatusWriter` (status.py), and
PostFilter is the preemption engine (troupe.framework.preemption) with this
plugin's victim selection (`Preemptor`).

- PreFilter: a pod of a namespace with a quota is refused (Unschedulable, so
  PostFilter may reclaim) when its quota's used + the requests of the pods
  nominated in that quota at the pod's priority or above + its own request
  would exceed `max`, or when the total used of all quotas + the nominated
  pods that count + its request would exceed the sum of every `min`. A
  namespace without a quota is not limited. Nothing for Filter to do (Skip).
- Reserve/Unreserve: the pod counts against its quota from Reserve.
- Gangs (beyond scheduler-plugins, where a gang's first members take quota and
  wait at Permit while the rest are refused): in the group trial each member
  placed counts against its quota before the next is searched (`charge`, a
  TrialChargePlugin), so a gang is admitted only if its quorum fits its quota
  together, and the refused gang's reason is the quota's; nothing stays
  charged after the trial. A gang's preemption plan does the same, and the
  victims it takes for one member stop counting (`release`) before the next
  member is searched. Victims' gangs go whole (the preemption engine's gang
  rules), whatever their priority when the preemptor reclaims its min
  (`Preemptor.reclaims`).
- Devices (beyond scheduler-plugins): the devices of a pod's ResourceClaims
  count against its namespace's quota under their DeviceClass's extended
  resource name (`spec.extendedResourceName`, else
  `deviceclass.resource.kubernetes.io/<class>`), as a request of that name
  would: once per claim, however many of the namespace's pods share it; the
  claim's request counts before allocation, its allocated devices after
  (`troupe.dra.claims.device_amounts`). A pod's request in every check is its
  own plus the devices of its claims not counted yet; so is a nominated pod's
  in PreFilter's sums (a claim the pods share counted once).
- PostFilter: a pod whose quota, with it, stays within its min reclaims from
  quotas over their min, whatever the victims' priorities; a pod over its min
  preempts only lower-priority pods of its own quota; a pod without a quota
  preempts lower-priority pods without a quota, as DefaultPreemption. Each
  node's dry run also checks the quota with its victims out (upstream's
  SelectVictimsOnNode after RemovePod): `Preemptor.victims_check`. Every
  potential node is a candidate (upstream's offset 0, all nodes); PDBs and
  the gang rules as every preemption.

Upstream's PreFilter extensions (AddPod/RemovePod on the cycle's quota
snapshot) are the dry run's check here: Troupe's dry runs take victims off
the snapshot and run PreFilter again for plugins whose state is not
node-local. Inside its own preemption this plugin's PreFilter does not judge
the quota again (the check does, with the victims out), so a PreFilter run
again there never refuses what the dry run is freeing.

Configure it as scheduler-plugins documents: enabled at multiPoint (its
PreFilter then runs after the others), postFilter enabled with every other
postFilter plugin disabled.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

from troupe.api.elasticquota import ElasticQuota
from troupe.api.types import PREEMPT_NEVER, NodeName, Pod, PodKey, Resources
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
)
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
    PreFilterPlugin,
    PreFilterResult,
    ReservePlugin,
    TrialChargePlugin,
)
from troupe.framework.preemption import (
    Candidate,
    DryRun,
    Evaluator,
    Interface,
    ScoreFunc,
    Victims,
    VictimsCheck,
    nominated_node,
    start_time,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status
from troupe.plugins.capacity_scheduling.manager import QuotaManager
from troupe.plugins.capacity_scheduling.status import ElasticQuotaStatusWriter
from troupe.quota.info import (
    LOWER_BOUND_OF_MIN,
    UPPER_BOUND_OF_MAX,
    ElasticQuotaInfo,
    ElasticQuotaInfos,
    add_into,
    exceeded,
    over,
)

__all__ = [
    "NAME",
    "CapacityScheduling",
    "ElasticQuotaInfo",
    "ElasticQuotaInfos",
    "ElasticQuotaSnapshotState",
    "PreFilterState",
    "Preemptor",
]

NAME: Final = "CapacityScheduling"
PRE_FILTER_STATE_KEY: Final = "PreFilter" + NAME
ELASTIC_QUOTA_SNAPSHOT_KEY: Final = "ElasticQuotaSnapshot"

# Reasons and messages with scheduler-plugins' text.
NOT_ELIGIBLE_NEVER: Final = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING: Final = "not eligible due to a terminating pod on the nominated node."
GLOBAL_QUOTA_MAX_EXCEEDED: Final = "global quota max exceeded"


def over_max_message(pod: Pod, info: ElasticQuotaInfo, request: Mapping[str, int]) -> str:
    """Upstream's text, and which of cpu, memory and ephemeral-storage are
    limited to 0 only because a non-empty spec.max leaves them out."""
    msg = (
        f"Pod {pod.namespace}/{pod.name} is rejected in PreFilter because ElasticQuota "
        f"{info.namespace} is more than Max"
    )
    left = info.left_out_of_max(exceeded(request, info.used, info.max, UPPER_BOUND_OF_MAX))
    if left:
        msg += f" ({', '.join(left)}: not in its spec.max, so limited to 0)"
    return msg


def over_min_message(pod: Pod) -> str:
    return (
        f"Pod {pod.namespace}/{pod.name} is rejected in PreFilter because total ElasticQuota "
        "used is more than min"
    )


def no_victims_message(pod: Pod) -> str:
    """Upstream's text without the node's name ("on node n7"): nodes that fail
    alike are then counted as one reason, not listed one by one (a message of
    thousands of reasons on a large cluster)."""
    return f"No victims found for preemptor pod {pod.name}"


@dataclass(slots=True)
class PreFilterState:
    """What PreFilter computed for PostFilter and Reserve (upstream's PreFilterState)."""

    pod_req: Mapping[str, int]
    # The pod's request plus those of the pods nominated in its quota at its
    # priority or above.
    nominated_pods_req_in_eq_with_pod_req: dict[str, int]
    # That, plus the pods nominated in other quotas that are within their min.
    nominated_pods_req_with_pod_req: dict[str, int]


@dataclass(slots=True)
class ElasticQuotaSnapshotState:
    """The quotas as the cycle saw them at PreFilter."""

    elastic_quota_infos: ElasticQuotaInfos
    _totals: tuple[dict[str, int], dict[str, int]] | None = None
    # The devices of the claims that pods alone use, by namespace: what they
    # free when they go (None: no claim is counted).
    devices_freed: Callable[[Sequence[Pod]], Mapping[str, Resources]] | None = None

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """The sums of every quota's used and min, once per cycle (read only)."""
        if self._totals is None:
            self._totals = self.elastic_quota_infos.totals()
        return self._totals

    def remove_pods(
        self, namespace: str, pods: Sequence[Pod], total_used: Mapping[str, int]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Upstream's RemovePod of each of `pods` applied to a copy: the used of
        `namespace`'s quota and the total used of all quotas (`total_used`
        before) without those of `pods` that count against a quota."""
        infos = self.elastic_quota_infos
        own = infos.get(namespace)
        own_used = dict(own.used) if own is not None else {}
        total = dict(total_used)
        for p in pods:
            info = infos.get(p.namespace)
            if info is None or p.key not in info.pods:
                continue
            add_into(total, p.requests, -1)
            if info is own:
                add_into(own_used, p.requests, -1)
        if self.devices_freed is not None:
            for ns, amounts in self.devices_freed(pods).items():
                info = infos.get(ns)
                if info is None:
                    continue
                add_into(total, amounts, -1)
                if info is own:
                    add_into(own_used, amounts, -1)
        return own_used, total


def pre_filter_state(state: CycleState) -> PreFilterState:
    return state.read(PRE_FILTER_STATE_KEY, PreFilterState)


def snapshot_state(state: CycleState) -> ElasticQuotaSnapshotState:
    return state.read(ELASTIC_QUOTA_SNAPSHOT_KEY, ElasticQuotaSnapshotState)


class Preemptor(Interface):
    """This plugin's side of the preemption engine (upstream's preemptor): the
    cycle state of the attempt is set by the plugin before each one."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.state = CycleState()
        self.evaluator: Evaluator | None = None

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        return 0, num_nodes

    def candidates_to_victims_map(self, candidates: Sequence[Candidate]) -> dict[NodeName, Victims]:
        return {c.node: Victims(c.victims, c.pdb_violations) for c in candidates}

    def ordered_score_funcs(
        self, nodes_to_victims: Mapping[NodeName, Victims]
    ) -> list[ScoreFunc] | None:
        return None

    def pod_eligible_to_preempt_others(
        self, pod: Pod, nominated_node_status: Status | None
    ) -> tuple[bool, str]:
        """Upstream's PodEligibleToPreemptOthers: not while a pod it may evict
        terminates on its nominated node (a pod chosen by an earlier
        preemption and not deleted yet counts as terminating)."""
        if pod.preemption_policy == PREEMPT_NEVER:
            return False, NOT_ELIGIBLE_NEVER
        pfs = pre_filter_state(self.state)
        node = nominated_node(self.handle, pod)
        if not node:
            return True, ""
        st = nominated_node_status
        if st is not None and st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return True, ""
        infos = snapshot_state(self.state).elastic_quota_infos
        snap = self.handle.snapshot()
        row = snap.row_of.get(node)
        if row is None:
            return True, ""
        victims_of = self.evaluator.victims_of if self.evaluator is not None else {}
        prio = pod.priority
        own = infos.get(pod.namespace)
        for p in snap.pods[row].values():
            if not (p.deleting or victims_of.get(p.key) == pod.key):
                continue
            info = infos.get(p.namespace)
            if own is not None:
                if info is None:
                    continue
                if p.namespace == pod.namespace and p.priority < prio:
                    return False, NOT_ELIGIBLE_TERMINATING
                if (
                    p.namespace != pod.namespace
                    and not own.used_over_min_with(pfs.nominated_pods_req_in_eq_with_pod_req)
                    and info.used_over_min()
                ):
                    return False, NOT_ELIGIBLE_TERMINATING
            elif info is None and p.priority < prio:
                return False, NOT_ELIGIBLE_TERMINATING
        return True, ""

    def select_victims_on_node(
        self, state: CycleState, pod: Pod, snap: NodeTable, rows: IntpArray, dry: DryRun
    ) -> list[Candidate]:
        """Upstream's SelectVictimsOnNode for each of `rows`: which pods may go
        (see the module docstring); a quota over its min stops giving victims on
        a node once the victims taken there bring it down to its min."""
        infos = snapshot_state(state).elastic_quota_infos
        pfs = pre_filter_state(state)
        own = infos.get(pod.namespace)
        prio = pod.priority
        over_min = own is not None and own.used_over_min_with(
            pfs.nominated_pods_req_in_eq_with_pod_req
        )
        for row in rows.tolist():
            # least important first, as upstream walks the node's pods
            pods = sorted(snap.pods[row].values(), key=_least_important_first)
            victims: list[Pod] = []
            if own is None:
                victims = [p for p in pods if p.namespace not in infos and p.priority < prio]
            elif over_min:
                victims = [p for p in pods if p.namespace == pod.namespace and p.priority < prio]
            else:
                left: dict[str, dict[str, int]] = {}
                for p in pods:
                    info = infos.get(p.namespace)
                    if p.namespace == pod.namespace or info is None:
                        continue
                    used = left.get(p.namespace)
                    if used is None:
                        used = left[p.namespace] = dict(info.used)
                    if over(used, {}, info.min, LOWER_BOUND_OF_MIN):
                        victims.append(p)
                        if p.key in info.pods:
                            add_into(used, p.requests, -1)
            if not dry.add(row, victims):
                dry.reject(
                    row,
                    Status(
                        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                        (no_victims_message(pod),),
                        NAME,
                    ),
                )
        return dry.run()

    def reclaims(self, state: CycleState, pod: Pod) -> Callable[[Pod], bool] | None:
        """A pod whose quota, with it, stays within its min reclaims from quotas
        over their min whatever the priorities: the pods of those quotas, and so
        (the engine's gang rules) their gangs whole."""
        infos = snapshot_state(state).elastic_quota_infos
        own = infos.get(pod.namespace)
        if own is None:
            return None
        pfs = pre_filter_state(state)
        if own.used_over_min_with(pfs.nominated_pods_req_in_eq_with_pod_req):
            return None
        over_min = {
            ns for ns, info in infos.items() if ns != pod.namespace and info.used_over_min()
        }
        if not over_min:
            return None

        def outranks(victim: Pod) -> bool:
            return victim.namespace in over_min

        return outranks

    def victims_check(self, state: CycleState, pod: Pod) -> VictimsCheck | None:
        """The quota with a node's victims out: the pod's quota within its max
        and the total within the sum of min, counting the nominated pods as
        PreFilter did (upstream checks podReq alone before reprieving, and the
        nominated pods while reprieving; Troupe counts them both times)."""
        snapshot = snapshot_state(state)
        own = snapshot.elastic_quota_infos.get(pod.namespace)
        if own is None:
            return None
        pfs = pre_filter_state(state)
        in_eq = pfs.nominated_pods_req_in_eq_with_pod_req
        with_all = pfs.nominated_pods_req_with_pod_req
        total_used, total_min = snapshot.totals()
        ns = pod.namespace
        own_max = own.max

        def check(out: Sequence[Pod]) -> str | None:
            own_used, total = snapshot.remove_pods(ns, out, total_used)
            if over(in_eq, own_used, own_max, UPPER_BOUND_OF_MAX):
                return GLOBAL_QUOTA_MAX_EXCEEDED
            if over(with_all, total, total_min, LOWER_BOUND_OF_MIN):
                return GLOBAL_QUOTA_MAX_EXCEEDED
            return None

        return check


class _QuotaEvaluator(Evaluator):
    """The engine's Evaluator, counting the pods each preemption reclaims from
    other quotas as it evicts them (the reclaim victims metric)."""

    def __init__(
        self, name: str, handle: Handle, interface: Interface, quotas: QuotaManager
    ) -> None:
        super().__init__(name, handle, interface)
        self.quotas = quotas

    def prepare_candidate(self, pod: Pod, c: Candidate, gang: str = "") -> None:
        self.quotas.count_victims(pod, c.victims)
        super().prepare_candidate(pod, c, gang)


def _least_important_first(p: Pod) -> tuple[int, float, PodKey]:
    return (p.priority, -start_time(p), p.key)


class CapacityScheduling(
    PreFilterPlugin,
    PostFilterPlugin,
    ReservePlugin,
    EnqueueExtensions,
    GroupPreemptionPlugin,
    TrialChargePlugin,
):
    NAME: Final = NAME
    # Its PreFilter state is read by no Filter (it has none).
    PRE_FILTER_NODE_LOCAL: Final = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.quotas = QuotaManager(handle.devices, handle.lister.pod_group)
        self.preemptor = Preemptor(handle)
        self.evaluator = _QuotaEvaluator(NAME, handle, self.preemptor, self.quotas)
        self.preemptor.evaluator = self.evaluator
        handle.metrics.add_quota_source(lambda: self.quotas.statistics().quotas)
        self.status = ElasticQuotaStatusWriter(
            handle,
            self._quota_object,
            self.quotas.pods_of,
            devices_of=self.quotas.devices_used_by,
        )
        # The pod whose preemption runs now: PreFilter, run again in its dry runs,
        # leaves the quota to the dry run's check.
        self._preempting: PodKey | None = None
        handle.watch(self._on_event)

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            raise PluginArgsError(str(k), "unknown field: the plugin takes no arguments")
        return cls(handle)

    def _quota_object(self, namespace: str) -> ElasticQuota | None:
        """The namespace's ElasticQuota as last seen (its status included)."""
        eq = self.quotas.quotas.get(namespace)
        if eq is None:
            return None
        return self.handle.elastic_quotas.get(eq.key, eq)

    # ---- PreFilter ----------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        quotas = self.quotas
        infos = quotas.snapshot()
        freed = quotas.devices_freed if quotas.has_claims() else None
        # The sums of used and min are the snapshot's, summed only if a later
        # point reads them (PostFilter); PreFilter compares with the ledger's,
        # equal to them now.
        snapshot = ElasticQuotaSnapshotState(infos, None, freed)
        state.write(ELASTIC_QUOTA_SNAPSHOT_KEY, snapshot)
        nominator = self.handle.nominator
        # The claims counted in the sums below: one shared by the pod and a
        # nominated pod, or by two nominated pods, counts once.
        seen: set[str] | None = set() if len(nominator) else None
        pod_req = quotas.request_of(pod, seen)
        own = infos.get(pod.namespace)
        if own is None:
            state.write(PRE_FILTER_STATE_KEY, PreFilterState(pod_req, dict(pod_req), dict(pod_req)))
            return None, SKIP
        if seen is None:
            # No pod nominated (most cycles): the request alone, one dict for
            # both sums (they are only read).
            in_eq = with_all = dict(pod_req)
        else:
            in_eq, with_all = {}, {}
            key = pod.key
            for node in list(nominator.nodes()):
                for p in nominator.pods_on(node):
                    if p.key == key:
                        continue
                    info = infos.get(p.namespace)
                    if info is None or p.key in info.pods:
                        continue  # no quota, or counted in its used already (a gang's trial)
                    # a nominated pod counts with its claims' devices, as its requests
                    if p.namespace == pod.namespace and p.priority >= pod.priority:
                        req = quotas.request_of(p, seen)
                        add_into(in_eq, req)
                        add_into(with_all, req)
                    elif p.namespace != pod.namespace and not info.used_over_min():
                        add_into(with_all, quotas.request_of(p, seen))
            add_into(in_eq, pod_req)
            add_into(with_all, pod_req)
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(pod_req, in_eq, with_all))
        if self._preempting == pod.key:
            return None, SKIP
        if own.used_over_max_with(in_eq):
            return None, Status(Code.UNSCHEDULABLE, (over_max_message(pod, own, in_eq),), NAME)
        if infos.aggregated_used_over_min_with(with_all, (quotas.total_used, quotas.total_min)):
            return None, Status(Code.UNSCHEDULABLE, (over_min_message(pod),), NAME)
        return None, SKIP  # nothing for Filter to do

    # ---- PostFilter -------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        self.handle.metrics.preemption_attempts.inc()
        self.preemptor.state = state
        self._preempting = pod.key
        try:
            nominated, st = self.evaluator.preempt(state, pod, filtered)
        finally:
            self._preempting = None
        if st.message:
            return nominated, Status(st.code, (f"preemption: {st.message}",), NAME)
        return nominated, st

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
        self.preemptor.state = state
        self._preempting = pod.key
        try:
            return self.evaluator.member_candidate(state, pod, runner, priority, taken, within)
        finally:
            self._preempting = None

    def prepare_member(self, pod: Pod, candidate: PreemptionCandidate, gang: str) -> None:
        self.evaluator.prepare_member(pod, candidate, gang)

    # ---- the group trial (TrialChargePlugin) -------------------------------------------

    def charge(self, state: CycleState, pod: Pod, node: NodeName) -> Callable[[], None] | None:
        """A gang member placed in its group trial counts against its quota until
        the trial ends, so that the next member's PreFilter sees it: a gang is
        admitted only if its members fit the quota together. Undone when the
        trial ends; the admitted members count again from Reserve."""
        q = self.quotas
        if not q.charge(pod):
            return None

        def undo() -> None:
            q.delete_pod(pod)

        return undo

    def release(
        self, state: CycleState, pod: Pod, victims: Sequence[Pod]
    ) -> Callable[[], None] | None:
        """The victims a gang's preemption plan takes for one member stop counting
        against their quotas until the plan ends, so that the next member's quota
        check (PreFilter, and the dry run's) sees the room they leave."""
        q = self.quotas
        counted = q.counted()
        gone = [
            known
            for v in victims
            if v.namespace in q.infos
            and (known := counted.get(v.namespace, {}).get(v.key)) is not None
        ]
        if not gone:
            return None
        claims = [q.claims_of(p.key, p.namespace) for p in gone]
        for p in gone:
            q.delete_pod(p)

        def undo() -> None:
            for p, c in zip(gone, claims, strict=True):
                q.add_pod(p, c)

        return undo

    # ---- Reserve ------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        self.quotas.reserve(pod)
        self._mark(pod.namespace)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        self.quotas.unreserve(pod)
        self._mark(pod.namespace)

    # ---- events -------------------------------------------------------------------------

    def _mark(self, namespace: str) -> None:
        if namespace in self.quotas.quotas:
            self.status.mark(namespace)

    def _on_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        ns = self.quotas.on_event(event, old, new)
        if ns is None:
            return
        if event.resource is EventResource.ELASTIC_QUOTA:
            self.status.mark(ns)
        else:
            self._mark(ns)

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        """Upstream's: a pod deleted, any ElasticQuota event; and a pod that ends
        (it stops counting)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
                )
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.ELASTIC_QUOTA, ActionType.ALL)),
        ]
