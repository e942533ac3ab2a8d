"""What the scheduler watches: one table of kinds, read by the operator's
reflectors (what to list and watch, in which order) and by `troupe simulate`
(which objects of a dump it takes). Light: no client library is imported."""

from __future__ import annotations

from typing import Final

from troupe.api.types import NATIVE_POD_GROUP_API, NATIVE_POD_GROUP_VERSIONS

POD_GROUP_GROUP: Final = "scheduling.x-k8s.io"
POD_GROUP_VERSION: Final = "v1alpha1"


def native_kind(version: str) -> str:
    """The key under which WATCHED holds scheduling.k8s.io PodGroups of `version`."""
    return f"PodGroup.{NATIVE_POD_GROUP_API}/{version}"


RESOURCE_API: Final = "resource.k8s.io"
# DeviceTaintRule: GA (v1) in Kubernetes 1.37, beta (v1beta2) in 1.36, alpha
# (v1alpha3) before; the newest the cluster serves is watched.
DEVICE_TAINT_RULE_VERSIONS: Final = ("v1", "v1beta2", "v1alpha3")


def taint_rule_kind(version: str) -> str:
    """The key under which WATCHED holds DeviceTaintRules of `version`."""
    return f"DeviceTaintRule.{RESOURCE_API}/{version}"


# Kinds a cluster serves in one of several versions (API discovery picks the
# first it serves, or none): group, versions in order of preference, plural,
# and the WATCHED key of a version.
VERSIONED: Final = {
    "PodGroup": (NATIVE_POD_GROUP_API, NATIVE_POD_GROUP_VERSIONS, "podgroups", native_kind),
    "DeviceTaintRule": (
        RESOURCE_API,
        DEVICE_TAINT_RULE_VERSIONS,
        "devicetaintrules",
        taint_rule_kind,
    ),
}


def object_kind(key: str) -> str:
    """The `kind` of the objects a WATCHED key stands for (both PodGroup APIs
    give "PodGroup")."""
    return key.partition(".")[0]


# (group, version, plural) of what the scheduler watches, by kind, in the order
# the caches are filled: what other objects are read with comes first (a pod's
# priority needs its PriorityClass, its owner's spreading its Service...).
WATCHED: Final = {
    "PriorityClass": ("scheduling.k8s.io", "v1", "priorityclasses"),
    "Namespace": ("", "v1", "namespaces"),
    "Service": ("", "v1", "services"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "Node": ("", "v1", "nodes"),
    "PersistentVolume": ("", "v1", "persistentvolumes"),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
    "StorageClass": ("storage.k8s.io", "v1", "storageclasses"),
    "CSINode": ("storage.k8s.io", "v1", "csinodes"),
    "CSIDriver": ("storage.k8s.io", "v1", "csidrivers"),
    "CSIStorageCapacity": ("storage.k8s.io", "v1", "csistoragecapacities"),
    # Dynamic Resource Allocation: classes and slices before the claims that use them.
    "DeviceClass": ("resource.k8s.io", "v1", "deviceclasses"),
    "ResourceSlice": ("resource.k8s.io", "v1", "resourceslices"),
    # Admins' taints on devices: the operator watches the one version discovery finds.
    **{
        taint_rule_kind(v): (RESOURCE_API, v, "devicetaintrules")
        for v in DEVICE_TAINT_RULE_VERSIONS
    },
    "ResourceClaim": ("resource.k8s.io", "v1", "resourceclaims"),
    "PodGroup": (POD_GROUP_GROUP, POD_GROUP_VERSION, "podgroups"),
    # Kubernetes' own PodGroups: the operator watches the one version discovery finds.
    **{native_kind(v): (NATIVE_POD_GROUP_API, v, "podgroups") for v in NATIVE_POD_GROUP_VERSIONS},
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets"),
    "Pod": ("", "v1", "pods"),
}

CLUSTER_SCOPED: Final = frozenset(
    {
        "Node",
        "PriorityClass",
        "Namespace",
        "PersistentVolume",
        "StorageClass",
        "CSINode",
        "CSIDriver",
        "DeviceClass",
        "ResourceSlice",
        "DeviceTaintRule",
    }
)

# The kinds of object a cluster dump may hold for the scheduler.
OBJECT_KINDS: Final = tuple(dict.fromkeys(object_kind(k) for k in WATCHED))
