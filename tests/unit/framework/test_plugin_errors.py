"""A plugin that raises is a bug: the runtime turns it into an ERROR status with a
kube-scheduler-like message that hides the exception, logs the traceback once per
pod, counts it, and the pod is retried with backoff."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from troupe.api.types import PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.framework.runtime import INTERNAL_ERROR, plugin_error_message
from troupe.framework.status import SUCCESS
from troupe.plugins.inter_pod_affinity import InterPodAffinity
from troupe.plugins.node_resources_fit import NodeResourcesFit
from troupe.plugins.pod_topology_spread import PodTopologySpread
from troupe.plugins.registry import IN_TREE


def boom(*_: Any, **__: Any) -> Any:
    raise IndexError("index 0 is out of bounds for axis 0 with size 0")


def make(n_nodes: int = 2) -> tuple[Scheduler, InMemoryCluster]:
    cluster = InMemoryCluster()
    s = Scheduler(parse_config({}, IN_TREE), cluster, VirtualClock(), registry=IN_TREE)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    for i in range(n_nodes):
        s.on_node(make_node(f"n{i}").build().raw)  # type: ignore[arg-type]
    return s, cluster


def add(s: Scheduler, cluster: InMemoryCluster, name: str) -> PodKey:
    obj = make_pod(name).req(cpu="100m").obj()
    key = PodKey(f"default/{name}")
    cluster.pods[key] = obj
    s.on_pod(obj)
    return key


def errors_metric(s: Scheduler, plugin: str, point: str) -> float:
    v = s.metrics.registry.get_sample_value(
        "troupe_plugin_errors_total", {"plugin": plugin, "extension_point": point}
    )
    return v or 0.0


@pytest.mark.parametrize(
    ("cls", "method", "plugin", "point", "message"),
    [
        (
            InterPodAffinity,
            "pre_filter",
            "InterPodAffinity",
            "PreFilter",
            'running PreFilter plugin "InterPodAffinity": ' + INTERNAL_ERROR,
        ),
        (
            NodeResourcesFit,
            "filter",
            "NodeResourcesFit",
            "Filter",
            'running "NodeResourcesFit" filter plugin: ' + INTERNAL_ERROR,
        ),
        (
            PodTopologySpread,
            "pre_score",
            "PodTopologySpread",
            "PreScore",
            'running PreScore plugin "PodTopologySpread": ' + INTERNAL_ERROR,
        ),
        (
            NodeResourcesFit,
            "score",
            "NodeResourcesFit",
            "Score",
            'running Score plugins: plugin "NodeResourcesFit" failed with: ' + INTERNAL_ERROR,
        ),
        (
            InterPodAffinity,
            "normalize_score",
            "InterPodAffinity",
            "NormalizeScore",
            'running Normalize on Score plugins: plugin "InterPodAffinity" failed with: '
            + INTERNAL_ERROR,
        ),
    ],
)
def test_a_raising_plugin_gives_an_internal_error_not_its_exception(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    cls: type,
    method: str,
    plugin: str,
    point: str,
    message: str,
) -> None:
    monkeypatch.setattr(cls, method, boom)
    if method == "normalize_score":  # scores only run when a plugin does not skip
        monkeypatch.setattr(cls, "pre_score", lambda *_: SUCCESS)
        monkeypatch.setattr(cls, "score", lambda self, st, pod, nodes, rows: rows * 0)
    s, cluster = make()
    clock = s.clock
    assert isinstance(clock, VirtualClock)

    async def go() -> None:
        key = add(s, cluster, "p")
        with caplog.at_level(logging.ERROR, logger="troupe.framework.runtime"):
            s.schedule_one()
            await s.settle()
        assert s.last_failure[key] == message
        assert "out of bounds" not in s.last_failure[key]
        assert cluster.conditions[key]["message"] == message
        assert [e.message for e in cluster.events if e.reason == "FailedScheduling"] == [message]
        assert s.queue.where(key) == "backoffQ"  # an error is retried with backoff
        assert errors_metric(s, plugin, point) == 1
        assert s.profiles["troupe-scheduler"].errors.statistics() == {(plugin, point): 1}
        tracebacks = [r for r in caplog.records if r.exc_info]
        assert len(tracebacks) == 1 and "IndexError" in caplog.text
        # the retry hits the same bug: counted again, logged in one line
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="troupe.framework.runtime"):
            clock.advance_by(60)
            s.queue.flush()
            s.schedule_one()
            await s.settle()
        assert errors_metric(s, plugin, point) == 2
        assert [r.exc_info for r in caplog.records] == [None]
        assert "raised again" in caplog.text

    asyncio.run(go())


def test_message_names_the_plugin_for_every_extension_point() -> None:
    pod = make_pod("p").build()
    for point in ("PreEnqueue", "PostFilter", "Reserve", "Permit", "PreBind"):
        assert plugin_error_message("X", point, pod) == f'running {point} plugin "X": ' + (
            INTERNAL_ERROR
        )
    assert plugin_error_message("X", "Bind", pod) == (
        'bind plugin "X" failed to bind pod "default/p": ' + INTERNAL_ERROR
    )


def test_a_raising_gang_preemption_is_an_error_inside_the_runtime_boundary(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The group cycle reaches DefaultPreemption through the runtime's
    GroupPreemptionPlugin point: a bug there is counted and logged as any
    plugin's, nothing is evicted, and the gang waits with its own reason."""
    from troupe.plugins.default_preemption import DefaultPreemption

    monkeypatch.setattr(DefaultPreemption, "member_candidate", boom)
    s, cluster = make(1)
    low = make_pod("low").req(cpu="3").priority(0).node("n0").phase("Running").obj()
    cluster.pods[PodKey("default/low")] = low
    s.on_pod(low)
    s.on_pod_group(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": 2},
        }
    )

    async def go() -> None:
        keys = []
        for i in range(2):
            obj = make_pod(f"m{i}").group("g").req(cpu="1").priority(100).obj()
            keys.append(PodKey(f"default/m{i}"))
            cluster.pods[keys[-1]] = obj
            s.on_pod(obj)
        with caplog.at_level(logging.ERROR, logger="troupe.framework.runtime"):
            while s.schedule_one():
                await s.settle()
        assert errors_metric(s, "DefaultPreemption", "PostFilter") == 1
        assert "raised at PostFilter" in caplog.text
        assert s.statistics().loop_errors == 0
        assert cluster.deletions == []  # nothing evicted
        for k in keys:
            assert s.last_failure[k].startswith('PodGroup "default/g": 1 of minMember 2 pods fit')
            assert k in s.queue and s.cache.pod(k) is None

    asyncio.run(go())
