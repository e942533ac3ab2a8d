"""ElasticQuota `status.used`, written back as scheduler-plugins' ElasticQuota
controller writes it (pkg/controllers/elasticquota_controller.go): the sum of
the requests of the namespace's Running pods, with a zero for every resource
named in min or max (Troupe adds the devices of the ResourceClaims those pods
use, once per claim, under their class's extended resource name, as the quota
counts them), patched on the status subresource only when it differs
from what the object holds. A cluster that runs upstream's controller as well
sees the same numbers from both.

A change marks the namespace; marked namespaces are written at most once per
`STATUS_COALESCE_SECONDS` (upstream's controller is rate-limited by its work
queue), so a burst of pods costs a patch, not one per pod. A patch that fails
is retried with exponential backoff up to `MAX_RETRY_SECONDS`; a quota that is
gone is dropped; a replica that does not lead writes nothing, and tries again
later (it may lead by then).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from fractions import Fraction
from typing import Any, Final

from troupe.api.elasticquota import ElasticQuota
from troupe.api.quantity import format_quantity
from troupe.api.types import MILLI_RESOURCES, Pod, PodKey
from troupe.core.clock import TimerHandle
from troupe.core.cluster import NotFound, NotLeader
from troupe.framework.handle import Handle
from troupe.quota.info import add_into

log = logging.getLogger(__name__)

STATUS_COALESCE_SECONDS: Final = 1.0
MAX_RETRY_SECONDS: Final = 60.0


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


class ElasticQuotaStatusWriter:
    """Writes the status.used of the quotas `quota_of` gives, from the pods
    `pods_of` gives, for the namespaces `mark`ed."""

    def __init__(
        self,
        handle: Handle,
        quota_of: Callable[[str], ElasticQuota | None],
        pods_of: Callable[[str], Iterable[Pod]],
        coalesce_seconds: float = STATUS_COALESCE_SECONDS,
        devices_of: DevicesOf | None = None,
    ) -> None:
        self.handle = handle
        self.quota_of = quota_of
        self.pods_of = pods_of
        self.devices_of = devices_of
        self.coalesce_seconds = coalesce_seconds
        self._dirty: set[str] = set()
        self._written: dict[str, dict[str, int]] = {}
        self._timer: TimerHandle | None = None
        self._failures: dict[str, int] = {}
        self.patches = 0
        self.failed_patches = 0

    def mark(self, namespace: str) -> None:
        self._dirty.add(namespace)
        if self._timer is None:
            clock = self.handle.clock
            self._timer = clock.call_at(clock.now() + self.coalesce_seconds, self.flush_now)

    def flush_now(self) -> None:
        self._timer = None
        dirty, self._dirty = self._dirty, set()
        for ns in sorted(dirty):
            eq = self.quota_of(ns)
            if eq is None:
                self._written.pop(ns, None)
                continue
            used = compute_used(eq, self.pods_of(ns), self.devices_of)
            if self._written.get(ns) == used or (ns not in self._written and eq.used == used):
                continue
            self._written[ns] = used
            self.patches += 1
            self.handle.spawn(self._patch(ns, eq, used))

    async def _patch(self, ns: str, eq: ElasticQuota, used: dict[str, int]) -> None:
        try:
            await self.handle.client.patch_elastic_quota_status(eq.key, used_patch(eq, used))
        except NotFound:
            self._written.pop(ns, None)
            self._failures.pop(ns, None)
            return
        except Exception as e:
            if not isinstance(e, NotLeader):
                self.failed_patches += 1
                log.warning("could not patch the status of ElasticQuota %s (%s)", eq.key, e)
            if self._written.get(ns) == used:
                self._written.pop(ns, None)
            n = self._failures.get(ns, 0)
            self._failures[ns] = n + 1
            delay = min(max(self.coalesce_seconds, 0.5) * 2**n, MAX_RETRY_SECONDS)
            clock = self.handle.clock
            clock.call_at(clock.now() + delay, lambda: self.mark(ns))
            return
        self._failures.pop(ns, None)
