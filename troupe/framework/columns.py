"""Vectorised selectors over the node table (what NodeAffinity and, later,
PodTopologySpread evaluate for every candidate node at once).

Each function answers for `rows` with a boolean array and agrees exactly with
the scalar matching in `troupe.api.types` (tests compare the two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from troupe.api.types import (
    NodeSelector,
    NodeSelectorTerm,
    Requirement,
    SelectorOp,
    TaintEffect,
    Toleration,
)
from troupe.core.snapshot import NodeTable
from troupe.framework.interface import BoolArray, IntpArray


def _ids(nodes: NodeTable, key: str, values: tuple[str, ...]) -> list[int]:
    vocab = nodes.label_ids.get(key, {})
    return [vocab[v] for v in values if v in vocab]


def _in(vals: np.ndarray, ids: list[int]) -> BoolArray:
    """np.isin, with one value compared directly (isin sorts and is costly for one)."""
    if len(ids) == 1:
        return vals == ids[0]  # type: ignore[no-any-return]
    return np.isin(vals, ids)


def requirement_mask(req: Requirement, nodes: NodeTable, rows: IntpArray) -> BoolArray:
    col = nodes.labels.get(req.key)
    if col is None:
        present = np.zeros(len(rows), dtype=bool)
        if req.op in (SelectorOp.NOT_IN, SelectorOp.DOES_NOT_EXIST):
            return ~present
        return present
    vals = col[rows]
    op = req.op
    if op is SelectorOp.EXISTS:
        return vals >= 0
    if op is SelectorOp.DOES_NOT_EXIST:
        return vals < 0
    if op is SelectorOp.IN:
        ids = _ids(nodes, req.key, req.values)
        return _in(vals, ids) if ids else np.zeros(len(rows), dtype=bool)
    if op is SelectorOp.NOT_IN:
        ids = _ids(nodes, req.key, req.values)
        return ~_in(vals, ids) if ids else np.ones(len(rows), dtype=bool)
    # Gt / Lt: compare each vocabulary value once as an integer.
    try:
        want = int(req.values[0])
    except (ValueError, IndexError):
        return np.zeros(len(rows), dtype=bool)
    ok_ids = []
    for i, v in enumerate(nodes.label_values.get(req.key, [])):
        try:
            n = int(v)
        except ValueError:
            continue
        if (n > want) if op is SelectorOp.GT else (n < want):
            ok_ids.append(i)
    return np.isin(vals, ok_ids) if ok_ids else np.zeros(len(rows), dtype=bool)


def field_mask(req: Requirement, nodes: NodeTable, rows: IntpArray) -> BoolArray:
    """matchFields on metadata.name (In / NotIn)."""
    named = [nodes.row_of[n] for n in req.values if n in nodes.row_of]
    hit = np.isin(rows, named) if named else np.zeros(len(rows), dtype=bool)
    return hit if req.op is SelectorOp.IN else ~hit


def term_mask(term: NodeSelectorTerm, nodes: NodeTable, rows: IntpArray) -> BoolArray:
    """A term with no requirements matches no node (as kube-scheduler)."""
    if not term.match_expressions and not term.match_fields:
        return np.zeros(len(rows), dtype=bool)
    mask = np.ones(len(rows), dtype=bool)
    for req in term.match_expressions:
        mask &= requirement_mask(req, nodes, rows)
    for req in term.match_fields:
        mask &= field_mask(req, nodes, rows)
    return mask


def node_selector_mask(sel: NodeSelector, nodes: NodeTable, rows: IntpArray) -> BoolArray:
    mask = np.zeros(len(rows), dtype=bool)
    for term in sel.terms:
        mask |= term_mask(term, nodes, rows)
    return mask


def map_selector_mask(selector: Mapping[str, str], nodes: NodeTable, rows: IntpArray) -> BoolArray:
    """spec.nodeSelector: every key=value must match."""
    mask = np.ones(len(rows), dtype=bool)
    for k, v in selector.items():
        mask &= requirement_mask(Requirement(k, SelectorOp.IN, (v,)), nodes, rows)
    return mask


def hard_taint_columns(nodes: NodeTable, tolerations: Sequence[Toleration]) -> list[int]:
    """Taint ids (columns of `taint_matrix`) with NoSchedule/NoExecute that the
    tolerations do not tolerate."""
    return [
        i
        for i, t in enumerate(nodes.taint_list)
        if t.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
        and not any(tol.tolerates(t) for tol in tolerations)
    ]


def tolerated_mask(
    nodes: NodeTable, rows: IntpArray, tolerations: Sequence[Toleration]
) -> BoolArray:
    """Rows whose NoSchedule/NoExecute taints are all tolerated."""
    cols = hard_taint_columns(nodes, tolerations)
    if not cols:
        return np.ones(len(rows), dtype=bool)
    bad: BoolArray = np.logical_or.reduce(
        nodes.taint_matrix[np.ix_(rows, np.array(cols, dtype=np.intp))], axis=1
    )
    return ~bad


def domain_ids(nodes: NodeTable, key: str, rows: IntpArray) -> IntpArray:
    """The value id of `key` at each of `rows` (negative where a row lacks the key)."""
    return nodes.label_column(key)[rows].astype(np.intp)


def per_domain_sum(nodes: NodeTable, key: str, rows: IntpArray, per_row: np.ndarray) -> np.ndarray:
    """Sum `per_row` (indexed by row) over the `rows` of each value of `key`.

    The result is indexed by value id and has one entry per value the table
    knows for `key` (possibly none: no node carries the key).
    """
    dom = domain_ids(nodes, key, rows)
    has = dom >= 0
    size = len(nodes.label_values.get(key, ()))
    size = max(size, int(dom[has].max()) + 1 if has.any() else 0)
    return np.bincount(dom[has], weights=per_row[rows][has], minlength=size)


def at_domain(per_domain: np.ndarray, dom: IntpArray, default: float = 0) -> np.ndarray:
    """`per_domain[dom]` for each entry of `dom`, `default` where `dom` is negative
    or outside `per_domain`. Never indexes an empty array: a topology key that no
    node carries gives an empty `per_domain`, and every row gets `default`."""
    n = len(per_domain)
    ok = (dom >= 0) & (dom < n)
    padded = np.append(np.asarray(per_domain), np.asarray([default], dtype=per_domain.dtype))
    return padded[np.where(ok, dom, n)]
