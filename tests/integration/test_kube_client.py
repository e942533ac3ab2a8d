"""KubeClient (the real ClusterClient) against the emulator over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
from kubernetes import client as k8s

from scheduler.api.types import NodeName, PodKey
from scheduler.cluster import BindConflict, NotFound
from scheduler.kube import KubeClient
from scheduler.leader import LeaseConflict, LeaseRecord
from tests.integration.emulator import TroupeEmulator

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"schedulerName": "troupe-scheduler", "containers": [{"name": "c", "image": "x"}]},
}


@pytest.fixture
async def env() -> AsyncIterator[tuple[TroupeEmulator, KubeClient]]:
    async with TroupeEmulator() as emu, kmock.Server(emu) as srv:
        cfg = k8s.Configuration()
        cfg.host = str(srv.url).rstrip("/")
        kube = KubeClient(k8s.ApiClient(cfg), backoff=0.01)
        try:
            yield emu, kube
        finally:
            kube.close()


async def create(kube: KubeClient, obj: dict[str, Any]) -> None:
    await kube.call(
        "create", lambda: kube.core.create_namespaced_pod("default", obj, _preload_content=False)
    )  # type: ignore[arg-type]


def stored(emu: TroupeEmulator, plural: str, name: str) -> Any:
    for (res, _, n), obj in emu._objects.items():
        if res.plural == plural and n == name and not obj.deleted:
            return obj.raw
    return None


async def test_bind_sets_node_name_once(env: tuple[TroupeEmulator, KubeClient]) -> None:
    emu, kube = env
    await create(kube, POD)
    await kube.bind(PodKey("default/p"), "", NodeName("n1"))
    assert stored(emu, "pods", "p")["spec"]["nodeName"] == "n1"
    with pytest.raises(BindConflict):
        await kube.bind(PodKey("default/p"), "", NodeName("n2"))
    assert stored(emu, "pods", "p")["spec"]["nodeName"] == "n1"
    with pytest.raises(NotFound):
        await kube.bind(PodKey("default/gone"), "", NodeName("n1"))


async def test_bind_answered_500_then_201_is_retried(
    env: tuple[TroupeEmulator, KubeClient],
) -> None:
    emu, kube = env
    await create(kube, POD)
    emu.fail_next["/binding"] = [500, 503]
    await kube.bind(PodKey("default/p"), "", NodeName("n1"))
    assert emu.binds == 1 and emu.fail_next["/binding"] == []


async def test_events_conditions_and_podgroup_status(
    env: tuple[TroupeEmulator, KubeClient],
) -> None:
    emu, kube = env
    await create(kube, POD)
    await kube.record_event(
        PodKey("default/p"),
        "Warning",
        "FailedScheduling",
        "0/1 nodes are available: 1 Insufficient cpu.",
    )
    events = [o.raw for (r, _, _), o in emu._objects.items() if r.plural == "events"]
    assert events and events[0]["reason"] == "FailedScheduling"
    assert events[0]["involvedObject"]["name"] == "p"
    await kube.set_pod_condition(PodKey("default/p"), "False", "Unschedulable", "msg")
    cond = stored(emu, "pods", "p")["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    await kube.call(
        "create pg",
        lambda: kube.custom.create_namespaced_custom_object(
            "scheduling.x-k8s.io",
            "v1alpha1",
            "default",
            "podgroups",
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "default"},
                "spec": {"minMember": 2},
            },
        ),
    )
    await kube.patch_pod_group_status("default/g", {"phase": "Scheduled", "scheduled": 2})
    assert stored(emu, "podgroups", "g")["status"] == {"phase": "Scheduled", "scheduled": 2}


async def test_lease_create_and_conflict(env: tuple[TroupeEmulator, KubeClient]) -> None:
    _, kube = env
    lease = kube.lease("kube-system", "troupe-scheduler")
    assert await lease.get() is None
    rec = await lease.create(LeaseRecord("a", 15, 100.0, 100.0))
    got = await lease.get()
    assert got is not None and got.holder == "a" and got.renew_time == 100.0
    with pytest.raises(LeaseConflict):
        await lease.create(LeaseRecord("b", 15, 100.0, 100.0))
    assert rec.holder == "a"
