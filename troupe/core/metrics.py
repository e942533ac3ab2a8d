"""Prometheus metrics with kube-scheduler's names, and the health endpoints.

`Metrics` owns its own CollectorRegistry (tests and several schedulers in one
process do not collide). The scheduler reports to it at the points where
kube-scheduler does; plugin execution durations are sampled (10 % of cycles,
kube-scheduler's pluginMetricsSamplePercent). Gauges that mirror live state
(pending pods, cache size, unschedulable pods by plugin) are set by
`refreshers` at scrape time rather than on every cycle. The registry also
carries the process and Python runtime collectors, as kube components carry
the process and Go ones.

`serve()` exposes `/metrics`, `/livez`, `/readyz` and `/healthz` on one port,
over TLS and behind delegated authentication and authorization, as
kube-scheduler's secure port (troupe.operator.serving: the health endpoints are always
allowed).
The health endpoints behave as k8s.io/apiserver's healthz package does for
kube-scheduler: each runs its named checks (`ping` first, then those
registered in `Metrics.health`), answers `ok`, or with `?verbose` one line per
check (`[+]ping ok`, `[-]informer-sync failed: reason withheld`) and a last line
`livez check passed`; a failing endpoint answers 500 and always lists its
checks, ending `readyz check failed`. The reasons go to the log, not the
response. `/<endpoint>/<check>` runs a single check; `?exclude=<check>` skips
one. `/healthz` runs the liveness checks, as kube-scheduler's `/healthz`
carries its liveness-type checks.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Self

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

if TYPE_CHECKING:
    from troupe.operator.serving import DelegatingAuth

log = logging.getLogger(__name__)

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


@dataclass(frozen=True, slots=True)
class HealthReport:
    """One run of an endpoint's checks: the HTTP status and the body kube prints."""

    status: int
    body: str
    failed: dict[str, str]


class ServeError(Exception):
    """The port cannot be served (taken, or an address this machine does not have)."""


def address(host: str, port: int) -> str:
    """`host:port` as Go prints it (`[::1]:10259` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ping() -> None:
    return None


def _run(check: HealthCheck) -> str | None:
    try:
        return check()
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def run_checks(
    endpoint: str,
    checks: dict[str, HealthCheck],
    verbose: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> HealthReport:
    """Run `checks` after `ping` and format the answer as k8s.io/apiserver's
    healthz handleRootHealth does (a check that raises has failed)."""
    lines: list[str] = []
    failed: dict[str, str] = {}
    left = set(exclude)
    for name, check in {"ping": _ping, **checks}.items():
        if name in left:
            left.discard(name)
            lines.append(f"[+]{name} excluded: ok\n")
            continue
        reason = _run(check)
        if reason is None:
            lines.append(f"[+]{name} ok\n")
        else:
            lines.append(f"[-]{name} failed: reason withheld\n")
            failed[name] = reason
    if left:
        names = ",".join(f'"{n}"' for n in sorted(left))
        lines.append(f"warn: some health checks cannot be excluded: no matches for {names}\n")
    if failed:
        return HealthReport(500, "".join(lines) + f"{endpoint} check failed\n", failed)
    if not verbose:
        return HealthReport(200, "ok", failed)
    return HealthReport(200, "".join(lines) + f"{endpoint} check passed\n", failed)


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
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.health = HealthChecks()

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

    def checks_of(self, endpoint: str) -> dict[str, HealthCheck]:
        """The checks `endpoint` ("livez", "healthz" or "readyz") runs after `ping`."""
        if endpoint in ("livez", "healthz"):
            return self.health.livez
        if endpoint == "readyz":
            return self.health.readyz
        raise ValueError(f"unknown health endpoint {endpoint!r}")

    async def serve(
        self,
        host: str,
        port: int,
        ready: Callable[[], bool] | None = None,
        explain: Callable[[str], Mapping[str, Any] | None] | None = None,
        *,
        tls: ssl.SSLContext,
        auth: DelegatingAuth,
    ) -> Callable[[], object]:
        """Serve /metrics, /livez, /readyz and /healthz over `tls`, each request
        authenticated and authorized by `auth` (troupe.operator.serving); returns a
        coroutine function that stops the server. `ready`, if given, becomes the
        readyz check `informer-sync` (failing until it returns True). `explain`,
        if given, answers /debug/explain/<namespace>/<name> (troupe.explain).
        Raises ServeError when the address cannot be served."""
        from aiohttp import web

        @web.middleware
        async def guard(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            refusal = await auth.check(
                request.method, request.path, request.headers.get("Authorization", "")
            )
            if refusal is None:
                return await handler(request)
            if isinstance(refusal.body, str):
                return web.Response(status=refusal.status, text=refusal.body, headers=_PLAIN)
            return web.json_response(dict(refusal.body), status=refusal.status)

        if ready is not None:
            self.health.readyz.setdefault(
                "informer-sync", lambda: None if ready() else "initial lists not done"
            )

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        def health(endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
            async def root(request: web.Request) -> web.Response:
                q = request.query
                report = run_checks(
                    endpoint,
                    self.checks_of(endpoint),
                    verbose="verbose" in q,
                    exclude=frozenset(q.getall("exclude", [])),
                )
                if report.failed:
                    log.info(
                        "%s check failed: %s\n%s",
                        ",".join(report.failed),
                        endpoint,
                        "".join(f"[-]{n} failed: {r}\n" for n, r in report.failed.items()),
                    )
                return web.Response(status=report.status, text=report.body, headers=_PLAIN)

            return root

        def single(endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
            async def one(request: web.Request) -> web.Response:
                name = request.match_info["check"]
                checks = {"ping": _ping, **self.checks_of(endpoint)}
                check = checks.get(name)
                if check is None:
                    return web.Response(status=404, text="404 page not found\n", headers=_PLAIN)
                reason = _run(check)
                if reason is not None:
                    body = f"internal server error: {reason}\n"
                    return web.Response(status=500, text=body, headers=_PLAIN)
                return web.Response(text="ok", headers=_PLAIN)

            return one

        async def explained(request: web.Request) -> web.Response:
            assert explain is not None
            key = f"{request.match_info['namespace']}/{request.match_info['name']}"
            got = explain(key)
            if got is None:
                body = {"error": f"no decision recorded for pod {key}"}
                return web.json_response(body, status=404)
            return web.json_response(dict(got))

        app = web.Application(middlewares=[guard])
        app.router.add_get("/metrics", metrics)
        if explain is not None:
            app.router.add_get("/debug/explain/{namespace}/{name}", explained)
        for endpoint in ("livez", "readyz", "healthz"):
            app.router.add_get(f"/{endpoint}", health(endpoint))
            app.router.add_get(f"/{endpoint}/{{check}}", single(endpoint))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=tls)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            why = os.strerror(e.errno).lower() if e.errno else str(e)
            raise ServeError(f"cannot serve on {address(host, port)}: {why}") from None
        log.info("serving securely on %s", address(host, port))  # kube-scheduler's line
        return runner.cleanup


_PLAIN: Final = {"X-Content-Type-Options": "nosniff"}
