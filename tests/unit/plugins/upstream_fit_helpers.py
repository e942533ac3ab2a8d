"""Helpers for the Filter cases ported from kube-scheduler's plugin tests: the
Status (code and reasons) a plugin gives each node, in both the column form
and, where the plugin has one, the per-node form."""

from __future__ import annotations

from typing import Any

import numpy as np

from troupe.api.types import Pod
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.interface import FilterPlugin, NodeFilterPlugin, PreFilterPlugin
from troupe.framework.status import Code, Status


def filter_statuses(
    plugin: Any, pod: Pod, table: NodeTable, per_node: bool = False
) -> dict[str, tuple[Code, tuple[str, ...]]]:
    """(code, reasons) per rejected node, as the runtime reports them (the code of
    a node is the highest code among its reasons). PreFilter must succeed."""
    state = CycleState()
    if PreFilterPlugin in type(plugin).__mro__:
        _, st = plugin.pre_filter(state, pod, table)
        assert st.is_success, st
    rows = table.valid_rows()
    out: dict[str, tuple[Code, tuple[str, ...]]] = {}
    if per_node:
        assert NodeFilterPlugin in type(plugin).__mro__
        for r in rows.tolist():
            s: Status = plugin.filter_node(state, pod, table, r)
            if not s.is_success:
                out[table.names[r]] = (s.code, s.reasons)
        return out
    assert FilterPlugin in type(plugin).__mro__
    res = plugin.filter(state, pod, table, rows)
    for i, r in enumerate(rows.tolist()):
        js = np.flatnonzero(res.rejected[i]).tolist()
        if js:
            code = max(res.code_of(j) for j in js)
            out[table.names[r]] = (code, tuple(res.reasons[j] for j in js))
    return out
