"""Lease-based leader election on a virtual clock."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from troupe.core.clock import VirtualClock
from troupe.operator.leader import CycleWatch, InMemoryLeases, LeaderElector, LeaseRecord


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


async def test_issue14_two_leaders_never_act_at_once_with_a_hung_api() -> None:
    """#14.3: when renewals hang (the API answers nobody, or only the leader's
    calls are stuck), `leading()` turns False within renewDeadline of the last
    successful renewal, before any other replica may take over (leaseDuration)."""
    clock = VirtualClock(start=1000.0)
    leases = InMemoryLeases()
    views = {name: leases.view() for name in ("a", "b")}
    electors = {n: LeaderElector(v, n, clock) for n, v in views.items()}
    hang = asyncio.Event()

    class Hung:
        """A LeaseClient whose calls never return while `hang` is unset."""

        def __init__(self, inner: object) -> None:
            self.inner = inner
            self.hung = False

        def __getattr__(self, name: str) -> object:
            fn = getattr(self.inner, name)

            async def call(*a: object) -> object:
                if self.hung:
                    await hang.wait()
                return await fn(*a)

            return call

    hung = Hung(views["a"])
    electors["a"] = LeaderElector(hung, "a", clock)  # type: ignore[arg-type]
    tasks = [asyncio.create_task(e.run(lambda: None, lambda: None)) for e in electors.values()]
    await step(clock, 3)
    assert electors["a"].leading() and not electors["b"].leading()
    last_renewal = electors["a"].renewals[-1]
    hung.hung = True
    timeline: list[tuple[float, bool, bool]] = []
    end = clock.now() + 30
    while clock.now() < end:
        for _ in range(5):
            await asyncio.sleep(0)
        timeline.append((clock.now(), electors["a"].leading(), electors["b"].leading()))
        clock.advance_by(0.25)
    assert not any(a and b for _, a, b in timeline), "two leaders at once"
    a_until = max(t for t, a, _ in timeline if a)
    assert a_until < last_renewal + electors["a"].renew_deadline
    assert any(b for _, _, b in timeline)  # b took over once the lease expired
    hang.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class CountingView:
    """A LeaseClient over an InMemoryLeases view that counts its calls."""

    def __init__(self, leases: InMemoryLeases) -> None:
        self.view = leases.view()
        self.calls: list[str] = []

    async def get(self) -> LeaseRecord | None:
        self.calls.append("get")
        return await self.view.get()

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        self.calls.append("create")
        return await self.view.create(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        self.calls.append("update")
        return await self.view.update(record)


async def test_a_valid_leader_renews_with_one_update_and_reads_after_a_conflict() -> None:
    """client-go's fast path: while its Lease is valid, the leader updates the
    record it observed without reading it first; when the Lease changed under
    it (409), it reads the Lease and finds it lost."""
    clock = VirtualClock(start=0.0)
    leases = InMemoryLeases()
    client = CountingView(leases)
    e = LeaderElector(client, "a", clock, lease_duration=15, renew_deadline=10, retry_period=2)
    stopped: list[float] = []
    task = asyncio.create_task(e.run(lambda: None, lambda: stopped.append(clock.now())))
    await step(clock, 0.5)
    assert e.is_leader and client.calls == ["get", "create"]
    client.calls.clear()
    await step(clock, 10)
    assert client.calls and set(client.calls) == {"update"}  # no read per renewal
    assert leases.record is not None and leases.record.renew_time >= 8
    # Another replica forcibly takes the Lease (say, an operator's kubectl edit).
    assert leases.record is not None
    leases._bump(replace(leases.record, holder="b", renew_time=clock.now()))
    client.calls.clear()
    await step(clock, 12)
    assert client.calls[:2] == ["update", "get"]  # refused, then read
    assert stopped and not e.is_leader
    assert leases.record is not None and leases.record.holder == "b"
    await task


class SkewedClock:
    """Another machine's clock: the same time, read `offset` seconds off."""

    def __init__(self, clock: VirtualClock, offset: float) -> None:
        self.clock = clock
        self.offset = offset

    def now(self) -> float:
        return self.clock.now() + self.offset

    def call_at(self, when: float, callback):  # type: ignore[no-untyped-def]
        return self.clock.call_at(when - self.offset, callback)

    async def sleep(self, seconds: float) -> None:
        await self.clock.sleep(seconds)


@pytest.mark.parametrize("offset", [20.0, 3600.0, -20.0, -3600.0])
async def test_a_skewed_standby_never_takes_a_renewed_lease_and_takes_a_lapsed_one_in_time(
    offset: float,
) -> None:
    """Found by a hostile probe: a standby whose clock was ~13 s ahead took the
    Lease from a healthy leader, comparing the renewTime the leader wrote with its
    own clock. Expiry is judged from when the standby itself saw the Lease change
    (client-go's observedTime), so a skew either way changes nothing: never while
    the leader renews, and within leaseDuration (+ a retry) once it stops."""
    clock = VirtualClock(start=1000.0)
    leases = InMemoryLeases()
    va, vb = leases.view(), leases.view()
    a = LeaderElector(va, "a", clock)
    ta = asyncio.create_task(a.run(lambda: None, lambda: None))
    await step(clock, 1)
    assert a.is_leader
    b = LeaderElector(vb, "b", SkewedClock(clock, offset))
    b_started: list[float] = []
    tb = asyncio.create_task(b.run(lambda: b_started.append(clock.now()), lambda: None))
    await step(clock, 60)
    assert b_started == [] and not b.is_leader
    assert leases.record is not None and leases.record.holder == "a"
    cut = clock.now()
    va.fail = True  # the leader is cut off: its renewals stop
    await step(clock, 40)
    assert b_started and b.is_leader
    assert b_started[0] - cut <= b.lease_duration + b.retry_period + 0.5
    # a stopped leading before b started: never two leaders at once
    assert ta.done() and not a.is_leader
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


async def test_a_leader_whose_scheduler_does_not_answer_lets_the_lease_lapse() -> None:
    """Found by a hostile probe: with the scheduler process hung, its elector kept
    renewing, so the standby never took over. The elector renews only while the
    process it leads for answers (`alive`): it stops leading within renewDeadline
    and the standby takes over once the Lease lapses."""
    clock = VirtualClock(start=0.0)
    leases = InMemoryLeases()
    a = LeaderElector(leases.view(), "a", clock)
    answering = True
    a.alive = lambda: answering
    stopped: list[float] = []
    ta = asyncio.create_task(a.run(lambda: None, lambda: stopped.append(clock.now())))
    await step(clock, 1)
    assert a.is_leader
    b = LeaderElector(leases.view(), "b", clock)
    tb = asyncio.create_task(b.run(lambda: None, lambda: None))
    await step(clock, 30)
    assert a.is_leader and not b.is_leader
    hung = clock.now()
    answering = False
    await step(clock, 30)
    assert stopped and stopped[0] - hung <= a.renew_deadline + a.retry_period
    assert b.is_leader and ta.done()
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


def test_a_cycle_is_busy_until_it_has_run_max_cycle() -> None:
    progress = (0, False)
    w = CycleWatch(lambda: progress, max_cycle=60.0)
    assert not w.busy(0.0)  # between cycles the loop's own heartbeat answers
    progress = (1, True)
    assert w.busy(1.0) and w.busy(59.0)  # one cycle, first seen at 1
    assert not w.busy(61.5)  # in the same cycle for 60.5 s: hung
    progress = (2, True)
    assert w.busy(62.0)  # another cycle: the loop moved on
    progress = (2, False)
    assert not w.busy(63.0)


async def test_a_leader_busy_with_one_long_cycle_keeps_its_lease_and_a_hung_one_loses_it() -> None:
    """Found by a hostile probe: one heavy pod kept the scheduling loop from beating
    past renewDeadline ("the scheduler does not answer") and the leader lost its
    Lease. While the loop is inside one cycle a thread beats for it (here a task,
    as ElectorProcess's thread), until the cycle has run max_cycle: a cycle of 40 s
    keeps the Lease, a cycle that never ends lets it lapse."""
    clock = VirtualClock(start=0.0)
    leases = InMemoryLeases()
    a = LeaderElector(leases.view(), "a", clock)
    progress = (0, False)
    watch = CycleWatch(lambda: progress, max_cycle=60.0)
    beat = 0.0
    a.alive = lambda: clock.now() - beat < a.renew_deadline

    async def heartbeats() -> None:
        nonlocal beat
        while True:
            await clock.sleep(1.0)
            if not progress[1] or watch.busy(clock.now()):  # the loop's, or the thread's
                beat = clock.now()

    beating = asyncio.create_task(heartbeats())
    stopped: list[float] = []
    ta = asyncio.create_task(a.run(lambda: None, lambda: stopped.append(clock.now())))
    await step(clock, 1)
    b = LeaderElector(leases.view(), "b", clock)
    tb = asyncio.create_task(b.run(lambda: None, lambda: None))
    await step(clock, 5)
    assert a.is_leader
    progress = (1, True)  # one heavy pod's cycle: 40 s, 4 renewDeadlines
    await step(clock, 40)
    progress = (1, False)
    await step(clock, 5)
    assert a.is_leader and not stopped and not b.is_leader
    hung = clock.now()
    progress = (2, True)  # a cycle that never ends
    await step(clock, 100)
    # beats stop max_cycle (and a period) after; alive() turns false a renewDeadline
    # later, and the elector steps down a renewDeadline after its last renewal
    late = 60.0 + 1.0 + 2 * a.renew_deadline + a.retry_period
    assert stopped and stopped[0] - hung <= late
    assert b.is_leader and ta.done()
    for t in (tb, beating):
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t


class SlowAnswer(CountingView):
    """The server makes the write at once; its answer waits for `answer`."""

    def __init__(self, leases: InMemoryLeases) -> None:
        super().__init__(leases)
        self.answer = asyncio.Event()

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        made = await super().create(record)
        await self.answer.wait()
        return made


async def test_stopped_while_its_take_of_the_lease_is_answered_it_releases_the_lease() -> None:
    """A replica stopped while the write that makes it the holder is in flight
    (the server has made it; the answer is not back) releases the Lease once the
    answer is in, rather than leaving it held until it expires."""
    clock = VirtualClock(start=0.0)
    leases = InMemoryLeases()
    client = SlowAnswer(leases)
    e = LeaderElector(client, "a", clock, lease_duration=15, renew_deadline=10, retry_period=2)
    started: list[bool] = []
    task = asyncio.create_task(e.run(lambda: started.append(True), lambda: None))
    await step(clock, 0.5)
    assert leases.record is not None and leases.record.holder == "a"  # made, not answered
    task.cancel()
    await step(clock, 0.5)
    client.answer.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert leases.record.holder == ""
    assert not started and not e.is_leader
