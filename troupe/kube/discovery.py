"""API discovery: which version of an API group the cluster serves."""

from __future__ import annotations

from collections.abc import Sequence

from troupe.api.types import (
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
)
from troupe.kube.client import KubeClient


async def discover_native_pod_groups(kube: KubeClient) -> str | None:
    """The scheduling.k8s.io version whose PodGroups to watch, or None (see
    `discover_version`): v1beta1, then v1alpha3 (both Kubernetes 1.37's, off
    by default there), then v1alpha2 (1.36's). A cluster without the API
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
    doc = await kube.read(f"discover /apis/{group}", f"/apis/{group}")
    served = {v.get("version") for v in (doc or {}).get("versions") or [] if isinstance(v, dict)}
    for version in versions:
        if version not in served:
            continue
        path = f"/apis/{group}/{version}"
        resources = await kube.read(f"discover {path}", path)
        names = {
            r.get("name") for r in (resources or {}).get("resources") or [] if isinstance(r, dict)
        }
        if plural in names:
            return version
    return None
