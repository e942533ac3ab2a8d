"""Which ResourceClaim each entry of a pod's spec.resourceClaims names, and
the devices allocated to them: what the DynamicResources plugin, the tools
(the simulator's report) and the quota ledger (troupe.quota.ledger: a claim's
devices count against its namespace's quota, `device_amounts`) read, so none
imports another.

A claim named in the entry is that claim; one made from a template is the
claim the resourceclaim controller recorded in the pod's status (kube's
resourceclaim.Name), or, for an entry the pod's PodGroup lists as its own, in
the group's status: such a claim is shared by the group's pods.
"""

from __future__ import annotations

from troupe.api.types import Pod, PodGroup
from troupe.dra.extended import IMPLICIT_PREFIX
from troupe.dra.store import DeviceStore
from troupe.dra.types import EXACT_COUNT, ResourceClaim


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


def resource_name(store: DeviceStore, device_class: str) -> str:
    """The extended resource a DeviceClass's devices count as: its
    spec.extendedResourceName, else `deviceclass.resource.kubernetes.io/<class>`."""
    c = store.device_class(device_class)
    if c is not None and c.extended_resource_name:
        return c.extended_resource_name
    return IMPLICIT_PREFIX + device_class


def device_amounts(store: DeviceStore, claim: ResourceClaim) -> dict[str, int]:
    """How many devices the claim takes, by its classes' extended resource names
    (what a quota counts): one per device allocated, admin access aside; before
    allocation, each request's count (its first alternative's, for
    firstAvailable; a request of all the matching devices counts none until
    they are allocated)."""
    by_name = {alt.name: alt for r in claim.requests for alt in r.alternatives}
    out: dict[str, int] = {}
    if claim.allocation is not None:
        for res in claim.allocation.results:
            alt = by_name.get(res.request)
            if res.admin_access or alt is None:
                continue
            name = resource_name(store, alt.device_class)
            out[name] = out.get(name, 0) + 1
        return out
    for r in claim.requests:
        if not r.alternatives:
            continue
        alt = r.alternatives[0]
        if alt.admin_access or alt.mode != EXACT_COUNT or alt.count <= 0:
            continue
        name = resource_name(store, alt.device_class)
        out[name] = out.get(name, 0) + alt.count
    return out


__all__ = [
    "claim_devices",
    "claim_name",
    "device_amounts",
    "group_claim",
    "resource_name",
]
