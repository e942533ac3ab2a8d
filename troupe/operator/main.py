"""The kopf operator: feeds the cluster into the scheduler and runs it.

The only module that imports kopf. kopf runs in its own thread and event loop
(kopf cancels tasks it did not create once it runs, and the watches must not
share a loop with the scheduling cycle). kopf is the operator framework:
its run loop, its login (with the credentials the kubernetes client loaded:
`troupe run --kubeconfig`, `clientConnection.kubeconfig`, or the in-cluster
service account, one way in for the watches and the writes), its settings
and its start-up and clean-up handlers, all through its public API. kopf has
no resource handlers (see `build_registry`): no progress annotations or
finalizers are put on objects we do not own, with posting and CRD scanning
turned off.

The watches are Troupe's own reflectors (`troupe.kube.reflector`), started by
kopf's start-up handler on kopf's loop: kopf's per-object handler machinery
costs more CPU per event than the scheduler spends on it, and its watch
stream is not public API, nor does it tell a re-list from new events (it only
upserts, so objects deleted during a gap stayed in the cache). Each reflector
lists, then watches; what it delivers goes through an `Intake` to the
scheduler's loop in batches, in order, each object to the handler its kind's
row of `troupe.api.kinds.KINDS` names (`EventHandlers.handlers`). Kinds are
listed in the order of that table (what others are read with first); the caches are
synced, and /readyz answers 200, once every reflector has delivered its
first list.

`run()` is what `troupe run` does. Every replica watches, lists every kind into
its cache and then answers /readyz 200, leader or not (as kube-scheduler's
standbys do). Leader election runs in a child process of its own, with its
own API connection and interpreter, so scheduling work cannot delay a renewal. Only the leader
schedules and writes: the scheduling-work writes are fenced by
`LeaderElector.leading()` (a leader that could not renew within renewDeadline
sends nothing more), and a replica that loses the Lease stops at once and exits
(1), as kube-scheduler does; the next leader rebuilds its state from the API.
With `leaderElection.leaderElect: false` there is no Lease and the replica
schedules once its caches are synced.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import multiprocessing
import signal
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final, TypeVar

import kopf
import uvloop

from troupe.api.kinds import VERSIONED, WATCHED
from troupe.api.types import COMPOSITE_VERSION, NATIVE_POD_GROUP_API
from troupe.config import SchedulerConfig
from troupe.core.clock import RealClock
from troupe.core.eventhandlers import Handler
from troupe.core.metrics import Metrics
from troupe.core.scheduler import Scheduler
from troupe.kube import (
    Credentials,
    KubeClient,
    default_identity,
    discover_version,
)
from troupe.kube.reflector import Reflector
from troupe.operator.leader import MAX_CYCLE_SECONDS, CycleWatch, LeaderElector
from troupe.operator.serving import DelegatingAuth, ServeError, serve, server_tls
from troupe.plugins.registry import IN_TREE

log = logging.getLogger(__name__)

# How long a stopping replica lets its binding cycles finish (within the
# default 30 s termination grace period of a pod).
SHUTDOWN_SECONDS: Final = 20


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The event loop of `troupe run` and of kopf's thread: uvloop's (libuv),
    whose loop, sockets and TLS cost less CPU per request and watch line than
    asyncio's own (docs/benchmarks-side-by-side.md, issue #30). The elector's child keeps
    asyncio's: it makes one request per retryPeriod."""
    return uvloop.new_event_loop()


def connection_info(c: Credentials) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(
        server=c.server,
        ca_path=c.ca_path,
        insecure=c.insecure,
        scheme=c.scheme,
        token=c.token,
        username=c.username,
        password=c.password,
        certificate_path=c.certificate_path,
        private_key_path=c.private_key_path,
    )


class Intake:
    """Events from kopf's loop to the scheduler's, in order and in batches.

    One `call_soon_threadsafe` (a write to the loop's wake-up pipe) per batch
    rather than per event; a batch is handled `BATCH` events at a time, so a
    re-list of thousands of objects cannot hold the scheduler's loop for long.
    """

    BATCH: Final = 256

    def __init__(self, loop: asyncio.AbstractEventLoop, handlers: Mapping[str, Handler]) -> None:
        self.loop = loop
        self.handlers = handlers
        self._pending: collections.deque[tuple[str, dict[str, Any], bool] | Callable[[], None]] = (
            collections.deque()
        )
        self._lock = threading.Lock()
        self._scheduled = False
        self.events = 0

    def put(self, kind: str, obj: dict[str, Any], deleted: bool) -> None:
        self._append((kind, obj, deleted))

    def after(self, fn: Callable[[], None]) -> None:
        """Call `fn` on the scheduler's loop once what was put before is handled."""
        self._append(fn)

    def _append(self, item: tuple[str, dict[str, Any], bool] | Callable[[], None]) -> None:
        with self._lock:
            self._pending.append(item)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the scheduler's loop is closed
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        pending, handlers = self._pending, self.handlers
        for _ in range(self.BATCH):
            try:
                item = pending.popleft()
            except IndexError:
                break
            if callable(item):
                item()
                continue
            kind, obj, deleted = item
            self.events += 1
            _safely(handlers[kind], obj, deleted, kind)
        with self._lock:
            if not pending:
                self._scheduled = False
                return
        self.loop.call_soon(self._drain)


def build_registry(
    scheduler: Scheduler,
    loop: asyncio.AbstractEventLoop,
    kube: KubeClient,
    kinds: Collection[str],
    on_kind_synced: Callable[[str], None],
) -> kopf.OperatorRegistry:
    """kopf's login, start-up and clean-up handlers: log in with the client's
    credentials; start one reflector per kind of `kinds` on kopf's loop, each
    listing once the kinds before it have been listed, delivering into the
    scheduler's loop; `on_kind_synced(kind)` is called there once a kind's
    first list has been handled."""
    registry = kopf.OperatorRegistry()
    intake = Intake(loop, scheduler.events.handlers())
    http = kube.watches(len(kinds))
    reflectors: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.scanning.disabled = True
        settings.watching.server_timeout = 300
        order = [k for k in WATCHED if k in kinds]
        listed = {k: asyncio.Event() for k in order}

        def synced(kind: str) -> None:
            listed[kind].set()
            intake.after(lambda: on_kind_synced(kind))

        async def reflect(i: int, kind: str) -> None:
            if i > 0:
                await listed[order[i - 1]].wait()
            r = Reflector(
                kind,
                http,
                intake.put,
                on_synced=lambda: synced(kind),
                watch_timeout=float(settings.watching.server_timeout or 300),
            )
            await r.run()

        for i, kind in enumerate(order):
            reflectors.append(asyncio.create_task(reflect(i, kind), name=f"reflector {kind}"))

    @kopf.on.cleanup(registry=registry)
    async def close(**_: Any) -> None:
        for t in reflectors:
            t.cancel()
        await asyncio.gather(*reflectors, return_exceptions=True)
        await http.aclose()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(kube.credentials())

    return registry


def _safely(handler: Handler, obj: Mapping[str, Any], deleted: bool, kind: str) -> None:
    try:
        handler(obj, deleted)
    except Exception:
        md = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        log.exception("could not handle %s %s", kind, (md or {}).get("name"))


class KopfThread:
    """kopf in its own thread and loop, stopped by a flag."""

    def __init__(self, registry: kopf.OperatorRegistry) -> None:
        self.registry = registry
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.thread = threading.Thread(target=self._main, name="kopf", daemon=True)

    def _main(self) -> None:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(
                kopf.operator(
                    registry=self.registry,
                    clusterwide=True,
                    standalone=True,
                    stop_flag=self.stop_flag,
                    ready_flag=self.ready_flag,
                )
            )

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_flag.set()
        self.thread.join(timeout)


async def watched_kinds(
    kube: KubeClient, kinds: Collection[str], composites: bool = False
) -> list[str]:
    """`kinds` with those served in one of several versions (Kubernetes' own
    PodGroups, DeviceTaintRules) narrowed to the version the cluster serves
    (API discovery), or left out, with one log line, when it serves none.
    `composites` (the CompositePodGroup gate): Kubernetes' PodGroups are read
    in CompositePodGroup's version first, the only one that has their parent."""
    out = list(kinds)
    for row in VERSIONED:
        kind, group, family = row.kind, row.group, set(row.keys)
        if not family & set(out):
            continue
        versions = row.versions
        if composites and kind == "PodGroup" and group == NATIVE_POD_GROUP_API:
            versions = (COMPOSITE_VERSION, *(v for v in versions if v != COMPOSITE_VERSION))
        try:
            version = await discover_version(kube, group, versions, row.plural)
        except Exception as e:
            log.warning("API discovery of %s failed (%s): not watching its %ss", group, e, kind)
            version = None
        if version is None:
            log.info("the cluster serves no %s %ss: not watching them", group, kind)
        else:
            if kind == "PodGroup" and group == NATIVE_POD_GROUP_API:
                kube.native_pod_group_version = version
            log.info("watching %s/%s %ss", group, version, kind)
        keep = row.key(version) if version is not None else None
        out = [k for k in out if k not in family or k == keep]
    return out


class ElectorProcess:
    """Leader election in a child process of its own.

    A thread of this process would share the interpreter lock with the
    scheduling cycle, the watch intake and the writes: under load its renewals
    drift by seconds. The child has its own interpreter, API connection and
    event loop, so its renewals keep `retryPeriod`. It publishes the fence (the
    time until which this replica may write, `LeaderElector.leading_until`) in
    shared memory, read by `leading()` on every write, and reports "started" /
    "stopped" through a pipe. It ends when asked to (releasing the Lease if
    held) or when this process goes away (its end of the control pipe closes;
    it releases the Lease then too), so a killed scheduler never leaves a
    renewer behind. Each side watches the other: the child renews only while
    this process's loop keeps beating (a hung scheduler lets its Lease lapse),
    and this process stops leading as soon as the fence lapses without a word
    from the child (a hung elector). While the loop is inside one scheduling
    cycle, which it cannot leave to beat, a thread beats for it as long as its
    `CycleWatch` says the cycle is busy rather than hung (it has run less than
    `MAX_CYCLE_SECONDS`): a heavy pod does not cost the Lease.

    Started with fork before any thread exists (see `run`), so the child needs
    no pickling and inherits the loaded credentials.
    """

    def __init__(
        self,
        make_elector: Callable[[], LeaderElector],
        loop: asyncio.AbstractEventLoop,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        beat_period: float = 1.0,
        watch: CycleWatch | None = None,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        ctx = multiprocessing.get_context("fork")
        self.make_elector = make_elector
        self.close = close  # in the child, once the elector has ended: its connections
        self.main_loop = loop
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.beat_period = beat_period
        self._until = ctx.RawValue("d", 0.0)
        # The heartbeat: this process's event loop writes time.monotonic() here
        # every `beat_period` (the clock is the machine's, shared by both
        # processes); the child renews only while it is fresh, so a hung
        # scheduler lets its Lease lapse.
        self._beat = ctx.RawValue("d", 0.0)
        self.watch = watch
        self._vouching = threading.Event()  # set: the thread that beats for a cycle ends
        self._leader = False
        self._beating: asyncio.TimerHandle | None = None
        self._events_r, self._events_w = ctx.Pipe(duplex=False)
        self._ctl_r, self._ctl_w = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=self._child, name="troupe-leader-election", daemon=True)
        self._reading = False

    def leading(self) -> bool:
        """The fence: True while the child holds the Lease and renewed it in time."""
        return time.time() < float(self._until.value)

    # -- the parent ----------------------------------------------------------------

    def start(self) -> None:
        self._beat.value = time.monotonic()
        self.proc.start()
        self._events_w.close()
        self._ctl_r.close()
        self.main_loop.add_reader(self._events_r.fileno(), self._on_message)
        self._reading = True
        self._beating = self.main_loop.call_later(self.beat_period, self._heartbeat)
        if self.watch is not None:  # a thread, now that the child is forked
            threading.Thread(
                target=self._vouch, args=(self.watch,), name="troupe-cycle-watch", daemon=True
            ).start()

    def _vouch(self, watch: CycleWatch) -> None:
        """A thread: beat for the loop while it is busy inside one cycle."""
        while not self._vouching.wait(self.beat_period):
            now = time.monotonic()
            if watch.busy(now):
                self._beat.value = now

    def _heartbeat(self) -> None:
        """Tell the child this loop answers, and see that the child does: a
        leader whose fence lapsed without a word from its child (the child hung,
        or cannot renew) stops at once, as if told "stopped"."""
        self._beat.value = time.monotonic()
        if self._leader and not self.leading():
            log.error("leader election: the Lease was not renewed in time by the elector")
            self._leader = False
            self.on_stopped()
        self._beating = self.main_loop.call_later(self.beat_period, self._heartbeat)

    def _on_message(self) -> None:
        try:
            msg = self._events_r.recv()
        except (EOFError, OSError):
            # The child is gone without a word (killed): no fence, no leadership.
            self._stop_reading()
            self._until.value = 0.0
            self._leader = False
            self.on_stopped()
            return
        if msg == "started":
            self._leader = True
            self.on_started()
        elif msg == "stopped":
            self._leader = False
            self.on_stopped()

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            with contextlib.suppress(Exception):
                self.main_loop.remove_reader(self._events_r.fileno())

    def alive(self) -> bool:
        return self.proc.is_alive()

    async def stop(self, timeout: float = 10.0) -> None:
        """Ask the child to end (it releases the Lease if held) and wait for it."""
        self._stop_reading()
        self._leader = False
        self._vouching.set()
        if self._beating is not None:
            self._beating.cancel()
        with contextlib.suppress(OSError):
            self._ctl_w.send("stop")
        await asyncio.get_running_loop().run_in_executor(None, self.proc.join, timeout)
        if self.proc.is_alive():
            self.proc.kill()
        self._until.value = 0.0
        self._ctl_w.close()
        self._events_r.close()

    # -- the child -----------------------------------------------------------------

    def _child(self) -> None:
        self._events_r.close()
        self._ctl_w.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # the parent decides when we stop
        asyncio._set_running_loop(None)  # forked from inside the parent's running loop

        def send(msg: str) -> None:
            with contextlib.suppress(OSError):
                self._events_w.send(msg)

        def publish(until: float) -> None:
            self._until.value = until

        async def main() -> None:
            elector = self.make_elector()
            elector.on_leading_until = publish
            deadline = elector.renew_deadline
            elector.alive = lambda: time.monotonic() - self._beat.value < deadline
            loop = asyncio.get_running_loop()
            task = asyncio.current_task()
            assert task is not None
            fd = self._ctl_r.fileno()

            def on_control() -> None:
                # A "stop" message, or end of file when the parent is gone: cancel
                # once. The pipe stays readable; a reader left registered would
                # cancel the release of the Lease that the cancellation starts.
                loop.remove_reader(fd)
                task.cancel()

            loop.add_reader(fd, on_control)
            try:
                await elector.run(lambda: send("started"), lambda: send("stopped"))
            finally:
                if self.close is not None:
                    await self.close()

        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("leader election failed")
        finally:
            self._until.value = 0.0
            send("stopped")


_T = TypeVar("_T")


async def _unless_stopped(work: Awaitable[_T], stop: asyncio.Event) -> _T | None:
    """`work`'s result, or None once `stop` is set first (`work` is cancelled)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


async def run(
    config: SchedulerConfig,
    kube: KubeClient,
    *,
    metrics_host: str = "0.0.0.0",
    metrics_port: int | None = None,
    tls: ssl.SSLContext | None = None,
    identity: str | None = None,
    stop: asyncio.Event | None = None,
    kinds: Collection[str] = tuple(WATCHED),
    on_scheduler: Callable[[Scheduler], None] | None = None,
    on_synced: Callable[[], None] | None = None,
) -> int:
    """Run the scheduler in a cluster until stopped (0) or the Lease is lost (1).
    The port serves over `tls` (by default a self-signed certificate made now),
    each request authenticated and authorized by the API server (troupe.operator.serving).
    Raises ServeError, having given up the Lease, when the port cannot be served.

    Leader election, its Lease and timings come from `config.leader_election`.
    `on_synced` is called once the caches hold the initial lists (`troupe run`
    sets the garbage collector up for the long run then)."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    le = config.leader_election
    identity = identity or default_identity()
    metrics = Metrics()
    scheduler = Scheduler(config, kube, RealClock(), metrics=metrics, registry=IN_TREE)
    if on_scheduler is not None:  # benchmarks instrument it
        on_scheduler(scheduler)
    lost = False
    scheduling: asyncio.Task[None] | None = None
    tasks: list[asyncio.Task[None]] = []

    def started() -> None:
        if not stop.is_set():
            tasks.append(asyncio.create_task(schedule()))

    def stopped() -> None:
        nonlocal lost
        metrics.set_leader(le.resource_name, False)
        if not stop.is_set():
            log.error("%s lost the Lease: stopping", identity)
            lost = True
            stop.set()

    # Defined before the elector starts: it may win the Lease (and call `started`)
    # while API discovery below is still awaited.
    synced = asyncio.Event()

    unsynced: set[str] = set()

    def kind_synced(kind: str) -> None:
        unsynced.discard(kind)
        if unsynced or synced.is_set():
            return
        if on_synced is not None:
            on_synced()
        synced.set()
        log.info("%s: caches synced", identity)

    async def schedule() -> None:
        nonlocal scheduling
        await synced.wait()
        if stop.is_set():
            return
        scheduler.enable_writes()
        metrics.set_leader(le.resource_name, True)
        log.info("%s leads: scheduling", identity)
        scheduling = asyncio.current_task()
        await scheduler.run(stop)

    election: ElectorProcess | None = None
    if le.leader_elect:

        def make_elector() -> LeaderElector:
            return LeaderElector(
                kube.lease(le.resource_namespace, le.resource_name, timeout=le.renew_deadline / 2),
                identity,
                RealClock(),
                lease_duration=le.lease_duration,
                renew_deadline=le.renew_deadline,
                retry_period=le.retry_period,
            )

        # Forked now, before this process has any thread (see ElectorProcess).
        election = ElectorProcess(
            make_elector,
            loop,
            started,
            stopped,
            beat_period=min(1.0, le.retry_period / 2),
            watch=CycleWatch(scheduler.progress, MAX_CYCLE_SECONDS),
            close=kube.close_leases,
        )
        election.start()
        # Until this replica leads, it writes nothing.
        kube.fence = election.leading
        scheduler.writes_enabled = False
    # The port first, as kube-scheduler binds its secure port before it starts:
    # a replica that cannot serve its probes ends at once, leader or standby.
    port = config.troupe.metrics_port if metrics_port is None else metrics_port
    explain = scheduler.decisions.get if scheduler.decisions is not None else None
    try:
        close_metrics = (
            await serve(
                metrics,
                metrics_host,
                port,
                synced.is_set,
                explain,
                tls=tls or server_tls(),
                auth=DelegatingAuth(kube),
            )
            if port
            else None
        )
    except ServeError:
        if election is not None:
            await election.stop()  # the child ignores SIGTERM: left alone, exit would wait on it
        await kube.aclose()
        raise
    kopf_thread: KopfThread | None = None
    try:
        # API discovery waits on the API server, which may not answer: a stop
        # signal meanwhile ends the replica (it gives the Lease up below).
        composites = config.troupe.features.composite_pod_group
        found = await _unless_stopped(watched_kinds(kube, kinds, composites), stop)
        if found is None:
            log.info("%s: stopped during API discovery", identity)
            return 0
        kinds = found
        unsynced.update(kinds)
        kopf_thread = KopfThread(build_registry(scheduler, loop, kube, kinds, kind_synced))
        kopf_thread.start()
        metrics.set_leader(le.resource_name, False)
        checks = metrics.health.livez
        watching = kopf_thread
        checks["watches"] = lambda: None if watching.thread.is_alive() else "kopf has stopped"

        def loop_alive() -> str | None:
            if scheduling is not None and scheduling.done() and not stop.is_set():
                return "the scheduling loop has ended"
            return None

        checks["scheduling-loop"] = loop_alive

        if election is not None:
            checks["leader-election"] = lambda: (
                None if election is None or election.alive() else "leader election has ended"
            )
        else:
            started()
        await stop.wait()
    finally:
        # Stop scheduling and let the binding cycles in flight end (pods waiting
        # at Permit are released) while the Lease is still ours, then give the
        # Lease up: the next leader never overlaps with our last binds.
        for t in tasks:
            if t is not scheduling:
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await asyncio.wait_for(scheduler.shutdown(), SHUTDOWN_SECONDS)
        except TimeoutError:
            log.warning("binding cycles still running after %ds: abandoned", SHUTDOWN_SECONDS)
        if election is not None:
            await election.stop()
        if kopf_thread is not None:
            kopf_thread.stop()
        await kube.aclose()
        if close_metrics is not None:
            await close_metrics()
    return 1 if lost else 0
