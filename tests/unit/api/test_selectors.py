"""Label selectors and node selectors: every operator, Gt/Lt, matchFields, empty
terms, and the errors a malformed selector raises."""

from __future__ import annotations

from typing import Any

import pytest

from troupe.api.selectors import (
    label_selector_from_map,
    labels_match_selector_map,
    node_selector_matches,
    node_selector_term_matches,
    parse_label_selector,
    parse_node_selector,
    parse_preferred_terms,
    preferred_terms_score,
)
from troupe.api.types import (
    NodeSelector,
    NodeSelectorTerm,
    ParseError,
    PreferredSchedulingTerm,
    Requirement,
    SelectorOp,
    parse_label_int,
)

LABELS = {"env": "prod", "cores": "16", "tier": "web", "neg": "-3", "big": "99999999999999999999"}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def field(op: str, *names: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": op, "values": list(names)}


# ---- Requirement.matches ------------------------------------------------------------------

REQUIREMENT_CASES = [
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
    ("Gt", ("-4",), "neg", True),
    ("Gt", ("+15",), "cores", True),
    ("Lt", ("20",), "cores", True),
    ("Lt", ("16",), "cores", False),
    ("Lt", ("0",), "neg", True),
    ("Gt", ("1",), "env", False),
    ("Lt", ("1",), "env", False),
    ("Gt", ("1",), "missing", False),
    ("Lt", ("1",), "missing", False),
    ("Gt", ("1",), "big", False),  # beyond int64: ParseInt fails, no match
    ("Gt", ("x",), "cores", False),
    ("Gt", (), "cores", False),
    ("Gt", ("1", "2"), "cores", False),
]


@pytest.mark.parametrize(
    ("op", "values", "key", "want"),
    REQUIREMENT_CASES,
    ids=[f"{c[2]}-{c[0]}-{','.join(c[1])}-{c[3]}" for c in REQUIREMENT_CASES],
)
def test_requirement(op: str, values: tuple[str, ...], key: str, want: bool) -> None:
    assert Requirement(key, SelectorOp(op), values).matches(LABELS) is want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", 0),
        ("16", 16),
        ("-3", -3),
        ("+7", 7),
        ("007", 7),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775808", None),
        ("", None),
        ("+", None),
        (" 5", None),
        ("5 ", None),
        ("5.0", None),
        ("1_000", None),
        ("٣", None),
        ("0x10", None),
        ("--1", None),
    ],
    ids=lambda v: repr(v) if isinstance(v, str) else None,
)
def test_parse_label_int_is_strconv_parse_int(text: str, want: int | None) -> None:
    assert parse_label_int(text) == want


# ---- label selectors --------------------------------------------------------------------


def test_label_selector_match_labels_and_expressions_are_anded() -> None:
    sel = parse_label_selector(
        {"matchLabels": {"env": "prod"}, "matchExpressions": [expr("tier", "In", "web", "api")]},
        "s.",
    )
    assert sel is not None
    assert sel.matches(LABELS)
    assert not sel.matches({"env": "prod"})
    assert not sel.matches({"tier": "web"})


@pytest.mark.parametrize(
    ("obj", "labels", "want"),
    [
        ({}, {}, True),
        ({}, LABELS, True),
        ({"matchLabels": {}}, LABELS, True),
        ({"matchLabels": {"env": "prod"}}, LABELS, True),
        ({"matchLabels": {"env": "qa"}}, LABELS, False),
        ({"matchLabels": {"version": 2}}, {"version": "2"}, True),
        ({"matchExpressions": [expr("env", "NotIn", "qa")]}, {}, True),
        ({"matchExpressions": [expr("env", "Exists")]}, LABELS, True),
        ({"matchExpressions": [expr("env", "DoesNotExist")]}, LABELS, False),
    ],
    ids=[
        "empty-empty",
        "empty-matches-all",
        "empty-match-labels",
        "match-labels",
        "match-labels-differ",
        "unquoted-yaml-value",
        "not-in-absent",
        "exists",
        "does-not-exist",
    ],
)
def test_label_selector(obj: dict[str, Any], labels: dict[str, str], want: bool) -> None:
    sel = parse_label_selector(obj, "s.")
    assert sel is not None and sel.matches(labels) is want


def test_absent_label_selector_is_none() -> None:
    assert parse_label_selector(None, "s.") is None


def test_label_selector_from_map() -> None:
    sel = label_selector_from_map({"b": "2", "a": "1"})
    assert [r.key for r in sel.requirements] == ["a", "b"]
    assert sel.matches({"a": "1", "b": "2", "c": "3"})
    assert not sel.matches({"a": "1"})


LABEL_SELECTOR_ERRORS = [
    pytest.param(
        {"matchExpressions": [expr("a", "Near", "x")]},
        "s.matchExpressions[0].operator",
        id="unknown-operator",
    ),
    pytest.param(
        {"matchExpressions": [expr("a", "Gt", "1")]},
        "s.matchExpressions[0].operator",
        id="gt-not-in-label-selectors",
    ),
    pytest.param(
        {"matchExpressions": [{"key": "a"}]},
        "s.matchExpressions[0].operator",
        id="missing-operator",
    ),
    pytest.param(
        {"matchExpressions": [expr("a", "In")]}, "s.matchExpressions[0].values", id="in-no-values"
    ),
    pytest.param(
        {"matchExpressions": [expr("a", "NotIn")]},
        "s.matchExpressions[0].values",
        id="notin-no-values",
    ),
    pytest.param(
        {"matchExpressions": [expr("a", "Exists", "x")]},
        "s.matchExpressions[0].values",
        id="exists-with-values",
    ),
    pytest.param(
        {"matchExpressions": [expr("a", "DoesNotExist", "x")]},
        "s.matchExpressions[0].values",
        id="doesnotexist-with-values",
    ),
    pytest.param(
        {"matchExpressions": [expr("", "Exists")]}, "s.matchExpressions[0].key", id="empty-key"
    ),
    pytest.param({"matchExpressions": ["a"]}, "s.matchExpressions[0]", id="expression-not-object"),
    pytest.param({"matchExpressions": {"a": 1}}, "s.matchExpressions", id="expressions-not-list"),
    pytest.param({"matchLabels": ["a"]}, "s.matchLabels", id="labels-not-map"),
    pytest.param({"matchLabels": {"a": None}}, "s.matchLabels.a", id="label-value-null"),
    pytest.param(
        {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
        "s.matchExpressions[0].values",
        id="values-not-list",
    ),
    pytest.param("app=web", "s", id="selector-not-object"),
]


@pytest.mark.parametrize(("obj", "path"), LABEL_SELECTOR_ERRORS)
def test_label_selector_errors(obj: Any, path: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_label_selector(obj, "s.")
    assert e.value.field_path == path


def test_path_prefix_without_dot_is_accepted() -> None:
    with pytest.raises(ParseError) as e:
        parse_label_selector({"matchExpressions": [expr("a", "In")]}, "spec.selector")
    assert e.value.field_path == "spec.selector.matchExpressions[0].values"


# ---- node selectors ---------------------------------------------------------------------


def node_selector(*terms: dict[str, Any]) -> NodeSelector:
    sel = parse_node_selector({"nodeSelectorTerms": list(terms)}, "s.")
    assert sel is not None
    return sel


TERM_CASES = [
    pytest.param({}, "n1", False, id="empty-term-matches-nothing"),
    pytest.param({"matchExpressions": [], "matchFields": []}, "n1", False, id="empty-lists"),
    pytest.param({"matchExpressions": [expr("env", "In", "prod")]}, "n1", True, id="in"),
    pytest.param({"matchExpressions": [expr("env", "NotIn", "prod")]}, "n1", False, id="notin"),
    pytest.param({"matchExpressions": [expr("zone", "NotIn", "a")]}, "n1", True, id="notin-absent"),
    pytest.param({"matchExpressions": [expr("env", "Exists")]}, "n1", True, id="exists"),
    pytest.param(
        {"matchExpressions": [expr("zone", "DoesNotExist")]}, "n1", True, id="doesnotexist"
    ),
    pytest.param({"matchExpressions": [expr("cores", "Gt", "8")]}, "n1", True, id="gt"),
    pytest.param({"matchExpressions": [expr("cores", "Lt", "8")]}, "n1", False, id="lt"),
    pytest.param({"matchExpressions": [expr("env", "Gt", "8")]}, "n1", False, id="gt-not-a-number"),
    pytest.param({"matchFields": [field("In", "n1")]}, "n1", True, id="field-in"),
    pytest.param({"matchFields": [field("In", "n1", "n2")]}, "n2", True, id="field-in-many"),
    pytest.param({"matchFields": [field("In", "n1")]}, "n2", False, id="field-in-other"),
    pytest.param({"matchFields": [field("NotIn", "n1")]}, "n1", False, id="field-notin"),
    pytest.param({"matchFields": [field("NotIn", "n1")]}, "n2", True, id="field-notin-other"),
    pytest.param(
        {"matchExpressions": [expr("env", "In", "prod")], "matchFields": [field("In", "n1")]},
        "n1",
        True,
        id="expressions-and-fields",
    ),
    pytest.param(
        {"matchExpressions": [expr("env", "In", "prod")], "matchFields": [field("In", "n2")]},
        "n1",
        False,
        id="fields-fail-and",
    ),
    pytest.param(
        {"matchExpressions": [expr("env", "In", "prod"), expr("tier", "In", "db")]},
        "n1",
        False,
        id="expressions-anded",
    ),
]


@pytest.mark.parametrize(("term", "name", "want"), TERM_CASES)
def test_node_selector_term(term: dict[str, Any], name: str, want: bool) -> None:
    sel = node_selector(term)
    assert node_selector_term_matches(sel.terms[0], LABELS, name) is want
    assert node_selector_matches(sel, LABELS, name) is want


def test_node_selector_terms_are_ored() -> None:
    sel = node_selector(
        {"matchExpressions": [expr("env", "In", "qa")]},
        {},
        {"matchFields": [field("In", "n7")]},
    )
    assert not node_selector_matches(sel, LABELS, "n1")
    assert node_selector_matches(sel, LABELS, "n7")
    assert node_selector_matches(sel, {"env": "qa"}, "n1")


def test_node_selector_without_terms_matches_nothing() -> None:
    assert not node_selector_matches(NodeSelector(()), LABELS, "n1")
    assert not node_selector_term_matches(NodeSelectorTerm(), LABELS, "n1")


def test_absent_node_selector_is_none() -> None:
    assert parse_node_selector(None, "s.") is None


NODE_SELECTOR_ERRORS = [
    pytest.param({"nodeSelectorTerms": []}, "s.nodeSelectorTerms", "at least one", id="no-terms"),
    pytest.param({}, "s.nodeSelectorTerms", "at least one", id="terms-missing"),
    pytest.param(
        {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Near", "1")]}]},
        "s.nodeSelectorTerms[0].matchExpressions[0].operator",
        "not a valid node selector operator",
        id="unknown-operator",
    ),
    pytest.param(
        {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Gt")]}]},
        "s.nodeSelectorTerms[0].matchExpressions[0].values",
        "single value",
        id="gt-no-value",
    ),
    pytest.param(
        {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Lt", "1", "2")]}]},
        "s.nodeSelectorTerms[0].matchExpressions[0].values",
        "single value",
        id="lt-two-values",
    ),
    pytest.param(
        {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Lt", "many")]}]},
        "s.nodeSelectorTerms[0].matchExpressions[0].values[0]",
        "must be an integer",
        id="lt-not-integer",
    ),
    pytest.param(
        {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "In")]}]},
        "s.nodeSelectorTerms[0].matchExpressions[0].values",
        "must be specified",
        id="in-no-values",
    ),
    pytest.param(
        {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Exists", "x")]}]},
        "s.nodeSelectorTerms[0].matchExpressions[0].values",
        "may not be specified",
        id="exists-with-values",
    ),
    pytest.param(
        {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}
            ]
        },
        "s.nodeSelectorTerms[0].matchFields[0].key",
        "not a valid field selector key",
        id="field-key",
    ),
    pytest.param(
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}]},
        "s.nodeSelectorTerms[0].matchFields[0].operator",
        "not a valid selector operator",
        id="field-operator",
    ),
    pytest.param(
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In"}]}]},
        "s.nodeSelectorTerms[0].matchFields[0].values",
        "must be specified",
        id="field-no-values",
    ),
    pytest.param({"nodeSelectorTerms": ["x"]}, "s.nodeSelectorTerms[0]", "object", id="term-type"),
    pytest.param([], "s", "object", id="selector-type"),
]


@pytest.mark.parametrize(("obj", "path", "text"), NODE_SELECTOR_ERRORS)
def test_node_selector_errors(obj: Any, path: str, text: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_node_selector(obj, "s.")
    assert e.value.field_path == path
    assert text in e.value.problem


# ---- preferred terms --------------------------------------------------------------------


def test_preferred_terms_and_score() -> None:
    terms = parse_preferred_terms(
        [
            {"weight": 10, "preference": {"matchExpressions": [expr("env", "In", "prod")]}},
            {"weight": 5, "preference": {"matchExpressions": [expr("cores", "Gt", "32")]}},
            {"weight": 1, "preference": {"matchFields": [field("In", "n1")]}},
            {"weight": 100},  # no preference: an empty term, matches nothing
        ],
        "p",
    )
    assert [t.weight for t in terms] == [10, 5, 1, 100]
    assert terms[3].preference == NodeSelectorTerm()
    assert preferred_terms_score(terms, LABELS, "n1") == 11
    assert preferred_terms_score(terms, LABELS, "n2") == 10
    assert preferred_terms_score(terms, {}, "n2") == 0


def test_preferred_terms_absent() -> None:
    assert parse_preferred_terms(None, "p") == ()


def test_preferred_terms_older_call_form() -> None:
    item = {"weight": 3, "preference": {"matchExpressions": [expr("env", "Exists")]}}
    got = parse_preferred_terms([("p[0].", item)])
    assert got == (
        PreferredSchedulingTerm(3, NodeSelectorTerm((Requirement("env", SelectorOp.EXISTS),))),
    )
    with pytest.raises(ParseError) as e:
        parse_preferred_terms([("p[0].", "not-an-object")])
    assert e.value.field_path == "p[0]"


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        pytest.param([{"weight": 0, "preference": {}}], "p[0].weight", id="weight-zero"),
        pytest.param([{"weight": 101, "preference": {}}], "p[0].weight", id="weight-101"),
        pytest.param([{"preference": {}}], "p[0].weight", id="weight-missing"),
        pytest.param([{"weight": "heavy"}], "p[0].weight", id="weight-not-int"),
        pytest.param(
            [{"weight": 1, "preference": {"matchExpressions": [expr("a", "Gt", "x")]}}],
            "p[0].preference.matchExpressions[0].values[0]",
            id="bad-preference",
        ),
        pytest.param({"weight": 1}, "p", id="not-a-list"),
        pytest.param([3], "p[0]", id="item-not-object"),
    ],
)
def test_preferred_term_errors(obj: Any, path: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_preferred_terms(obj, "p")
    assert e.value.field_path == path


# ---- spec.nodeSelector ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "want"),
    [
        ({}, True),
        ({"env": "prod"}, True),
        ({"env": "prod", "tier": "web"}, True),
        ({"env": "qa"}, False),
        ({"zone": "a"}, False),
        ({"env": "prod", "zone": "a"}, False),
        ({"env": ""}, False),
    ],
    ids=["empty", "one", "two", "other-value", "absent-key", "one-of-two-absent", "empty-value"],
)
def test_labels_match_selector_map(selector: dict[str, str], want: bool) -> None:
    assert labels_match_selector_map(selector, LABELS) is want
