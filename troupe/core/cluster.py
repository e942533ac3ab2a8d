"""How the core writes to the cluster: the `ClusterClient` protocol and the
errors its writes raise.

The core never imports kopf or the kubernetes client. It binds pods, patches
PodGroup and ElasticQuota status, records Events and sets pod conditions through a
`ClusterClient`. `troupe.kube` implements it against the API server;
`troupe.core.memory_cluster.InMemoryCluster` implements it in memory for the
simulator, the benchmarks and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from troupe.api.types import NodeName, PodKey
from troupe.core.recorder import ObjectRef

# The start of a bind failure's message on HTTP 409: the scheduler reads the pod
# to tell "bound by someone" (forget it) from "re-created" (schedule it again).
BIND_CONFLICT = "binding conflict"


class Conflict(Exception):
    """HTTP 409 on a write with a resourceVersion precondition: the object changed."""


class BindConflict(Conflict):
    """HTTP 409 on bind. Not proof that the pod is bound: a pod deleted and
    re-created under the same name fails the binding's UID precondition too.
    The scheduler reads the pod (`read_pod`) before it decides."""


class NotFound(Exception):
    """The object is gone (HTTP 404)."""


class NotLeader(Exception):
    """A write was not sent: this replica no longer holds the Lease."""


class ClusterClient(Protocol):
    async def bind(self, pod: PodKey, uid: str, node: NodeName) -> None:
        """Bind through pods/binding. Raises BindConflict, NotFound, or another error."""
        ...

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the PodGroup's status subresource (`group` is ns/name)."""
        ...

    async def patch_composite_pod_group_status(self, key: str, status: Mapping[str, Any]) -> None:
        """Merge-patch a CompositePodGroup's status subresource (`key`:
        troupe.api.types.composite_key). Raises NotFound if it is gone."""
        ...

    async def patch_elastic_quota_status(self, key: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the ElasticQuota's status subresource (`key` is ns/name;
        a null removes a field). Raises NotFound if it is gone."""
        ...

    async def record_event(
        self, obj: ObjectRef, event_type: str, reason: str, message: str, action: str = ""
    ) -> None:
        """Record an Event on `obj` (correlated and aggregated as client-go does)."""
        ...

    async def read_pod(self, pod: PodKey) -> Mapping[str, Any] | None:
        """The pod as the API server has it now, or None if it is gone."""
        ...

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        """Set the PodScheduled condition."""
        ...

    async def patch_persistent_volume(
        self, name: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """Merge-patch a PersistentVolume (VolumeBinding's claimRef); a
        metadata.resourceVersion in the patch is a precondition. Returns the
        object as written. Raises Conflict, NotFound, or another error."""
        ...

    async def patch_persistent_volume_claim(
        self, key: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """Merge-patch a PersistentVolumeClaim (`key` is ns/name; the
        selected-node annotation), as `patch_persistent_volume`."""

    async def read_resource_claim(self, key: str) -> Mapping[str, Any] | None:
        """The ResourceClaim `key` (ns/name) as the API has it now, or None."""
        ...

    async def patch_resource_claim(
        self, key: str, patch: Mapping[str, Any], status: bool = False
    ) -> Mapping[str, Any]:
        """Merge-patch a ResourceClaim (its status subresource when `status`);
        a resourceVersion in the patch is a precondition (Conflict)."""
        ...

    async def create_resource_claim(
        self, namespace: str, body: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """Create a ResourceClaim (metadata.generateName names it); returns it."""
        ...

    async def annotate_pod(self, pod: PodKey, annotations: Mapping[str, str]) -> None:
        """Merge the annotations into the pod's metadata (explanations)."""
        ...

    async def delete_resource_claim(self, key: str) -> None:
        """Delete the ResourceClaim `key` (ns/name); gone already is not an error."""
        ...

    async def set_extended_resource_claim_status(
        self, pod: PodKey, status: Mapping[str, Any] | None
    ) -> None:
        """The pod's status.extendedResourceClaimStatus (None: cleared)."""
        ...

    async def set_nominated_node(self, pod: PodKey, node: str | None) -> None:
        """Set status.nominatedNodeName, or clear it (None)."""
        ...

    async def set_disruption_target(self, pod: PodKey, reason: str, message: str) -> None:
        """Add the DisruptionTarget condition (status True) to a pod about to be deleted."""
        ...

    async def delete_pod(self, pod: PodKey, uid: str, grace_period_seconds: int | None) -> None:
        """Delete the pod (precondition: its uid) with that grace period (None: the
        pod's own). Raises NotFound if it is gone."""
        ...
