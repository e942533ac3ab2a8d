"""Storage objects, read: PersistentVolumes, PersistentVolumeClaims, StorageClasses,
CSINodes, CSIDrivers, CSIStorageCapacities, and the volumes of a pod.

Each `parse_*` returns a frozen view or an `InvalidObject` naming the field, as
`troupe.api.parse` does for pods and nodes. What the volume plugins need is
computed here once per object: a claim's storage class (``spec.storageClassName``,
else the legacy annotation ``volume.beta.kubernetes.io/storage-class``, as
component-helpers GetPersistentVolumeClaimClass), its storage request in bytes,
a PV's capacity, node affinity (a NodeSelector the node table can evaluate),
claimRef and CSI source, a class's allowedTopologies as a NodeSelector.

A pod's volumes are read from the pod's own object (`pod_volumes`): claims
(``persistentVolumeClaim.claimName``), generic ephemeral volumes (the claim
``<pod>-<volume>``, ephemeral.VolumeClaimName), inline CSI volumes and the
in-tree disks VolumeRestrictions compares (GCE PD, AWS EBS, RBD, ISCSI).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from troupe.api.parse import _guarded, _meta
from troupe.api.quantity import parse_quantity, value
from troupe.api.readers import (
    get_bool,
    get_int,
    get_map,
    get_objs,
    get_str,
    get_str_list,
    get_str_map,
    invalid,
    required,
    unsupported,
)
from troupe.api.selectors import parse_label_selector, parse_node_selector
from troupe.api.types import (
    InvalidObject,
    LabelSelector,
    NodeSelector,
    NodeSelectorTerm,
    ParseError,
    Pod,
    Requirement,
    SelectorOp,
)

IMMEDIATE: Final = "Immediate"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
BINDING_MODES: Final = (IMMEDIATE, WAIT_FOR_FIRST_CONSUMER)
ACCESS_MODES: Final = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
READ_WRITE_ONCE_POD: Final = "ReadWriteOncePod"
NOT_SUPPORTED_PROVISIONER: Final = "kubernetes.io/no-provisioner"

# Annotations (component-helpers storage/volume).
ANN_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER: Final = "pv.kubernetes.io/bound-by-controller"
ANN_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"
ANN_STORAGE_PROVISIONER: Final = "volume.kubernetes.io/storage-provisioner"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    uid: str
    resource_version: str
    labels: Mapping[str, str]
    capacity: int  # bytes of spec.capacity.storage (0 if absent)
    access_modes: tuple[str, ...]
    storage_class: str
    volume_mode: str  # Filesystem | Block
    node_affinity: NodeSelector | None  # spec.nodeAffinity.required
    claim_ref: ClaimRef | None
    phase: str
    # spec.csi's driver and volumeHandle; for an in-tree source CSI migration
    # covers (migrated_source), the driver and handle it translates to; "" else.
    csi_driver: str
    csi_handle: str
    deleting: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    annotations: Mapping[str, str]
    storage_class: str  # "" when none (GetPersistentVolumeClaimClass)
    request: int  # bytes of spec.resources.requests.storage (0 if absent)
    has_request: bool
    access_modes: tuple[str, ...]
    volume_mode: str
    selector: LabelSelector | None
    volume_name: str
    phase: str
    deleting: bool
    controller_uid: str  # the controlling owner's uid (ephemeral volumes)
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        """volumeName set and the bind-completed annotation (isPVCFullyBound)."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str
    allowed_topologies: NodeSelector | None  # None: no restriction
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def delayed(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NOT_SUPPORTED_PROVISIONER


@dataclass(frozen=True, slots=True)
class CSINode:
    name: str
    # driver name -> allocatable.count (None: no limit published)
    limits: Mapping[str, int | None]
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class CSIDriver:
    name: str
    storage_capacity: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class CSIStorageCapacity:
    namespace: str
    name: str
    storage_class: str
    node_topology: LabelSelector | None  # None: available nowhere
    capacity: int | None
    maximum_volume_size: int | None
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def limit(self) -> int | None:
        """maximumVolumeSize if set (more precise), else capacity (volumeLimit)."""
        return self.maximum_volume_size if self.maximum_volume_size is not None else self.capacity


# ---- CSI migration (csi-translation-lib) -----------------------------------------------

# The in-tree plugins for which kube-scheduler's isCSIMigrationOn holds wherever
# the node has a CSINode (nodevolumelimits/utils.go), and their CSI drivers.
AWS_EBS_DRIVER: Final = "ebs.csi.aws.com"
GCE_PD_DRIVER: Final = "pd.csi.storage.gke.io"
AZURE_DISK_DRIVER: Final = "disk.csi.azure.com"
CINDER_DRIVER: Final = "cinder.csi.openstack.org"
MIGRATED_PROVISIONERS: Final = {
    "kubernetes.io/aws-ebs": AWS_EBS_DRIVER,
    "kubernetes.io/gce-pd": GCE_PD_DRIVER,
    "kubernetes.io/azure-disk": AZURE_DISK_DRIVER,
    "kubernetes.io/cinder": CINDER_DRIVER,
}
_UNSPECIFIED: Final = "UNSPECIFIED"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
BETA_ZONE_LABEL: Final = "failure-domain.beta.kubernetes.io/zone"


def ebs_volume_id(kubernetes_id: str) -> str:
    """KubernetesVolumeIDToEBSVolumeID: `aws://<zone>/<vol-id>` -> `<vol-id>`."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    return kubernetes_id.removeprefix("aws://").strip("/").rsplit("/", 1)[-1]


def gce_pd_handle(pd_name: str, zones_label: str) -> str:
    """The GCE PD CSI volume handle the translation writes: zonal
    `projects/UNSPECIFIED/zones/<zone>/disks/<pd>` (zone UNSPECIFIED when
    unknown, as for inline volumes), regional `.../regions/<region>/...` for a
    PV labelled with several zones (`a__b`)."""
    zones = [z for z in zones_label.split("__") if z] if zones_label else []
    if len(zones) > 1:
        regions = {"-".join(z.split("-")[:2]) for z in zones}
        if len(regions) == 1:
            return f"projects/{_UNSPECIFIED}/regions/{regions.pop()}/disks/{pd_name}"
    zone = zones[0] if len(zones) == 1 else _UNSPECIFIED
    return f"projects/{_UNSPECIFIED}/zones/{zone}/disks/{pd_name}"


def migrated_source(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[str, str]:
    """TranslateInTreePVToCSI's (driver, volume handle) for a PV with an in-tree
    source CSI migration covers, ("", "") for any other."""
    gce = get_map(spec, "gcePersistentDisk", "spec.")
    if gce:
        zones = labels.get(BETA_ZONE_LABEL) or labels.get(ZONE_LABEL, "")
        pd = get_str(gce, "pdName", "spec.gcePersistentDisk.")
        return GCE_PD_DRIVER, gce_pd_handle(pd, zones)
    aws = get_map(spec, "awsElasticBlockStore", "spec.")
    if aws:
        vid = get_str(aws, "volumeID", "spec.awsElasticBlockStore.")
        return AWS_EBS_DRIVER, ebs_volume_id(vid)
    azure = get_map(spec, "azureDisk", "spec.")
    if azure:
        return AZURE_DISK_DRIVER, get_str(azure, "diskURI", "spec.azureDisk.")
    cinder = get_map(spec, "cinder", "spec.")
    if cinder:
        return CINDER_DRIVER, get_str(cinder, "volumeID", "spec.cinder.")
    return "", ""


# ---- pod volumes ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodVolume:
    """One entry of spec.volumes, reduced to what the volume plugins compare.

    `claim` is the claim's name (a generic ephemeral volume's generated name),
    `ephemeral` says it is generated; `disk` identifies an in-tree disk
    (kind, id, extra) for VolumeRestrictions; `migrated` is an inline in-tree
    volume's (CSI driver, volume handle) under CSI migration (NodeVolumeLimits
    counts those; inline `csi` volumes it does not, as upstream).
    """

    name: str
    claim: str = ""
    ephemeral: bool = False
    read_only: bool = False
    disk_kind: str = ""  # gce | aws | rbd | iscsi
    disk_id: str = ""  # pdName | volumeID | pool/image | iqn
    monitors: frozenset[str] = frozenset()  # rbd
    migrated: tuple[str, str] | None = None


def _volume(pod_name: str, item: Mapping[str, Any], p: str) -> PodVolume:
    name = get_str(item, "name", p)
    pvc = get_map(item, "persistentVolumeClaim", p)
    if pvc:
        claim = get_str(pvc, "claimName", f"{p}persistentVolumeClaim.")
        return PodVolume(name, claim=claim, read_only=get_bool(pvc, "readOnly", p))
    if item.get("ephemeral") is not None:
        return PodVolume(name, claim=f"{pod_name}-{name}", ephemeral=True)
    gce = get_map(item, "gcePersistentDisk", p)
    if gce:
        q = f"{p}gcePersistentDisk."
        pd = get_str(gce, "pdName", q)
        return PodVolume(
            name, read_only=get_bool(gce, "readOnly", q), disk_kind="gce", disk_id=pd,
            migrated=(GCE_PD_DRIVER, gce_pd_handle(pd, "")),
        )  # fmt: skip
    aws = get_map(item, "awsElasticBlockStore", p)
    if aws:
        q = f"{p}awsElasticBlockStore."
        vid = get_str(aws, "volumeID", q)
        return PodVolume(
            name, read_only=get_bool(aws, "readOnly", q), disk_kind="aws", disk_id=vid,
            migrated=(AWS_EBS_DRIVER, ebs_volume_id(vid)),
        )  # fmt: skip
    azure = get_map(item, "azureDisk", p)
    if azure:
        uri = get_str(azure, "diskURI", f"{p}azureDisk.")
        return PodVolume(name, migrated=(AZURE_DISK_DRIVER, uri))
    cinder = get_map(item, "cinder", p)
    if cinder:
        vid = get_str(cinder, "volumeID", f"{p}cinder.")
        return PodVolume(name, migrated=(CINDER_DRIVER, vid))
    rbd = get_map(item, "rbd", p)
    if rbd:
        q = f"{p}rbd."
        return PodVolume(
            name,
            read_only=get_bool(rbd, "readOnly", q),
            disk_kind="rbd",
            disk_id=f"{get_str(rbd, 'pool', q) or 'rbd'}/{get_str(rbd, 'image', q)}",
            monitors=frozenset(get_str_list(rbd, "monitors", q)),
        )
    iscsi = get_map(item, "iscsi", p)
    if iscsi:
        q = f"{p}iscsi."
        return PodVolume(
            name, read_only=get_bool(iscsi, "readOnly", q), disk_kind="iscsi",
            disk_id=get_str(iscsi, "iqn", q),
        )  # fmt: skip
    return PodVolume(name)


# The volume sources `_volume` reads; an entry with none of them (a projected
# service-account token, a configMap, an emptyDir...) is left out by
# `_pod_volumes` unread.
_SCHEDULING_SOURCES: Final = frozenset(
    (
        "persistentVolumeClaim",
        "ephemeral",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "azureDisk",
        "cinder",
        "rbd",
        "iscsi",
    )
)


class _LastPodVolumes:
    """pod_volumes' answer for the last Pod view asked about: four PreFilter
    plugins ask in turn in every cycle. Views are immutable and a pod's volumes
    cannot change (spec.volumes is immutable), so the view's identity is the key."""

    pod: Pod | None = None
    volumes: tuple[PodVolume, ...] = ()


def pod_volumes(pod: Pod) -> tuple[PodVolume, ...]:
    """The pod's volumes that matter to scheduling (others are left out).
    A malformed entry is left out too: the pod's own parse accepted the pod."""
    if _LastPodVolumes.pod is pod:
        return _LastPodVolumes.volumes
    got = _pod_volumes(pod)
    _LastPodVolumes.pod, _LastPodVolumes.volumes = pod, got
    return got


def _pod_volumes(pod: Pod) -> tuple[PodVolume, ...]:
    spec = pod.raw.get("spec")
    vols = spec.get("volumes") if isinstance(spec, Mapping) else None
    if not vols or not isinstance(vols, list | tuple):
        return ()
    out: list[PodVolume] = []
    for i, item in enumerate(vols):
        if not isinstance(item, Mapping) or item.keys().isdisjoint(_SCHEDULING_SOURCES):
            continue  # projected, configMap, secret, emptyDir...: `_volume` keeps none
        try:
            v = _volume(pod.name, item, f"spec.volumes[{i}].")
        except ParseError:
            continue
        if v.claim or v.disk_kind or v.migrated:
            out.append(v)
    return tuple(out)


def pod_claim_names(pod: Pod) -> tuple[str, ...]:
    """Names of the claims the pod uses (ephemeral ones included)."""
    return tuple(v.claim for v in pod_volumes(pod) if v.claim)


# ---- parsers --------------------------------------------------------------------------


def _bytes(obj: Mapping[str, Any], key: str, prefix: str) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    q = parse_quantity(v, prefix + key)
    n = value(q)
    if n < 0:
        raise invalid(prefix + key, v, "must be greater than or equal to 0")
    return n


def _access_modes(obj: Mapping[str, Any], prefix: str) -> tuple[str, ...]:
    modes = get_str_list(obj, "accessModes", prefix)
    for i, m in enumerate(modes):
        if m not in ACCESS_MODES:
            raise unsupported(f"{prefix}accessModes[{i}]", m, ACCESS_MODES)
    return modes


def _rv(md: Mapping[str, Any]) -> str:
    return get_str(md, "resourceVersion", "metadata.")


def _parse_pv(obj: Mapping[str, Any]) -> PersistentVolume:
    md, _, name = _meta(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    cap = get_map(spec, "capacity", "spec.")
    ref = get_map(spec, "claimRef", "spec.")
    claim_ref = None
    if ref:
        claim_ref = ClaimRef(
            get_str(ref, "namespace", "spec.claimRef.") or "default",
            get_str(ref, "name", "spec.claimRef."),
            get_str(ref, "uid", "spec.claimRef."),
        )
    aff = get_map(spec, "nodeAffinity", "spec.")
    labels = get_str_map(md, "labels", "metadata.")
    csi = get_map(spec, "csi", "spec.")
    driver = get_str(csi, "driver", "spec.csi.")
    handle = get_str(csi, "volumeHandle", "spec.csi.")
    if not csi:
        driver, handle = migrated_source(spec, labels)
    return PersistentVolume(
        name=name,
        uid=get_str(md, "uid", "metadata."),
        resource_version=_rv(md),
        labels=labels,
        capacity=_bytes(cap, "storage", "spec.capacity.") or 0,
        access_modes=_access_modes(spec, "spec."),
        storage_class=get_str(spec, "storageClassName", "spec.")
        or get_str_map(md, "annotations", "metadata.").get(ANN_STORAGE_CLASS, ""),
        volume_mode=get_str(spec, "volumeMode", "spec.") or "Filesystem",
        node_affinity=parse_node_selector(aff.get("required"), "spec.nodeAffinity.required."),
        claim_ref=claim_ref,
        phase=get_str(status, "phase", "status.") or "Available",
        csi_driver=driver,
        csi_handle=handle,
        deleting=md.get("deletionTimestamp") is not None,
        raw=obj,
    )


def _parse_pvc(obj: Mapping[str, Any]) -> PersistentVolumeClaim:
    md, ns, name = _meta(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    annotations = get_str_map(md, "annotations", "metadata.")
    requests = get_map(get_map(spec, "resources", "spec."), "requests", "spec.resources.")
    req = _bytes(requests, "storage", "spec.resources.requests.")
    sc = spec.get("storageClassName")
    if sc is not None and not isinstance(sc, str):
        raise invalid("spec.storageClassName", sc, "must be a string")
    controller_uid = ""
    for p, o in get_objs(md, "ownerReferences", "metadata."):
        if get_bool(o, "controller", p):
            controller_uid = get_str(o, "uid", p)
    return PersistentVolumeClaim(
        namespace=ns,
        name=name,
        uid=get_str(md, "uid", "metadata."),
        resource_version=_rv(md),
        annotations=annotations,
        # GetPersistentVolumeClaimClass: the beta annotation wins, then the field.
        storage_class=annotations.get(ANN_STORAGE_CLASS, sc or ""),
        request=req or 0,
        has_request=req is not None,
        access_modes=_access_modes(spec, "spec."),
        volume_mode=get_str(spec, "volumeMode", "spec.") or "Filesystem",
        selector=parse_label_selector(spec.get("selector"), "spec.selector."),
        volume_name=get_str(spec, "volumeName", "spec."),
        phase=get_str(status, "phase", "status.") or "Pending",
        deleting=md.get("deletionTimestamp") is not None,
        controller_uid=controller_uid,
        raw=obj,
    )


def _topology_terms(items: list[tuple[str, Mapping[str, Any]]]) -> NodeSelector | None:
    """allowedTopologies (TopologySelectorTerms: matchLabelExpressions key/values,
    ANDed within a term, terms ORed) as a NodeSelector; none: no restriction."""
    if not items:
        return None
    terms = []
    for p, t in items:
        reqs = []
        for q, e in get_objs(t, "matchLabelExpressions", p):
            key = get_str(e, "key", q)
            if not key:
                raise required(f"{q}key")
            reqs.append(Requirement(key, SelectorOp.IN, get_str_list(e, "values", q)))
        terms.append(NodeSelectorTerm(tuple(reqs)))
    return NodeSelector(tuple(terms))


def _parse_storage_class(obj: Mapping[str, Any]) -> StorageClass:
    _, _, name = _meta(obj, namespaced=False)
    mode = get_str(obj, "volumeBindingMode", "") or IMMEDIATE
    if mode not in BINDING_MODES:
        raise unsupported("volumeBindingMode", mode, BINDING_MODES)
    return StorageClass(
        name=name,
        provisioner=get_str(obj, "provisioner", ""),
        binding_mode=mode,
        allowed_topologies=_topology_terms(get_objs(obj, "allowedTopologies", "")),
        raw=obj,
    )


def _parse_csi_node(obj: Mapping[str, Any]) -> CSINode:
    _, _, name = _meta(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    limits: dict[str, int | None] = {}
    for p, d in get_objs(spec, "drivers", "spec."):
        driver = get_str(d, "name", p)
        count = get_int(get_map(d, "allocatable", p), "count", f"{p}allocatable.")
        if count is not None and count < 0:
            raise invalid(f"{p}allocatable.count", count, "must be greater than or equal to 0")
        limits[driver] = count
    return CSINode(name, limits, obj)


def _parse_csi_driver(obj: Mapping[str, Any]) -> CSIDriver:
    _, _, name = _meta(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    return CSIDriver(name, get_bool(spec, "storageCapacity", "spec."), obj)


def _parse_capacity(obj: Mapping[str, Any]) -> CSIStorageCapacity:
    _, ns, name = _meta(obj, namespaced=True)
    sc = get_str(obj, "storageClassName", "")
    if not sc:
        raise required("storageClassName")
    return CSIStorageCapacity(
        namespace=ns,
        name=name,
        storage_class=sc,
        node_topology=parse_label_selector(obj.get("nodeTopology"), "nodeTopology."),
        capacity=_bytes(obj, "capacity", ""),
        maximum_volume_size=_bytes(obj, "maximumVolumeSize", ""),
        raw=obj,
    )


def parse_persistent_volume(obj: Mapping[str, Any]) -> PersistentVolume | InvalidObject:
    return _guarded("PersistentVolume", obj, False, _parse_pv)


def parse_persistent_volume_claim(
    obj: Mapping[str, Any],
) -> PersistentVolumeClaim | InvalidObject:
    return _guarded("PersistentVolumeClaim", obj, True, _parse_pvc)


def parse_storage_class(obj: Mapping[str, Any]) -> StorageClass | InvalidObject:
    return _guarded("StorageClass", obj, False, _parse_storage_class)


def parse_csi_node(obj: Mapping[str, Any]) -> CSINode | InvalidObject:
    return _guarded("CSINode", obj, False, _parse_csi_node)


def parse_csi_driver(obj: Mapping[str, Any]) -> CSIDriver | InvalidObject:
    return _guarded("CSIDriver", obj, False, _parse_csi_driver)


def parse_csi_storage_capacity(obj: Mapping[str, Any]) -> CSIStorageCapacity | InvalidObject:
    return _guarded("CSIStorageCapacity", obj, True, _parse_capacity)


StorageObject = (
    PersistentVolume
    | PersistentVolumeClaim
    | StorageClass
    | CSINode
    | CSIDriver
    | CSIStorageCapacity
)

STORAGE_PARSERS: Final = {
    "PersistentVolume": parse_persistent_volume,
    "PersistentVolumeClaim": parse_persistent_volume_claim,
    "StorageClass": parse_storage_class,
    "CSINode": parse_csi_node,
    "CSIDriver": parse_csi_driver,
    "CSIStorageCapacity": parse_csi_storage_capacity,
}


def parse_storage_object(kind: str, obj: Mapping[str, Any]) -> StorageObject | InvalidObject:
    parser = STORAGE_PARSERS[kind]
    out: StorageObject | InvalidObject = parser(obj)
    return out


__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_SELECTED_NODE",
    "STORAGE_PARSERS",
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "ClaimRef",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodVolume",
    "StorageClass",
    "parse_storage_object",
    "pod_claim_names",
    "pod_volumes",
]
