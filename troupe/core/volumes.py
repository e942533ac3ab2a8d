"""The volume store: PersistentVolumes, claims, StorageClasses, CSINodes,
CSIDrivers and CSIStorageCapacities as the API has them, the bindings the
scheduler assumed on top of them, and which volumes the pods on each node use.

The cache owns one (`Cache.volumes`); plugins read it through `Handle.volumes`.

Assumed objects (kube-scheduler volumebinding's assume cache): Reserve puts a
PV with its new claimRef, or a claim with its selected-node annotation, over
the API's object (`assume_pv`, `assume_pvc`); readers (`pv`, `pvc`) see the
assumed version, so the next pod does not pick the same PV. `restore_*`
(Unreserve) drops it; a newer version from the API replaces it (the write
went through, or someone else changed the object). `api_pv` / `api_pvc` read
the API's version only (PreBind checks progress on those).

PVs are indexed as readers see them (assumed versions over the API's): the
free ones (no claimRef) by class, and the others by the claim their claimRef
names, so matching a claim looks at the PVs it could take and not at every PV
of its class that is bound already (with dynamic provisioning that is all of
them, and the lookup would grow with every pod scheduled).

Usage per node is kept from the cache's charges (`pod_added`, `pod_removed`,
assumed pods included): the pods with volumes on each node and their volumes
(NodeVolumeLimits resolves them to CSI volume handles), an index from
in-tree disk id to the nodes and pods that mount it (VolumeRestrictions); and
which placed pods use each claim, on which node (ReadWriteOncePod). Pod keys
are kept so that a plugin can tell whether a user is still on its node in the
snapshot it filters (preemption's dry runs take victims out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from troupe.api.storage import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    ClaimRef,
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    PodVolume,
    StorageClass,
    StorageObject,
    pod_volumes,
)
from troupe.api.types import Pod, PodKey


class VolumeStore:
    def __init__(self) -> None:
        self._pvs: dict[str, PersistentVolume] = {}
        self._pvcs: dict[str, PersistentVolumeClaim] = {}
        self._classes: dict[str, StorageClass] = {}
        self._csi_nodes: dict[str, CSINode] = {}
        self._csi_drivers: dict[str, CSIDriver] = {}
        self._capacities: dict[str, CSIStorageCapacity] = {}
        self._assumed_pv: dict[str, PersistentVolume] = {}
        self._assumed_pvc: dict[str, PersistentVolumeClaim] = {}
        self._free_by_class: dict[str, set[str]] = {}
        self._by_claim: dict[str, set[str]] = {}  # claimRef's ns/name -> PV names
        self._indexed: dict[str, tuple[str, str | None]] = {}  # PV -> (class, claim)
        # Usage by placed (bound or assumed) pods.
        self._placed: dict[PodKey, tuple[str, str, tuple[PodVolume, ...]]] = {}
        self._node_pods: dict[str, set[PodKey]] = {}
        # disk id -> node -> (pod, volume) of the placed pods mounting it
        self._disks: dict[str, dict[str, list[tuple[PodKey, PodVolume]]]] = {}
        # claim ns/name -> the placed pods using it -> their node
        self._claim_pods: dict[str, dict[PodKey, str]] = {}
        # Called after any PV or claim changes (PreBind waits on these).
        self.listeners: list[Callable[[], None]] = []

    # ---- API objects -------------------------------------------------------------

    def set(self, obj: StorageObject, deleted: bool = False) -> StorageObject | None:
        """Store (or, `deleted`, drop) an object from the API; returns the version
        readers saw before (assumed or API), or None."""
        old: StorageObject | None
        if isinstance(obj, PersistentVolume):
            old = self.pv(obj.name)
            self._pvs.pop(obj.name, None)
            assumed = self._assumed_pv.get(obj.name)
            if deleted or (
                assumed is not None and assumed.resource_version != obj.resource_version
            ):
                self._assumed_pv.pop(obj.name, None)
            if not deleted:
                self._pvs[obj.name] = obj
            self._reindex(obj.name)
            self._changed()
        elif isinstance(obj, PersistentVolumeClaim):
            old = self.pvc(obj.key)
            assumed_c = self._assumed_pvc.get(obj.key)
            if deleted or (
                assumed_c is not None and assumed_c.resource_version != obj.resource_version
            ):
                self._assumed_pvc.pop(obj.key, None)
            if deleted:
                self._pvcs.pop(obj.key, None)
            else:
                self._pvcs[obj.key] = obj
            self._changed()
        elif isinstance(obj, StorageClass):
            old = self._put(self._classes, obj.name, obj, deleted)
        elif isinstance(obj, CSINode):
            old = self._put(self._csi_nodes, obj.name, obj, deleted)
        elif isinstance(obj, CSIDriver):
            old = self._put(self._csi_drivers, obj.name, obj, deleted)
        else:
            old = self._put(self._capacities, obj.key, obj, deleted)
        return old

    @staticmethod
    def _put(
        d: dict[str, Any], key: str, obj: StorageObject, deleted: bool
    ) -> StorageObject | None:
        old: StorageObject | None = d.pop(key, None)
        if not deleted:
            d[key] = obj
        return old

    def _changed(self) -> None:
        for fn in list(self.listeners):
            fn()

    def pv(self, name: str) -> PersistentVolume | None:
        return self._assumed_pv.get(name) or self._pvs.get(name)

    def pvc(self, key: str) -> PersistentVolumeClaim | None:
        return self._assumed_pvc.get(key) or self._pvcs.get(key)

    def api_pv(self, name: str) -> PersistentVolume | None:
        return self._pvs.get(name)

    def api_pvc(self, key: str) -> PersistentVolumeClaim | None:
        return self._pvcs.get(key)

    def free_pvs_in_class(self, storage_class: str) -> list[PersistentVolume]:
        """PVs of a class without a claimRef (assumed versions), by name."""
        return self._pvs_named(self._free_by_class.get(storage_class, ()))

    def has_candidates(self, storage_class: str, claim_key: str) -> bool:
        """Whether any PV is free in the class or names the claim (no sorting)."""
        return bool(self._free_by_class.get(storage_class) or self._by_claim.get(claim_key))

    def pvs_claimed_by(self, claim_key: str) -> list[PersistentVolume]:
        """PVs whose claimRef names the claim `namespace/name` (assumed versions;
        the uid is not compared here), by name."""
        return self._pvs_named(self._by_claim.get(claim_key, ()))

    def _pvs_named(self, names: Iterable[str]) -> list[PersistentVolume]:
        out = []
        for name in sorted(names):
            pv = self.pv(name)
            if pv is not None:
                out.append(pv)
        return out

    def _reindex(self, name: str) -> None:
        """Move PV `name` to the index entries of the version readers see now."""
        prev = self._indexed.pop(name, None)
        if prev is not None:
            sc, claim = prev
            index = self._free_by_class if claim is None else self._by_claim
            key = sc if claim is None else claim
            names = index.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del index[key]
        pv = self.pv(name)
        if pv is None:
            return
        ref = pv.claim_ref
        claim = None if ref is None else f"{ref.namespace}/{ref.name}"
        self._indexed[name] = (pv.storage_class, claim)
        if claim is None:
            self._free_by_class.setdefault(pv.storage_class, set()).add(name)
        else:
            self._by_claim.setdefault(claim, set()).add(name)

    def storage_class(self, name: str) -> StorageClass | None:
        return self._classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        return self._csi_nodes.get(name)

    def csi_nodes(self) -> Iterable[CSINode]:
        return self._csi_nodes.values()

    def csi_driver(self, name: str) -> CSIDriver | None:
        return self._csi_drivers.get(name)

    def capacities(self) -> Iterable[CSIStorageCapacity]:
        return self._capacities.values()

    @property
    def empty(self) -> bool:
        return not self._pvcs and not self._assumed_pvc

    # ---- assumed bindings ----------------------------------------------------------

    def assume_pv(self, pv: PersistentVolume, claim: PersistentVolumeClaim) -> PersistentVolume:
        """Assume `pv` bound to `claim` (volume.GetBindVolumeToClaim): claimRef set,
        and pv.kubernetes.io/bound-by-controller: "yes"."""
        raw = dict(pv.raw)
        md = dict(raw.get("metadata") or {})
        ann = dict(md.get("annotations") or {})
        ann[ANN_BOUND_BY_CONTROLLER] = "yes"
        md["annotations"] = ann
        spec = dict(raw.get("spec") or {})
        spec["claimRef"] = claim_ref_body(claim)
        raw["metadata"], raw["spec"] = md, spec
        new = replace(pv, claim_ref=ClaimRef(claim.namespace, claim.name, claim.uid), raw=raw)
        self._assumed_pv[pv.name] = new
        self._reindex(pv.name)
        return new

    def assume_pvc(self, claim: PersistentVolumeClaim, node: str) -> PersistentVolumeClaim:
        """Assume the claim annotated with the node chosen for provisioning."""
        ann = {**claim.annotations, ANN_SELECTED_NODE: node}
        raw = dict(claim.raw)
        md = dict(raw.get("metadata") or {})
        md["annotations"] = ann
        raw["metadata"] = md
        new = replace(claim, annotations=ann, raw=raw)
        self._assumed_pvc[claim.key] = new
        return new

    def restore_pv(self, name: str) -> None:
        self._assumed_pv.pop(name, None)
        self._reindex(name)

    def restore_pvc(self, key: str) -> None:
        self._assumed_pvc.pop(key, None)

    # ---- usage by placed pods ------------------------------------------------------

    def pod_added(self, node: str, pod: Pod) -> None:
        vols = pod_volumes(pod)
        if not vols or pod.key in self._placed:
            return
        self._placed[pod.key] = (node, pod.namespace, vols)
        self._node_pods.setdefault(node, set()).add(pod.key)
        self._count(pod.key, node, pod.namespace, vols, +1)

    def pod_removed(self, pod: Pod) -> None:
        placed = self._placed.pop(pod.key, None)
        if placed is not None:
            self._unplace(pod.key, placed[0])
            self._count(pod.key, placed[0], placed[1], placed[2], -1)

    def _unplace(self, key: PodKey, node: str) -> None:
        on_node = self._node_pods.get(node)
        if on_node is not None:
            on_node.discard(key)
            if not on_node:
                del self._node_pods[node]

    def node_removed(self, node: str) -> None:
        for key in [k for k, (n, _, _) in self._placed.items() if n == node]:
            n, ns, vols = self._placed.pop(key)
            self._unplace(key, n)
            self._count(key, n, ns, vols, -1)

    def _count(
        self, pod: PodKey, node: str, ns: str, vols: tuple[PodVolume, ...], sign: int
    ) -> None:
        for v in vols:
            if v.claim:
                key = f"{ns}/{v.claim}"
                users = self._claim_pods.setdefault(key, {})
                if sign > 0:
                    users[pod] = node
                else:
                    users.pop(pod, None)
                    if not users:
                        del self._claim_pods[key]
                continue
            if v.disk_kind:
                by_node = self._disks.setdefault(f"{v.disk_kind}:{v.disk_id}", {})
                lst = by_node.setdefault(node, [])
                if sign > 0:
                    lst.append((pod, v))
                else:
                    lst.remove((pod, v))
                    if not lst:
                        del by_node[node]

    def placed_on(self, node: str) -> list[tuple[PodKey, str, tuple[PodVolume, ...]]]:
        """The placed pods on `node` that have volumes: (key, namespace, volumes)."""
        out = []
        for key in self._node_pods.get(node, ()):
            _, ns, vols = self._placed[key]
            out.append((key, ns, vols))
        return out

    def is_placed(self, key: PodKey) -> bool:
        """Whether the pod's volumes are counted here (bound or assumed on a node)."""
        return key in self._placed

    def claim_users(self, key: str) -> Mapping[PodKey, str]:
        """The placed pods that use the claim `namespace/name`, with their node."""
        return self._claim_pods.get(key, {})

    def disk_users(self, kind: str, disk_id: str) -> dict[str, list[tuple[PodKey, PodVolume]]]:
        """Per node, the placed pods (and their volume) that mount this in-tree disk."""
        return self._disks.get(f"{kind}:{disk_id}", {})


def claim_ref_body(claim: PersistentVolumeClaim) -> dict[str, str]:
    """The claimRef the binder writes on a PV (an ObjectReference to the claim)."""
    ref = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": claim.namespace,
        "name": claim.name,
    }
    if claim.uid:
        ref["uid"] = claim.uid
    if claim.resource_version:
        ref["resourceVersion"] = claim.resource_version
    return ref
