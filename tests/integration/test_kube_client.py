"""KubeClient (the real ClusterClient) against the embedded API server over HTTP:
every call Troupe makes goes through one stack (aiohttp, troupe.kube.transport)
and comes back as the typed errors of troupe.kube.errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from apiserver import ApiServer
from troupe.api.types import NodeName, PodKey
from troupe.core.cluster import BindConflict, Conflict, NotFound, NotLeader
from troupe.core.recorder import ObjectRef
from troupe.kube import (
    ApiError,
    Connection,
    KubeClient,
    NoAnswer,
    discover_version,
    load_connection,
)
from troupe.kube.lease import LeaseConflict, LeaseRecord

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"schedulerName": "troupe-scheduler", "containers": [{"name": "c", "image": "x"}]},
}


@pytest.fixture
async def env() -> AsyncIterator[tuple[ApiServer, KubeClient]]:
    async with ApiServer(podgroups=True) as srv:
        kube = KubeClient(Connection.to(srv.url), backoff=0.01, identity="test")
        try:
            yield srv, kube
        finally:
            await kube.aclose()


def ref(obj: dict[str, Any]) -> ObjectRef:
    md = obj["metadata"]
    return ObjectRef("Pod", md["namespace"], md["name"], md["uid"], "v1", md["resourceVersion"])


async def test_bind_sets_node_name_once(env: tuple[ApiServer, KubeClient]) -> None:
    srv, kube = env
    p = srv.create(POD)
    await kube.bind(PodKey("default/p"), p["metadata"]["uid"], NodeName("n1"))
    assert srv.get("pods", "default", "p")["spec"]["nodeName"] == "n1"  # type: ignore[index]
    with pytest.raises(BindConflict):
        await kube.bind(PodKey("default/p"), "", NodeName("n2"))
    assert srv.get("pods", "default", "p")["spec"]["nodeName"] == "n1"  # type: ignore[index]
    with pytest.raises(NotFound):
        await kube.bind(PodKey("default/gone"), "", NodeName("n1"))
    # the writes name this replica
    assert all("troupe-scheduler/" in w.user_agent and "(test)" in w.user_agent for w in srv.writes)


async def test_issue14_bind_of_a_recreated_pod_is_a_conflict_and_read_pod_tells(
    env: tuple[ApiServer, KubeClient],
) -> None:
    srv, kube = env
    old = srv.create(POD)
    srv.delete("pods", "default", "p")
    new = srv.create(POD)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    with pytest.raises(BindConflict):
        await kube.bind(PodKey("default/p"), old["metadata"]["uid"], NodeName("n1"))
    cur = await kube.read_pod(PodKey("default/p"))
    assert cur is not None and cur["metadata"]["uid"] == new["metadata"]["uid"]
    assert not cur["spec"].get("nodeName")
    assert await kube.read_pod(PodKey("default/none")) is None


async def test_bind_answered_500_then_201_is_retried(env: tuple[ApiServer, KubeClient]) -> None:
    srv, kube = env
    srv.create(POD)
    srv.fail_next["/binding"] = [500, 503]
    await kube.bind(PodKey("default/p"), "", NodeName("n1"))
    assert srv.binds == 1 and srv.fail_next["/binding"] == []


async def test_issue14_api_errors_carry_no_headers(env: tuple[ApiServer, KubeClient]) -> None:
    srv, kube = env
    srv.create(POD)
    srv.fail_next["/binding"] = [500] * 10
    with pytest.raises(ApiError) as e:
        await kube.bind(PodKey("default/p"), "", NodeName("n1"))
    text = str(e.value)
    assert text.startswith("HTTP 500") and "HTTP response headers" not in text
    assert "Content-Type" not in text


async def test_every_request_has_a_timeout(env: tuple[ApiServer, KubeClient]) -> None:
    srv, kube = env
    srv.create(POD)
    kube.writes.timeout = (1.0, 1.0)
    kube.writes.retries = 0
    srv.hang("/binding")
    # The client's own read timeout ends the request (a hang guard of a minute
    # around it would raise a plain TimeoutError, not the client's).
    with pytest.raises(NoAnswer):
        async with asyncio.timeout(60):
            await kube.bind(PodKey("default/p"), "", NodeName("n1"))
    srv.unhang()


async def test_issue14_fenced_writes_are_not_sent(env: tuple[ApiServer, KubeClient]) -> None:
    srv, kube = env
    p = srv.create(POD)
    kube.fence = lambda: False  # this replica does not lead (or no longer)
    with pytest.raises(NotLeader):
        await kube.bind(PodKey("default/p"), "", NodeName("n1"))
    with pytest.raises(NotLeader):
        await kube.set_pod_condition(PodKey("default/p"), "False", "Unschedulable", "m")
    await kube.record_event(ref(p), "Warning", "FailedScheduling", "m")  # dropped
    assert srv.writes == [] and srv.objects("events") == []


async def test_events_are_aggregated_as_client_go_does(env: tuple[ApiServer, KubeClient]) -> None:
    srv, kube = env
    p = srv.create(POD)
    msg = "0/1 nodes are available: 1 Insufficient cpu."
    await kube.record_event(ref(p), "Warning", "FailedScheduling", msg, "Scheduling")
    await kube.record_event(ref(p), "Warning", "FailedScheduling", msg, "Scheduling")
    await kube.record_event(ref(p), "Warning", "FailedScheduling", msg, "Scheduling")
    events = srv.objects("events")
    assert len(events) == 1
    ev = events[0]
    assert ev["count"] == 3 and ev["reason"] == "FailedScheduling" and ev["message"] == msg
    assert ev["involvedObject"]["uid"] == p["metadata"]["uid"]
    assert ev["reportingComponent"] == "troupe-scheduler"
    assert ev["reportingInstance"] == "troupe-scheduler-test"
    assert kube.events_written == 3  # one create, two count patches
    # an expired (deleted) event is created anew on the next repeat
    srv.delete("events", "default", ev["metadata"]["name"])
    await kube.record_event(ref(p), "Warning", "FailedScheduling", msg, "Scheduling")
    assert [e["count"] for e in srv.objects("events")] == [1]


async def test_conditions_and_podgroup_status(env: tuple[ApiServer, KubeClient]) -> None:
    srv, kube = env
    srv.create(POD)
    await kube.set_pod_condition(PodKey("default/p"), "False", "Unschedulable", "msg")
    cond = srv.get("pods", "default", "p")["status"]["conditions"][0]  # type: ignore[index]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    srv.create(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": 2},
        }
    )
    await kube.patch_pod_group_status("default/g", {"phase": "Scheduling", "running": 0})
    assert srv.get("podgroups", "default", "g")["status"] == {"phase": "Scheduling", "running": 0}  # type: ignore[index]
    with pytest.raises(NotFound):
        await kube.patch_pod_group_status("default/none", {"phase": "Running"})


async def test_per_pod_writes_over_tls_carry_the_token_and_content_types(
    tmp_path: Path,
) -> None:
    """Binds, Events and status patches verify the server's certificate with the
    kubeconfig's CA, carry its bearer token and this replica's User-Agent, and
    send the content types the generated API would."""
    async with ApiServer(tls=True, token="right") as srv:
        p = srv.create(POD)
        kube = KubeClient(
            load_connection(str(srv.write_kubeconfig(tmp_path / "kc", token="right"))),
            backoff=0.01,
            identity="test",
        )
        wrong = KubeClient(
            load_connection(str(srv.write_kubeconfig(tmp_path / "bad", token="wrong"))),
            retries=0,
            identity="wrong",
        )
        try:
            await kube.set_pod_condition(PodKey("default/p"), "False", "Unschedulable", "m")
            await kube.record_event(ref(p), "Warning", "FailedScheduling", "m", "Scheduling")
            await kube.record_event(ref(p), "Warning", "FailedScheduling", "m", "Scheduling")
            await kube.set_nominated_node(PodKey("default/p"), "n2")
            await kube.bind(PodKey("default/p"), p["metadata"]["uid"], NodeName("n1"))
            got = srv.get("pods", "default", "p")
            assert got is not None
            assert got["spec"]["nodeName"] == "n1"
            assert got["status"]["nominatedNodeName"] == "n2"
            assert [e["count"] for e in srv.objects("events")] == [2]
            assert srv.writes and all(w.status < 300 for w in srv.writes)
            assert all("(test)" in w.user_agent for w in srv.writes)
            with pytest.raises(ApiError) as e:
                await wrong.bind(PodKey("default/p"), "", NodeName("n2"))
            assert e.value.status == 401
        finally:
            await kube.aclose()
            await wrong.aclose()


async def test_lease_create_update_and_conflicts(env: tuple[ApiServer, KubeClient]) -> None:
    _, kube = env
    lease = kube.lease("kube-system", "troupe-scheduler")
    assert await lease.get() is None
    rec = await lease.create(LeaseRecord("a", 15, 100.0, 100.0))
    got = await lease.get()
    assert got is not None and got.holder == "a" and got.renew_time == 100.0
    with pytest.raises(LeaseConflict):
        await lease.create(LeaseRecord("b", 15, 100.0, 100.0))
    renewed = await lease.update(replace(rec, renew_time=110.0))
    assert renewed.renew_time == 110.0 and renewed.version != rec.version
    # an update based on a stale read is refused (resourceVersion precondition)
    with pytest.raises(LeaseConflict):
        await lease.update(replace(rec, holder="b", renew_time=120.0))
    got = await lease.get()
    assert got is not None and got.holder == "a"


async def test_lease_calls_do_not_wait_behind_writes(env: tuple[ApiServer, KubeClient]) -> None:
    """#14.3: binds hung at the server occupy the writes lane; the Lease lane
    has its own connection and budget."""
    srv, kube = env
    for i in range(8):
        srv.create({**POD, "metadata": {"name": f"p{i}", "namespace": "default"}})
    kube.writes.retries = 0
    srv.hang("/binding")
    binds = [
        asyncio.ensure_future(kube.bind(PodKey(f"default/p{i}"), "", NodeName("n1")))
        for i in range(8)
    ]
    await asyncio.sleep(0.2)
    lease = kube.lease("kube-system", "troupe-scheduler")
    # While every write is stuck, the Lease is still created and read
    # (behind the writes, this would wait until the binds' timeouts).
    await asyncio.wait_for(lease.create(LeaseRecord("a", 15, 100.0, 100.0)), 10)
    assert await asyncio.wait_for(lease.get(), 10) is not None
    assert not any(b.done() for b in binds)
    srv.unhang()
    await asyncio.gather(*binds, return_exceptions=True)


async def test_per_pod_writes_follow_the_clients_tls_settings(tmp_path: Path) -> None:
    """The loop's writes verify the server with the kubeconfig's CA; without it
    the certificate is refused at once (not retried as a transient error);
    insecure-skip-tls-verify (verify_ssl False) accepts it."""
    async with ApiServer(tls=True) as srv:
        p = srv.create(POD)
        # No CA: the system's trust store does not know the test CA.
        untrusting = KubeClient(Connection.to(srv.url), backoff=0.01, identity="test")
        insecure = KubeClient(Connection.to(srv.url, verify=False), backoff=0.01, identity="test")
        try:
            with pytest.raises(ApiError) as e:
                await untrusting.bind(PodKey("default/p"), "", NodeName("n1"))
            assert e.value.status == 0 and "certificate verify failed" in str(e.value).lower()
            assert srv.binds == 0
            await insecure.bind(PodKey("default/p"), p["metadata"]["uid"], NodeName("n1"))
            assert srv.binds == 1
        finally:
            await untrusting.aclose()
            await insecure.aclose()


async def test_per_pod_writes_take_a_refreshed_token() -> None:
    """A token that the client's refresh hook renews (exec providers, rotating
    service-account tokens) is the one each request carries."""
    async with ApiServer(token="new") as srv:
        srv.create(POD)
        cfg = k8s.Configuration()
        cfg.host = srv.url
        cfg.api_key = {"authorization": "old"}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        kube = KubeClient(Connection(cfg), retries=0, identity="test")
        try:
            with pytest.raises(ApiError) as e:
                await kube.set_pod_condition(PodKey("default/p"), "False", "Unschedulable", "m")
            assert e.value.status == 401

            def refresh(c: k8s.Configuration) -> None:
                c.api_key["authorization"] = "new"

            cfg.refresh_api_key_hook = refresh
            await kube.set_pod_condition(PodKey("default/p"), "False", "Unschedulable", "m")
            assert srv.get("pods", "default", "p")["status"]["conditions"][0]["reason"] == (  # type: ignore[index]
                "Unschedulable"
            )
        finally:
            await kube.aclose()


async def test_per_pod_writes_go_through_the_configured_proxy(
    env: tuple[ApiServer, KubeClient],
) -> None:
    """An HTTP proxy in the client's configuration carries the loop's writes
    unless no_proxy names the server."""
    srv, _ = env
    srv.create(POD)
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    cfg = k8s.Configuration()
    cfg.host = srv.url
    cfg.proxy = dead
    cfg.no_proxy = ""
    proxied = KubeClient(Connection(cfg), retries=0, identity="test")
    cfg2 = k8s.Configuration()
    cfg2.host = srv.url
    cfg2.proxy = dead
    cfg2.no_proxy = "127.0.0.1"
    bypassed = KubeClient(Connection(cfg2), retries=0, identity="test")
    try:
        with pytest.raises(OSError):  # the proxy refused the connection
            await proxied.bind(PodKey("default/p"), "", NodeName("n1"))
        assert srv.binds == 0
        await bypassed.bind(PodKey("default/p"), "", NodeName("n1"))
        assert srv.binds == 1
    finally:
        await proxied.aclose()
        await bypassed.aclose()


PV: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "PersistentVolume",
    "metadata": {"name": "pv1"},
    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]},
}


async def test_volume_patches_return_the_object_and_type_conflicts(
    env: tuple[ApiServer, KubeClient],
) -> None:
    """VolumeBinding's PreBind writes: a merge patch whose resourceVersion is
    a precondition; the object as written comes back."""
    srv, kube = env
    pv = srv.create(PV)
    rv = pv["metadata"]["resourceVersion"]
    ref = {"namespace": "default", "name": "c"}
    got = await kube.patch_persistent_volume(
        "pv1", {"metadata": {"resourceVersion": rv}, "spec": {"claimRef": ref}}
    )
    assert got["spec"]["claimRef"] == ref and got["metadata"]["resourceVersion"] != rv
    with pytest.raises(Conflict) as e:  # the same precondition again: stale now
        await kube.patch_persistent_volume("pv1", {"metadata": {"resourceVersion": rv}})
    assert str(e.value).startswith("pv1: HTTP 409")
    with pytest.raises(NotFound):
        await kube.patch_persistent_volume_claim("default/none", {"metadata": {}})


async def test_delete_pod_of_a_recreated_pod_is_not_found(
    env: tuple[ApiServer, KubeClient],
) -> None:
    """Preemption's eviction: the uid precondition fails (409) on a pod
    re-created under the victim's name, which is NotFound to the caller."""
    srv, kube = env
    old = srv.create(POD)
    srv.delete("pods", "default", "p")
    srv.create(POD)
    with pytest.raises(NotFound):
        await kube.delete_pod(PodKey("default/p"), old["metadata"]["uid"], 0)
    assert srv.get("pods", "default", "p") is not None
    with pytest.raises(NotFound):
        await kube.delete_pod(PodKey("default/none"), "", None)
    cur = srv.get("pods", "default", "p")
    assert cur is not None
    await kube.delete_pod(PodKey("default/p"), cur["metadata"]["uid"], 0)
    assert srv.get("pods", "default", "p") is None


async def test_discovery_reads_through_the_same_lane(env: tuple[ApiServer, KubeClient]) -> None:
    _, kube = env
    assert await discover_version(kube, "coordination.k8s.io", ["v1"], "leases") == "v1"
    assert await discover_version(kube, "coordination.k8s.io", ["v1"], "nothings") is None
    assert await discover_version(kube, "nowhere.example.com", ["v1"], "things") is None
