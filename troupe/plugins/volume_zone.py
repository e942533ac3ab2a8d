"""VolumeZone: the zone and region labels of a pod's bound PersistentVolumes
against the node's (volumezone/volume_zone.go).

PreFilter reads the topology labels (zone and region, GA and beta keys) of the
PVs bound to the pod's claims; a PV label may list several values joined by
``__`` or commas (LabelZonesToSet; an empty one is an error). Unbound claims
of a WaitForFirstConsumer class are skipped (VolumeBinding decides those).
Filter compares them with the node table's label columns: a node without any
topology label fits (a single-zone cluster); otherwise each PV label must be
matched by the node's label of the same key, or of the GA key for a beta one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from troupe.api.storage import (
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
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
from troupe.framework.status import SKIP, SUCCESS, Code, Status, error, unresolvable

ERR_REASON_CONFLICT: Final = "node(s) had no available volume zone"
BETA_ZONE: Final = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION: Final = "failure-domain.beta.kubernetes.io/region"
ZONE: Final = "topology.kubernetes.io/zone"
REGION: Final = "topology.kubernetes.io/region"
TOPOLOGY_LABELS: Final = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA: Final = {BETA_ZONE: ZONE, BETA_REGION: REGION}
_STATE_KEY: Final = "PreFilterVolumeZone"


@dataclass(frozen=True, slots=True)
class PVTopology:
    pv_name: str
    key: str
    values: frozenset[str]


def label_zones_to_set(value: str) -> frozenset[str]:
    """LabelZonesToSet: zones joined by ``__`` (LabelMultiZoneDelimiter) or by
    commas, spaces trimmed. Raises ValueError on an empty zone."""
    joined = value.replace("__", ",")
    zones = [z.strip() for z in joined.split(",")]
    if any(not z for z in zones):
        raise ValueError(
            f'comma separated list of zones ("{joined}") must not contain an empty zone'
        )
    return frozenset(zones)


def pv_topologies(pv: PersistentVolume) -> tuple[PVTopology, ...]:
    """getPVTopologies; raises ValueError for a label with an empty zone."""
    return tuple(
        PVTopology(pv.name, k, label_zones_to_set(pv.labels[k]))
        for k in TOPOLOGY_LABELS
        if k in pv.labels
    )


class VolumeZone(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME: Final = "VolumeZone"

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
        topologies: list[PVTopology] = []
        for v in pod_volumes(pod):
            if not v.claim or v.ephemeral:
                continue  # upstream reads persistentVolumeClaim volumes only
            pvc = self.store.api_pvc(f"{pod.namespace}/{v.claim}")
            if pvc is None:
                return None, unresolvable(
                    f'persistentvolumeclaim "{v.claim}" not found', plugin=self.NAME
                )
            if not pvc.volume_name:
                if not pvc.storage_class:
                    return None, unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                        plugin=self.NAME,
                    )
                sc = self.store.storage_class(pvc.storage_class)
                if sc is None:
                    return None, unresolvable(
                        f'storageclass.storage.k8s.io "{pvc.storage_class}" not found',
                        plugin=self.NAME,
                    )
                if sc.delayed:
                    continue
                return None, unresolvable("PersistentVolume had no name", plugin=self.NAME)
            pv = self.store.api_pv(pvc.volume_name)
            if pv is None:
                return None, unresolvable(
                    f'persistentvolume "{pvc.volume_name}" not found', plugin=self.NAME
                )
            try:
                topologies += pv_topologies(pv)
            except ValueError as e:
                return None, error(str(e), plugin=self.NAME)
        if not topologies:
            return None, SKIP
        state.write(_STATE_KEY, tuple(topologies))
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        topologies = state.read(_STATE_KEY, tuple)
        has_any = np.zeros(len(rows), dtype=bool)
        for k in TOPOLOGY_LABELS:
            col = nodes.labels.get(k)
            if col is not None:
                has_any |= col[rows] >= 0
        ok = np.ones(len(rows), dtype=bool)
        for t in topologies:
            ok &= _label_in(nodes, rows, t.key, t.values, _GA.get(t.key))
        return FilterResult.single(
            ERR_REASON_CONFLICT, has_any & ~ok, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        )

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD), _after_class_added
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE
                ),
                _after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE),
                _after_pv_change,
            ),
        ]


def _label_in(
    nodes: NodeTable, rows: IntpArray, key: str, values: frozenset[str], ga: str | None
) -> np.ndarray:
    """Rows whose `key` label (or, where absent, the GA key's) is in `values`."""

    def check(k: str) -> tuple[np.ndarray, np.ndarray]:
        col = nodes.labels.get(k)
        if col is None:
            z = np.zeros(len(rows), dtype=bool)
            return z, z
        vals = col[rows]
        vocab = nodes.label_ids.get(k, {})
        ids = [vocab[v] for v in values if v in vocab]
        return vals >= 0, np.isin(vals, ids) if ids else np.zeros(len(rows), dtype=bool)

    present, ok = check(key)
    if ga is None:
        return ok
    _, ok_ga = check(ga)
    out: np.ndarray = np.where(present, ok, ok_ga)
    return out


def _after_class_added(pod: Pod, old: Any, new: Any) -> QueueingHint:
    if isinstance(new, StorageClass) and not new.delayed:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def _after_claim_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    if not isinstance(new, PersistentVolumeClaim):
        return QueueingHint.QUEUE
    if new.namespace == pod.namespace and any(
        v.claim == new.name and not v.ephemeral for v in pod_volumes(pod)
    ):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_pv_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    if not isinstance(old, PersistentVolume) or not isinstance(new, PersistentVolume):
        return QueueingHint.QUEUE
    try:
        if pv_topologies(old) != pv_topologies(new):
            return QueueingHint.QUEUE
    except ValueError:
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
