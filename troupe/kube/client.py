"""The writes of the scheduler (`KubeClient`, its ClusterClient) and the
factory of its Lease client.

Traffic runs in three lanes, as kube-scheduler gives events and leader
election their own clients: writes of the scheduling work (binds, conditions,
PodGroup status), Events, and the Lease. Each lane has its own token bucket
(QPS with a burst, as client-go) and its own connections, so Lease renewals
never wait behind a backlog of binds (see `troupe.kube.transport`). Writes of
scheduling work are *fenced*: right before a request leaves, `fence()` must
say this replica still leads, else it fails with `NotLeader`.

The requests made per pod (binds, Events, pod status patches) are sent from
the event loop with aiohttp as JSON built here: through the synchronous
kubernetes client each cost far more CPU (its per-call machinery, urllib3 in a
thread and the hop back to the loop; docs/benchmarks.md has the figures). The
kubernetes client still makes the other calls (reads, PodGroup status,
volumes, the Lease) in its lane's thread pool, with `_preload_content=False`
where the answer is not a model the client can parse (a real API server
answers a binding with a Status).

Errors are typed in one place (`troupe.kube.errors.typed`): 404 NotFound, 409
Conflict (BindConflict on bind: the scheduler then reads the pod to tell a bind
by someone else from a re-created pod), else `ApiError`, whose text is the
status and the server's message, not the response headers.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import quote

from kubernetes import client as k8s

from troupe import __version__
from troupe.api.kinds import POD_GROUP_GROUP, POD_GROUP_VERSION
from troupe.api.types import (
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
    NodeName,
    PodKey,
    split_group_key,
)
from troupe.core.cluster import BindConflict, NotFound
from troupe.core.recorder import Create, EventRecorder, ObjectRef
from troupe.kube.credentials import Credentials, credentials_of, default_identity
from troupe.kube.errors import api_error, typed
from troupe.kube.lease import KubeLease
from troupe.kube.transport import (
    DEFAULT_TIMEOUT,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    Lane,
    LoopHttp,
    T,
)

COMPONENT: Final = "troupe-scheduler"


def _any(body: Mapping[str, Any]) -> Any:
    """A plain dict where the client's stubs want a model: it serializes both."""
    return dict(body)


def _split(key: str) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return ns, name


def _seg(s: str) -> str:
    """A path segment, escaped as the generated API escapes path parameters."""
    return quote(s, safe="")


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeClient:
    """ClusterClient (and LeaseClient factory) over the kubernetes client."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        qps: float = 50.0,
        burst: int = 100,
        workers: int = 8,
        connections: int = 32,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        identity: str | None = None,
    ) -> None:
        self.api = api
        self.identity = identity or default_identity()
        # As kube-scheduler's "kube-scheduler/v1.x (...)": the API server's audit
        # log and our tests can tell which replica wrote what.
        api.user_agent = f"{COMPONENT}/{__version__} ({self.identity})"
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.writes = Lane(
            "kube",
            qps=qps,
            burst=burst,
            workers=workers,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            http=LoopHttp(api, limit=connections),
        )
        self.event_lane = Lane(
            "kube-events",
            qps=qps,
            burst=burst,
            workers=1,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            http=LoopHttp(api, limit=max(1, connections // 4)),
        )
        self.retries = retries
        self.backoff = backoff
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

    def credentials(self) -> Credentials:
        return credentials_of(self.api.configuration)

    async def call(self, what: str, fn: Callable[[tuple[float, float]], T]) -> T:
        """A read on the writes lane (lists, gets), not fenced."""
        return await self.writes.call(what, fn)

    async def _write(self, what: str, fn: Callable[[tuple[float, float]], T]) -> T:
        return await self.writes.call(what, fn, self.fence)

    async def _patch_pod_status(self, what: str, pod: PodKey, patch: Mapping[str, Any]) -> None:
        """A fenced strategic-merge patch of the pod's status (what the generated
        `patch_namespaced_pod_status` sends for a dict), from the loop."""
        ns, name = _split(pod)
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}/status"
        await self.writes.send(what, "PATCH", path, patch, self.fence, STRATEGIC_MERGE_PATCH)

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
        try:
            await self.writes.send(f"bind {pod}", "POST", path, body, self.fence)
        except k8s.ApiException as e:
            raise typed(e, pod, BindConflict) from None

    async def read_pod(self, pod: PodKey) -> Mapping[str, Any] | None:
        ns, name = _split(pod)
        return await self._read(
            f"get pod {pod}",
            lambda t: self.core.read_namespaced_pod(
                name, ns, _preload_content=False, _request_timeout=t
            ),
        )

    async def _read(
        self, what: str, fn: Callable[[tuple[float, float]], Any]
    ) -> Mapping[str, Any] | None:
        """One object as JSON (the client's call with `_preload_content=False`),
        or None if the API has no such object."""
        try:
            resp: Any = await self.call(what, fn)
        except k8s.ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e) from None
        obj = json.loads(resp.data or b"{}")
        return obj if isinstance(obj, dict) else None

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        native, ns, name = split_group_key(group)
        api_group, version = (
            (NATIVE_POD_GROUP_API, self.native_pod_group_version)
            if native
            else (POD_GROUP_GROUP, POD_GROUP_VERSION)
        )
        try:
            await self._write(
                f"patch PodGroup {group} status",
                lambda t: self.custom.patch_namespaced_custom_object_status(
                    api_group,
                    version,
                    ns,
                    "podgroups",
                    name,
                    {"status": dict(status)},
                    _request_timeout=t,
                ),
            )
        except k8s.ApiException as e:
            raise typed(e, group) from None

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
        except k8s.ApiException as e:
            self.recorder.forget(op.key)
            if e.status != 404:
                raise api_error(e) from None
            # The Event expired meanwhile (events have a TTL): create it anew.
            again = self.recorder.record(obj, event_type, reason, message, action)
            if isinstance(again, Create):
                await self._create_event(again)

    async def _create_event(self, op: Create) -> None:
        try:
            path = f"/api/v1/namespaces/{_seg(op.namespace)}/events"
            what = f"event {op.body['metadata']['name']}"
            await self.event_lane.send(what, "POST", path, op.body)
            self.events_written += 1
        except k8s.ApiException as e:
            self.recorder.forget(op.key)
            raise api_error(e) from None

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        cond = {
            "type": "PodScheduled",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339(),
        }
        try:
            await self._patch_pod_status(
                f"condition of {pod}", pod, {"status": {"conditions": [cond]}}
            )
        except k8s.ApiException as e:
            if e.status != 404:
                raise api_error(e) from None

    async def patch_persistent_volume(
        self, name: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        return await self._merge_patch(
            f"patch PersistentVolume {name}",
            name,
            lambda t: self.core.patch_persistent_volume(
                name,
                dict(patch),
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=t,
            ),
        )

    async def patch_persistent_volume_claim(
        self, key: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        ns, name = _split(key)
        return await self._merge_patch(
            f"patch PersistentVolumeClaim {key}",
            key,
            lambda t: self.core.patch_namespaced_persistent_volume_claim(
                name,
                ns,
                dict(patch),
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=t,
            ),
        )

    async def _merge_patch(
        self, what: str, key: str, fn: Callable[[tuple[float, float]], Any]
    ) -> Mapping[str, Any]:
        """A fenced merge patch of a volume object (VolumeBinding's PreBind)."""
        try:
            resp = await self._write(what, fn)
        except k8s.ApiException as e:
            raise typed(e, key) from None
        obj = json.loads(resp.data or b"{}")
        return obj if isinstance(obj, dict) else {}

    async def read_resource_claim(self, key: str) -> Mapping[str, Any] | None:
        ns, name = _split(key)
        resource = k8s.ResourceV1Api(self.api)
        return await self._read(
            f"get ResourceClaim {key}",
            lambda t: resource.read_namespaced_resource_claim(
                name, ns, _preload_content=False, _request_timeout=t
            ),
        )

    async def patch_resource_claim(
        self, key: str, patch: Mapping[str, Any], status: bool = False
    ) -> Mapping[str, Any]:
        """A fenced merge patch of a ResourceClaim (DynamicResources' PreBind)."""
        ns, name = _split(key)
        path = f"/apis/resource.k8s.io/v1/namespaces/{_seg(ns)}/resourceclaims/{_seg(name)}"
        what = f"patch ResourceClaim {key}{' status' if status else ''}"
        try:
            data = await self.writes.send(
                what, "PATCH", path + ("/status" if status else ""), patch, self.fence, MERGE_PATCH
            )
        except k8s.ApiException as e:
            raise typed(e, key) from None
        obj = json.loads(data or b"{}")
        return obj if isinstance(obj, dict) else {}

    async def create_resource_claim(
        self, namespace: str, body: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        path = f"/apis/resource.k8s.io/v1/namespaces/{_seg(namespace)}/resourceclaims"
        try:
            data = await self.writes.send(
                f"create ResourceClaim in {namespace}", "POST", path, body, self.fence
            )
        except k8s.ApiException as e:
            raise typed(e, namespace) from None
        obj = json.loads(data or b"{}")
        return obj if isinstance(obj, dict) else {}

    async def annotate_pod(self, pod: PodKey, annotations: Mapping[str, str]) -> None:
        ns, name = _split(pod)
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}"
        try:
            await self.writes.send(
                f"annotate pod {pod}",
                "PATCH",
                path,
                {"metadata": {"annotations": dict(annotations)}},
                self.fence,
                MERGE_PATCH,
            )
        except k8s.ApiException as e:
            raise typed(e, pod) from None

    async def delete_resource_claim(self, key: str) -> None:
        ns, name = _split(key)
        path = f"/apis/resource.k8s.io/v1/namespaces/{_seg(ns)}/resourceclaims/{_seg(name)}"
        try:
            await self.writes.send(f"delete ResourceClaim {key}", "DELETE", path, {}, self.fence)
        except k8s.ApiException as e:
            if e.status != 404:
                raise typed(e, key) from None

    async def set_extended_resource_claim_status(
        self, pod: PodKey, status: Mapping[str, Any] | None
    ) -> None:
        try:
            await self._patch_pod_status(
                f"extended resource claim of {pod}",
                pod,
                {"status": {"extendedResourceClaimStatus": dict(status) if status else None}},
            )
        except k8s.ApiException as e:
            raise typed(e, pod) from None

    async def set_nominated_node(self, pod: PodKey, node: str | None) -> None:
        try:
            await self._patch_pod_status(
                f"nominated node of {pod}", pod, {"status": {"nominatedNodeName": node or None}}
            )
        except k8s.ApiException as e:
            if e.status != 404:
                raise api_error(e) from None

    async def set_disruption_target(self, pod: PodKey, reason: str, message: str) -> None:
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339(),
        }
        try:
            await self._patch_pod_status(
                f"DisruptionTarget of {pod}", pod, {"status": {"conditions": [cond]}}
            )
        except k8s.ApiException as e:
            raise typed(e, pod) from None

    async def delete_pod(self, pod: PodKey, uid: str, grace_period_seconds: int | None) -> None:
        ns, name = _split(pod)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self._write(
                f"delete pod {pod}",
                lambda t: self.core.delete_namespaced_pod(
                    name, ns, body=_any(body), _preload_content=False, _request_timeout=t
                ),
            )
        except k8s.ApiException as e:
            # 409: the uid precondition failed, the victim is gone (re-created since).
            if e.status in (404, 409):
                raise NotFound(pod) from None
            raise api_error(e) from None

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
        try:
            path = f"/apis/{group}/v1/{plural}"
            data = await self.writes.send(f"create {kind}", "POST", path, body)
        except k8s.ApiException as e:
            raise api_error(e) from None
        obj = json.loads(data or b"{}")
        status = obj.get("status") if isinstance(obj, dict) else None
        return status if isinstance(status, dict) else {}

    def lease(
        self,
        namespace: str,
        name: str,
        timeout: float = 5.0,
    ) -> KubeLease:
        """A LeaseClient with its own API connection, thread and budget, and a
        short per-request timeout, so that renewals never wait behind writes."""
        api = k8s.ApiClient(self.api.configuration)
        api.user_agent = f"{COMPONENT}/{__version__} ({self.identity}) leader-election"
        lane = Lane(
            "kube-lease",
            qps=5.0,
            burst=10,
            workers=1,
            timeout=(timeout, timeout),
            retries=0,
            backoff=self.backoff,
        )
        lease = KubeLease(api, lane, namespace, name)
        self._leases.append(lease)
        return lease

    async def aclose(self) -> None:
        """Close every connection and thread (on the loop that made the requests)."""
        await self.writes.aclose()
        await self.event_lane.aclose()
        self.close()

    def close(self) -> None:
        """Stop the threads; `aclose` closes the loop's connections too."""
        self.writes.close()
        self.event_lane.close()
        for lease in self._leases:
            lease.lane.close()
