"""What a plugin may reach besides its arguments: the Handle.

Plugins get it in `new(args, handle)`. It exposes read access to the cluster
state (the current snapshot and the cache's listers), the waiting-pods map, the
ClusterClient for binding and status writes, the clock, and a seeded random
generator. It never exposes the queue's or the cache's write side, except
through the narrow callbacks listed here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from troupe.api.elasticquota import ElasticQuota
from troupe.api.types import (
    CompositePodGroup,
    GroupKey,
    IsolatedCPU,
    LabelSelector,
    Pod,
    PodDisruptionBudget,
    PodGroup,
    PodKey,
    PriorityClass,
)
from troupe.core.clock import Clock
from troupe.core.cluster import ClusterClient
from troupe.core.metrics import Metrics
from troupe.core.snapshot import NodeTable
from troupe.core.volumes import VolumeStore
from troupe.dra.store import DeviceStore
from troupe.framework.events import ClusterEvent
from troupe.framework.features import Features
from troupe.framework.filtering import FilterRunner
from troupe.framework.nominator import Nominator
from troupe.framework.status import Code
from troupe.framework.waiting_pods import WaitingPods

# Called with (event, old object or None, new object or None) for every cluster
# event the scheduler receives, after the cache has been updated: the analogue
# of a plugin's informer handlers in kube-scheduler.
EventWatcher = Callable[[ClusterEvent, Any, Any], None]


class ClusterLister(Protocol):
    """Read access to what the cache knows beyond the node table."""

    def pod_group(self, key: GroupKey) -> PodGroup | None: ...

    def invalid_pod_group(self, key: GroupKey) -> str | None:
        """Why an existing PodGroup cannot be read (field: problem), or None."""
        ...

    def pods_in_group(self, key: GroupKey) -> Iterable[Pod]:
        """Every known pod (pending, assumed or bound) that belongs to the group."""
        ...

    def composite(self, key: GroupKey) -> CompositePodGroup | None:
        """The CompositePodGroup `key` (troupe.api.types.composite_key)."""
        ...

    def composite_children(self, key: GroupKey) -> list[GroupKey]:
        """The keys of the PodGroups and CompositePodGroups whose parent is `key`."""
        ...

    def pod(self, key: PodKey) -> Pod | None: ...

    def is_assumed(self, key: PodKey) -> bool: ...

    def default_selector(self, pod: Pod) -> LabelSelector | None:
        """The selector of the Services and controller that own the pod, if any."""
        ...


def _no_snapshot() -> NodeTable:
    raise RuntimeError("no snapshot before the first scheduling cycle")


def _no_profile(scheduler_name: str) -> FilterRunner | None:
    return None


@dataclass
class Handle:
    clock: Clock
    client: ClusterClient
    waiting_pods: WaitingPods
    lister: ClusterLister
    isolated: IsolatedCPU = field(default_factory=IsolatedCPU)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    snapshot: Callable[[], NodeTable] = _no_snapshot
    # Storage objects and assumed volume bindings (the cache's VolumeStore).
    volumes: VolumeStore = field(default_factory=VolumeStore)
    # DeviceClasses, ResourceSlices, ResourceClaims and assumed allocations.
    devices: DeviceStore = field(default_factory=DeviceStore)
    # Move pods back to the active queue (e.g. a gang's members after a change).
    activate: Callable[[Iterable[PodKey]], None] = lambda keys: None
    # Compute the queue sort key again for these pods if they wait in the activeQ
    # (a QueueSort plugin whose key reads state that changed).
    resort: Callable[[Iterable[PodKey]], object] = lambda keys: None
    # Plugins append watchers in `new()`; see EventWatcher.
    watchers: list[EventWatcher] = field(default_factory=list)
    # Nominated pods (preemptors waiting for the room they freed).
    nominator: Nominator = field(default_factory=Nominator)
    # PodDisruptionBudgets by ns/name (policy/v1, kept by the event handlers).
    pdbs: dict[str, PodDisruptionBudget] = field(default_factory=dict)
    # PriorityClasses by name (the scheduler context's table, shared): what a
    # victim PodGroup's priorityClassName resolves to in preemption.
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    # ElasticQuotas by ns/name (scheduling.x-k8s.io, kept by the event handlers;
    # CapacityScheduling reads them).
    elastic_quotas: dict[str, ElasticQuota] = field(default_factory=dict)
    # The profile of a scheduler name: its PreFilter and Filter plugins are what
    # preemption's dry runs run (kube-scheduler's framework.Handle does the same).
    profile_of: Callable[[str], FilterRunner | None] = _no_profile
    # Run a coroutine as a task the scheduler owns (awaited on shutdown).
    spawn: Callable[[Coroutine[Any, Any, None]], None] = lambda coro: coro.close()
    # Why a pending pod's last scheduling attempt failed (the message shown on the
    # pod, and the code), or None: what a gang's status reports.
    failure: Callable[[PodKey], tuple[str, Code] | None] = lambda key: None
    # Feature gates (the configuration's troupe.featureGates).
    features: Features = field(default_factory=Features)
    # The scheduler's Prometheus metrics (plugins that report, as DefaultPreemption).
    metrics: Metrics = field(default_factory=lambda: Metrics())

    def watch(self, watcher: EventWatcher) -> None:
        self.watchers.append(watcher)
