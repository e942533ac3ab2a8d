"""The scheduler's calls to the API server (`KubeClient`, its ClusterClient),
and the factory of its Lease client and of the reflectors' lane.

Traffic runs in lanes, as kube-scheduler gives events and leader election
their own clients: the scheduling work (binds, conditions, PodGroup status,
volume and claim patches, evictions, and the reads they need), Events, the
Lease, and the reflectors' lists and watches. Each lane has its own
connections and, but the watches, its own token bucket (QPS with a burst,
as client-go; `--qps`/`--burst` set the first two), so Lease renewals never
wait behind a backlog of binds (see `troupe.kube.transport`). Writes of
scheduling work are *fenced*: right before a request leaves, `fence()` must
say this replica still leads, else it fails with `NotLeader`.

Every request is JSON built here and sent with aiohttp from the event loop
(`Lane.send`); the kubernetes client only loaded the credentials
(`troupe.kube.credentials`). Errors are typed in one place
(`troupe.kube.errors.error_of`): 404 NotFound, 409 Conflict (BindConflict on
bind: the scheduler then reads the pod to tell a bind by someone else from a
re-created pod), else `ApiError`, whose text is the status and the server's
message, not the response headers.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import quote

from troupe import __version__
from troupe.api import jsonio
from troupe.api.elasticquota import ELASTIC_QUOTA_GROUP, ELASTIC_QUOTA_VERSION
from troupe.api.kinds import POD_GROUP_GROUP, POD_GROUP_VERSION
from troupe.api.types import (
    COMPOSITE_VERSION,
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
    NodeName,
    PodKey,
    split_group_key,
)
from troupe.core.cluster import BindConflict, Conflict, NotFound
from troupe.core.recorder import Create, EventRecorder, ObjectRef
from troupe.kube.credentials import Connection, Credentials, default_identity
from troupe.kube.errors import REFUSED
from troupe.kube.lease import KubeLease
from troupe.kube.transport import (
    DEFAULT_TIMEOUT,
    LIST_TIMEOUT,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    Http,
    Lane,
)

COMPONENT: Final = "troupe-scheduler"


def _split(key: str) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return ns, name


# What a path segment may hold unescaped: every valid object name and namespace.
_PLAIN_SEGMENT: Final = re.compile(r"[a-z0-9][a-z0-9.-]*")


def _seg(s: str) -> str:
    """A path segment, escaped as the generated API escapes path parameters
    (a DNS name, as object names are, needs no escaping: returned as is)."""
    return s if _PLAIN_SEGMENT.fullmatch(s) else quote(s, safe="")


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _object(data: bytes) -> Mapping[str, Any]:
    obj = jsonio.loads(data or b"{}")
    return obj if isinstance(obj, dict) else {}


class KubeClient:
    """ClusterClient (and LeaseClient factory) over the API server's HTTP."""

    def __init__(
        self,
        conn: Connection,
        *,
        qps: float = 50.0,
        burst: int = 100,
        connections: int = 32,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        identity: str | None = None,
    ) -> None:
        self.conn = conn
        self.identity = identity or default_identity()
        # As kube-scheduler's "kube-scheduler/v1.x (...)": the API server's audit
        # log and our tests can tell which replica wrote what.
        self.user_agent = f"{COMPONENT}/{__version__} ({self.identity})"
        self.qps, self.burst = qps, burst
        self.retries = retries
        self.backoff = backoff
        self.writes = Lane(
            "kube",
            self._http(connections),
            qps=qps,
            burst=burst,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
        )
        self.event_lane = Lane(
            "kube-events",
            self._http(max(1, connections // 4)),
            qps=qps,
            burst=burst,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
        )
        # Set by the operator: True while this replica may write scheduling work.
        self.fence: Callable[[], bool] | None = None
        self.recorder = EventRecorder(
            COMPONENT,
            f"{COMPONENT}-{self.identity}",
            now=time.monotonic,
            wall=time.time,
        )
        self.events_written = 0
        self._leases: list[KubeLease] = []
        # The scheduling.k8s.io version whose PodGroups we watch (discovered at start).
        self.native_pod_group_version = NATIVE_POD_GROUP_VERSIONS[0]

    def _http(self, connections: int, suffix: str = "") -> Http:
        return Http(self.conn, limit=connections, user_agent=self.user_agent + suffix)

    def credentials(self) -> Credentials:
        return self.conn.credentials()

    def watches(self, streams: int) -> Lane:
        """The reflectors' lane: `streams` watch streams plus their lists, on
        connections of its own (made on the loop that lists: kopf's). Not
        rate-limited, nor retried: a reflector backs off and resumes itself."""
        return Lane(
            "kube-watch",
            self._http(2 * streams + 2),
            qps=None,
            burst=0,
            timeout=LIST_TIMEOUT,
            retries=0,
            backoff=self.backoff,
        )

    async def read(self, what: str, path: str) -> Mapping[str, Any] | None:
        """A GET on the writes lane, not fenced: the JSON document, or None
        when the API has no such object (or resource)."""
        try:
            doc = await self.writes.get(what, path)
        except NotFound:
            return None
        return doc if isinstance(doc, dict) else None

    async def _patch_pod_status(self, what: str, pod: PodKey, patch: Mapping[str, Any]) -> None:
        """A fenced strategic-merge patch of the pod's status (what the generated
        `patch_namespaced_pod_status` sends for a dict)."""
        ns, name = _split(pod)
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}/status"
        await self.writes.send(
            what,
            "PATCH",
            path,
            patch,
            fence=self.fence,
            content_type=STRATEGIC_MERGE_PATCH,
            key=pod,
        )

    # ---- ClusterClient -------------------------------------------------------------

    async def bind(self, pod: PodKey, uid: str, node: NodeName) -> None:
        ns, name = _split(pod)
        body: Any = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}/binding"
        await self.writes.send(
            f"bind {pod}", "POST", path, body, fence=self.fence, key=pod, conflict=BindConflict
        )

    async def read_pod(self, pod: PodKey) -> Mapping[str, Any] | None:
        ns, name = _split(pod)
        return await self.read(f"get pod {pod}", f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}")

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        native, ns, name = split_group_key(group)
        api_group, version = (
            (NATIVE_POD_GROUP_API, self.native_pod_group_version)
            if native
            else (POD_GROUP_GROUP, POD_GROUP_VERSION)
        )
        await self._patch_status(
            "PodGroup", group, api_group, version, "podgroups", ns, name, status
        )

    async def patch_composite_pod_group_status(self, key: str, status: Mapping[str, Any]) -> None:
        ns, _, name = key.removeprefix(f"{NATIVE_POD_GROUP_API}/CompositePodGroup/").partition("/")
        await self._patch_status(
            "CompositePodGroup", key, NATIVE_POD_GROUP_API, COMPOSITE_VERSION,
            "compositepodgroups", ns, name, status,
        )  # fmt: skip

    async def patch_elastic_quota_status(self, key: str, status: Mapping[str, Any]) -> None:
        ns, _, name = key.partition("/")
        await self._patch_status(
            "ElasticQuota", key, ELASTIC_QUOTA_GROUP, ELASTIC_QUOTA_VERSION,
            "elasticquotas", ns, name, status,
        )  # fmt: skip

    async def _patch_status(
        self,
        kind: str,
        key: str,
        group: str,
        version: str,
        plural: str,
        ns: str,
        name: str,
        status: Mapping[str, Any],
    ) -> None:
        """A merge patch of an object's status subresource, as the generated
        patch_namespaced_custom_object_status sends (a null removes a field)."""
        path = f"/apis/{group}/{version}/namespaces/{_seg(ns)}/{plural}/{_seg(name)}/status"
        await self.writes.send(
            f"patch {kind} {key} status",
            "PATCH",
            path,
            {"status": dict(status)},
            fence=self.fence,
            content_type=MERGE_PATCH,
            key=key,
        )

    async def record_event(
        self, obj: ObjectRef, event_type: str, reason: str, message: str, action: str = ""
    ) -> None:
        """Write an Event as client-go's recorder does (see troupe/core/recorder.py):
        a repeat patches the existing Event's count; bursts are dropped."""
        if self.fence is not None and not self.fence():
            return  # a standby or a former leader writes nothing
        op = self.recorder.record(obj, event_type, reason, message, action)
        if op is None:
            return
        if isinstance(op, Create):
            await self._create_event(op)
            return
        try:
            path = f"/api/v1/namespaces/{_seg(op.namespace)}/events/{_seg(op.name)}"
            await self.event_lane.send(
                f"event for {obj.namespace}/{obj.name}",
                "PATCH",
                path,
                op.body,
                content_type=STRATEGIC_MERGE_PATCH,
            )
            self.events_written += 1
        except NotFound:
            # The Event expired meanwhile (events have a TTL): create it anew.
            self.recorder.forget(op.key)
            again = self.recorder.record(obj, event_type, reason, message, action)
            if isinstance(again, Create):
                await self._create_event(again)
        except REFUSED:
            self.recorder.forget(op.key)
            raise

    async def _create_event(self, op: Create) -> None:
        try:
            path = f"/api/v1/namespaces/{_seg(op.namespace)}/events"
            what = f"event {op.body['metadata']['name']}"
            await self.event_lane.send(what, "POST", path, op.body)
            self.events_written += 1
        except REFUSED:
            self.recorder.forget(op.key)
            raise

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        cond = {
            "type": "PodScheduled",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339(),
        }
        with contextlib.suppress(NotFound):  # the pod is gone: nothing to tell
            await self._patch_pod_status(
                f"condition of {pod}", pod, {"status": {"conditions": [cond]}}
            )

    async def patch_persistent_volume(
        self, name: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        path = f"/api/v1/persistentvolumes/{_seg(name)}"
        return await self._merge_patch(f"patch PersistentVolume {name}", name, path, patch)

    async def patch_persistent_volume_claim(
        self, key: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        ns, name = _split(key)
        path = f"/api/v1/namespaces/{_seg(ns)}/persistentvolumeclaims/{_seg(name)}"
        return await self._merge_patch(f"patch PersistentVolumeClaim {key}", key, path, patch)

    async def _merge_patch(
        self, what: str, key: str, path: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """A fenced merge patch (VolumeBinding's and DynamicResources' PreBind):
        the object as written."""
        data = await self.writes.send(
            what, "PATCH", path, patch, fence=self.fence, content_type=MERGE_PATCH, key=key
        )
        return _object(data)

    async def read_resource_claim(self, key: str) -> Mapping[str, Any] | None:
        ns, name = _split(key)
        path = f"/apis/resource.k8s.io/v1/namespaces/{_seg(ns)}/resourceclaims/{_seg(name)}"
        return await self.read(f"get ResourceClaim {key}", path)

    async def patch_resource_claim(
        self, key: str, patch: Mapping[str, Any], status: bool = False
    ) -> Mapping[str, Any]:
        """A fenced merge patch of a ResourceClaim (DynamicResources' PreBind)."""
        ns, name = _split(key)
        path = f"/apis/resource.k8s.io/v1/namespaces/{_seg(ns)}/resourceclaims/{_seg(name)}"
        what = f"patch ResourceClaim {key}{' status' if status else ''}"
        return await self._merge_patch(what, key, path + ("/status" if status else ""), patch)

    async def create_resource_claim(
        self, namespace: str, body: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        path = f"/apis/resource.k8s.io/v1/namespaces/{_seg(namespace)}/resourceclaims"
        data = await self.writes.send(
            f"create ResourceClaim in {namespace}",
            "POST",
            path,
            body,
            fence=self.fence,
            key=namespace,
        )
        return _object(data)

    async def annotate_pod(self, pod: PodKey, annotations: Mapping[str, str]) -> None:
        ns, name = _split(pod)
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}"
        await self.writes.send(
            f"annotate pod {pod}",
            "PATCH",
            path,
            {"metadata": {"annotations": dict(annotations)}},
            fence=self.fence,
            content_type=MERGE_PATCH,
            key=pod,
        )

    async def delete_resource_claim(self, key: str) -> None:
        ns, name = _split(key)
        path = f"/apis/resource.k8s.io/v1/namespaces/{_seg(ns)}/resourceclaims/{_seg(name)}"
        with contextlib.suppress(NotFound):  # gone already
            await self.writes.send(
                f"delete ResourceClaim {key}", "DELETE", path, {}, fence=self.fence, key=key
            )

    async def set_extended_resource_claim_status(
        self, pod: PodKey, status: Mapping[str, Any] | None
    ) -> None:
        await self._patch_pod_status(
            f"extended resource claim of {pod}",
            pod,
            {"status": {"extendedResourceClaimStatus": dict(status) if status else None}},
        )

    async def set_nominated_node(self, pod: PodKey, node: str | None) -> None:
        with contextlib.suppress(NotFound):  # the pod is gone: nothing to nominate
            await self._patch_pod_status(
                f"nominated node of {pod}", pod, {"status": {"nominatedNodeName": node or None}}
            )

    async def set_disruption_target(self, pod: PodKey, reason: str, message: str) -> None:
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339(),
        }
        await self._patch_pod_status(
            f"DisruptionTarget of {pod}", pod, {"status": {"conditions": [cond]}}
        )

    async def delete_pod(self, pod: PodKey, uid: str, grace_period_seconds: int | None) -> None:
        ns, name = _split(pod)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}"
        try:
            await self.writes.send(
                f"delete pod {pod}", "DELETE", path, body, fence=self.fence, key=pod
            )
        except Conflict:
            # The uid precondition failed: the victim is gone (re-created since).
            raise NotFound(pod) from None

    # ---- Reviewer (troupe.operator.serving: who may read the metrics port) ----------------

    async def review_token(self, token: str) -> Mapping[str, Any]:
        """The status of a TokenReview of `token`, made with this client's own
        credentials (kube-scheduler's delegated authentication). Not fenced: a
        standby serves its port too."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        return await self._review("TokenReview", "authentication.k8s.io", "tokenreviews", body)

    async def review_access(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        """The status of a SubjectAccessReview with `spec` (delegated authorization)."""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": dict(spec),
        }
        return await self._review(
            "SubjectAccessReview", "authorization.k8s.io", "subjectaccessreviews", body
        )

    async def _review(
        self, kind: str, group: str, plural: str, body: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        path = f"/apis/{group}/v1/{plural}"
        obj = _object(await self.writes.send(f"create {kind}", "POST", path, body))
        status = obj.get("status")
        return status if isinstance(status, dict) else {}

    def lease(
        self,
        namespace: str,
        name: str,
        timeout: float = 5.0,
    ) -> KubeLease:
        """A LeaseClient on a lane of its own (connection and budget) with a
        short per-request timeout and no retries (the elector retries every
        retryPeriod), so that renewals never wait behind writes."""
        lane = Lane(
            "kube-lease",
            self._http(1, " leader-election"),
            qps=5.0,
            burst=10,
            timeout=(timeout, timeout),
            retries=0,
            backoff=self.backoff,
        )
        lease = KubeLease(lane, namespace, name)
        self._leases.append(lease)
        return lease

    async def close_leases(self) -> None:
        """Close the Lease clients' connections (on the loop that used them)."""
        for lease in self._leases:
            await lease.lane.aclose()

    async def aclose(self) -> None:
        """Close every connection (on the loop that made the requests)."""
        await self.writes.aclose()
        await self.event_lane.aclose()
        await self.close_leases()
