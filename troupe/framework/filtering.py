"""What the Filter point decides: a plugin's FilterResult over rows, the
outcome of all Filter plugins for a set of rows, and `FilterRunner`, the part of
a profile that preemption's dry runs need (what kube-scheduler's framework.Handle
gives a PostFilter plugin: RunPreFilterPlugins and RunFilterPluginsWithNominatedPods).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from troupe.api.types import Pod
from troupe.framework.cycle_state import CycleState
from troupe.framework.status import Code, Status

if TYPE_CHECKING:
    from troupe.core.snapshot import NodeTable

BoolArray = npt.NDArray[np.bool_]
IntpArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class FilterResult:
    """A Filter plugin's answer for the rows it was given.

    `rejected[i, j]` says that reason `reasons[j]` rejects row `rows[i]`; a row
    is feasible when no reason rejects it. `codes[j]` is the Code of reason j
    (UNSCHEDULABLE unless the node can never fit, then
    UNSCHEDULABLE_AND_UNRESOLVABLE).
    """

    reasons: tuple[str, ...]
    rejected: BoolArray  # shape (len(rows), len(reasons))
    codes: tuple[Code, ...] = ()

    @staticmethod
    def all_pass(n: int) -> FilterResult:
        return FilterResult((), np.zeros((n, 0), dtype=bool), ())

    @staticmethod
    def single(reason: str, rejected: BoolArray, code: Code = Code.UNSCHEDULABLE) -> FilterResult:
        return FilterResult((reason,), rejected.reshape(-1, 1), (code,))

    @property
    def feasible(self) -> BoolArray:
        if self.rejected.shape[1] == 0:
            return np.ones(self.rejected.shape[0], dtype=bool)
        if self.rejected.shape[1] == 1:
            out: BoolArray = ~self.rejected[:, 0]
            return out
        out2: BoolArray = np.logical_not(np.logical_or.reduce(self.rejected, axis=1))
        return out2

    def code_of(self, j: int) -> Code:
        return self.codes[j] if j < len(self.codes) else Code.UNSCHEDULABLE


@dataclass(slots=True)
class FilterStep:
    plugin: str
    result: FilterResult
    rows: IntpArray  # the rows this plugin judged (those still feasible before it)


@dataclass(slots=True)
class FilterOutcome:
    """What the Filter point decided for a set of rows, kept for diagnostics.

    Every rejected row was rejected by exactly one plugin (the first that failed
    it), so reasons are counted from the steps without double counting.
    """

    feasible: BoolArray  # over `rows`
    rows: IntpArray
    steps: list[FilterStep] = field(default_factory=list)

    def reason_counts(self, upto: int | None = None) -> Counter[str]:
        """Reason histogram over the first `upto` rows (all when None)."""
        counts: Counter[str] = Counter()
        limit_rows = self.rows if upto is None else self.rows[:upto]
        for step in self.steps:
            rej = step.result.rejected
            if rej.shape[1] == 0 or rej.shape[0] == 0:
                continue
            if upto is not None and len(limit_rows) < len(self.rows):
                keep = np.isin(step.rows, limit_rows)
                rej = rej[keep]
            sums = rej.sum(axis=0)
            for j, reason in enumerate(step.result.reasons):
                if sums[j]:
                    counts[reason] += int(sums[j])
        return counts

    def node_statuses(self, nodes: NodeTable) -> dict[str, Status]:
        """Node name -> Status of each rejected row. Rows rejected for the same
        set of reasons share one Status (thousands of nodes usually fail for one
        or two reasons)."""
        out: dict[str, Status] = {}
        names = nodes.names
        for step in self.steps:
            rej = step.result.rejected
            if rej.shape[1] == 0:
                continue
            hit = np.flatnonzero(rej.any(axis=1))
            if len(hit) == 0:
                continue
            patterns, which = np.unique(rej[hit], axis=0, return_inverse=True)
            shared = []
            for pattern in patterns:
                js = np.flatnonzero(pattern).tolist()
                reasons = tuple(step.result.reasons[j] for j in js)
                code = max((step.result.code_of(j) for j in js), default=Code.UNSCHEDULABLE)
                shared.append(Status(code, reasons, step.plugin))
            rows = step.rows[hit].tolist()
            for row, k in zip(rows, np.asarray(which).reshape(-1).tolist(), strict=True):
                out[names[row]] = shared[k]
        return out

    def unschedulable_plugins(self) -> set[str]:
        return {
            s.plugin for s in self.steps if s.result.rejected.shape[1] and s.result.rejected.any()
        }


class FilterRunner(Protocol):
    """The PreFilter and Filter points of a profile, as preemption's dry runs run them.

    A dry run reads only the Status of `run_pre_filter` (the nodes a PreFilter
    narrows to are the candidates already); the first item, the profile's
    `PreFilterResult`, is typed `object` here so that this module needs nothing
    of `framework.interface`, which imports it (as `handle` does)."""

    def pre_filter_is_node_local(self, state: CycleState) -> bool: ...

    def run_pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[object, Status]: ...

    def run_filters_with_nominated(
        self,
        state: CycleState,
        pod: Pod,
        nodes: NodeTable,
        rows: IntpArray,
        nominated: Mapping[int, Sequence[Pod]],
    ) -> FilterOutcome | Status: ...
