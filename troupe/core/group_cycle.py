"""The gang's group cycle: all the queued members of a PodGroup placed together
on the cycle's snapshot, each placement charged before the next is searched;
only if at least minMember fit are they assumed, reserved and permitted
together. Nothing is held otherwise. A gang that does not fit preempts as one
unit, through the profile's GroupPreemptionPlugin.

The core names no plugin: what a gang is (which group a popped pod starts, its
quorum, how many of its members are placed, the placement's arguments) is
asked of the profile's GroupSchedulingPlugin (troupe.framework.interface),
which Coscheduling implements."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from troupe.api.types import (
    CPU,
    MEMORY,
    PREEMPT_NEVER,
    GroupKey,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
)
from troupe.core.context import SchedulerContext, object_ref
from troupe.core.failures import Failures
from troupe.core.recorder import ObjectRef
from troupe.core.schedule_one import PodCycle
from troupe.core.snapshot import Overlay, pod_charge
from troupe.core.topology import (
    BoolArray,
    Demand,
    Domain,
    DomainSet,
    TopologyError,
    TopologySpec,
    coarser_or_equal,
    label_missing,
    members_domain,
    preferred_order_problem,
    rank,
    topology_of,
)
from troupe.framework.cycle_state import CycleState
from troupe.framework.fit import FitError, NodeSubset, ScheduleResult
from troupe.framework.group_tree import GroupTree
from troupe.framework.interface import (
    GroupSchedulingPlugin,
    PreemptionCandidate,
    QueuedPodInfo,
)
from troupe.framework.nominator import nominated_rows
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status

log = logging.getLogger(__name__)

IntpArray = npt.NDArray[np.intp]
_NO_ROWS: IntpArray = np.empty(0, dtype=np.intp)
# What GroupCycle keeps per gang is swept of gone groups once it holds this many
# entries, then again each time it has doubled since.
_SWEEP_MIN: Final = 256
# The Warning event on a PodGroup whose preferred topology level no node has.
SKIPPED_LEVEL_REASON: Final = "TopologyLevelSkipped"


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

    def cost(self) -> tuple[int, int, int]:
        """Fewest victims of the lowest priority first: (the highest victim
        priority, how many, the sum of their priorities)."""
        vs = {v.key: v for _, _, c in self.chosen if c is not None for v in c.victims}
        prios = [v.priority for v in vs.values()]
        return (max(prios, default=-(2**31)), len(prios), sum(prios))


class GroupCycle:
    """A gang's atomic group cycle, entered for the first member of a group that
    is not admitted yet (`wants`, then `schedule`)."""

    def __init__(self, ctx: SchedulerContext, pods: PodCycle, failures: Failures) -> None:
        self.ctx = ctx
        self.pods = pods
        self.failures = failures
        # Victims of each gang's last preemption: it waits for them to go.
        self.gang_victims: dict[GroupKey, set[PodKey]] = {}
        # Per gang and topology level, the domains tried in its recent cycles and
        # their stamps then (`_next_domains`): a cycle goes on where the last stopped.
        self._rounds: dict[GroupKey, dict[str, dict[tuple[str, ...], tuple[int, float]]]] = {}
        # Per gang, the preferred levels no node has that its PodGroup was told are skipped.
        self._skipped: dict[GroupKey, tuple[str, ...]] = {}
        self._sweep_at = _SWEEP_MIN

    def wants(self, profile: Profile, qpi: QueuedPodInfo) -> PodGroup | GroupTree | None:
        """The PodGroup (or tree of groups) whose group cycle this popped pod
        starts, if any: the profile's GroupSchedulingPlugin (at Permit) names it
        (a gang not admitted yet)."""
        plugin = profile.group_scheduling
        if qpi.pod.group_key is None or not self.ctx.config.troupe.group_cycle or plugin is None:
            return None
        tree = plugin.tree_to_schedule(qpi.pod)
        if tree is not None:
            return tree
        return plugin.group_to_schedule(qpi.pod)

    def schedule(self, profile: Profile, first: QueuedPodInfo, pg: PodGroup | GroupTree) -> None:
        """Place the gang's queued pods together on the snapshot, each placement charged
        before the next is searched; commit them only if minMember fit, else hold nothing.

        The snapshot serves as the scratch copy: placements are charged into an
        overlay, undone before the real assumes, which then reach it through the cache.
        """
        if isinstance(pg, GroupTree):
            self._schedule_tree(profile, first, pg)
            return
        ctx = self.ctx
        group = first.pod.group_key
        assert group is not None
        gang = _gang(profile)
        self._sweep()
        self._preemption_note, self._untried = "", ()
        min_member = gang.min_count(pg)
        t0 = ctx.clock.now()
        members = sorted(self._take_members(first, [group]), key=profile.sort_key)
        placed_before = gang.placed_members(group)
        try:
            spec = topology_of(pg)
        except TopologyError as e:
            self._unschedulable(profile, group, members, f'PodGroup "{group}": {e}', Trial())
            return
        if not spec.empty:
            self._schedule_in_domains(profile, group, pg, members, placed_before, spec, t0)
            return
        trial = self._place(profile, members, None)
        ctx.counters.group_attempts += 1
        if placed_before + len(trial.placements) >= min_member:
            self._admit(profile, group, members, trial, t0)
            return
        plan = self._plan_preemption(profile, group, members, min_member, placed_before, None)
        if plan is not None:
            self._preempt(profile, group, plan)
        failures = trial.failures
        why = failures[0][1].message if failures else "not enough member pods are pending"
        message = (
            f'PodGroup "{group}": {placed_before + len(trial.placements)} of '
            f"{gang.min_count_name(pg)} {min_member} pods fit; {why}"
        )
        self._unschedulable(profile, group, members, message, trial)

    def _take_members(self, first: QueuedPodInfo, groups: list[GroupKey]) -> list[QueuedPodInfo]:
        """`first` and the queued pods of `groups`, taken out of the queue for
        this cycle (a pod the cache already holds is done with, not placed)."""
        ctx = self.ctx
        members = [first]
        others = [
            p.key
            for g in groups
            for p in ctx.cache.pods_in_group(g)
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
        return members

    def _unschedulable(
        self,
        profile: Profile,
        group: GroupKey,
        members: list[QueuedPodInfo],
        message: str,
        trial: Trial,
        retry: bool = False,
    ) -> None:
        """Nothing of the gang is held: every member fails with the gang's message.
        With `retry` (the gang has domains left to try) no plugin is named as
        the rejector, so the members come back after their backoff rather than
        waiting in the unschedulable pool for an event."""
        ctx = self.ctx
        ctx.counters.group_failures += 1
        ctx.metrics.podgroup_attempts.labels("unschedulable").inc()
        plugins: set[str] = set() if retry else {_gang(profile).NAME}
        for _, result in trial.failures if not retry else ():
            if isinstance(result, FitError):
                plugins |= result.unschedulable_plugins
            elif result.plugin:
                plugins.add(result.plugin)
        errors = {
            q.pod.key for q, result in trial.failures if self.failures.outcome(result) == "error"
        }
        if ctx.gang_pending is not None:
            note, self._preemption_note = self._preemption_note, ""
            untried, self._untried = list(self._untried), ()
            pods = [q.pod for q in members]
            ctx.gang_pending(profile, pods, str(group), message, note, untried)
        for qpi in members:
            ctx.counters.failed += 1
            self.failures.handle(
                profile, qpi, message, Code.UNSCHEDULABLE, frozenset(plugins), frozenset()
            )
            outcome = "error" if qpi.pod.key in errors else "unschedulable"
            self.failures.count_attempt(profile, outcome, trial.seconds.get(qpi.pod.key, 0.0))

    # ---- trees of groups (CompositePodGroup) ------------------------------------------

    def _schedule_tree(self, profile: Profile, first: QueuedPodInfo, tree: GroupTree) -> None:
        """A gang of groups: the queued pods of every group of the tree placed
        together, each group's and each composite's need counted bottom up, and
        admitted only if the root's is met; a group or composite whose need is
        not met holds nothing of what was placed for it, and its pods fail with
        its message (the others are admitted without them). Each node of the
        tree with a topology key is placed in one domain of its label: the
        domains are tried in turn, the root's at most `topologyDomainsPerCycle`
        per cycle (the next cycle goes on with the others). A gang of groups
        does not preempt (yet)."""
        ctx = self.ctx
        self._sweep()
        self._untried = ()
        t0 = ctx.clock.now()
        ctx.counters.group_attempts += 1
        members = self._take_members(first, [leaf.key for leaf in tree.leaves()])
        by_group: dict[GroupKey, list[QueuedPodInfo]] = {}
        for q in sorted(members, key=profile.sort_key):
            by_group.setdefault(q.pod.group_key or GroupKey(""), []).append(q)
        outer = self.enclosing(profile, first.pod, None)
        self._preemption_note = ""
        if isinstance(outer, str):
            self._unschedulable(profile, tree.key, members, outer, Trial())
            return
        snap = ctx.snapshot
        undos: list[Callable[[], None]] = []
        with snap.overlay() as placed:
            try:
                trial, ok, why, left = self._place_node(
                    profile, tree, by_group, outer, placed, undos, root=True
                )
            finally:
                for undo in reversed(undos):
                    undo()
        if ok:
            self._admit(profile, tree.key, members, trial, t0)
            return
        if not left:
            self._preempt_tree(profile, tree, by_group, outer)
        self._unschedulable(profile, tree.key, members, why, trial, retry=left)

    def _preempt_tree(
        self,
        profile: Profile,
        tree: GroupTree,
        by_group: dict[GroupKey, list[QueuedPodInfo]],
        within: NodeSubset | None,
    ) -> None:
        """A gang of groups that cannot be placed preempts as one unit, with its
        root's priority (else its lowest pod's): group by group on the
        snapshot, each group's victims taken off before the next is searched,
        a group or composite whose need is not met taking back what it chose;
        a plan only if the root's need is met. With a topology key on the root,
        one plan per domain (at most `topologyDomainsPerCycle`), the cheapest
        carried out; a topology key below the root is not planned for (the
        tree waits)."""
        ctx = self.ctx
        plugin = profile.group_preemption()
        pods = [q for t in tree.leaves() for q in by_group.get(t.key, ())]
        if plugin is None:
            self._preemption_note = "not tried: the profile has no PostFilter for gangs"
            return
        if any(n.topology for c in tree.children for n in _nodes(c)):
            self._preemption_note = "not tried: a group below the root has a topology key"
            return
        if tree.never_preempts or any(
            t.group is not None and t.group.preemption_policy == PREEMPT_NEVER
            for t in tree.leaves()
        ):
            self._preemption_note = "not tried: the preemptionPolicy of a group is Never"
            return
        if any(
            q.pod.preemption_policy == PREEMPT_NEVER
            and (q.pod.group_key is None or not _group_policy(tree, q.pod.group_key))
            for q in pods
        ):
            self._preemption_note = "not tried: a member's preemptionPolicy is Never"
            return
        if any(ctx.cache.pod(k) is not None for k in self.gang_victims.get(tree.key, ())):
            self._preemption_note = "not tried: waiting for its last preemption's victims to go"
            return
        if not pods:
            return
        ctx.metrics.preemption_attempts.inc()
        priority = tree.priority if tree.priority is not None else min(q.pod.priority for q in pods)
        subsets: Sequence[NodeSubset | None] = [within]
        if tree.topology:
            snap = ctx.snapshot
            keys = tuple(tree.topology.split(","))
            try:
                running = self.running_domain([t.key for t in tree.leaves()], keys)
            except TopologyError:
                return  # the placement said so
            rows = snap.valid_rows() if within is None else within.rows
            ds = DomainSet.build(snap, keys, rows)
            limit = _gang(profile).domains_per_cycle()
            subsets = [
                ds.domain(i).subset()
                for i in range(len(ds))
                if running is None or ds.values[i] == running
            ][:limit]
        plans: list[tuple[tuple[int, int, int], int, PreemptionPlan]] = []
        for n, subset in enumerate(subsets):
            plan = PreemptionPlan(plugin)
            undos: list[Callable[[], None]] = []
            with ctx.snapshot.overlay() as ov:
                try:
                    ok = self._plan_node(profile, tree, by_group, subset, priority, plan, ov, undos)
                finally:
                    for undo in reversed(undos):
                        undo()
            if ok:
                plans.append((plan.cost(), n, plan))
        if not plans:
            self._preemption_note = (
                f"tried: evicting lower-priority pods would not place {tree.need_name} "
                f"{tree.need} of {tree.label}"
            )
            return
        _, _, plan = min(plans, key=lambda t: (t[0], t[1]))
        self._preempt(profile, tree.key, plan)

    def _plan_node(
        self,
        profile: Profile,
        node: GroupTree,
        by_group: dict[GroupKey, list[QueuedPodInfo]],
        within: NodeSubset | None,
        priority: int,
        plan: PreemptionPlan,
        ov: Overlay,
        undos: list[Callable[[], None]],
    ) -> bool:
        """`_preempt_tree`'s search of one node: whether its need is met; what
        it chose is taken back when it is not."""
        mark, undo_mark, start = ov.mark(), len(undos), len(plan.chosen)
        if node.group is not None:
            members = by_group.get(node.key, [])
            self._plan_members(
                profile, members, node.need, node.placed, within, priority, plan, ov, undos
            )
            ok = node.placed + len(plan.chosen) - start >= node.need
        else:
            count = 0
            for child in node.children:
                if count >= node.need:
                    break
                count += self._plan_node(
                    profile, child, by_group, within, priority, plan, ov, undos
                )
            ok = count >= node.need
        if not ok:
            ov.rollback_to(mark)
            taken_back, undos[undo_mark:] = undos[undo_mark:], []
            for undo in reversed(taken_back):
                undo()
            del plan.chosen[start:]
        return ok

    def _place_node(
        self,
        profile: Profile,
        node: GroupTree,
        by_group: dict[GroupKey, list[QueuedPodInfo]],
        within: NodeSubset | None,
        placed: Overlay,
        undos: list[Callable[[], None]],
        root: bool = False,
    ) -> tuple[Trial, bool, str, bool]:
        """Place `node`'s subtree (`within` those nodes) on the overlay: in one
        domain of its topology key if it has one, the domains tried in turn
        until one holds it. Returns the trial, whether the node's need is met,
        why not, and (the root) whether domains are left for the next cycle."""
        if not node.topology:
            trial, ok, why = self._place_subtree(profile, node, by_group, within, placed, undos)
            return trial, ok, why, False
        snap = self.ctx.snapshot
        keys = tuple(node.topology.split(","))
        missing = [k for k in keys if label_missing(snap, k)]
        if missing:
            return Trial(), False, f"{node.label}: no node has the label {missing[0]!r}", False
        try:
            running = self.running_domain([t.key for t in node.leaves()], keys)
        except TopologyError as e:
            return Trial(), False, f"{node.label}: {e}", False
        rows = snap.valid_rows() if within is None else within.rows
        ds = DomainSet.build(snap, keys, rows)
        pods = [q for t in node.leaves() for q in by_group.get(t.key, ())]
        demand = Demand(tuple(sorted(self._cpu_memory(q.pod) for q in pods)))
        gang = _gang(profile)
        good, short = rank(snap, ds, demand, 1, gang.placement_weights())
        candidates = [i for i in good + short if running is None or ds.values[i] == running]
        left = False
        if root:
            order, _, n_left = self._next_domains(
                node.key, node.topology, ds, candidates, gang.domains_per_cycle(), pods
            )
            left = n_left > 0
        else:
            order = candidates
        best: tuple[Trial, str] | None = None
        for i in order:
            d = ds.domain(i)
            trial, ok, why = self._place_subtree(profile, node, by_group, d.subset(), placed, undos)
            self.ctx.metrics.topology_placements.inc()
            if ok:
                if root:
                    self._rounds.pop(node.key, None)
                    self.ctx.metrics.topology_placed.labels(node.topology).inc()
                return trial, True, why, False
            if best is None or len(trial.failures) > len(best[0].failures):
                best = (
                    trial,
                    f"{node.label}: best {d.name}: {why.removeprefix(node.label + ': ')}",
                )
        if best is None:
            where = "where the group runs" if running is not None else "with room"
            return Trial(), False, f"{node.label}: no {node.topology} domain {where}", left
        trial, why = best
        return trial, False, why, left

    def _place_subtree(
        self,
        profile: Profile,
        node: GroupTree,
        by_group: dict[GroupKey, list[QueuedPodInfo]],
        within: NodeSubset | None,
        placed: Overlay,
        undos: list[Callable[[], None]],
    ) -> tuple[Trial, bool, str]:
        """`_place_node` within one domain (or none): a group's members in turn,
        or a composite's children in turn. A node whose need is not met takes
        back what it placed (the overlay's charges and the plugins') and lists
        its pods as failures with its message."""
        mark, undo_mark = placed.mark(), len(undos)
        if node.group is not None:
            trial = Trial()
            self._place_each(profile, by_group.get(node.key, []), within, trial, placed, undos)
            count = node.placed + len(trial.placements)
            why = trial.failures[0][1].message if trial.failures else "not enough pods pending"
            message = f"{node.label}: {count} of {node.need_name} {node.need} pods fit; {why}"
        else:
            trial, count, first_why = Trial(), 0, ""
            for child in node.children:
                sub, ok, why, _ = self._place_node(profile, child, by_group, within, placed, undos)
                trial.placements += sub.placements
                trial.failures += sub.failures
                trial.seconds.update(sub.seconds)
                if ok:
                    count += 1
                elif not first_why:
                    first_why = why
            message = f"{node.label}: {count} of {node.need_name} {node.need} groups fit" + (
                f"; {first_why}" if first_why else ""
            )
        ok = count >= node.need
        if not ok and trial.placements:
            placed.rollback_to(mark)
            taken_back, undos[undo_mark:] = undos[undo_mark:], []
            for undo in reversed(taken_back):
                undo()
            gang = _gang(profile).NAME
            trial.failures += [
                (q, Status(Code.UNSCHEDULABLE, (message,), gang)) for q, _, _ in trial.placements
            ]
            trial.placements = []
        return trial, ok, message

    # ---- topology ----------------------------------------------------------------------

    def _schedule_in_domains(
        self,
        profile: Profile,
        group: GroupKey,
        pg: PodGroup,
        members: list[QueuedPodInfo],
        placed_before: int,
        spec: TopologySpec,
        t0: float,
    ) -> None:
        """A gang with a topology request: placed whole in one domain of the
        narrowest preferred level where it fits, else (at least minMember) in one
        domain of the required level, else anywhere when nothing is required.
        Domains are ranked by their predicted placement score and placed in, in
        that order, until one holds the gang: at most `topologyDomainsPerCycle`
        of each level per cycle, and the next cycle goes on with those not tried
        yet. A preferred level no node has is skipped. Only once every required
        domain was tried without preemption, and none held the gang, does
        preemption clear one domain."""
        ctx = self.ctx
        snap = ctx.snapshot
        ctx.counters.group_attempts += 1
        spec = self._without_missing_preferred(group, pg, spec)
        problem = self._check(spec)
        required: DomainSet | None = None
        allowed: set[int] | None = None
        if problem is None and spec.required:
            required, allowed, problem = self._required_domains(group, spec)
        if problem is not None:
            self._unschedulable(profile, group, members, f'PodGroup "{group}": {problem}', Trial())
            return
        gang = _gang(profile)
        limit, weights = gang.domains_per_cycle(), gang.placement_weights()
        min_member = gang.min_count(pg)
        demand = Demand(tuple(sorted(self._cpu_memory(q.pod) for q in members)))
        feasible = self._first_member_nodes(profile, members[0].pod)
        # Preferred levels, narrowest first: the whole gang in one domain.
        for level in spec.preferred:
            if required is None:
                rows = snap.valid_rows()
            else:
                parts = [required.domain(i).rows for i in sorted(allowed or range(len(required)))]
                rows = np.sort(np.concatenate(parts)) if parts else _NO_ROWS
            ds = DomainSet.build(snap, (level,), rows)
            good, _ = rank(snap, ds, demand, len(members), weights, feasible, whole=True)
            order, _, _ = self._next_domains(group, level, ds, good, limit, members)
            found = self._first_fit(profile, members, ds, order, len(members))
            if found is not None:
                self._admit_in(profile, group, pg, members, found, level, t0)
                return
        self._partial = None
        if required is None:
            trial = self._place(profile, members, None)
            if placed_before + len(trial.placements) >= min_member:
                ctx.metrics.topology_placed.labels("any").inc()
                self._admit(profile, group, members, trial, t0)
                return
            plan = self._plan_preemption(profile, group, members, min_member, placed_before, None)
            if plan is not None:
                self._preempt(profile, group, plan)
            why = trial.failures[0][1].message if trial.failures else "not enough pods pending"
            message = (
                f'PodGroup "{group}": {placed_before + len(trial.placements)} of '
                f"{gang.min_count_name(pg)} {min_member} pods fit; {why}"
            )
            self._unschedulable(profile, group, members, message, trial)
            return
        level = ",".join(spec.required)
        need = min_member - placed_before
        whole = need >= len(members)
        good, short = rank(snap, required, demand, need, weights, feasible, whole)
        if allowed is not None:
            good = [i for i in good if i in allowed]
            short = [i for i in short if i in allowed]
        order, tried, left = self._next_domains(group, level, required, good, limit, members)
        self._untried = [
            (required.domain(i).name, "not tried in this cycle" if i in good else "too small")
            for i in sorted(set(range(len(required))) - set(order))
            if allowed is None or i in allowed
        ]
        found = self._first_fit(profile, members, required, order, need)
        if found is not None:
            self._admit_in(profile, group, pg, members, found, level, t0)
            return
        partial, self._partial = self._partial, None
        what = f"{gang.min_count_name(pg)} {min_member}"
        if left:
            # Domains not tried yet: the next cycle, after the members' backoff,
            # goes on with them. No preemption while one may hold the gang.
            self._preemption_note = f"not tried: {left} {level} domain(s) left to try first"
            message = (
                f'PodGroup "{group}": no {level} has room for {what} among the {tried} '
                f"tried so far ({left} more to try)"
            )
            trial = Trial()
            if partial is not None:
                trial, d = partial
                why = trial.failures[0][1].message if trial.failures else "not enough pods pending"
                message += f": best {d.name} fits {placed_before + len(trial.placements)}; {why}"
            self._unschedulable(profile, group, members, message, trial, retry=True)
            return
        if partial is None and short:
            # No domain has the room: place in the roomiest anyway, to say how
            # far from the quorum the gang is.
            self._first_fit(profile, members, required, short[:1], need)
            partial, self._partial = self._partial, None
        # Preemption that clears one domain: the one whose victims are fewest and
        # of the lowest priority.
        plans: list[tuple[tuple[int, int, int], int, Domain, PreemptionPlan]] = []
        for n, i in enumerate((good + short)[:limit]):
            d = required.domain(i)
            plan = self._plan_preemption(
                profile, group, members, min_member, placed_before, d.subset()
            )
            if plan is not None:
                plans.append((plan.cost(), n, d, plan))
        if plans:
            _, _, d, plan = min(plans, key=lambda t: (t[0], t[1]))
            if self._preempt(profile, group, plan):
                log.info("gang %s preempts in %s", group, d.name)
        if partial is not None:
            trial, d = partial
            why = trial.failures[0][1].message if trial.failures else "not enough pods pending"
            fits = placed_before + len(trial.placements)
            message = (
                f'PodGroup "{group}": no {level} has room for {what}: best {d.name} fits '
                f"{fits}; {why}"
            )
        else:
            message = f'PodGroup "{group}": no {level} has room for {what}'
            trial = Trial()
        self._unschedulable(profile, group, members, message, trial)

    _partial: tuple[Trial, Domain] | None = None
    # What preemption did for the gang in this cycle, for its explanation.
    _preemption_note = ""
    # The required level's domains the cycle did not place the gang in, and why
    # ("too small": their free cpu and memory cannot hold it, as predicted).
    _untried: Sequence[tuple[str, str]] = ()

    def _first_fit(
        self,
        profile: Profile,
        members: list[QueuedPodInfo],
        ds: DomainSet,
        order: list[int],
        need: int,
    ) -> tuple[Trial, Domain] | None:
        """Place the gang in the domains in `order` until at least `need` members
        fit in one. The trial that placed most where none did is kept in
        `_partial` for the message."""
        ctx = self.ctx
        partial = self._partial
        for i in order:
            d = ds.domain(i)
            trial = self._place(profile, members, d.subset())
            ctx.metrics.topology_placements.inc()
            n = len(trial.placements)
            if n >= need and n > 0:
                self._partial = None
                return trial, d
            if partial is None or n > len(partial[0].placements):
                partial = (trial, d)
        self._partial = partial
        return None

    def _admit_in(
        self,
        profile: Profile,
        group: GroupKey,
        pg: PodGroup,
        members: list[QueuedPodInfo],
        best: tuple[Trial, Domain],
        level: str,
        t0: float,
    ) -> None:
        trial, d = best
        self._partial = None
        self.ctx.metrics.topology_placed.labels(level).inc()
        self._admit(profile, group, members, trial, t0)
        ref = object_ref(pg.raw, "PodGroup", pg.namespace, pg.name)
        message = f"placed in {d.name}: {len(trial.placements)} pods"
        self.ctx.spawn(self._record(ref, "Normal", "Placed", message, "Scheduling"))

    def _next_domains(
        self,
        group: GroupKey,
        level: str,
        ds: DomainSet,
        good: list[int],
        limit: int,
        members: list[QueuedPodInfo],
    ) -> tuple[list[int], int, int]:
        """The domains of `good` (ranked) to place the gang in this cycle, at most
        `limit`: those it has not tried in its recent cycles first (a domain
        where a member is nominated before the others), then those that changed
        since they were tried. Returns them, how many domains of the level have
        been tried, and how many are left for the next cycles. When none is
        left the round is over: the next cycle starts again from the best."""
        rounds = self._rounds.setdefault(group, {})
        tried = rounds.setdefault(level, {})
        stamps = ds.stamps(self.ctx.cache.table.generation)
        nominated = self._nominated_domains(ds, members)
        if nominated:
            good = [i for i in good if i in nominated] + [i for i in good if i not in nominated]
        fresh = [i for i in good if ds.values[i] not in tried]
        changed = [i for i in good if tried.get(ds.values[i], stamps[i]) != stamps[i]]
        order = (fresh + changed)[:limit]
        for i in order:
            tried[ds.values[i]] = stamps[i]
        count, left = len(tried), max(0, len(fresh) - limit)
        if not left:
            del rounds[level]
            if not rounds:
                del self._rounds[group]
        return order, count, left

    def _nominated_domains(self, ds: DomainSet, members: list[QueuedPodInfo]) -> set[int]:
        """The domains of the nodes the members are nominated to (after the
        gang's preemption): where the gang is expected."""
        nominator = self.ctx.handle.nominator
        snap = self.ctx.snapshot
        out: set[int] = set()
        for q in members:
            node = nominator.node_of(q.pod.key)
            row = snap.row_of.get(node) if node else None
            i = ds.domain_of(row) if row is not None else None
            if i is not None:
                out.add(i)
        return out

    def _first_member_nodes(self, profile: Profile, pod: Pod) -> BoolArray | None:
        """Per snapshot row, whether `pod`, the gang's first member, passes
        PreFilter and Filter there (nominated pods counted as its search counts
        them): where its search in any domain can put it, which ranks domains
        by what cpu and memory do not show. None when PreFilter does not pass
        (the trials then say why)."""
        ctx = self.ctx
        snap = ctx.snapshot
        state = CycleState()
        pre, st = profile.run_pre_filter(state, pod, snap)
        if not st.is_success:
            return None
        rows = snap.valid_rows()
        if pre is not None and pre.node_names is not None:
            keep = sorted(snap.row_of[n] for n in pre.node_names if n in snap.row_of)
            rows = np.array(keep, dtype=np.intp)
        on_rows = nominated_rows(
            ctx.handle.nominator, snap, pod, lambda k: ctx.cache.pod(k) is not None
        )
        out = profile.run_filters_with_nominated(state, pod, snap, rows, on_rows)
        if isinstance(out, Status):
            return None
        mask = np.zeros(len(snap.valid), dtype=bool)
        mask[out.rows[out.feasible]] = True
        return mask

    def _cpu_memory(self, pod: Pod) -> tuple[int, int]:
        """The cpu and memory the snapshot charges for `pod` (an isolated pod's
        cpu is charged to the isolated resource)."""
        res = pod_charge(pod, self.ctx.isolated).resources
        return res.get(CPU, 0), res.get(MEMORY, 0)

    def _without_missing_preferred(
        self, group: GroupKey, pg: PodGroup, spec: TopologySpec
    ) -> TopologySpec:
        """The request without the preferred levels no node has (a cluster
        without blocks, a typo): a preference never makes a gang
        unschedulable. The PodGroup gets a Warning naming each level skipped,
        once per gang (again only if the levels skipped change)."""
        missing = tuple(k for k in spec.preferred if label_missing(self.ctx.snapshot, k))
        if not missing:
            self._skipped.pop(group, None)
            return spec
        if self._skipped.get(group) != missing:
            self._skipped[group] = missing
            ref = object_ref(pg.raw, "PodGroup", pg.namespace, pg.name)
            for k in missing:
                message = (
                    f"{spec.where(k)}: preferred level {k!r} is skipped: "
                    f"no node has the label {k!r}"
                )
                self.ctx.spawn(
                    self._record(ref, "Warning", SKIPPED_LEVEL_REASON, message, "Scheduling")
                )
        return replace(spec, preferred=tuple(k for k in spec.preferred if k not in missing))

    def _sweep(self) -> None:
        """Forget what is kept per gang (domains tried, levels skipped, victims
        waited for) of the groups that are gone; only once that holds
        `_SWEEP_MIN` gangs, then each time it has doubled since."""
        maps = (self._rounds, self._skipped, self.gang_victims)
        if sum(len(m) for m in maps) < self._sweep_at:
            return
        cache = self.ctx.cache
        gone = {g for m in maps for g in m if cache.pod_group(g) is None}
        for g in gone:
            self._rounds.pop(g, None)
            self._skipped.pop(g, None)
            self.gang_victims.pop(g, None)
        self._sweep_at = max(_SWEEP_MIN, 2 * sum(len(m) for m in maps))

    def _check(self, spec: TopologySpec) -> str | None:
        """A topology request the cluster's nodes cannot give meaning to (a
        preferred level no node has is skipped instead, and gives none)."""
        snap = self.ctx.snapshot
        for k in spec.required:
            if label_missing(snap, k):
                return f"{spec.where(k)}: no node has the label {k!r}"
        for p in spec.preferred:
            for r in spec.required:
                if coarser_or_equal(snap, p, r):
                    return (
                        f"{spec.where(p)}: preferred level {p!r} is not narrower than "
                        f"the required {r!r}"
                    )
        return preferred_order_problem(snap, spec)

    def _required_domains(
        self, group: GroupKey, spec: TopologySpec
    ) -> tuple[DomainSet, set[int] | None, str | None]:
        """The required level's domains and, when members are placed already,
        the one the group runs in (a member created later joins them there or
        waits)."""
        snap = self.ctx.snapshot
        ds = DomainSet.build(snap, spec.required, snap.valid_rows())
        try:
            running = self.running_domain(group, spec.required)
        except TopologyError as e:
            return ds, set(), str(e)
        if running is None:
            return ds, None, None
        keep = {i for i, v in enumerate(ds.values) if v == running}
        if not keep:
            where = ",".join(f"{k}={v}" for k, v in zip(spec.required, running, strict=True))
            return ds, keep, f"the group runs in {where}, where no node is left"
        return ds, keep, None

    def running_domain(
        self, group: GroupKey | Sequence[GroupKey], keys: tuple[str, ...]
    ) -> tuple[str, ...] | None:
        """The values of `keys` shared by the nodes of the placed members (bound
        or assumed) of the group (or of every group given); None when none is
        placed. TopologyError when they run in more than one domain or on a node
        without the labels (placed by someone else): the group cannot be kept
        in one domain, and says so."""
        ctx = self.ctx
        nodes = []
        for g in [group] if isinstance(group, str) else group:
            for p in sorted(ctx.cache.pods_in_group(g), key=lambda p: p.key):
                node = ctx.cache.pod_node(p.key)
                if node and ctx.cache.pod(p.key) is not None:
                    nodes.append(node)
        return members_domain(ctx.snapshot, keys, nodes)

    def within(self, pod: Pod, profile: Profile | None = None) -> NodeSubset | str | None:
        """For a pod of a group with required topology that is scheduled alone (a
        group of the basic policy, or a gang member after its gang was admitted):
        the nodes it may go to (its group's domain, or the nodes that have the
        labels before any member is placed), a message when the request is bad,
        None when the pod has no such group. With `profile`, the domains of the
        groups of groups above its group too (`enclosing`)."""
        own = self._own_within(pod)
        if profile is None or isinstance(own, str):
            return own
        return self.enclosing(profile, pod, own)

    def enclosing(
        self, profile: Profile, pod: Pod, within: NodeSubset | None
    ) -> NodeSubset | str | None:
        """`within` narrowed to the domain of each group of groups above the
        pod's group that sets a topology key (where its subtree runs, or the
        nodes that have the label before any of its pods is placed)."""
        plugin = profile.group_scheduling
        if plugin is None or pod.group_key is None:
            return within
        for tree in plugin.enclosing_trees(pod):
            keys = (tree.topology,)
            if label_missing(self.ctx.snapshot, tree.topology):
                return f"{tree.label}: no node has the label {tree.topology!r}"
            try:
                running = self.running_domain([t.key for t in tree.leaves()], keys)
            except TopologyError as e:
                return f"{tree.label}: {e}"
            within = _narrow(within, self._domain_subset(keys, running, tree.topology))
        return within

    def _domain_subset(
        self, keys: tuple[str, ...], running: tuple[str, ...] | None, level: str
    ) -> NodeSubset:
        snap = self.ctx.snapshot
        ds = DomainSet.build(snap, keys, snap.valid_rows())
        if running is None:
            return NodeSubset(np.sort(ds.rows), f"node(s) without the label(s) {level}")
        for i, v in enumerate(ds.values):
            if v == running:
                return ds.domain(i).subset()
        return NodeSubset(_NO_ROWS, f"node(s) outside {level} the group runs in")

    def _own_within(self, pod: Pod) -> NodeSubset | str | None:
        group = pod.group_key
        if group is None:
            return None
        pg = self.ctx.cache.pod_group(group)
        if pg is None:
            return None
        try:
            spec = topology_of(pg)
        except TopologyError as e:
            return f'PodGroup "{group}": {e}'
        if not spec.required:
            return None
        problem = self._check(spec)
        if problem is not None:
            return f'PodGroup "{group}": {problem}'
        try:
            running = self.running_domain(group, spec.required)
        except TopologyError as e:
            return f'PodGroup "{group}": {e}'
        return self._domain_subset(spec.required, running, ",".join(spec.required))

    async def _record(
        self, ref: ObjectRef, kind: str, reason: str, message: str, action: str
    ) -> None:
        try:
            await self.ctx.client.record_event(ref, kind, reason, message, action)
        except Exception as e:
            log.warning("could not record the %s event of %s: %s", reason, ref.name, e)

    def _place(
        self,
        profile: Profile,
        members: list[QueuedPodInfo],
        within: NodeSubset | None,
    ) -> Trial:
        """Search every member in turn on the snapshot (`within` those nodes),
        each placement charged before the next member is searched; nothing stays
        charged afterwards."""
        trial = Trial()
        # What plugins charge outside the snapshot (a member's devices).
        undos: list[Callable[[], None]] = []
        snap = self.ctx.snapshot
        with snap.overlay() as placed:
            try:
                self._place_each(profile, members, within, trial, placed, undos)
            finally:
                for undo in reversed(undos):
                    undo()
        return trial

    def _place_each(
        self,
        profile: Profile,
        members: list[QueuedPodInfo],
        within: NodeSubset | None,
        trial: Trial,
        placed: Overlay,
        undos: list[Callable[[], None]],
    ) -> None:
        ctx = self.ctx
        snap = ctx.snapshot
        for qpi in members:
            t_pod = time.perf_counter()
            state = CycleState()
            result = self.pods.schedule_pod(
                profile, state, qpi.pod, post_filter=False, within=within
            )
            trial.seconds[qpi.pod.key] = time.perf_counter() - t_pod
            if ctx.observe is not None:
                group = str(qpi.pod.group_key or "")
                ctx.observe(profile, qpi.pod, result, group, within.reason if within else "")
            if isinstance(result, ScheduleResult):
                row = snap.row_of[result.node]
                placed.add(row, qpi.pod, pod_charge(qpi.pod, ctx.isolated))
                undos.extend(profile.run_trial_charge(state, qpi.pod, result.node))
                trial.placements.append((qpi, state, result.node))
            else:
                trial.failures.append((qpi, result))

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
        self._rounds.pop(group, None)
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
            self._preemption_note = "not tried: the profile has no PostFilter for gangs"
            return None
        pg = ctx.cache.pod_group(group)
        if pg is not None and pg.preemption_policy:
            if pg.preemption_policy == PREEMPT_NEVER:
                self._preemption_note = "not tried: the PodGroup's preemptionPolicy is Never"
                return None  # the group's own policy (v1beta1) rules its members'
        elif any(q.pod.preemption_policy == PREEMPT_NEVER for q in members):
            self._preemption_note = "not tried: a member's preemptionPolicy is Never"
            return None
        waiting = self.gang_victims.get(group, ())
        if any(ctx.cache.pod(k) is not None for k in waiting):
            self._preemption_note = "not tried: waiting for its last preemption's victims to go"
            return None
        ctx.metrics.preemption_attempts.inc()
        snap = ctx.snapshot
        # The gang's priority: the PodGroup's (spec.priority or its class), else
        # its lowest member's. No victim may reach it; members preempt with it.
        group_priority = pg.resolved_priority(ctx.priority_classes) if pg is not None else None
        priority = (
            group_priority if group_priority is not None else min(q.pod.priority for q in members)
        )
        plan = PreemptionPlan(plugin)
        # What plugins hold outside the snapshot for each member placed (its
        # devices), as in the group trial: the next member is searched with it.
        undos: list[Callable[[], None]] = []
        with snap.overlay() as ov:
            try:
                self._plan_members(
                    profile, members, min_member, placed_before, within, priority, plan, ov, undos
                )
            finally:
                for undo in reversed(undos):
                    undo()
        if placed_before + len(plan.chosen) < min_member:
            where = f" in {within.reason.removeprefix('node(s) outside ')}" if within else ""
            note = (
                f"tried{where}: evicting lower-priority pods would place only "
                f"{placed_before + len(plan.chosen)} of {min_member}"
            )
            # one note per domain tried
            self._preemption_note = "; ".join(filter(None, (self._preemption_note, note)))
            return None
        return plan

    def _plan_members(
        self,
        profile: Profile,
        members: list[QueuedPodInfo],
        min_member: int,
        placed_before: int,
        within: NodeSubset | None,
        priority: int,
        plan: PreemptionPlan,
        ov: Overlay,
        undos: list[Callable[[], None]],
    ) -> None:
        """`_plan_preemption`'s search, member by member; stops early (the plan
        then falls short) when a member can be placed neither as things are nor
        by preemption."""
        ctx = self.ctx
        snap = ctx.snapshot
        plugin = plan.plugin
        base = len(plan.chosen)  # chosen for other groups of the plan (a tree's)
        for qpi in members:
            if placed_before + len(plan.chosen) - base >= min_member:
                break
            state = CycleState()
            result = self.pods.schedule_pod(
                profile, state, qpi.pod, post_filter=False, within=within
            )
            cand: PreemptionCandidate | None = None
            if isinstance(result, ScheduleResult):
                node = result.node
            elif isinstance(result, FitError):
                preemptor = qpi.pod
                if preemptor.priority != priority:
                    preemptor = replace(preemptor, priority=priority)
                found = profile.run_member_preemption(
                    plugin, state, preemptor, priority, plan.victims(), within
                )
                if found is None or isinstance(found, Status):
                    return
                out = []
                for v in found.victims:
                    vrow = snap.row_of.get(ctx.cache.pod_node(v.key) or "")
                    if vrow is not None and v.key in snap.pods[vrow]:
                        ov.remove(vrow, v, pod_charge(v, ctx.isolated))
                        out.append(v)
                # what plugins charge for them outside the snapshot (a quota's use)
                undos.extend(profile.run_trial_release(state, qpi.pod, out))
                node, cand = found.node, found
            else:
                return
            ov.add(snap.row_of[node], qpi.pod, pod_charge(qpi.pod, ctx.isolated))
            undos.extend(profile.run_trial_charge(state, qpi.pod, node))
            plan.chosen.append((qpi, node, cand))

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
            self._preemption_note = "tried: the members fit without victims, nominated"
            return False
        self._preemption_note = f"evicting {len(victims)} pod(s); the gang waits for them to go"
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


def _nodes(tree: GroupTree) -> Iterator[GroupTree]:
    """The tree's nodes, itself first."""
    yield tree
    for c in tree.children:
        yield from _nodes(c)


def _group_policy(tree: GroupTree, group: GroupKey) -> bool:
    """Whether the PodGroup `group` of the tree sets its own preemptionPolicy
    (which then rules its members', as for a lone gang)."""
    return any(
        t.group is not None and t.group.preemption_policy for t in tree.leaves() if t.key == group
    )


def _narrow(within: NodeSubset | None, subset: NodeSubset) -> NodeSubset:
    """The nodes of both (the narrower's reason for those outside)."""
    if within is None:
        return subset
    rows = np.intersect1d(within.rows, subset.rows, assume_unique=True)
    return NodeSubset(rows, subset.reason if len(rows) < len(within.rows) else within.reason)


def _gang(profile: Profile) -> GroupSchedulingPlugin:
    """The profile's GroupSchedulingPlugin: a group cycle runs only with one."""
    plugin = profile.group_scheduling
    assert plugin is not None, f"profile {profile.scheduler_name} schedules no gangs"
    return plugin
