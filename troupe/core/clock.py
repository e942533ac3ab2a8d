"""Time, real or virtual.

The core never reads the wall clock or sleeps directly: it asks a `Clock`.
`RealClock` wraps the running asyncio loop; `VirtualClock` is advanced by its
driver (the simulator, the benchmarks, tests), so timing is deterministic and
no test sleeps.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds; only differences are meaningful (creation times use epoch seconds)."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run `callback` once the clock reaches `when` (on the loop's thread)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        return loop.call_later(max(0.0, when - time.time()), callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _VirtualTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    """A clock that moves only when `advance_to` / `advance_by` is called."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _VirtualTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        t = _VirtualTimer(when, callback)
        heapq.heappush(self._timers, (when, next(self._seq), t))
        return t

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        self.call_at(self._now + seconds, wake)
        await fut

    def next_deadline(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance_to(self, when: float) -> int:
        """Move to `when`, firing due timers in order; returns how many fired."""
        fired = 0
        while self._timers and self._timers[0][0] <= when:
            t_when, _, t = heapq.heappop(self._timers)
            if t.cancelled:
                continue
            self._now = max(self._now, t_when)
            t.callback()
            fired += 1
        self._now = max(self._now, when)
        return fired

    def advance_by(self, seconds: float) -> int:
        return self.advance_to(self._now + seconds)
