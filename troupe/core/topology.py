"""Topology of a gang: which node label its members must (required) or should
(preferred) share, and the candidate domains, their order and their scores.

A PodGroup asks for topology in two ways, read into one `TopologySpec`:

- Kubernetes' own PodGroup (scheduling.k8s.io v1beta1/v1alpha3/v1alpha2):
  `spec.schedulingConstraints.topology: [{key: <node label>}]` (also read in
  the KEP's spelling `topologyConstraints: [{level: ...}]`). Every key listed is
  required: all members on nodes that share one value of each.
- Either API, through annotations on the PodGroup (scheduler-plugins' CRD has no
  field for it): `troupe.dev/topology-required: <node label>` and
  `troupe.dev/topology-preferred: <label>,<label>,...` from the narrowest level
  to the widest (rack, then block, then zone).

The group cycle (group_cycle.py) generates the candidate domains from the
snapshot's label columns (`domains`), drops those that cannot hold the gang at
all and ranks the rest by the placement they promise (`rank`): the score
kube-scheduler's placement scoring gives (PodGroupPodsCount: members placed;
NodeResourcesFit: the domain's allocation after the placement, so gangs fill
domains instead of fragmenting them), predicted from free slots on the nodes
the gang's first member passes Filter on. It then places the gang in them in
that order with the ordinary member search restricted to the domain, at most
`domains_per_cycle` of them per cycle, and the next cycle goes on with those
not tried yet (`DomainSet.stamps` tells a domain that changed since).

`allocation_score` and `pods_count_scores` are those two scores as
kube-scheduler computes them once a placement is made (integer arithmetic,
NodeResourcesFit's resource weights, non-zero cpu/memory requests, scalar
resources only when the group asks for them); `rank` predicts them before
placing. `members_domain` reads where a running group runs as kube-scheduler's
TopologyPlacement does (an error when its members are split), and
`preferred_order_problem` says when preferred levels are written widest first.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from troupe.api.names import is_scalar_resource, qualified_name_problem
from troupe.api.types import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, IsolatedCPU, Pod, PodGroup
from troupe.core.snapshot import NO_VALUE, NodeTable, pod_charge
from troupe.framework.fit import NodeSubset

IntpArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

REQUIRED_ANNOTATION: Final = "troupe.dev/topology-required"
PREFERRED_ANNOTATION: Final = "troupe.dev/topology-preferred"
NATIVE_FIELD: Final = "spec.schedulingConstraints.topology"
# Domains placed per group cycle and level when the profile does not say.
DEFAULT_DOMAINS_PER_CYCLE: Final = 16


class TopologyError(ValueError):
    """A topology request that cannot be honoured; the message names the field."""


@dataclass(frozen=True, slots=True)
class TopologySpec:
    required: tuple[str, ...] = ()  # label keys every member shares
    preferred: tuple[str, ...] = ()  # narrowest first; a preference, never a requirement
    # Where each key came from (for messages): key -> field or annotation.
    source: Mapping[str, str] | None = None

    @property
    def empty(self) -> bool:
        return not self.required and not self.preferred

    def where(self, key: str) -> str:
        return (self.source or {}).get(key, key)


@dataclass(frozen=True, slots=True)
class Domain:
    """One value of each of `keys` and the snapshot rows of the nodes that have them."""

    keys: tuple[str, ...]
    values: tuple[str, ...]
    rows: IntpArray  # sorted

    @property
    def name(self) -> str:
        return ",".join(f"{k}={v}" for k, v in zip(self.keys, self.values, strict=True))

    @property
    def level(self) -> str:
        return ",".join(self.keys)

    def subset(self) -> NodeSubset:
        return NodeSubset(self.rows, f"node(s) outside {self.name}")


@dataclass(frozen=True, slots=True)
class PlacementWeights:
    """Weights of the placement scores (Coscheduling's `placementScoring` args)."""

    pods_count: int = 1
    allocation: int = 1


def _keys(text: str, where: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(","))
    for k in keys:
        if not k:
            raise TopologyError(f"{where}: Invalid value: {text!r}: empty label key")
        problem = qualified_name_problem(k)
        if problem is not None:
            raise TopologyError(f"{where}: Invalid value: {k!r}: {problem}")
    if len(set(keys)) != len(keys):
        raise TopologyError(f"{where}: Invalid value: {text!r}: a key is listed twice")
    return keys


def _native_keys(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    sc = spec.get("schedulingConstraints")
    if sc is None:
        return []
    if not isinstance(sc, Mapping):
        raise TopologyError("spec.schedulingConstraints: Invalid value: must be an object")
    out: list[tuple[str, str]] = []
    for field, attr in (("topology", "key"), ("topologyConstraints", "level")):
        items = sc.get(field)
        if items is None:
            continue
        path = f"spec.schedulingConstraints.{field}"
        if not isinstance(items, list):
            raise TopologyError(f"{path}: Invalid value: must be a list")
        for i, item in enumerate(items):
            key = item.get(attr) if isinstance(item, Mapping) else None
            if not isinstance(key, str):
                raise TopologyError(f"{path}[{i}].{attr}: Required value: a node label key")
            where = f"{path}[{i}].{attr}"
            if "," in key:
                raise TopologyError(f"{where}: Invalid value: {key!r}: not a label key")
            out.append((_keys(key, where)[0], where))
    return out


def topology_of(pg: PodGroup) -> TopologySpec:
    """The group's topology request (empty when it has none); TopologyError for
    a value that cannot be read, naming the field or annotation."""
    raw = pg.raw
    md = raw.get("metadata")
    ann = md.get("annotations") if isinstance(md, Mapping) else None
    ann = ann if isinstance(ann, Mapping) else {}
    spec = raw.get("spec")
    source: dict[str, str] = {}
    required: list[str] = []
    if pg.native and isinstance(spec, Mapping):
        for key, where in _native_keys(spec):
            if key not in source:
                required.append(key)
                source[key] = where
    text = ann.get(REQUIRED_ANNOTATION)
    if text is not None:
        where = f"metadata.annotations[{REQUIRED_ANNOTATION}]"
        if not isinstance(text, str):
            raise TopologyError(f"{where}: Invalid value: must be a string")
        keys = _keys(text, where)
        if len(keys) != 1:
            raise TopologyError(f"{where}: Invalid value: {text!r}: one label key")
        if keys[0] not in source:
            required.append(keys[0])
            source[keys[0]] = where
    preferred: tuple[str, ...] = ()
    text = ann.get(PREFERRED_ANNOTATION)
    if text is not None:
        where = f"metadata.annotations[{PREFERRED_ANNOTATION}]"
        if not isinstance(text, str):
            raise TopologyError(f"{where}: Invalid value: must be a string")
        preferred = _keys(text, where)
        for k in preferred:
            if k in source:
                raise TopologyError(
                    f"{where}: Invalid value: {k!r}: required already ({source[k]})"
                )
            source[k] = where
    return TopologySpec(tuple(required), preferred, source)


def domains(nodes: NodeTable, keys: Sequence[str], rows: IntpArray) -> list[Domain]:
    """The domains of `keys` among `rows`: nodes grouped by their values of every
    key; nodes without one of the keys are in none. Ordered by the values."""
    return DomainSet.build(nodes, keys, rows).all()


class DomainSet:
    """The domains of some keys among some rows, kept as arrays: each row's
    domain index, so that per-domain sums are one `np.bincount`."""

    __slots__ = ("_bounds", "_order", "index", "keys", "rows", "values")

    def __init__(
        self,
        keys: tuple[str, ...],
        rows: IntpArray,
        index: IntpArray,
        values: list[tuple[str, ...]],
    ) -> None:
        self.keys = keys
        self.rows = rows  # the rows that have every key
        self.index = index  # per row of `rows`: its domain
        self.values = values  # per domain: its values of `keys`
        self._order = np.argsort(index, kind="stable")
        self._bounds = np.searchsorted(index[self._order], np.arange(len(values) + 1))

    @staticmethod
    def build(nodes: NodeTable, keys: Sequence[str], rows: IntpArray) -> DomainSet:
        keys = tuple(keys)
        code = np.zeros(len(rows), dtype=np.int64)
        has = np.ones(len(rows), dtype=bool)
        for k in keys:
            col = nodes.label_column(k)[rows].astype(np.int64)
            has &= col != NO_VALUE
            code = code * (len(nodes.label_values.get(k, ())) + 1) + (col + 1)
        rows, code = rows[has], code[has]
        uniq, inverse = np.unique(code, return_inverse=True)
        inverse = np.asarray(inverse, dtype=np.intp).reshape(-1)
        values: list[tuple[str, ...]] = []
        first = np.zeros(len(uniq), dtype=np.intp)
        first[inverse[::-1]] = np.arange(len(inverse) - 1, -1, -1)  # a row of each domain
        for row in rows[first].tolist():
            values.append(
                tuple(nodes.label_values[k][int(nodes.label_column(k)[row])] for k in keys)
            )
        # Domains ordered by their values, as people read them.
        by_value = sorted(range(len(values)), key=values.__getitem__)
        remap = np.empty(len(values), dtype=np.intp)
        remap[by_value] = np.arange(len(values))
        return DomainSet(keys, rows, remap[inverse], [values[i] for i in by_value])

    def __len__(self) -> int:
        return len(self.values)

    def domain(self, i: int) -> Domain:
        members = np.sort(self.rows[self._order[self._bounds[i] : self._bounds[i + 1]]])
        return Domain(self.keys, self.values[i], members)

    def all(self) -> list[Domain]:
        return [self.domain(i) for i in range(len(self))]

    def domain_of(self, row: int) -> int | None:
        """The domain of a snapshot row; None when the row is not among `rows`."""
        at = np.flatnonzero(self.rows == row)
        return int(self.index[at[0]]) if len(at) else None

    def stamps(self, generation: npt.NDArray[np.int64]) -> list[tuple[int, float]]:
        """Per domain, how many nodes it has and the sum of their `generation`
        (the cache's, by row): the stamp moves whenever one of its nodes, or
        what runs on one, changes."""
        size = np.bincount(self.index, minlength=len(self))
        return list(zip(size.tolist(), self.sums(generation).tolist(), strict=True))

    def sums(self, per_row: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """Per domain, the sum of a per-row quantity (indexed by snapshot row)."""
        weights = per_row[self.rows].astype(np.float64)
        out = np.bincount(self.index, weights=weights, minlength=len(self))
        return out.astype(np.float64, copy=False)


def label_missing(nodes: NodeTable, key: str) -> bool:
    """Whether no node has the label."""
    col = nodes.labels.get(key)
    if col is None:
        return True
    return not bool((col[nodes.valid_rows()] != NO_VALUE).any())


def coarser_or_equal(nodes: NodeTable, wide: str, narrow: str) -> bool:
    """Whether every domain of `narrow` lies within one domain of `wide` (on the
    nodes that have both labels): `wide` is then no narrower than `narrow`."""
    rows = nodes.valid_rows()
    a, b = nodes.label_column(narrow)[rows], nodes.label_column(wide)[rows]
    both = (a != NO_VALUE) & (b != NO_VALUE)
    if not both.any():
        return False
    a, b = a[both].astype(np.int64), b[both].astype(np.int64)
    # One wide value per narrow one: as many distinct (narrow, wide) pairs as
    # distinct narrow values (pairs coded as one integer: a 1-D unique is cheap).
    pairs = np.unique(a * (int(b.max()) + 1) + b)
    return len(pairs) == len(np.unique(a))


@dataclass(frozen=True, slots=True)
class Demand:
    """What a gang's members request, for ranking domains before placing in them:
    each member's (cpu, memory) as the snapshot charges them, smallest first."""

    requests: tuple[tuple[int, int], ...]

    def totals(self, counts: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """The cpu and memory of the first k members, for each k of `counts`
        (between 0 and the number of members)."""
        cum = np.zeros((len(self.requests) + 1, 2), dtype=np.float64)
        if self.requests:
            cum[1:] = np.cumsum(np.array(self.requests, dtype=np.float64), axis=0)
        idx = np.asarray(counts, dtype=np.intp)
        return cum[idx, 0], cum[idx, 1]


def slots(nodes: NodeTable, demand: Demand) -> npt.NDArray[np.int64]:
    """Per snapshot row, how many members fit by cpu, memory and pod count, each
    counted with the least cpu and the least memory any member asks: summed
    over a domain, an upper bound of the members it holds (exact for a gang of
    equal members, as training gangs are)."""
    cpu, mem, pods = nodes.col[CPU], nodes.col[MEMORY], nodes.col[PODS]
    free = nodes.allocatable[:, [cpu, mem, pods]] - nodes.requested[:, [cpu, mem, pods]]
    free = np.maximum(free, 0)
    c = min((r[0] for r in demand.requests), default=0)
    m = min((r[1] for r in demand.requests), default=0)
    big = np.int64(1 << 40)
    out = free[:, 2].copy()
    if c > 0:
        out = np.minimum(out, free[:, 0] // c)
    if m > 0:
        out = np.minimum(out, free[:, 1] // m)
    limited: npt.NDArray[np.int64] = np.minimum(out, big)
    return limited


def rank(
    nodes: NodeTable,
    ds: DomainSet,
    demand: Demand,
    need: int,
    weights: PlacementWeights,
    feasible: BoolArray | None = None,
    whole: bool = False,
) -> tuple[list[int], list[int]]:
    """The domains that could hold `need` members, best predicted placement
    first, and the others, roomiest first. The prediction is kube-scheduler's
    placement score computed on the domain's sums before placing anything:
    members that fit (PodGroupPodsCount) and how full the domain's nodes would
    be with them (NodeResourcesFit's allocation), weighted.

    Members are counted by cpu, memory and pod slots (`slots`, an upper
    bound). `feasible` (per snapshot row: the gang's first member passes
    Filter there) narrows that count to the nodes the first member can use, so
    that what those columns do not show (node selectors, taints, affinity,
    extended resources) ranks too: a domain roomy by the narrowed count ranks
    before one that is not. Only what bounds the placement drops a domain: too
    few slots, or, when the `whole` gang must be placed, no node the first
    member can use. The rest is for the group cycle's trials to tell."""
    n = len(ds)
    if n == 0:
        return [], []
    members = len(demand.requests)
    per_row = slots(nodes, demand)
    bound = ds.sums(per_row)
    fit = bound if feasible is None else ds.sums(np.where(feasible, per_row, 0))
    cpu, mem = nodes.col[CPU], nodes.col[MEMORY]
    alloc_c = ds.sums(nodes.allocatable[:, cpu])
    alloc_m = ds.sums(nodes.allocatable[:, mem])
    used_c = ds.sums(nodes.requested[:, cpu])
    used_m = ds.sums(nodes.requested[:, mem])
    placed = np.minimum(fit, members)
    add_c, add_m = demand.totals(placed)
    with np.errstate(divide="ignore", invalid="ignore"):
        full_c = np.where(alloc_c > 0, np.minimum(1.0, (used_c + add_c) / alloc_c), 0.0)
        full_m = np.where(alloc_m > 0, np.minimum(1.0, (used_m + add_m) / alloc_m), 0.0)
    allocation = 50.0 * (full_c + full_m)
    pods = 100.0 * placed / members if members else np.zeros(n)
    score = weights.pods_count * pods + weights.allocation * allocation
    ok = bound >= max(need, 1)
    if whole and feasible is not None:
        ok &= ds.sums(feasible) > 0
    likely = fit >= max(need, 1)
    names = [",".join(v) for v in ds.values]
    good = sorted(np.flatnonzero(ok).tolist(), key=lambda i: (not likely[i], -score[i], names[i]))
    short = sorted(np.flatnonzero(~ok).tolist(), key=lambda i: (-fit[i], names[i]))
    return good, short


def placement_of(nodes: NodeTable, spec: TopologySpec, node_names: Sequence[str]) -> str | None:
    """Where a group's placed members run, in its own levels: the narrowest of
    its preferred then required levels whose value all of them share
    ("troupe.dev/rack=r7"); None when nothing is placed or they share none."""
    rows = [nodes.row_of[n] for n in node_names if n in nodes.row_of]
    if not rows:
        return None
    for key in (*spec.preferred, *spec.required):
        ids = {int(nodes.label_column(key)[r]) for r in rows}
        if len(ids) == 1 and NO_VALUE not in ids:
            return f"{key}={nodes.label_values[key][ids.pop()]}"
    return None


def group_placement(nodes: NodeTable, pg: PodGroup, node_names: Sequence[str]) -> str | None:
    """`placement_of` for a PodGroup with a topology request (None without one,
    or when its request cannot be read)."""
    try:
        spec = topology_of(pg)
    except TopologyError:
        return None
    if spec.empty:
        return None
    return placement_of(nodes, spec, node_names)


def has_topology(pg: PodGroup) -> bool:
    """Whether the group asks for topology (a request that cannot be read counts)."""
    try:
        return not topology_of(pg).empty
    except TopologyError:
        return True


# ---- kube-scheduler's placement scores, exact ---------------------------------------
#
# What kube-scheduler computes for one feasible placement (its NodeResourcesFit
# placement score and PodGroupPodsCount's normalization), in its integer
# arithmetic, for comparing placements once they are made (`rank` predicts
# before placing).

MAX_PLACEMENT_SCORE: Final = 100
DEFAULT_SCORED_RESOURCES: Final = ((CPU, 1), (MEMORY, 1))


def allocation_score(
    nodes: NodeTable,
    rows: IntpArray,
    pods: Sequence[Pod],
    resources: Sequence[tuple[str, int]] = DEFAULT_SCORED_RESOURCES,
    isolated: IsolatedCPU | None = None,
    charged: bool = False,
) -> int:
    """NodeResourcesFit's placement score: MostAllocated over the sums of the
    placement's nodes (`rows`), with the group's `pods` added (already in the
    table when `charged`), each of `resources` (NodeResourcesFit's
    scoringStrategy.resources: name, weight) weighted as there. As kube-scheduler
    per node: cpu and memory count non-zero requests (100m / 200Mi for a
    container that states none), a scalar resource no pod of the group requests
    is left out, and so is a resource the placement has none of. An isolated
    pod's cpu is charged to the isolated resource, not to cpu."""
    iso = isolated if isolated is not None else IsolatedCPU()
    add: dict[str, int] = {}
    for p in pods:
        if not iso.applies(p):
            add[CPU] = add.get(CPU, 0) + p.nonzero_cpu
        add[MEMORY] = add.get(MEMORY, 0) + p.nonzero_memory
        for name, amount in pod_charge(p, iso).resources.items():
            if name not in (CPU, MEMORY):
                add[name] = add.get(name, 0) + amount
    total = wsum = 0
    for name, weight in resources:
        col = nodes.col.get(name)
        if col is None:
            continue
        if name in (CPU, MEMORY):
            used = _exact_sum(nodes.nonzero_requested[rows, 0 if name == CPU else 1])
        elif name == EPHEMERAL_STORAGE or (is_scalar_resource(name) and add.get(name, 0) > 0):
            used = _exact_sum(nodes.requested[rows, col])
        else:
            continue
        capacity = _exact_sum(nodes.allocatable[rows, col])
        if capacity <= 0:
            continue
        requested = used + (0 if charged else add.get(name, 0))
        total += min(requested, capacity) * MAX_PLACEMENT_SCORE // capacity * weight
        wsum += weight
    return total // wsum if wsum else 0


def _exact_sum(a: npt.NDArray[np.int64]) -> int:
    return int(a.astype(object).sum()) if len(a) else 0


def pods_count_scores(counts: Sequence[int]) -> list[int]:
    """PodGroupPodsCount's normalized scores: each placement's count (members it
    places plus those already scheduled) times 100 over the highest count,
    truncated. No placement with a pod is a bug (kube-scheduler: an error)."""
    top = max(counts, default=0)
    if top <= 0:
        raise ValueError("no pods from the pod group are assigned to any of the placements")
    return [c * MAX_PLACEMENT_SCORE // top for c in counts]


# ---- checks the group cycle may add ---------------------------------------------------


def preferred_order_problem(nodes: NodeTable, spec: TopologySpec) -> str | None:
    """Why the preferred levels are not written narrowest first: a level that
    lies within the one listed before it (`block,rack` for racks within
    blocks). Read that way, a gang would take a whole block before it tried a
    rack; None when the order is right or the levels do not nest."""
    for wide, narrow in itertools.pairwise(spec.preferred):
        if coarser_or_equal(nodes, wide, narrow) and not coarser_or_equal(nodes, narrow, wide):
            return (
                f"{spec.where(wide)}: preferred levels go from the narrowest to the widest, "
                f"but {narrow!r} lies within {wide!r}"
            )
    return None


def members_domain(
    nodes: NodeTable, keys: Sequence[str], node_names: Sequence[str]
) -> tuple[str, ...] | None:
    """The values of `keys` shared by the nodes of a group's placed members (None
    when none is placed), as kube-scheduler's TopologyPlacement reads them:
    TopologyError when a member's node is not in the snapshot, lacks one of the
    labels, or when members run in more than one domain (someone else placed
    them: the group cannot be kept in one domain, and says so)."""
    found: tuple[str, ...] | None = None
    first = ""
    for name in node_names:
        row = nodes.row_of.get(name)
        if row is None or not nodes.valid[row]:
            raise TopologyError(f"a member runs on node {name!r}, which is not in the snapshot")
        ids = [int(nodes.label_column(k)[row]) for k in keys]
        missing = [k for k, v in zip(keys, ids, strict=True) if v == NO_VALUE]
        if missing:
            raise TopologyError(
                f"a member runs on node {name!r}, which has no label {missing[0]!r}"
            )
        values = tuple(nodes.label_values[k][v] for k, v in zip(keys, ids, strict=True))
        if found is None:
            found, first = values, name
        elif values != found:
            raise TopologyError(
                f"members run in more than one domain: {first!r} in "
                + ",".join(f"{k}={v}" for k, v in zip(keys, found, strict=True))
                + f", {name!r} in "
                + ",".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))
            )
    return found
