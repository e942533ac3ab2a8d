"""The real operator (kopf in its thread) against the emulator over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
import pytest
from kubernetes import client as k8s

from scheduler import operator
from scheduler.config import default_config
from scheduler.kube import WATCHED, KubeClient
from scheduler.plugins.registry import IN_TREE
from tests.builders import make_node, make_pod
from tests.integration.emulator import TroupeEmulator

# kmock 0.8 cannot parse /api/v1/namespaces (the path of the namespaces resource
# itself): its watch is left out here.
KINDS = tuple(k for k in WATCHED if k != "Namespace")


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[TroupeEmulator, str, Callable[[], KubeClient]]]:
    async with TroupeEmulator() as emu, kmock.Server(emu) as srv:
        url = str(srv.url).rstrip("/")

        def client() -> KubeClient:
            cfg = k8s.Configuration()
            cfg.host = url
            return KubeClient(k8s.ApiClient(cfg), backoff=0.05)

        yield emu, url, client


async def post(emu: TroupeEmulator, path: str, obj: dict[str, Any]) -> None:
    async with emu.post(path, json=obj) as resp:
        assert resp.status < 300, await resp.text()


def pods(emu: TroupeEmulator) -> dict[str, Any]:
    return {
        n: o.raw for (r, _, n), o in emu._objects.items() if r.plural == "pods" and not o.deleted
    }


async def until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def start(
    url: str, client: Callable[[], KubeClient], stop: asyncio.Event, **kwargs: Any
) -> asyncio.Task[int]:
    """The operator as `troupe run` runs it, against the emulator."""
    kwargs.setdefault("identity", "test")
    return asyncio.create_task(
        operator.run(
            default_config(IN_TREE),
            client(),
            server=url,
            metrics_port=0,
            stop=stop,
            kinds=KINDS,
            **kwargs,
        )
    )


async def test_pods_get_bound_through_pods_binding(
    cluster: tuple[TroupeEmulator, str, Callable[[], KubeClient]],
) -> None:
    emu, url, client = cluster
    for i in range(3):
        await post(
            emu, "/api/v1/nodes", make_node(f"n{i}").capacity(cpu=2, memory="4Gi", pods=10).obj()
        )
    for i in range(4):
        await post(emu, "/api/v1/namespaces/default/pods", make_pod(f"p{i}").req(cpu="1").obj())
    await post(emu, "/api/v1/namespaces/default/pods", make_pod("huge").req(cpu="64").obj())
    stop = asyncio.Event()
    task = start(url, client, stop)
    try:
        await until(
            lambda: sum(1 for p in pods(emu).values() if p.get("spec", {}).get("nodeName")) == 4
        )
        await until(lambda: "conditions" in pods(emu)["huge"].get("status", {}))
        cond = pods(emu)["huge"]["status"]["conditions"][0]
        assert cond["reason"] == "Unschedulable"
        assert cond["message"] == "0/3 nodes are available: 3 Insufficient cpu."
        assert emu.binds == 4
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0


def holder(emu: TroupeEmulator) -> str | None:
    for (r, _, n), o in emu._objects.items():
        if r.plural == "leases" and n == "troupe-scheduler" and not o.deleted:
            return str(o.raw.get("spec", {}).get("holderIdentity") or "")
    return None


async def test_two_replicas_bind_each_pod_once_and_fail_over(
    cluster: tuple[TroupeEmulator, str, Callable[[], KubeClient]],
) -> None:
    emu, url, client = cluster
    for i in range(2):
        await post(
            emu, "/api/v1/nodes", make_node(f"n{i}").capacity(cpu=4, memory="4Gi", pods=10).obj()
        )
    for i in range(4):
        await post(emu, "/api/v1/namespaces/default/pods", make_pod(f"p{i}").req(cpu="1").obj())

    def replica(name: str, stop: asyncio.Event) -> asyncio.Task[int]:
        return start(
            url,
            client,
            stop,
            identity=name,
            lease_namespace="default",
            lease_timings=(8.0, 5.0, 0.5),
        )

    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    a = replica("a", stop_a)
    await until(lambda: holder(emu) == "a")
    b = replica("b", stop_b)
    try:
        await until(
            lambda: sum(1 for p in pods(emu).values() if p.get("spec", {}).get("nodeName")) == 4
        )
        assert holder(emu) == "a"
        stop_a.set()
        assert await asyncio.wait_for(a, 30) == 0
        await until(lambda: holder(emu) == "b")
        for i in range(4, 6):
            await post(emu, "/api/v1/namespaces/default/pods", make_pod(f"p{i}").req(cpu="1").obj())
        await until(
            lambda: sum(1 for p in pods(emu).values() if p.get("spec", {}).get("nodeName")) == 6
        )
        assert emu.binds == 6  # every pod bound exactly once, no conflicting binds
    finally:
        stop_a.set()
        stop_b.set()
        await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), 30)


def test_make_demo_binds_what_fits(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from tests import demo

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert demo.main(["--metrics-port", str(port), "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert "7 of 12 pods bound" in out
    assert "pod ml/trainer                   -> gpu-b1" in out
    assert "podgroup ml/allreduce" in out and "phase=Scheduling" in out


async def test_malformed_object_is_reported_and_skipped(
    cluster: tuple[TroupeEmulator, str, Callable[[], KubeClient]],
) -> None:
    emu, url, client = cluster
    await post(emu, "/api/v1/nodes", make_node("n0").capacity(cpu=4, memory="4Gi", pods=10).obj())
    bad = make_pod("bad").obj()
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    await post(emu, "/api/v1/namespaces/default/pods", bad)
    await post(emu, "/api/v1/namespaces/default/pods", make_pod("good").req(cpu="1").obj())
    stop = asyncio.Event()
    task = start(url, client, stop)
    try:
        await until(lambda: pods(emu)["good"].get("spec", {}).get("nodeName") == "n0")
        await until(lambda: "conditions" in pods(emu)["bad"].get("status", {}))
        msg = pods(emu)["bad"]["status"]["conditions"][0]["message"]
        assert msg.startswith("spec.containers[0].resources.requests.cpu: quantities must")
        events = [o.raw for (r, _, _), o in emu._objects.items() if r.plural == "events"]
        assert any(
            e["involvedObject"]["name"] == "bad" and e["reason"] == "FailedScheduling"
            for e in events
        )
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0


async def test_a_dropped_watch_is_resumed(
    cluster: tuple[TroupeEmulator, str, Callable[[], KubeClient]],
) -> None:
    emu, url, client = cluster
    await post(emu, "/api/v1/nodes", make_node("n0").capacity(cpu=4, memory="4Gi", pods=10).obj())
    emu.drop_pod_watches = 2
    stop = asyncio.Event()
    task = start(url, client, stop)
    try:
        await until(lambda: emu.drop_pod_watches == 0 and emu.pod_watches >= 3)
        await post(emu, "/api/v1/namespaces/default/pods", make_pod("late").req(cpu="1").obj())
        await until(lambda: pods(emu)["late"].get("spec", {}).get("nodeName") == "n0")
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
