"""Metrics: kube-scheduler's names and labels, gang attempts, the exposition's
lint, and the health checks' registry (tests/unit/test_serving.py serves them)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import make_node, make_pod
from troupe.api.types import PodKey
from troupe.config import default_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.metrics import HealthChecks, Metrics
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import Simulation, load_objects

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
    assert got[("scheduler_scheduler_cache_size", (("type", "nodes"),))] == 5
    assert got[("scheduler_scheduler_cache_size", (("type", "pods"),))] == 1
    assert got[("scheduler_scheduler_cache_size", (("type", "assumed_pods"),))] == 0
    assert not any(name == "scheduler_cache_size" for name, _ in got)
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


# ---- gang attempts --------------------------------------------------------------------

PROFILE = ("profile", "troupe-scheduler")
FLUSH = 301.0  # past unschedulableFlushSeconds: the periodic flush retries the pool


def gang_cluster(n_nodes: int, members: int = 4) -> tuple[Scheduler, Metrics, VirtualClock]:
    """`n_nodes` 4-CPU nodes and a PodGroup of `members` 3-CPU pods, minMember all."""
    clock = VirtualClock(start=1_700_000_000)
    cluster = InMemoryCluster()
    metrics = Metrics()
    s = Scheduler(default_config(IN_TREE), cluster, clock, metrics=metrics, registry=IN_TREE)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    for i in range(n_nodes):
        s.on_node(make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods="110").obj())
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"minMember": members},
    }
    cluster.pod_groups["default/job"] = pg
    s.on_pod_group(pg)
    for i in range(members):
        obj = make_pod(f"job-{i}").group("job").req(cpu="3").obj()
        cluster.pods[PodKey(f"default/job-{i}")] = obj
        s.on_pod(obj)
    return s, metrics, clock


async def attempt_rounds(s: Scheduler, clock: VirtualClock, rounds: int) -> None:
    for r in range(rounds):
        if r:
            clock.advance_by(FLUSH)
            s.queue.flush()
        while s.schedule_one():
            pass
        await s.settle()


@pytest.mark.parametrize("rounds", [1, 3, 5])
async def test_a_gang_that_cannot_fit_counts_each_member_attempt(rounds: int) -> None:
    s, metrics, clock = gang_cluster(n_nodes=2)  # two of four fit: the gang never does
    await attempt_rounds(s, clock, rounds)
    got = samples(metrics)
    assert s.group_attempts == rounds
    attempts = "scheduler_schedule_attempts_total"
    assert got[(attempts, (PROFILE, ("result", "unschedulable")))] == rounds * 4
    assert (attempts, (PROFILE, ("result", "scheduled"))) not in got
    durations = "scheduler_scheduling_attempt_duration_seconds_count"
    assert got[(durations, (PROFILE, ("result", "unschedulable")))] == rounds * 4
    assert got[("troupe_podgroup_attempts_total", (("result", "unschedulable"),))] == rounds
    # All four wait in the pool, each counted under the gang and the resource plugin.
    assert got[("scheduler_pending_pods", (("queue", "unschedulable"),))] == 4
    unschedulable = "scheduler_unschedulable_pods"
    assert got[(unschedulable, (("plugin", "Coscheduling"), PROFILE))] == 4
    assert got[(unschedulable, (("plugin", "NodeResourcesFit"), PROFILE))] == 4


async def test_an_admitted_gang_counts_each_member_scheduled() -> None:
    s, metrics, clock = gang_cluster(n_nodes=4)
    await attempt_rounds(s, clock, 1)
    got = samples(metrics)
    attempts = "scheduler_schedule_attempts_total"
    assert got[(attempts, (PROFILE, ("result", "scheduled")))] == 4
    assert (attempts, (PROFILE, ("result", "unschedulable"))) not in got
    assert got[("troupe_podgroup_attempts_total", (("result", "admitted"),))] == 1
    assert not any(name == "scheduler_unschedulable_pods" for name, _ in got)


async def test_unschedulable_pods_count_until_the_next_attempt_as_kube_scheduler() -> None:
    # kube-scheduler increments the gauge when a rejected pod re-enters the queue and
    # decrements it when the pod is popped again, not when it leaves the pool.
    s, metrics, clock = gang_cluster(n_nodes=2)
    await attempt_rounds(s, clock, 1)
    gauge = ("scheduler_unschedulable_pods", (("plugin", "NodeResourcesFit"), PROFILE))
    assert samples(metrics)[gauge] == 4
    s.queue.activate([f"default/job-{i}" for i in range(4)])  # out of the pool, not popped
    got = samples(metrics)
    assert got[("scheduler_pending_pods", (("queue", "active"),))] == 4
    assert got[gauge] == 4
    for i in range(2, 4):  # room for the whole gang now
        s.on_node(make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods="110").obj())
    await attempt_rounds(s, clock, 1)
    got = samples(metrics)
    assert gauge not in got
    assert got[("scheduler_schedule_attempts_total", (PROFILE, ("result", "scheduled")))] == 4


# ---- the other series -------------------------------------------------------------------


def test_leader_loop_and_plugin_errors() -> None:
    m = Metrics()
    m.set_leader("troupe-scheduler", True)
    m.loop_error("scheduling")
    m.loop_error("scheduling")
    m.loop_error("podgroup-status")
    m.plugin_error("NodeResourcesFit", "Filter")
    got = samples(m)
    assert got[("leader_election_master_status", (("name", "troupe-scheduler"),))] == 1
    assert got[("troupe_loop_errors_total", (("loop", "scheduling"),))] == 2
    assert got[("troupe_loop_errors_total", (("loop", "podgroup-status"),))] == 1
    key = (("extension_point", "Filter"), ("plugin", "NodeResourcesFit"))
    assert got[("troupe_plugin_errors_total", key)] == 1
    m.set_leader("troupe-scheduler", False)
    assert samples(m)[("leader_election_master_status", (("name", "troupe-scheduler"),))] == 0


def test_labelled_children_are_found_again_however_named() -> None:
    """`labels()` finds an existing child without prometheus_client's checks;
    keyword labels, non-string values, `remove` and `clear` still behave."""
    m = Metrics()
    h = m.extension_point_duration
    first = h.labels("Filter", "Success", "troupe-scheduler")
    first.observe(0.5)
    assert h.labels("Filter", "Success", "troupe-scheduler") is first
    assert h.labels(extension_point="Filter", status="Success", profile="troupe-scheduler") is first
    m.pod_scheduling_sli.labels(2).observe(1.0)  # an int label value, as str(2)
    assert m.pod_scheduling_sli.labels("2") is m.pod_scheduling_sli.labels(2)
    with pytest.raises(ValueError, match="Incorrect label count"):
        h.labels("Filter")
    m.podgroups.labels("Running").set(3)
    m.podgroups.clear()
    assert ("troupe_podgroups", (("phase", "Running"),)) not in samples(m)
    m.podgroups.labels("Running").set(1)
    m.queue_incoming.labels("active", "PodAdd").inc()
    m.queue_incoming.remove("active", "PodAdd")
    m.queue_incoming.labels("active", "PodAdd").inc()
    got = samples(m)
    assert got[("troupe_podgroups", (("phase", "Running"),))] == 1
    assert (
        got[("scheduler_queue_incoming_pods_total", (("event", "PodAdd"), ("queue", "active")))]
        == 1
    )
    key = (("extension_point", "Filter"), ("profile", "troupe-scheduler"), ("status", "Success"))
    assert got[("scheduler_framework_extension_point_duration_seconds_count", key)] == 1


def test_process_and_runtime_collectors() -> None:
    got = samples(Metrics())
    names = {name for name, _ in got}
    assert got[("process_cpu_seconds_total", ())] >= 0
    assert got[("process_resident_memory_bytes", ())] > 0
    assert {"process_start_time_seconds", "process_open_fds", "python_info"} <= names
    assert any(n == "python_gc_collections_total" for n in names)


# ---- the exposition passes promtool's lint ---------------------------------------------

SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")
# promtool (client_golang promlint): base units, and no abbreviated units.
NON_BASE_UNITS = ("milliseconds", "microseconds", "nanoseconds", "minutes", "hours", "days",
                  "kilobytes", "megabytes", "gigabytes", "bits", "percent")  # fmt: skip
ABBREVIATED = re.compile(r"_(ms|us|ns|sec|secs|min|mins|hr|hrs|kb|mb|gb|b|s)(_|$)")


def busy_exposition() -> str:
    """Every family with samples: a gang that waits, a gang that runs, errors, a leader."""
    m = run("gang/two-gangs.yaml")
    m.set_leader("troupe-scheduler", True)
    m.loop_error("scheduling")
    m.plugin_error("NodeResourcesFit", "Filter")
    return m.render().decode()


def lint(text: str) -> list[str]:
    """The rules promtool's `check metrics` applies, on the text format."""
    problems: list[str] = []
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            if name in helps:
                problems.append(f"{name}: second HELP")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            if name in types:
                problems.append(f"{name}: second TYPE")
            types[name] = kind
    for name, kind in types.items():
        if not helps.get(name, "").strip():
            problems.append(f"{name}: no help text")
        if not SNAKE.match(name):
            problems.append(f"{name}: not snake_case")
        if kind == "counter" and not name.endswith("_total"):
            problems.append(f'{name}: counter metrics should have "_total" suffix')
        if kind != "counter" and name.endswith("_total"):
            problems.append(f'{name}: non-counter metrics should not have "_total" suffix')
        if kind not in ("histogram", "summary") and re.search(r"_(count|sum|bucket)$", name):
            problems.append(f"{name}: reserved suffix")
        if any(unit in name for unit in NON_BASE_UNITS) or ABBREVIATED.search(name):
            problems.append(f"{name}: use base units (seconds, bytes)")
        for word in ("counter", "gauge", "histogram", "summary"):
            if word in name.split("_"):
                problems.append(f"{name}: metric name should not include type '{word}'")
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for label in sample.labels:
                if not SNAKE.match(label):
                    problems.append(f"{family.name}: label {label} not snake_case")
    return problems


def test_exposition_lints_clean() -> None:
    text = busy_exposition()
    families = list(text_string_to_metric_families(text))
    assert len(families) > 20
    assert lint(text) == []
    # Durations are in seconds and named so (prometheus-client's `_created` series aside).
    for f in families:
        if ("duration" in f.name or "latency" in f.name) and not f.name.endswith("_created"):
            assert f.name.endswith("_seconds"), f.name


def test_the_lint_catches_what_promtool_catches() -> None:
    bad = (
        "# HELP foo_ms x\n# TYPE foo_ms gauge\nfoo_ms 1\n"
        "# TYPE fooBar counter\nfooBar 1\n"
        "# HELP dup x\n# HELP dup y\n# TYPE dup gauge\ndup 1\n"
    )
    problems = lint(bad)
    assert "foo_ms: use base units (seconds, bytes)" in problems
    assert "fooBar: no help text" in problems
    assert "fooBar: not snake_case" in problems
    assert 'fooBar: counter metrics should have "_total" suffix' in problems
    assert "dup: second HELP" in problems


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics() -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None
    r = subprocess.run(
        [promtool, "check", "metrics"],
        input=busy_exposition(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_health_checks_start_empty() -> None:
    assert Metrics().health == HealthChecks()
