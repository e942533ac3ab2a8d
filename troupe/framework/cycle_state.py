"""CycleState: data a plugin computes once per scheduling cycle and reads later.

PreFilter and PreScore write under a private key; Filter, Score, Reserve and
Permit read through `read`, which fails loudly when the key is missing (a bug:
the plugin's pre_* point was not run).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


class StateKeyError(KeyError):
    """A plugin read a CycleState key that its pre-point never wrote."""


class CycleState:
    __slots__ = ("_data", "sample_plugin_metrics", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        # Plugins whose PreFilter / PreScore returned SKIP in this cycle.
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()
        # Record per-plugin durations in this cycle (a sample of cycles, as upstream).
        self.sample_plugin_metrics = False

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str, kind: type[T]) -> T:
        try:
            value = self._data[key]
        except KeyError:
            raise StateKeyError(f"cycle state has no {key!r}") from None
        if not isinstance(value, kind):
            raise TypeError(f"cycle state {key!r} is {type(value).__name__}, not {kind.__name__}")
        return value

    def get(self, key: str) -> object | None:
        return self._data.get(key)

    def delete(self, key: str) -> None:
        self._data.pop(key, None)
