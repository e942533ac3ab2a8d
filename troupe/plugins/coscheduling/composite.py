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

from collections.abc import Callable, Iterator
from typing import Final

from troupe.api.types import CompositePodGroup, GroupKey, PodGroup, composite_key
from troupe.core.topology import TopologyError, topology_of
from troupe.framework.group_tree import GroupTree
from troupe.framework.handle import ClusterLister

# Workload's WorkloadMaxTreeDepth: the most levels a tree of groups may have.
MAX_TREE_DEPTH: Final = 4


def composite_name(c: CompositePodGroup) -> str:
    return f'CompositePodGroup "{c.namespace}/{c.name}"'


class Composites:
    """Reads the trees of groups through the lister; `placed` counts a group's
    placed members (Coscheduling's PodGroupManager)."""

    def __init__(self, lister: ClusterLister, placed: Callable[[GroupKey], int]) -> None:
        self._lister = lister
        self._placed = placed

    def chain(self, pg: PodGroup) -> tuple[list[CompositePodGroup], str | None]:
        """The CompositePodGroups above `pg`, its parent first, and what makes
        the tree invalid (None when it is valid as far as it was read)."""
        lister, ns = self._lister, pg.namespace
        out: list[CompositePodGroup] = []
        seen: set[GroupKey] = set()
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
            if len(out) + 1 > MAX_TREE_DEPTH:
                return out, (
                    f"{composite_name(out[-1])}: the tree of groups is deeper than "
                    f"{MAX_TREE_DEPTH} levels"
                )
            parent = c.parent
        return out, None

    def problem(self, pg: PodGroup) -> str | None:
        """Why the tree `pg` belongs to is invalid, or None."""
        chain, problem = self.chain(pg)
        if problem is not None or not chain:
            return problem
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
