"""NodeResourcesFit: the pod's requests must fit each node's free allocatable,
and nodes are scored by a strategy (kube-scheduler noderesources/fit.go,
least_allocated.go, most_allocated.go, requested_to_capacity_ratio.go,
resource_allocation.go).

Filter. PreFilter turns the pod's charge (`snapshot.pod_charge`: the effective
requests plus `pods: 1`) into a few (column, amount) pairs in kube-scheduler's
reason order (pods, cpu, memory, ephemeral-storage, then the other resources by
name); Filter compares `allocatable - requested` with each amount for every
candidate row at once and reports every insufficient resource of a node, one
reason each, as fitsRequest does. A resource the node table has no column for
is one no node has (allocatable 0). As fitsRequest, a node whose allocatable
itself is below the pod's request (not merely its free amount) can never take
the pod, so that node's status is UNSCHEDULABLE_AND_UNRESOLVABLE (preemption
cannot help); "Too many pods" is always UNSCHEDULABLE. Each resource other than
pods therefore has two reason columns with the same text, one per code, and a
node sets at most one of them. `ignoredResources` and
`ignoredResourceGroups` skip extended resources only (never cpu, memory,
ephemeral-storage, hugepages or the isolated-CPU resource).

Score. PreScore builds the pod's request per scoring resource; Score gathers a
(resources x rows) block of allocatable and requested amounts and applies the
strategy to it. As kube-scheduler, cpu and memory are scored on the non-zero
requests (100m / 200Mi for a container that sets none), other resources on
the actual ones, a scalar resource the pod does not request is not scored, and
a resource a node has none of is left out of that node's weighted average.

Isolated CPUs (docs/design.md, "Isolated CPUs"): a pod with the isolated-CPU annotation charges its
cpu request to the isolated resource instead of `cpu`, so its Filter checks the
isolated column, and its `cpu` scoring dimension is scored on the isolated
column (requested isolated + the pod's isolated charge against allocatable
isolated). Both names are arguments of this plugin, and the scheduler charges
its cache by the same names.

`filter_node` and `score_node` are the same rules written one node at a time in
plain Python; a property test keeps the two forms in exact agreement.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Self

import numpy as np

from troupe.api.names import is_extended_resource, is_scalar_resource, qualified_name_problem
from troupe.api.types import (
    CPU,
    EPHEMERAL_STORAGE,
    ISOLATED_CPU_ANNOTATION,
    ISOLATED_CPU_RESOURCE,
    MEMORY,
    PODS,
    IsolatedCPU,
    Node,
    Pod,
)
from troupe.core.snapshot import NodeTable, pod_charge
from troupe.dra.extended import class_for, is_dra_extended_resource
from troupe.dra.store import DeviceStore
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.filtering import FilterResult
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    MAX_NODE_SCORE,
    BoolArray,
    EnqueueExtensions,
    FilterPlugin,
    Int64Array,
    IntpArray,
    NodeFilterPlugin,
    NodeScorePlugin,
    PluginArgsError,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
)
from troupe.framework.status import SUCCESS, Code, Status
from troupe.plugins.helper import (
    MAX_UTILIZATION,
    ShapePoint,
    broken_linear,
    parse_shape,
    scaled,
    shape_table,
)
from troupe.plugins.helper import int_field as _int_field
from troupe.plugins.helper import round_half_up as _round_half_up

# ---- reasons (kube-scheduler's text) ---------------------------------------------

TOO_MANY_PODS: Final = "Too many pods"
INSUFFICIENT_CPU: Final = "Insufficient cpu"
INSUFFICIENT_MEMORY: Final = "Insufficient memory"
INSUFFICIENT_EPHEMERAL_STORAGE: Final = "Insufficient ephemeral-storage"


def insufficient(resource: str) -> str:
    """The reason for a resource a node lacks ("Insufficient <name>")."""
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


# ---- arguments -------------------------------------------------------------------


class ScoringStrategyType(enum.StrEnum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"
    REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"


MAX_RESOURCE_WEIGHT: Final = 100


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int = 1


DEFAULT_RESOURCES: Final = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


@dataclass(frozen=True, slots=True)
class FitArgs:
    """NodeResourcesFitArgs, defaulted and validated."""

    ignored_resources: frozenset[str] = frozenset()
    ignored_resource_groups: frozenset[str] = frozenset()
    strategy: ScoringStrategyType = ScoringStrategyType.LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    shape: tuple[ShapePoint, ...] = ()  # RequestedToCapacityRatio only
    isolated: IsolatedCPU = field(default_factory=IsolatedCPU)


def _name_list(raw: object, path: str, is_group: bool) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list):
        raise PluginArgsError(path, "must be a list of names")
    for i, v in enumerate(raw):
        if not isinstance(v, str):
            raise PluginArgsError(f"{path}[{i}]", "must be a string")
        if is_group and "/" in v:
            raise PluginArgsError(f"{path}[{i}]", "resource group name can't contain '/'")
        problem = qualified_name_problem(v)
        if problem:
            raise PluginArgsError(f"{path}[{i}]", f"invalid name {v!r}: {problem}")
    return frozenset(raw)


def parse_resource_specs(raw: object, path: str) -> tuple[ResourceSpec, ...]:
    """`resources: [{name, weight}]` as kube-scheduler's v1 defaulting and
    validateResources: none given means cpu and memory; a weight left out or 0
    means 1; weights must be in (0, 100]."""
    if raw is None:
        return DEFAULT_RESOURCES
    if not isinstance(raw, list):
        raise PluginArgsError(path, "must be a list of {name, weight}")
    if not raw:
        return DEFAULT_RESOURCES
    out = []
    for i, r in enumerate(raw):
        p = f"{path}[{i}]"
        if not isinstance(r, Mapping):
            raise PluginArgsError(p, "must be an object with name and weight")
        for k in r:
            if k not in ("name", "weight"):
                raise PluginArgsError(f"{p}.{k}", "unknown field")
        name = r.get("name")
        if not isinstance(name, str) or not name:
            raise PluginArgsError(f"{p}.name", "must be a resource name")
        problem = qualified_name_problem(name)
        if problem:
            raise PluginArgsError(f"{p}.name", f"invalid resource name {name!r}: {problem}")
        weight = _int_field(r, "weight", p, 0) or 1
        if not 0 < weight <= MAX_RESOURCE_WEIGHT:
            raise PluginArgsError(
                f"{p}.weight", f"resource weight of {name} not in valid range (0, 100]"
            )
        out.append(ResourceSpec(name, weight))
    return tuple(out)


def parse_fit_args(args: Mapping[str, Any]) -> FitArgs:
    """Default and validate NodeResourcesFitArgs (kube-scheduler's
    SetDefaults_NodeResourcesFitArgs and ValidateNodeResourcesFitArgs), plus
    Troupe's isolated-CPU names."""
    known = (
        "ignoredResources",
        "ignoredResourceGroups",
        "scoringStrategy",
        "isolatedCPUAnnotation",
        "isolatedCPUResource",
    )
    for k in args:
        if k not in known:
            raise PluginArgsError(str(k), "unknown field")
    ignored = _name_list(args.get("ignoredResources"), "ignoredResources", False)
    groups = _name_list(args.get("ignoredResourceGroups"), "ignoredResourceGroups", True)

    ss = args.get("scoringStrategy")
    if ss is None:
        ss = {}
    if not isinstance(ss, Mapping):
        raise PluginArgsError("scoringStrategy", "must be an object")
    for k in ss:
        if k not in ("type", "resources", "requestedToCapacityRatio"):
            raise PluginArgsError(f"scoringStrategy.{k}", "unknown field")
    raw_type = ss.get("type", ScoringStrategyType.LEAST_ALLOCATED.value)
    try:
        strategy = ScoringStrategyType(raw_type)
    except ValueError:
        supported = ", ".join(f'"{t.value}"' for t in ScoringStrategyType)
        raise PluginArgsError(
            "scoringStrategy.type",
            f'Unsupported value: "{raw_type}": supported values: {supported}',
        ) from None
    resources = parse_resource_specs(ss.get("resources"), "scoringStrategy.resources")
    shape: tuple[ShapePoint, ...] = ()
    rtcr = ss.get("requestedToCapacityRatio")
    rtcr_path = "scoringStrategy.requestedToCapacityRatio"
    if rtcr is not None:
        if not isinstance(rtcr, Mapping):
            raise PluginArgsError(rtcr_path, "must be an object")
        for k in rtcr:
            if k != "shape":
                raise PluginArgsError(f"{rtcr_path}.{k}", "unknown field")
        shape = parse_shape(rtcr.get("shape"), f"{rtcr_path}.shape")
    elif strategy is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO:
        raise PluginArgsError(f"{rtcr_path}.shape", "at least one point must be specified")

    annotation = args.get("isolatedCPUAnnotation", ISOLATED_CPU_ANNOTATION)
    if not isinstance(annotation, str) or qualified_name_problem(annotation):
        raise PluginArgsError(
            "isolatedCPUAnnotation", f"must be an annotation key, got {annotation!r}"
        )
    resource = args.get("isolatedCPUResource", ISOLATED_CPU_RESOURCE)
    if (
        not isinstance(resource, str)
        or qualified_name_problem(resource)
        or not is_extended_resource(resource)
    ):
        raise PluginArgsError(
            "isolatedCPUResource",
            f"must be an extended resource name (domain/name outside kubernetes.io), "
            f"got {resource!r}",
        )
    return FitArgs(
        ignored_resources=ignored,
        ignored_resource_groups=groups,
        strategy=strategy,
        resources=resources,
        shape=shape,
        isolated=IsolatedCPU(annotation, resource),
    )


# ---- scoring functions (one value at a time; the table and per-node form use them) ----


# ---- cycle state -------------------------------------------------------------------

_PRE_FILTER_KEY: Final = "PreFilterNodeResourcesFit"
_PRE_SCORE_KEY: Final = "PreScoreNodeResourcesFit"


@dataclass(frozen=True, slots=True)
class _FitState:
    """What the pod needs, in reason order: a resource, its reason, its column in
    the node table (-1: no node has it) and the amount."""

    names: tuple[str, ...]
    reasons: tuple[str, ...]
    cols: tuple[int, ...]
    amounts: tuple[int, ...]
    # FilterResult columns: for pods one (UNSCHEDULABLE); for every other resource
    # two with the same reason, UNSCHEDULABLE then UNSCHEDULABLE_AND_UNRESOLVABLE.
    result_reasons: tuple[str, ...]
    result_codes: tuple[Code, ...]
    # Per name: backed by a DeviceClass (DRA), so left to DynamicResources on
    # nodes that do not list it in their allocatable.
    dra: tuple[bool, ...] = ()


@dataclass(frozen=True, slots=True)
class _ScoreState:
    """One entry per scored dimension (scoring resources that can score at all):
    the allocatable column, where the node's requested amount is read
    (`nonzero_requested` column when `nonzero`, else a `requested` column), the
    pod's amount and the weight."""

    alloc_cols: tuple[int, ...]
    req_cols: tuple[int, ...]
    nonzero: tuple[bool, ...]
    amounts: tuple[int, ...]
    weights: tuple[int, ...]


_NONZERO_COL: Final = {CPU: 0, MEMORY: 1}  # columns of NodeTable.nonzero_requested


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
    # Its PreFilter state depends on the pod and the node only (see
    # troupe.framework.interface.pre_filter_is_node_local).
    PRE_FILTER_NODE_LOCAL: Final = True

    def __init__(self, args: FitArgs, devices: DeviceStore | None = None) -> None:
        self.args = args
        self.devices = devices
        self.isolated = args.isolated
        # (utilization, score 0..100) points, and the broken-linear function tabulated
        # over every utilization 0..100 (Score looks utilizations up in it).
        self._shape = scaled(args.shape)
        self._shape_table: Int64Array = shape_table(self._shape)

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(parse_fit_args(args), handle.devices)

    # ---- filter --------------------------------------------------------------------

    def _ignored(self, name: str) -> bool:
        if not is_extended_resource(name) or name == self.isolated.resource:
            return False
        if name in self.args.ignored_resources:
            return True
        return name.split("/", 1)[0] in self.args.ignored_resource_groups

    def fit_charge(self, pod: Pod) -> dict[str, int]:
        """What Filter checks for `pod`: its charge without ignored resources."""
        charge = pod_charge(pod, self.isolated).resources
        return {r: v for r, v in charge.items() if v > 0 and not self._ignored(r)}

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        charge = self.fit_charge(pod)
        charge[PODS] = 1  # a pod requesting nothing still takes a pod slot
        base = (PODS, CPU, MEMORY, EPHEMERAL_STORAGE)
        names = [r for r in base if r in charge]
        names += sorted(r for r in charge if r not in base)
        reasons = tuple(insufficient(r) for r in names)
        result_reasons: list[str] = []
        result_codes: list[Code] = []
        for r, reason in zip(names, reasons, strict=True):
            result_reasons.append(reason)
            result_codes.append(Code.UNSCHEDULABLE)
            if r != PODS:
                result_reasons.append(reason)
                result_codes.append(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        devices = self.devices
        dra = (
            tuple(is_dra_extended_resource(r) and class_for(devices, r) is not None for r in names)
            if devices is not None and devices.has_classes()
            else ()
        )
        state.write(
            _PRE_FILTER_KEY,
            _FitState(
                names=tuple(names),
                reasons=reasons,
                cols=tuple(nodes.col.get(r, -1) for r in names),
                amounts=tuple(charge[r] for r in names),
                result_reasons=tuple(result_reasons),
                result_codes=tuple(result_codes),
                dra=dra if any(dra) else (),
            ),
        )
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        s = state.read(_PRE_FILTER_KEY, _FitState)
        n = len(rows)
        out: BoolArray = np.empty((len(s.result_reasons), n), dtype=bool)
        # Many rows: compare whole columns, then pick the rows; few rows: pick first.
        whole = 2 * n >= nodes.n_rows
        top = nodes.n_rows
        j = 0
        for k, (name, c, amount) in enumerate(zip(s.names, s.cols, s.amounts, strict=True)):
            short = out[j]  # free < amount
            if c < 0:
                short[:] = True  # no node has the resource
            elif whole:
                free = nodes.allocatable[:top, c] - nodes.requested[:top, c]
                np.less(free, amount).take(rows, out=short, mode="clip")
            else:
                free = nodes.allocatable[rows, c] - nodes.requested[rows, c]
                np.less(free, amount, out=short)
            if name == PODS:
                j += 1
                continue
            never = out[j + 1]  # allocatable < amount: the node can never fit it
            if c < 0:
                never[:] = True
            else:
                alloc = nodes.allocatable[:top, c] if whole else nodes.allocatable[rows, c]
                if whole:
                    np.less(alloc, amount).take(rows, out=never, mode="clip")
                else:
                    np.less(alloc, amount, out=never)
            if s.dra and s.dra[k]:
                # Nodes that do not list the resource leave it to DynamicResources.
                listed = nodes.allocatable[rows, c] > 0 if c >= 0 else np.zeros(n, dtype=bool)
                short &= listed
                never &= listed
            short &= ~never
            j += 2
        return FilterResult(s.result_reasons, out.T, s.result_codes)

    def filter_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> Status:
        s = state.read(_PRE_FILTER_KEY, _FitState)
        reasons = []
        code = Code.UNSCHEDULABLE
        for k, (name, c, amount, reason) in enumerate(
            zip(s.names, s.cols, s.amounts, s.reasons, strict=True)
        ):
            alloc = 0 if c < 0 else int(nodes.allocatable[row, c])
            free = 0 if c < 0 else alloc - int(nodes.requested[row, c])
            if s.dra and s.dra[k] and alloc <= 0:
                continue  # not listed by the node: DynamicResources allocates it
            if amount > free:
                reasons.append(reason)
                if name != PODS and amount > alloc:
                    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        if reasons:
            return Status(code, tuple(reasons), self.NAME)
        return SUCCESS

    # ---- score ---------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        state.write(_PRE_SCORE_KEY, _score_state(pod, nodes, self.args.resources, self.isolated))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        s = state.read(_PRE_SCORE_KEY, _ScoreState)
        strategy = self.args.strategy
        rtcr = strategy is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO
        n = len(rows)
        total: Int64Array = np.zeros(n, dtype=np.int64)
        # The weights summed per row: a constant while every row counts every
        # resource, an array once some row does not (allocatable 0, or RTCR's 0).
        wsum_all = 0
        wsum_rows: Int64Array | None = None
        for c, rc, nz, amount, weight in zip(
            s.alloc_cols, s.req_cols, s.nonzero, s.amounts, s.weights, strict=True
        ):
            alloc = nodes.allocatable[rows, c]
            src = nodes.nonzero_requested if nz else nodes.requested
            req = src[rows, rc]
            req += amount
            has = alloc > 0
            partial = not has.all()
            if partial:
                alloc = np.where(has, alloc, 1)  # those rows are masked out below
            if strategy is ScoringStrategyType.LEAST_ALLOCATED:
                # leastRequestedScore: (capacity - requested) * 100 / capacity, 0 if over
                per = alloc - req
                per *= MAX_NODE_SCORE
                per //= alloc
                np.maximum(per, 0, out=per)
            elif strategy is ScoringStrategyType.MOST_ALLOCATED:
                # mostRequestedScore: requested capped at capacity
                per = np.minimum(req, alloc)
                per *= MAX_NODE_SCORE
                per //= alloc
            else:
                # utilization capped at 100 (requested > capacity counts as 100)
                util = req * MAX_UTILIZATION
                util //= alloc
                np.minimum(util, MAX_UTILIZATION, out=util)
                per = self._shape_table[util]
            if partial:
                per[~has] = 0
            if rtcr:
                # only positive resource scores count, in both sums (as kube-scheduler)
                counted = per > 0
                if not partial and counted.all():
                    wsum_all += weight
                else:
                    wsum_rows = (
                        counted * weight if wsum_rows is None else wsum_rows + counted * weight
                    )
            elif partial:
                wsum_rows = has * weight if wsum_rows is None else wsum_rows + has * weight
            else:
                wsum_all += weight
            if weight != 1:
                per *= weight
            total += per
        if wsum_rows is None:
            if wsum_all == 0:
                return total  # all zeros: nothing scored
            if rtcr:
                total *= 2
                total += wsum_all
                total //= 2 * wsum_all
            else:
                total //= wsum_all
            return total
        wsum_rows += wsum_all
        safe = np.maximum(wsum_rows, 1)
        if rtcr:
            out: Int64Array = (2 * total + safe) // (2 * safe)
        else:
            out = total // safe
        out[wsum_rows == 0] = 0
        return out

    def score_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> int:
        s = state.read(_PRE_SCORE_KEY, _ScoreState)
        strategy = self.args.strategy
        total = wsum = 0
        for ac, rc, nz, amount, weight in zip(
            s.alloc_cols, s.req_cols, s.nonzero, s.amounts, s.weights, strict=True
        ):
            capacity = int(nodes.allocatable[row, ac])
            if capacity == 0:
                continue
            src = nodes.nonzero_requested if nz else nodes.requested
            requested = int(src[row, rc]) + amount
            if strategy is ScoringStrategyType.LEAST_ALLOCATED:
                score = (
                    0
                    if requested > capacity
                    else (capacity - requested) * MAX_NODE_SCORE // capacity
                )
            elif strategy is ScoringStrategyType.MOST_ALLOCATED:
                score = min(requested, capacity) * MAX_NODE_SCORE // capacity
            else:
                util = (
                    MAX_UTILIZATION
                    if requested > capacity
                    else requested * MAX_UTILIZATION // capacity
                )
                score = broken_linear(self._shape, util)
                if score <= 0:
                    continue
            total += score * weight
            wsum += weight
        if wsum == 0:
            return 0
        if strategy is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO:
            return _round_half_up(total, wsum)
        return total // wsum

    # ---- queueing hints ----------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        # As fit.go with queueing hints on: pod deletions and scale-downs, node adds
        # and allocatable changes. Only assigned pods matter: an update of the pod
        # itself requeues it anyway, and a pending pod deleted frees nothing. The
        # scheduler reports a forgotten assumed pod as an assigned pod deleted.
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.ASSIGNED_POD,
                    ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN,
                ),
                self.is_schedulable_after_pod_event,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
                ),
                self.is_schedulable_after_node_change,
            ),
        ]

    def is_schedulable_after_pod_event(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """An assigned (or assumed) pod deleted may free what `pod` needs; one that
        scaled down (or finished) helps only if it gave back a resource `pod` needs."""
        if new is None:
            return QueueingHint.QUEUE
        if not isinstance(new, Pod) or not isinstance(old, Pod):
            return QueueingHint.QUEUE
        if new.uid == pod.uid:
            return QueueingHint.QUEUE
        if not new.node_name:
            return QueueingHint.SKIP
        if new.terminal and not old.terminal:
            return QueueingHint.QUEUE  # a finished pod is no longer charged
        before = pod_charge(old, self.isolated).resources
        after = pod_charge(new, self.isolated).resources
        for r in self.fit_charge(pod):
            if r != PODS and before.get(r, 0) > after.get(r, 0):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """A node added or resized helps if the pod fits it empty and (for an
        update) one of the resources the pod needs, or its pod capacity, grew."""
        if not isinstance(new, Node) or (old is not None and not isinstance(old, Node)):
            return QueueingHint.QUEUE  # as upstream's error path
        need = self.fit_charge(pod)
        need[PODS] = 1
        if any(v > new.allocatable.get(r, 0) for r, v in need.items()):
            return QueueingHint.SKIP
        if not isinstance(old, Node):
            return QueueingHint.QUEUE
        if any(new.allocatable.get(r, 0) > old.allocatable.get(r, 0) for r in need):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP


def _score_state(
    pod: Pod, nodes: NodeTable, resources: Sequence[ResourceSpec], isolated: IsolatedCPU
) -> _ScoreState:
    """The pod's scoring dimensions (resource_allocation.go's
    calculateResourceAllocatableRequest with useRequested=false)."""
    charge = pod_charge(pod, isolated).resources
    iso = isolated.applies(pod)
    alloc_cols: list[int] = []
    req_cols: list[int] = []
    nonzero: list[bool] = []
    amounts: list[int] = []
    weights: list[int] = []

    def add(col: int | None, req_col: int, nz: bool, amount: int, weight: int) -> None:
        if col is None:
            return  # no node has the resource: left out of every average
        alloc_cols.append(col)
        req_cols.append(req_col)
        nonzero.append(nz)
        amounts.append(amount)
        weights.append(weight)

    for spec in resources:
        name, weight = spec.name, spec.weight
        if name == CPU and iso:
            c = nodes.col.get(isolated.resource)
            add(c, c or 0, False, charge.get(isolated.resource, 0), weight)
        elif name in _NONZERO_COL:
            amount = pod.nonzero_cpu if name == CPU else pod.nonzero_memory
            add(nodes.col.get(name), _NONZERO_COL[name], True, amount, weight)
        elif name == EPHEMERAL_STORAGE:
            c = nodes.col.get(name)
            add(c, c or 0, False, charge.get(name, 0), weight)
        elif is_scalar_resource(name) and charge.get(name, 0) > 0:
            c = nodes.col.get(name)
            add(c, c or 0, False, charge[name], weight)
        # else: a scalar the pod does not request, or pods and other native
        # resources, which kube-scheduler never scores.
    return _ScoreState(
        tuple(alloc_cols), tuple(req_cols), tuple(nonzero), tuple(amounts), tuple(weights)
    )
