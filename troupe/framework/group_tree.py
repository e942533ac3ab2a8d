"""A tree of groups: what the group cycle places all-or-nothing when a gang is
a group of groups (Kubernetes 1.37's CompositePodGroup, alpha).

The GroupSchedulingPlugin builds it (Coscheduling, from the CompositePodGroups
and PodGroups its lister holds); the core places it and reads nothing else.
A node is either a leaf, one PodGroup whose members are placed, or a composite
whose children are nodes. A node is satisfied when at least `need` of its
members (a leaf) or of its children (a composite) are placed, counting those
placed already (`placed`): a gang PodGroup's `need` is its minCount, a basic
one's 1; a gang composite's is its minGroupCount, a basic one's 1. A node with
a `topology` key has all the pods of its subtree in one domain of that label.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from troupe.api.types import GroupKey, PodGroup


@dataclass(frozen=True, slots=True)
class GroupTree:
    key: GroupKey
    label: str  # for messages: 'CompositePodGroup "ns/name"', 'PodGroup "ns/name"'
    need: int  # members (a leaf) or children (a composite) placed together
    need_name: str  # what the API calls `need`: minCount, minGroupCount
    placed: int  # members placed already (a leaf), children satisfied already
    topology: str = ""  # a node label key; "" for none
    children: tuple[GroupTree, ...] = ()
    group: PodGroup | None = None  # the leaf's PodGroup
    # A composite's priority (spec.priority, else its class's value), None when
    # it sets none, and whether its preemptionPolicy is Never: a gang of groups
    # preempts with its root's.
    priority: int | None = None
    never_preempts: bool = False

    @property
    def satisfied(self) -> bool:
        return self.placed >= self.need

    def leaves(self) -> Iterator[GroupTree]:
        if self.group is not None:
            yield self
        for c in self.children:
            yield from c.leaves()
