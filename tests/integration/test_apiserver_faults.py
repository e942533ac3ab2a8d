"""The embedded API server's timing faults (apiserver/faults.py), over HTTP as
Troupe meets them: write latency split around the commit, watch events held and
released in a burst, and 409s only where kube-apiserver can answer one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from apiserver import ApiServer
from apiserver.faults import Faults, Latency
from tests.builders import make_pod

MERGE = {"Content-Type": "application/merge-patch+json"}
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer() as srv:
        yield srv


def new_pod(api: ApiServer, name: str) -> dict[str, Any]:
    obj = make_pod(name).obj()
    obj["metadata"].pop("uid")
    return api.create(obj)


async def next_lines(resp: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    """The watch events of the stream's next chunk."""
    chunk = await asyncio.wait_for(resp.content.readany(), 30)
    return [json.loads(line) for line in chunk.splitlines() if line.strip()]


async def test_a_slow_write_is_seen_on_the_watch_before_its_writer_hears_back(
    api: ApiServer,
) -> None:
    rv = new_pod(api, "p")["metadata"]["resourceVersion"]
    api.faults = Faults(latency={("patch", "pods"): Latency(2.0)})
    async with (
        aiohttp.ClientSession(api.url) as s,
        s.get(f"{PODS}?watch=1&resourceVersion={rv}") as watch,
    ):
        patch = asyncio.ensure_future(
            s.patch(f"{PODS}/p", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE)
        )
        (ev,) = await next_lines(watch)
        assert ev["type"] == "MODIFIED"
        assert ev["object"]["metadata"]["labels"] == {"a": "b"}
        assert not patch.done()  # half the latency is still to pass
        resp = await patch
        assert resp.status == 200
        resp.release()
    assert api.faults.injected["latency"] == 1


async def test_held_watch_events_go_out_in_one_burst(api: ApiServer) -> None:
    rv = new_pod(api, "p0")["metadata"]["resourceVersion"]
    api.faults = Faults(watch_hold={"pods": Latency(2.0)})
    async with (
        aiohttp.ClientSession(api.url) as s,
        s.get(f"{PODS}?watch=1&resourceVersion={rv}") as watch,
    ):
        new_pod(api, "p1")
        await asyncio.sleep(0.1)  # well within the hold
        new_pod(api, "p2")
        names = [e["object"]["metadata"]["name"] for e in await next_lines(watch)]
        assert names == ["p1", "p2"]


async def test_conflicts_only_where_kube_can_answer_409(api: ApiServer) -> None:
    pod = new_pod(api, "p")
    rv = pod["metadata"]["resourceVersion"]
    api.faults = Faults(conflict_rate=1.0, bind_conflict_rate=1.0)
    async with aiohttp.ClientSession(api.url) as s:
        with_rv = {"metadata": {"resourceVersion": rv, "labels": {"x": "1"}}}
        async with s.patch(f"{PODS}/p", json=with_rv, headers=MERGE) as r:
            assert r.status == 409
            body = await r.json()
            assert body["reason"] == "Conflict"
            assert "the object has been modified" in body["message"]
        assert api.get("pods", "default", "p")["metadata"].get("labels") == {}  # type: ignore[index]
        plain = {"metadata": {"labels": {"x": "2"}}}
        async with s.patch(f"{PODS}/p", json=plain, headers=MERGE) as r:
            assert r.status == 200
        binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
        async with s.post(f"{PODS}/p/binding", json=binding) as r:
            assert r.status == 409
            assert 'already assigned to node "n1"' in (await r.json())["message"]
    # the bind was made: the 409 is what a retry of it gets
    assert api.get("pods", "default", "p")["spec"]["nodeName"] == "n1"  # type: ignore[index]
    assert [w.status for w in api.writes if w.verb == "bind"] == [201]
    assert api.faults.injected == {"conflict": 1, "bind-conflict": 1}
