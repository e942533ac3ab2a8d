"""Metrics: kube-scheduler's names and labels, and the HTTP endpoints."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from scheduler.config import default_config
from scheduler.metrics import Metrics
from scheduler.plugins.registry import IN_TREE
from scheduler.simulate import Simulation, load_objects

FIXTURES = Path(__file__).parent.parent / "fixtures"


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(metrics.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def run(fixture: str) -> Metrics:
    metrics = Metrics()
    sim = Simulation(load_objects([str(FIXTURES / fixture)]), default_config(IN_TREE), metrics)
    asyncio.run(sim.run())
    return metrics


def test_attempts_gauges_and_durations() -> None:
    got = samples(run("sim/taints.yaml"))
    prof = ("profile", "troupe-scheduler")
    assert got[("scheduler_schedule_attempts_total", (prof, ("result", "scheduled")))] == 1
    assert got[("scheduler_schedule_attempts_total", (prof, ("result", "unschedulable")))] >= 1
    assert got[("scheduler_pending_pods", (("queue", "unschedulable"),))] == 1
    assert got[("scheduler_pending_pods", (("queue", "active"),))] == 0
    assert got[("scheduler_cache_size", (("type", "nodes"),))] == 5
    assert got[("scheduler_cache_size", (("type", "pods"),))] == 1
    assert got[("scheduler_unschedulable_pods", (("plugin", "NodeResourcesFit"), prof))] == 1
    assert got[("scheduler_unschedulable_pods", (("plugin", "TaintToleration"), prof))] == 1
    assert got[("scheduler_pod_scheduling_attempts_count", ())] == 1
    assert (
        got[("scheduler_queue_incoming_pods_total", (("event", "PodAdd"), ("queue", "active")))]
        == 2
    )
    filt = (
        "scheduler_framework_extension_point_duration_seconds_count",
        (("extension_point", "Filter"), prof, ("status", "Success")),
    )
    assert got[filt] >= 2


def test_gang_metrics() -> None:
    got = samples(run("gang/two-gangs.yaml"))
    assert got[("troupe_podgroup_attempts_total", (("result", "admitted"),))] == 1
    assert got[("troupe_podgroup_attempts_total", (("result", "unschedulable"),))] >= 1
    assert got[("troupe_podgroup_admission_duration_seconds_count", ())] == 1
    assert got[("troupe_podgroups", (("phase", "Pending"),))] == 2  # as the cache last saw
    assert got[("scheduler_permit_wait_duration_seconds_count", (("result", "Success"),))] == 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_endpoints() -> None:
    metrics = Metrics()
    metrics.schedule_attempts.labels("scheduled", "p").inc()
    ready = False
    port = free_port()
    stop = await metrics.serve("127.0.0.1", port, lambda: ready)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 200
                assert 'scheduler_schedule_attempts_total{profile="p",result="scheduled"} 1.0' in (
                    await r.text()
                )
            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 200
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                assert r.status == 503
            ready = True
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                assert r.status == 200
    finally:
        await stop()  # type: ignore[misc]
