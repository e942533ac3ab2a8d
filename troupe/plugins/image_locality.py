"""ImageLocality: prefer nodes that already have the pod's container images,
weighted by how widely each image has spread (kube-scheduler
imagelocality/image_locality.go).

For each of the pod's containers and init containers whose image a node has,
the node earns size * (nodes with the image / all nodes), truncated; the sum is
clamped to [23 MiB, 1000 MiB * number of containers] and scaled to 0..100.
Image names are normalized as kube-scheduler's normalizedImageName (":latest"
added to an untagged name) when the pod and the node are parsed (one function,
`troupe.api.parse.normalized_image_name`, for both), and looked up in the node
table's sparse image index (name -> row -> size). PreScore returns SKIP when no
node has any of them.

An image on a few nodes is read straight from the index and only the rows
holding it are scored (every other row scores 0). An image on many nodes (a
base image on every node) is read through a per-image array of sizes by row,
kept across cycles and refreshed only on the rows whose generation moved,
because turning thousands of index entries into arrays every cycle would cost
more than the rest of the cycle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from troupe.api.types import Pod
from troupe.core.snapshot import ImageIndex, NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.interface import (
    MAX_NODE_SCORE,
    Int64Array,
    IntpArray,
    NoArgs,
    PreScorePlugin,
    ScorePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Status

MB: Final = 1024 * 1024
MIN_THRESHOLD: Final = 23 * MB
MAX_CONTAINER_THRESHOLD: Final = 1000 * MB
_STATE_KEY: Final = "PreScoreImageLocality"


def pod_images(pod: Pod) -> tuple[tuple[str, ...], int]:
    """The normalized images of the pod's init containers and containers, and how
    many containers that is (both count, as in kube-scheduler's Score)."""
    return pod.images, max(pod.num_containers, 1)


def calculate_priority(sums: Int64Array, num_containers: int) -> Int64Array:
    """calculatePriority: clamp, then scale to 0..100."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    clamped = np.clip(sums, MIN_THRESHOLD, max_threshold)
    out: Int64Array = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)
    return out


def _scaled(sizes: Int64Array, spread: float) -> Int64Array:
    """scaledImageScore: int64(float64(size) * spread) where the image is (size >= 0)."""
    out: Int64Array = np.where(sizes >= 0, (sizes.astype(np.float64) * spread).astype(np.int64), 0)
    return out


@dataclass(frozen=True, slots=True)
class _Images:
    present: tuple[str, ...]  # the pod's images some node has (repeats kept)
    num_containers: int
    # No node can sum above MIN_THRESHOLD: every score is 0 (see `_all_zero`).
    all_zero: bool = False


# An image on more nodes than this is read through a per-image row cache
# (`_ImageRows`) instead of straight from the index: turning a dict of thousands
# of rows into arrays costs more than the rest of the cycle.
_SPARSE_MAX: Final = 256
_CACHE_MAX: Final = 128


@dataclass(slots=True)
class _ImageRows:
    """One image's size on every row of a table (-1: not there), as of the row
    generations in `generation`. Every change to a row's images bumps its
    generation, so only the rows whose generation moved are read again."""

    table: NodeTable
    generation: Int64Array  # the table's row generations when last read
    sizes: Int64Array  # capacity long
    # scaledImageScore per row for `spread` (0 where absent), and the rows whose
    # size was read again since (their scaled score is stale)
    scaled: Int64Array | None = None
    spread: float = -1.0
    stale: list[int] = field(default_factory=list)


class ImageLocality(NoArgs, PreScorePlugin, ScorePlugin):
    NAME: Final = "ImageLocality"

    def __init__(self) -> None:
        self._rows: OrderedDict[str, _ImageRows] = OrderedDict()
        # image -> (index, its version, the largest size of the image on any row)
        self._largest: dict[str, tuple[ImageIndex, int, int]] = {}

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        images, num_containers = pod_images(pod)
        index = nodes.image_index
        present = tuple(i for i in images if index.get(i))
        if not present:
            return SKIP
        state.write(_STATE_KEY, _Images(present, num_containers, self._all_zero(nodes, present)))
        return SUCCESS

    def _all_zero(self, nodes: NodeTable, present: tuple[str, ...]) -> bool:
        """Whether no row can sum above MIN_THRESHOLD (so all score 0): each
        image's scaled score is monotonic in its size, so no row's sum exceeds
        the sum of every image's largest size scaled. Small images everywhere
        (pause, a sidecar) then cost no arrays at all."""
        index = nodes.image_index
        total_nodes = nodes.num_nodes
        bound = 0
        for image in present:
            by_row = index[image]
            known = self._largest.get(image)
            if known is not None and known[0] is index and known[1] == index.version:
                largest = known[2]
            else:
                largest = max(by_row.values())
                self._largest[image] = (index, index.version, largest)
                if len(self._largest) > 4 * _CACHE_MAX:
                    del self._largest[next(iter(self._largest))]
            # scaledImageScore as in `score`: int64(float64(size) * spread)
            bound += max(0, int(float(largest) * (len(by_row) / total_nodes)))
            if bound > MIN_THRESHOLD:
                return False
        return True

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        s = state.read(_STATE_KEY, _Images)
        if s.all_zero:
            zero: Int64Array = np.zeros(len(rows), dtype=np.int64)
            return zero
        total_nodes = nodes.num_nodes
        sums: Int64Array = np.zeros(nodes.capacity, dtype=np.int64)
        touched: list[IntpArray] = []
        dense = False
        for image in s.present:
            by_row = nodes.image_index.get(image)
            if not by_row:
                continue
            spread = len(by_row) / total_nodes
            if len(by_row) <= _SPARSE_MAX:
                idx: IntpArray = np.fromiter(by_row.keys(), dtype=np.intp, count=len(by_row))
                size = np.fromiter(by_row.values(), dtype=np.float64, count=len(by_row))
                # scaledImageScore: int64(float64(size) * spread); rows distinct per image
                sums[idx] += (size * spread).astype(np.int64)
                touched.append(idx)
            else:
                e = self._sizes(nodes, image, by_row)
                if e.scaled is None or e.spread != spread:
                    e.scaled, e.spread = _scaled(e.sizes, spread), spread
                elif e.stale:
                    at = np.array(e.stale, dtype=np.intp)
                    e.scaled[at] = _scaled(e.sizes[at], spread)
                e.stale.clear()
                sums += e.scaled
                dense = True
        if dense:
            out: Int64Array = calculate_priority(sums[rows], s.num_containers)
            return out
        # Only the rows holding an image can score above 0.
        prio: Int64Array = np.zeros(nodes.capacity, dtype=np.int64)
        if touched:
            hit = np.unique(np.concatenate(touched))
            prio[hit] = calculate_priority(sums[hit], s.num_containers)
        out = prio[rows]
        return out

    def _sizes(self, nodes: NodeTable, image: str, by_row: Mapping[int, int]) -> _ImageRows:
        """The image's size per row of `nodes` (-1 where absent), from the cache when
        the rows it read are unchanged, re-reading the few rows that changed (and
        then forgetting the scaled scores made from them)."""
        n = nodes.n_rows
        gen = nodes.generation[:n]
        e = self._rows.get(image)
        if e is not None and e.table is nodes and len(e.sizes) == nodes.capacity:
            self._rows.move_to_end(image)
            m = len(e.generation)
            changed = np.flatnonzero(gen[:m] != e.generation[: min(m, n)])
            if len(changed) + max(n - m, 0) <= max(n // 8, 16):
                if len(changed) or n > m:
                    moved = [*changed.tolist(), *range(m, n)]
                    for r in moved:
                        e.sizes[r] = by_row.get(r, -1)
                    e.generation = gen.copy()
                    e.stale.extend(moved)
                return e
        sizes: Int64Array = np.full(nodes.capacity, -1, dtype=np.int64)
        idx = np.fromiter(by_row.keys(), dtype=np.intp, count=len(by_row))
        sizes[idx] = np.fromiter(by_row.values(), dtype=np.int64, count=len(by_row))
        e = self._rows[image] = _ImageRows(nodes, gen.copy(), sizes)
        self._rows.move_to_end(image)
        while len(self._rows) > _CACHE_MAX:
            self._rows.popitem(last=False)
        return e
