"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection.

Several replicas run; the one holding the Lease schedules. A candidate takes the
Lease when it is free or expired: unchanged for leaseDurationSeconds since this
candidate last saw it change, on the candidate's own clock (client-go's
observedTime; the renewTime another machine wrote is never compared with this
machine's clock, so a skewed clock cannot take a Lease that is being renewed),
then renews it every `retry_period`; if it cannot renew for `renew_deadline`
it stops leading at once (the caller stops scheduling), before the Lease can
expire and another replica take over. Writes are conditional on the Lease's
resourceVersion, so two candidates never both win. On a clean stop the leader
releases the Lease so the next one need not wait for it to expire.

The API calls go through a `LeaseClient` (troupe.kube.lease implements it against
the API server and defines the `LeaseRecord` it reads and the `LeaseConflict` it
raises; `InMemoryLeases` serves tests and several electors in one process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Final, Protocol

from troupe.core.clock import Clock
from troupe.kube.lease import LeaseConflict, LeaseRecord

log = logging.getLogger(__name__)

# How long one scheduling cycle may run before its loop is taken as hung (see
# `CycleWatch`): far beyond what a bounded cycle takes.
MAX_CYCLE_SECONDS: Final = 60.0


class LeaseClient(Protocol):
    async def get(self) -> LeaseRecord | None: ...

    async def create(self, record: LeaseRecord) -> LeaseRecord: ...

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """Replace the Lease if its resourceVersion is still `record.version`."""
        ...


class InMemoryLeases:
    """One Lease in memory, with resourceVersion semantics; `fail` simulates an
    unreachable API server for this client only (see `view`)."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self._version = 0

    def _bump(self, record: LeaseRecord) -> LeaseRecord:
        self._version += 1
        self.record = replace(record, version=str(self._version))
        return self.record

    def view(self) -> _LeaseView:
        return _LeaseView(self)


class _LeaseView:
    def __init__(self, store: InMemoryLeases) -> None:
        self.store = store
        self.fail = False

    def _check(self) -> None:
        if self.fail:
            raise ConnectionError("API server unreachable")

    async def get(self) -> LeaseRecord | None:
        self._check()
        return self.store.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        if self.store.record is not None:
            raise LeaseConflict("lease exists")
        return self.store._bump(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        cur = self.store.record
        if cur is None or cur.version != record.version:
            raise LeaseConflict("lease changed")
        return self.store._bump(record)


class LeaderElector:
    def __init__(
        self,
        client: LeaseClient,
        identity: str,
        clock: Clock,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.client = client
        self.identity = identity
        self.clock = clock
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.is_leader = False
        # Until when this replica may act as the leader: the start of its last
        # successful acquire/renew plus renewDeadline. Other replicas wait
        # leaseDuration (> renewDeadline) from the renewTime we wrote, so a
        # replica that respects this fence never acts while another leads.
        self.leading_until = 0.0
        self.renewals: list[float] = []  # when each successful renewal started
        # Called with `leading_until` whenever it changes (the operator shares it
        # with the process that writes, when election runs in a process of its own).
        self.on_leading_until: Callable[[float], None] | None = None
        # Whether the process this elector leads for is alive and answering: it
        # renews only while it is (a hung scheduler must let its Lease lapse).
        self.alive: Callable[[], bool] = lambda: True
        self._observed: LeaseRecord | None = None
        # When this replica last saw the Lease change, on its own clock. As
        # client-go's observedTime, expiry is judged from it, never by comparing
        # the renewTime another machine wrote with this machine's clock.
        self._observed_at = 0.0

    def _observe(self, record: LeaseRecord, now: float) -> None:
        old = self._observed
        if old is None or _content(old) != _content(record):
            self._observed_at = now
        self._observed = record

    def _set_leading_until(self, t: float) -> None:
        self.leading_until = t
        if self.on_leading_until is not None:
            self.on_leading_until(t)

    def leading(self) -> bool:
        """True while this replica holds the Lease and renewed it in time (the
        fence writes of scheduling work are checked against)."""
        return self.is_leader and self.clock.now() < self.leading_until

    async def try_acquire_or_renew(self) -> bool:
        now = self.clock.now()
        ok = await self._try_acquire_or_renew(now)
        if ok:
            self._set_leading_until(now + self.renew_deadline)
            if len(self.renewals) < 100_000:
                self.renewals.append(now)
        return ok

    async def _try_acquire_or_renew(self, now: float) -> bool:
        if not self.alive():
            log.warning("leader election: the scheduler does not answer: not renewing")
            return False
        obs = self._observed
        if (
            self.is_leader
            and obs is not None
            and obs.holder == self.identity
            and now < self._observed_at + obs.lease_duration_seconds
        ):
            # client-go's fast path (leaderelection.go tryAcquireOrRenew): a
            # leader whose Lease is still valid updates the record it observed
            # last without reading it first, one request per renewal instead of
            # two; the resourceVersion precondition refuses it if the Lease
            # changed meanwhile, and then the slow path reads it.
            try:
                self._observe(
                    await self.client.update(
                        replace(obs, renew_time=now, lease_duration_seconds=self.lease_duration)
                    ),
                    now,
                )
                return True
            except Exception as e:
                log.warning("leader election: optimistic renewal failed (%s): reading the Lease", e)
        try:
            cur = await self.client.get()
            if cur is None:
                self._observe(
                    await self.client.create(
                        LeaseRecord(self.identity, self.lease_duration, now, now)
                    ),
                    now,
                )
                return True
            self._observe(cur, now)
            mine = cur.holder == self.identity
            if not mine and cur.holder and self._observed_at + cur.lease_duration_seconds > now:
                return False
            self._observe(
                await self.client.update(
                    replace(
                        cur,
                        holder=self.identity,
                        lease_duration_seconds=self.lease_duration,
                        renew_time=now,
                        acquire_time=cur.acquire_time if mine else now,
                        transitions=cur.transitions if mine else cur.transitions + 1,
                    )
                ),
                now,
            )
            return True
        except LeaseConflict:
            return False
        except Exception as e:  # an unreachable API server must not kill the elector
            log.warning("leader election: %s", e)
            return False

    async def run(
        self,
        on_started: Callable[[], Awaitable[None] | None],
        on_stopped: Callable[[], Awaitable[None] | None],
    ) -> None:
        """Campaign, lead while renewals succeed, and return once leadership is lost.
        Cancelling the task releases the Lease if held."""
        try:
            while not await self._campaign_once():
                await self.clock.sleep(self.retry_period)
            self.is_leader = True
            log.info("%s became the leader", self.identity)
            await _maybe_await(on_started())
            last_renew = self.clock.now()
            while True:
                await self.clock.sleep(self.retry_period)
                if await self.try_acquire_or_renew():
                    last_renew = self.clock.now()
                elif self.clock.now() - last_renew >= self.renew_deadline or not self.leading():
                    break
            log.warning("%s lost the lease: stopping", self.identity)
        except asyncio.CancelledError:
            if self.is_leader:
                await self.release()
            raise
        finally:
            if self.is_leader:
                self.is_leader = False
                self._set_leading_until(0.0)
                await _maybe_await(on_stopped())

    async def _campaign_once(self) -> bool:
        """One try to take the Lease. Cancelled meanwhile, the try in flight
        is let finish (its request is bounded by the client's timeout): if the
        server made us the holder, the Lease is released at once rather than
        held, by a replica that is stopping, until it expires."""
        attempt = asyncio.ensure_future(self.try_acquire_or_renew())
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                if await attempt:
                    await self.release()
            raise

    async def release(self) -> None:
        self._set_leading_until(0.0)  # nothing more is written once we give it up
        cur = self._observed
        if cur is None or cur.holder != self.identity:
            return
        try:
            now = self.clock.now()
            self._observe(
                await self.client.update(
                    replace(cur, holder="", renew_time=now, lease_duration_seconds=1)
                ),
                now,
            )
        except Exception as e:
            log.warning("could not release the lease: %s", e)


class CycleWatch:
    """Tells a scheduling loop busy with one heavy cycle from a hung one.

    The loop's own heartbeat cannot beat while a cycle runs (a cycle is plain
    code on the loop), so another thread of the process asks `busy` now and then
    and beats on the loop's behalf while it is true. `progress` returns (cycles
    started, whether one runs now), as `Scheduler.progress`. A cycle is busy
    until it has run for `max_cycle` seconds, counted from when this watch first
    saw it (on the caller's clock, a period late at most); past that the loop is
    taken as hung and the Lease lapses. A cycle's work is bounded (CEL costs,
    the allocator's steps), so `max_cycle` is a bound on how long one can take,
    not on how heavy a pod is. A stopped process (SIGSTOP) stops this thread too."""

    def __init__(self, progress: Callable[[], tuple[int, bool]], max_cycle: float) -> None:
        self.progress = progress
        self.max_cycle = max_cycle
        self._cycles = -1
        self._since = 0.0

    def busy(self, now: float) -> bool:
        cycles, running = self.progress()
        if cycles != self._cycles:
            self._cycles, self._since = cycles, now
        return running and now - self._since < self.max_cycle


def _content(r: LeaseRecord) -> tuple[str, float, float, float, int]:
    """What a change of the Lease is judged by (client-go compares the record)."""
    return (r.holder, r.lease_duration_seconds, r.acquire_time, r.renew_time, r.transitions)


async def _maybe_await(x: Awaitable[None] | None) -> None:
    if x is not None:
        await x
