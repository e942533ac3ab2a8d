"""VolumeRestrictions: volumes that cannot be shared
(volumerestrictions/volume_restrictions.go).

* ReadWriteOncePod: a pod whose claim has that access mode does not fit
  anywhere while another placed pod uses the claim.
* In-tree disks: the same GCE PD on one node conflicts unless every mount is
  read-only; the same AWS EBS volume always; an RBD image (overlapping
  monitors, same pool and image) and an ISCSI IQN unless every mount is
  read-only.

The volume store indexes the disks placed pods mount by disk id, and the pods
using each claim, so Filter looks only at the nodes that hold the same disk or
claim, not at every node's pods. What Filter counts is what the snapshot holds,
as upstream's NodeInfo: a user that preemption's dry run took off its node
does not conflict there (upstream's RemovePod), and a nominated pod the
scheduler charged to a node for this pass does (AddPod; by claim name, as
upstream compares them).

As upstream: only `persistentVolumeClaim` volumes are looked up (a generic
ephemeral volume's claim is VolumeBinding's to wait for); PreFilter skips a
pod with no in-tree disk and no ReadWriteOncePod claim in use; on a node with
both conflicts the disk conflict is the reason given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from troupe.api.storage import (
    READ_WRITE_ONCE_POD,
    PersistentVolumeClaim,
    PodVolume,
    pod_volumes,
)
from troupe.api.types import Pod, PodKey
from troupe.core.snapshot import NodeTable
from troupe.core.volumes import VolumeStore
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.filtering import FilterResult
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    BoolArray,
    EnqueueExtensions,
    FilterPlugin,
    IntpArray,
    PluginArgsError,
    PreFilterPlugin,
    PreFilterResult,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status, unresolvable

ERR_REASON_DISK_CONFLICT: Final = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT: Final = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
_STATE_KEY: Final = "PreFilterVolumeRestrictions"


@dataclass(frozen=True, slots=True)
class _State:
    disks: tuple[PodVolume, ...]
    # Names of the pod's ReadWriteOncePod claims, and the placed pods using them.
    rwop_names: frozenset[str]
    rwop_users: tuple[tuple[PodKey, str], ...]


def is_volume_conflict(v: PodVolume, existing: PodVolume) -> bool:
    """isVolumeConflict for two mounts of the same disk id and kind."""
    if v.disk_kind != existing.disk_kind or v.disk_id != existing.disk_id:
        return False
    both_ro = v.read_only and existing.read_only
    if v.disk_kind == "aws":
        return True
    if v.disk_kind == "rbd":
        return bool(v.monitors & existing.monitors) and not both_ro
    return not both_ro  # gce, iscsi


class VolumeRestrictions(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME: Final = "VolumeRestrictions"

    def __init__(self, store: VolumeStore | None = None, handle: Handle | None = None) -> None:
        self.store = store or VolumeStore()
        self.nominator = handle.nominator if handle is not None else None

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            raise PluginArgsError(str(k), "unknown field: the plugin takes no arguments")
        return cls(handle.volumes, handle)

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        vols = pod_volumes(pod)
        names: set[str] = set()
        users: dict[PodKey, str] = {}
        for v in vols:
            if not v.claim or v.ephemeral:
                continue
            pvc = self.store.pvc(f"{pod.namespace}/{v.claim}")
            if pvc is None:
                return None, unresolvable(
                    f'persistentvolumeclaim "{v.claim}" not found', plugin=self.NAME
                )
            if READ_WRITE_ONCE_POD in pvc.access_modes:
                names.add(pvc.name)
                users.update(self.store.claim_users(pvc.key))
        disks = tuple(v for v in vols if v.disk_kind)
        if not disks and not users:
            return None, SKIP
        state.write(_STATE_KEY, _State(disks, frozenset(names), tuple(users.items())))
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        s = state.read(_STATE_KEY, _State)
        n = len(rows)
        where = np.full(nodes.capacity, -1, dtype=np.intp)
        where[rows] = np.arange(n)
        disk = np.zeros(n, dtype=bool)
        for v in s.disks:
            for node, existing in self.store.disk_users(v.disk_kind, v.disk_id).items():
                row = nodes.row_of.get(node)
                if row is None or where[row] < 0:
                    continue
                here = nodes.pods[row]
                if any(key in here and is_volume_conflict(v, e) for key, e in existing):
                    disk[where[row]] = True
        # IsPVCUsedByPods over the snapshot, less a user that RemovePod took off
        # the very row evaluated (preemption's dry run).
        users = 0
        removed = np.zeros(n, dtype=np.int64)
        for key, node in s.rwop_users:
            row = nodes.row_of.get(node)
            if row is None:
                continue
            users += 1
            if where[row] >= 0 and key not in nodes.pods[row]:
                removed[where[row]] += 1
        rwop = users - removed > 0
        self._nominated(pod, s, nodes, where, disk, rwop)
        return FilterResult(
            (ERR_REASON_DISK_CONFLICT, ERR_REASON_RWOP_CONFLICT),
            np.stack([disk, rwop & ~disk], axis=1),
            (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE),
        )

    def _nominated(
        self,
        pod: Pod,
        s: _State,
        nodes: NodeTable,
        where: IntpArray,
        disk: BoolArray,
        rwop: BoolArray,
    ) -> None:
        """AddPod: the nominated pods charged to a row for this pass (in the
        snapshot, not placed in the cache) conflict there."""
        nominator = self.nominator
        if nominator is None or not len(nominator):
            return
        for node in list(nominator.nodes()):
            row = nodes.row_of.get(node)
            if row is None or where[row] < 0:
                continue
            for p in nominator.pods_on(node):
                if p.key == pod.key or p.key not in nodes.pods[row] or self.store.is_placed(p.key):
                    continue
                theirs = pod_volumes(p)
                if any(v.claim in s.rwop_names for v in theirs if v.claim and not v.ephemeral):
                    rwop[where[row]] = True
                if any(is_volume_conflict(a, b) for a in s.disks for b in theirs if b.disk_kind):
                    disk[where[row]] = True

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), _after_pod_deleted
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE
                ),
                _after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
        ]


def _after_pod_deleted(pod: Pod, old: Any, new: Any) -> QueueingHint:
    """A deleted pod helps if it shared a claim or a conflicting disk with `pod`."""
    if not isinstance(old, Pod):
        return QueueingHint.QUEUE
    mine = pod_volumes(pod)
    theirs = pod_volumes(old)
    if old.namespace == pod.namespace:
        claims = {v.claim for v in theirs if v.claim}
        if any(v.claim in claims for v in mine if v.claim):
            return QueueingHint.QUEUE
    if any(is_volume_conflict(a, b) for a in mine if a.disk_kind for b in theirs if b.disk_kind):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_claim_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    if not isinstance(new, PersistentVolumeClaim):
        return QueueingHint.QUEUE
    if new.namespace == pod.namespace and any(v.claim == new.name for v in pod_volumes(pod)):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
