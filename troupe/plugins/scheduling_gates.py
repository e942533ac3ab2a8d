"""SchedulingGates: a pod with spec.schedulingGates does not enter the activeQ
(schedulinggates/scheduling_gates.go)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from troupe.api.types import Pod
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.interface import (
    EnqueueExtensions,
    NoArgs,
    PreEnqueuePlugin,
)
from troupe.framework.status import SUCCESS, Code, Status


class SchedulingGates(NoArgs, PreEnqueuePlugin, EnqueueExtensions):
    NAME: Final = "SchedulingGates"
    # The pod's own spec says why it waits (its schedulingGates): the scheduler
    # writes nothing on it (troupe.framework.interface.pre_enqueue_is_reported).
    PRE_ENQUEUE_REPORTED: Final = False

    def pre_enqueue(self, pod: Pod) -> Status:
        if not pod.scheduling_gates:
            return SUCCESS
        gates = " ".join(pod.scheduling_gates)
        return Status(
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            (f"waiting for scheduling gates: [{gates}]",),
            self.NAME,
        )

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def gates_removed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            if not isinstance(new, Pod) or not isinstance(old, Pod):
                return QueueingHint.QUEUE  # as upstream's error path
            if new.key == pod.key and not new.scheduling_gates:
                return QueueingHint.QUEUE
            return QueueingHint.SKIP

        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.UNSCHEDULED_POD,
                    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED | ActionType.UPDATE,
                ),
                gates_removed,
            )
        ]
