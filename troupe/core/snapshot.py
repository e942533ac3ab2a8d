"""The columnar node table that Filter and Score plugins read.

Nodes are rows of numpy arrays so that a plugin answers for every candidate node
with a few vectorised operations instead of a Python loop per node (docs/design.md,
"Plugins see columns"). The cache (`troupe.core.cache`) owns one `NodeTable` and
updates it incrementally as nodes and pods come and go; each scheduling cycle
reads a `Snapshot`, a second `NodeTable` into which `Cache.update_snapshot`
copies only the rows whose generation moved since the previous cycle.

Rows are stable: a removed node's row is marked invalid and reused by the next
node added. Plugins must only look at the rows they are given (always valid).

Sums beyond int64: each amount the parser lets through fits int64, but the pods
on one node may sum beyond it (running pods are charged whether they fit or
not). `charge` adds exactly: a cell that would leave int64 holds the nearest
bound (a node charged beyond int64 is full to every filter) and the rest is kept
in `excess`, so that uncharging the same pods restores the exact value. Charging
and uncharging are exact inverses for every input, and never raise.

Units: resource amounts are scaled integers (see `troupe.api.types`): `cpu`
and the isolated-CPU resource in milli-units, everything else in whole units.
The `pods` column holds the node's pod capacity in `allocatable` and its pod
count in `requested`; every pod's charge has `pods = 1`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

from troupe.api.types import (
    CPU,
    INT64_MAX,
    INT64_MIN,
    MEMORY,
    PODS,
    HostPort,
    IsolatedCPU,
    LabelSelector,
    Node,
    NodeName,
    Pod,
    PodAffinityTerm,
    PodKey,
    Requirement,
    SelectorOp,
    Taint,
)

Int64Array = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]
IntpArray = npt.NDArray[np.intp]

BASE_RESOURCES: Final = (CPU, MEMORY, "ephemeral-storage", PODS)
NO_VALUE: Final = -1  # label id of a node that lacks the label key
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class PodMatcher:
    """Which pods a per-node counter counts: a namespace set (None: every
    namespace) and a label selector; pods being deleted are not counted."""

    namespaces: frozenset[str] | None
    selector: LabelSelector

    def matches(self, pod: Pod) -> bool:
        return (
            (self.namespaces is None or pod.namespace in self.namespaces)
            and not pod.deleting
            and self.selector.matches(pod.labels)
        )


# A selector that matches no pod (kube-scheduler's labels.Nothing(), for nil selectors).
MATCH_NOTHING: Final = LabelSelector((Requirement("", SelectorOp.IN, ("\x00",)),))


@dataclass(frozen=True, slots=True)
class TermKey:
    """A pod affinity term carried by pods on the node table, with its kind:
    "anti" (required anti-affinity), "affinity" (required), "preferred" and
    "preferred-anti" (with their weight). The table counts, per row, the pods
    that carry each distinct term."""

    kind: str
    matcher: PodMatcher
    topology_key: str
    weight: int = 0


def term_matcher(
    term: PodAffinityTerm, pod: Pod, namespace_labels: Mapping[str, Mapping[str, str]]
) -> PodMatcher:
    """Which pods a term of `pod` selects (kube-scheduler's AffinityTerm)."""
    sel = term.label_selector if term.label_selector is not None else MATCH_NOTHING
    extra = [
        Requirement(k, SelectorOp.IN, (pod.labels[k],))
        for k in term.match_label_keys
        if k in pod.labels
    ]
    extra += [
        Requirement(k, SelectorOp.NOT_IN, (pod.labels[k],))
        for k in term.mismatch_label_keys
        if k in pod.labels
    ]
    if extra:
        sel = LabelSelector(sel.requirements + tuple(extra))
    namespaces: frozenset[str] | None
    if term.namespace_selector is None:
        namespaces = frozenset(term.namespaces or (pod.namespace,))
    elif not term.namespace_selector.requirements:
        namespaces = None  # an empty namespaceSelector: every namespace
    else:
        namespaces = frozenset(term.namespaces) | frozenset(
            n for n, labels in namespace_labels.items() if term.namespace_selector.matches(labels)
        )
    return PodMatcher(namespaces, sel)


def pod_term_keys(
    pod: Pod, namespace_labels: Mapping[str, Mapping[str, str]]
) -> tuple[TermKey, ...]:
    """The affinity terms `pod` carries, as the node table counts them."""
    out: list[TermKey] = []
    for kind, aff in (("affinity", pod.pod_affinity), ("anti", pod.pod_anti_affinity)):
        if aff is None:
            continue
        out += [
            TermKey(kind, term_matcher(t, pod, namespace_labels), t.topology_key)
            for t in aff.required
        ]
        preferred = "preferred" if kind == "affinity" else "preferred-anti"
        out += [
            TermKey(
                preferred,
                term_matcher(w.term, pod, namespace_labels),
                w.term.topology_key,
                w.weight,
            )
            for w in aff.preferred
        ]
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Charge:
    """What a pod costs a node: resource amounts (with pods=1) and the non-zero
    cpu/memory used by scoring (cpu 0 for an isolated pod: it does not use `cpu`)."""

    resources: Mapping[str, int]
    nonzero_cpu: int
    nonzero_memory: int


def check_node(node: Node) -> None:
    """Raise ValueError naming the field if the node cannot be held in a row."""
    for r, v in node.allocatable.items():
        if not 0 <= v <= INT64_MAX:
            raise ValueError(
                f"status.allocatable.{r}: Invalid value: {v}: must be between 0 and {INT64_MAX}"
            )


class ImageIndex(dict[str, dict[int, int]]):
    """Image name -> row -> size in bytes, with a version that moves on every
    change to it (a node's images set or cleared): readers may keep what they
    derive from it (ImageLocality's largest size per image) while the version
    holds. The cache's table and its snapshot share one index."""

    version: int = 0


def pod_charge(pod: Pod, isolated: IsolatedCPU) -> Charge:
    res = dict(pod.requests)
    res[PODS] = 1
    nonzero_cpu = pod.nonzero_cpu
    if isolated.applies(pod):
        cpu = res.pop(CPU, 0)
        if cpu:
            res[isolated.resource] = res.get(isolated.resource, 0) + cpu
        nonzero_cpu = 0
    return Charge(res, nonzero_cpu, pod.nonzero_memory)


class NodeTable:
    """Rows of nodes. Attributes are read by plugins; only the cache writes."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.n_rows = 0  # rows in use or freed; valid ones have valid[row]
        self.valid: BoolArray = np.zeros(capacity, dtype=bool)
        self.names: list[str] = []
        self.row_of: dict[str, int] = {}
        self.free_rows: list[int] = []
        self.generation: Int64Array = np.zeros(capacity, dtype=np.int64)

        self.resources: list[str] = list(BASE_RESOURCES)
        self.col: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self.allocatable: Int64Array = np.zeros((capacity, len(self.resources)), dtype=np.int64)
        self.requested: Int64Array = np.zeros((capacity, len(self.resources)), dtype=np.int64)
        # Non-zero requested cpu (milli) and memory, for scoring.
        self.nonzero_requested: Int64Array = np.zeros((capacity, 2), dtype=np.int64)
        # What `requested` / `nonzero_requested` cells hold beyond int64, by (row, col).
        self.excess: dict[tuple[int, int], int] = {}
        self.nonzero_excess: dict[tuple[int, int], int] = {}
        self.unschedulable: BoolArray = np.zeros(capacity, dtype=bool)

        # Labels: per key a column of value ids (NO_VALUE when absent).
        self.labels: dict[str, Int32Array] = {}
        self.label_ids: dict[str, dict[str, int]] = {}  # key -> value -> id
        self.label_values: dict[str, list[str]] = {}  # key -> id -> value

        # Taints: a vocabulary of distinct taints and a (rows x taints) matrix.
        self.taint_ids: dict[Taint, int] = {}
        self.taint_list: list[Taint] = []
        self.taint_matrix: BoolArray = np.zeros((capacity, 0), dtype=bool)
        # Declared features (status.declaredFeatures): a vocabulary of names and a
        # (rows x features) matrix, as taints.
        self.feature_ids: dict[str, int] = {}
        self.feature_list: list[str] = []
        self.feature_matrix: BoolArray = np.zeros((capacity, 0), dtype=bool)

        # Sparse per-node data (most nodes have none of it).
        self.node_objs: list[Node | None] = []
        self.pods: list[dict[PodKey, Pod]] = []
        # (protocol, port) -> row -> Counter of host IPs in use.
        self.port_index: dict[tuple[str, int], dict[int, Counter[str]]] = {}
        # image name -> row -> size in bytes.
        self.image_index = ImageIndex()
        # Per-node counts of the pods each registered matcher matches, kept
        # incrementally by `charge` (topology spread, inter-pod affinity).
        self.counters: dict[PodMatcher, Int64Array] = {}
        # Per distinct affinity term carried by placed pods, how many pods on each
        # row carry it (inter-pod affinity's symmetric checks and scores).
        self.term_counters: dict[TermKey, Int64Array] = {}
        # Namespace name -> labels, for namespaceSelector (kept by the cache).
        self.namespace_labels: dict[str, Mapping[str, str]] = {}

    # ---- reading -------------------------------------------------------------

    def valid_rows(self) -> IntpArray:
        return np.flatnonzero(self.valid[: self.n_rows])

    @property
    def num_nodes(self) -> int:
        return len(self.row_of)

    def node(self, row: int) -> Node:
        obj = self.node_objs[row]
        if obj is None:
            raise KeyError(f"row {row} holds no node")
        return obj

    def name(self, row: int) -> NodeName:
        return NodeName(self.names[row])

    def label_column(self, key: str) -> Int32Array:
        """Value ids of `key` for every row (NO_VALUE where absent)."""
        col = self.labels.get(key)
        if col is None:
            return np.full(self.capacity, NO_VALUE, dtype=np.int32)
        return col

    def match_counts(self, matcher: PodMatcher) -> Int64Array:
        """Per row, how many of its pods `matcher` matches. The first call for a
        matcher counts every pod once; after that `charge` keeps it up to date."""
        counts = self.counters.get(matcher)
        if counts is None:
            counts = np.zeros(self.capacity, dtype=np.int64)
            for row in self.valid_rows().tolist():
                counts[row] = sum(1 for p in self.pods[row].values() if matcher.matches(p))
            self.counters[matcher] = counts
        return counts

    # ---- writing (cache only) -------------------------------------------------

    def _grow_rows(self, need: int) -> None:
        if need <= self.capacity:
            return
        cap = max(need, self.capacity * 2)

        def grow(a: np.ndarray, fill: object = 0) -> np.ndarray:
            shape = (cap, *a.shape[1:])
            b = np.full(shape, fill, dtype=a.dtype)
            b[: a.shape[0]] = a
            return b

        self.valid = grow(self.valid, False)
        self.generation = grow(self.generation)
        self.allocatable = grow(self.allocatable)
        self.requested = grow(self.requested)
        self.nonzero_requested = grow(self.nonzero_requested)
        self.unschedulable = grow(self.unschedulable, False)
        self.taint_matrix = grow(self.taint_matrix, False)
        self.feature_matrix = grow(self.feature_matrix, False)
        for k, v in list(self.labels.items()):
            self.labels[k] = grow(v, NO_VALUE)
        for m, c in list(self.counters.items()):
            self.counters[m] = grow(c)
        for t, c in list(self.term_counters.items()):
            self.term_counters[t] = grow(c)
        self.capacity = cap

    def ensure_resource(self, name: str) -> int:
        c = self.col.get(name)
        if c is not None:
            return c
        self.resources.append(name)
        c = len(self.resources) - 1
        self.col[name] = c
        pad = np.zeros((self.capacity, 1), dtype=np.int64)
        self.allocatable = np.hstack([self.allocatable, pad])
        self.requested = np.hstack([self.requested, pad])
        return c

    def _ensure_taint(self, taint: Taint) -> int:
        t = self.taint_ids.get(taint)
        if t is not None:
            return t
        t = len(self.taint_list)
        self.taint_ids[taint] = t
        self.taint_list.append(taint)
        self.taint_matrix = np.hstack([self.taint_matrix, np.zeros((self.capacity, 1), dtype=bool)])
        return t

    def _ensure_feature(self, name: str) -> int:
        f = self.feature_ids.get(name)
        if f is None:
            f = self.feature_ids[name] = len(self.feature_list)
            self.feature_list.append(name)
            pad = np.zeros((self.capacity, 1), dtype=bool)
            self.feature_matrix = np.hstack([self.feature_matrix, pad])
        return f

    def _label_id(self, key: str, value: str) -> int:
        ids = self.label_ids.setdefault(key, {})
        i = ids.get(value)
        if i is None:
            i = len(ids)
            ids[value] = i
            self.label_values.setdefault(key, []).append(value)
        if key not in self.labels:
            self.labels[key] = np.full(self.capacity, NO_VALUE, dtype=np.int32)
        return i

    def allocate_row(self, name: str) -> int:
        if self.free_rows:
            row = self.free_rows.pop()
            self.names[row] = name
            self.pods[row] = {}
        else:
            row = self.n_rows
            self._grow_rows(row + 1)
            self.n_rows += 1
            self.names.append(name)
            self.node_objs.append(None)
            self.pods.append({})
        self.row_of[name] = row
        self.valid[row] = True
        return row

    def set_node(self, row: int, node: Node) -> None:
        """Write a node's own columns (not its pods') into `row`: whole, or (if an
        amount does not fit int64) not at all, raising ValueError."""
        check_node(node)
        old = self.node_objs[row]
        self.node_objs[row] = node
        for r in node.allocatable:
            self.ensure_resource(r)
        self.allocatable[row] = 0
        for r, v in node.allocatable.items():
            self.allocatable[row, self.col[r]] = v
        self.unschedulable[row] = node.unschedulable
        if old is not None:
            for key in old.labels:
                if key not in node.labels:
                    self.labels[key][row] = NO_VALUE
        for key, value in node.labels.items():
            i = self._label_id(key, value)
            self.labels[key][row] = i
        self.taint_matrix[row] = False
        for taint in node.taints:
            t = self._ensure_taint(taint)  # may widen the matrix: index after
            self.taint_matrix[row, t] = True
        self.feature_matrix[row] = False
        for name in node.declared_features:
            f = self._ensure_feature(name)  # may widen the matrix: index after
            self.feature_matrix[row, f] = True
        if old is not None:
            for img in old.images:
                for n in img.names:
                    self.image_index.get(n, {}).pop(row, None)
        for img in node.images:
            for n in img.names:
                self.image_index.setdefault(n, {})[row] = img.size_bytes
        if node.images or (old is not None and old.images):
            self.image_index.version += 1
        self.generation[row] += 1

    def clear_row(self, row: int) -> None:
        node = self.node_objs[row]
        if node is not None:
            for img in node.images:
                for n in img.names:
                    self.image_index.get(n, {}).pop(row, None)
            if node.images:
                self.image_index.version += 1
        for pod in list(self.pods[row].values()):
            self._ports(row, pod.host_ports, -1)
        del self.row_of[self.names[row]]
        self.names[row] = ""
        self.node_objs[row] = None
        self.pods[row] = {}
        self.valid[row] = False
        self.allocatable[row] = 0
        self.requested[row] = 0
        self.nonzero_requested[row] = 0
        for excess in (self.excess, self.nonzero_excess):
            for cell in [k for k in excess if k[0] == row]:
                del excess[cell]
        self.unschedulable[row] = False
        self.taint_matrix[row] = False
        self.feature_matrix[row] = False
        for col in self.labels.values():
            col[row] = NO_VALUE
        for counts in self.counters.values():
            counts[row] = 0
        for counts in self.term_counters.values():
            counts[row] = 0
        self.generation[row] += 1
        self.free_rows.append(row)

    def _ports(self, row: int, ports: Iterable[HostPort], sign: int) -> None:
        for hp in ports:
            by_row = self.port_index.setdefault((hp.protocol, hp.port), {})
            ips = by_row.setdefault(row, Counter())
            ips[hp.host_ip] += sign
            if ips[hp.host_ip] <= 0:
                del ips[hp.host_ip]
            if not ips:
                del by_row[row]

    def requested_exact(self, row: int, col: int) -> int:
        """The exact requested amount of a cell, beyond int64 included."""
        return int(self.requested[row, col]) + self.excess.get((row, col), 0)

    def charge(self, row: int, pod: Pod, charge: Charge, sign: int) -> None:
        """Add (sign=1) or remove (sign=-1) a pod's charge on a row (exactly: see
        the module docstring on sums beyond int64)."""
        for r, v in charge.resources.items():
            c = self.col.get(r)
            if c is None:
                c = self.ensure_resource(r)
            _add_exact(self.requested, self.excess, row, c, sign * v)
        _add_exact(self.nonzero_requested, self.nonzero_excess, row, 0, sign * charge.nonzero_cpu)
        _add_exact(
            self.nonzero_requested, self.nonzero_excess, row, 1, sign * charge.nonzero_memory
        )
        if pod.host_ports:
            self._ports(row, pod.host_ports, sign)
        if sign > 0:
            self.pods[row][pod.key] = pod
        else:
            self.pods[row].pop(pod.key, None)
        self._count(row, pod, sign)
        self.generation[row] += 1

    @contextlib.contextmanager
    def overlay(self) -> Iterator[Overlay]:
        """Temporary charges: pods added to or removed from rows inside the block
        are undone, in reverse order, when it ends, however it ends (the group
        cycle's placements, preemption's removed victims, nominated pods)."""
        ov = Overlay(self)
        try:
            yield ov
        finally:
            ov.rollback()

    def _count(self, row: int, pod: Pod, sign: int) -> None:
        """The pod in (sign=1) or out of the row's label counters and pod
        (anti-)affinity term counters."""
        for matcher, counts in self.counters.items():
            if matcher.matches(pod):
                counts[row] += sign
        if pod.pod_affinity is not None or pod.pod_anti_affinity is not None:
            for tk in pod_term_keys(pod, self.namespace_labels):
                tc = self.term_counters.get(tk)
                if tc is None:
                    tc = self.term_counters[tk] = np.zeros(self.capacity, dtype=np.int64)
                tc[row] += sign

    def charge_vector(self, charge: Charge) -> tuple[Int64Array, Int64Array]:
        """A charge as dense rows: (amounts over `resources`, non-zero cpu/memory),
        for `charge_dense`. New resources get their column first."""
        for r in charge.resources:
            if r not in self.col:
                self.ensure_resource(r)
        amounts = np.zeros(len(self.resources), dtype=np.int64)
        for r, v in charge.resources.items():
            amounts[self.col[r]] = v
        return amounts, np.array([charge.nonzero_cpu, charge.nonzero_memory], dtype=np.int64)

    def charge_dense(
        self,
        rows: IntpArray,
        pods: Sequence[Pod],
        charges: Sequence[Charge],
        amounts: Int64Array,
        nonzero: Int64Array,
        sign: int,
        keys: Sequence[PodKey] | None = None,
    ) -> None:
        """`charge(rows[i], pods[i], charges[i], sign)` for every i, the same
        result, with the resource cells written by a few numpy operations
        (preemption's dry runs move thousands of pods per attempt). `amounts`
        and `nonzero` are the charges as `charge_vector` gives them, stacked;
        `amounts` may have fewer columns than the table (later resources: 0).
        Where a sum could leave int64 it falls back to `charge`, pod by pod.
        `keys`: the pods' keys, if the caller has them at hand."""
        n = len(rows)
        if n == 0:
            return
        width = amounts.shape[1]
        if (
            self.excess
            or self.nonzero_excess
            or width > len(self.resources)
            or int(np.abs(amounts).max(initial=0)) * n >= _SAFE
            or int(np.abs(nonzero).max(initial=0)) * n >= _SAFE
            or int(np.abs(self.requested[rows, :width]).max(initial=0)) >= _SAFE
            or int(np.abs(self.nonzero_requested[rows]).max(initial=0)) >= _SAFE
        ):
            for row, pod, ch in zip(rows.tolist(), pods, charges, strict=True):
                self.charge(row, pod, ch, sign)
            return
        if sign > 0:
            np.add.at(self.requested[:, :width], rows, amounts)
            np.add.at(self.nonzero_requested, rows, nonzero)
        else:
            np.subtract.at(self.requested[:, :width], rows, amounts)
            np.subtract.at(self.nonzero_requested, rows, nonzero)
        np.add.at(self.generation, rows, 1)
        table = self.pods
        row_list = rows.tolist()
        if keys is None:
            keys = [pod.key for pod in pods]
        if sign > 0:
            for row, key, pod in zip(row_list, keys, pods, strict=True):
                table[row][key] = pod
        else:
            for row, key in zip(row_list, keys, strict=True):
                table[row].pop(key, None)
        for row, pod in zip(row_list, pods, strict=True):
            if pod.host_ports:
                self._ports(row, pod.host_ports, sign)
            self._count(row, pod, sign)

    # ---- copying (cache -> snapshot) -----------------------------------------

    def copy_rows_from(self, src: NodeTable, rows: IntpArray | None) -> None:
        """Make this table equal to `src`, copying only `rows` (None: everything).

        A partial copy is only valid when `src` changed nothing but those rows'
        values: no node added or removed, no new resource, taint, declared feature or
        label key (the cache tracks that and asks for a full copy otherwise).
        """
        if rows is None or src.capacity != self.capacity:
            self._copy_all(src)
            return
        if len(rows) == 0:
            return
        if len(rows) <= 3:
            # A cycle's usual few rows: a row by its int index is a view, a
            # fraction of the cost of gathering by an index array (0.5 against
            # 2.6 us a 2-D row, timeit).
            for r in rows.tolist():
                self._copy_dense(src, r)
        else:
            self._copy_dense(src, rows)
        self.excess = dict(src.excess)
        self.nonzero_excess = dict(src.nonzero_excess)
        for r in rows.tolist():
            self.names[r] = src.names[r]
            self.node_objs[r] = src.node_objs[r]
            self.pods[r] = dict(src.pods[r])
        self._share_sparse(src)

    def _copy_dense(self, src: NodeTable, idx: int | IntpArray) -> None:
        """The numeric columns of row `idx` (or rows) from `src`."""
        self.valid[idx] = src.valid[idx]
        self.generation[idx] = src.generation[idx]
        self.allocatable[idx] = src.allocatable[idx]
        self.requested[idx] = src.requested[idx]
        self.nonzero_requested[idx] = src.nonzero_requested[idx]
        self.unschedulable[idx] = src.unschedulable[idx]
        self.taint_matrix[idx] = src.taint_matrix[idx]
        self.feature_matrix[idx] = src.feature_matrix[idx]
        for k, col in src.labels.items():
            self.labels[k][idx] = col[idx]
        _copy_counter_rows(self.counters, src.counters, idx)
        _copy_counter_rows(self.term_counters, src.term_counters, idx)

    def _share_sparse(self, src: NodeTable) -> None:
        # Vocabularies are append-only; port and image indexes are rebuilt by the
        # cache on change and are small, so the snapshot copies them shallowly.
        self.label_ids = src.label_ids
        self.label_values = src.label_values
        self.taint_ids = src.taint_ids
        self.taint_list = list(src.taint_list)
        self.feature_ids = src.feature_ids
        self.feature_list = list(src.feature_list)
        if src.port_index or self.port_index:
            self.port_index = {
                k: {r: Counter(c) for r, c in v.items()} for k, v in src.port_index.items()
            }
        self.image_index = src.image_index
        self.namespace_labels = src.namespace_labels

    def _copy_all(self, src: NodeTable) -> None:
        self.capacity = src.capacity
        self.n_rows = src.n_rows
        self.valid = src.valid.copy()
        self.names = list(src.names)
        self.row_of = dict(src.row_of)
        self.free_rows = list(src.free_rows)
        self.generation = src.generation.copy()
        self.resources = list(src.resources)
        self.col = dict(src.col)
        self.allocatable = src.allocatable.copy()
        self.requested = src.requested.copy()
        self.nonzero_requested = src.nonzero_requested.copy()
        self.excess = dict(src.excess)
        self.nonzero_excess = dict(src.nonzero_excess)
        self.unschedulable = src.unschedulable.copy()
        self.labels = {k: v.copy() for k, v in src.labels.items()}
        self.taint_matrix = src.taint_matrix.copy()
        self.feature_matrix = src.feature_matrix.copy()
        self.node_objs = list(src.node_objs)
        self.pods = [dict(p) for p in src.pods]
        self.counters = {m: c.copy() for m, c in src.counters.items()}
        self.term_counters = {t: c.copy() for t, c in src.term_counters.items()}
        self._share_sparse(src)


class Overlay:
    """The charges made inside one `NodeTable.overlay()` block (see there)."""

    __slots__ = ("_table", "_undo")

    def __init__(self, table: NodeTable) -> None:
        self._table = table
        self._undo: list[tuple[int, Pod, Charge, int]] = []

    def add(self, row: int, pod: Pod, charge: Charge) -> None:
        """Charge `pod` on `row` until the block ends."""
        self._table.charge(row, pod, charge, +1)
        self._undo.append((row, pod, charge, -1))

    def remove(self, row: int, pod: Pod, charge: Charge) -> None:
        """Uncharge `pod` (placed on `row`) until the block ends."""
        self._table.charge(row, pod, charge, -1)
        self._undo.append((row, pod, charge, +1))

    def rollback(self) -> None:
        self.rollback_to(0)

    def mark(self) -> int:
        """A point to roll back to (`rollback_to`): what is charged so far stays."""
        return len(self._undo)

    def rollback_to(self, mark: int) -> None:
        """Undo the charges made since `mark`."""
        undo = self._undo[mark:]
        del self._undo[mark:]
        for row, pod, charge, sign in reversed(undo):
            self._table.charge(row, pod, charge, sign)


def _add_exact(
    cells: Int64Array, excess: dict[tuple[int, int], int], row: int, col: int, delta: int
) -> None:
    """cells[row, col] += delta, the part beyond int64 kept in `excess`."""
    if not delta:
        return
    cell = (row, col)
    new = int(cells[row, col]) + delta
    if excess:
        new += excess.pop(cell, 0)
    if INT64_MIN <= new <= INT64_MAX:
        cells[row, col] = new
        return
    bound = INT64_MAX if new > 0 else INT64_MIN
    cells[row, col] = bound
    excess[cell] = new - bound


# Sums of cells and deltas below this bound cannot leave int64.
_SAFE: Final = 2**62


def _copy_counter_rows(
    mine: dict[K, Int64Array], theirs: Mapping[K, Int64Array], rows: int | IntpArray
) -> None:
    for key, counts in theirs.items():
        have = mine.get(key)
        if have is None:
            mine[key] = counts.copy()
        else:
            have[rows] = counts[rows]


class Snapshot(NodeTable):
    """The per-cycle view. `Cache.update_snapshot` keeps it equal to the cache's
    table by copying the rows whose generation moved."""
