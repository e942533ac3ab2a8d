"""NodeResourcesFit: the pod's requests must fit each node's free allocatable;
nodes are scored by a strategy (noderesources/fit.go, least_allocated.go,
most_allocated.go, requested_to_capacity_ratio.go, resource_allocation.go).

Isolated CPUs (DESIGN.md): a pod with the isolated-CPU annotation charges its
cpu request to the isolated resource instead of `cpu`, in Filter and Score
alike; both names are arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Self

import numpy as np

from scheduler.api.types import (
    CPU,
    EPHEMERAL_STORAGE,
    ISOLATED_CPU_ANNOTATION,
    ISOLATED_CPU_RESOURCE,
    MEMORY,
    PODS,
    Pod,
)
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.handle import Handle
from scheduler.framework.interface import (
    ActionType,
    BoolArray,
    ClusterEvent,
    ClusterEventWithHint,
    EnqueueExtensions,
    EventResource,
    FilterPlugin,
    FilterResult,
    Int64Array,
    IntpArray,
    NodeFilterPlugin,
    NodeScorePlugin,
    PluginArgsError,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueingHint,
    ScorePlugin,
)
from scheduler.framework.status import SUCCESS, Code, Status
from scheduler.plugins.balanced_allocation import parse_resources
from scheduler.snapshot import IsolatedCPU, NodeTable, pod_charge

LEAST_ALLOCATED: Final = "LeastAllocated"
MOST_ALLOCATED: Final = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO: Final = "RequestedToCapacityRatio"
TOO_MANY_PODS: Final = "Too many pods"
_PRE_FILTER_KEY: Final = "PreFilterNodeResourcesFit"
_PRE_SCORE_KEY: Final = "PreScoreNodeResourcesFit"
MAX_UTILIZATION: Final = 100
MAX_CUSTOM_SCORE: Final = 10


def insufficient(resource: str) -> str:
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


@dataclass(frozen=True, slots=True)
class FitArgs:
    ignored_resources: frozenset[str] = frozenset()
    ignored_groups: frozenset[str] = frozenset()
    strategy: str = LEAST_ALLOCATED
    resources: tuple[tuple[str, int], ...] = ((CPU, 1), (MEMORY, 1))
    shape: tuple[tuple[int, int], ...] = ((0, 0), (100, 10))
    isolated: IsolatedCPU = field(default_factory=IsolatedCPU)


def _str_list(v: object, path: str) -> frozenset[str]:
    if v is None:
        return frozenset()
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise PluginArgsError(path, "must be a list of names")
    return frozenset(v)


def parse_fit_args(args: Mapping[str, Any]) -> FitArgs:
    known = {
        "ignoredResources",
        "ignoredResourceGroups",
        "scoringStrategy",
        "isolatedCPUAnnotation",
        "isolatedCPUResource",
    }
    for k in args:
        if k not in known:
            raise PluginArgsError(str(k), "unknown field")
    ss = args.get("scoringStrategy") or {}
    if not isinstance(ss, Mapping):
        raise PluginArgsError("scoringStrategy", "must be an object")
    for k in ss:
        if k not in ("type", "resources", "requestedToCapacityRatio"):
            raise PluginArgsError(f"scoringStrategy.{k}", "unknown field")
    strategy = ss.get("type", LEAST_ALLOCATED)
    if strategy not in (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO):
        raise PluginArgsError(
            "scoringStrategy.type",
            f'unsupported value: "{strategy}": '
            'supported values: "LeastAllocated", "MostAllocated", '
            '"RequestedToCapacityRatio"',
        )
    try:
        resources = parse_resources(ss, ((CPU, 1), (MEMORY, 1)))
    except PluginArgsError as e:
        raise PluginArgsError(f"scoringStrategy.{e.field_path}", e.problem) from e
    shape: tuple[tuple[int, int], ...] = ((0, 0), (100, 10))
    if strategy == REQUESTED_TO_CAPACITY_RATIO:
        r = ss.get("requestedToCapacityRatio")
        if not isinstance(r, Mapping) or not isinstance(r.get("shape"), list) or not r["shape"]:
            raise PluginArgsError(
                "scoringStrategy.requestedToCapacityRatio.shape",
                "at least one point must be specified",
            )
        pts = []
        prev = -1
        for i, p in enumerate(r["shape"]):
            path = f"scoringStrategy.requestedToCapacityRatio.shape[{i}]"
            if not isinstance(p, Mapping):
                raise PluginArgsError(path, "must be an object")
            u, s = p.get("utilization"), p.get("score")
            if isinstance(u, bool) or not isinstance(u, int) or not 0 <= u <= MAX_UTILIZATION:
                raise PluginArgsError(f"{path}.utilization", "must be in the range [0, 100]")
            if u <= prev:
                raise PluginArgsError(
                    f"{path}.utilization", "values must be sorted in increasing order"
                )
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_CUSTOM_SCORE:
                raise PluginArgsError(f"{path}.score", "must be in the range [0, 10]")
            prev = u
            pts.append((u, s))
        shape = tuple(pts)
    ann = args.get("isolatedCPUAnnotation", ISOLATED_CPU_ANNOTATION)
    res = args.get("isolatedCPUResource", ISOLATED_CPU_RESOURCE)
    for name, v in (("isolatedCPUAnnotation", ann), ("isolatedCPUResource", res)):
        if not isinstance(v, str) or not v:
            raise PluginArgsError(name, "must be a non-empty string")
    return FitArgs(
        ignored_resources=_str_list(args.get("ignoredResources"), "ignoredResources"),
        ignored_groups=_str_list(args.get("ignoredResourceGroups"), "ignoredResourceGroups"),
        strategy=strategy,
        resources=resources,
        shape=shape,
        isolated=IsolatedCPU(ann, res),
    )


@dataclass(frozen=True, slots=True)
class _Fit:
    names: tuple[str, ...]  # resources checked, in kube-scheduler's order
    cols: IntpArray  # node table column of each (-1: the table has none)
    req: Int64Array


@dataclass(frozen=True, slots=True)
class _Score:
    alloc_cols: tuple[int, ...]  # -1: not scored (no column)
    req_cols: tuple[int, ...]  # column in `requested` or in `nonzero_requested` (neg - 10)
    pod: tuple[int, ...]
    weights: tuple[int, ...]


def _is_extended(name: str) -> bool:
    return name not in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)


class NodeResourcesFit(
    PreFilterPlugin,
    FilterPlugin,
    NodeFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    NodeScorePlugin,
    EnqueueExtensions,
):
    NAME: Final = "NodeResourcesFit"

    def __init__(self, args: FitArgs) -> None:
        self.args = args

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(parse_fit_args(args))

    # ---- filter --------------------------------------------------------------------

    def _ignored(self, name: str) -> bool:
        if not _is_extended(name):
            return False
        if name in self.args.ignored_resources:
            return True
        return "/" in name and name.split("/", 1)[0] in self.args.ignored_groups

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        charge = pod_charge(pod, self.args.isolated).resources
        order = [PODS, CPU, MEMORY, EPHEMERAL_STORAGE]
        names = [r for r in order if charge.get(r, 0) > 0]
        names += sorted(
            r for r, v in charge.items() if r not in order and v > 0 and not self._ignored(r)
        )
        cols = np.array([nodes.col.get(r, -1) for r in names], dtype=np.intp)
        req = np.array([charge[r] for r in names], dtype=np.int64)
        state.write(_PRE_FILTER_KEY, _Fit(tuple(names), cols, req))
        return None, SUCCESS

    def _fit(self, state: CycleState, nodes: NodeTable) -> _Fit:
        fit = state.read(_PRE_FILTER_KEY, _Fit)
        if (fit.cols < 0).any():  # a column may have appeared since pre_filter
            cols = np.array([nodes.col.get(r, -1) for r in fit.names], dtype=np.intp)
            fit = _Fit(fit.names, cols, fit.req)
        return fit

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        fit = self._fit(state, nodes)
        known = fit.cols >= 0
        if known.all():
            free = (
                nodes.allocatable[np.ix_(rows, fit.cols)] - nodes.requested[np.ix_(rows, fit.cols)]
            )
            rejected: BoolArray = free < fit.req
        else:
            rejected = np.ones((len(rows), len(fit.names)), dtype=bool)
            kc = fit.cols[known]
            free = nodes.allocatable[np.ix_(rows, kc)] - nodes.requested[np.ix_(rows, kc)]
            rejected[:, known] = free < fit.req[known]
        return FilterResult(tuple(insufficient(r) for r in fit.names), rejected)

    def filter_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> Status:
        fit = self._fit(state, nodes)
        reasons = []
        for name, c, r in zip(fit.names, fit.cols.tolist(), fit.req.tolist(), strict=True):
            free = 0 if c < 0 else int(nodes.allocatable[row, c]) - int(nodes.requested[row, c])
            if free < r:
                reasons.append(insufficient(name))
        if reasons:
            return Status(Code.UNSCHEDULABLE, tuple(reasons), self.NAME)
        return SUCCESS

    # ---- score ---------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        iso = self.args.isolated
        charge = pod_charge(pod, iso).resources
        isolated = iso.applies(pod)
        alloc_cols, req_cols, req, weights = [], [], [], []
        for name, w in self.args.resources:
            if name == CPU and isolated:
                c = nodes.col.get(iso.resource, -1)
                alloc_cols.append(c)
                req_cols.append(c)
                req.append(charge.get(iso.resource, 0) or pod.nonzero_cpu or 100)
            elif name == CPU:
                alloc_cols.append(nodes.col[CPU])
                req_cols.append(-10)  # nonzero_requested[:, 0]
                req.append(pod.nonzero_cpu)
            elif name == MEMORY:
                alloc_cols.append(nodes.col[MEMORY])
                req_cols.append(-11)  # nonzero_requested[:, 1]
                req.append(pod.nonzero_memory)
            else:
                amount = charge.get(name, 0)
                c = nodes.col.get(name, -1) if amount or not _is_extended(name) else -1
                alloc_cols.append(c)
                req_cols.append(c)
                req.append(amount)
            weights.append(w)
        state.write(
            _PRE_SCORE_KEY, _Score(tuple(alloc_cols), tuple(req_cols), tuple(req), tuple(weights))
        )
        return SUCCESS

    @staticmethod
    def _requested(nodes: NodeTable, rows: IntpArray | int, c: int) -> Any:
        if c == -10:
            return nodes.nonzero_requested[rows, 0]
        if c == -11:
            return nodes.nonzero_requested[rows, 1]
        return nodes.requested[rows, c]

    def _resource_scores(self, alloc: Int64Array, req: Int64Array) -> Int64Array:
        strategy = self.args.strategy
        safe = np.where(alloc > 0, alloc, 1)
        if strategy == LEAST_ALLOCATED:
            return np.where(req > alloc, 0, (alloc - req) * 100 // safe)
        if strategy == MOST_ALLOCATED:
            return np.where(req > alloc, 100, req * 100 // safe)
        util = np.where(req > alloc, MAX_UTILIZATION, req * 100 // safe)
        return self._broken_linear(util)

    def _broken_linear(self, p: Int64Array) -> Int64Array:
        shape = self.args.shape
        us = [u for u, _ in shape]
        ss = [s * (100 // MAX_CUSTOM_SCORE) for _, s in shape]
        out = np.full(p.shape, ss[-1], dtype=np.int64)
        done = np.zeros(p.shape, dtype=bool)
        for i, u in enumerate(us):
            hit = ~done & (p <= u)
            if i == 0:
                out[hit] = ss[0]
            else:
                out[hit] = ss[i - 1] + (ss[i] - ss[i - 1]) * (p[hit] - us[i - 1]) // (u - us[i - 1])
            done |= hit
        return out

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        sc = state.read(_PRE_SCORE_KEY, _Score)
        n = len(rows)
        total = np.zeros(n, dtype=np.int64)
        wsum = np.zeros(n, dtype=np.int64)
        for ac, rc, r, w in zip(sc.alloc_cols, sc.req_cols, sc.pod, sc.weights, strict=True):
            if ac < 0:
                continue
            alloc = nodes.allocatable[rows, ac]
            req = self._requested(nodes, rows, rc) + r
            has = alloc > 0
            total += np.where(has, self._resource_scores(alloc, req) * w, 0)
            wsum += np.where(has, w, 0)
        safe = np.where(wsum > 0, wsum, 1)
        if self.args.strategy == REQUESTED_TO_CAPACITY_RATIO:
            # Go's math.Round: halves away from zero (numpy rounds halves to even)
            out = np.floor(total / safe + 0.5).astype(np.int64)
        else:
            out = total // safe
        return np.where(wsum > 0, out, 0)

    def score_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> int:
        one = np.array([row], dtype=np.intp)
        return int(self.score(state, pod, nodes, one)[0])

    # ---- queueing hints ----------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def pod_freed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            # An assigned pod deleted or scaled down frees what it requested.
            return QueueingHint.QUEUE if isinstance(old, Pod) else QueueingHint.SKIP

        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
                ),
                pod_freed,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
                )
            ),
        ]
