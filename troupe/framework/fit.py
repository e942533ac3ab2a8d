"""The result of one pod's search for a node: the node chosen, or why none
(kube-scheduler's ScheduleResult and FitError, with FitError.Error()'s words)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from troupe.api.types import NodeName
from troupe.framework.status import Code


def fit_error_message(
    num_all_nodes: int,
    counts: Mapping[str, int],
    pre_filter_msg: str = "",
    post_filter_msg: str = "",
) -> str:
    """kube-scheduler's FitError.Error()."""
    msg = f"0/{num_all_nodes} nodes are available:"
    if pre_filter_msg:
        msg += f" {pre_filter_msg}."
    else:
        parts = sorted(f"{n} {reason}" for reason, n in counts.items())
        if parts:
            msg += f" {', '.join(parts)}."
    if post_filter_msg:
        msg += f" {post_filter_msg}."
    return msg


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    node: NodeName
    evaluated: int
    feasible: int


@dataclass(frozen=True, slots=True)
class FitError:
    message: str
    unschedulable_plugins: frozenset[str]
    pending_plugins: frozenset[str]
    code: Code = Code.UNSCHEDULABLE
    # PostFilter's nomination: a node (preemption made room there), "" (clear the
    # pod's nomination), or None (leave it as it is).
    nominated_node: str | None = None


@dataclass(frozen=True, slots=True)
class NodeSubset:
    """The nodes a search is restricted to (a gang's topology domain): their
    snapshot rows, sorted, and the reason counted for every node left out
    ("node(s) outside rack=r7")."""

    rows: npt.NDArray[np.intp]
    reason: str
