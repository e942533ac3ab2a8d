"""Status written back sparingly: the machinery every status writer shares.

A plugin that keeps the status of some objects (Coscheduling the PodGroups',
CapacityScheduling the ElasticQuotas' `status.used`) says what that status
should be; a `StatusWriter` decides when it is written, the same way for all:

- `mark(key)` on anything that may move the status of the object `key` names
  (an event, a scheduling attempt); nothing is computed then.
- Marked keys are flushed at most once per `coalesce_seconds` (one clock
  timer for all of them), so a burst of events costs one patch per object,
  not one per event (upstream's controllers are rate-limited by their work
  queues the same way).
- A flush reads each marked object (`lookup`; gone: forgotten), computes
  what its status should be (`compute`; None: nothing to say now) and patches
  it only when that differs from what this writer last wrote or, before its
  first write, from what the object holds (`same`).
- The patch (`patch`, on the status subresource) runs as a task on the
  Handle's `spawn`. One that fails is tried again after `coalesce_seconds`
  (0.5 s at least) doubled at each failure in a row, up to
  `MAX_RETRY_SECONDS`, until it lands. An object that is gone (`NotFound`)
  is dropped. A replica that does not lead (`NotLeader`: the client's fence
  sent nothing) writes nothing and tries again the same way, as it may lead
  by then; it is not counted as a failure.
- `flush_now()` flushes at once (tests, shutdown).

Adding a writer (CompositePodGroup conditions, say) takes its `compute` and
three one-liners:

    writer = StatusWriter(
        handle,
        "CompositePodGroup",
        lookup=lambda key: handle.lister.composite(key),
        compute=compute_composite_status,  # (key, obj) -> status, or None
        patch=lambda key, obj, status: handle.client.patch_composite_pod_group_status(
            key, status
        ),
        same=status_holds,
    )

and `writer.mark(key)` wherever that status may change (usually from a
`handle.watch` callback). `compute` must be a pure function of the object
and the plugin's state: it is called again at every flush and its result
compared with `==`. `same(obj, status)` says the object already holds that
status: `status_holds` (every field of the new status is in the object's
`status` mapping) fits a status written as a merge patch of its top-level
fields, as PodGroups' is; CapacityScheduling compares the used amounts and
builds the merge patch, with its nulls, in `patch`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from troupe.core.clock import TimerHandle
from troupe.core.cluster import NotFound, NotLeader
from troupe.framework.handle import Handle

log = logging.getLogger(__name__)

MAX_RETRY_SECONDS: Final = 60.0
MIN_RETRY_SECONDS: Final = 0.5
"""The first retry's delay when `coalesce_seconds` is shorter (or 0)."""

K = TypeVar("K", bound=str)  # the key marked and flushed (sorted, logged)
Obj = TypeVar("Obj")  # the object, as the writer's `lookup` gives it
S = TypeVar("S")  # what `compute` says the status should be


class HasStatus(Protocol):
    @property
    def status(self) -> Mapping[str, Any]: ...


def status_holds(obj: HasStatus, status: Mapping[str, Any]) -> bool:
    """Every top-level field of `status` already has that value on the object."""
    current = obj.status
    return all(current.get(k) == v for k, v in status.items())


@dataclass(eq=False)
class StatusWriter(Generic[K, Obj, S]):
    """Writes the status `compute` gives of the objects `lookup` finds, for
    the keys `mark`ed, through `patch` (see the module's docstring)."""

    handle: Handle
    kind: str  # in the log: "could not patch the status of <kind> <key>"
    _: KW_ONLY
    lookup: Callable[[K], Obj | None]
    compute: Callable[[K, Obj], S | None]
    patch: Callable[[K, Obj, S], Awaitable[None]]
    same: Callable[[Obj, S], bool]
    coalesce_seconds: float = 1.0
    max_retry_seconds: float = MAX_RETRY_SECONDS
    patches: int = field(default=0, init=False)
    """Patches sent (or in flight)."""
    failed_patches: int = field(default=0, init=False)
    """Patches that failed but for NotFound and NotLeader."""
    _dirty: set[K] = field(default_factory=set, init=False, repr=False)
    _written: dict[K, S] = field(default_factory=dict, init=False, repr=False)
    _timer: TimerHandle | None = field(default=None, init=False, repr=False)
    _failures: dict[K, int] = field(default_factory=dict, init=False, repr=False)

    def mark(self, key: K) -> None:
        self._dirty.add(key)
        if self._timer is None:
            clock = self.handle.clock
            self._timer = clock.call_at(clock.now() + self.coalesce_seconds, self._on_timer)

    def flush_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._on_timer()

    def _on_timer(self) -> None:
        self._timer = None
        dirty, self._dirty = self._dirty, set()
        for key in sorted(dirty):
            obj = self.lookup(key)
            if obj is None:
                self._written.pop(key, None)
                continue
            status = self.compute(key, obj)
            if status is None:
                continue
            if self._written.get(key) == status or (
                key not in self._written and self.same(obj, status)
            ):
                continue
            self._written[key] = status
            self.patches += 1
            self.handle.spawn(self._send(key, obj, status))

    async def _send(self, key: K, obj: Obj, status: S) -> None:
        try:
            await self.patch(key, obj, status)
        except NotFound:
            self._written.pop(key, None)
            self._failures.pop(key, None)
            return
        except Exception as e:
            if self._written.get(key) == status:
                self._written.pop(key, None)  # not written: compare with the object again
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
            delay = min(
                max(self.coalesce_seconds, MIN_RETRY_SECONDS) * 2**n, self.max_retry_seconds
            )
            if not isinstance(e, NotLeader):
                self.failed_patches += 1
                log.warning(
                    "could not patch the status of %s %s (%s); retrying in %.0fs",
                    self.kind,
                    key,
                    e,
                    delay,
                )
            clock = self.handle.clock
            clock.call_at(clock.now() + delay, lambda: self.mark(key))
            return
        self._failures.pop(key, None)
