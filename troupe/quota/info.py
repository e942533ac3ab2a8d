"""The quotas as counted (`troupe.quota.ledger` keeps them): one
`ElasticQuotaInfo` per namespace (its min, max, and what its pods use), in
`ElasticQuotaInfos`, with upstream's arithmetic on them (as
scheduler-plugins' pkg/capacityscheduling/elasticquota.go; facts carried over,
code not).

Amounts are scaled integers by resource name (milli-cpu, bytes, units).
Comparisons are upstream's (`cmp2`): cpu, memory, ephemeral-storage and pods
are always compared, a resource absent from the bound counting as 0; any other
resource is compared only if the request names it, against the bound's amount,
else against `bound` (0 for min, unlimited for max). A quota without min gets
0 of cpu, memory and ephemeral-storage; one without max gets them unlimited;
a non-empty max that leaves one of them out limits it to 0
(`left_out_of_max` says which, for the reason a refused pod gets).

A pod's request is kube-scheduler's effective request (`Pod.requests`: the
larger of the init containers and the sum of the others, sidecars counted as
kube-scheduler counts them, plus overhead); upstream's takes each init
container's maximum without sidecars.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from troupe.api.types import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Pod, PodKey, Resources

UPPER_BOUND_OF_MAX: Final = 2**63 - 1  # upstream's math.MaxInt64
LOWER_BOUND_OF_MIN: Final = 0
# framework.Resource's own fields: compared whatever the request names.
FIXED: Final = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
_FIXED_SET: Final = frozenset(FIXED)
# What a missing min or max is set to (upstream's makeResourceListForBound).
BOUNDED: Final = (CPU, MEMORY, EPHEMERAL_STORAGE)


def bound_list(bound: int) -> dict[str, int]:
    return dict.fromkeys(BOUNDED, bound)


def over(x1: Resources, x2: Resources, y: Resources, bound: int) -> bool:
    """Upstream's cmp2: whether x1 + x2 exceeds y in some resource. (In one
    pass over x1, then the fixed resources x1 does not name: PreFilter runs
    this twice a cycle.)"""
    g2, gy = x2.get, y.get
    for r, q in x1.items():
        if q + g2(r, 0) > gy(r, 0 if r in _FIXED_SET else bound):
            return True
    for r in FIXED:
        if r not in x1 and g2(r, 0) > gy(r, 0):
            break
    else:
        return False
    return True


def exceeded(x1: Resources, x2: Resources, y: Resources, bound: int) -> list[str]:
    """The resources in which x1 + x2 exceeds y (what `over` finds), in order."""
    out = [r for r in FIXED if x1.get(r, 0) + x2.get(r, 0) > y.get(r, 0)]
    out += sorted(r for r, q in x1.items() if r not in FIXED and q + x2.get(r, 0) > y.get(r, bound))
    return out


def add_into(total: dict[str, int], amounts: Resources, sign: int = 1) -> None:
    for r, q in amounts.items():
        total[r] = total.get(r, 0) + sign * q


class ElasticQuotaInfo:
    """One namespace's quota: `min`, `max`, and `used`, the sum of the requests
    of `pods` (assigned or reserved, not terminal)."""

    __slots__ = ("explicit_max", "max", "min", "namespace", "pods", "used")

    def __init__(
        self,
        namespace: str,
        min: Resources,
        max: Resources,
        used: Resources | None = None,
        pods: Iterable[PodKey] = (),
        explicit_max: frozenset[str] | None = None,
    ) -> None:
        self.namespace = namespace
        self.min: dict[str, int] = dict(min)
        self.max: dict[str, int] = dict(max)
        self.used: dict[str, int] = dict(used or {})
        self.pods: set[PodKey] = set(pods)
        # The resources spec.max names (None: no spec.max), for the reason.
        self.explicit_max = explicit_max

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ElasticQuotaInfo):
            return NotImplemented
        return (
            self.namespace == other.namespace
            and self.pods == other.pods
            and self.min == other.min
            and self.max == other.max
            and {r: q for r, q in self.used.items() if q}
            == {r: q for r, q in other.used.items() if q}
        )

    def __repr__(self) -> str:
        return (
            f"ElasticQuotaInfo({self.namespace!r}, min={self.min}, max={self.max}, "
            f"used={self.used}, pods={sorted(self.pods)})"
        )

    def reserve_resource(self, request: Resources) -> None:
        add_into(self.used, request)

    def unreserve_resource(self, request: Resources) -> None:
        add_into(self.used, request, -1)

    def used_over_min_with(self, request: Resources) -> bool:
        return over(request, self.used, self.min, LOWER_BOUND_OF_MIN)

    def used_over_max_with(self, request: Resources) -> bool:
        return over(request, self.used, self.max, UPPER_BOUND_OF_MAX)

    def used_over_min(self) -> bool:
        return over(self.used, {}, self.min, LOWER_BOUND_OF_MIN)

    def left_out_of_max(self, resources: Iterable[str]) -> list[str]:
        """Of `resources`, those limited to 0 only because a non-empty spec.max
        leaves them out."""
        if self.explicit_max is None:
            return []
        return [r for r in resources if r in BOUNDED and r not in self.explicit_max]

    def snapshot(self) -> ElasticQuotaInfo:
        """A copy for one cycle: its own used; min, max and the pod set shared
        (min and max are replaced, never changed in place, and a cycle only
        reads the pod set)."""
        c = ElasticQuotaInfo.__new__(ElasticQuotaInfo)
        c.namespace, c.min, c.max = self.namespace, self.min, self.max
        c.used, c.pods, c.explicit_max = dict(self.used), self.pods, self.explicit_max
        return c

    def clone(self) -> ElasticQuotaInfo:
        return ElasticQuotaInfo(
            self.namespace, self.min, self.max, self.used, self.pods, self.explicit_max
        )

    def add_pod_if_not_present(self, pod: Pod) -> bool:
        """Count the pod once; False if it was counted already."""
        key = pod.key
        if key in self.pods:
            return False
        self.pods.add(key)
        add_into(self.used, pod.requests)
        return True

    def delete_pod_if_present(self, pod: Pod) -> bool:
        key = pod.key
        if key not in self.pods:
            return False
        self.pods.discard(key)
        add_into(self.used, pod.requests, -1)
        return True


def new_elastic_quota_info(
    namespace: str,
    min: Resources | None,
    max: Resources | None,
    used: Resources | None = None,
) -> ElasticQuotaInfo:
    """Upstream's newElasticQuotaInfo: no min is 0 and no max unlimited for cpu,
    memory and ephemeral-storage."""
    return ElasticQuotaInfo(
        namespace,
        bound_list(LOWER_BOUND_OF_MIN) if min is None else min,
        bound_list(UPPER_BOUND_OF_MAX) if max is None else max,
        used,
        explicit_max=None if max is None else frozenset(max),
    )


class ElasticQuotaInfos(dict[str, ElasticQuotaInfo]):
    """The quotas by namespace."""

    def clone(self) -> ElasticQuotaInfos:
        return ElasticQuotaInfos({ns: info.clone() for ns, info in self.items()})

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """The sums of every quota's used and min."""
        used: dict[str, int] = {}
        lo: dict[str, int] = {}
        for info in self.values():
            add_into(used, info.used)
            add_into(lo, info.min)
        return used, lo

    def aggregated_used_over_min_with(
        self,
        request: Resources,
        totals: tuple[Resources, Resources] | None = None,
    ) -> bool:
        """Whether the total used of all quotas, with `request`, exceeds the sum of
        their mins (upstream's aggregatedUsedOverMinWith). `totals`: `totals()`,
        if known already."""
        total_used, lo = self.totals() if totals is None else totals
        # The sum compared without building it (this runs on every cycle): the
        # resources the request names, then those only the total uses.
        if over(request, total_used, lo, LOWER_BOUND_OF_MIN):
            return True
        for r, q in total_used.items():
            if r not in _FIXED_SET and r not in request and q > lo.get(r, LOWER_BOUND_OF_MIN):
                return True
        return False
