"""DefaultPreemption: the PostFilter plugin that makes room for a pod that does
not fit by evicting lower-priority pods (kube-scheduler's
plugins/defaultpreemption/default_preemption.go over framework/preemption/
preemption.go; facts carried over, code not).

1. Eligibility: `preemptionPolicy: Never` (the pod's or its PriorityClass's)
   never preempts; a pod whose nominated node still holds lower-priority pods
   terminating by preemption waits for them instead of preempting again.
2. Candidates: the nodes Filter found Unschedulable (not
   UnschedulableAndUnresolvable), searched from a random offset, until
   `max(minCandidateNodesAbsolute, minCandidateNodesPercentage % of them)`
   candidates are found (at least one without PDB violations). On each node,
   a dry run on the cycle's snapshot: uncharge every strictly lower-priority
   pod, check that the pod then passes the Filter plugins (nominated pods of
   equal or higher priority charged, as the scheduling cycle does), then
   reprieve as many as possible, most important first, those whose
   PodDisruptionBudget would be violated first. Everything is charged back
   (NodeTable.charge is exact both ways), so the snapshot is left as found.
   The dry runs are columnar: a chunk of candidate nodes is checked with one
   Filter call per reprieve round, not one per node. A pod whose PreFilter
   state depends on other pods (spreading, inter-pod affinity: any PreFilter
   plugin that is not node-local and did not skip) is checked node
   by node with PreFilter run again, as upstream's RemovePod/AddPod extensions
   keep that state right.
3. Choice (pickOneNodeForPreemption): fewest PDB violations, lowest
   highest-victim priority, smallest sum of priorities, fewest victims, latest
   start time of the highest-priority victims, then the first found.
4. Preparation: each victim gets the DisruptionTarget condition (reason
   PreemptionByScheduler) and is deleted with its own grace period (a victim
   waiting at Permit is rejected instead), with a `Preempted` event; pods of
   lower priority nominated to the chosen node lose their nomination. The
   scheduling cycle then records the preemptor's nomination.

Gangs: a victim that belongs to a PodGroup is taken only if its group keeps
minMember placed pods without it; a group is preempted whole only by a gang
(troupe/group_cycle.py).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Self

import numpy as np

from troupe.api.parse import parse_timestamp
from troupe.api.types import (
    DISRUPTION_ALL,
    PREEMPT_NEVER,
    NodeName,
    Pod,
    PodDisruptionBudget,
    PodKey,
)
from troupe.cluster import NotFound
from troupe.events import ObjectRef
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
)
from troupe.framework.filtering import FilterOutcome, FilterRunner
from troupe.framework.fit import NodeSubset
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    IntpArray,
    NodeToStatus,
    PluginArgsError,
    PostFilterPlugin,
    PreemptionCandidate,
)
from troupe.framework.nominator import nominated_rows
from troupe.framework.status import Code, Status
from troupe.snapshot import Charge, Int64Array, NodeTable, pod_charge

log = logging.getLogger(__name__)

NAME: Final = "DefaultPreemption"

# Reasons and messages with kube-scheduler's text.
NOT_ELIGIBLE_NEVER: Final = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING: Final = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS: Final = "No preemption victims found for incoming pod"
NOT_HELPFUL: Final = "Preemption is not helpful for scheduling"
NO_CANDIDATE: Final = "no candidate node for preemption"
DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
WAITING_REJECTED: Final = "preempted"


def disruption_message(scheduler_name: str) -> str:
    return f"{scheduler_name}: preempting to accommodate a higher priority pod"


def preempted_event_message(preemptor_uid: str, node: str) -> str:
    return f"Preempted by pod {preemptor_uid} on node {node}"


def fit_error(num_all_nodes: int, counts: Mapping[str, int]) -> str:
    """kube-scheduler's FitError.Error() of the preemption's own diagnosis."""
    parts = sorted(f"{n} {reason}" for reason, n in counts.items())
    msg = f"0/{num_all_nodes} nodes are available:"
    return msg + (f" {', '.join(parts)}." if parts else "")


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


def start_time(pod: Pod) -> float:
    """status.startTime, else "now" (upstream's GetPodStartTime): a pod not started
    yet counts as the most recent."""
    status = pod.raw.get("status")
    v = status.get("startTime") if isinstance(status, Mapping) else None
    if v is None:
        return float("inf")
    try:
        return parse_timestamp(v, "status.startTime")
    except Exception:
        return float("inf")


def importance(pod: Pod) -> tuple[int, int, float, PodKey]:
    """Sort key, most important first (upstream's MoreImportantPod: higher priority,
    then earlier start); at equal priority a gang's member before a lone pod, so
    that a lone pod is evicted rather than a gang broken."""
    return (-pod.priority, 0 if pod.group_key is not None else 1, start_time(pod), pod.key)


def terminating_by_preemption(pod: Pod) -> bool:
    if not pod.deleting:
        return False
    status = pod.raw.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conds if isinstance(conds, list) else ():
        if isinstance(c, Mapping) and c.get("type") == DISRUPTION_TARGET:
            return c.get("status") == "True" and c.get("reason") == PREEMPTION_BY_SCHEDULER
    return False


def split_by_pdb_violation(
    pods: Sequence[Pod], pdbs: Iterable[PodDisruptionBudget]
) -> tuple[list[Pod], list[Pod]]:
    """(violating, non-violating), order kept: kube-scheduler's filterPodsWithPDBViolation."""
    budgets = [(pdb, pdb.disruptions_allowed) for pdb in pdbs]
    allowed = [a for _, a in budgets]
    violating: list[Pod] = []
    ok: list[Pod] = []
    for pod in pods:
        violated = False
        for i, (pdb, _) in enumerate(budgets):
            if not pdb.matches(pod) or pod.name in pdb.disrupted_pods:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                violated = True
        (violating if violated else ok).append(pod)
    return violating, ok


@dataclass(slots=True)
class Candidate:
    node: NodeName
    victims: list[Pod]  # most important first
    pdb_violations: int
    order: int = 0  # when it was found (the last tie-break)

    @property
    def gangs_broken(self) -> int:
        return len({p.group_key for p in self.victims if p.group_key is not None})


def pick_one(candidates: Sequence[Candidate]) -> Candidate | None:
    """kube-scheduler's pickOneNodeForPreemption: fewest PDB violations, lowest
    highest-victim priority, smallest sum of priorities, fewest victims, latest
    start of the highest-priority victims; then fewest gangs touched."""
    if not candidates:
        return None
    for c in candidates:
        if not c.victims:
            return c

    def earliest_top_start(c: Candidate) -> float:
        top = c.victims[0].priority
        return min(start_time(p) for p in c.victims if p.priority == top)

    def key(c: Candidate) -> tuple[int, int, int, int, float, int, int]:
        # kube-scheduler's criteria in its order; then Troupe's: fewest gangs
        # touched, before the order found.
        return (
            c.pdb_violations,
            c.victims[0].priority,
            sum(p.priority + 2**31 for p in c.victims),
            len(c.victims),
            -earliest_top_start(c),
            c.gangs_broken,
            c.order,
        )

    return min(candidates, key=key)


# A pod, its charge, that charge as dense rows (NodeTable.charge_vector) and its
# `importance` key: what the dry runs need of a potential victim, kept per pod.
_Vector = tuple[Pod, Charge, Int64Array, Int64Array, tuple[int, int, float, PodKey]]


@dataclass(slots=True)
class _NodeRun:
    """One node's dry run: the victims still out and those reprieved so far."""

    row: int
    out: list[Pod]  # most important first, PDB-violating ones first
    vectors: list[_Vector]  # theirs, in that order
    violating: set[PodKey]
    victims: list[Pod] = field(default_factory=list)
    n_violating: int = 0


class DefaultPreemption(PostFilterPlugin):
    NAME: Final = NAME

    def __init__(self, handle: Handle, args: DefaultPreemptionArgs) -> None:
        self.handle = handle
        self.args = args
        # Victims chosen by a preemption and not deleted yet, with their preemptor:
        # until the API reports them terminating, they count as terminating.
        self.victims_of: dict[PodKey, PodKey] = {}
        self.preemptions = 0
        # Each pod's charge as dense rows, by key (checked against the pod object),
        # valid for the snapshot columns in `_vector_cols`.
        self._vectors: dict[PodKey, _Vector] = {}
        self._vector_cols: list[str] = []
        handle.watch(self._on_event)

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(handle, parse_args(args))

    def _on_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        if event.action & ActionType.DELETE and isinstance(old, Pod):
            self.victims_of.pop(old.key, None)
            self._vectors.pop(old.key, None)

    # ---- PostFilter -------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        self.handle.metrics.preemption_attempts.inc()
        nominated, st = self.preempt(state, pod, filtered)
        if st.message:
            return nominated, Status(st.code, (f"preemption: {st.message}",), NAME)
        return nominated, st

    def preempt(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        """kube-scheduler's Evaluator.Preempt, messages without the "preemption: " prefix."""
        snap = self.handle.snapshot()
        ok, why = self.eligible(pod, filtered, snap)
        if not ok:
            return None, Status(Code.UNSCHEDULABLE, (why,), NAME)
        profile = self.handle.profile_of(pod.scheduler_name)
        if profile is None:
            return None, Status(Code.UNSCHEDULABLE, (), NAME)
        n_all = snap.num_nodes
        potential = self._potential_rows(filtered, snap)
        if len(potential) == 0:
            return "", Status(Code.UNSCHEDULABLE, (fit_error(n_all, {NOT_HELPFUL: n_all}),), NAME)
        offset = self.handle.rng.randrange(len(potential))
        want = num_candidates(self.args, len(potential))
        found, statuses = self.find_candidates(state, pod, snap, profile, potential, offset, want)
        if not found:
            counts: dict[str, int] = {}
            for s in statuses.values():
                for r in s.reasons:
                    counts[r] = counts.get(r, 0) + 1
            if n_all > len(statuses):
                counts[NOT_HELPFUL] = counts.get(NOT_HELPFUL, 0) + n_all - len(statuses)
            return "", Status(Code.UNSCHEDULABLE, (fit_error(n_all, counts),), NAME)
        best = pick_one(found)
        if best is None:
            return None, Status(Code.UNSCHEDULABLE, (NO_CANDIDATE,), NAME)
        self.prepare(pod, best)
        return best.node, Status(Code.SUCCESS, (), NAME)

    def eligible(self, pod: Pod, filtered: NodeToStatus, snap: NodeTable) -> tuple[bool, str]:
        """kube-scheduler's PodEligibleToPreemptOthers."""
        if pod.preemption_policy == PREEMPT_NEVER:
            return False, NOT_ELIGIBLE_NEVER
        node = self.handle.nominator.node_of(pod.key) or _nominated_in_status(pod)
        if not node:
            return True, ""
        st = filtered.statuses.get(node)
        if st is not None and st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return True, ""
        row = snap.row_of.get(node)
        if row is None:
            return True, ""
        for p in snap.pods[row].values():
            if p.priority < pod.priority and (
                terminating_by_preemption(p) or self.victims_of.get(p.key) == pod.key
            ):
                return False, NOT_ELIGIBLE_TERMINATING
        return True, ""

    @staticmethod
    def _potential_rows(filtered: NodeToStatus, snap: NodeTable) -> IntpArray:
        """Rows Filter found Unschedulable (preemption may help there)."""
        absent = filtered.absent
        if absent is not None and absent.code is Code.UNSCHEDULABLE:
            rows = [
                r
                for r in snap.valid_rows().tolist()
                if (s := filtered.statuses.get(snap.names[r])) is None
                or s.code is Code.UNSCHEDULABLE
            ]
        else:
            rows = [
                snap.row_of[name]
                for name, s in filtered.statuses.items()
                if s.code is Code.UNSCHEDULABLE and name in snap.row_of
            ]
        return np.array(sorted(rows), dtype=np.intp)

    # ---- dry runs ----------------------------------------------------------------------

    def find_candidates(
        self,
        state: CycleState,
        pod: Pod,
        snap: NodeTable,
        profile: FilterRunner,
        potential: IntpArray,
        offset: int,
        want: int,
        whole_gangs: bool = False,
    ) -> tuple[list[Candidate], dict[str, Status]]:
        """kube-scheduler's DryRunPreemption, sequentially from `offset`: stop once
        `want` candidates are found, one of them without PDB violations."""
        order = np.concatenate((potential[offset:], potential[:offset]))
        pdbs = list(self.handle.pdbs.values())
        lister = self.handle.lister
        nominated = nominated_rows(
            self.handle.nominator, snap, pod, lambda k: lister.pod(k) is not None
        )
        local = self._node_local(state, profile)
        good: list[Candidate] = []
        violating: list[Candidate] = []
        statuses: dict[str, Status] = {}
        chunk = max(want, 16) if local else 1
        pos = 0
        while pos < len(order):
            part = order[pos : pos + chunk]
            pos += len(part)
            for c in self.select_victims(
                state, pod, snap, profile, part, pdbs, local, statuses, whole_gangs, nominated
            ):
                c.order = len(good) + len(violating)
                (violating if c.pdb_violations else good).append(c)
                if good and len(good) + len(violating) >= want:
                    return good + violating, statuses
        return good + violating, statuses

    @staticmethod
    def _node_local(state: CycleState, profile: FilterRunner) -> bool:
        return profile.pre_filter_is_node_local(state)

    def potential_victims(
        self, pod: Pod, row_pods: Iterable[Pod], whole_gangs: bool = False
    ) -> list[Pod]:
        """Strictly lower-priority pods, never of the preemptor's own group; a
        gang's member only if its gang keeps minMember placed pods (not counting
        members already being evicted) without the members on this node (never
        for a native group whose disruptionMode is All: one member goes only with
        all), or (`whole_gangs`, for a gang preemptor) if every placed member of
        its gang is of lower priority: it is then taken with its whole gang
        (`expand_gangs`)."""
        own = pod.group_key
        lower = [
            p for p in row_pods if p.priority < pod.priority and (own is None or p.group_key != own)
        ]
        groups = {p.group_key for p in lower if p.group_key is not None}
        if not groups:
            return lower
        lister = self.handle.lister
        keep: set[Any] = set()
        for g in groups:
            pg = lister.pod_group(g)
            if pg is None:
                keep.add(g)
                continue
            # members already on their way out (deleting, or chosen by an earlier
            # preemption) do not count: two preemptions must not each take one
            placed = sum(
                1
                for p in lister.pods_in_group(g)
                if (q := lister.pod(p.key)) is not None
                and not q.deleting
                and p.key not in self.victims_of
            )
            here = sum(1 for p in lower if p.group_key == g)
            whole = pg.disruption_mode == DISRUPTION_ALL  # it goes whole or not at all
            if (not whole and placed - here >= pg.min_member) or (
                whole_gangs
                and all(
                    p.priority < pod.priority for p in lister.pods_in_group(g) if lister.pod(p.key)
                )
            ):
                keep.add(g)
        return [p for p in lower if p.group_key is None or p.group_key in keep]

    def select_victims(
        self,
        state: CycleState,
        pod: Pod,
        snap: NodeTable,
        profile: FilterRunner,
        rows: IntpArray,
        pdbs: Sequence[PodDisruptionBudget],
        local: bool,
        statuses: dict[str, Status],
        whole_gangs: bool = False,
        nominated: Mapping[int, Sequence[Pod]] | None = None,
    ) -> list[Candidate]:
        """kube-scheduler's SelectVictimsOnNode for each of `rows` (a columnar dry
        run when `local`, else one node at a time with PreFilter run again). Nodes
        that do not make a candidate get their status in `statuses`."""
        isolated = self.handle.isolated
        cols = snap.resources
        if self._vector_cols != cols[: len(self._vector_cols)]:
            self._vectors.clear()
        self._vector_cols = list(cols)
        vectors = self._vectors
        runs: list[_NodeRun] = []
        for row in rows.tolist():
            lower = self.potential_victims(pod, snap.pods[row].values(), whole_gangs)
            if not lower:
                statuses[snap.names[row]] = Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_VICTIMS,), NAME
                )
                continue
            got = []
            for p in lower:
                v = vectors.get(p.key)
                if v is None or v[0] is not p:
                    ch = pod_charge(p, isolated)
                    v = vectors[p.key] = (p, ch, *snap.charge_vector(ch), importance(p))
                got.append(v)
            got.sort(key=lambda v: v[4])
            victims = [v[0] for v in got]
            if pdbs:
                bad, fine = split_by_pdb_violation(victims, pdbs)
                if bad:
                    by_key = {v[0].key: v for v in got}
                    victims = bad + fine
                    got = [by_key[p.key] for p in victims]
                runs.append(_NodeRun(row, victims, got, {p.key for p in bad}))
            else:
                runs.append(_NodeRun(row, victims, got, set()))
        if not runs:
            return []
        on_rows = nominated or {}
        if local:
            return self._dry_run(state, pod, snap, profile, runs, statuses, on_rows)
        out: list[Candidate] = []
        for run in runs:
            out += self._dry_run(state, pod, snap, profile, [run], statuses, on_rows, True)
        return out

    def _dry_run(
        self,
        state: CycleState,
        pod: Pod,
        snap: NodeTable,
        profile: FilterRunner,
        runs: list[_NodeRun],
        statuses: dict[str, Status],
        nominated: Mapping[int, Sequence[Pod]],
        rerun_pre_filter: bool = False,
    ) -> list[Candidate]:
        # Every potential victim out at once, then put back round by round.
        all_rows = np.repeat(
            np.array([r.row for r in runs], dtype=np.intp), [len(r.out) for r in runs]
        )
        vecs = [v for r in runs for v in r.vectors]
        all_pods = [v[0] for v in vecs]
        all_charges = [v[1] for v in vecs]
        all_amounts = _stack([v[2] for v in vecs])
        all_nonzero = np.stack([v[3] for v in vecs])
        all_keys = [v[4][3] for v in vecs]  # importance's last item: the pod's key
        snap.charge_dense(all_rows, all_pods, all_charges, all_amounts, all_nonzero, -1, all_keys)
        back = np.zeros(len(all_pods), dtype=bool)  # which of them are charged again

        def move(at: IntpArray, sign: int) -> None:
            self._move(
                snap, all_rows, all_pods, all_charges, all_amounts, all_nonzero, all_keys, at, sign
            )

        first = np.cumsum([0] + [len(r.out) for r in runs[:-1]])
        index = {id(r): int(i) for r, i in zip(runs, first, strict=True)}
        try:
            live = runs
            fits = self._fits(
                state, pod, snap, profile, live, statuses, nominated, rerun_pre_filter
            )
            live = [r for r, ok in zip(live, fits, strict=True) if ok]
            # Reprieve round k: put back each node's k-th most important victim.
            k = 0
            while live:
                trying = [r for r in live if k < len(r.out)]
                if not trying:
                    break
                at = np.array([index[id(r)] + k for r in trying], dtype=np.intp)
                move(at, +1)
                back[at] = True
                fits = self._fits(
                    state, pod, snap, profile, trying, None, nominated, rerun_pre_filter
                )
                failed = []
                for r, ok, i in zip(trying, fits, at.tolist(), strict=True):
                    if not ok:
                        p = r.out[k]
                        failed.append(i)
                        r.victims.append(p)
                        if p.key in r.violating:
                            r.n_violating += 1
                if failed:
                    f = np.array(failed, dtype=np.intp)
                    move(f, -1)
                    back[f] = False
                k += 1
            out = []
            for r in live:
                victims = r.victims
                if r.violating and len(r.violating) < len(r.out):
                    victims = sorted(victims, key=importance)
                out.append(Candidate(NodeName(snap.names[r.row]), victims, r.n_violating))
            return out
        finally:
            # Put back everything that is out: what the reprieve did not restore.
            move(np.flatnonzero(~back), +1)

    @staticmethod
    def _move(
        snap: NodeTable,
        rows: IntpArray,
        pods: Sequence[Pod],
        charges: Sequence[Charge],
        amounts: Int64Array,
        nonzero: Int64Array,
        keys: Sequence[PodKey],
        at: IntpArray,
        sign: int,
    ) -> None:
        """Charge (sign +1) or uncharge the victims at positions `at`."""
        idx = at.tolist()
        snap.charge_dense(
            rows[at],
            [pods[i] for i in idx],
            [charges[i] for i in idx],
            amounts[at],
            nonzero[at],
            sign,
            [keys[i] for i in idx],
        )

    def _fits(
        self,
        state: CycleState,
        pod: Pod,
        snap: NodeTable,
        profile: FilterRunner,
        runs: Sequence[_NodeRun],
        statuses: dict[str, Status] | None,
        nominated: Mapping[int, Sequence[Pod]],
        rerun_pre_filter: bool,
    ) -> list[bool]:
        rows = np.array([r.row for r in runs], dtype=np.intp)
        use = state
        if rerun_pre_filter:
            use = CycleState()
            _, st = profile.run_pre_filter(use, pod, snap)
            if not st.is_success:
                if statuses is not None:
                    for r in runs:
                        statuses[snap.names[r.row]] = st
                return [False] * len(runs)
        # the pod must fit with the nominated pods of >= priority and without them
        # (SelectVictimsOnNode runs RunFilterPluginsWithNominatedPods)
        out = profile.run_filters_with_nominated(use, pod, snap, rows, nominated)
        if isinstance(out, Status):
            if statuses is not None:
                for r in runs:
                    statuses[snap.names[r.row]] = out
            return [False] * len(runs)
        if statuses is not None and not out.feasible.all():
            statuses.update(_statuses(out, snap))
        return [bool(x) for x in out.feasible]

    # ---- preparation -------------------------------------------------------------------

    def prepare(self, pod: Pod, c: Candidate, gang: str = "") -> None:
        """kube-scheduler's prepareCandidate: evict the victims, clear the
        nominations of lower-priority pods on the node. `gang` (ns/name): the
        preemptor is that gang, `pod` one of its members."""
        self.preemptions += 1
        h = self.handle
        h.metrics.preemption_victims.observe(len(c.victims))
        for victim in c.victims:
            self.victims_of[victim.key] = pod.key
            wp = h.waiting_pods.get(victim.key)
            if wp is not None:
                wp.reject(NAME, WAITING_REJECTED)
                h.spawn(self._record_preempted(victim, pod, c.node, gang))
                continue
            if victim.deleting:
                continue
            h.spawn(self._evict(victim, pod, c.node, gang))
        on_node = h.nominator.pods_on(c.node)
        cleared = [p.key for p in on_node if p.priority < pod.priority and p.key != pod.key]
        for key in cleared:
            h.nominator.delete(key)
            h.spawn(self._clear_nomination(key))
        if cleared:
            h.activate(cleared)

    async def _evict(self, victim: Pod, preemptor: Pod, node: str, gang: str = "") -> None:
        client = self.handle.client
        try:
            await client.set_disruption_target(
                victim.key, PREEMPTION_BY_SCHEDULER, disruption_message(preemptor.scheduler_name)
            )
            await client.delete_pod(victim.key, victim.uid, None)
        except NotFound:
            pass  # gone already: nothing to delete, the event is still said
        except Exception as e:
            log.warning("could not preempt %s for %s: %s", victim.key, preemptor.key, e)
            return
        await self._record_preempted(victim, preemptor, node, gang)

    async def _record_preempted(
        self, victim: Pod, preemptor: Pod, node: str, gang: str = ""
    ) -> None:
        md = victim.raw.get("metadata")
        rv = md.get("resourceVersion") if isinstance(md, Mapping) else None
        rv = rv if isinstance(rv, str) else ""
        ref = ObjectRef("Pod", victim.namespace, victim.name, victim.uid, "v1", rv)
        try:
            await self.handle.client.record_event(
                ref,
                "Normal",
                "Preempted",
                f"Preempted by gang {gang} on node {node}"
                if gang
                else preempted_event_message(preemptor.uid, node),
                "Preempting",
            )
        except Exception as e:
            log.warning("could not record the Preempted event of %s: %s", victim.key, e)

    # ---- gangs (GroupPreemptionPlugin) ---------------------------------------------------

    def member_candidate(
        self,
        state: CycleState,
        pod: Pod,
        runner: FilterRunner,
        priority: int,
        taken: Collection[PodKey],
        within: NodeSubset | None = None,
    ) -> Candidate | None:
        """The best candidate that makes room for one member of a gang of
        `priority`, as a lone pod's PostFilter finds them (a sample of candidates
        from a random offset, minCandidateNodesPercentage/Absolute; pods nominated
        with equal or higher priority keep the room they wait for), restricted to
        candidates whose victims' gangs can go whole (`expand_gangs`), on the
        nodes `within` (all when None)."""
        h = self.handle
        snap = h.snapshot()
        rows = snap.valid_rows() if within is None else within.rows
        want = num_candidates(self.args, len(rows))
        offset = h.rng.randrange(len(rows)) if len(rows) else 0
        lister = h.lister
        with snap.overlay() as ov:
            waiting = nominated_rows(h.nominator, snap, pod, lambda k: lister.pod(k) is not None)
            for row, pods in waiting.items():
                for p in pods:
                    ov.add(row, p, pod_charge(p, h.isolated))
            found, _ = self.find_candidates(
                state, pod, snap, runner, rows, offset, want, whole_gangs=True
            )
        usable = []
        for c in found:
            whole = self.expand_gangs(c.victims, priority, taken)
            if whole is not None:
                c.victims = whole
                usable.append(c)
        return pick_one(usable)

    def prepare_member(self, pod: Pod, candidate: PreemptionCandidate, gang: str) -> None:
        """Evict a gang member's victims (`prepare` with the gang named)."""
        assert isinstance(candidate, Candidate)
        self.prepare(pod, candidate, gang)

    def expand_gangs(
        self, victims: Iterable[Pod], priority: int, taken: Iterable[PodKey] = ()
    ) -> list[Pod] | None:
        """The victims of a gang preemptor of `priority`, with the whole gang of
        each victim whose gang would fall below minMember without them (or whose
        disruptionMode is All), or None
        if such a gang has a placed member of `priority` or higher (it cannot be
        taken whole, so it cannot be taken at all). `taken`: victims already
        chosen for the same preemptor (its other members' nodes), which count as
        gone. Members already on their way out never count as placed."""
        lister = self.handle.lister
        out = {p.key: p for p in victims}
        gone = set(taken) | out.keys()
        for g in {p.group_key for p in out.values() if p.group_key is not None}:
            pg = lister.pod_group(g)
            placed = [
                q
                for m in lister.pods_in_group(g)
                if (q := lister.pod(m.key)) is not None
                and not q.deleting
                and q.key not in self.victims_of
            ]
            left = sum(1 for q in placed if q.key not in gone)
            if pg is None or (left >= pg.min_member and pg.disruption_mode != DISRUPTION_ALL):
                continue  # no gang to keep, or it keeps its quorum without these
            if any(q.priority >= priority for q in placed):
                return None
            for q in placed:
                out.setdefault(q.key, q)
        if any(p.priority >= priority for p in out.values()):
            return None
        return sorted(out.values(), key=importance)

    async def _clear_nomination(self, key: PodKey) -> None:
        try:
            await self.handle.client.set_nominated_node(key, None)
        except Exception as e:
            log.warning("could not clear the nominated node of %s: %s", key, e)


def _stack(rows: Sequence[Int64Array]) -> Int64Array:
    """Dense charge rows of possibly fewer columns, stacked and padded with zeros."""
    width = max(len(r) for r in rows)
    if all(len(r) == width for r in rows):
        return np.stack(rows)
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _statuses(out: FilterOutcome, snap: NodeTable) -> dict[str, Status]:
    return out.node_statuses(snap)


def _nominated_in_status(pod: Pod) -> str:
    status = pod.raw.get("status")
    v = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    return v if isinstance(v, str) else ""
