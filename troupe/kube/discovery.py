"""API discovery: which version of an API group the cluster serves."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from kubernetes import client as k8s

from troupe.api.types import (
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
)
from troupe.kube.client import KubeClient
from troupe.kube.errors import api_error

log = logging.getLogger(__name__)


async def discover_native_pod_groups(kube: KubeClient) -> str | None:
    """The scheduling.k8s.io version whose PodGroups to watch, or None (see
    `discover_version`): v1beta1 before v1alpha2. A cluster without the API
    (older, or the GenericWorkload gate off) is normal."""
    return await discover_version(
        kube, NATIVE_POD_GROUP_API, NATIVE_POD_GROUP_VERSIONS, "podgroups"
    )


async def discover_version(
    kube: KubeClient, group: str, versions: Sequence[str], plural: str
) -> str | None:
    """The first of `versions` of the API `group` whose resource list has
    `plural`, or None: API discovery, as kube-scheduler's informers would find
    the resource (GET /apis/<group> for the versions served, then the version's
    resource list). A cluster that serves none is normal: None, and one log
    line by the caller.
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

    doc = await get(f"/apis/{group}")
    served = {v.get("version") for v in (doc or {}).get("versions") or [] if isinstance(v, dict)}
    for version in versions:
        if version not in served:
            continue
        resources = await get(f"/apis/{group}/{version}")
        names = {
            r.get("name") for r in (resources or {}).get("resources") or [] if isinstance(r, dict)
        }
        if plural in names:
            return version
    return None
