"""Filter with nominated pods (kube-scheduler's RunFilterPluginsWithNominatedPods):
a node that carries pods nominated there with priority >= the pod's must pass
Filter with them (resources, host ports, inter-pod anti-affinity, topology
spreading: the filters that look at other pods) and without them (inter-pod
affinity cannot be satisfied by a pod that is not there yet).

The nominated pod is a pending pod with status.nominatedNodeName, held back by a
scheduling gate so that it stays nominated, as a preemptor waits for its victims.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import PodBuilder, make_node, make_pod
from troupe.api.types import PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE

HOST = "kubernetes.io/hostname"


def nominated(name: str, node: str, priority: int) -> PodBuilder:
    return make_pod(name).priority(priority).gate("example.com/wait").nominated(node)


def anti(b: PodBuilder, key: str, value: str) -> PodBuilder:
    return b.spec(
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {key: value}}, "topologyKey": HOST}
                ]
            }
        }
    )


def affinity(b: PodBuilder, key: str, value: str) -> PodBuilder:
    return b.spec(
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {key: value}}, "topologyKey": HOST}
                ]
            }
        }
    )


def spread(b: PodBuilder) -> PodBuilder:
    return b.spec(
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": HOST,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"foo": "bar"}},
            }
        ]
    )


@dataclass
class Case:
    name: str
    pod: PodBuilder
    nominated: list[PodBuilder]
    want: set[str] | None  # the nodes the pod may land on; None: unschedulable
    nodes: int = 1
    cpu: str = "2"
    running: list[PodBuilder] = field(default_factory=list)


CASES = [
    Case("no nominated pods", make_pod("p").req(cpu="1").priority(5), [], {"n0"}),
    Case(
        "higher-priority nominated pod keeps its room",
        make_pod("p").req(cpu="1").priority(5),
        [nominated("n", "n0", 10).req(cpu="1500m")],
        None,
    ),
    Case(
        "equal-priority nominated pod keeps its room",
        make_pod("p").req(cpu="1").priority(10),
        [nominated("n", "n0", 10).req(cpu="1500m")],
        None,
    ),
    Case(
        "lower-priority nominated pod is ignored",
        make_pod("p").req(cpu="1").priority(20),
        [nominated("n", "n0", 10).req(cpu="1500m")],
        {"n0"},
    ),
    Case(
        "room left beside the nominated pod",
        make_pod("p").req(cpu="500m").priority(5),
        [nominated("n", "n0", 10).req(cpu="1500m")],
        {"n0"},
    ),
    Case(
        "host port taken by a nominated pod",
        make_pod("p").host_port(8080).priority(5),
        [nominated("n", "n0", 10).host_port(8080)],
        None,
    ),
    Case(
        "another host port is free",
        make_pod("p").host_port(8081).priority(5),
        [nominated("n", "n0", 10).host_port(8080)],
        {"n0"},
    ),
    Case(
        "anti-affinity to a nominated pod (first pass)",
        anti(make_pod("p").priority(5), "app", "a"),
        [nominated("n", "n0", 10).label("app", "a")],
        {"n1"},
        nodes=2,
    ),
    Case(
        "affinity to a pod that is only nominated (second pass)",
        affinity(make_pod("p").label("app", "b").priority(5), "app", "a"),
        [nominated("n", "n0", 10).label("app", "a")],
        None,
        nodes=2,
    ),
    Case(
        "affinity to a running pod, a nominated pod beside it",
        affinity(make_pod("p").label("app", "b").req(cpu="1").priority(5), "app", "a"),
        [nominated("n", "n0", 10).req(cpu="500m")],
        {"n0"},
        running=[make_pod("r").label("app", "a").node("n0").phase("Running")],
        nodes=2,
    ),
    Case(
        "spreading counts a nominated pod",
        spread(make_pod("p").label("foo", "bar").priority(5)),
        [nominated("n", "n0", 10).label("foo", "bar")],
        {"n1"},
        nodes=2,
    ),
    Case(
        "spreading ignores a lower-priority nominated pod",
        spread(make_pod("p").label("foo", "bar").priority(20)),
        [nominated("n", "n0", 10).label("foo", "bar")],
        {"n0", "n1"},
        nodes=2,
    ),
]


async def _run(case: Case, seed: int) -> str | None:
    cluster = InMemoryCluster()
    config = parse_config({"troupe": {"seed": seed}}, IN_TREE)
    sched = Scheduler(config, cluster, VirtualClock(), registry=IN_TREE)
    for i in range(case.nodes):
        sched.on_node(make_node(f"n{i}").capacity(cpu=case.cpu, memory="8Gi", pods=110).obj())

    def add(obj: dict[str, Any]) -> None:
        cluster.pods[PodKey(f"default/{obj['metadata']['name']}")] = obj
        sched.on_pod(obj)

    for b in case.running:
        add(b.obj())
    for b in case.nominated:
        add(b.obj())
    assert len(sched.handle.nominator) == len(case.nominated)
    add(case.pod.obj())
    while sched.schedule_one():
        await sched.settle()
    await sched.settle()
    return sched.cache.pod_node(PodKey("default/p"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_filter_with_nominated_pods(case: Case) -> None:
    for seed in range(4):  # ties between nodes are broken at random
        got = await _run(case, seed)
        if case.want is None:
            assert got is None
        else:
            assert got in case.want
