"""TaintToleration (cases from taint_toleration_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter, run_score
from troupe.plugins.taint_toleration import TaintToleration

GPU = "node(s) had untolerated taint {dedicated: gpu}"


@pytest.mark.parametrize(
    ("pod", "nodes", "want"),
    [
        pytest.param(
            make_pod("p"),
            [make_node("n").taint("dedicated", "gpu")],
            {"n": (GPU,)},
            id="no-toleration",
        ),
        pytest.param(
            make_pod("p").toleration("dedicated", "gpu", "NoSchedule"),
            [make_node("n").taint("dedicated", "gpu")],
            {},
            id="equal-toleration",
        ),
        pytest.param(
            make_pod("p").toleration("dedicated", "cpu", "NoSchedule"),
            [make_node("n").taint("dedicated", "gpu")],
            {"n": (GPU,)},
            id="value-mismatch",
        ),
        pytest.param(
            make_pod("p").toleration("dedicated", operator="Exists"),
            [make_node("n").taint("dedicated", "gpu")],
            {},
            id="exists-any-value",
        ),
        pytest.param(
            make_pod("p").toleration(operator="Exists"),
            [make_node("n").taint("dedicated", "gpu", "NoExecute")],
            {},
            id="empty-key-exists-tolerates-all",
        ),
        pytest.param(
            make_pod("p").toleration("dedicated", "gpu", "PreferNoSchedule"),
            [make_node("n").taint("dedicated", "gpu")],
            {"n": (GPU,)},
            id="effect-mismatch",
        ),
        pytest.param(
            make_pod("p"),
            [make_node("n").taint("dedicated", "gpu", "PreferNoSchedule")],
            {},
            id="prefer-no-schedule-does-not-filter",
        ),
        pytest.param(
            make_pod("p"),
            [make_node("n").taint("dedicated", "gpu", "NoExecute")],
            {"n": (GPU,)},
            id="no-execute-filters",
        ),
        pytest.param(
            make_pod("p").toleration("a", "1", "NoSchedule"),
            [
                make_node("n1").taint("a", "1").taint("b", "2").taint("c", "3"),
                make_node("n2").taint("c", "3").taint("b", "2"),
            ],
            {
                "n1": ("node(s) had untolerated taint {b: 2}",),
                "n2": ("node(s) had untolerated taint {c: 3}",),
            },
            id="first-untolerated-taint-in-node-order",
        ),
    ],
)
def test_filter(pod: Any, nodes: list[Any], want: dict[str, tuple[str, ...]]) -> None:
    table = table_of([n.build() for n in nodes])
    assert run_filter(TaintToleration.new({}, make_handle()), pod.build(), table) == want


def test_score_prefers_fewer_intolerable_prefer_no_schedule_taints() -> None:
    table = table_of(
        [
            make_node("n0").build(),
            make_node("n1").taint("a", "1", "PreferNoSchedule").build(),
            make_node("n2")
            .taint("a", "1", "PreferNoSchedule")
            .taint("b", "2", "PreferNoSchedule")
            .build(),
            make_node("n3").taint("c", "3", "PreferNoSchedule").build(),
        ]
    )
    pod = make_pod("p").toleration("c", "3", "PreferNoSchedule").build()
    got = run_score(TaintToleration.new({}, make_handle()), pod, table)
    assert got == {"n0": 100, "n1": 50, "n2": 0, "n3": 100}


def test_score_skipped_without_prefer_no_schedule_taints() -> None:
    table = table_of([make_node("n").taint("x", "y").build()])
    assert run_score(TaintToleration.new({}, make_handle()), make_pod("p").build(), table) is None
