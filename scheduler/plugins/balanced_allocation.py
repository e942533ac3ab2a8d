"""NodeResourcesBalancedAllocation: prefer nodes whose resource use stays
balanced across resources (noderesources/balanced_allocation.go).

score = (1 - std of the requested/allocatable fractions) * 100, fractions capped
at 1, over the configured resources the node has (cpu and memory by default).
Uses actual requests (not the non-zero defaults), as kube-scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np

from scheduler.api.types import CPU, Pod
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.handle import Handle
from scheduler.framework.interface import (
    Int64Array,
    IntpArray,
    NodeScorePlugin,
    PluginArgsError,
    PreScorePlugin,
    ScorePlugin,
)
from scheduler.framework.status import SKIP, SUCCESS, Status
from scheduler.snapshot import IsolatedCPU, NodeTable, pod_charge

_STATE_KEY: Final = "PreScoreNodeResourcesBalancedAllocation"


@dataclass(frozen=True, slots=True)
class _Dims:
    cols: tuple[int, ...]  # node table columns, -1 where the node table has none
    pod: tuple[int, ...]  # the pod's request per dimension


def parse_resources(
    args: Mapping[str, Any], default: tuple[tuple[str, int], ...]
) -> tuple[tuple[str, int], ...]:
    raw = args.get("resources")
    if raw is None:
        return default
    if not isinstance(raw, list) or not raw:
        raise PluginArgsError("resources", "must be a non-empty list")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, Mapping) or not isinstance(r.get("name"), str) or not r["name"]:
            raise PluginArgsError(f"resources[{i}].name", "must be a resource name")
        w = r.get("weight", 1)
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 100:
            raise PluginArgsError(
                f"resources[{i}].weight", f"must be in the range [1, 100], got {w!r}"
            )
        out.append((r["name"], w))
    return tuple(out)


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin, NodeScorePlugin):
    NAME: Final = "NodeResourcesBalancedAllocation"

    def __init__(self, resources: tuple[tuple[str, int], ...], isolated: IsolatedCPU) -> None:
        self.resources = resources
        self.isolated = isolated

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        unknown = set(args) - {"resources"}
        if unknown:
            raise PluginArgsError(sorted(unknown)[0], "unknown field")
        return cls(parse_resources(args, ((CPU, 1), ("memory", 1))), handle.isolated)

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        charge = pod_charge(pod, self.isolated).resources
        iso = self.isolated.applies(pod)
        cols, req = [], []
        for name, _ in self.resources:
            res = self.isolated.resource if (name == CPU and iso) else name
            amount = charge.get(res, 0)
            if amount == 0 and name not in (CPU, "memory"):
                continue  # an extended resource the pod does not request is not scored
            cols.append(nodes.col.get(res, -1))
            req.append(amount)
        if not any(req):
            return SKIP  # a best-effort pod: nothing to balance
        state.write(_STATE_KEY, _Dims(tuple(cols), tuple(req)))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        d = state.read(_STATE_KEY, _Dims)
        n = len(rows)
        fracs = np.zeros((n, len(d.cols)), dtype=np.float64)
        has = np.zeros((n, len(d.cols)), dtype=bool)
        for j, (c, r) in enumerate(zip(d.cols, d.pod, strict=True)):
            if c < 0:
                continue
            alloc = nodes.allocatable[rows, c]
            req = nodes.requested[rows, c] + r
            ok = alloc > 0
            has[:, j] = ok
            fracs[:, j] = np.minimum(np.where(ok, req / np.where(ok, alloc, 1), 0.0), 1.0)
        count = has.sum(axis=1)
        if len(d.cols) == 2:
            std = np.where(count == 2, np.abs(fracs[:, 0] - fracs[:, 1]) / 2, 0.0)
        else:
            safe = np.maximum(count, 1)
            mean = fracs.sum(axis=1) / safe
            var = (np.where(has, (fracs - mean[:, None]) ** 2, 0.0)).sum(axis=1) / safe
            std = np.where(count > 1, np.sqrt(var), 0.0)
        return ((1 - std) * 100).astype(np.int64)

    def score_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> int:
        d = state.read(_STATE_KEY, _Dims)
        fracs = []
        for c, r in zip(d.cols, d.pod, strict=True):
            if c < 0:
                continue
            alloc = int(nodes.allocatable[row, c])
            if alloc == 0:
                continue
            fracs.append(min((int(nodes.requested[row, c]) + r) / alloc, 1.0))
        std = 0.0
        if len(fracs) == 2:
            std = abs((fracs[0] - fracs[1]) / 2)
        elif len(fracs) > 2:
            mean = sum(fracs) / len(fracs)
            std = (sum((f - mean) ** 2 for f in fracs) / len(fracs)) ** 0.5
        return int((1 - std) * 100)
