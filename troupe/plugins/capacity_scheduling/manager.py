"""CapacityScheduling's quota state: the shared `QuotaLedger`
(troupe.quota.ledger: what each quota has used, counted as every plugin counts
it) plus what only this plugin reports: how many pods preemptors of other
namespaces took from each quota, and `statistics()`, the figures the quota
metrics read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from troupe.api.types import GroupKey, Pod, PodGroup
from troupe.dra.store import DeviceStore
from troupe.quota.ledger import QuotaLedger, no_group


@dataclass(frozen=True, slots=True)
class QuotaFigures:
    """One quota as `QuotaManager.statistics()` saw it: `min` and `max` as its
    spec writes them (empty when absent), `used` as counted, and how many pods
    preemptors of other namespaces took from it (`reclaim_victims`)."""

    namespace: str
    name: str
    min: Mapping[str, int]
    max: Mapping[str, int]
    used: Mapping[str, int]
    reclaim_victims: int


@dataclass(frozen=True, slots=True)
class QuotaStatistics:
    """Every quota at one moment, by namespace (what metrics read at scrape time)."""

    quotas: Sequence[QuotaFigures]


class QuotaManager(QuotaLedger):
    def __init__(
        self,
        devices: DeviceStore | None = None,
        pod_group: Callable[[GroupKey], PodGroup | None] = no_group,
    ) -> None:
        super().__init__(devices, pod_group)
        # Pods taken from each namespace's quota by preemptors of other namespaces.
        self._reclaimed: dict[str, int] = {}

    def statistics(self) -> QuotaStatistics:
        """A frozen copy of every quota's figures, by namespace."""
        out = []
        for ns in sorted(self.quotas):
            eq, info = self.quotas[ns], self._infos.get(ns)
            used = {r: q for r, q in info.used.items() if q} if info is not None else {}
            out.append(
                QuotaFigures(
                    ns,
                    eq.name,
                    MappingProxyType(dict(eq.min or {})),
                    MappingProxyType(dict(eq.max or {})),
                    MappingProxyType(used),
                    self._reclaimed.get(ns, 0),
                )
            )
        return QuotaStatistics(tuple(out))

    def count_victims(self, preemptor: Pod, victims: Sequence[Pod]) -> None:
        """A preemption chose `victims` for `preemptor`: those of other namespaces
        with a quota are reclaimed from it."""
        for v in victims:
            if v.namespace != preemptor.namespace and v.namespace in self.quotas:
                self._reclaimed[v.namespace] = self._reclaimed.get(v.namespace, 0) + 1
