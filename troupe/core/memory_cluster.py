"""`InMemoryCluster`: a `ClusterClient` that keeps objects as dicts.

The simulator, the benchmarks and the tests write through it. It raises the
errors the API server would (`NotFound`, `Conflict`, `BindConflict`) and feeds
the consequences of each write back to the scheduler through callbacks, as the
API's watch would deliver them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from troupe.api.types import NodeName, PodKey
from troupe.core.cluster import BindConflict, Conflict, NotFound
from troupe.core.recorder import ObjectRef


@dataclass
class RecordedEvent:
    pod: PodKey  # namespace/name of the involved object
    type: str
    reason: str
    message: str
    obj: ObjectRef | None = None
    action: str = ""


@dataclass
class InMemoryCluster:
    """A ClusterClient that keeps objects as dicts and reports writes back.

    `on_pod_bound(key, node)` is called after a successful bind, as the watch
    would deliver the pod's MODIFIED event. Failures can be injected per pod:
    `fail_binds[key] = [exception, ...]` raises them on successive binds.
    """

    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    pod_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    # CompositePodGroups by their key (troupe.api.types.composite_key).
    composite_pod_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ElasticQuotas by ns/name (their status.used is written).
    elastic_quotas: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)
    conditions: dict[str, dict[str, str]] = field(default_factory=dict)
    fail_binds: dict[str, list[Exception]] = field(default_factory=dict)
    on_pod_bound: Callable[[PodKey, NodeName], None] | None = None
    # PersistentVolumes by name and claims by ns/name; `on_volume_write(kind,
    # object)` is called after each write, as the watch would deliver it.
    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    on_volume_write: Callable[[str, dict[str, Any]], None] | None = None
    volume_writes: int = 0
    # ResourceClaims by ns/name; `on_claim_write(object)` after each write.
    resource_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    on_claim_write: Callable[[dict[str, Any]], None] | None = None
    on_claim_deleted: Callable[[dict[str, Any]], None] | None = None
    annotation_writes: int = 0
    claim_writes: int = 0
    # Called after a delete with the pod's key and the grace period in effect; the
    # pod keeps its deletionTimestamp until the caller removes it (as a kubelet would).
    on_pod_deleted: Callable[[PodKey, int], None] | None = None
    deletions: list[tuple[PodKey, int]] = field(default_factory=list)
    binds: int = 0
    status_patches: int = 0
    condition_writes: int = 0

    async def bind(self, pod: PodKey, uid: str, node: NodeName) -> None:
        failures = self.fail_binds.get(pod)
        if failures:
            raise failures.pop(0)
        obj = self.pods.get(pod)
        if obj is None:
            raise NotFound(pod)
        spec = obj.setdefault("spec", {})
        if spec.get("nodeName"):
            raise BindConflict(f"pod {pod} is already assigned to node {spec['nodeName']!r}")
        spec["nodeName"] = node
        self.binds += 1
        if self.on_pod_bound is not None:
            self.on_pod_bound(pod, node)

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        obj = self.pod_groups.get(group)
        if obj is None:
            raise NotFound(group)
        obj.setdefault("status", {}).update(status)
        self.status_patches += 1

    async def patch_composite_pod_group_status(self, key: str, status: Mapping[str, Any]) -> None:
        obj = self.composite_pod_groups.get(key)
        if obj is None:
            raise NotFound(key)
        obj.setdefault("status", {}).update(status)
        self.status_patches += 1

    async def patch_elastic_quota_status(self, key: str, status: Mapping[str, Any]) -> None:
        obj = self.elastic_quotas.get(key)
        if obj is None:
            raise NotFound(key)
        current = obj.setdefault("status", {})
        for k, v in status.items():  # a JSON merge patch, two levels deep
            if v is None:
                current.pop(k, None)
            elif isinstance(v, Mapping):
                base = current.get(k)
                merged = {**(base if isinstance(base, dict) else {}), **v}
                current[k] = {f: x for f, x in merged.items() if x is not None}
            else:
                current[k] = v
        self.status_patches += 1

    async def record_event(
        self, obj: ObjectRef, event_type: str, reason: str, message: str, action: str = ""
    ) -> None:
        key = PodKey(f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name)
        self.events.append(RecordedEvent(key, event_type, reason, message, obj, action))

    async def read_pod(self, pod: PodKey) -> Mapping[str, Any] | None:
        return self.pods.get(pod)

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        self.conditions[pod] = {"status": status, "reason": reason, "message": message}
        self.condition_writes += 1

    async def patch_persistent_volume(
        self, name: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        return self._patch_volume("PersistentVolume", self.volumes, name, patch)

    async def patch_persistent_volume_claim(
        self, key: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        return self._patch_volume("PersistentVolumeClaim", self.claims, key, patch)

    def _patch_volume(
        self, kind: str, store: dict[str, dict[str, Any]], key: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        new = _patched(kind, store, key, patch, patch)
        self.volume_writes += 1
        if self.on_volume_write is not None:
            self.on_volume_write(kind, new)
        return new

    async def read_resource_claim(self, key: str) -> Mapping[str, Any] | None:
        return self.resource_claims.get(key)

    async def patch_resource_claim(
        self, key: str, patch: Mapping[str, Any], status: bool = False
    ) -> Mapping[str, Any]:
        # The status subresource takes only status; the object, everything else.
        part = (
            {"status": patch.get("status")}
            if status
            else {k: v for k, v in patch.items() if k != "status"}
        )
        new = _patched("ResourceClaim", self.resource_claims, key, patch, part)
        if not new["metadata"].get("finalizers"):
            new["metadata"].pop("finalizers", None)
            if new["metadata"].get("deletionTimestamp"):
                # Its last finalizer gone: the API server removes it now.
                await self.delete_resource_claim(key)
                return new
        self.claim_writes += 1
        if self.on_claim_write is not None:
            self.on_claim_write(new)
        return new

    async def create_resource_claim(
        self, namespace: str, body: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        md = dict(body.get("metadata") or {})
        if not md.get("name"):
            n = len(self.resource_claims)
            md["name"] = f"{md.get('generateName', 'claim-')}{n:05d}"[-63:]
        md.setdefault("namespace", namespace)
        md["uid"] = f"uid-claim-{namespace}-{md['name']}"
        md["resourceVersion"] = "1"
        obj = {**body, "metadata": md}
        key = f"{namespace}/{md['name']}"
        if key in self.resource_claims:
            raise Conflict(f"ResourceClaim {key} already exists")
        self.resource_claims[key] = obj
        self.claim_writes += 1
        if self.on_claim_write is not None:
            self.on_claim_write(obj)
        return obj

    async def annotate_pod(self, pod: PodKey, annotations: Mapping[str, str]) -> None:
        obj = self.pods.get(pod)
        if obj is None:
            raise NotFound(pod)
        md = obj.setdefault("metadata", {})
        md["annotations"] = {**(md.get("annotations") or {}), **annotations}
        self.annotation_writes += 1

    async def delete_resource_claim(self, key: str) -> None:
        obj = self.resource_claims.get(key)
        if obj is None:
            return
        md = obj.get("metadata") or {}
        if md.get("finalizers"):
            # As the API server: marked for deletion, gone once its finalizers are.
            if not md.get("deletionTimestamp"):
                new = {**obj, "metadata": {**md, "deletionTimestamp": "1970-01-01T00:00:00Z"}}
                new["metadata"]["resourceVersion"] = str(int(md.get("resourceVersion") or 0) + 1)
                self.resource_claims[key] = new
                if self.on_claim_write is not None:
                    self.on_claim_write(new)
            return
        del self.resource_claims[key]
        if self.on_claim_deleted is not None:
            self.on_claim_deleted(obj)

    async def set_extended_resource_claim_status(
        self, pod: PodKey, status: Mapping[str, Any] | None
    ) -> None:
        obj = self.pods.get(pod)
        if obj is None:
            raise NotFound(pod)
        st = obj.setdefault("status", {})
        if status is None:
            st.pop("extendedResourceClaimStatus", None)
        else:
            st["extendedResourceClaimStatus"] = dict(status)

    async def set_nominated_node(self, pod: PodKey, node: str | None) -> None:
        obj = self.pods.get(pod)
        if obj is None:
            raise NotFound(pod)
        status = obj.setdefault("status", {})
        if node:
            status["nominatedNodeName"] = node
        else:
            status.pop("nominatedNodeName", None)

    async def set_disruption_target(self, pod: PodKey, reason: str, message: str) -> None:
        obj = self.pods.get(pod)
        if obj is None:
            raise NotFound(pod)
        conds = obj.setdefault("status", {}).setdefault("conditions", [])
        conds[:] = [c for c in conds if c.get("type") != "DisruptionTarget"]
        conds.append(
            {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}
        )

    async def delete_pod(self, pod: PodKey, uid: str, grace_period_seconds: int | None) -> None:
        obj = self.pods.get(pod)
        if obj is None or (uid and obj.get("metadata", {}).get("uid", uid) != uid):
            raise NotFound(pod)
        grace = grace_period_seconds
        if grace is None:
            grace = int(obj.get("spec", {}).get("terminationGracePeriodSeconds", 30))
        obj.setdefault("metadata", {}).setdefault("deletionTimestamp", "1970-01-01T00:00:00Z")
        self.deletions.append((pod, grace))
        if self.on_pod_deleted is not None:
            self.on_pod_deleted(pod, grace)


def _patched(
    kind: str,
    store: dict[str, dict[str, Any]],
    key: str,
    patch: Mapping[str, Any],
    body: Mapping[str, Any],
) -> dict[str, Any]:
    """store[key] merge-patched with `body`, its resourceVersion bumped; the
    patch's metadata.resourceVersion, if any, is a precondition (Conflict)."""
    obj = store.get(key)
    if obj is None:
        raise NotFound(key)
    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    want = (patch.get("metadata") or {}).get("resourceVersion")
    if want is not None and str(want) != rv:
        raise Conflict(f"{kind} {key}: the object has been modified")
    new = merge_patch(obj, body)
    new.setdefault("metadata", {})["resourceVersion"] = str(int(rv or 0) + 1)
    store[key] = new
    return new


def merge_patch(obj: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch (what kubectl/the API do for merge-patch+json)."""
    out = dict(obj)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_patch(out[k], v)
        elif isinstance(v, Mapping):
            out[k] = merge_patch({}, v)
        else:
            out[k] = v
    return out
