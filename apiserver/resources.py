"""The kinds the embedded API server serves, and the discovery documents for them.

A `Resource` is one group/version/plural, as kube-apiserver's discovery lists it.
The built-in table holds what Troupe and kubectl touch; a CustomResourceDefinition
written through the API adds its served versions at run time (`from_crd`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

VERBS: Final = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    # CRD additionalPrinterColumns (name, type, jsonPath, priority) for Table output.
    printer_columns: tuple[tuple[str, str, str, int], ...] = ()
    categories: tuple[str, ...] = ()
    custom: bool = False  # served from a CRD: strategic merge patch is 415, as in kube
    verbs: tuple[str, ...] = VERBS  # what discovery lists (the reviews: create only)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def qualified(self) -> str:
        """How kube names the resource in messages: `pods`, `podgroups.scheduling.x-k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_resources(self) -> list[dict[str, Any]]:
        """The APIResource entries of this resource and its subresources."""
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        out = [main]
        for sub in sorted(self.subresources):
            verbs, kind = (
                (["create"], "Binding")
                if sub == "binding"
                else (
                    ["get", "patch", "update"],
                    self.kind,
                )
            )
            out.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": kind,
                    "verbs": verbs,
                }
            )
        return out


def _r(
    gv: str,
    plural: str,
    kind: str,
    namespaced: bool,
    short: Iterable[str] = (),
    subs: Iterable[str] = (),
    categories: Iterable[str] = (),
) -> Resource:
    group, _, version = gv.rpartition("/")
    return Resource(
        group,
        version,
        plural,
        kind,
        namespaced,
        tuple(short),
        frozenset(subs),
        categories=tuple(categories),
    )


BUILTIN: Final[tuple[Resource, ...]] = (
    _r("v1", "pods", "Pod", True, ["po"], ["binding", "status"], ["all"]),
    _r("v1", "nodes", "Node", False, ["no"], ["status"]),
    _r("v1", "namespaces", "Namespace", False, ["ns"], ["status"]),
    _r("v1", "services", "Service", True, ["svc"], ["status"], ["all"]),
    _r("v1", "replicationcontrollers", "ReplicationController", True, ["rc"], ["status"]),
    _r("v1", "events", "Event", True, ["ev"]),
    _r("v1", "configmaps", "ConfigMap", True, ["cm"]),
    _r("v1", "serviceaccounts", "ServiceAccount", True, ["sa"]),
    _r("v1", "secrets", "Secret", True),  # Helm keeps its releases in them
    _r("v1", "persistentvolumes", "PersistentVolume", False, ["pv"], ["status"]),
    _r("v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ["pvc"], ["status"]),
    _r("apps/v1", "replicasets", "ReplicaSet", True, ["rs"], ["status"], ["all"]),
    _r("apps/v1", "statefulsets", "StatefulSet", True, ["sts"], ["status"], ["all"]),
    _r("apps/v1", "deployments", "Deployment", True, ["deploy"], ["status"], ["all"]),
    _r("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"], ["status"]),
    _r("scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", False, ["pc"]),
    _r("storage.k8s.io/v1", "storageclasses", "StorageClass", False, ["sc"]),
    _r("storage.k8s.io/v1", "csinodes", "CSINode", False),
    _r("storage.k8s.io/v1", "csidrivers", "CSIDriver", False),
    _r("storage.k8s.io/v1", "csistoragecapacities", "CSIStorageCapacity", True),
    _r("resource.k8s.io/v1", "resourceclaims", "ResourceClaim", True, [], ["status"]),
    _r("resource.k8s.io/v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    _r("resource.k8s.io/v1", "deviceclasses", "DeviceClass", False),
    _r("resource.k8s.io/v1", "resourceslices", "ResourceSlice", False),
    _r("resource.k8s.io/v1", "devicetaintrules", "DeviceTaintRule", False, [], ["status"]),
    _r("coordination.k8s.io/v1", "leases", "Lease", True),
    _r("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False),
    _r("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False),
    _r("rbac.authorization.k8s.io/v1", "roles", "Role", True),
    _r("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    _r("events.k8s.io/v1", "events", "Event", True, ["ev"]),
    # Answered, never stored (apiserver/reviews.py): Troupe's secure port asks them.
    Resource(
        "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, verbs=("create",)
    ),
    Resource(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        False,
        verbs=("create",),
    ),
    _r(
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        ["crd", "crds"],
        ["status"],
    ),
)

# The PodGroup of scheduler-plugins, for servers that pre-register it instead of
# loading crds/ through the API.
PODGROUP: Final = Resource(
    "scheduling.x-k8s.io",
    "v1alpha1",
    "podgroups",
    "PodGroup",
    True,
    ("pg", "pgs"),
    frozenset({"status"}),
    (
        ("Phase", "string", ".status.phase", 0),
        ("MinMember", "integer", ".spec.minMember", 0),
        ("Running", "integer", ".status.running", 0),
        ("Succeeded", "integer", ".status.succeeded", 0),
        ("Failed", "integer", ".status.failed", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
    ),
    custom=True,
)

# scheduler-plugins' ElasticQuota (crds/scheduling.x-k8s.io_elasticquotas.yaml),
# served with its PodGroup.
ELASTICQUOTA: Final = Resource(
    "scheduling.x-k8s.io",
    "v1alpha1",
    "elasticquotas",
    "ElasticQuota",
    True,
    ("eq", "eqs"),
    frozenset({"status"}),
    (
        ("Used", "string", ".status.used", 0),
        ("Min", "string", ".spec.min", 0),
        ("Max", "string", ".spec.max", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
    ),
    custom=True,
)

# Kubernetes' own PodGroup (scheduling.k8s.io; GenericWorkload), built in, with
# a status subresource: v1alpha2 as Kubernetes 1.36 serves it, v1beta1 and
# v1alpha3 as 1.37 does (k8s.io/api scheduling/; 1.37 removed v1alpha2). A
# server serves one of its versions (see Store); pods' spec.schedulingGroup
# passes through as any other field.
NATIVE_PODGROUP_VERSIONS: Final = ("v1alpha2", "v1alpha3", "v1beta1")


def native_podgroups(version: str) -> Resource:
    assert version in NATIVE_PODGROUP_VERSIONS, version
    return _r(f"scheduling.k8s.io/{version}", "podgroups", "PodGroup", True, subs=["status"])


# Kubernetes 1.37's CompositePodGroup: served in v1alpha3 only, with the
# CompositePodGroup gate (the server serves it with v1alpha3 PodGroups).
COMPOSITE_PODGROUPS: Final = _r(
    "scheduling.k8s.io/v1alpha3", "compositepodgroups", "CompositePodGroup", True, subs=["status"]
)


def from_crd(crd: Mapping[str, Any]) -> list[Resource]:
    """The resources a CustomResourceDefinition serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for ver in spec.get("versions") or []:
        if not ver.get("served", True):
            continue
        columns = tuple(
            (c["name"], c.get("type", "string"), c["jsonPath"], int(c.get("priority", 0)))
            for c in ver.get("additionalPrinterColumns") or []
        )
        out.append(
            Resource(
                spec["group"],
                ver["name"],
                names["plural"],
                names["kind"],
                spec.get("scope", "Namespaced") == "Namespaced",
                tuple(names.get("shortNames") or ()),
                frozenset(k for k in (ver.get("subresources") or {}) if k in ("status", "scale")),
                columns,
                tuple(names.get("categories") or ()),
                custom=True,
            )
        )
    return out


@dataclass
class Registry:
    """Resources by (group, version, plural); discovery documents over them."""

    by_key: dict[tuple[str, str, str], Resource] = field(default_factory=dict)

    def add(self, res: Resource) -> None:
        self.by_key[res.key] = res

    def remove(self, res: Resource) -> None:
        self.by_key.pop(res.key, None)

    def get(self, group: str, version: str, plural: str) -> Resource | None:
        return self.by_key.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        group, _, version = api_version.rpartition("/")
        for res in self.by_key.values():
            if res.group == group and res.version == version and res.kind == kind:
                return res
        return None

    def find_plural(self, plural: str) -> list[Resource]:
        return [r for r in self.by_key.values() if r.plural == plural]

    def groups(self) -> dict[str, list[str]]:
        """Non-core groups and their versions, in registration order."""
        out: dict[str, list[str]] = {}
        for res in self.by_key.values():
            if res.group and res.version not in out.setdefault(res.group, []):
                out[res.group].append(res.version)
        return out

    def api_versions(self, server_address: str) -> dict[str, Any]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": listed,
            "preferredVersion": listed[0],
        }

    def api_group_list(self) -> dict[str, Any]:
        groups = [self.api_group(g) for g in self.groups()]
        for g in groups:
            if g is not None:
                del g["kind"], g["apiVersion"]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        found = [r for r in self.by_key.values() if r.group == group and r.version == version]
        if not found:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": found[0].group_version,
            "resources": [entry for r in found for entry in r.api_resources()],
        }
