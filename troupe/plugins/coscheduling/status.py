"""PodGroup status, kept true and written sparingly.

Troupe writes only what scheduler-plugins' own PodGroup CRD keeps (its
structural schema prunes anything else), and computes it as that project's
PodGroup controller does (pkg/controllers/podgroup_controller.go), so a
cluster that runs it, or only has its CRD installed, sees the same status:

    fewer pods than minMember                  -> Pending
    running + succeeded < minMember            -> Scheduling
    running + succeeded >= minMember           -> Running
    failed > 0 and failed + running + succeeded
      >= minMember                             -> Failed
    succeeded >= minMember                     -> Finished

(later rows win). `running`, `succeeded` and `failed` count member pods by
phase; `occupiedBy` names the owners of a member ("ns/name", sorted, comma
separated); `scheduleStartTime` is when Troupe first tried the group. There is
no `scheduled` count and no PreScheduling or Scheduled phase: upstream removed
them (scheduler-plugins #574).

Kubernetes' own PodGroups (scheduling.k8s.io) get the status kube-scheduler
writes for them (pkg/scheduler/schedule_one_podgroup.go, updatePodGroupCondition;
the condition types and reasons of k8s.io/api scheduling v1alpha2, v1alpha3 and
v1beta1): one condition, `PodGroupScheduled` in v1alpha2 and
`PodGroupInitiallyScheduled` in v1beta1 and v1alpha3,

    minCount members placed (bound or assumed)  -> True,  reason Scheduled
    an attempt failed                           -> False, reason Unschedulable
                                                   (SchedulerError on an error),
                                                   message: the attempt's reason

with `observedGeneration`, and `lastTransitionTime` moved only when the status
flips (meta.SetStatusCondition). Once True it never goes back to False, as
upstream; a group never tried (its pods held at PreEnqueue) gets no condition.
Other conditions on the object (DisruptionTarget) are kept as they are.

A change (a member's or the group's event, an attempt) marks the group; the
framework's `StatusWriter` (troupe.framework.status_writer) patches marked
groups on the status subresource at most once per `coalesce_seconds`, and
only when the status differs from what was last written, so a gang of 1000
pods costs a few patches, not 1000; it retries failed patches with backoff,
drops a group that is gone, and writes nothing while the replica does not
lead.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from troupe.api.types import GroupKey, Pod, PodGroup
from troupe.core.topology import group_placement, has_topology
from troupe.framework.events import (
    ClusterEvent,
    EventResource,
)
from troupe.framework.handle import Handle
from troupe.framework.status import Code
from troupe.framework.status_writer import StatusWriter, status_holds
from troupe.plugins.coscheduling.core import placed_members


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


PHASES: Final = ("Pending", "Scheduling", "Running", "Finished", "Failed")
"""The phases Troupe writes: scheduler-plugins' PodGroupPhase values but Unknown."""


def compute_status(pg: PodGroup, pods: list[Pod], started: float | None) -> dict[str, Any]:
    running = sum(1 for p in pods if p.phase == "Running")
    succeeded = sum(1 for p in pods if p.phase == "Succeeded")
    failed = sum(1 for p in pods if p.phase == "Failed")
    m = pg.min_member
    if len(pods) < m:
        phase = "Pending"
    elif succeeded >= m:
        phase = "Finished"
    elif failed and failed + running + succeeded >= m:
        phase = "Failed"
    elif running + succeeded >= m:
        phase = "Running"
    else:
        phase = "Scheduling"
    status: dict[str, Any] = {
        "phase": phase,
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
    }
    if started is not None:
        status["scheduleStartTime"] = rfc3339(started)
    # as scheduler-plugins' fillOccupiedObj: the owners of one member
    owned = next((p for p in pods if p.owner_references), None)
    if owned is not None:
        refs = sorted(f"{owned.namespace}/{name}" for _, name in owned.owner_references)
        status["occupiedBy"] = ",".join(refs)
    return status


# The condition kube-scheduler keeps on a native PodGroup, by API version
# (k8s.io/api scheduling/v1alpha2 PodGroupScheduled, v1beta1 and v1alpha3
# PodGroupInitiallyScheduled).
SCHEDULED_CONDITION: Final = {
    "v1alpha2": "PodGroupScheduled",
    "v1alpha3": "PodGroupInitiallyScheduled",
    "v1beta1": "PodGroupInitiallyScheduled",
}
REASON_SCHEDULED: Final = "Scheduled"
REASON_UNSCHEDULABLE: Final = "Unschedulable"  # PodGroupReasonUnschedulable
REASON_SCHEDULER_ERROR: Final = "SchedulerError"  # PodGroupReasonSchedulerError


def condition_type(pg: PodGroup) -> str:
    return SCHEDULED_CONDITION.get(pg.api_version.partition("/")[2], "PodGroupScheduled")


def native_phase(status: Mapping[str, Any]) -> str:
    """A one-word state of a native PodGroup for displays and the troupe_podgroups
    gauge (its API has no phase): its scheduled condition's reason (Scheduled,
    Unschedulable, SchedulerError), or Pending before any."""
    conditions = status.get("conditions")
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") in SCHEDULED_CONDITION.values():
            return str(c.get("reason") or "Pending")
    return "Pending"


def compute_native_status(
    pg: PodGroup, placed: int, failure: tuple[str, Code] | None, now: float, where: str = ""
) -> dict[str, Any] | None:
    """The status of a native PodGroup, or None when there is nothing to say
    (never tried, or already True and not to be taken back). `where`: the
    topology domain its members were placed in, said in the True condition's
    message ("placed in troupe.dev/rack=r7")."""
    return scheduled_condition(
        pg.status,
        condition_type(pg),
        pg.generation,
        now,
        placed >= pg.min_member,
        f"placed in {where}" if where else "",
        failure_reason(failure),
    )


def failure_reason(failure: tuple[str, Code] | None) -> tuple[str, str] | None:
    """A failed attempt's (reason, message) in a scheduled condition."""
    if failure is None:
        return None
    message, code = failure
    return (REASON_SCHEDULER_ERROR if code is Code.ERROR else REASON_UNSCHEDULABLE), message


def scheduled_condition(
    status: Mapping[str, Any],
    ctype: str,
    generation: int,
    now: float,
    done: bool,
    done_message: str,
    failure: tuple[str, str] | None,
) -> dict[str, Any] | None:
    """The `conditions` of a status whose condition `ctype` says whether a
    group was scheduled: True (reason Scheduled) when `done`; else False with
    `failure`'s (reason, message); None when there is nothing to say (no
    failure yet, or True already: as upstream, it is never taken back). The
    other conditions are kept; lastTransitionTime moves only when the status
    does."""
    raw = status.get("conditions")
    conditions = [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []
    current = next((c for c in conditions if c.get("type") == ctype), None)
    if done:
        want = ("True", REASON_SCHEDULED, done_message)
    elif current is not None and current.get("status") == "True":
        return None
    elif failure is not None:
        want = ("False", *failure)
    else:
        return None
    cond_status, reason, message = want
    since = current.get("lastTransitionTime") if current is not None else None
    if current is None or current.get("status") != cond_status or not isinstance(since, str):
        since = rfc3339(now)
    cond = {
        "type": ctype,
        "status": cond_status,
        "observedGeneration": generation,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message,
    }
    out = [dict(c) if c.get("type") != ctype else cond for c in conditions]
    if current is None:
        out.append(cond)
    return {"conditions": out}


class PodGroupStatusTracker(StatusWriter[GroupKey, PodGroup, dict[str, Any]]):
    """Writes the status of the PodGroups whose members or selves the Handle's
    events change, and of those the plugin `mark`s (an attempt)."""

    def __init__(
        self, handle: Handle, coalesce_seconds: float, schedule_start: Mapping[GroupKey, float]
    ) -> None:
        super().__init__(
            handle,
            "PodGroup",
            lookup=lambda key: handle.lister.pod_group(key),
            compute=self._compute,
            patch=lambda key, _pg, status: handle.client.patch_pod_group_status(key, status),
            same=status_holds,
            coalesce_seconds=coalesce_seconds,
        )
        self.schedule_start = schedule_start
        handle.watch(self.on_event)

    def on_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        for obj in (old, new):
            if isinstance(obj, Pod) and obj.group_key is not None:
                self.mark(obj.group_key)
            elif isinstance(obj, PodGroup) and event.resource is EventResource.POD_GROUP:
                self.mark(obj.key)

    def _compute(self, key: GroupKey, pg: PodGroup) -> dict[str, Any] | None:
        lister = self.handle.lister
        if not pg.native:
            return compute_status(pg, list(lister.pods_in_group(key)), self.schedule_start.get(key))
        failure = None
        if key in self.schedule_start:  # tried: a pending member says why it failed
            for p in lister.pods_in_group(key):
                if lister.pod(p.key) is None and not p.terminal:
                    failure = self.handle.failure(p.key)
                    if failure is not None:
                        break
        placed = placed_members(lister, self.handle.waiting_pods, key)
        where = ""
        if placed >= pg.min_member and has_topology(pg):
            nodes = [
                q.node_name
                for p in lister.pods_in_group(key)
                if (q := lister.pod(p.key)) is not None and q.node_name
            ]
            where = group_placement(self.handle.snapshot(), pg, nodes) or ""
        return compute_native_status(pg, placed, failure, self.handle.clock.now(), where)
