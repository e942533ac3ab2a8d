"""DynamicResources: pods that claim devices through Dynamic Resource
Allocation (spec.resourceClaims, resource.k8s.io) are never bound without them.

kube-scheduler's DynamicResources allocates the claims of a pod on the node it
picks and writes the allocation before binding. Until Troupe's allocator is in,
this plugin keeps such a pod out of the active queue at PreEnqueue with a
reason that names the field, rather than letting the other plugins place it on
a node that would leave it hanging in ContainerCreating. A pod whose claim is
still to be created from a template waits with kube-scheduler's text for that
case; the update that gives it the claim (status.resourceClaimStatuses) is
registered, so the reason stays current.
"""

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
from troupe.framework.interface import EnqueueExtensions, NoArgs, PreEnqueuePlugin
from troupe.framework.status import SUCCESS, Code, Status

NAME: Final = "DynamicResources"


def claim_name(pod: Pod, index: int) -> str | None:
    """The ResourceClaim the pod's `index`-th claim refers to (kube's
    resourceclaim.Name): the named claim, or the one created from the template
    as the pod's status says; None while the controller has not created it."""
    c = pod.resource_claims[index]
    if c.claim_name:
        return c.claim_name
    return pod.claim_statuses.get(c.name) or None


def not_created_message(pod: Pod, index: int) -> str:
    """kube-scheduler's text for a claim still to be created from its template."""
    name = pod.claim_statuses.get(pod.resource_claims[index].name)
    what = name or f"{pod.name}-{pod.resource_claims[index].name}"
    return f'waiting for dynamic resource controller to create the resourceclaim "{what}"'


class DynamicResources(NoArgs, PreEnqueuePlugin, EnqueueExtensions):
    NAME: Final = NAME

    def pre_enqueue(self, pod: Pod) -> Status:
        if not pod.resource_claims:
            return SUCCESS
        for i, c in enumerate(pod.resource_claims):
            if c.template_name and claim_name(pod, i) is None:
                return Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (not_created_message(pod, i),), NAME
                )
        first = pod.resource_claims[0]
        return Status(
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            (
                f'spec.resourceClaims[0] ("{first.name}"): devices claimed through Dynamic '
                "Resource Allocation are not allocated by Troupe yet; the pod waits rather "
                "than run without them",
            ),
            NAME,
        )

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def claim_created(pod: Pod, old: Any, new: Any) -> QueueingHint:
            if not isinstance(new, Pod) or new.key != pod.key:
                return QueueingHint.SKIP
            if isinstance(old, Pod) and old.claim_statuses == new.claim_statuses:
                return QueueingHint.SKIP
            return QueueingHint.QUEUE

        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.UNSCHEDULED_POD,
                    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM | ActionType.UPDATE,
                ),
                claim_created,
            )
        ]
