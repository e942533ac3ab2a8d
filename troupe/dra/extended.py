"""Extended resources backed by DRA (DeviceClass `extendedResourceName`).

A pod may ask for devices the old way, `resources.requests: {example.com/gpu:
2}`. On a node that lists the resource in its allocatable (a device plugin)
that is what it is; on a node that does not, and when a DeviceClass names the
resource in `spec.extendedResourceName` (or the resource is
`deviceclass.resource.kubernetes.io/<class>`, which every class stands for),
DynamicResources allocates devices of that class for it, as kube-scheduler
does: a claim the scheduler makes for the pod (`<pod>-extended-resources-…`,
annotated `resource.kubernetes.io/extended-resource-claim: "true"`, owned by
the pod) with one request per container and resource, `container-<i>-request-<j>`,
and the pod's `status.extendedResourceClaimStatus` mapping each back.
NodeResourcesFit leaves such a resource to DynamicResources on nodes that do
not list it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from troupe.api.names import is_extended_resource
from troupe.api.quantity import parse_quantity, value
from troupe.api.types import Pod
from troupe.dra.store import DeviceStore
from troupe.dra.types import (
    EXACT_COUNT,
    FINALIZER,
    RESOURCE_API,
    DeviceRequest,
    ExactRequest,
    ResourceClaim,
)

IMPLICIT_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"


@dataclass(frozen=True, slots=True)
class ExtendedRequest:
    container: str
    resource: str
    request: str  # the request's name in the claim
    count: int
    device_class: str


def is_dra_extended_resource(name: str) -> bool:
    """A name DRA may back (kube's IsDRAExtendedResourceName): an extended
    resource, or the implicit name of a class."""
    return is_extended_resource(name) or name.startswith(IMPLICIT_PREFIX)


def class_for(store: DeviceStore, resource: str) -> str | None:
    """The DeviceClass whose devices stand for the extended resource, if any."""
    named = store.extended_classes().get(resource)
    if named is not None:
        return named
    if resource.startswith(IMPLICIT_PREFIX):
        name = resource[len(IMPLICIT_PREFIX) :]
        if store.device_class(name) is not None:
            return name
    return None


def extended_requests(store: DeviceStore, pod: Pod) -> tuple[ExtendedRequest, ...]:
    """The pod's containers' requests of extended resources that a DeviceClass
    backs (requests default to limits, as the API server's defaulting does)."""
    if not store.has_classes():
        return ()
    spec = pod.raw.get("spec")
    if not isinstance(spec, Mapping):
        return ()
    out: list[ExtendedRequest] = []
    # kube-scheduler's createDeviceRequests: init containers, then containers;
    # a request is named by the container's index and the resource's place
    # among all that container's requests, sorted.
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    for ci, c in enumerate(containers):
        if not isinstance(c, Mapping):
            continue
        res = c.get("resources")
        res = res if isinstance(res, Mapping) else {}
        amounts: dict[str, Any] = {
            **dict(res.get("limits") or {}),
            **dict(res.get("requests") or {}),
        }
        for j, name in enumerate(sorted(amounts)):
            if not is_dra_extended_resource(name):
                continue
            cls = class_for(store, name)
            if cls is None:
                continue
            try:
                count = value(parse_quantity(amounts[name], name))
            except Exception:
                continue  # the pod's parser has said what is wrong with it
            if count > 0:
                out.append(
                    ExtendedRequest(
                        str(c.get("name")), name, f"container-{ci}-request-{j}", count, cls
                    )
                )
    return tuple(out)


def placeholder_key(pod: Pod) -> str:
    """The key the claim is held under (in flight) until it is created."""
    return f"{pod.namespace}/{pod.name}-extended-resources"


def claim_for(pod: Pod, requests: tuple[ExtendedRequest, ...]) -> ResourceClaim:
    """The claim to allocate for `requests` (not yet an API object)."""
    return ResourceClaim(
        namespace=pod.namespace,
        name=f"{pod.name}-extended-resources",
        uid="",
        resource_version="",
        requests=tuple(
            DeviceRequest(
                r.request, (ExactRequest(r.request, r.device_class, (), EXACT_COUNT, r.count),)
            )
            for r in requests
        ),
    )


def claim_body(pod: Pod, requests: tuple[ExtendedRequest, ...]) -> dict[str, Any]:
    """The ResourceClaim object kube-scheduler creates for them."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{pod.name}-extended-resources-",
            "namespace": pod.namespace,
            "annotations": {ANNOTATION: "true"},
            "finalizers": [FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.name,
                    "uid": pod.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.request,
                        "exactly": {
                            "deviceClassName": r.device_class,
                            "allocationMode": EXACT_COUNT,
                            "count": r.count,
                        },
                    }
                    for r in requests
                ]
            }
        },
    }


def status_body(claim_name: str, requests: tuple[ExtendedRequest, ...]) -> dict[str, Any]:
    """The pod's status.extendedResourceClaimStatus."""
    return {
        "resourceClaimName": claim_name,
        "requestMappings": [
            {"containerName": r.container, "resourceName": r.resource, "requestName": r.request}
            for r in requests
        ],
    }
