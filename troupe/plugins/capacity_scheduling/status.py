"""ElasticQuota `status.used`, written back as scheduler-plugins' ElasticQuota
controller writes it (pkg/controllers/elasticquota_controller.go): the sum of
the requests of the namespace's Running pods, with a zero for every resource
named in min or max (Troupe adds the devices of the ResourceClaims those pods
use, once per claim, under their class's extended resource name, as the quota
counts them), patched on the status subresource only when it differs
from what the object holds. A cluster that runs upstream's controller as well
sees the same numbers from both.

A change marks the namespace; the framework's `StatusWriter`
(troupe.framework.status_writer) writes marked namespaces at most once per
`STATUS_COALESCE_SECONDS` (upstream's controller is rate-limited by its work
queue), so a burst of pods costs a patch, not one per pod; it retries failed
patches with backoff, drops a quota that is gone, and writes nothing while
the replica does not lead (it tries again later: it may lead by then).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from fractions import Fraction
from typing import Any, Final

from troupe.api.elasticquota import ElasticQuota
from troupe.api.quantity import format_quantity
from troupe.api.types import MILLI_RESOURCES, Pod, PodKey
from troupe.framework.handle import Handle
from troupe.framework.status_writer import StatusWriter
from troupe.quota.info import add_into

STATUS_COALESCE_SECONDS: Final = 1.0


# The devices of the claims that some of the given pods of a namespace use.
DevicesOf = Callable[[str, AbstractSet[PodKey]], Mapping[str, int]]


def compute_used(
    eq: ElasticQuota, pods: Iterable[Pod], devices_of: DevicesOf | None = None
) -> dict[str, int]:
    """Upstream's computeElasticQuotaUsed: Running pods' requests, zero for the
    resources min and max name (scaled units); and the devices of the claims
    the Running pods use (`devices_of`)."""
    used = dict.fromkeys([*(eq.min or {}), *(eq.max or {})], 0)
    running: set[PodKey] = set()
    for p in pods:
        if p.phase == "Running":
            add_into(used, p.requests)
            running.add(p.key)
    if devices_of is not None and running:
        add_into(used, devices_of(eq.namespace, running))
    return used


def quantity_text(resource: str, amount: int, milli: frozenset[str] = MILLI_RESOURCES) -> str:
    return format_quantity(Fraction(amount, 1000) if resource in milli else Fraction(amount))


def used_patch(eq: ElasticQuota, used: Mapping[str, int]) -> dict[str, Any]:
    """The status merge patch that makes status.used `used`: the resources it
    no longer names are removed (null), as upstream's MergeFrom patch does."""
    out: dict[str, Any] = {r: quantity_text(r, q) for r, q in sorted(used.items())}
    for r in eq.used:
        if r not in used:
            out[r] = None
    return {"used": out}


class ElasticQuotaStatusWriter(StatusWriter[str, ElasticQuota, dict[str, int]]):
    """Writes the status.used of the quotas `quota_of` gives, from the pods
    `pods_of` gives, for the namespaces `mark`ed. What is compared is the used
    amounts; the merge patch is made from them when it is sent."""

    def __init__(
        self,
        handle: Handle,
        quota_of: Callable[[str], ElasticQuota | None],
        pods_of: Callable[[str], Iterable[Pod]],
        coalesce_seconds: float = STATUS_COALESCE_SECONDS,
        devices_of: DevicesOf | None = None,
    ) -> None:
        super().__init__(
            handle,
            "the ElasticQuota of namespace",
            lookup=quota_of,
            compute=lambda ns, eq: compute_used(eq, pods_of(ns), devices_of),
            patch=lambda _ns, eq, used: handle.client.patch_elastic_quota_status(
                eq.key, used_patch(eq, used)
            ),
            same=lambda eq, used: eq.used == used,
            coalesce_seconds=coalesce_seconds,
        )
