"""Label selectors, node selector terms, taints and tolerations."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.parse import parse_label_selector, parse_node_selector
from scheduler.api.types import (
    ParseError,
    Requirement,
    SelectorOp,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOp,
)

LABELS = {"env": "prod", "cores": "16", "tier": "web"}


@pytest.mark.parametrize(
    ("op", "values", "key", "want"),
    [
        ("In", ("prod", "qa"), "env", True),
        ("In", ("qa",), "env", False),
        ("In", ("x",), "missing", False),
        ("NotIn", ("qa",), "env", True),
        ("NotIn", ("prod",), "env", False),
        ("NotIn", ("x",), "missing", True),
        ("Exists", (), "env", True),
        ("Exists", (), "missing", False),
        ("DoesNotExist", (), "missing", True),
        ("DoesNotExist", (), "env", False),
        ("Gt", ("10",), "cores", True),
        ("Gt", ("16",), "cores", False),
        ("Lt", ("20",), "cores", True),
        ("Gt", ("1",), "env", False),
        ("Gt", ("1",), "missing", False),
    ],
)
def test_requirement(op: str, values: tuple[str, ...], key: str, want: bool) -> None:
    assert Requirement(key, SelectorOp(op), values).matches(LABELS) is want


def test_label_selector_match_labels_and_expressions() -> None:
    sel = parse_label_selector(
        {
            "matchLabels": {"env": "prod"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}],
        },
        "s.",
    )
    assert sel is not None and sel.matches(LABELS)
    assert not sel.matches({"env": "prod"})
    empty = parse_label_selector({}, "s.")
    assert empty is not None and empty.matches({})


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]},
            "s.matchExpressions[0].operator",
        ),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "s.matchExpressions[0].values"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "s.matchExpressions[0].values",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]},
            "s.matchExpressions[0].operator",
        ),
    ],
)
def test_label_selector_errors(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_label_selector(obj, "s.")
    assert e.value.field_path == field


def test_node_selector_gt_and_match_fields() -> None:
    sel = parse_node_selector(
        {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                }
            ]
        },
        "s.",
    )
    assert sel is not None and len(sel.terms) == 1
    with pytest.raises(ParseError, match="must be an integer"):
        parse_node_selector(
            {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["many"]}]}
                ]
            },
            "s.",
        )
    with pytest.raises(ParseError, match="field selector key"):
        parse_node_selector(
            {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}
                ]
            },
            "s.",
        )


T = Taint("dedicated", "gpu", TaintEffect.NO_SCHEDULE)


@pytest.mark.parametrize(
    ("tol", "want"),
    [
        (Toleration("dedicated", TolerationOp.EQUAL, "gpu", TaintEffect.NO_SCHEDULE), True),
        (Toleration("dedicated", TolerationOp.EQUAL, "gpu", None), True),
        (Toleration("dedicated", TolerationOp.EQUAL, "cpu", None), False),
        (Toleration("dedicated", TolerationOp.EXISTS, "", None), True),
        (Toleration("", TolerationOp.EXISTS, "", None), True),
        (Toleration("", TolerationOp.EXISTS, "", TaintEffect.NO_EXECUTE), False),
        (Toleration("other", TolerationOp.EXISTS, "", None), False),
        (Toleration("dedicated", TolerationOp.EQUAL, "gpu", TaintEffect.PREFER_NO_SCHEDULE), False),
    ],
)
def test_tolerations(tol: Toleration, want: bool) -> None:
    assert tol.tolerates(T) is want
