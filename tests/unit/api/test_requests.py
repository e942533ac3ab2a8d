"""Effective pod requests as kube-scheduler computes them, and the non-zero variant."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_pod

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(make_pod("p"), {}, id="nothing"),
        pytest.param(
            make_pod("p").req(cpu="1", memory="1Gi").container(cpu="500m"),
            {"cpu": 1500, "memory": GI},
            id="containers-add",
        ),
        pytest.param(
            make_pod("p").req(cpu="1").init_container(cpu="3"),
            {"cpu": 3000},
            id="init-container-max",
        ),
        pytest.param(
            make_pod("p").req(cpu="1").init_container(sidecar=True, cpu="500m"),
            {"cpu": 1500},
            id="sidecar-adds",
        ),
        pytest.param(
            make_pod("p")
            .req(cpu="1")
            .init_container(sidecar=True, cpu="1")
            .init_container(cpu="2"),
            {"cpu": 3000},
            id="init-after-sidecar-includes-it",
        ),
        pytest.param(
            make_pod("p")
            .req(cpu="1")
            .init_container(cpu="2")
            .init_container(sidecar=True, cpu="1"),
            {"cpu": 2000},
            id="init-before-sidecar-excludes-it",
        ),
        pytest.param(
            make_pod("p").req(cpu="1").overhead(cpu="250m", memory="64Mi"),
            {"cpu": 1250, "memory": 64 * MI},
            id="overhead",
        ),
        pytest.param(make_pod("p").ext("nvidia.com/gpu", 2), {"nvidia.com/gpu": 2}, id="extended"),
        pytest.param(
            make_pod("p").spec(
                containers=[{"name": "c", "image": "x", "resources": {"limits": {"cpu": "2"}}}]
            ),
            {"cpu": 2000},
            id="limits-only-default-requests",
        ),
    ],
)
def test_requests(pod: Any, want: dict[str, int]) -> None:
    assert dict(pod.build().requests) == want


def test_nonzero_defaults_per_container() -> None:
    p = make_pod("p").req(cpu="1").container().build()  # second container requests nothing
    assert p.nonzero_cpu == 1000 + 100
    assert p.nonzero_memory == 2 * 200 * MI
