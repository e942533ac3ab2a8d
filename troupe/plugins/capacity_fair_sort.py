"""CapacityFairSort: the queue in fair order across teams (issue #32). Off by
default; neither kube-scheduler nor scheduler-plugins has it.

The pods of the namespace whose ElasticQuota is used least, relative to its
`min`, pop first; then, as PrioritySort, higher priority, then earlier
arrival. A quota's share is its dominant share: the largest used/min over the
resources its `min` names with a positive amount (DRF's dominant share with
`min` as the entitlement). A quota whose `min` names nothing positive only
borrows: its share is 0 while it uses nothing, else infinite. A namespace
without an ElasticQuota is not part of the sharing and sorts at share 0 (its
pods are not limited by quota either, and system pods have none).

Use is counted by the shared quota ledger (`troupe.quota.ledger`), the code
CapacityScheduling counts with, fed by the same cluster events: the
namespace's pods' requests and the devices of their ResourceClaims (once per
claim, under the DeviceClass's extended resource name), a pod from its
Reserve (when the plugin is enabled at reserve too, as multiPoint does) or
from the API once bound, until Unreserve, its deletion or its end (Succeeded
or Failed). The quotas already in the Handle (`Handle.elastic_quotas`) count
from the start; with several ElasticQuotas in one namespace the first seen
counts, the next one by name when it goes.

A sort key that reads changing state. The activeQ keeps its pods in key order
and computes a pod's key when the pod enters it (kube-scheduler's heap
compares with `Less` only on push, pop and update, so a changed answer is not
seen there either). When a quota's share changes, this plugin asks the queue to
compute again the keys of that namespace's pods waiting in the activeQ
(`Handle.resort`); pods in the backoffQ or the unschedulable pool get theirs
when they come back. The share is compared in steps of 1/SHARE_STEPS of `min`
(the key holds the share rounded down): every pod of a namespace carries the
same share in the queue, and a namespace's waiting pods are re-sorted only
when its share crosses a step (at most SHARE_STEPS times per `min` used), not
on every pod bound. Pods whose quotas are within one step of each other are
ordered by priority and arrival.

It orders; it does not limit or preempt. Quota limits are CapacityScheduling's
(enable both), preemption is the PostFilter's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, Self

from troupe.api.types import NodeName, Pod, PodKey, Resources
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import ActionType, ClusterEvent, EventResource
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    PluginArgsError,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
)
from troupe.framework.status import SUCCESS, Status
from troupe.quota.ledger import QuotaLedger

NAME: Final = "CapacityFairSort"
SHARE_STEPS: Final = 100
"""Shares are compared in hundredths of `min`."""


def dominant_share(used: Resources, min_: Resources | None) -> float:
    """The largest used/min over the resources `min_` names with a positive
    amount; for a quota with none, 0 while it uses nothing, else infinite."""
    share = 0.0
    entitled = False
    for r, m in (min_ or {}).items():
        if m > 0:
            entitled = True
            share = max(share, used.get(r, 0) / m)
    if entitled:
        return share
    return math.inf if any(q > 0 for q in used.values()) else 0.0


def step(share: float) -> float:
    """The share rounded down to a step of 1/SHARE_STEPS (infinite stays so)."""
    if math.isinf(share):
        return share
    return math.floor(share * SHARE_STEPS) / SHARE_STEPS


class CapacityFairSort(QueueSortPlugin, ReservePlugin):
    NAME: Final = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        # The quotas and their use, counted as CapacityScheduling counts them.
        self.ledger = QuotaLedger(handle.devices, handle.lister.pod_group)
        # The share each namespace's pods carry in the queue, and the pods that
        # entered the activeQ with it (some may have left: resort skips them).
        self._share: dict[str, float] = {}
        self._queued: dict[str, set[PodKey]] = {}
        for eq in handle.elastic_quotas.values():
            self.ledger.add_elastic_quota(eq)
        handle.watch(self._on_event)

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            raise PluginArgsError(str(k), "unknown field: the plugin takes no arguments")
        return cls(handle)

    # ---- QueueSort -------------------------------------------------------------------

    def share(self, namespace: str) -> float:
        """The namespace's quota share as its pods carry it in the queue."""
        s = self._share.get(namespace)
        if s is None:
            s = self._share[namespace] = self._current(namespace)
        return s

    def sort_key(self, p: QueuedPodInfo) -> tuple[float, int, float, int]:
        pod = p.pod
        self._queued.setdefault(pod.namespace, set()).add(pod.key)
        return (self.share(pod.namespace), -pod.priority, p.timestamp, p.seq)

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)

    # ---- Reserve: a pod counts from here, before its binding comes back -------------

    def reserve(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        self._queued.get(pod.namespace, set()).discard(pod.key)
        self.ledger.reserve(pod)
        self._changed(pod.namespace)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        self.ledger.unreserve(pod)
        self._changed(pod.namespace)

    # ---- use ---------------------------------------------------------------------------

    def _current(self, namespace: str) -> float:
        info = self.ledger.infos.get(namespace)
        if info is None:
            return 0.0
        return step(dominant_share(info.used, self.ledger.quotas[namespace].min))

    def _changed(self, namespace: str) -> None:
        """The namespace's use or quota changed: if its share crossed a step, its
        pods waiting in the activeQ take their place again."""
        old = self._share.get(namespace)
        if old is None:
            return  # none of its pods carries a share yet
        new = self._current(namespace)
        if new == old:
            return
        self._share[namespace] = new
        queued = self._queued.get(namespace)
        if queued:
            self.handle.resort(list(queued))

    # ---- events --------------------------------------------------------------------------

    def _on_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        r, deleted = event.resource, bool(event.action & ActionType.DELETE)
        left = None  # a pod no longer waiting in the queue: bound, or deleted pending
        if r is EventResource.ASSIGNED_POD and not deleted and isinstance(new, Pod):
            left = new
        elif r is EventResource.UNSCHEDULED_POD and deleted and isinstance(old, Pod):
            left = old
        if left is not None:
            self._queued.get(left.namespace, set()).discard(left.key)
        ns = self.ledger.on_event(event, old, new)
        if ns is not None:
            self._changed(ns)
