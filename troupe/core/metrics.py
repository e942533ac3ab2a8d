"""Prometheus metrics with kube-scheduler's names, and the health checks.

`Metrics` owns its own CollectorRegistry (tests and several schedulers in one
process do not collide). The scheduler reports to it at the points where
kube-scheduler does; plugin execution durations are sampled (10 % of cycles,
kube-scheduler's pluginMetricsSamplePercent). Gauges that mirror live state
(pending pods, cache size, unschedulable pods by plugin) are set by
`refreshers` at scrape time rather than on every cycle. The registry also
carries the process and Python runtime collectors, as kube components carry
the process and Go ones.

Elastic quotas (scheduler-plugins' CapacityScheduling exports no metrics of
its own): a quota plugin registers a source (`add_quota_source`) whose frozen
copy is read at each scrape by a collector of this registry, so the figures
are the plugin's own at that moment and cost nothing per cycle. Names follow
kube-scheduler's (`scheduler_` prefix) and its resource metrics' labels
(`resource`, `unit`: cpu in cores, memory in bytes); min and max are spelled
out (`_minimum`, `_maximum`: promtool reads `_min` as minutes).

`health` holds the named checks behind the health endpoints; the port that
serves /metrics (`render`), the health endpoints and /debug/explain is
troupe.operator.serving's, as kube-scheduler's secure port.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, Self

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

PLUGIN_METRICS_SAMPLE_PERCENT: Final = 10

HealthCheck = Callable[[], str | None]
"""A named health check: None when healthy, else the reason (logged, never served)."""


@dataclass(slots=True)
class HealthChecks:
    """The checks behind /livez (and /healthz) and /readyz, in the order shown.

    Read on every request, so a check may be added once the thing it watches
    exists (the scheduling loop starts only when this replica leads)."""

    livez: dict[str, HealthCheck] = field(default_factory=dict)
    readyz: dict[str, HealthCheck] = field(default_factory=dict)


class QuotaFigures(Protocol):
    """One elastic quota as a quota plugin reports it (CapacityScheduling's
    `QuotaManager.statistics()`): amounts in Troupe's scaled units (milli-cpu,
    bytes, units); `min` and `max` as the spec writes them."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def min(self) -> Mapping[str, int]: ...
    @property
    def max(self) -> Mapping[str, int]: ...
    @property
    def used(self) -> Mapping[str, int]: ...
    @property
    def reclaim_victims(self) -> int: ...


QuotaSource = Callable[[], Iterable[QuotaFigures]]
"""Called at scrape time for a frozen copy of every quota a plugin keeps."""


def _amount(resource: str, scaled: int) -> tuple[float, str]:
    """A scaled amount in the unit kube-scheduler's resource metrics use
    (kube_pod_resource_request: cpu in cores, memory and storage in bytes)."""
    if resource == "cpu":
        return scaled / 1000, "cores"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return float(scaled), "bytes"
    return float(scaled), ""


class _QuotaCollector:
    """The elastic quota families, read from the sources at scrape time (one
    copy per scrape, not a gauge set on every cycle). A quota reported by
    several sources (several profiles enable the plugin) is shown once."""

    def __init__(self) -> None:
        self.sources: list[QuotaSource] = []

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "name", "resource", "unit"]
        fams = {
            "used": GaugeMetricFamily(
                "scheduler_elastic_quota_used",
                "Resources used by the pods counted against an ElasticQuota "
                "(assigned or reserved, not terminal), by resource.",
                labels=labels,
            ),
            "min": GaugeMetricFamily(
                "scheduler_elastic_quota_minimum",
                "An ElasticQuota's spec.min (guaranteed), by resource.",
                labels=labels,
            ),
            "max": GaugeMetricFamily(
                "scheduler_elastic_quota_maximum",
                "An ElasticQuota's spec.max (the most it may borrow up to), by resource.",
                labels=labels,
            ),
        }
        victims = CounterMetricFamily(
            "scheduler_elastic_quota_reclaim_victims",
            "Pods chosen as preemption victims from an ElasticQuota by preemptors "
            "of other namespaces (reclaiming their min).",
            labels=["namespace", "name"],
        )
        seen: set[tuple[str, str]] = set()
        for source in self.sources:
            for q in source():
                if (q.namespace, q.name) in seen:
                    continue
                seen.add((q.namespace, q.name))
                for what, amounts in (("used", q.used), ("min", q.min), ("max", q.max)):
                    for r in sorted(amounts):
                        value, unit = _amount(r, amounts[r])
                        fams[what].add_metric([q.namespace, q.name, r, unit], value)
                victims.add_metric([q.namespace, q.name], q.reclaim_victims)
        if seen:
            yield from fams.values()
            yield victims


# prometheus_client's `labels()` validates its arguments and takes a lock on
# every call; the scheduler calls it several times per attempt (one histogram
# per extension point, as kube-scheduler), which showed in the profile. Each metric keeps the
# children it has handed out by the positional label values it was asked with
# (a plain dict read is atomic under the GIL); anything else (a new child,
# keyword labels) goes through `labels()`. `remove()` and `clear()` drop the
# whole cache, so a removed child is never handed out again.
class _CachedLabels(prometheus_client.metrics.MetricWrapperBase):
    _children: dict[tuple[object, ...], Any]

    def labels(self, *labelvalues: object, **labelkwargs: object) -> Self:
        if labelkwargs:
            return super().labels(*labelvalues, **labelkwargs)
        cache = self.__dict__.setdefault("_children", {})
        child: Self | None = cache.get(labelvalues)
        if child is None:
            child = cache[labelvalues] = super().labels(*labelvalues)
        return child

    def remove(self, *labelvalues: object) -> None:
        self.__dict__.pop("_children", None)
        super().remove(*labelvalues)

    def clear(self) -> None:
        self.__dict__.pop("_children", None)
        super().clear()


class Counter(_CachedLabels, prometheus_client.Counter):
    pass


class Gauge(_CachedLabels, prometheus_client.Gauge):
    pass


class Histogram(_CachedLabels, prometheus_client.Histogram):
    pass


def _exp(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        # Called before each scrape, to set gauges from live state.
        self.refreshers: list[Callable[[], None]] = []
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=_exp(0.001, 2, 15),
            registry=r,
        )
        # As kube-scheduler: every DefaultPreemption PostFilter call is an attempt;
        # the victims of each chosen candidate are observed once.
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            registry=r,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            buckets=_exp(1, 2, 7),
            registry=r,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type.",
            ["queue"],
            registry=r,
        )
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=_exp(0.0001, 2, 12),
            registry=r,
        )
        self.plugin_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ["plugin", "extension_point", "status"],
            buckets=_exp(0.00001, 1.5, 20),
            registry=r,
        )
        self.queue_incoming = Counter(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=r,
        )
        self.pod_scheduling_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=_exp(1, 2, 5),
            registry=r,
        )
        self.pod_scheduling_sli = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the "
            "scheduling queue, and might involve multiple scheduling attempts.",
            ["attempts"],
            buckets=_exp(0.01, 2, 20),
            registry=r,
        )
        self.permit_wait = Histogram(
            "scheduler_permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            ["result"],
            buckets=_exp(0.001, 2, 15),
            registry=r,
        )
        self.unschedulable_pods = Gauge(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name.",
            ["plugin", "profile"],
            registry=r,
        )
        # kube-scheduler's CacheSize: Subsystem "scheduler" + Name "scheduler_cache_size".
        self.cache_size = Gauge(
            "scheduler_scheduler_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            ["type"],
            registry=r,
        )
        self.podgroup_attempts = Counter(
            "troupe_podgroup_attempts",
            "Group cycles for PodGroups, by the result "
            "(admitted: at least minMember placed; unschedulable: nothing held).",
            ["result"],
            registry=r,
        )
        self.podgroup_admission = Histogram(
            "troupe_podgroup_admission_duration_seconds",
            "Time from a PodGroup's first member entering the queue to the group being admitted.",
            buckets=_exp(0.01, 2, 20),
            registry=r,
        )
        self.topology_placements = Counter(
            "troupe_topology_placements_tried",
            "Placements of a gang in one topology domain tried by group cycles.",
            registry=r,
        )
        self.topology_placed = Counter(
            "troupe_topology_gangs_placed",
            "Gangs with a topology request admitted, by the level they were placed in "
            '(a node label key; "any" when no preferred level had room).',
            ["level"],
            registry=r,
        )
        self.podgroups = Gauge("troupe_podgroups", "PodGroups by phase.", ["phase"], registry=r)
        # client-go's leader election metric (component-base/metrics/prometheus/clientgo).
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease. "
            "Please make sure to group by name.",
            ["name"],
            registry=r,
        )
        self.loop_errors = Counter(
            "troupe_loop_errors",
            "Exceptions caught and survived in a long-running loop, by loop.",
            ["loop"],
            registry=r,
        )
        self.plugin_errors = Counter(
            "troupe_plugin_errors",
            "Exceptions raised by a plugin and turned into an Error status, "
            "by plugin and extension point.",
            ["plugin", "extension_point"],
            registry=r,
        )
        self._quotas = _QuotaCollector()
        r.register(self._quotas)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.health = HealthChecks()

    def add_quota_source(self, source: QuotaSource) -> None:
        """Report the elastic quotas `source` returns (a quota plugin, once per
        instance) as scheduler_elastic_quota_{used,minimum,maximum} and
        scheduler_elastic_quota_reclaim_victims_total."""
        self._quotas.sources.append(source)

    def set_leader(self, name: str, leading: bool) -> None:
        """This replica started (True) or stopped (False) leading the lease `name`."""
        self.leader.labels(name).set(1 if leading else 0)

    def loop_error(self, loop: str) -> None:
        """An exception was caught in `loop` and the loop went on."""
        self.loop_errors.labels(loop).inc()

    def plugin_error(self, plugin: str, extension_point: str) -> None:
        """`plugin` raised at `extension_point` (e.g. "Filter"); the runtime made it an Error."""
        self.plugin_errors.labels(plugin, extension_point).inc()

    def render(self) -> bytes:
        for refresh in self.refreshers:
            refresh()
        return generate_latest(self.registry)
