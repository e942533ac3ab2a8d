"""VolumeRestrictions: volumes that cannot be shared
(volumerestrictions/volume_restrictions.go).

* ReadWriteOncePod: a pod whose claim has that access mode does not fit
  anywhere while another placed pod uses the claim.
* In-tree disks: the same GCE PD on one node conflicts unless every mount is
  read-only; the same AWS EBS volume always; an RBD image (overlapping
  monitors, same pool and image) and an ISCSI IQN unless every mount is
  read-only.

The volume store indexes the disks placed pods mount by disk id, so Filter
looks only at the nodes that hold the same disk, not at every node's pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from scheduler.api.storage import (
    READ_WRITE_ONCE_POD,
    PersistentVolumeClaim,
    PodVolume,
    pod_volumes,
)
from scheduler.api.types import Pod
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.handle import Handle
from scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EnqueueExtensions,
    EventResource,
    FilterPlugin,
    FilterResult,
    IntpArray,
    PluginArgsError,
    PreFilterPlugin,
    PreFilterResult,
    QueueingHint,
)
from scheduler.framework.status import SKIP, SUCCESS, Code, Status, unresolvable
from scheduler.snapshot import NodeTable
from scheduler.volumes import VolumeStore

ERR_REASON_DISK_CONFLICT: Final = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT: Final = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
_STATE_KEY: Final = "PreFilterVolumeRestrictions"


@dataclass(frozen=True, slots=True)
class _State:
    disks: tuple[PodVolume, ...]
    conflicting_rwop: int


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

    def __init__(self, store: VolumeStore | None = None) -> None:
        self.store = store or VolumeStore()

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            raise PluginArgsError(str(k), "unknown field: the plugin takes no arguments")
        return cls(handle.volumes)

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        vols = pod_volumes(pod)
        if not any(v.claim or v.disk_kind for v in vols):
            return None, SKIP
        conflicting = 0
        for v in vols:
            if not v.claim:
                continue
            pvc = self.store.pvc(f"{pod.namespace}/{v.claim}")
            if pvc is None:
                return None, unresolvable(
                    f'persistentvolumeclaim "{v.claim}" not found', plugin=self.NAME
                )
            if READ_WRITE_ONCE_POD in pvc.access_modes:
                conflicting += self.store.claim_users(pvc.key)
        state.write(_STATE_KEY, _State(tuple(v for v in vols if v.disk_kind), conflicting))
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        s = state.read(_STATE_KEY, _State)
        n = len(rows)
        disk = np.zeros(n, dtype=bool)
        if s.disks:
            where = np.full(nodes.capacity, -1, dtype=np.intp)
            where[rows] = np.arange(n)
            for v in s.disks:
                for node, existing in self.store.disk_users(v.disk_kind, v.disk_id).items():
                    row = nodes.row_of.get(node)
                    if row is None or not any(is_volume_conflict(v, e) for e in existing):
                        continue
                    if where[row] >= 0:
                        disk[where[row]] = True
        rwop = np.full(n, s.conflicting_rwop > 0, dtype=bool)
        return FilterResult(
            (ERR_REASON_RWOP_CONFLICT, ERR_REASON_DISK_CONFLICT),
            np.stack([rwop, disk & ~rwop], axis=1),
            (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE),
        )

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
