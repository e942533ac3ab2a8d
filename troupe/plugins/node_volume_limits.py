"""NodeVolumeLimits: how many CSI volumes a node may attach, per driver
(nodevolumelimits/csi.go).

A CSINode publishes, per driver, ``allocatable.count``. What counts, as
upstream's filterAttachableVolumes: the PV of each `persistentVolumeClaim` or
generic ephemeral volume, by its CSI driver and volume handle, an unbound
claim (or one whose PV is gone) as a volume still to be created by its class's
provisioner; and in-tree volumes CSI migration covers (AWS EBS, GCE PD, Azure
Disk, Cinder: PVs, inline volumes and provisioners), as the CSI driver they
translate to (csi-translation-lib). Inline `csi` volumes do not count. A
volume is counted once per node however many pods use it (driver/handle).

On a node, the volumes attached are those of the pods the snapshot holds
there: placed pods (from the volume store's per-node index), less those a
preemption dry run took off, plus the nominated pods charged to it for the
pass. The pod does not fit where attached + its new volumes of a driver
exceed the limit ("node(s) exceed max volume count", Unschedulable). A claim
of the pod that does not exist makes every node UnschedulableAndUnresolvable,
with upstream's text.

Only nodes whose CSINode sets a limit for one of the pod's drivers are looked
at; PreFilter skips a pod without claims or migratable in-tree volumes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from troupe.api.storage import (
    MIGRATED_PROVISIONERS,
    CSINode,
    PersistentVolumeClaim,
    PodVolume,
    pod_volumes,
)
from troupe.api.types import Pod
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
    EnqueueExtensions,
    FilterPlugin,
    IntpArray,
    PluginArgsError,
    PreFilterPlugin,
    PreFilterResult,
)
from troupe.framework.nominator import Nominator
from troupe.framework.status import SKIP, SUCCESS, Code, Status

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: Final = "node(s) exceed max volume count"
_STATE_KEY: Final = "PreFilterNodeVolumeLimits"
# The handle of a volume still to be provisioned: upstream prefixes a random
# string so that it cannot collide with a real volume handle.
_UNBOUND_PREFIX: Final = "\x00unbound-"

Volumes = dict[str, set[str]]  # driver -> volume handles


@dataclass(frozen=True, slots=True)
class _State:
    new: Volumes
    missing: str  # why a claim of the pod could not be looked up, or ""


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME: Final = "NodeVolumeLimits"

    def __init__(self, store: VolumeStore | None = None, handle: Handle | None = None) -> None:
        self.store = store or VolumeStore()
        self.nominator: Nominator | None = handle.nominator if handle is not None else None

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            raise PluginArgsError(str(k), "unknown field: the plugin takes no arguments")
        return cls(handle.volumes, handle)

    def claim_volume(self, pvc: PersistentVolumeClaim) -> tuple[str, str] | None:
        """getCSIDriverInfo: (driver, handle) of a claim's PV; unbound, or its PV
        not found, its class's provisioner (translated when migrated) and a
        handle of its own (getCSIDriverInfoFromSC)."""
        if pvc.volume_name:
            pv = self.store.pv(pvc.volume_name)
            if pv is not None:
                if not pv.csi_driver or not pv.csi_handle:
                    return None
                return pv.csi_driver, pv.csi_handle
        sc = self.store.storage_class(pvc.storage_class) if pvc.storage_class else None
        if sc is None or not sc.provisioner:
            return None
        driver = MIGRATED_PROVISIONERS.get(sc.provisioner, sc.provisioner)
        return driver, f"{_UNBOUND_PREFIX}{pvc.namespace}/{pvc.name}"

    def _volumes(self, ns: str, vols: Iterable[PodVolume], out: Volumes) -> str:
        """Add the attachable volumes of a pod to `out`; returns why one of its
        claims could not be looked up ("" when all could)."""
        missing = ""
        for v in vols:
            if v.claim:
                pvc = self.store.pvc(f"{ns}/{v.claim}")
                if pvc is None:
                    missing = missing or (
                        f'looking up PVC {ns}/{v.claim}: persistentvolumeclaim "{v.claim}" '
                        "not found"
                    )
                    continue
                dv = self.claim_volume(pvc)
                if dv is not None:
                    out.setdefault(dv[0], set()).add(dv[1])
            elif v.migrated is not None:
                out.setdefault(v.migrated[0], set()).add(v.migrated[1])
        return missing

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        vols = pod_volumes(pod)
        if not any(v.claim or v.migrated for v in vols):
            return None, SKIP
        new: Volumes = {}
        missing = self._volumes(pod.namespace, vols, new)
        state.write(_STATE_KEY, _State(new, missing))
        return None, SUCCESS

    def attached(self, node: str, row: int, nodes: NodeTable, drivers: set[str]) -> Volumes:
        """The unique volumes of `drivers` that the pods the snapshot holds on
        the node use."""
        out: Volumes = {}
        here = nodes.pods[row]
        for key, ns, vols in self.store.placed_on(node):
            if key in here:
                self._volumes(ns, vols, out)
        if self.nominator is not None and len(self.nominator):
            for p in self.nominator.pods_on(node):
                if p.key in here and not self.store.is_placed(p.key):
                    self._volumes(p.namespace, pod_volumes(p), out)
        return {d: hs for d, hs in out.items() if d in drivers}

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        s = state.read(_STATE_KEY, _State)
        n = len(rows)
        if s.missing:
            return FilterResult.single(
                s.missing, np.ones(n, dtype=bool), Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            )
        bad = np.zeros(n, dtype=bool)
        if not s.new:
            return FilterResult.single(
                ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, bad, Code.UNSCHEDULABLE
            )
        where = np.full(nodes.capacity, -1, dtype=np.intp)
        where[rows] = np.arange(n)
        drivers = set(s.new)
        for csi in self.store.csi_nodes():
            row = nodes.row_of.get(csi.name)
            if row is None or where[row] < 0 or not _limits_any(csi, drivers):
                continue
            have = self.attached(csi.name, row, nodes, drivers)
            for driver, handles in s.new.items():
                limit = csi.limits.get(driver)
                if limit is None:
                    continue
                mine = have.get(driver, set())
                if len(mine) + len(handles - mine) > limit:
                    bad[where[row]] = True
                    break
        return FilterResult.single(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, bad, Code.UNSCHEDULABLE)

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE),
                _after_csi_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), _after_pod_deleted
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD),
                _after_claim_added,
            ),
        ]


def _limits_any(csi: CSINode, drivers: set[str]) -> bool:
    return any(csi.limits.get(d) is not None for d in drivers)


def _after_csi_node_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    """A new CSINode, or a limit raised or removed, may let the pod fit."""
    if not isinstance(old, CSINode) or not isinstance(new, CSINode):
        return QueueingHint.QUEUE
    for driver, limit in old.limits.items():
        if limit is not None:
            now = new.limits.get(driver)
            if now is None or now > limit:
                return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_pod_deleted(pod: Pod, old: Any, new: Any) -> QueueingHint:
    """isSchedulableAfterPodDeleted: a deleted pod frees attach slots only if it
    was on a node and had a claim or a migratable in-tree volume."""
    if not isinstance(old, Pod):
        return QueueingHint.QUEUE
    if not old.node_name:
        return QueueingHint.SKIP
    if any(v.claim or v.migrated for v in pod_volumes(old)):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_claim_added(pod: Pod, old: Any, new: Any) -> QueueingHint:
    """isSchedulableAfterPVCAdded: a claim the pod refers to was created."""
    if not isinstance(new, PersistentVolumeClaim):
        return QueueingHint.QUEUE
    if new.namespace != pod.namespace:
        return QueueingHint.SKIP
    if any(v.claim == new.name for v in pod_volumes(pod)):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
