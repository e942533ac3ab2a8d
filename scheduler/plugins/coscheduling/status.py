"""PodGroup status, kept true and written sparingly.

Counts are derived from the group's pods as scheduler-plugins' PodGroup
controller derives them (scheduled: members with a node; running, succeeded,
failed by pod phase), and the phase follows from them:

    fewer pods than minMember          -> Pending
    enough pods, none placed           -> PreScheduling
    some placed, fewer than minMember  -> Scheduling
    placed >= minMember                -> Scheduled
    running + succeeded >= minMember   -> Running
    succeeded >= minMember             -> Finished
    failed > 0 and done >= minMember   -> Failed

A change marks the group dirty; dirty groups are patched on the status
subresource at most once per `coalesce_seconds`, and only when the status
differs from what was last written, so a gang of 1000 pods costs a few
patches, not 1000.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import Any

from scheduler.api.types import GroupKey, Pod, PodGroup
from scheduler.clock import TimerHandle
from scheduler.framework.handle import Handle
from scheduler.framework.interface import ClusterEvent, EventResource

log = logging.getLogger(__name__)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def compute_status(
    pg: PodGroup, pods: list[Pod], placed: AbstractSet[str], started: float | None
) -> dict[str, Any]:
    scheduled = sum(1 for p in pods if p.node_name or p.key in placed)
    running = sum(1 for p in pods if p.phase == "Running" and p.node_name)
    succeeded = sum(1 for p in pods if p.phase == "Succeeded")
    failed = sum(1 for p in pods if p.phase == "Failed")
    m = pg.min_member
    if len(pods) < m:
        phase = "Pending"
    elif failed and failed + running + succeeded >= m:
        phase = "Failed"
    elif succeeded >= m:
        phase = "Finished"
    elif scheduled >= m and running + succeeded >= m:
        phase = "Running"
    elif scheduled >= m:
        phase = "Scheduled"
    elif scheduled > 0 or started is not None:
        phase = "Scheduling"
    else:
        phase = "PreScheduling"
    status: dict[str, Any] = {
        "phase": phase,
        "scheduled": scheduled,
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
    }
    if started is not None:
        status["scheduleStartTime"] = rfc3339(started)
    owner = next((f"{p.namespace}/{name}" for p in pods for kind, name in p.owner_references), None)
    if owner:
        status["occupiedBy"] = owner
    return status


class PodGroupStatusTracker:
    def __init__(
        self, handle: Handle, coalesce_seconds: float, schedule_start: Mapping[GroupKey, float]
    ) -> None:
        self.handle = handle
        self.coalesce_seconds = coalesce_seconds
        self.schedule_start = schedule_start
        self._dirty: set[GroupKey] = set()
        self._written: dict[GroupKey, dict[str, Any]] = {}
        self._timer: TimerHandle | None = None
        self.patches = 0
        handle.watch(self.on_event)

    def on_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        for obj in (old, new):
            if isinstance(obj, Pod) and obj.group_key is not None:
                self.mark(obj.group_key)
            elif isinstance(obj, PodGroup) and event.resource is EventResource.POD_GROUP:
                self.mark(obj.key)

    def mark(self, key: GroupKey) -> None:
        self._dirty.add(key)
        if self._timer is None:
            clock = self.handle.clock
            self._timer = clock.call_at(clock.now() + self.coalesce_seconds, self.flush_now)

    def flush_now(self) -> None:
        self._timer = None
        dirty, self._dirty = self._dirty, set()
        lister = self.handle.lister
        for key in sorted(dirty):
            pg = lister.pod_group(key)
            if pg is None:
                self._written.pop(key, None)
                continue
            pods = list(lister.pods_in_group(key))
            placed = {p.key for p in pods if lister.pod(p.key) is not None}
            status = compute_status(pg, pods, placed, self.schedule_start.get(key))
            if self._written.get(key) == status or (
                key not in self._written and _same(pg.status, status)
            ):
                continue
            self._written[key] = status
            self.patches += 1
            self.handle.spawn(self._patch(key, status))

    async def _patch(self, key: GroupKey, status: dict[str, Any]) -> None:
        try:
            await self.handle.client.patch_pod_group_status(key, status)
        except Exception:
            log.exception("could not patch the status of PodGroup %s", key)
            self._written.pop(key, None)


def _same(current: Mapping[str, object], status: Mapping[str, Any]) -> bool:
    return all(current.get(k) == v for k, v in status.items())
