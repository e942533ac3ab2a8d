"""Label selectors and node selectors: reading them, and matching them one node at a time.

Two dialects, as in Kubernetes:

* metav1.LabelSelector (pod affinity terms, spread constraints, workloads):
  ``matchLabels`` (each becomes an ``In`` requirement with one value) and
  ``matchExpressions`` with In, NotIn, Exists, DoesNotExist — as
  metav1.LabelSelectorAsSelector. An empty selector matches everything.
* v1.NodeSelector (required node affinity) and PreferredSchedulingTerm: terms
  ORed, each term's ``matchExpressions`` (also Gt and Lt) and ``matchFields``
  (only ``metadata.name``, In or NotIn) ANDed — as kube-scheduler's
  component-helpers nodeaffinity. A term with no requirements matches no node.

The parsers validate what the API server validates (so a hand-written object in
the simulator is refused the way `kubectl apply` would refuse it) and raise
`ParseError` naming the field; `troupe.api.parse` turns that into an
`InvalidObject`. Requirement matching itself lives on `types.Requirement` so the
views need nothing from here; the vectorised form for whole node tables is
`troupe.framework.columns`, which must agree with these functions.

Paths are prefixes: ``parse_label_selector(obj, "spec.selector.")`` reports
``spec.selector.matchExpressions[0].operator``; a prefix without the final dot
is accepted too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from troupe.api.readers import (
    as_map,
    get_objs,
    get_str,
    get_str_list,
    get_str_map,
    int_value,
    invalid,
    join,
    required,
)
from troupe.api.types import (
    LabelSelector,
    NodeSelector,
    NodeSelectorTerm,
    ParseError,
    PreferredSchedulingTerm,
    Requirement,
    SelectorOp,
    parse_label_int,
)

__all__ = [
    "NODE_NAME_FIELD",
    "label_selector_from_map",
    "labels_match_selector_map",
    "node_selector_matches",
    "node_selector_term_matches",
    "parse_label_int",
    "parse_label_selector",
    "parse_node_selector",
    "parse_node_selector_term",
    "parse_preferred_terms",
    "parse_requirement",
    "preferred_terms_score",
]

NODE_NAME_FIELD: Final = "metadata.name"

LABEL_SELECTOR_OPS: Final = (
    SelectorOp.IN,
    SelectorOp.NOT_IN,
    SelectorOp.EXISTS,
    SelectorOp.DOES_NOT_EXIST,
)
NODE_SELECTOR_OPS: Final = (*LABEL_SELECTOR_OPS, SelectorOp.GT, SelectorOp.LT)
_BY_NAME: Final = {op.value: op for op in SelectorOp}


# ---- reading -------------------------------------------------------------------------


def parse_requirement(
    item: Mapping[str, Any], prefix: str, ops: Sequence[SelectorOp] = NODE_SELECTOR_OPS
) -> Requirement:
    """One ``{key, operator, values}`` expression, validated for its operator.

    `ops` is the dialect: `LABEL_SELECTOR_OPS` or `NODE_SELECTOR_OPS`.
    """
    key = get_str(item, "key", prefix)
    if not key:
        raise required(f"{prefix}key")
    op_text = get_str(item, "operator", prefix)
    op = _BY_NAME.get(op_text)
    if op is None or op not in ops:
        if not op_text:
            raise required(f"{prefix}operator")
        what = "node selector" if SelectorOp.GT in ops else "label selector"
        raise invalid(f"{prefix}operator", op_text, f"not a valid {what} operator")
    values = get_str_list(item, "values", prefix)
    if op in (SelectorOp.IN, SelectorOp.NOT_IN):
        if not values:
            raise required(
                f"{prefix}values", "must be specified when `operator` is 'In' or 'NotIn'"
            )
    elif op in (SelectorOp.EXISTS, SelectorOp.DOES_NOT_EXIST):
        if values:
            raise ParseError(
                f"{prefix}values",
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )
    else:
        if len(values) != 1:
            raise required(
                f"{prefix}values", "must be specified single value when `operator` is 'Lt' or 'Gt'"
            )
        if parse_label_int(values[0]) is None:
            raise invalid(f"{prefix}values[0]", values[0], "must be an integer")
    return Requirement(key, op, values)


def _field_requirement(item: Mapping[str, Any], prefix: str) -> Requirement:
    """A matchFields entry: only metadata.name, with In or NotIn and values.

    The API server also wants exactly one value; kube-scheduler matches any
    number (a set of node names), and so do we."""
    key = get_str(item, "key", prefix)
    if key != NODE_NAME_FIELD:
        raise invalid(f"{prefix}key", key, "not a valid field selector key")
    op_text = get_str(item, "operator", prefix)
    op = _BY_NAME.get(op_text)
    if op not in (SelectorOp.IN, SelectorOp.NOT_IN):
        raise invalid(f"{prefix}operator", op_text, "not a valid selector operator")
    values = get_str_list(item, "values", prefix)
    if not values:
        raise required(f"{prefix}values", "must be specified when `operator` is 'In' or 'NotIn'")
    return Requirement(key, op, values)


def label_selector_from_map(labels: Mapping[str, str]) -> LabelSelector:
    """A set-based selector equal to a map selector (Service / RC spec.selector):
    one ``In`` requirement per key, sorted by key as apimachinery does."""
    return LabelSelector(
        tuple(Requirement(k, SelectorOp.IN, (v,)) for k, v in sorted(labels.items()))
    )


def parse_label_selector(obj: object, path: str) -> LabelSelector | None:
    """metav1.LabelSelector; None when absent (``null``), which callers read as
    "selects nothing" where Kubernetes does. ``{}`` selects everything."""
    if obj is None:
        return None
    prefix = join(path)
    sel = as_map(obj, prefix.rstrip("."))
    reqs = [
        Requirement(k, SelectorOp.IN, (v,))
        for k, v in sorted(get_str_map(sel, "matchLabels", prefix).items())
    ]
    for p, item in get_objs(sel, "matchExpressions", prefix):
        reqs.append(parse_requirement(item, p, LABEL_SELECTOR_OPS))
    return LabelSelector(tuple(reqs))


_LABEL_VALUE_RE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_MAX_LABEL_VALUE: Final = 63


def _is_label_value(value: str) -> bool:
    """apimachinery IsValidLabelValue."""
    return len(value) <= _MAX_LABEL_VALUE and _LABEL_VALUE_RE.match(value) is not None


def parse_node_selector_term(obj: object, path: str) -> NodeSelectorTerm:
    """v1.NodeSelectorTerm. An empty term is valid and matches no node.

    The API server does not validate the values of In / NotIn expressions, but
    kube-scheduler's nodeaffinity builds each term with labels.NewRequirement,
    which refuses a value that is not a label value; such a term then matches
    no node (nodeSelectorTerm.match with parse errors). Such a term is read here
    as the empty term."""
    prefix = join(path)
    term = as_map(obj, prefix.rstrip(".")) if obj is not None else {}
    exprs = tuple(
        parse_requirement(x, p, NODE_SELECTOR_OPS)
        for p, x in get_objs(term, "matchExpressions", prefix)
    )
    fields = tuple(_field_requirement(x, p) for p, x in get_objs(term, "matchFields", prefix))
    if any(
        r.op in (SelectorOp.IN, SelectorOp.NOT_IN) and not all(map(_is_label_value, r.values))
        for r in exprs
    ):
        return NodeSelectorTerm()
    return NodeSelectorTerm(exprs, fields)


def parse_node_selector(obj: object, path: str) -> NodeSelector | None:
    """v1.NodeSelector (``requiredDuringSchedulingIgnoredDuringExecution``); None
    when absent. At least one term is required, as the API server requires."""
    if obj is None:
        return None
    prefix = join(path)
    sel = as_map(obj, prefix.rstrip("."))
    terms = tuple(
        parse_node_selector_term(x, p) for p, x in get_objs(sel, "nodeSelectorTerms", prefix)
    )
    if not terms:
        raise required(f"{prefix}nodeSelectorTerms", "must have at least one node selector term")
    return NodeSelector(terms)


def _preferred_term(item: object, prefix: str) -> PreferredSchedulingTerm:
    term = as_map(item, prefix.rstrip("."))
    w = term.get("weight")
    if w is None:
        raise required(f"{prefix}weight")
    weight = int_value(w, f"{prefix}weight")
    if not 1 <= weight <= 100:
        raise invalid(f"{prefix}weight", weight, "must be in the range 1-100")
    # A missing preference is an empty term, which matches no node.
    return PreferredSchedulingTerm(
        weight, parse_node_selector_term(term.get("preference"), f"{prefix}preference.")
    )


def parse_preferred_terms(
    obj: object, path: str | None = None
) -> tuple[PreferredSchedulingTerm, ...]:
    """``preferredDuringSchedulingIgnoredDuringExecution``: a list of
    ``{weight: 1..100, preference: NodeSelectorTerm}``; () when absent.

    Called as ``parse_preferred_terms(raw_list, "spec....Execution")``. The older
    form, one argument holding ``(path prefix, item)`` pairs, is still accepted.
    """
    if path is None:
        pairs = obj if isinstance(obj, Iterable) else ()
        out = []
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                raise TypeError("parse_preferred_terms(obj) expects (path, item) pairs")
            out.append(_preferred_term(pair[1], join(pair[0])))
        return tuple(out)
    if obj is None:
        return ()
    if not isinstance(obj, list | tuple):
        raise invalid(path.rstrip("."), obj, "must be a list")
    base = path.rstrip(".")
    return tuple(_preferred_term(x, f"{base}[{i}].") for i, x in enumerate(obj))


# ---- matching ------------------------------------------------------------------------


def node_selector_term_matches(
    term: NodeSelectorTerm, labels: Mapping[str, str], node_name: str
) -> bool:
    """All of the term's expressions match the labels and all its fields match the
    node's name. A term with neither matches nothing (nodeaffinity.nodeSelectorTerm)."""
    exprs, fields = term.match_expressions, term.match_fields
    if not exprs and not fields:
        return False
    for r in fields:
        if (node_name in r.values) != (r.op is SelectorOp.IN):
            return False
    return all(r.matches(labels) for r in exprs)


def node_selector_matches(sel: NodeSelector, labels: Mapping[str, str], node_name: str) -> bool:
    """Terms ORed; no terms match nothing."""
    return any(node_selector_term_matches(t, labels, node_name) for t in sel.terms)


def preferred_terms_score(
    terms: Iterable[PreferredSchedulingTerm], labels: Mapping[str, str], node_name: str
) -> int:
    """The sum of the weights of the terms that match (NodeAffinity's raw score)."""
    return sum(
        t.weight for t in terms if node_selector_term_matches(t.preference, labels, node_name)
    )


def labels_match_selector_map(node_selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """spec.nodeSelector: every key is present with exactly that value."""
    return all(labels.get(k) == v for k, v in node_selector.items())
