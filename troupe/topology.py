"""Topology of a gang: which node label its members must (required) or should
(preferred) share, and the candidate domains, their order and their scores.

A PodGroup asks for topology in two ways, read into one `TopologySpec`:

- Kubernetes' own PodGroup (scheduling.k8s.io v1alpha2/v1beta1):
  `spec.schedulingConstraints.topology: [{key: <node label>}]` (also read in
  the KEP's spelling `topologyConstraints: [{level: ...}]`). Every key listed is
  required: all members on nodes that share one value of each.
- Either API, through annotations on the PodGroup (scheduler-plugins' CRD has no
  field for it): `troupe.dev/topology-required: <node label>` and
  `troupe.dev/topology-preferred: <label>,<label>,...` from the narrowest level
  to the widest (rack, then block, then zone).

The group cycle (group_cycle.py) generates the candidate domains from the
snapshot's label columns (`domains`), drops those that cannot hold the gang's
requests at all and tries the rest tightest first (`ordered`), at most
`domains_per_cycle` of them, placing the gang in each with the ordinary member
search restricted to the domain; feasible placements are scored as
kube-scheduler's placement scoring does (PodGroupPodsCount: members placed;
NodeResourcesFit: the domain's allocation after the placement, so gangs fill
domains instead of fragmenting them), and the best is taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from troupe.api.types import CPU, MEMORY, PodGroup
from troupe.framework.fit import NodeSubset
from troupe.snapshot import NO_VALUE, NodeTable

IntpArray = npt.NDArray[np.intp]

REQUIRED_ANNOTATION: Final = "troupe.dev/topology-required"
PREFERRED_ANNOTATION: Final = "troupe.dev/topology-preferred"
NATIVE_FIELD: Final = "spec.schedulingConstraints.topology"
# Domains placed per group cycle and level when the profile does not say.
DEFAULT_DOMAINS_PER_CYCLE: Final = 16
MAX_KEY_LENGTH: Final = 317  # a label key: prefix (253) + "/" + name (63)


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
        if len(k) > MAX_KEY_LENGTH or any(c.isspace() for c in k):
            raise TopologyError(f"{where}: Invalid value: {k!r}: not a label key")
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
    if len(rows) == 0:
        return []
    cols = [nodes.label_column(k)[rows] for k in keys]
    has = np.ones(len(rows), dtype=bool)
    for c in cols:
        has &= c != NO_VALUE
    rows = rows[has]
    if len(rows) == 0:
        return []
    ids = np.stack([c[has] for c in cols], axis=1)
    uniq, inverse = np.unique(ids, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
    out = []
    for i, combo in enumerate(uniq.tolist()):
        members = np.sort(rows[order[bounds[i] : bounds[i + 1]]])
        values = tuple(nodes.label_values[k][v] for k, v in zip(keys, combo, strict=True))
        out.append(Domain(tuple(keys), values, members))
    out.sort(key=lambda d: d.values)
    return out


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
    pairs = np.unique(np.stack([a[both], b[both]], axis=1), axis=0)
    return len(np.unique(pairs[:, 0])) == len(pairs)


def free(nodes: NodeTable, rows: IntpArray) -> tuple[int, int, int, int]:
    """(free cpu, free memory, allocatable cpu, allocatable memory) over `rows`."""
    cpu, mem = nodes.col[CPU], nodes.col[MEMORY]
    alloc = nodes.allocatable[rows]
    used = nodes.requested[rows]
    fc = int(np.maximum(alloc[:, cpu] - used[:, cpu], 0).sum())
    fm = int(np.maximum(alloc[:, mem] - used[:, mem], 0).sum())
    return fc, fm, int(alloc[:, cpu].sum()), int(alloc[:, mem].sum())


def ordered(
    nodes: NodeTable, candidates: Sequence[Domain], demand: tuple[int, int]
) -> tuple[list[Domain], list[Domain]]:
    """The candidates that could hold `demand` (cpu, memory) in sum, tightest
    first (least free capacity left after it, so gangs fill domains), and those
    that cannot, the roomiest first."""
    keep: list[tuple[float, str, Domain]] = []
    short: list[tuple[float, str, Domain]] = []
    for d in candidates:
        fc, fm, ac, am = free(nodes, d.rows)
        left = (fc - demand[0]) / ac if ac else 0.0
        left += (fm - demand[1]) / am if am else 0.0
        if fc < demand[0] or fm < demand[1]:
            short.append((-left, d.name, d))
        else:
            keep.append((left, d.name, d))
    keep.sort(key=lambda t: (t[0], t[1]))
    short.sort(key=lambda t: (t[0], t[1]))
    return [d for _, _, d in keep], [d for _, _, d in short]


def allocation_score(nodes: NodeTable, rows: IntpArray) -> float:
    """NodeResourcesFit's placement score: how full the domain's nodes are, 0-100
    (cpu and memory averaged), measured with the placement charged."""
    cpu, mem = nodes.col[CPU], nodes.col[MEMORY]
    alloc = nodes.allocatable[rows]
    used = nodes.requested[rows]
    parts = []
    for c in (cpu, mem):
        total = int(alloc[:, c].sum())
        if total > 0:
            parts.append(min(1.0, int(used[:, c].sum()) / total))
    return 100.0 * sum(parts) / len(parts) if parts else 0.0


def placement_score(
    placed: int, members: int, allocation: float, weights: PlacementWeights
) -> float:
    """PodGroupPodsCount (members placed, 0-100) and NodeResourcesFit (allocation)."""
    pods = 100.0 * placed / members if members else 0.0
    return weights.pods_count * pods + weights.allocation * allocation


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
