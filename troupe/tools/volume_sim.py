"""The controllers VolumeBinding waits for, simulated over the in-memory
cluster: the PV controller (a PV whose claimRef names a claim binds that claim)
and a dynamic provisioner (a claim with ``volume.kubernetes.io/selected-node``
of a class with a provisioner gets a new PV on that node, bound to it).

Used by `troupe simulate`, the benchmarks and tests. Every object written is
fed to the scheduler as the watch would deliver it (`feed(kind, obj)`), and
what was bound or provisioned for each claim is recorded (`outcomes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from troupe.api.storage import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    PersistentVolumeClaim,
    StorageClass,
    parse_persistent_volume_claim,
    parse_storage_class,
)
from troupe.core.memory_cluster import InMemoryCluster

HOSTNAME: Final = "kubernetes.io/hostname"

Feed = Callable[[str, Mapping[str, Any]], None]


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """What the controllers did for one claim: bound it to `pv`, which was
    `provisioned` for it on `node` or was there already."""

    pv: str
    provisioned: bool = False
    node: str = ""

    def __str__(self) -> str:
        if self.provisioned:
            return f"provisioned PV {self.pv} on {self.node}"
        return f"bound to PV {self.pv}"


class VolumeControllers:
    def __init__(
        self,
        cluster: InMemoryCluster,
        feed: Feed,
        classes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.feed = feed
        self.classes: dict[str, Mapping[str, Any]] = dict(classes or {})
        # claim key (ns/name) -> what was bound or provisioned for it
        self.outcomes: dict[str, ClaimOutcome] = {}
        cluster.on_volume_write = self.on_write

    def sync(self) -> None:
        """One pass over what is there already, as the controllers do when they
        start: PVs pre-bound to a claim bind it, claims with a selected node
        are provisioned."""
        for pv in list(self.cluster.volumes.values()):
            self._pv_written(pv)
        for claim in list(self.cluster.claims.values()):
            self._claim_written(claim)

    def _next_rv(self, obj: dict[str, Any]) -> None:
        md = obj.setdefault("metadata", {})
        md["resourceVersion"] = str(int(str(md.get("resourceVersion") or 0)) + 1)

    def on_write(self, kind: str, obj: dict[str, Any]) -> None:
        self.feed(kind, obj)
        if kind == "PersistentVolume":
            self._pv_written(obj)
        elif kind == "PersistentVolumeClaim":
            self._claim_written(obj)

    def _pv_written(self, pv: dict[str, Any]) -> None:
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        key = f"{ref.get('namespace') or 'default'}/{ref.get('name')}"
        claim = self.cluster.claims.get(key)
        if not ref or claim is None or (claim.get("spec") or {}).get("volumeName"):
            return
        name = pv["metadata"]["name"]
        self._bind(pv, claim)
        self.outcomes[key] = ClaimOutcome(name)

    def _claim_written(self, claim: dict[str, Any]) -> None:
        pvc = parse_persistent_volume_claim(claim)
        if not isinstance(pvc, PersistentVolumeClaim):
            return
        node = pvc.annotations.get(ANN_SELECTED_NODE)
        if not node or pvc.volume_name:
            return
        sc_obj = self.classes.get(pvc.storage_class)
        sc = parse_storage_class(sc_obj) if sc_obj is not None else None
        if not isinstance(sc, StorageClass) or not sc.provisions:
            return
        name = f"pvc-{pvc.uid or pvc.namespace + '-' + pvc.name}"
        pv: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "resourceVersion": "1",
                "annotations": {"pv.kubernetes.io/provisioned-by": sc.provisioner},
            },
            "spec": {
                "capacity": {"storage": str(pvc.request)},
                "accessModes": list(pvc.access_modes) or ["ReadWriteOnce"],
                "storageClassName": pvc.storage_class,
                "persistentVolumeReclaimPolicy": "Delete",
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": HOSTNAME, "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    }
                },
            },
            "status": {"phase": "Available"},
        }
        self.cluster.volumes[name] = pv
        self.feed("PersistentVolume", pv)
        self._bind(pv, claim)
        self.outcomes[pvc.key] = ClaimOutcome(name, provisioned=True, node=node)

    def _bind(self, pv: dict[str, Any], claim: dict[str, Any]) -> None:
        """The PV controller's syncClaim: both sides Bound, bind-completed."""
        md = claim.setdefault("metadata", {})
        spec = pv.setdefault("spec", {})
        spec["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": md.get("namespace") or "default",
            "name": md.get("name"),
            **({"uid": md["uid"]} if md.get("uid") else {}),
        }
        pv["status"] = {"phase": "Bound"}
        self._next_rv(pv)
        claim.setdefault("spec", {})["volumeName"] = pv["metadata"]["name"]
        ann = md.setdefault("annotations", {})
        ann[ANN_BIND_COMPLETED] = "yes"
        ann[ANN_BOUND_BY_CONTROLLER] = "yes"
        claim["status"] = {"phase": "Bound"}
        self._next_rv(claim)
        self.feed("PersistentVolume", pv)
        self.feed("PersistentVolumeClaim", claim)
