"""Lists and API discovery."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from troupe.api.kinds import WATCHED
from troupe.api.types import (
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
)
from troupe.kube.client import KubeClient
from troupe.kube.errors import api_error
from troupe.kube.transport import LIST_TIMEOUT

log = logging.getLogger(__name__)


def _lister(kube: KubeClient, kind: str) -> Callable[[tuple[float, float]], Any]:
    core, apps = kube.core, k8s.AppsV1Api(kube.api)
    storage, policy = k8s.StorageV1Api(kube.api), k8s.PolicyV1Api(kube.api)
    if kind.startswith("PodGroup"):
        group, version, _ = WATCHED[kind]
        return lambda t: kube.custom.list_cluster_custom_object(
            group,
            version,
            "podgroups",
            _preload_content=False,
            _request_timeout=LIST_TIMEOUT,
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
        "PersistentVolume": core.list_persistent_volume,
        "PersistentVolumeClaim": core.list_persistent_volume_claim_for_all_namespaces,
        "StorageClass": storage.list_storage_class,
        "CSINode": storage.list_csi_node,
        "CSIDriver": storage.list_csi_driver,
        "CSIStorageCapacity": storage.list_csi_storage_capacity_for_all_namespaces,
        "PodDisruptionBudget": policy.list_pod_disruption_budget_for_all_namespaces,
    }
    fn = fns[kind]
    return lambda t: fn(_preload_content=False, _request_timeout=LIST_TIMEOUT)


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
        raise api_error(e) from None
    data = json.loads(resp.data or b"{}")
    out = []
    for item in data.get("items") or []:
        if isinstance(item, dict):
            item.setdefault("kind", kind.partition(".")[0])
            item.setdefault("apiVersion", f"{group}/{version}" if group else version)
            out.append(item)
    return out


async def discover_native_pod_groups(kube: KubeClient) -> str | None:
    """The scheduling.k8s.io version whose PodGroups to watch, or None.

    API discovery, as kube-scheduler's informers would find the resource: GET
    /apis/scheduling.k8s.io for the versions served, then, of those Troupe
    reads (v1beta1 before v1alpha2), the first whose resource list has
    `podgroups`. A cluster without the API (older, or the GenericWorkload gate
    off) is normal: None, and one log line by the caller.
    """

    def fetch(path: str, t: tuple[float, float]) -> bytes | None:
        method, url, headers, body, post = kube.api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        resp = kube.api.call_api(
            method, url, header_params=headers, body=body, post_params=post, _request_timeout=t
        )
        resp.read()  # type: ignore[no-untyped-call]
        if resp.status == 404:
            return None
        if not 200 <= resp.status < 300:
            raise k8s.ApiException(status=resp.status, reason=resp.reason)
        return bytes(resp.data or b"{}")

    async def get(path: str) -> dict[str, Any] | None:
        try:
            data = await kube.call(f"discover {path}", lambda t: fetch(path, t))
        except k8s.ApiException as e:
            raise api_error(e) from None
        doc = json.loads(data) if data is not None else None
        return doc if isinstance(doc, dict) else None

    group = await get(f"/apis/{NATIVE_POD_GROUP_API}")
    served = {v.get("version") for v in (group or {}).get("versions") or [] if isinstance(v, dict)}
    for version in NATIVE_POD_GROUP_VERSIONS:
        if version not in served:
            continue
        resources = await get(f"/apis/{NATIVE_POD_GROUP_API}/{version}")
        names = {
            r.get("name") for r in (resources or {}).get("resources") or [] if isinstance(r, dict)
        }
        if "podgroups" in names:
            return version
    return None
