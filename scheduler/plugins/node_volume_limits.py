"""NodeVolumeLimits: how many CSI volumes a node may attach, per driver
(nodevolumelimits/csi.go).

A CSINode publishes, per driver, ``allocatable.count``. A pod's CSI volumes are
its claims' PVs with ``spec.csi`` (an unbound claim counts for its class's
provisioner, as a volume still to be created) and its inline CSI volumes. On a
node, the volumes already attached are those of the pods placed there (from the
volume store's per-node usage), counted once per unique volume handle; the pod
does not fit where attached + its new volumes of a driver exceed the limit.

Only nodes whose CSINode sets a limit for one of the pod's drivers are looked
at; a pod without CSI volumes is skipped at PreFilter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Self

import numpy as np

from scheduler.api.storage import CSINode, pod_volumes
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
from scheduler.framework.status import SKIP, SUCCESS, Code, Status
from scheduler.snapshot import NodeTable
from scheduler.volumes import VolumeStore

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: Final = "node(s) exceed max volume count"
_STATE_KEY: Final = "PreFilterNodeVolumeLimits"

Volumes = dict[str, set[str]]  # driver -> volume handles


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME: Final = "NodeVolumeLimits"

    def __init__(self, store: VolumeStore | None = None) -> None:
        self.store = store or VolumeStore()

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            raise PluginArgsError(str(k), "unknown field: the plugin takes no arguments")
        return cls(handle.volumes)

    def claim_volume(self, key: str) -> tuple[str, str] | None:
        """(driver, handle) of a claim: its PV's CSI source; unbound, its class's
        provisioner and a placeholder handle (getCSIDriverInfoFromSC)."""
        pvc = self.store.pvc(key)
        if pvc is None:
            return None
        if pvc.volume_name:
            pv = self.store.pv(pvc.volume_name)
            if pv is None or not pv.csi_driver:
                return None
            return pv.csi_driver, pv.csi_handle
        sc = self.store.storage_class(pvc.storage_class) if pvc.storage_class else None
        if sc is None or not sc.provisioner:
            return None
        return sc.provisioner, f"{pvc.namespace}-{pvc.name}"

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        new: Volumes = {}
        for v in pod_volumes(pod):
            if v.claim:
                dv = self.claim_volume(f"{pod.namespace}/{v.claim}")
                if dv is not None:
                    new.setdefault(dv[0], set()).add(dv[1])
            elif v.csi_driver:
                new.setdefault(v.csi_driver, set()).add(f"{pod.namespace}/{v.name}@{pod.name}")
        if not new:
            return None, SKIP
        state.write(_STATE_KEY, new)
        return None, SUCCESS

    def attached(self, node: str, drivers: set[str]) -> Volumes:
        """The unique CSI volumes of `drivers` that the node's pods use."""
        out: Volumes = {}
        for key in self.store.node_claims().get(node, ()):
            dv = self.claim_volume(key)
            if dv is not None and dv[0] in drivers:
                out.setdefault(dv[0], set()).add(dv[1])
        for driver, handle in self.store.node_inline_csi().get(node, ()):
            if driver in drivers:
                out.setdefault(driver, set()).add(handle)
        return out

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        new = state.read(_STATE_KEY, dict)
        n = len(rows)
        bad = np.zeros(n, dtype=bool)
        where = np.full(nodes.capacity, -1, dtype=np.intp)
        where[rows] = np.arange(n)
        drivers = set(new)
        for csi in self.store.csi_nodes():
            row = nodes.row_of.get(csi.name)
            if row is None or where[row] < 0 or not _limits_any(csi, drivers):
                continue
            have = self.attached(csi.name, drivers)
            for driver, handles in new.items():
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
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD)
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
