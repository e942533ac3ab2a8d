"""The preemption evaluator and the interface a preemption plugin implements
(kube-scheduler's framework/preemption/preemption.go: Evaluator and Interface;
facts carried over, code not).

The evaluator runs a preemption attempt; the plugin (`Interface`) says who may
preempt, how many candidates to look for and from where, which pods of a node
may go, and how candidates rank. DefaultPreemption implements it; a quota
plugin (scheduler-plugins' CapacityScheduling) implements it with its own
victim selection and uses the same evaluator, for pods and for gangs.

1. Eligibility (`pod_eligible_to_preempt_others`).
2. Candidates (findCandidates, DryRunPreemption): the nodes Filter found
   Unschedulable (not UnschedulableAndUnresolvable), searched from the
   plugin's offset until its number of candidates is found (at least one
   without PDB violations); each chunk of nodes goes through the plugin's
   `select_victims_on_node` and the dry runs (`dry_run.DryRun`), with the
   plugin's `victims_check` if it has one (a quota that the victims must free).
3. Choice (SelectCandidate): `candidates.pick_one`, with the plugin's ordered
   score functions if it gives any.
4. Preparation (prepareCandidate): each victim gets the DisruptionTarget
   condition (reason PreemptionByScheduler) and is deleted with its own grace
   period (a victim waiting at Permit is rejected instead), with a `Preempted`
   event; pods of lower priority nominated to the chosen node lose their
   nomination. The scheduling cycle then records the preemptor's nomination.

Preemption units (`units.Units`, kube-scheduler 1.37's workload-aware
preemption): a PodGroup whose disruptionMode is All is taken whole, its
members on every node, for a lone pod as for a gang; a victim's priority is its
PodGroup's when the group sets one; victims are ordered by their unit's
importance. A candidate is still named by one node (the preemptor's), its
victims may run on others.

Gangs: the group cycle asks member by member (`member_candidate`), with the
gang's priority, for candidates whose victims' gangs can go whole
(`gangs.expand_gangs`), and has them evicted only once minMember fit
(`prepare_member`): the entry points of framework/interface.py's
GroupPreemptionPlugin, which a preemption plugin forwards here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final, Protocol

import numpy as np

from troupe.api.types import NodeName, Pod, PodDisruptionBudget, PodKey
from troupe.core.cluster import NotFound
from troupe.core.recorder import ObjectRef
from troupe.core.snapshot import NodeTable, pod_charge
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import ActionType, ClusterEvent
from troupe.framework.filtering import FilterRunner
from troupe.framework.fit import NodeSubset
from troupe.framework.handle import Handle
from troupe.framework.interface import IntpArray, NodeToStatus, PreemptionCandidate
from troupe.framework.nominator import nominated_rows
from troupe.framework.preemption.candidates import Candidate, ScoreFunc, Victims, pick_one
from troupe.framework.preemption.dry_run import DryRun, VictimsCheck, VictimVectors
from troupe.framework.preemption.gangs import expand_gangs
from troupe.framework.preemption.units import Units
from troupe.framework.status import Code, Status

log = logging.getLogger(__name__)

# Reasons and messages with kube-scheduler's text.
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


def nominated_node(handle: Handle, pod: Pod) -> str:
    """The node the pod is nominated to: the nominator's, else its
    status.nominatedNodeName; "" for none."""
    node = handle.nominator.node_of(pod.key)
    if node:
        return node
    status = pod.raw.get("status")
    v = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    return v if isinstance(v, str) else ""


class Interface(Protocol):
    """What a preemption plugin decides (kube-scheduler's preemption.Interface)."""

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """Where among `num_nodes` potential nodes the search starts, and how many
        candidates it looks for."""
        ...

    def candidates_to_victims_map(
        self, candidates: Sequence[Candidate]
    ) -> dict[NodeName, Victims]: ...

    def pod_eligible_to_preempt_others(
        self, pod: Pod, nominated_node_status: Status | None
    ) -> tuple[bool, str]:
        """Whether the pod may preempt, else why not. `nominated_node_status`:
        Filter's status of the node it is nominated to (None: it passed, or
        there is none)."""
        ...

    def select_victims_on_node(
        self, state: CycleState, pod: Pod, snap: NodeTable, rows: IntpArray, dry: DryRun
    ) -> list[Candidate]:
        """SelectVictimsOnNode for each of `rows` at once: each node's pods that
        may go (`dry.add`) or its rejection (`dry.reject`), then `dry.run()`."""
        ...

    def ordered_score_funcs(
        self, nodes_to_victims: Mapping[NodeName, Victims]
    ) -> list[ScoreFunc] | None:
        """Scores that rank candidates, in order; None for kube-scheduler's ranking."""
        ...

    def victims_check(self, state: CycleState, pod: Pod) -> VictimsCheck | None:
        """A check beyond Filter that each node's dry run must pass with the pods
        it takes out of the node (a quota's: CapacityScheduling's, whose
        upstream SelectVictimsOnNode checks the quota as it removes and
        reprieves victims); None, the default, when Filter alone decides
        (DefaultPreemption)."""
        return None

    def reclaims(self, state: CycleState, pod: Pod) -> Callable[[Pod], bool] | None:
        """Which victims the pod may take whatever their priority, as the gang
        rules judge them (a quota under its min reclaiming from quotas over
        theirs takes their gangs whole, as it takes their pods); None, the
        default, when priority alone decides."""
        return None


class Evaluator:
    """Runs preemption for the plugin `plugin_name` through `interface`."""

    def __init__(self, plugin_name: str, handle: Handle, interface: Interface) -> None:
        self.plugin_name = plugin_name
        self.handle = handle
        self.interface = interface
        # Victims chosen by a preemption and not deleted yet, with their preemptor:
        # until the API reports them terminating, they count as terminating.
        self.victims_of: dict[PodKey, PodKey] = {}
        self.preemptions = 0
        self._vectors = VictimVectors()
        handle.watch(self._on_event)

    def _on_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        if isinstance(old, Pod) and event.action & ActionType.DELETE:  # IntFlag's & is slow
            self.victims_of.pop(old.key, None)
            self._vectors.drop(old.key)

    def preempt(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        """kube-scheduler's Evaluator.Preempt, messages without the "preemption: " prefix."""
        name = self.plugin_name
        snap = self.handle.snapshot()
        node = nominated_node(self.handle, pod)
        ok, why = self.interface.pod_eligible_to_preempt_others(
            pod, filtered.statuses.get(node) if node else None
        )
        if not ok:
            return None, Status(Code.UNSCHEDULABLE, (why,), name)
        profile = self.handle.profile_of(pod.scheduler_name)
        if profile is None:
            return None, Status(Code.UNSCHEDULABLE, (), name)
        n_all = snap.num_nodes
        potential = nodes_where_preemption_might_help(filtered, snap)
        if len(potential) == 0:
            return "", Status(Code.UNSCHEDULABLE, (fit_error(n_all, {NOT_HELPFUL: n_all}),), name)
        offset, want = self.interface.get_offset_and_num_candidates(len(potential))
        found, statuses = self.dry_run_preemption(
            state, pod, snap, profile, potential, offset, want
        )
        if not found:
            counts: dict[str, int] = {}
            for s in statuses.values():
                for r in s.reasons:
                    counts[r] = counts.get(r, 0) + 1
            if n_all > len(statuses):
                counts[NOT_HELPFUL] = counts.get(NOT_HELPFUL, 0) + n_all - len(statuses)
            return "", Status(Code.UNSCHEDULABLE, (fit_error(n_all, counts),), name)
        best = self.select_candidate(found)
        if best is None:
            return None, Status(Code.UNSCHEDULABLE, (NO_CANDIDATE,), name)
        self.prepare_candidate(pod, best)
        return best.node, Status(Code.SUCCESS, (), name)

    def dry_run_preemption(
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
        `want` candidates are found, one of them without PDB violations. Nodes
        that do not make a candidate get their status in the second item."""
        h = self.handle
        order = np.concatenate((potential[offset:], potential[:offset]))
        pdbs: Sequence[PodDisruptionBudget] = list(h.pdbs.values())
        lister = h.lister
        nominated = nominated_rows(h.nominator, snap, pod, lambda k: lister.pod(k) is not None)
        local = profile.pre_filter_is_node_local(state)
        dry = DryRun(
            state=state,
            pod=pod,
            snap=snap,
            profile=profile,
            pdbs=pdbs,
            nominated=nominated,
            local=local,
            whole_gangs=whole_gangs,
            lister=lister,
            victims_of=self.victims_of,
            vectors=self._vectors,
            isolated=h.isolated,
            units=self.units(),
            check=self.interface.victims_check(state, pod),
            outranks=self.interface.reclaims(state, pod),
        )
        good: list[Candidate] = []
        violating: list[Candidate] = []
        chunk = max(want, 16) if local else 1
        pos = 0
        select = self.interface.select_victims_on_node
        while pos < len(order):
            part = order[pos : pos + chunk]
            pos += len(part)
            self._vectors.refresh(snap)
            for c in select(state, pod, snap, part, dry):
                c.order = len(good) + len(violating)
                (violating if c.pdb_violations else good).append(c)
                if good and len(good) + len(violating) >= want:
                    return good + violating, dry.statuses
        return good + violating, dry.statuses

    def units(self) -> Units:
        """The preemption units of an attempt that starts now (`units.Units`)."""
        h = self.handle
        return Units(h.lister, h.priority_classes, self.victims_of, h.features.composite_pod_group)

    def select_candidate(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """kube-scheduler's SelectCandidate: the plugin's ordered score functions
        rank the candidates if it gives any, else `pick_one`'s criteria do."""
        if not candidates:
            return None
        funcs = self.interface.ordered_score_funcs(
            self.interface.candidates_to_victims_map(candidates)
        )
        return pick_one(candidates, funcs)

    # ---- preparation -------------------------------------------------------------------

    def prepare_candidate(self, pod: Pod, c: Candidate, gang: str = "") -> None:
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
                wp.reject(self.plugin_name, WAITING_REJECTED)
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

    async def _clear_nomination(self, key: PodKey) -> None:
        try:
            await self.handle.client.set_nominated_node(key, None)
        except Exception as e:
            log.warning("could not clear the nominated node of %s: %s", key, e)

    # ---- gangs (served for GroupPreemptionPlugin) ----------------------------------------

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
        `priority`, as a lone pod's PostFilter finds them (the plugin's offset and
        number of candidates; pods nominated with equal or higher priority keep
        the room they wait for), restricted to candidates whose victims' gangs
        can go whole (`expand_gangs`), on the nodes `within` (all when None)."""
        h = self.handle
        snap = h.snapshot()
        rows = snap.valid_rows() if within is None else within.rows
        offset, want = self.interface.get_offset_and_num_candidates(len(rows))
        lister = h.lister
        with snap.overlay() as ov:
            waiting = nominated_rows(h.nominator, snap, pod, lambda k: lister.pod(k) is not None)
            for row, pods in waiting.items():
                for p in pods:
                    ov.add(row, p, pod_charge(p, h.isolated))
            found, _ = self.dry_run_preemption(
                state, pod, snap, runner, rows, offset, want, whole_gangs=True
            )
        usable = []
        units = self.units()
        outranks = self.interface.reclaims(state, pod)
        for c in found:
            whole = expand_gangs(
                c.victims, priority, lister, self.victims_of, units, taken, outranks
            )
            if whole is not None:
                c.victims = whole
                usable.append(c)
        return self.select_candidate(usable)

    def prepare_member(self, pod: Pod, candidate: PreemptionCandidate, gang: str) -> None:
        """Evict a gang member's victims (`prepare_candidate` with the gang named)."""
        assert isinstance(candidate, Candidate)
        self.prepare_candidate(pod, candidate, gang)


def nodes_where_preemption_might_help(filtered: NodeToStatus, snap: NodeTable) -> IntpArray:
    """Rows Filter found Unschedulable (preemption may help there)."""
    absent = filtered.absent
    if absent is not None and absent.code is Code.UNSCHEDULABLE:
        rows = [
            r
            for r in snap.valid_rows().tolist()
            if (s := filtered.statuses.get(snap.names[r])) is None or s.code is Code.UNSCHEDULABLE
        ]
    else:
        rows = [
            snap.row_of[name]
            for name, s in filtered.statuses.items()
            if s.code is Code.UNSCHEDULABLE and name in snap.row_of
        ]
    return np.array(sorted(rows), dtype=np.intp)
