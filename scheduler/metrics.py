"""Prometheus metrics with kube-scheduler's names, and the HTTP endpoints.

`Metrics` owns its own CollectorRegistry (tests and several schedulers in one
process do not collide). The scheduler reports to it at the points where
kube-scheduler does; plugin execution durations are sampled (10 % of cycles,
kube-scheduler's pluginMetricsSamplePercent). `serve()` exposes `/metrics`,
`/healthz` and `/readyz` (ready once the caller says the caches are synced)
on one port.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

PLUGIN_METRICS_SAMPLE_PERCENT: Final = 10


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
        self.plugin_errors = Counter(
            "troupe_plugin_errors_total",
            "Plugin calls that raised (a bug): the pod got an internal error.",
            ["plugin", "extension_point"],
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
        self.cache_size = Gauge(
            "scheduler_cache_size",
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
        self.podgroups = Gauge("troupe_podgroups", "PodGroups by phase.", ["phase"], registry=r)

    def render(self) -> bytes:
        for refresh in self.refreshers:
            refresh()
        return generate_latest(self.registry)

    async def serve(self, host: str, port: int, ready: Callable[[], bool]) -> Callable[[], object]:
        """Serve /metrics, /healthz and /readyz; returns a coroutine function to stop."""
        from aiohttp import web

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            if ready():
                return web.Response(text="ok")
            return web.Response(status=503, text="caches not synced")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        return runner.cleanup
