"""Preemption units (kube-scheduler 1.37's framework/preemption types.go and
util.go: Victim, MoreImportantVictim, getPodPriority; facts carried over, code
not).

A unit is what preemption takes all of or nothing of: a native PodGroup whose
`disruptionMode` is All is one unit with every placed member, on whatever
nodes they run; any other pod is a unit of its own. A victim's priority is its
PodGroup's when the group sets one (`spec.priority`, else its
priorityClassName's value), else its pod's; an All group that sets none counts
at its highest placed member's priority (upstream always has the group's, which
admission sets: Troupe never lets a pod of the preemptor's priority or higher
go with its group).

With the CompositePodGroup gate on, a CompositePodGroup whose
`disruptionMode` is All is one unit with every placed pod of its subtree (the
topmost such composite above a pod's PodGroup); its priority is the
composite's when it sets one, else its highest placed pod's.

Units are ordered by importance as upstream's MoreImportantVictim: higher
priority first; then a PodGroup's (a member of any native or scheduler-plugins
group, or a whole group) before a lone pod; then the larger unit; then the
earlier start (the unit's oldest pod); then the name. The dry runs reprieve the
most important unit first, and a candidate lists its victims in that order.

`Units` answers for one preemption attempt and remembers each group's answer
and each pod's start for the attempt (the cluster does not change during it);
the dry runs give it the starts they keep across attempts (`known_start`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from troupe.api.types import (
    DISRUPTION_ALL,
    CompositePodGroup,
    GroupKey,
    Pod,
    PodKey,
    PriorityClass,
    composite_key,
)
from troupe.framework.handle import ClusterLister
from troupe.framework.preemption.candidates import start_time

# A unit's rank among units of equal priority (upstream's victimRank): a
# PodGroup's before a lone pod's.
RANK_POD_GROUP = 2
RANK_POD = 1

# Sort key, most important first: (-priority, -rank, -size, earliest start,
# unit name, the pod's start, the pod's key); the last two order a unit's pods.
Importance = tuple[int, int, int, float, str, float, PodKey]


@dataclass(frozen=True, slots=True)
class _Group:
    priority: int | None  # the group's own (spec.priority or its class), None: unset
    whole: bool  # disruptionMode All: one unit
    members: tuple[Pod, ...]  # placed, not on their way out, oldest first


class Units:
    """The preemption units of one attempt, read through the cache's lister.
    Members on their way out (deleting, or chosen by an earlier preemption:
    `victims_of`) are not placed."""

    __slots__ = (
        "_classes",
        "_composites",
        "_groups",
        "_lister",
        "_starts",
        "_victims_of",
        "_whole",
    )

    def __init__(
        self,
        lister: ClusterLister,
        classes: Mapping[str, PriorityClass],
        victims_of: Collection[PodKey],
        composites: bool = False,
    ) -> None:
        self._lister = lister
        self._classes = classes
        self._victims_of = victims_of
        self._composites = composites  # the CompositePodGroup gate
        self._groups: dict[GroupKey, _Group | None] = {}
        self._starts: dict[PodKey, float] = {}
        # Per PodGroup, the composite unit (disruptionMode All) it is part of.
        self._whole: dict[GroupKey, GroupKey | None] = {}

    def known_start(self, key: PodKey, start: float) -> None:
        """The pod's start time, already read (saves reading it again)."""
        self._starts[key] = start

    def _start(self, pod: Pod) -> float:
        t = self._starts.get(pod.key)
        if t is None:
            t = self._starts[pod.key] = start_time(pod)
        return t

    def _placed(self, g: GroupKey) -> list[Pod]:
        lister = self._lister
        return [
            q
            for m in lister.pods_in_group(g)
            if (q := lister.pod(m.key)) is not None
            and q.node_name
            and not q.deleting
            and q.key not in self._victims_of
        ]

    def _group(self, g: GroupKey) -> _Group | None:
        """A PodGroup's, or a composite unit's (`g` a composite's key)."""
        if g in self._groups:
            return self._groups[g]
        lister = self._lister
        pg = lister.pod_group(g)
        info = None
        if pg is not None:
            members = self._placed(g)
            members.sort(key=lambda q: (self._start(q), q.key))
            info = _Group(
                pg.resolved_priority(self._classes),
                pg.disruption_mode == DISRUPTION_ALL,
                tuple(members),
            )
        elif (c := lister.composite(g)) is not None:
            members = [q for leaf in self._leaves(c) for q in self._placed(leaf)]
            members.sort(key=lambda q: (self._start(q), q.key))
            info = _Group(c.resolved_priority(self._classes), True, tuple(members))
        self._groups[g] = info
        return info

    def _leaves(self, c: CompositePodGroup, depth: int = 1) -> list[GroupKey]:
        """The PodGroups of the composite's subtree (at most 4 levels, as a
        valid tree has)."""
        out: list[GroupKey] = []
        for k in self._lister.composite_children(c.key):
            cc = self._lister.composite(k)
            if cc is None:
                out.append(k)
            elif depth < 4:
                out += self._leaves(cc, depth + 1)
        return out

    def _unit_of(self, g: GroupKey) -> GroupKey:
        """The unit a PodGroup's pods go with: the topmost composite above it
        whose disruptionMode is All (the gate on), else the group itself."""
        if not self._composites:
            return g
        if g in self._whole:
            return self._whole[g] or g
        lister = self._lister
        pg = lister.pod_group(g)
        unit: GroupKey | None = None
        parent, ns = (pg.parent, pg.namespace) if pg is not None else ("", "")
        seen: set[GroupKey] = set()
        while parent and len(seen) < 4:
            key = composite_key(ns, parent)
            c = lister.composite(key)
            if c is None or key in seen:
                break
            seen.add(key)
            if c.disruption_mode == DISRUPTION_ALL:
                unit = key
            parent = c.parent
        self._whole[g] = unit
        return unit or g

    def priority(self, pod: Pod) -> int:
        """The pod's priority as a victim (upstream's getPodPriority): its
        PodGroup's when the group sets one, else its own; a pod of a composite
        unit, the unit's."""
        g = pod.group_key
        if g is None:
            return pod.priority
        unit = self._unit_of(g)
        if unit != g:
            return self.unit_priority(unit)
        info = self._group(g)
        if info is not None and info.priority is not None:
            return info.priority
        return pod.priority

    def whole_group(self, pod: Pod) -> GroupKey | None:
        """The unit the pod goes only whole with (its PodGroup's disruptionMode
        All, or a composite's above it), else None."""
        g = pod.group_key
        return self.whole_unit(g) if g is not None else None

    def whole_unit(self, g: GroupKey) -> GroupKey | None:
        """The unit the PodGroup `g`'s pods go only whole with, else None."""
        u = self._unit_of(g)
        info = self._group(u)
        return u if info is not None and info.whole else None

    def members(self, g: GroupKey) -> tuple[Pod, ...]:
        """The group's placed members (on every node), oldest first."""
        info = self._group(g)
        return info.members if info is not None else ()

    def unit_priority(self, g: GroupKey) -> int:
        """A whole group's priority as one unit: the group's own, else its
        highest placed member's."""
        info = self._group(g)
        if info is None:
            return 0
        if info.priority is not None:
            return info.priority
        return max((q.priority for q in info.members), default=0)

    def importance(self, pod: Pod) -> Importance:
        """The sort key of the pod's unit, most important first, then of the pod
        within it (upstream's MoreImportantVictim over units)."""
        start = self._start(pod)
        g = pod.group_key
        if g is None:
            return (-pod.priority, -RANK_POD, -1, start, str(pod.key), start, pod.key)
        g = self._unit_of(g)
        info = self._group(g)
        if info is not None and info.whole and info.members:
            earliest = min(start, self._start(info.members[0]))
            size = max(len(info.members), 1)
            return (-self.unit_priority(g), -RANK_POD_GROUP, -size, earliest, g, start, pod.key)
        prio = self.priority(pod)
        return (-prio, -RANK_POD_GROUP, -1, start, str(pod.key), start, pod.key)
