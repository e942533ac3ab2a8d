"""The framework's StatusWriter on its own: writes coalesced per interval, only
on a change, retried with backoff, dropped on NotFound, held while the replica
does not lead. Objects live in the in-memory cluster (the API) and in a dict
standing for the cache the writer reads; time is a virtual clock."""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.unit.plugins.conftest import FakeLister
from troupe.core.clock import VirtualClock
from troupe.core.cluster import NotLeader
from troupe.core.memory_cluster import InMemoryCluster
from troupe.framework.handle import Handle
from troupe.framework.status_writer import StatusWriter, status_holds
from troupe.framework.waiting_pods import WaitingPods

Status = dict[str, Any]


@dataclass(frozen=True)
class Thing:
    """An object as the cache holds it: its status is all the writer reads."""

    status: Mapping[str, Any]


@dataclass
class Rig:
    """A writer whose `compute` answers `wanted`, reading `seen` (the cache),
    patching `cluster` (the API); `refuse` holds the errors the next patches
    raise, `attempts` every patch tried (time, key, status)."""

    coalesce: float = 1.0
    clock: VirtualClock = field(default_factory=lambda: VirtualClock(start=1000.0))
    cluster: InMemoryCluster = field(default_factory=InMemoryCluster)
    seen: dict[str, Thing] = field(default_factory=dict)
    wanted: dict[str, Status | None] = field(default_factory=dict)
    refuse: list[Exception] = field(default_factory=list)
    attempts: list[tuple[float, str, Status]] = field(default_factory=list)
    tasks: list[Coroutine[Any, Any, None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.handle = Handle(
            clock=self.clock,
            client=self.cluster,
            waiting_pods=WaitingPods(),
            lister=FakeLister(),
            spawn=self.tasks.append,
        )
        self.writer: StatusWriter[str, Thing, Status] = StatusWriter(
            self.handle,
            "Thing",
            lookup=self.seen.get,
            compute=lambda key, obj: self.wanted.get(key),
            patch=self._patch,
            same=status_holds,
            coalesce_seconds=self.coalesce,
        )

    def add(self, key: str, status: Status | None = None) -> None:
        self.cluster.pod_groups[key] = {"status": dict(status or {})}
        self.seen[key] = Thing(dict(status or {}))

    async def _patch(self, key: str, obj: Thing, status: Status) -> None:
        self.attempts.append((round(self.clock.now() - 1000.0, 6), key, dict(status)))
        if self.refuse:
            raise self.refuse.pop(0)
        await self.cluster.patch_pod_group_status(key, status)

    def status(self, key: str) -> Status:
        status: Status = self.cluster.pod_groups[key]["status"]
        return status

    def start(self, key: str, wanted: Status, refuse: list[Exception] | None = None) -> None:
        """A new object whose status should be `wanted` (see `want`)."""
        self.add(key)
        self.want(key, wanted, refuse)

    def want(self, key: str, wanted: Status, refuse: list[Exception] | None = None) -> None:
        """The status of `key` should be `wanted` now: marked; the next
        patches raise `refuse`."""
        self.wanted[key] = wanted
        self.refuse = list(refuse or [])
        self.writer.mark(key)

    async def run_for(self, seconds: float) -> None:
        """Advance the clock timer by timer, running the patches each flush spawns."""
        end = round(self.clock.now() + seconds, 6)
        while True:
            while self.tasks:
                await self.tasks.pop(0)
            deadline = self.clock.next_deadline()
            if deadline is None or deadline > end:
                break
            self.clock.advance_to(deadline)
        self.clock.advance_to(end)

    def times(self) -> list[float]:
        return [t for t, _, _ in self.attempts]


async def test_marks_within_an_interval_cost_one_patch_per_object() -> None:
    rig = Rig()
    rig.add("a")
    rig.add("b")
    rig.wanted["a"] = {"phase": "Running"}
    rig.wanted["b"] = {"phase": "Pending"}
    for i in range(100):
        rig.writer.mark("a" if i % 2 else "b")
        await rig.run_for(0.009)
    assert rig.attempts == []  # nothing before the interval is up
    await rig.run_for(0.2)
    assert rig.attempts == [(1.0, "a", {"phase": "Running"}), (1.0, "b", {"phase": "Pending"})]
    assert rig.status("a") == {"phase": "Running"} and rig.writer.patches == 2
    # The next burst is the next interval's: one patch again, a second later.
    rig.wanted["a"] = {"phase": "Finished"}
    for _ in range(10):
        rig.writer.mark("a")
    await rig.run_for(0.99)
    assert len(rig.attempts) == 2
    await rig.run_for(0.01)
    assert rig.attempts[2:] == [(2.1, "a", {"phase": "Finished"})]


async def test_a_patch_is_sent_only_when_the_status_changes() -> None:
    rig = Rig()
    rig.add("held", {"phase": "Running", "running": 2})
    rig.add("fresh")
    rig.add("quiet")
    rig.wanted["held"] = {"phase": "Running"}  # the object holds it already
    rig.wanted["fresh"] = {"phase": "Scheduling"}
    rig.wanted["quiet"] = None  # nothing to say
    for key in ("held", "fresh", "quiet"):
        rig.writer.mark(key)
    await rig.run_for(1)
    assert [k for _, k, _ in rig.attempts] == ["fresh"]
    # Marked again with nothing changed: no patch, even though the cache has
    # not seen the write come back yet.
    rig.writer.mark("fresh")
    await rig.run_for(1)
    assert len(rig.attempts) == 1
    rig.want("fresh", {"phase": "Running"})
    await rig.run_for(1)
    assert rig.attempts[1:] == [(3.0, "fresh", {"phase": "Running"})]
    assert rig.writer.patches == 2 and rig.writer.failed_patches == 0


async def test_a_failed_patch_is_retried_with_backoff_until_it_lands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()
    rig.start("a", {"phase": "Running"}, [RuntimeError("HTTP 500")] * 3)
    with caplog.at_level(logging.WARNING, "troupe.framework.status_writer"):
        await rig.run_for(30)
    # Flushed at 1; retried 1, 2 and 4 s after each failure (then a flush interval).
    assert rig.times() == [1.0, 3.0, 6.0, 11.0]
    assert rig.status("a") == {"phase": "Running"}
    assert rig.writer.failed_patches == 3 and rig.writer.patches == 4
    assert [r.getMessage() for r in caplog.records] == [
        f"could not patch the status of Thing a (HTTP 500); retrying in {d}s" for d in (1, 2, 4)
    ]
    # Landed: the next failure starts the backoff over.
    rig.want("a", {"phase": "Finished"}, [RuntimeError("HTTP 503")])
    await rig.run_for(10)
    assert rig.times()[4:] == [31.0, 33.0]
    assert rig.status("a") == {"phase": "Finished"}


async def test_the_backoff_stops_growing_at_its_cap() -> None:
    rig = Rig()
    rig.start("a", {"phase": "Running"}, [RuntimeError("HTTP 500")] * 8)
    await rig.run_for(400)
    gaps = [b - a - rig.coalesce for a, b in zip(rig.times(), rig.times()[1:], strict=False)]
    assert gaps == [1, 2, 4, 8, 16, 32, 60, 60]
    assert rig.status("a") == {"phase": "Running"}


async def test_a_status_that_changed_while_failing_is_the_one_retried() -> None:
    rig = Rig()
    rig.start("a", {"phase": "Scheduling"}, [RuntimeError("HTTP 500")])
    await rig.run_for(1)
    rig.wanted["a"] = {"phase": "Running"}
    await rig.run_for(5)
    assert [s for _, _, s in rig.attempts] == [{"phase": "Scheduling"}, {"phase": "Running"}]
    assert rig.status("a") == {"phase": "Running"}


async def test_an_object_gone_from_the_api_is_dropped() -> None:
    rig = Rig()
    rig.start("a", {"phase": "Running"})
    del rig.cluster.pod_groups["a"]  # deleted; the cache has not seen it yet
    await rig.run_for(300)
    assert rig.times() == [1.0]  # NotFound: no retry
    assert rig.writer.failed_patches == 0
    # Created again, it is written again, though its status was sent before.
    rig.add("a")
    rig.writer.mark("a")
    await rig.run_for(1)
    assert rig.times() == [1.0, 301.0] and rig.status("a") == {"phase": "Running"}


async def test_an_object_gone_from_the_cache_is_forgotten() -> None:
    rig = Rig()
    rig.start("a", {"phase": "Running"})
    await rig.run_for(1)
    del rig.seen["a"]
    rig.writer.mark("a")
    await rig.run_for(1)
    assert rig.times() == [1.0]
    # Back, holding nothing: what was written before is not taken as held.
    rig.add("a")
    rig.writer.mark("a")
    await rig.run_for(1)
    assert rig.times() == [1.0, 3.0]


async def test_a_replica_that_does_not_lead_writes_once_it_leads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()
    rig.start("a", {"phase": "Running"}, [NotLeader("not sent"), NotLeader("not sent")])
    with caplog.at_level(logging.WARNING, "troupe.framework.status_writer"):
        await rig.run_for(4)
    assert rig.status("a") == {}  # nothing written while it does not lead
    assert rig.times() == [1.0, 3.0]  # but tried again later, with backoff
    await rig.run_for(10)
    assert rig.times() == [1.0, 3.0, 6.0] and rig.status("a") == {"phase": "Running"}
    assert rig.writer.failed_patches == 0 and caplog.records == []


async def test_flush_now_writes_at_once_and_keeps_the_interval() -> None:
    rig = Rig()
    rig.start("a", {"phase": "Scheduling"})
    await rig.run_for(0.5)
    rig.writer.flush_now()
    await rig.run_for(0)
    assert rig.times() == [0.5]
    # The timer of the first mark is gone: the next mark waits a full interval.
    rig.want("a", {"phase": "Running"})
    await rig.run_for(0.9)
    assert rig.times() == [0.5]
    await rig.run_for(0.1)
    assert rig.times() == [0.5, 1.5] and rig.status("a") == {"phase": "Running"}
