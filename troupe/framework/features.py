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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

STORAGE_CAPACITY_SCORING: Final = "StorageCapacityScoring"


@dataclass(frozen=True, slots=True)
class Features:
    storage_capacity_scoring: bool = True


# Gate name (as kube-scheduler spells it) -> the Features field.
GATES: Final = {STORAGE_CAPACITY_SCORING: "storage_capacity_scoring"}
