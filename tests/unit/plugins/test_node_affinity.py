"""NodeAffinity (cases from node_affinity_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter, run_score
from troupe.framework.cycle_state import CycleState
from troupe.framework.interface import PluginArgsError
from troupe.plugins.node_affinity import NodeAffinity

NO = ("node(s) didn't match Pod's node affinity/selector",)


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return {"matchExpressions": [e]}


NODES = [
    make_node("qa").label("env", "qa").label("cores", "8"),
    make_node("prod").label("env", "prod").label("cores", "32"),
    make_node("bare").label("cores", "x"),
]


@pytest.mark.parametrize(
    ("pod", "want_rejected"),
    [
        pytest.param(make_pod("p"), [], id="nothing-to-match"),
        pytest.param(make_pod("p").node_selector(env="qa"), ["prod", "bare"], id="node-selector"),
        pytest.param(
            make_pod("p").required_affinity(expr("env", "In", "qa", "prod")), ["bare"], id="in"
        ),
        pytest.param(
            make_pod("p").required_affinity(expr("env", "NotIn", "qa")),
            ["qa"],
            id="not-in-matches-missing-key",
        ),
        pytest.param(make_pod("p").required_affinity(expr("env", "Exists")), ["bare"], id="exists"),
        pytest.param(
            make_pod("p").required_affinity(expr("env", "DoesNotExist")),
            ["qa", "prod"],
            id="does-not-exist",
        ),
        pytest.param(
            make_pod("p").required_affinity(expr("cores", "Gt", "10")),
            ["qa", "bare"],
            id="gt-non-integer-value-never-matches",
        ),
        pytest.param(
            make_pod("p").required_affinity(expr("cores", "Lt", "10")), ["prod", "bare"], id="lt"
        ),
        pytest.param(
            make_pod("p").required_affinity(expr("env", "In", "qa"), expr("env", "In", "prod")),
            ["bare"],
            id="terms-are-ored",
        ),
        pytest.param(
            make_pod("p").required_affinity({}),
            ["qa", "prod", "bare"],
            id="empty-term-matches-nothing",
        ),
        pytest.param(
            make_pod("p").required_affinity(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["prod"]}]}
            ),
            ["qa", "bare"],
            id="match-fields",
        ),
        pytest.param(
            make_pod("p").node_selector(env="qa").required_affinity(expr("cores", "Gt", "10")),
            ["qa", "prod", "bare"],
            id="selector-and-affinity-both-apply",
        ),
    ],
)
def test_filter(pod: Any, want_rejected: list[str]) -> None:
    table = table_of([n.build() for n in NODES])
    got = run_filter(NodeAffinity.new({}, make_handle()), pod.build(), table)
    assert got == {n: NO for n in want_rejected}


def test_pre_filter_narrows_to_named_nodes() -> None:
    table = table_of([n.build() for n in NODES])
    pod = make_pod("p").required_affinity(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["prod", "qa"]}]}
    )
    res, st = NodeAffinity.new({}, make_handle()).pre_filter(CycleState(), pod.build(), table)
    assert st.is_success and res is not None and res.node_names == {"prod", "qa"}


def test_added_affinity() -> None:
    table = table_of([n.build() for n in NODES])
    plugin = NodeAffinity.new(
        {
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [expr("env", "Exists")]
                }
            }
        },
        make_handle(),
    )
    got = run_filter(plugin, make_pod("p").build(), table)
    assert got == {"bare": ("node(s) didn't match scheduler-enforced node affinity",)}


def test_bad_added_affinity() -> None:
    with pytest.raises(PluginArgsError) as e:
        NodeAffinity.new(
            {
                "addedAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "Near"}]}
                        ]
                    }
                }
            },
            make_handle(),
        )
    assert "operator" in e.value.field_path


def test_preferred_score_is_normalized() -> None:
    table = table_of([n.build() for n in NODES])
    pod = (
        make_pod("p")
        .preferred_affinity(20, expr("env", "In", "qa"))
        .preferred_affinity(80, expr("cores", "Gt", "4"))
    )
    got = run_score(NodeAffinity.new({}, make_handle()), pod.build(), table)
    # qa: 20 + 80 = 100, prod: 80, bare: 0; normalised by the max (100)
    assert got == {"qa": 100, "prod": 80, "bare": 0}


def test_score_skipped_without_preferences() -> None:
    table = table_of([n.build() for n in NODES])
    assert run_score(NodeAffinity.new({}, make_handle()), make_pod("p").build(), table) is None
