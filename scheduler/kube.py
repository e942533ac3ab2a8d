"""The real ClusterClient: the only module that imports the kubernetes client.

The client is synchronous, so every call runs in a bounded thread pool and the
event loop never blocks. Calls are rate-limited (QPS with a burst, as client-go)
and retried with exponential backoff on 429, 5xx and transport errors. A 409 on
bind means the pod is already bound (BindConflict); a 404 means it is gone
(NotFound). Bindings are read with `_preload_content=False`: a real API server
answers a binding with a Status that the client cannot parse into a Binding.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from scheduler.api.types import NodeName, PodKey
from scheduler.cluster import BindConflict, NotFound
from scheduler.leader import LeaseConflict, LeaseRecord

log = logging.getLogger(__name__)

T = TypeVar("T")
COMPONENT: Final = "troupe-scheduler"
POD_GROUP_GROUP: Final = "scheduling.x-k8s.io"
POD_GROUP_VERSION: Final = "v1alpha1"
RETRIABLE: Final = frozenset({429, 500, 502, 503, 504})


def load_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials, else the kubeconfig (file or default location)."""
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
            return k8s.ApiClient()
        except k8s_config.ConfigException:
            pass
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    return k8s.ApiClient(cfg)


class TokenBucket:
    """client-go's rate limiter: `qps` tokens per second, up to `burst` at once."""

    def __init__(self, qps: float, burst: int, now: Callable[[], float] = time.monotonic):
        self.qps = qps
        self.burst = burst
        self.now = now
        self.tokens = float(burst)
        self.last = now()
        self._lock = asyncio.Lock()

    async def take(self) -> None:
        async with self._lock:
            while True:
                t = self.now()
                self.tokens = min(self.burst, self.tokens + (t - self.last) * self.qps)
                self.last = t
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.qps)


def _split(key: str) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return ns, name


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
        retries: int = 5,
        backoff: float = 0.2,
    ) -> None:
        self.api = api
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.coordination = k8s.CoordinationV1Api(api)
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kube")
        self.limiter = TokenBucket(qps, burst)
        self.retries = retries
        self.backoff = backoff

    async def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run a blocking call in the pool, rate-limited, retrying transient failures."""
        delay = self.backoff
        for attempt in range(self.retries + 1):
            await self.limiter.take()
            try:
                return await asyncio.get_running_loop().run_in_executor(self.pool, fn)
            except k8s.ApiException as e:
                if e.status not in RETRIABLE or attempt == self.retries:
                    raise
                log.warning("%s: HTTP %s, retrying in %.1fs", what, e.status, delay)
            except (OSError, TimeoutError) as e:
                if attempt == self.retries:
                    raise
                log.warning("%s: %s, retrying in %.1fs", what, e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        raise AssertionError("unreachable")

    # ---- ClusterClient -------------------------------------------------------------

    async def bind(self, pod: PodKey, uid: str, node: NodeName) -> None:
        ns, name = _split(pod)
        body: Any = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.call(
                f"bind {pod}",
                lambda: self.core.create_namespaced_pod_binding(
                    name, ns, body, _preload_content=False
                ),
            )
        except k8s.ApiException as e:
            if e.status == 409:
                raise BindConflict(f"pod {pod} is already bound") from e
            if e.status == 404:
                raise NotFound(pod) from e
            raise

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        ns, name = _split(group)
        try:
            await self.call(
                f"patch PodGroup {group} status",
                lambda: self.custom.patch_namespaced_custom_object_status(
                    POD_GROUP_GROUP,
                    POD_GROUP_VERSION,
                    ns,
                    "podgroups",
                    name,
                    {"status": dict(status)},
                ),
            )
        except k8s.ApiException as e:
            if e.status == 404:
                raise NotFound(group) from e
            raise

    async def record_event(self, pod: PodKey, event_type: str, reason: str, message: str) -> None:
        ns, name = _split(pod)
        now = _now_rfc3339()
        body: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            # client-go's recorder names events <object>.<unix nanos in hex>
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns},
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.call(
            f"event for {pod}",
            lambda: self.core.create_namespaced_event(ns, body, _preload_content=False),
        )

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        ns, name = _split(pod)
        cond = {
            "type": "PodScheduled",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339(),
        }
        try:
            await self.call(
                f"condition of {pod}",
                lambda: self.core.patch_namespaced_pod_status(
                    name, ns, {"status": {"conditions": [cond]}}, _preload_content=False
                ),
            )
        except k8s.ApiException as e:
            if e.status != 404:
                raise

    def lease(self, namespace: str, name: str) -> KubeLease:
        return KubeLease(self, namespace, name)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class KubeLease:
    """LeaseClient on a coordination.k8s.io/v1 Lease."""

    def __init__(self, kube: KubeClient, namespace: str, name: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name

    @staticmethod
    def _parse_time(v: Any) -> float:
        if v is None:
            return 0.0
        if isinstance(v, datetime.datetime):
            return v.timestamp()
        return datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()

    def _record(self, obj: Mapping[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            lease_duration_seconds=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=self._parse_time(spec.get("acquireTime")),
            renew_time=self._parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        )

    def _body(self, r: LeaseRecord) -> dict[str, Any]:
        def ts(t: float) -> str:
            return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"
            )

        md: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if r.version:
            md["resourceVersion"] = r.version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": md,
            "spec": {
                "holderIdentity": r.holder,
                "leaseDurationSeconds": int(r.lease_duration_seconds),
                "acquireTime": ts(r.acquire_time),
                "renewTime": ts(r.renew_time),
                "leaseTransitions": r.transitions,
            },
        }

    async def _call(self, what: str, fn: Callable[[], Any]) -> Mapping[str, Any]:
        api = self.kube.coordination.api_client
        obj: Mapping[str, Any] = await self.kube.call(
            what, lambda: api.sanitize_for_serialization(fn())
        )
        return obj

    async def get(self) -> LeaseRecord | None:
        api = self.kube.coordination
        try:
            obj = await self._call(
                "get lease", lambda: api.read_namespaced_lease(self.name, self.namespace)
            )
        except k8s.ApiException as e:
            if e.status == 404:
                return None
            raise
        return self._record(obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        api = self.kube.coordination
        body: Any = self._body(record)
        try:
            obj = await self._call(
                "create lease", lambda: api.create_namespaced_lease(self.namespace, body)
            )
        except k8s.ApiException as e:
            if e.status == 409:
                raise LeaseConflict("lease exists") from e
            raise
        return self._record(obj)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """A merge patch carrying metadata.resourceVersion: the API server applies it
        only if the Lease has not changed since it was read (else 409)."""
        api = self.kube.coordination
        body: Any = self._body(record)
        try:
            obj = await self._call(
                "update lease",
                lambda: api.patch_namespaced_lease(self.name, self.namespace, body),
            )
        except k8s.ApiException as e:
            if e.status == 409:
                raise LeaseConflict("lease changed") from e
            raise
        return self._record(obj)


# (group, version, plural, namespaced) of what the scheduler watches, by kind.
WATCHED: Final = {
    "Node": ("", "v1", "nodes"),
    "Pod": ("", "v1", "pods"),
    "PriorityClass": ("scheduling.k8s.io", "v1", "priorityclasses"),
    "PodGroup": (POD_GROUP_GROUP, POD_GROUP_VERSION, "podgroups"),
    "Namespace": ("", "v1", "namespaces"),
    "Service": ("", "v1", "services"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
}


def _lister(kube: KubeClient, kind: str) -> Callable[[], Any]:
    core, apps = kube.core, k8s.AppsV1Api(kube.api)
    raw: dict[str, Any] = {"_preload_content": False}
    if kind == "PodGroup":
        return lambda: kube.custom.list_cluster_custom_object(
            POD_GROUP_GROUP, POD_GROUP_VERSION, "podgroups", **raw
        )
    fns: dict[str, Callable[..., Any]] = {
        "Node": core.list_node,
        "Pod": core.list_pod_for_all_namespaces,
        "Namespace": core.list_namespace,
        "Service": core.list_service_for_all_namespaces,
        "ReplicationController": core.list_replication_controller_for_all_namespaces,
        "PriorityClass": k8s.SchedulingV1Api(kube.api).list_priority_class,
        "ReplicaSet": apps.list_replica_set_for_all_namespaces,
        "StatefulSet": apps.list_stateful_set_for_all_namespaces,
    }
    fn = fns[kind]
    return lambda: fn(**raw)


async def list_objects(kube: KubeClient, kind: str) -> list[dict[str, Any]]:
    """Every object of a watched kind, as plain dicts (the initial sync)."""
    group, version, plural = WATCHED[kind]
    fetch = _lister(kube, kind)
    try:
        resp = await kube.call(f"list {plural}", fetch)
    except k8s.ApiException as e:
        if e.status == 404:  # e.g. the PodGroup CRD is not installed
            log.warning("cannot list %s: %s", plural, e.reason)
            return []
        raise
    data = json.loads(resp.data or b"{}")
    out = []
    for item in data.get("items") or []:
        if isinstance(item, dict):
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", f"{group}/{version}" if group else version)
            out.append(item)
    return out
