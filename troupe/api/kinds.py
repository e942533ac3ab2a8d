"""The kinds the scheduler reads: one table, `KINDS`, one row per kind.

A row says where the kind is served (group, versions, plural), whether its
objects are namespaced, which of the event handlers takes its events (by the
`EventHandlers` method's name: this layer imports no part of the core), whether
`troupe simulate` reads it from a dump, and what the scheduler writes on it.
Everything else is made from the table: the reflectors' list and their order
(`WATCHED`), API discovery of kinds served in one of several versions
(`VERSIONED`), the event dispatch (`EventHandlers.handlers`), the simulator's
intake (`SIMULATED`); the chart's ClusterRole is checked against it by a test
(a watched kind is read with get, list and watch, as kube-scheduler's
system:kube-scheduler role reads, plus the writes its row names). Adding a kind
is one row, its parser and its handler; tests then ask for its ClusterRole
rule, its line in docs/operations.md and, for the integration tests, the
embedded API server's resource.

Light: no client library is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from troupe.api.elasticquota import ELASTIC_QUOTA_GROUP, ELASTIC_QUOTA_VERSION
from troupe.api.types import COMPOSITE_VERSION, NATIVE_POD_GROUP_API, NATIVE_POD_GROUP_VERSIONS

POD_GROUP_GROUP: Final = "scheduling.x-k8s.io"
POD_GROUP_VERSION: Final = "v1alpha1"
RESOURCE_API: Final = "resource.k8s.io"
# DeviceTaintRule: GA (v1) in Kubernetes 1.37, beta (v1beta2) in 1.36, alpha
# (v1alpha3) before; the newest the cluster serves is watched.
DEVICE_TAINT_RULE_VERSIONS: Final = ("v1", "v1beta2", "v1alpha3")
# What a watched kind is read with (its reflector lists and watches; get as
# kube-scheduler's system:kube-scheduler role reads).
READ_VERBS: Final = ("get", "list", "watch")


@dataclass(frozen=True, slots=True)
class Write:
    """Verbs the scheduler uses to write a kind's objects (`subresource` "") or
    one of their subresources; `option` names the configuration field that must
    be on for it to write them (the chart grants them only then), "" if always."""

    verbs: tuple[str, ...]
    subresource: str = ""
    option: str = ""


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of object the scheduler reads."""

    kind: str
    group: str  # "" for the core API
    plural: str
    # The `EventHandlers` method that takes its events; None: not watched.
    handler: str | None
    namespaced: bool = True
    # Versions in order of preference; more than one: API discovery watches the
    # first the cluster serves, or none.
    versions: tuple[str, ...] = ("v1",)
    simulated: bool = True  # `troupe simulate` reads it from a dump
    writes: tuple[Write, ...] = ()

    @property
    def watched(self) -> bool:
        return self.handler is not None

    def key(self, version: str) -> str:
        """The name of its reflector (and of its handler) for `version`: the
        kind, or for a kind served in several versions the kind, group and
        version ("PodGroup.scheduling.k8s.io/v1beta1")."""
        return self.kind if len(self.versions) == 1 else f"{self.kind}.{self.group}/{version}"

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.key(v) for v in self.versions)

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)


CORE: Final = ""
STORAGE: Final = "storage.k8s.io"
# In the order the caches are filled: what other objects are read with comes
# first (a pod's priority needs its PriorityClass, its owner's spreading its
# Service...; device classes and slices before the claims that use them).
KINDS: Final = (
    Kind(
        "PriorityClass", "scheduling.k8s.io", "priorityclasses", "on_priority_class",
        namespaced=False,
    ),
    Kind("Namespace", CORE, "namespaces", "on_namespace", namespaced=False),
    # Spreading defaults build their selector from a pod's owners.
    Kind("Service", CORE, "services", "on_workload"),
    Kind("ReplicaSet", "apps", "replicasets", "on_workload"),
    Kind("StatefulSet", "apps", "statefulsets", "on_workload"),
    Kind("ReplicationController", CORE, "replicationcontrollers", "on_workload"),
    Kind("Node", CORE, "nodes", "on_node", namespaced=False),
    # VolumeBinding's PreBind patches a PV's claimRef, a claim's selected-node annotation.
    Kind(
        "PersistentVolume", CORE, "persistentvolumes", "on_volume_object", namespaced=False,
        writes=(Write(("patch",)),),
    ),
    Kind(
        "PersistentVolumeClaim", CORE, "persistentvolumeclaims", "on_volume_object",
        writes=(Write(("patch",)),),
    ),
    Kind("StorageClass", STORAGE, "storageclasses", "on_volume_object", namespaced=False),
    Kind("CSINode", STORAGE, "csinodes", "on_volume_object", namespaced=False),
    Kind("CSIDriver", STORAGE, "csidrivers", "on_volume_object", namespaced=False),
    Kind("CSIStorageCapacity", STORAGE, "csistoragecapacities", "on_volume_object"),
    # Dynamic Resource Allocation: what drivers publish, what admins taint and
    # what pods claim.
    Kind("DeviceClass", RESOURCE_API, "deviceclasses", "on_dra_object", namespaced=False),
    Kind("ResourceSlice", RESOURCE_API, "resourceslices", "on_dra_object", namespaced=False),
    Kind(
        "DeviceTaintRule", RESOURCE_API, "devicetaintrules", "on_dra_object", namespaced=False,
        versions=DEVICE_TAINT_RULE_VERSIONS,
    ),
    # DynamicResources' PreBind: the claim's finalizer, then its allocation and
    # reservedFor (status); Unreserve takes them back. The claim for extended
    # resources that DRA serves is created by the scheduler (and deleted when
    # the pod does not bind).
    Kind(
        "ResourceClaim", RESOURCE_API, "resourceclaims", "on_dra_object",
        writes=(Write(("patch", "create", "delete")), Write(("patch",), "status")),
    ),
    # Not watched: the simulated resourceclaim controller reads them.
    Kind("ResourceClaimTemplate", RESOURCE_API, "resourceclaimtemplates", None),
    # Kubernetes' CompositePodGroups (1.37, alpha: groups of groups), before
    # the PodGroups that name them as their parent; their status conditions.
    Kind(
        "CompositePodGroup", NATIVE_POD_GROUP_API, "compositepodgroups",
        "on_composite_pod_group", versions=(COMPOSITE_VERSION,),
        writes=(Write(("patch",), "status"),),
    ),
    # scheduler-plugins' PodGroups, then Kubernetes' own.
    Kind(
        "PodGroup", POD_GROUP_GROUP, "podgroups", "on_pod_group",
        versions=(POD_GROUP_VERSION,), writes=(Write(("patch",), "status"),),
    ),
    Kind(
        "PodGroup", NATIVE_POD_GROUP_API, "podgroups", "on_pod_group",
        versions=NATIVE_POD_GROUP_VERSIONS, writes=(Write(("patch",), "status"),),
    ),
    # scheduler-plugins' ElasticQuotas, CapacityScheduling's quotas (it writes
    # their status.used); before pods, so that a restart counts pods against them.
    Kind(
        "ElasticQuota", ELASTIC_QUOTA_GROUP, "elasticquotas", "on_elastic_quota",
        versions=(ELASTIC_QUOTA_VERSION,), writes=(Write(("patch",), "status"),),
    ),
    # Preemption respects them, best effort.
    Kind("PodDisruptionBudget", "policy", "poddisruptionbudgets", "on_pdb"),
    # Bindings, the PodScheduled condition; preemption deletes its victims (as
    # kube-scheduler's system:kube-scheduler); the explanation annotations are
    # written on the pods that ask, with explain on.
    Kind(
        "Pod", CORE, "pods", "on_pod",
        writes=(
            Write(("create",), "binding"),
            Write(("patch",), "status"),
            Write(("delete",)),
            Write(("patch",), option="troupe.explain.enabled"),
        ),
    ),
)  # fmt: skip


def object_kind(key: str) -> str:
    """The `kind` of the objects a WATCHED key stands for (both PodGroup APIs
    give "PodGroup")."""
    return key.partition(".")[0]


# (group, version, plural) of every reflector the scheduler may run, by key,
# in the table's order.
WATCHED: Final = {k.key(v): (k.group, v, k.plural) for k in KINDS if k.watched for v in k.versions}
# Kinds a cluster serves in one of several versions (API discovery picks the
# first it serves, or none).
VERSIONED: Final = tuple(k for k in KINDS if k.watched and len(k.versions) > 1)
CLUSTER_SCOPED: Final = frozenset(k.kind for k in KINDS if not k.namespaced)
# The kinds of object a cluster dump may hold for the scheduler, in the
# table's order.
SIMULATED: Final = tuple(dict.fromkeys(k.kind for k in KINDS if k.simulated))
