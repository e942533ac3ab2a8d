"""kmock's Kubernetes emulator, extended with what the scheduler relies on.

kmock 0.8's KubernetesEmulator answers `pods/{name}/binding` with 404. This
subclass binds atomically: it sets spec.nodeName, emits MODIFIED on the pods
watch, and answers 409 if the pod is already bound (404 if it is gone).
`fail_next` injects HTTP errors: path substring -> list of statuses to answer
before serving normally.
"""

from __future__ import annotations

from typing import Any

import aiohttp.web
import attrs
import kmock


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Success" if code < 400 else "Failure",
            "code": code,
            "reason": reason,
            "message": message,
        },
        status=code,
    )


VERBS = {"list", "watch", "get", "create", "update", "patch", "delete"}
# (group/version/plural, namespaced, kind, subresources) the scheduler talks to.
RESOURCES = (
    ("v1/pods", True, "Pod", {"binding", "status"}),
    ("v1/nodes", False, "Node", {"status"}),
    ("v1/namespaces", False, "Namespace", set()),
    ("v1/services", True, "Service", set()),
    ("v1/replicationcontrollers", True, "ReplicationController", set()),
    ("v1/events", True, "Event", set()),
    ("apps/v1/replicasets", True, "ReplicaSet", set()),
    ("apps/v1/statefulsets", True, "StatefulSet", set()),
    ("scheduling.k8s.io/v1/priorityclasses", False, "PriorityClass", set()),
    ("scheduling.x-k8s.io/v1alpha1/podgroups", True, "PodGroup", {"status"}),
    ("coordination.k8s.io/v1/leases", True, "Lease", set()),
)


@attrs.define
class TroupeEmulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    fail_next: dict[str, list[int]] = attrs.field(factory=dict)
    binds: int = 0
    # Close this many pod watches at once (as an API server or a proxy drops them).
    drop_pod_watches: int = 0
    pod_watches: int = 0

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for key, namespaced, kind, subresources in RESOURCES:
            self.resources[key] = kmock.ResourceInfo(
                namespaced=namespaced, kind=kind, verbs=VERBS, subresources=subresources
            )

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        path = str(request.url.path)
        for fragment, codes in self.fail_next.items():
            if fragment in path and codes:
                code = codes.pop(0)
                return _status(code, "InternalError", f"injected {code}")
        res = request.resource
        if res is not None and res.plural == "pods" and request.action == kmock.action.WATCH:
            self.pod_watches += 1
            if self.drop_pod_watches > 0:
                self.drop_pod_watches -= 1
                return aiohttp.web.Response(status=200, body=b"")  # the stream just ends
        if (
            res is not None
            and res.plural == "pods"
            and request.subresource == "binding"
            and str(request.method.value).upper() == "POST"
        ):
            return await self._bind(request)
        return await super()._handle(request)  # type: ignore[no-any-return]

    async def _bind(self, request: Any) -> aiohttp.web.Response:
        res = request.resource
        key = (res, request.namespace, request.name)
        node = ((request.data or {}).get("target") or {}).get("name")
        async with self._lock:
            obj = self._objects[key] if key in self._objects else None  # noqa: SIM401 (no .get)
            if obj is None or obj.deleted:
                return _status(404, "NotFound", f'pods "{request.name}" not found')
            if (obj.get("spec") or {}).get("nodeName"):
                return _status(
                    409,
                    "Conflict",
                    f'pod {request.name} is already assigned to node "{obj["spec"]["nodeName"]}"',
                )
            obj.patch({"spec": {"nodeName": node}})
            self.binds += 1
            await self._buses[res].put({"type": "MODIFIED", "object": obj.raw})
        return _status(201, "", "")
