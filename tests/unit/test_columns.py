"""Vectorised selectors agree with scalar matching, node by node."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import make_node, table_of
from troupe.api.types import NodeSelector, NodeSelectorTerm, Requirement, SelectorOp
from troupe.framework.columns import map_selector_mask, node_selector_mask

KEYS = ["a", "b", "n"]
VALUES = ["1", "2", "10", "x"]

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
req_st = st.one_of(
    st.builds(
        lambda k, op, vs: Requirement(k, SelectorOp(op), tuple(vs)),
        st.sampled_from(KEYS),
        st.sampled_from(["In", "NotIn"]),
        st.lists(st.sampled_from([*VALUES, "zz"]), min_size=1, max_size=3),
    ),
    st.builds(
        lambda k, op: Requirement(k, SelectorOp(op), ()),
        st.sampled_from(KEYS),
        st.sampled_from(["Exists", "DoesNotExist"]),
    ),
    st.builds(
        lambda k, op, v: Requirement(k, SelectorOp(op), (v,)),
        st.sampled_from(KEYS),
        st.sampled_from(["Gt", "Lt"]),
        st.sampled_from(["0", "1", "5", "10"]),
    ),
)
field_st = st.builds(
    lambda op, vs: Requirement("metadata.name", SelectorOp(op), tuple(vs)),
    st.sampled_from(["In", "NotIn"]),
    st.lists(st.sampled_from(["n0", "n1", "n9"]), min_size=1, max_size=2),
)
term_st = st.builds(
    lambda e, f: NodeSelectorTerm(tuple(e), tuple(f)),
    st.lists(req_st, max_size=3),
    st.lists(field_st, max_size=1),
)


def scalar_term(term: NodeSelectorTerm, labels: dict[str, str], name: str) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    return all(r.matches(labels) for r in term.match_expressions) and all(
        r.matches({"metadata.name": name}) for r in term.match_fields
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(labels_st, min_size=1, max_size=6),
    st.lists(term_st, max_size=3),
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
)
def test_masks_equal_scalar_matching(
    nodes: list[dict[str, str]], terms: list[Any], selector: dict[str, str]
) -> None:
    built = []
    for i, labels in enumerate(nodes):
        b = make_node(f"n{i}")
        for k, v in labels.items():
            b.label(k, v)
        built.append(b.build())
    table = table_of(built)
    rows = table.valid_rows()
    sel = NodeSelector(tuple(terms))
    got = node_selector_mask(sel, table, rows).tolist()
    got_map = map_selector_mask(selector, table, rows).tolist()
    for i, n in enumerate(built):
        want = any(scalar_term(t, dict(n.labels), n.name) for t in terms)
        assert got[i] == want, (n.labels, terms)
        assert got_map[i] == all(n.labels.get(k) == v for k, v in selector.items())
