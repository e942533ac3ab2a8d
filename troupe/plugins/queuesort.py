"""PrioritySort: higher priority first, then earlier arrival (queuesort/priority_sort.go)."""

from __future__ import annotations

from typing import Final

from troupe.framework.interface import NoArgs, QueuedPodInfo, QueueSortPlugin


class PrioritySort(NoArgs, QueueSortPlugin):
    NAME: Final = "PrioritySort"

    def sort_key(self, p: QueuedPodInfo) -> tuple[int, float, int]:
        return (-p.pod.priority, p.timestamp, p.seq)

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)
