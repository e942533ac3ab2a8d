"""Feature gates that change what kube-scheduler's plugins do, as the
`feature.Features` kube-scheduler hands each plugin's New.

Only gates whose two settings Troupe implements are here. Each defaults to
its value in the Kubernetes release Troupe follows (the newest one); the
`troupe.featureGates` section of the configuration file sets them, as
kube-scheduler's `--feature-gates` flag does.

* ``StorageCapacityScoring`` (KEP-4049): VolumeBinding's Score, by the
  utilization of the static PVs a pod's claims would bind or of the
  CSIStorageCapacity a provisioner reports for the node. Alpha (off) in
  1.33-1.36, beta and on by default from 1.37.
* ``CompositePodGroup`` (groups of groups): CompositePodGroups and PodGroups'
  spec.parentCompositePodGroupName are honoured (a gang of groups is placed
  all-or-nothing, a composite's topology key and disruption mode apply).
  Alpha (off) in 1.37; when off, the parent of a PodGroup is not read and every
  PodGroup is scheduled on its own, as kube-scheduler does with the gate off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

STORAGE_CAPACITY_SCORING: Final = "StorageCapacityScoring"
COMPOSITE_POD_GROUP: Final = "CompositePodGroup"


@dataclass(frozen=True, slots=True)
class Features:
    storage_capacity_scoring: bool = True
    composite_pod_group: bool = False


# Gate name (as kube-scheduler spells it) -> the Features field.
GATES: Final = {
    STORAGE_CAPACITY_SCORING: "storage_capacity_scoring",
    COMPOSITE_POD_GROUP: "composite_pod_group",
}
