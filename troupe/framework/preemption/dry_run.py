"""The dry runs of preemption on the cycle's snapshot: the machinery a
preemption plugin's `select_victims_on_node` runs once it has said which pods
of a node may go (kube-scheduler's SelectVictimsOnNode takes them off a copy of
the NodeInfo; facts carried over, code not).

On each node: uncharge every potential victim, check that the pod then passes
the Filter plugins (nominated pods of equal or higher priority charged, as the
scheduling cycle does), then reprieve as many as possible, most important unit
first (`units.Units.importance`), the units whose PodDisruptionBudget would be
violated first. A unit (a PodGroup whose disruptionMode is All) is reprieved
whole or not at all: its members on the node are put back together (one after
the other, adjacent in the order; when one does not fit, those put back before
it go out again), and when it goes, its members on other nodes go with it (as
upstream, they do not count for the node's fit: kube-scheduler changes only
the main node's NodeInfo). Its PDB violations count every member's.
Everything is charged back (NodeTable.charge is exact both ways), so the
snapshot is left as found.

The dry runs are columnar: the nodes of a chunk are checked with one Filter
call per reprieve round, not one per node. A pod whose PreFilter state depends
on other pods (spreading, inter-pod affinity: any PreFilter plugin that is not
node-local and did not skip) is checked node by node with PreFilter run again,
as upstream's RemovePod/AddPod extensions keep that state right.

The gang rules (`gangs.gang_safe_victims`) apply to every node's potential
victims here, whichever plugin chose them. A plugin may add a check of its own
(`check`, a quota): a node passes only if the pod fits and the check passes
with every potential victim out, and a victim is reprieved only if both still
pass with it back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from troupe.api.types import GroupKey, IsolatedCPU, NodeName, Pod, PodDisruptionBudget, PodKey
from troupe.core.snapshot import Charge, Int64Array, NodeTable, pod_charge
from troupe.framework.cycle_state import CycleState
from troupe.framework.filtering import FilterRunner
from troupe.framework.handle import ClusterLister
from troupe.framework.interface import IntpArray
from troupe.framework.preemption.candidates import Candidate, importance
from troupe.framework.preemption.disruption_budgets import split_by_pdb_violation
from troupe.framework.preemption.gangs import gang_safe_victims
from troupe.framework.preemption.units import Units
from troupe.framework.status import Code, Status

# A preemption plugin's check of one node's dry run beyond Filter: given the pods
# out of the node (the victims so far and those not reprieved yet), None if the
# preemptor may then take the room, else why not (`Interface.victims_check`).
VictimsCheck = Callable[[Sequence[Pod]], str | None]

# A pod, its charge, that charge as dense rows (NodeTable.charge_vector) and its
# `importance` key: what the dry runs need of a potential victim, kept per pod.
_Vector = tuple[Pod, Charge, Int64Array, Int64Array, tuple[int, int, float, PodKey]]


class VictimVectors:
    """Each potential victim's charge as dense rows, by key (checked against the
    pod object), valid for the snapshot columns they were made for; kept across
    preemptions by the evaluator, dropped when the pod is deleted."""

    __slots__ = ("_cols", "_vectors")

    def __init__(self) -> None:
        self._vectors: dict[PodKey, _Vector] = {}
        self._cols: list[str] = []

    def refresh(self, snap: NodeTable) -> None:
        """Forget every vector if the snapshot's columns are not those they were
        made for followed by new ones."""
        cols = snap.resources
        if self._cols != cols[: len(self._cols)]:
            self._vectors.clear()
        self._cols = list(cols)

    def get(self, pod: Pod, snap: NodeTable, isolated: IsolatedCPU) -> _Vector:
        v = self._vectors.get(pod.key)
        if v is None or v[0] is not pod:
            ch = pod_charge(pod, isolated)
            v = self._vectors[pod.key] = (pod, ch, *snap.charge_vector(ch), importance(pod))
        return v

    def drop(self, key: PodKey) -> None:
        self._vectors.pop(key, None)


@dataclass(slots=True)
class _NodeRun:
    """One node's dry run: the victims still out and those reprieved so far."""

    row: int
    out: list[Pod]  # most important unit first, PDB-violating units first
    vectors: list[_Vector]  # theirs, in that order
    units: list[GroupKey | None]  # each one's whole group (disruptionMode All), or None
    violating: set[PodKey]  # the PDB-violating pods of these units (on any node)
    victims: list[Pod] = field(default_factory=list)
    # Whole groups that go, and positions of members of others put back so far.
    lost: set[GroupKey] = field(default_factory=set)
    held: dict[GroupKey, list[tuple[int, Pod]]] = field(default_factory=dict)


@dataclass(slots=True)
class DryRun:
    """The dry runs of one preemption attempt for `pod`. A plugin's
    `select_victims_on_node` gives each node's potential victims (`add`) or
    rejects the node (`reject`), then `run` dry-runs the nodes added since the
    last `run` and gives their candidates; nodes that do not make one get their
    status in `statuses`."""

    state: CycleState
    pod: Pod
    snap: NodeTable
    profile: FilterRunner
    pdbs: Sequence[PodDisruptionBudget]
    nominated: Mapping[int, Sequence[Pod]]
    local: bool  # the PreFilter state is node-local: a chunk in one Filter call
    whole_gangs: bool  # the preemptor is a gang (`gangs.gang_safe_victims`)
    lister: ClusterLister
    victims_of: Mapping[PodKey, PodKey]
    vectors: VictimVectors
    isolated: IsolatedCPU
    # The attempt's preemption units (victim priorities, whole groups, order).
    units: Units
    # The plugin's check beyond Filter (a quota), None for none.
    check: VictimsCheck | None = None
    # The victims the preemptor may take whatever their priority (a quota's
    # reclaim, `Interface.reclaims`), None for none.
    outranks: Callable[[Pod], bool] | None = None
    statuses: dict[str, Status] = field(default_factory=dict)
    _runs: list[_NodeRun] = field(default_factory=list)

    def add(self, row: int, pods: Sequence[Pod]) -> bool:
        """`pods` (on `row`) may go for the preemptor, as far as the gang rules
        let them; False (nothing added) when none may."""
        units = self.units
        lower = gang_safe_victims(
            self.pod, pods, self.lister, self.victims_of, units, self.whole_gangs, self.outranks
        )
        if not lower:
            return False
        snap, isolated, vectors = self.snap, self.isolated, self.vectors
        got = [vectors.get(p, snap, isolated) for p in lower]
        for v in got:
            units.known_start(v[0].key, v[4][2])  # importance's third item: the start
        got.sort(key=lambda v: units.importance(v[0]))
        victims = [v[0] for v in got]
        whole = [units.whole_group(p) for p in victims]
        violating: set[PodKey] = set()
        if self.pdbs:
            # The budgets are spent in the units' order, a whole group's members
            # on every node with it; a unit with one violating pod is violating.
            spent: list[Pod] = []
            seen: set[GroupKey] = set()
            for p, u in zip(victims, whole, strict=True):
                if u is None:
                    spent.append(p)
                elif u not in seen:
                    seen.add(u)
                    spent += units.members(u) or (p,)
            bad, _ = split_by_pdb_violation(spent, self.pdbs)
            if bad:
                violating = {p.key for p in bad}
                bad_units: set[str] = {units.whole_group(p) or p.key for p in bad}
                is_bad = [(u or p.key) in bad_units for p, u in zip(victims, whole, strict=True)]
                order = [i for i, b in enumerate(is_bad) if b]
                order += [i for i, b in enumerate(is_bad) if not b]
                victims = [victims[i] for i in order]
                got = [got[i] for i in order]
                whole = [whole[i] for i in order]
        self._runs.append(_NodeRun(row, victims, got, whole, violating))
        return True

    def reject(self, row: int, status: Status) -> None:
        """The node makes no candidate, for this reason."""
        self.statuses[self.snap.names[row]] = status

    def run(self) -> list[Candidate]:
        runs, self._runs = self._runs, []
        if not runs:
            return []
        if self.local:
            return self._dry_run(runs, False)
        out: list[Candidate] = []
        for run in runs:
            out += self._dry_run([run], True)
        return out

    def _dry_run(self, runs: list[_NodeRun], rerun_pre_filter: bool) -> list[Candidate]:
        snap = self.snap
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
            _move(
                snap, all_rows, all_pods, all_charges, all_amounts, all_nonzero, all_keys, at, sign
            )

        first = np.cumsum([0] + [len(r.out) for r in runs[:-1]])
        index = {id(r): int(i) for r, i in zip(runs, first, strict=True)}
        try:
            live = runs
            fits = self._fits(live, self.statuses, rerun_pre_filter)
            live = [r for r, ok in zip(live, fits, strict=True) if ok]
            check = self.check
            if check is not None:
                live = [r for r in live if self._checked(r, check)]
            # Reprieve round k: put back each node's k-th most important victim.
            k = 0
            while live:
                trying = [r for r in live if k < len(r.out)]
                if not trying:
                    break
                at = np.array([index[id(r)] + k for r in trying], dtype=np.intp)
                move(at, +1)
                back[at] = True
                fits = self._fits(trying, None, rerun_pre_filter)
                failed = []
                for r, ok, i in zip(trying, fits, at.tolist(), strict=True):
                    u = r.units[k]
                    if u is not None and u in r.lost:
                        ok = False  # its group goes: it goes too, untried
                    if ok and check is not None:
                        ok = check(r.victims + r.out[k + 1 :]) is None
                    p = r.out[k]
                    if ok:
                        if u is not None:
                            r.held.setdefault(u, []).append((i, p))
                        continue
                    failed.append(i)
                    r.victims.append(p)
                    if u is not None and u not in r.lost:
                        # The whole group goes: its members put back go out again.
                        r.lost.add(u)
                        for j, q in r.held.pop(u, []):
                            failed.append(j)
                            r.victims.append(q)
                if failed:
                    f = np.array(failed, dtype=np.intp)
                    move(f, -1)
                    back[f] = False
                k += 1
            out = []
            units = self.units
            for r in live:
                victims = r.victims
                if r.lost:
                    # A whole group's members on other nodes go with it.
                    here = {p.key for p in victims}
                    for u in sorted(r.lost):
                        victims += [q for q in units.members(u) if q.key not in here]
                victims.sort(key=units.importance)
                n_violating = sum(1 for p in victims if p.key in r.violating)
                out.append(Candidate(NodeName(snap.names[r.row]), victims, n_violating))
            return out
        finally:
            # Put back everything that is out: what the reprieve did not restore.
            move(np.flatnonzero(~back), +1)

    def _checked(self, run: _NodeRun, check: VictimsCheck) -> bool:
        """The plugin's check with every potential victim of the node out; a
        node that fails it makes no candidate, for the reason it gives."""
        why = check(run.out)
        if why is None:
            return True
        self.statuses[self.snap.names[run.row]] = Status(Code.UNSCHEDULABLE, (why,))
        return False

    def _fits(
        self,
        runs: Sequence[_NodeRun],
        statuses: dict[str, Status] | None,
        rerun_pre_filter: bool,
    ) -> list[bool]:
        snap, profile, pod = self.snap, self.profile, self.pod
        rows = np.array([r.row for r in runs], dtype=np.intp)
        use = self.state
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
        out = profile.run_filters_with_nominated(use, pod, snap, rows, self.nominated)
        if isinstance(out, Status):
            if statuses is not None:
                for r in runs:
                    statuses[snap.names[r.row]] = out
            return [False] * len(runs)
        if statuses is not None and not out.feasible.all():
            statuses.update(out.node_statuses(snap))
        return [bool(x) for x in out.feasible]


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


def _stack(rows: Sequence[Int64Array]) -> Int64Array:
    """Dense charge rows of possibly fewer columns, stacked and padded with zeros."""
    width = max(len(r) for r in rows)
    if all(len(r) == width for r in rows):
        return np.stack(rows)
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out
