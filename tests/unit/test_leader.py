"""Lease-based leader election on a virtual clock."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.clock import VirtualClock
from scheduler.leader import InMemoryLeases, LeaderElector


async def step(clock: VirtualClock, seconds: float, dt: float = 0.5) -> None:
    """Advance virtual time in small steps, letting the electors run in between."""
    end = clock.now() + seconds
    while clock.now() < end:
        for _ in range(5):
            await asyncio.sleep(0)
        clock.advance_by(dt)
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_leader_then_failover_without_overlap() -> None:
    clock = VirtualClock(start=1000.0)
    leases = InMemoryLeases()
    views = {name: leases.view() for name in ("a", "b")}
    electors = {n: LeaderElector(v, n, clock) for n, v in views.items()}
    log: list[tuple[float, str, str]] = []

    def cb(name: str, what: str):  # type: ignore[no-untyped-def]
        return lambda: log.append((clock.now(), name, what))

    tasks = {
        n: asyncio.create_task(e.run(cb(n, "start"), cb(n, "stop"))) for n, e in electors.items()
    }
    await step(clock, 5)
    leaders = [n for n, e in electors.items() if e.is_leader]
    assert len(leaders) == 1
    first, other = leaders[0], ({"a", "b"} - {leaders[0]}).pop()
    assert leases.record is not None and leases.record.holder == first
    # Partition the leader from the API server: it stops within renewDeadline,
    # and the other takes over only once the lease has expired.
    cut = clock.now()
    views[first].fail = True
    await step(clock, 30)
    stops = [t for t, n, w in log if n == first and w == "stop"]
    starts = [t for t, n, w in log if n == other and w == "start"]
    assert stops and stops[0] - cut <= 10 + 2
    assert starts and starts[0] > stops[0]
    assert electors[other].is_leader and not electors[first].is_leader
    assert leases.record is not None and leases.record.holder == other
    assert leases.record.transitions == 1
    tasks[first].result()  # returned after losing the lease
    tasks[other].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[other]
    assert leases.record.holder == ""  # released on a clean stop


async def test_released_lease_is_taken_at_once() -> None:
    clock = VirtualClock(start=0.0)
    leases = InMemoryLeases()
    a = LeaderElector(leases.view(), "a", clock)
    ta = asyncio.create_task(a.run(lambda: None, lambda: None))
    await step(clock, 1)
    assert a.is_leader
    ta.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ta
    b = LeaderElector(leases.view(), "b", clock)
    tb = asyncio.create_task(b.run(lambda: None, lambda: None))
    await step(clock, 1)
    assert b.is_leader
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


def test_timings_are_validated() -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            InMemoryLeases().view(), "x", VirtualClock(), lease_duration=5, renew_deadline=10
        )
