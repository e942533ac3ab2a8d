"""PrioritySort: higher priority first, then earlier arrival (queuesort/priority_sort.go)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Self

from scheduler.framework.handle import Handle
from scheduler.framework.interface import QueuedPodInfo, QueueSortPlugin


class PrioritySort(QueueSortPlugin):
    NAME: Final = "PrioritySort"

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls()

    def sort_key(self, p: QueuedPodInfo) -> tuple[int, float, int]:
        return (-p.pod.priority, p.timestamp, p.seq)

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)
