"""How the core writes to the cluster: the `ClusterClient` protocol and an
in-memory implementation.

The core never imports kopf or the kubernetes client. It binds pods, patches
PodGroup status, records Events and sets pod conditions through a
`ClusterClient`. `kube.py` implements it against the API server; `InMemoryCluster`
implements it here for the simulator, the benchmarks and tests, and feeds the
consequences of those writes back to the scheduler as the API's watch would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.api.types import NodeName, PodKey

# The start of a bind failure's message when the pod was already bound: the
# scheduler forgets the pod instead of retrying it.
ALREADY_BOUND = "pod is already bound"


class BindConflict(Exception):
    """The pod is already bound (HTTP 409): someone else scheduled it."""


class NotFound(Exception):
    """The object is gone (HTTP 404)."""


class ClusterClient(Protocol):
    async def bind(self, pod: PodKey, uid: str, node: NodeName) -> None:
        """Bind through pods/binding. Raises BindConflict, NotFound, or another error."""
        ...

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the PodGroup's status subresource (`group` is ns/name)."""
        ...

    async def record_event(
        self, pod: PodKey, event_type: str, reason: str, message: str
    ) -> None: ...

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        """Set the PodScheduled condition."""
        ...


@dataclass
class RecordedEvent:
    pod: PodKey
    type: str
    reason: str
    message: str


@dataclass
class InMemoryCluster:
    """A ClusterClient that keeps objects as dicts and reports writes back.

    `on_pod_bound(key, node)` is called after a successful bind, as the watch
    would deliver the pod's MODIFIED event. Failures can be injected per pod:
    `fail_binds[key] = [exception, ...]` raises them on successive binds.
    """

    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    pod_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)
    conditions: dict[str, dict[str, str]] = field(default_factory=dict)
    fail_binds: dict[str, list[Exception]] = field(default_factory=dict)
    on_pod_bound: Callable[[PodKey, NodeName], None] | None = None
    binds: int = 0
    status_patches: int = 0

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

    async def record_event(self, pod: PodKey, event_type: str, reason: str, message: str) -> None:
        self.events.append(RecordedEvent(pod, event_type, reason, message))

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        self.conditions[pod] = {"status": status, "reason": reason, "message": message}
