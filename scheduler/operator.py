"""The kopf operator: feeds the cluster into the scheduler and runs it.

The only module that imports kopf. kopf runs in its own thread and event loop
(kopf cancels tasks it did not create once it runs, and its watchers must not
share a loop with the scheduling cycle); its raw event handlers copy each
object and hand it to the scheduler's loop with `call_soon_threadsafe`. No
progress annotations or finalizers are put on objects we do not own: only
`@kopf.on.event` handlers, with posting and CRD scanning turned off. The same
object may arrive several times (list, watch, re-list): the scheduler's
handlers are idempotent upserts.

`run()` is what `troupe run` does: the initial lists go into the cache before
any scheduling (as kube-scheduler waits for its informers), the metrics and
health endpoints come up, and the scheduling loop runs while this replica
holds the Lease; a replica that loses it stops scheduling at once and exits,
and the next leader rebuilds its state from the API alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

import kopf

from scheduler.clock import RealClock
from scheduler.config import SchedulerConfig
from scheduler.kube import WATCHED, KubeClient, list_objects
from scheduler.leader import LeaderElector
from scheduler.metrics import Metrics
from scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)

Handler = Callable[[Mapping[str, Any], bool], None]


def handlers_of(scheduler: Scheduler) -> dict[str, Handler]:
    on_workload = scheduler.on_workload
    return {
        "Node": scheduler.on_node,
        "Pod": scheduler.on_pod,
        "PriorityClass": scheduler.on_priority_class,
        "PodGroup": scheduler.on_pod_group,
        "Namespace": scheduler.on_namespace,
        "Service": on_workload,
        "ReplicaSet": on_workload,
        "StatefulSet": on_workload,
        "ReplicationController": on_workload,
    }


def build_registry(
    scheduler: Scheduler,
    loop: asyncio.AbstractEventLoop,
    server: str | None = None,
    kinds: Collection[str] = tuple(WATCHED),
) -> kopf.OperatorRegistry:
    """kopf handlers that forward every event of the watched kinds to `loop`."""
    registry = kopf.OperatorRegistry()
    handlers = handlers_of(scheduler)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.scanning.disabled = True
        settings.watching.server_timeout = 300
        settings.networking.error_backoffs = [1, 2, 5, 10]

    if server is not None:

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=server, insecure=True)

    for kind in kinds:
        group, version, plural = WATCHED[kind]
        handler = handlers[kind]

        def make(kind: str, handler: Handler) -> Callable[..., Any]:
            async def on_event(event: Mapping[str, Any], body: Any, **_: Any) -> None:
                try:
                    obj = copy.deepcopy(dict(body))
                except Exception:
                    log.exception("malformed %s event skipped", kind)
                    return
                obj.setdefault("kind", kind)
                deleted = event.get("type") == "DELETED"
                loop.call_soon_threadsafe(_safely, handler, obj, deleted, kind)

            return on_event

        kopf.on.event(group, version, plural, registry=registry)(make(kind, handler))
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
        asyncio.run(
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


async def initial_sync(
    kube: KubeClient, scheduler: Scheduler, kinds: Collection[str] = tuple(WATCHED)
) -> int:
    """List every watched kind into the scheduler, dependencies first. A kind
    that cannot be listed (after the client's retries) is logged and skipped;
    its watch fills it in."""
    handlers = handlers_of(scheduler)
    n = 0
    order = (
        "PriorityClass",
        "Namespace",
        "Service",
        "ReplicaSet",
        "StatefulSet",
        "ReplicationController",
        "Node",
        "PodGroup",
        "Pod",
    )
    for kind in order:
        if kind not in kinds:
            continue
        try:
            objects = await list_objects(kube, kind)
        except Exception as e:
            log.error("initial list of %s failed: %s", kind, e)
            continue
        for obj in objects:
            _safely(handlers[kind], obj, False, kind)
            n += 1
    return n


async def run(
    config: SchedulerConfig,
    kube: KubeClient,
    *,
    metrics_host: str = "0.0.0.0",
    metrics_port: int | None = None,
    lease_namespace: str = "kube-system",
    lease_name: str = "troupe-scheduler",
    identity: str | None = None,
    server: str | None = None,
    stop: asyncio.Event | None = None,
    kinds: Collection[str] = tuple(WATCHED),
    lease_timings: tuple[float, float, float] = (15.0, 10.0, 2.0),
    on_scheduler: Callable[[Scheduler], None] | None = None,
) -> int:
    """Run the scheduler in a cluster until stopped (0) or the lease is lost (1).

    `lease_timings` are (leaseDuration, renewDeadline, retryPeriod) seconds."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    metrics = Metrics()
    scheduler = Scheduler(config, kube, RealClock(), metrics=metrics)
    if on_scheduler is not None:  # benchmarks instrument it
        on_scheduler(scheduler)
    synced = False
    port = config.troupe.metrics_port if metrics_port is None else metrics_port
    close_metrics = await metrics.serve(metrics_host, port, lambda: synced) if port else None
    kopf_thread = KopfThread(build_registry(scheduler, loop, server, kinds))
    kopf_thread.start()
    identity = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"
    duration, deadline, retry = lease_timings
    elector = LeaderElector(
        kube.lease(lease_namespace, lease_name),
        identity,
        RealClock(),
        lease_duration=duration,
        renew_deadline=deadline,
        retry_period=retry,
    )
    lost = False
    scheduling: asyncio.Task[None] | None = None

    async def started() -> None:
        nonlocal synced, scheduling
        count = await initial_sync(kube, scheduler, kinds)
        synced = True
        log.info("%s leads: %d objects in the cache; scheduling", identity, count)
        scheduling = asyncio.create_task(scheduler.run(stop))

    def stopped() -> None:
        nonlocal lost
        if not stop.is_set():
            lost = True
            stop.set()

    election = asyncio.create_task(elector.run(started, stopped))
    try:
        await stop.wait()
    finally:
        election.cancel()
        await asyncio.gather(election, return_exceptions=True)
        if scheduling is not None:
            await asyncio.gather(scheduling, return_exceptions=True)
        await scheduler.shutdown()
        kopf_thread.stop()
        kube.close()
        if close_metrics is not None:
            await close_metrics()  # type: ignore[misc]
    return 1 if lost else 0
