"""Which ResourceClaim each entry of a pod's spec.resourceClaims names, and
the devices allocated to them: what the DynamicResources plugin and the tools
(the simulator's report) both read, so neither imports the other.

A claim named in the entry is that claim; one made from a template is the
claim the resourceclaim controller recorded in the pod's status (kube's
resourceclaim.Name), or, for an entry the pod's PodGroup lists as its own, in
the group's status: such a claim is shared by the group's pods.
"""

from __future__ import annotations

from troupe.api.types import Pod, PodGroup
from troupe.dra.store import DeviceStore


def group_claim(pod: Pod, index: int, group: PodGroup | None) -> bool:
    """Whether the pod's `index`-th claim is its PodGroup's (the group lists the
    very same entry in its spec.resourceClaims): shared by the group's pods and
    reserved for the group, not the pod."""
    return group is not None and pod.resource_claims[index] in group.resource_claims


def claim_name(pod: Pod, index: int, group: PodGroup | None = None) -> str | None:
    """The ResourceClaim the pod's `index`-th claim refers to (kube's
    resourceclaim.Name): the named claim, or the one created from the template
    as the pod's (or, for a PodGroup's claim, the group's) status says; None
    while the controller has not created it."""
    c = pod.resource_claims[index]
    if c.claim_name:
        return c.claim_name
    if group is not None and group_claim(pod, index, group):
        return group.claim_statuses.get(c.name) or None
    return pod.claim_statuses.get(c.name) or None


def claim_devices(
    store: DeviceStore, pod: Pod, group: PodGroup | None = None
) -> dict[str, list[str]]:
    """The devices allocated to each of the pod's claims, by the pod's claim
    name ("driver/pool/device"), for reports."""
    out: dict[str, list[str]] = {}
    for i, c in enumerate(pod.resource_claims):
        name = claim_name(pod, i, group)
        claim = store.claim(f"{pod.namespace}/{name}") if name else None
        if claim is not None and claim.allocation is not None:
            out[c.name] = [str(r.device_id) for r in claim.allocation.results]
    return out


__all__ = ["claim_devices", "claim_name", "group_claim"]
