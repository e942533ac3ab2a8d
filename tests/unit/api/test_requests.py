"""Effective pod requests as kube-scheduler computes them (resource.PodRequests),
and the non-zero variant scoring uses (NonMissingContainerRequests)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import PodBuilder, make_pod
from troupe.api.parse import (
    MILLI_RESOURCES,
    _combined_requests,
    _container_requests,
    _requests,
    parse_pod,
    pod_requests,
)
from troupe.api.readers import get_objs
from troupe.api.types import ISOLATED_CPU_RESOURCE, InvalidObject, Pod

GI = 2**30
MI = 2**20
NZ_CPU = 100  # kube-scheduler's default milli-CPU for a container that states none
NZ_MEM = 200 * MI


def container(
    name: str = "c",
    *,
    req: dict[str, str] | None = None,
    lim: dict[str, str] | None = None,
    sidecar: bool = False,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "x"}
    res: dict[str, Any] = {}
    if req is not None:
        res["requests"] = req
    if lim is not None:
        res["limits"] = lim
    if res:
        c["resources"] = res
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def build(pod: PodBuilder) -> Pod:
    p = parse_pod(pod.obj())
    assert not isinstance(p, InvalidObject), p.message
    return p


REQUEST_CASES = [
    pytest.param(make_pod("p"), {}, id="nothing"),
    pytest.param(
        make_pod("p").req(cpu="1", memory="1Gi").container(cpu="500m", memory="512Mi"),
        {"cpu": 1500, "memory": GI + 512 * MI},
        id="containers-add",
    ),
    pytest.param(make_pod("p").req(cpu="0", memory="0"), {}, id="zeros-omitted"),
    pytest.param(
        make_pod("p").req(cpu="1").init_container(cpu="3"),
        {"cpu": 3000},
        id="init-container-max-wins",
    ),
    pytest.param(
        make_pod("p").req(cpu="4").init_container(cpu="3"),
        {"cpu": 4000},
        id="init-container-max-loses",
    ),
    pytest.param(
        make_pod("p")
        .req(cpu="1", memory="1Gi")
        .init_container(cpu="2")
        .init_container(memory="2Gi"),
        {"cpu": 2000, "memory": 2 * GI},
        id="init-max-per-resource",
    ),
    pytest.param(
        make_pod("p").req(cpu="1").init_container(sidecar=True, cpu="500m"),
        {"cpu": 1500},
        id="sidecar-adds",
    ),
    pytest.param(
        make_pod("p").req(cpu="1").init_container(sidecar=True, cpu="1").init_container(cpu="2"),
        {"cpu": 3000},
        id="init-after-sidecar-includes-it",
    ),
    pytest.param(
        make_pod("p").req(cpu="1").init_container(cpu="2").init_container(sidecar=True, cpu="1"),
        {"cpu": 2000},
        id="init-before-sidecar-excludes-it",
    ),
    pytest.param(
        make_pod("p")
        .req(cpu="1")
        .init_container(sidecar=True, cpu="1")
        .init_container(sidecar=True, cpu="1")
        .init_container(cpu="1500m"),
        {"cpu": 3500},
        id="init-after-two-sidecars",
    ),
    pytest.param(
        make_pod("p")
        .req(cpu="100m")
        .init_container(sidecar=True, cpu="1")
        .init_container(sidecar=True, cpu="2"),
        {"cpu": 3100},
        id="sidecars-only-sum-with-containers",
    ),
    pytest.param(
        make_pod("p").req(cpu="1").overhead(cpu="250m", memory="64Mi"),
        {"cpu": 1250, "memory": 64 * MI},
        id="overhead",
    ),
    pytest.param(
        make_pod("p").req(cpu="1").init_container(cpu="3").overhead(cpu="250m"),
        {"cpu": 3250},
        id="overhead-after-init-max",
    ),
    pytest.param(make_pod("p").ext("nvidia.com/gpu", 2), {"nvidia.com/gpu": 2}, id="extended"),
    pytest.param(
        make_pod("p").ext(ISOLATED_CPU_RESOURCE, "1500m"),
        {ISOLATED_CPU_RESOURCE: 1500},
        id="isolated-cpu-in-milli",
    ),
    pytest.param(make_pod("p").req(memory="1.5"), {"memory": 2}, id="memory-rounds-up"),
    pytest.param(make_pod("p").req(cpu="1n"), {"cpu": 1}, id="cpu-rounds-up"),
    pytest.param(
        make_pod("p").spec(containers=[container(lim={"cpu": "2", "memory": "1Gi"})]),
        {"cpu": 2000, "memory": GI},
        id="limits-only-default-requests",
    ),
    pytest.param(
        make_pod("p").spec(
            containers=[container(req={"cpu": "1"}, lim={"cpu": "2", "memory": "1Gi"})]
        ),
        {"cpu": 1000, "memory": GI},
        id="request-wins-over-limit",
    ),
    pytest.param(
        make_pod("p").spec(
            containers=[container(req={"cpu": "1"})],
            initContainers=[container("i", lim={"cpu": "3"})],
        ),
        {"cpu": 3000},
        id="init-limits-only",
    ),
]


@pytest.mark.parametrize(("pod", "want"), REQUEST_CASES)
def test_requests(pod: PodBuilder, want: dict[str, int]) -> None:
    assert dict(build(pod).requests) == want


def test_pod_requests_of_a_spec() -> None:
    spec = make_pod("p").req(cpu="1").init_container(sidecar=True, cpu="1").obj()["spec"]
    assert pod_requests(spec) == {"cpu": 2000}


NONZERO_CASES = [
    pytest.param(make_pod("p"), NZ_CPU, NZ_MEM, id="nothing-stated"),
    pytest.param(make_pod("p").req(cpu="1", memory="1Gi"), 1000, GI, id="both-stated"),
    pytest.param(make_pod("p").req(cpu="1"), 1000, NZ_MEM, id="memory-missing"),
    pytest.param(make_pod("p").req(memory="1Gi"), NZ_CPU, GI, id="cpu-missing"),
    pytest.param(make_pod("p").req(cpu="0", memory="0"), 0, 0, id="explicit-zero-stays-zero"),
    pytest.param(
        make_pod("p").req(cpu="1").container(),
        1000 + NZ_CPU,
        2 * NZ_MEM,
        id="per-container",
    ),
    pytest.param(
        make_pod("p").ext("nvidia.com/gpu", 1),
        NZ_CPU,
        NZ_MEM,
        id="extended-only",
    ),
    pytest.param(
        make_pod("p").req(cpu="50m").init_container(),
        NZ_CPU,
        NZ_MEM,
        id="init-container-default-wins-max",
    ),
    pytest.param(
        make_pod("p").req(cpu="1", memory="1Gi").init_container(sidecar=True),
        1000 + NZ_CPU,
        GI + NZ_MEM,
        id="sidecar-default-adds",
    ),
    pytest.param(
        make_pod("p").req(cpu="1", memory="1Gi").overhead(cpu="100m", memory="1Mi"),
        1100,
        GI + MI,
        id="overhead-added",
    ),
    pytest.param(
        make_pod("p").spec(containers=[container(lim={"cpu": "2"})]),
        2000,
        NZ_MEM,
        id="limit-defaults-request-first",
    ),
]


@pytest.mark.parametrize(("pod", "cpu", "memory"), NONZERO_CASES)
def test_nonzero(pod: PodBuilder, cpu: int, memory: int) -> None:
    p = build(pod)
    assert (p.nonzero_cpu, p.nonzero_memory) == (cpu, memory)


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        pytest.param(
            make_pod("p").req(cpu="-1"),
            "spec.containers[0].resources.requests.cpu",
            id="negative-request",
        ),
        pytest.param(
            make_pod("p").spec(containers=[container(lim={"memory": "lots"})]),
            "spec.containers[0].resources.limits.memory",
            id="bad-limit",
        ),
        pytest.param(
            make_pod("p").init_container(cpu="1Q"),
            "spec.initContainers[0].resources.requests.cpu",
            id="bad-init-request",
        ),
        pytest.param(make_pod("p").overhead(cpu="x"), "spec.overhead.cpu", id="bad-overhead"),
        pytest.param(
            make_pod("p").spec(containers=[{"name": "c", "resources": {"requests": ["cpu"]}}]),
            "spec.containers[0].resources.requests",
            id="requests-not-a-map",
        ),
        pytest.param(
            make_pod("p").spec(initContainers=[container("i") | {"restartPolicy": "Sometimes"}]),
            "spec.initContainers[0].restartPolicy",
            id="bad-restart-policy",
        ),
        pytest.param(
            make_pod("p").req(memory="1e30"),
            "spec.containers[0].resources.requests.memory",
            id="beyond-int64",
        ),
    ],
)
def test_bad_requests_name_the_field(pod: PodBuilder, field: str) -> None:
    p = parse_pod(pod.obj())
    assert isinstance(p, InvalidObject)
    assert p.message.startswith(field + ": "), p.message


# ---- pod-level resources (component-helpers resource.PodRequests, PodLevelResources) ----

POD_LEVEL_CASES = [
    pytest.param(
        make_pod("p").req(cpu="1", memory="1Gi").pod_resources({"cpu": "3"}),
        {"cpu": 3000, "memory": GI},
        3000,
        GI,
        id="pod-level cpu replaces the containers' cpu, memory stays the sum",
    ),
    pytest.param(
        make_pod("p").req(cpu="2").container(cpu="2").pod_resources({"cpu": "1"}),
        {"cpu": 1000},
        1000,
        NZ_MEM * 2,
        id="pod-level request below the containers' sum wins",
    ),
    pytest.param(
        make_pod("p").pod_resources({"cpu": "1", "memory": "1Gi"}).overhead(cpu="250m"),
        {"cpu": 1250, "memory": GI},
        1250,
        GI,
        id="overhead is still added",
    ),
    pytest.param(
        make_pod("p").pod_resources({"cpu": "1"}),
        {"cpu": 1000},
        1000,
        NZ_MEM,
        id="memory stated nowhere gets the scoring default",
    ),
    pytest.param(
        make_pod("p").req(memory="1Gi").container().pod_resources({"cpu": "1"}),
        {"cpu": 1000, "memory": GI},
        1000,
        GI,
        id="memory stated by one container: no default for the other",
    ),
    pytest.param(
        make_pod("p").pod_resources({"cpu": "0"}),
        {},
        0,
        NZ_MEM,
        id="pod-level cpu 0 is stated: no cpu default",
    ),
    pytest.param(
        make_pod("p").req(cpu="1").pod_resources(limits={"cpu": "4", "memory": "2Gi"}),
        {"cpu": 1000, "memory": 2 * GI},
        1000,
        2 * GI,
        id="pod-level limits default the requests no container states",
    ),
    pytest.param(
        make_pod("p")
        .req(cpu="1")
        .ext("example.com/gpu", 1)
        .pod_resources({"example.com/gpu": "4", "cpu": "2"}),
        {"cpu": 2000, "example.com/gpu": 1},
        2000,
        NZ_MEM,
        id="unsupported pod-level resources are ignored",
    ),
    pytest.param(
        make_pod("p").pod_resources({"hugepages-2Mi": "4Mi", "cpu": "1"}),
        {"cpu": 1000, "hugepages-2Mi": 4 * MI},
        1000,
        NZ_MEM,
        id="hugepages are pod-level resources",
    ),
    pytest.param(
        make_pod("p").req(cpu="1").init_container(cpu="5").pod_resources({"cpu": "2"}),
        {"cpu": 2000},
        2000,
        NZ_MEM,
        id="pod-level replaces the init-container max too",
    ),
]


@pytest.mark.parametrize(("pod", "want", "cpu", "memory"), POD_LEVEL_CASES)
def test_pod_level_requests(pod: PodBuilder, want: dict[str, int], cpu: int, memory: int) -> None:
    p = build(pod)
    assert p.requests == want
    assert (p.nonzero_cpu, p.nonzero_memory) == (cpu, memory)


_AMOUNTS = st.sampled_from(["0", "1", "250m", "2", "64Mi", "1Gi", "3"])
_RESOURCE_LISTS = st.dictionaries(
    st.sampled_from(["cpu", "memory", "example.com/gpu", "ephemeral-storage"]), _AMOUNTS
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {}, optional={"requests": _RESOURCE_LISTS, "limits": _RESOURCE_LISTS}
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_plain_pods_sum_is_the_general_one(resources: list[dict[str, Any]]) -> None:
    """A pod without init containers, overhead or pod-level resources (most
    pods) takes a shorter way to its requests: it gives what the general one does."""
    spec = {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}
    containers = get_objs(spec, "containers", "spec.")
    regular = [_container_requests(c, p, MILLI_RESOURCES) for p, c in containers]
    total, cpu, memory = _combined_requests(spec, regular, [], MILLI_RESOURCES)
    assert _requests(spec, containers, [], MILLI_RESOURCES) == (
        {k: v for k, v in total.items() if v},
        cpu,
        memory,
    )
