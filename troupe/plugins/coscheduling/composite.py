"""CompositePodGroups for Coscheduling (Kubernetes 1.37, alpha, behind the
CompositePodGroup feature gate): the trees of groups the group cycle places.

A PodGroup that names a parent (spec.parentCompositePodGroupName) belongs to
the tree above it. Its pods wait at PreEnqueue, saying why, while the tree is
not valid: a parent not found or unreadable, parents that form a cycle, a tree
deeper than Workload's WorkloadMaxTreeDepth (4), or groups of more than one
Workload. The topmost gang composite above a group, while fewer than its
minGroupCount children are satisfied, is the unit its pods' group cycle places
all-or-nothing; after that, each child gang is placed on its own (its minCount),
and every pod stays in the domain of each composite above it that sets a
topology key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from troupe.api.types import (
    PREEMPT_NEVER,
    CompositePodGroup,
    GroupKey,
    Pod,
    PodGroup,
    PriorityClass,
    composite_key,
)
from troupe.core.topology import TopologyError, topology_of
from troupe.framework.events import ClusterEvent
from troupe.framework.group_tree import GroupTree
from troupe.framework.handle import ClusterLister, Handle
from troupe.framework.status import Code
from troupe.framework.status_writer import StatusWriter, status_holds
from troupe.plugins.coscheduling.status import failure_reason, scheduled_condition

# Workload's WorkloadMaxTreeDepth: the most levels a tree of groups may have.
MAX_TREE_DEPTH: Final = 4


def composite_name(c: CompositePodGroup) -> str:
    return f'CompositePodGroup "{c.namespace}/{c.name}"'


class Composites:
    """Reads the trees of groups through the lister; `placed` counts a group's
    placed members (Coscheduling's PodGroupManager)."""

    def __init__(
        self,
        lister: ClusterLister,
        placed: Callable[[GroupKey], int],
        classes: Mapping[str, PriorityClass],
    ) -> None:
        self._lister = lister
        self._placed = placed
        self._classes = classes  # PriorityClasses by name, kept up to date by the cache

    def chain(self, pg: PodGroup | CompositePodGroup) -> tuple[list[CompositePodGroup], str | None]:
        """The CompositePodGroups above `pg`, its parent first, and what makes
        the tree invalid (None when it is valid as far as it was read)."""
        lister, ns = self._lister, pg.namespace
        out: list[CompositePodGroup] = []
        seen: set[GroupKey] = {pg.key}
        depth = 1 if isinstance(pg, PodGroup) else 2  # a composite has children below
        parent = pg.parent
        while parent:
            key = composite_key(ns, parent)
            c = lister.composite(key)
            name = f'CompositePodGroup "{ns}/{parent}"'
            if c is None:
                problem = lister.invalid_pod_group(key)
                return out, f"{name} is invalid: {problem}" if problem else f"{name} not found"
            if key in seen:
                return out, f"{name}: the groups' parents form a cycle"
            seen.add(key)
            out.append(c)
            if len(out) + depth > MAX_TREE_DEPTH:
                return out, (
                    f"{composite_name(out[-1])}: the tree of groups is deeper than "
                    f"{MAX_TREE_DEPTH} levels"
                )
            parent = c.parent
        return out, None

    def composite_problem(self, c: CompositePodGroup) -> str | None:
        """Why the tree the composite `c` belongs to is invalid, or None."""
        chain, problem = self.chain(c)
        if problem is not None:
            return problem
        return self._workloads_problem([c, *chain])

    def problem(self, pg: PodGroup) -> str | None:
        """Why the tree `pg` belongs to is invalid, or None."""
        chain, problem = self.chain(pg)
        if problem is not None or not chain:
            return problem
        return self._workloads_problem(chain)

    def _workloads_problem(self, chain: list[CompositePodGroup]) -> str | None:
        workloads = sorted(
            {c.workload for c in self._walk(chain[-1]) if c.workload}
            | {
                g.template_ref[0]
                for g in self._groups(chain[-1])
                if g.template_ref is not None and g.template_ref[0]
            }
        )
        if len(workloads) > 1:
            return (
                f"{composite_name(chain[-1])}: the tree of groups references more than one "
                f"Workload ({', '.join(workloads)})"
            )
        return None

    def gang_root(self, chain: list[CompositePodGroup]) -> CompositePodGroup | None:
        """The topmost gang composite of `chain` (nearest first), if any."""
        return next((c for c in reversed(chain) if c.gang), None)

    def tree(self, c: CompositePodGroup, depth: int = 1) -> GroupTree:
        """The composite's subtree, with what is placed already counted."""
        children: list[GroupTree] = []
        if depth < MAX_TREE_DEPTH:
            for k in self._lister.composite_children(c.key):
                cc = self._lister.composite(k)
                if cc is not None:
                    children.append(self.tree(cc, depth + 1))
                    continue
                pg = self._lister.pod_group(k)
                if pg is not None:
                    children.append(self.leaf(pg))
        return GroupTree(
            key=c.key,
            label=composite_name(c),
            need=c.min_group_count if c.gang else 1,
            need_name="minGroupCount",
            placed=sum(1 for t in children if t.satisfied),
            topology=c.topology_key,
            children=tuple(children),
            priority=c.resolved_priority(self._classes),
            never_preempts=c.preemption_policy == PREEMPT_NEVER,
        )

    def leaf(self, pg: PodGroup) -> GroupTree:
        try:
            level = ",".join(topology_of(pg).required)
        except TopologyError:
            level = ""  # said by the group's own checks when its pods are placed
        return GroupTree(
            key=pg.key,
            label=f'PodGroup "{pg.key}"',
            need=pg.min_member,
            need_name="minCount",
            placed=self._placed(pg.key),
            topology=level,
            group=pg,
        )

    def _walk(self, c: CompositePodGroup, depth: int = 1) -> Iterator[CompositePodGroup]:
        yield c
        if depth >= MAX_TREE_DEPTH:
            return
        for k in self._lister.composite_children(c.key):
            cc = self._lister.composite(k)
            if cc is not None:
                yield from self._walk(cc, depth + 1)

    def _groups(self, c: CompositePodGroup) -> Iterator[PodGroup]:
        for x in self._walk(c):
            for k in self._lister.composite_children(x.key):
                pg = self._lister.pod_group(k)
                if pg is not None:
                    yield pg


# ---- status --------------------------------------------------------------------------

# CompositePodGroupStatus's condition type, and its reason for a layout that
# cannot be scheduled (k8s.io/api scheduling/v1alpha3).
INITIALLY_SCHEDULED: Final = "CompositePodGroupInitiallyScheduled"
REASON_INVALID: Final = "Invalid"


def compute_composite_status(
    c: CompositePodGroup,
    satisfied: bool,
    problem: str | None,
    failure: tuple[str, Code] | None,
    now: float,
) -> dict[str, Any] | None:
    """The status of a CompositePodGroup, or None when there is nothing to say:
    CompositePodGroupInitiallyScheduled True once its subtree's need is met
    (never taken back, as upstream says), else False with reason Invalid (a
    layout that cannot be scheduled), SchedulerError or Unschedulable (the
    message a pending pod of its subtree failed with)."""
    why = (REASON_INVALID, problem) if problem is not None else failure_reason(failure)
    return scheduled_condition(c.status, INITIALLY_SCHEDULED, c.generation, now, satisfied, "", why)


class CompositeStatusWriter(StatusWriter[GroupKey, CompositePodGroup, dict[str, Any]]):
    """Writes the conditions of the CompositePodGroups above the groups whose
    pods, groups or composites the Handle's events change, and of those the
    plugin `mark_above`s (an attempt)."""

    def __init__(self, handle: Handle, composites: Composites, coalesce_seconds: float) -> None:
        super().__init__(
            handle,
            "CompositePodGroup",
            lookup=lambda key: handle.lister.composite(key),
            compute=self._compute,
            patch=lambda key, _c, status: handle.client.patch_composite_pod_group_status(
                key, status
            ),
            same=status_holds,
            coalesce_seconds=coalesce_seconds,
        )
        self.composites = composites
        handle.watch(self.on_event)

    def mark_above(self, group: GroupKey | None) -> None:
        """Mark every composite above the PodGroup `group`."""
        pg = self.handle.lister.pod_group(group) if group is not None else None
        if pg is not None and pg.parent:
            for c in self.composites.chain(pg)[0]:
                self.mark(c.key)

    def on_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        for obj in (old, new):
            if isinstance(obj, Pod):
                self.mark_above(obj.group_key)
            elif isinstance(obj, PodGroup):
                self.mark_above(obj.key)
            elif isinstance(obj, CompositePodGroup):
                self.mark(obj.key)

    def _compute(self, key: GroupKey, c: CompositePodGroup) -> dict[str, Any] | None:
        lister = self.handle.lister
        tree = self.composites.tree(c)
        problem = self.composites.composite_problem(c)
        failure = None
        for leaf in tree.leaves():
            for p in lister.pods_in_group(leaf.key):
                if lister.pod(p.key) is None and not p.terminal:
                    failure = self.handle.failure(p.key)
                    if failure is not None:
                        break
            if failure is not None:
                break
        return compute_composite_status(
            c, tree.satisfied and problem is None, problem, failure, self.handle.clock.now()
        )
