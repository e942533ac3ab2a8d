"""Helpers for plugin tests: a Handle, and running a plugin over a node table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from troupe.api.types import GroupKey, LabelSelector, Pod, PodGroup, PodKey
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    FilterPlugin,
    NodeFilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreExtensions,
)
from troupe.framework.waiting_pods import WaitingPods


class FakeLister:
    def __init__(self) -> None:
        self.pods: dict[str, Pod] = {}
        self.groups: dict[str, PodGroup] = {}
        self.invalid_groups: dict[str, str] = {}
        self.assumed: set[str] = set()

    def pod_group(self, key: GroupKey) -> PodGroup | None:
        return self.groups.get(key)

    def invalid_pod_group(self, key: GroupKey) -> str | None:
        return self.invalid_groups.get(key)

    def pods_in_group(self, key: GroupKey) -> Iterable[Pod]:
        return [p for p in self.pods.values() if p.group_key == key]

    def pod(self, key: PodKey) -> Pod | None:
        return self.pods.get(key)

    def is_assumed(self, key: PodKey) -> bool:
        return key in self.assumed

    def default_selector(self, pod: Pod) -> LabelSelector | None:
        return self.selector

    selector: LabelSelector | None = None


def make_handle() -> Handle:
    return Handle(
        clock=VirtualClock(),
        client=InMemoryCluster(),
        waiting_pods=WaitingPods(),
        lister=FakeLister(),
    )


@pytest.fixture
def handle() -> Handle:
    return make_handle()


def run_filter(
    plugin: Any, pod: Pod, table: NodeTable, per_node: bool = False
) -> dict[str, tuple[str, ...]]:
    """Reasons per rejected node (feasible nodes are absent)."""
    state = CycleState()
    if isinstance(plugin, PreFilterPlugin) and PreFilterPlugin in type(plugin).__mro__:
        _, st = plugin.pre_filter(state, pod, table)
        if st.is_skip:
            return {}
        assert st.is_success, st
    rows = table.valid_rows()
    out: dict[str, tuple[str, ...]] = {}
    if per_node:
        assert NodeFilterPlugin in type(plugin).__mro__
        for r in rows.tolist():
            st = plugin.filter_node(state, pod, table, r)
            if not st.is_success:
                out[table.names[r]] = st.reasons
        return out
    assert FilterPlugin in type(plugin).__mro__
    res = plugin.filter(state, pod, table, rows)
    for i, r in enumerate(rows.tolist()):
        hit = tuple(res.reasons[j] for j in range(len(res.reasons)) if res.rejected[i, j])
        if hit:
            out[table.names[r]] = hit
    return out


def run_score(
    plugin: Any, pod: Pod, table: NodeTable, per_node: bool = False
) -> dict[str, int] | None:
    """Scores per node after normalize_score; None if pre_score skipped."""
    state = CycleState()
    rows = table.valid_rows()
    if PreFilterPlugin in type(plugin).__mro__:
        plugin.pre_filter(state, pod, table)
    if PreScorePlugin in type(plugin).__mro__:
        st = plugin.pre_score(state, pod, table, rows)
        if st.is_skip:
            return None
        assert st.is_success, st
    if per_node:
        scores = [plugin.score_node(state, pod, table, r) for r in rows.tolist()]
        return {table.names[r]: s for r, s in zip(rows.tolist(), scores, strict=True)}
    s = plugin.score(state, pod, table, rows)
    if ScoreExtensions in type(plugin).__mro__:
        s = plugin.normalize_score(state, pod, s)
    return {table.names[r]: int(v) for r, v in zip(rows.tolist(), s.tolist(), strict=True)}
