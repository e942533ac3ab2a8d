"""ImageLocality: prefer nodes that already have the pod's images, weighted by
how widely each image is spread (imagelocality/image_locality.go)."""

from __future__ import annotations

from typing import Final

import numpy as np

from scheduler.api.types import Pod
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Int64Array, IntpArray, NoArgs, PreScorePlugin, ScorePlugin
from scheduler.framework.status import SKIP, SUCCESS, Status
from scheduler.snapshot import NodeTable

MB: Final = 1024 * 1024
MIN_THRESHOLD: Final = 23 * MB
MAX_CONTAINER_THRESHOLD: Final = 1000 * MB


def calculate_priority(sums: Int64Array, num_containers: int) -> Int64Array:
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    s = np.clip(sums, MIN_THRESHOLD, max_threshold)
    return 100 * (s - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


class ImageLocality(NoArgs, PreScorePlugin, ScorePlugin):
    NAME: Final = "ImageLocality"

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        if not pod.images or not any(nodes.image_index.get(i) for i in pod.images):
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        total_nodes = max(nodes.num_nodes, 1)
        sums = np.zeros(nodes.capacity, dtype=np.int64)
        for image in pod.images:
            by_row = nodes.image_index.get(image)
            if not by_row:
                continue
            spread = len(by_row) / total_nodes
            idx = np.fromiter(by_row.keys(), dtype=np.intp, count=len(by_row))
            size = np.fromiter(by_row.values(), dtype=np.float64, count=len(by_row))
            sums[idx] += (size * spread).astype(np.int64)
        return calculate_priority(sums[rows], len(pod.images))
