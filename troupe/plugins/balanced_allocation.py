"""NodeResourcesBalancedAllocation: prefer nodes whose resource use stays
balanced across resources (kube-scheduler noderesources/balanced_allocation.go
and resource_allocation.go).

score = (1 - std) * 100, truncated, where std is the standard deviation of the
fractions requested/allocatable (each capped at 1) of the configured resources
(cpu and memory by default) that the node has. With two fractions it is
|f1 - f2| / 2; with one or none it is 0. As in current kube-scheduler the
fractions use the actual requests (`useRequested`), not the non-zero scoring
defaults; a scalar resource the pod does not request is not counted; a pod
that requests none of the resources (best effort) makes PreScore return SKIP.

Isolated CPUs (docs/design.md, "Isolated CPUs"): an isolated pod's `cpu` fraction is taken on the
isolated resource (requested isolated + the pod's isolated charge against
allocatable isolated), since that is where its cpu goes.

Score reads a (resources x rows) block of fractions and reproduces kube's
floating-point steps in the same order, so it agrees exactly with
`score_node`, the plain per-node port that a property test compares it with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np
import numpy.typing as npt

from troupe.api.names import is_scalar_resource
from troupe.api.types import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, IsolatedCPU, Pod
from troupe.core.snapshot import NodeTable, pod_charge
from troupe.framework.cycle_state import CycleState
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    MAX_NODE_SCORE,
    BoolArray,
    Int64Array,
    IntpArray,
    NodeScorePlugin,
    PluginArgsError,
    PreScorePlugin,
    ScorePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Status

Float64Array = npt.NDArray[np.float64]

DEFAULT_RESOURCES: Final = (CPU, MEMORY)
_STATE_KEY: Final = "PreScoreNodeResourcesBalancedAllocation"
_NAME_RE: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def parse_resources(args: Mapping[str, Any]) -> tuple[str, ...]:
    """NodeResourcesBalancedAllocationArgs.resources as kube-scheduler defaults and
    validates them: none given means cpu and memory; a weight, if given, must be 1
    (0 or left out means 1); no resource twice."""
    for k in args:
        if k != "resources":
            raise PluginArgsError(str(k), "unknown field")
    raw = args.get("resources")
    if raw is None:
        return DEFAULT_RESOURCES
    if not isinstance(raw, list):
        raise PluginArgsError("resources", "must be a list of {name, weight}")
    if not raw:
        return DEFAULT_RESOURCES
    names: list[str] = []
    for i, r in enumerate(raw):
        p = f"resources[{i}]"
        if not isinstance(r, Mapping):
            raise PluginArgsError(p, "must be an object with name and weight")
        for k in r:
            if k not in ("name", "weight"):
                raise PluginArgsError(f"{p}.{k}", "unknown field")
        name = r.get("name")
        if not isinstance(name, str) or not _valid_resource_name(name):
            raise PluginArgsError(f"{p}.name", f"must be a resource name, got {name!r}")
        if name in names:
            raise PluginArgsError(f"{p}.name", f'Duplicate value: "{name}"')
        w = r.get("weight", 0)
        if isinstance(w, bool) or not isinstance(w, int) or w not in (0, 1):
            raise PluginArgsError(f"{p}.weight", f"must be 1, got {w!r}")
        names.append(name)
    return tuple(names)


def _valid_resource_name(name: str) -> bool:
    prefix, slash, rest = name.rpartition("/")
    if slash and not prefix:
        return False
    return 0 < len(rest) <= 63 and bool(_NAME_RE.match(rest))


def balanced_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """balancedResourceScorer, one node at a time (resources with allocatable 0
    are left out)."""
    fractions: list[float] = []
    total = 0.0
    for req, alloc in zip(requested, allocatable, strict=True):
        if alloc == 0:
            continue
        fraction = min(float(req) / float(alloc), 1.0)
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        acc = 0.0
        for f in fractions:
            acc = acc + (f - mean) * (f - mean)
        std = math.sqrt(acc / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def _std_every(fracs: list[Float64Array]) -> Float64Array:
    """The standard deviation per row when every row counts every fraction, with
    kube-scheduler's floating-point steps in its order."""
    if len(fracs) == 2:
        std: Float64Array = np.abs(fracs[0] - fracs[1])
        std /= 2
        return std
    total = fracs[0].copy()
    for f in fracs[1:]:
        total += f
    mean = total / len(fracs)
    acc = np.zeros_like(mean)
    for f in fracs:
        dev = f - mean
        acc += dev * dev
    acc /= len(fracs)
    return np.sqrt(acc)


def _std_some(frac: Float64Array, has: BoolArray) -> Float64Array:
    """The same when rows count different resources (`has`, resources x rows):
    0 for one fraction or none, |f1 - f2| / 2 for two (max - min over the counted
    ones), the full formula for more. An uncounted fraction is 0.0 and adds 0.0
    to each sum, which leaves the sums exact."""
    count = has.sum(axis=0)
    hi = np.where(has, frac, -np.inf).max(axis=0)
    lo = np.where(has, frac, np.inf).min(axis=0)
    std: Float64Array = np.where(count == 2, (hi - lo) / 2, 0.0)
    many = count > 2
    if many.any():
        safe = np.maximum(count, 1)
        total = frac[0].copy()
        for j in range(1, len(frac)):
            total += frac[j]
        mean = total / safe
        dev = np.where(has, frac - mean, 0.0)
        acc = np.zeros_like(mean)
        for j in range(len(frac)):
            acc += dev[j] * dev[j]
        std = np.where(many, np.sqrt(acc / safe), std)
    return std


@dataclass(frozen=True, slots=True)
class _Dims:
    """The counted dimensions: node table column and the pod's amount."""

    cols: tuple[int, ...]
    amounts: tuple[int, ...]


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin, NodeScorePlugin):
    NAME: Final = "NodeResourcesBalancedAllocation"

    def __init__(self, resources: tuple[str, ...], isolated: IsolatedCPU) -> None:
        self.resources = resources
        self.isolated = isolated

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        # The isolated-CPU names are NodeResourcesFit's arguments; the scheduler puts
        # them on the handle.
        return cls(parse_resources(args), handle.isolated)

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        charge = pod_charge(pod, self.isolated).resources
        iso = self.isolated.applies(pod)
        cols: list[int] = []
        amounts: list[int] = []
        requested_any = False
        for name in self.resources:
            res = self.isolated.resource if (name == CPU and iso) else name
            amount = 0 if name == PODS else charge.get(res, 0)
            requested_any |= amount != 0
            if name not in (CPU, MEMORY, EPHEMERAL_STORAGE) and not (
                is_scalar_resource(name) and amount
            ):
                continue  # a scalar the pod does not request, or pods: never counted
            c = nodes.col.get(res)
            if c is None:
                continue  # no node has it: allocatable 0 everywhere
            cols.append(c)
            amounts.append(amount)
        if not requested_any:
            # A best-effort pod: skip, so that such pods do not pile onto one node
            # (kubernetes/kubernetes#129138).
            return SKIP
        state.write(_STATE_KEY, _Dims(tuple(cols), tuple(amounts)))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        d = state.read(_STATE_KEY, _Dims)
        n = len(rows)
        k = len(d.cols)
        if k < 2:
            return np.full(n, MAX_NODE_SCORE, dtype=np.int64)
        fracs: list[Float64Array] = []
        counted: list[BoolArray] = []
        every = True  # every row has every resource
        for c, amount in zip(d.cols, d.amounts, strict=True):
            alloc = nodes.allocatable[rows, c]
            req = nodes.requested[rows, c]
            req += amount
            has = alloc > 0
            if has.all():
                frac: Float64Array = req / alloc
            else:
                every = False
                frac = np.divide(req, alloc, out=np.zeros(n), where=has)
            np.minimum(frac, 1.0, out=frac)
            fracs.append(frac)
            counted.append(has)
        std = _std_every(fracs) if every else _std_some(np.stack(fracs), np.stack(counted))
        out: Int64Array = ((1 - std) * MAX_NODE_SCORE).astype(np.int64)  # truncates
        return out

    def score_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> int:
        d = state.read(_STATE_KEY, _Dims)
        requested = [
            int(nodes.requested[row, c]) + a for c, a in zip(d.cols, d.amounts, strict=True)
        ]
        allocatable = [int(nodes.allocatable[row, c]) for c in d.cols]
        return balanced_score(requested, allocatable)
