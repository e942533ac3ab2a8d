"""The rules every preemption keeps for gangs, whichever plugin selects the
victims: a pod never evicts a member of its own group; a running gang is never
left below minMember (a member goes only if its gang keeps its quorum without
the members taken with it); a native group whose disruptionMode is All is one
preemption unit (`units.Units`; so is a CompositePodGroup's subtree whose
disruptionMode is All, with the gate on): it goes whole, every placed member on every
node, for a lone pod as for a gang, and only for a preemptor of higher
priority than the unit's; a gang preemptor may take a lower gang whole
(`expand_gangs`), and not at all if one of its placed members has the
preemptor's priority or higher. A victim's priority is its PodGroup's when the
group sets one (`Units.priority`). Members already on their way out (deleting,
or chosen by an earlier preemption: `victims_of`) never count as placed, so
that two preemptions do not each take one. A plugin may let a preemptor take
some victims whatever their priority (`Interface.reclaims`: a quota under its
min reclaiming from quotas over theirs); the gang rules then take those
victims' gangs whole as if they were of lower priority."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from troupe.api.types import Pod, PodKey
from troupe.framework.handle import ClusterLister
from troupe.framework.preemption.units import Units


def gang_safe_victims(
    pod: Pod,
    lower: Iterable[Pod],
    lister: ClusterLister,
    victims_of: Collection[PodKey],
    units: Units,
    whole_gangs: bool = False,
    outranks: Callable[[Pod], bool] | None = None,
) -> list[Pod]:
    """Of `lower` (one node's pods a plugin would evict for `pod`), those the gang
    rules let go: never of the preemptor's own group; a member of a group whose
    disruptionMode is All if the group's unit priority is below `pod`'s (the
    whole group then goes, `DryRun` adds its members on other nodes); another
    gang's member only if its gang keeps minMember placed pods without the
    members on this node, or (`whole_gangs`, for a gang preemptor) if every
    placed member of its gang is of lower priority than `pod`: it is then taken
    with its whole gang (`expand_gangs`). `outranks`: the victims the plugin
    lets the preemptor take whatever their priority (a quota's reclaim)."""
    own = pod.group_key
    out = [p for p in lower if own is None or p.group_key != own]
    groups = {p.group_key for p in out if p.group_key is not None}
    if not groups:
        return out
    keep: set[Any] = set()
    for g in groups:
        pg = lister.pod_group(g)
        if pg is None:
            keep.add(g)
            continue
        unit = units.whole_unit(g)
        if unit is not None:  # one unit: whole or not at all
            if units.unit_priority(unit) < pod.priority or (
                outranks is not None and all(outranks(m) for m in units.members(unit))
            ):
                keep.add(g)
            continue
        placed = sum(
            1
            for p in lister.pods_in_group(g)
            if (q := lister.pod(p.key)) is not None and not q.deleting and p.key not in victims_of
        )
        here = sum(1 for p in out if p.group_key == g)
        if placed - here >= pg.min_member or (
            whole_gangs
            and all(
                units.priority(p) < pod.priority or (outranks is not None and outranks(p))
                for p in lister.pods_in_group(g)
                if lister.pod(p.key)
            )
        ):
            keep.add(g)
    return [p for p in out if p.group_key is None or p.group_key in keep]


def expand_gangs(
    victims: Iterable[Pod],
    priority: int,
    lister: ClusterLister,
    victims_of: Mapping[PodKey, PodKey],
    units: Units,
    taken: Iterable[PodKey] = (),
    outranks: Callable[[Pod], bool] | None = None,
) -> list[Pod] | None:
    """The victims of a gang preemptor of `priority`, with the whole gang of
    each victim whose gang would fall below minMember without them (or whose
    disruptionMode is All), or None if such a gang has a placed member of
    `priority` or higher (it cannot be taken whole, so it cannot be taken at
    all). `taken`: victims already chosen for the same preemptor (its other
    members' nodes), which count as gone. `outranks`: the victims the plugin
    lets the preemptor take whatever their priority (a quota's reclaim)."""

    def lower(p: Pod) -> bool:
        return units.priority(p) < priority or (outranks is not None and outranks(p))

    out = {p.key: p for p in victims}
    gone = set(taken) | out.keys()
    for g in {p.group_key for p in out.values() if p.group_key is not None}:
        pg = lister.pod_group(g)
        unit = units.whole_unit(g) if pg is not None else None
        if unit is not None:
            members = units.members(unit)
            if units.unit_priority(unit) >= priority and not all(lower(q) for q in members):
                return None
            for member in members:
                out.setdefault(member.key, member)
            continue
        placed = [
            q
            for m in lister.pods_in_group(g)
            if (q := lister.pod(m.key)) is not None and not q.deleting and q.key not in victims_of
        ]
        left = sum(1 for q in placed if q.key not in gone)
        if pg is None or left >= pg.min_member:
            continue  # no gang to keep, or it keeps its quorum without these
        if not all(lower(q) for q in placed):
            return None
        for q in placed:
            out.setdefault(q.key, q)
    if not all(lower(p) for p in out.values()):
        return None
    return sorted(out.values(), key=units.importance)
