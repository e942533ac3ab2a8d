"""The embedded API server over real HTTP: what kopf, the kubernetes client and
kubectl rely on, checked against kube-apiserver's behaviour."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config import incluster_config

from apiserver import ApiServer, WriteRecord

REPO = Path(__file__).resolve().parents[2]
JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"


def pod(name: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    status = spec.pop("status", None)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }
    if status is not None:
        body["status"] = status
    return body


@pytest.fixture
async def srv() -> AsyncIterator[ApiServer]:
    async with ApiServer() as server:
        yield server


class Http:
    """Raw HTTP against one server: (status, decoded JSON body)."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url

    async def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctype: str = JSON,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        hdrs = {"Content-Type": ctype, **(headers or {})}
        async with self.session.request(method, self.url + path, data=data, headers=hdrs) as r:
            text = await r.text()
            return r.status, json.loads(text) if text.strip() else None

    async def ok(self, method: str, path: str, body: Any = None, ctype: str = JSON) -> Any:
        status, out = await self(method, path, body, ctype)
        assert status < 300, (status, out)
        return out


@pytest.fixture
async def http(srv: ApiServer) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as session:
        yield Http(session, srv.url)


async def read_events(
    resp: aiohttp.ClientResponse, n: int, timeout: float = 5.0
) -> list[dict[str, Any]]:
    out = []
    async with asyncio.timeout(timeout):
        while len(out) < n:
            line = await resp.content.readline()
            if not line:
                break
            out.append(json.loads(line))
    return out


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.02)


PODS = "/api/v1/namespaces/default/pods"

# Discovery ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("/api", lambda d: d["kind"] == "APIVersions" and d["versions"] == ["v1"]),
        ("/version", lambda d: d["major"] == "1" and d["gitVersion"].startswith("v1.")),
        (
            "/apis",
            lambda d: (
                {g["name"] for g in d["groups"]}
                >= {
                    "apps",
                    "scheduling.k8s.io",
                    "coordination.k8s.io",
                    "events.k8s.io",
                    "apiextensions.k8s.io",
                }
                and "scheduling.x-k8s.io" not in {g["name"] for g in d["groups"]}
            ),
        ),
        (
            "/apis/apps",
            lambda d: (
                d["kind"] == "APIGroup" and d["preferredVersion"]["groupVersion"] == "apps/v1"
            ),
        ),
        (
            "/apis/apps/v1",
            lambda d: (
                d["groupVersion"] == "apps/v1"
                and {r["name"] for r in d["resources"]} >= {"replicasets", "statefulsets"}
            ),
        ),
    ],
)
async def test_discovery_documents(http: Http, path: str, check: Callable[[Any], bool]) -> None:
    assert check(await http.ok("GET", path))


async def test_core_resource_list_names_kinds_short_names_and_subresources(http: Http) -> None:
    doc = await http.ok("GET", "/api/v1")
    assert (doc["kind"], doc["groupVersion"]) == ("APIResourceList", "v1")
    by_name = {r["name"]: r for r in doc["resources"]}
    for name, kind, short, namespaced in [
        ("pods", "Pod", "po", True),
        ("nodes", "Node", "no", False),
        ("namespaces", "Namespace", "ns", False),
        ("events", "Event", "ev", True),
        ("services", "Service", "svc", True),
    ]:
        entry = by_name[name]
        assert (entry["kind"], entry["namespaced"]) == (kind, namespaced)
        assert short in entry["shortNames"]
        assert "watch" in entry["verbs"]
    assert by_name["pods/binding"]["verbs"] == ["create"]
    assert by_name["pods/status"]["kind"] == "Pod"


async def test_podgroups_pre_registered_on_request() -> None:
    async with ApiServer(podgroups=True) as server, aiohttp.ClientSession() as s:
        http = Http(s, server.url)
        doc = await http.ok("GET", "/apis/scheduling.x-k8s.io/v1alpha1")
        names = {r["name"]: r for r in doc["resources"]}
        assert names["podgroups"]["shortNames"] == ["pg", "pgs"]
        assert "podgroups/status" in names


# Objects -----------------------------------------------------------------------


async def test_objects_carry_uid_timestamp_generation_and_a_global_rising_version(
    http: Http,
) -> None:
    made = [await http.ok("POST", PODS, pod(f"p{i}")) for i in range(3)]
    node = await http.ok("POST", "/api/v1/nodes", {"metadata": {"name": "n1"}})
    rvs = [int(o["metadata"]["resourceVersion"]) for o in [*made, node]]
    assert rvs == sorted(rvs) and len(set(rvs)) == 4
    assert len({o["metadata"]["uid"] for o in made}) == 3
    for o in made:
        assert o["kind"] == "Pod" and o["apiVersion"] == "v1"
        assert o["metadata"]["creationTimestamp"].endswith("Z")
        assert o["metadata"]["generation"] == 1
    listed = await http.ok("GET", PODS)
    assert (listed["kind"], listed["apiVersion"]) == ("PodList", "v1")
    assert int(listed["metadata"]["resourceVersion"]) >= rvs[-1]
    assert [i["metadata"]["name"] for i in listed["items"]] == ["p0", "p1", "p2"]


async def test_create_get_errors_are_kube_statuses(http: Http) -> None:
    await http.ok("POST", PODS, pod("p"))
    status, body = await http("POST", PODS, pod("p"))
    assert status == 409
    assert (body["kind"], body["reason"], body["message"]) == (
        "Status",
        "AlreadyExists",
        'pods "p" already exists',
    )
    status, body = await http("GET", PODS + "/nope")
    assert (status, body["reason"], body["message"]) == (404, "NotFound", 'pods "nope" not found')
    assert body["details"] == {"name": "nope", "group": "", "kind": "pods"}
    status, body = await http("GET", "/apis/nope.example.com/v1/widgets")
    assert status == 404


async def test_generate_name(http: Http) -> None:
    body = pod("x")
    body["metadata"] = {"generateName": "web-"}
    out = await http.ok("POST", PODS, body)
    assert out["metadata"]["name"].startswith("web-") and len(out["metadata"]["name"]) == 9


async def test_namespaces_default_and_kube_system_exist_and_others_appear(http: Http) -> None:
    names = {n["metadata"]["name"] for n in (await http.ok("GET", "/api/v1/namespaces"))["items"]}
    assert {"default", "kube-system"} <= names
    await http.ok("POST", "/api/v1/namespaces/team/pods", pod("p", ns="team"))
    assert (await http.ok("GET", "/api/v1/namespaces/team"))["status"]["phase"] == "Active"


async def test_strict_namespaces_404() -> None:
    async with ApiServer(strict_namespaces=True) as server, aiohttp.ClientSession() as s:
        status, body = await Http(s, server.url)(
            "POST", "/api/v1/namespaces/team/pods", pod("p", ns="team")
        )
        assert (status, body["message"]) == (404, 'namespaces "team" not found')


async def test_stale_resource_version_and_uid_preconditions_conflict(http: Http) -> None:
    first = await http.ok("POST", PODS, pod("p"))
    second = await http.ok("PATCH", PODS + "/p", {"metadata": {"labels": {"a": "1"}}}, MERGE)
    stale = dict(first, metadata=dict(first["metadata"], labels={"b": "2"}))
    status, body = await http("PUT", PODS + "/p", stale)
    assert status == 409 and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    patch = {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}}
    assert (await http("PATCH", PODS + "/p", patch, MERGE))[0] == 409
    fresh = dict(second, metadata=dict(second["metadata"], labels={"b": "2"}))
    assert (await http.ok("PUT", PODS + "/p", fresh))["metadata"]["labels"] == {"b": "2"}
    opts = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "other"}}
    status, body = await http("DELETE", PODS + "/p", opts)
    assert status == 409 and "Precondition failed: UID in precondition: other" in body["message"]
    opts["preconditions"] = {"uid": first["metadata"]["uid"]}
    await http.ok("DELETE", PODS + "/p", opts)


async def test_update_that_changes_nothing_keeps_the_version(http: Http) -> None:
    made = await http.ok("POST", PODS, pod("p"))
    again = await http.ok("PUT", PODS + "/p", made)
    assert again["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]


async def test_status_subresource_semantics(http: Http) -> None:
    made = await http.ok("POST", PODS, pod("p", status={"phase": "Running"}))
    # Main resource writes ignore .status; spec changes bump generation.
    body = dict(made, status={"phase": "Failed"}, spec=dict(made["spec"], priority=5))
    del body["metadata"]["resourceVersion"]
    out = await http.ok("PUT", PODS + "/p", body)
    assert out["status"]["phase"] == "Running"
    assert (out["spec"]["priority"], out["metadata"]["generation"]) == (5, 2)
    out = await http.ok("PATCH", PODS + "/p", {"status": {"phase": "Failed"}}, MERGE)
    assert out["status"]["phase"] == "Running"
    # Status writes change only .status, and leave generation alone.
    patch = {"spec": {"priority": 9}, "status": {"phase": "Succeeded"}}
    out = await http.ok("PATCH", PODS + "/p/status", patch, MERGE)
    assert (out["status"]["phase"], out["spec"]["priority"]) == ("Succeeded", 5)
    assert out["metadata"]["generation"] == 2
    out = await http.ok("PUT", PODS + "/p/status", dict(out, status={"phase": "Failed"}))
    assert out["status"]["phase"] == "Failed"
    assert (await http.ok("GET", PODS + "/p/status"))["status"]["phase"] == "Failed"


# Binding -----------------------------------------------------------------------


def binding(name: str, node: str, uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if uid is not None:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


async def test_binding_sets_node_and_pod_scheduled_once(srv: ApiServer, http: Http) -> None:
    made = await http.ok("POST", PODS, pod("p"))
    status, body = await http(
        "POST", PODS + "/p/binding", binding("p", "n1", made["metadata"]["uid"])
    )
    assert (status, body["kind"], body["status"]) == (201, "Status", "Success")
    got = await http.ok("GET", PODS + "/p")
    assert got["spec"]["nodeName"] == "n1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= got["status"]["conditions"][
        0
    ].items()
    assert srv.binds == 1
    status, body = await http("POST", PODS + "/p/binding", binding("p", "n2"))
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    )
    assert srv.binds == 1


@pytest.mark.parametrize(
    ("name", "uid", "want", "reason"),
    [
        ("gone", None, 404, "NotFound"),
        ("p", "uid-of-an-earlier-pod", 409, "Conflict"),
    ],
)
async def test_binding_refused(
    srv: ApiServer, http: Http, name: str, uid: str | None, want: int, reason: str
) -> None:
    await http.ok("POST", PODS, pod("p"))
    status, body = await http("POST", PODS + f"/{name}/binding", binding(name, "n1", uid))
    assert (status, body["reason"]) == (want, reason)
    assert srv.binds == 0
    assert (await http.ok("GET", PODS + "/p"))["spec"].get("nodeName") is None


async def test_binding_through_the_kubernetes_client(srv: ApiServer) -> None:
    srv.create(pod("p"))
    cfg = k8s.Configuration()
    cfg.host = srv.url

    def bind() -> None:
        with k8s.ApiClient(cfg) as api:
            k8s.CoreV1Api(api).create_namespaced_pod_binding(
                "p", "default", binding("p", "n1"), _preload_content=False
            )
            assert k8s.CoreV1Api(api).read_namespaced_pod("p", "default").spec.node_name == "n1"

    await asyncio.to_thread(bind)
    assert srv.requests[("create", "pods", "binding")] == 1


# Patches -----------------------------------------------------------------------

COND = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


@pytest.mark.parametrize(
    ("ctype", "path", "patch", "check"),
    [
        (
            MERGE,
            "",
            {"metadata": {"labels": {"a": "1"}}},
            lambda o: o["metadata"]["labels"]["a"] == "1",
        ),
        (
            MERGE,
            "",
            {"metadata": {"labels": {"keep": None}}},
            lambda o: o["metadata"]["labels"] == {},
        ),
        (
            STRATEGIC,
            "/status",
            {"status": {"conditions": [COND]}},
            lambda o: (
                [c["type"] for c in o["status"]["conditions"]] == ["Ready", "PodScheduled"]
                and o["status"]["conditions"][1]["reason"] == "Unschedulable"
            ),
        ),
        (
            STRATEGIC,
            "/status",
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            lambda o: o["status"]["conditions"] == [{"type": "Ready", "status": "False"}],
        ),
        (
            STRATEGIC,
            "",
            {"spec": {"containers": [{"name": "side", "image": "envoy"}]}},
            lambda o: [c["name"] for c in o["spec"]["containers"]] == ["main", "side"],
        ),
        (
            STRATEGIC,
            "",
            {"spec": {"containers": [{"name": "main", "image": "nginx"}]}},
            lambda o: o["spec"]["containers"] == [{"name": "main", "image": "nginx"}],
        ),
        (
            STRATEGIC,
            "",
            {"spec": {"containers": [{"name": "main", "$patch": "delete"}]}},
            lambda o: o["spec"]["containers"] == [],
        ),
        (
            STRATEGIC,
            "",
            {"metadata": {"finalizers": ["b", "a"]}},
            lambda o: o["metadata"]["finalizers"] == ["a", "b"],
        ),
        (
            JSONPATCH,
            "",
            [
                {"op": "add", "path": "/metadata/labels/x~1y", "value": "1"},
                {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx"},
                {"op": "remove", "path": "/metadata/labels/keep"},
                {"op": "add", "path": "/spec/containers/-", "value": {"name": "z"}},
            ],
            lambda o: (
                o["metadata"]["labels"] == {"x/y": "1"}
                and [c.get("image") for c in o["spec"]["containers"]] == ["nginx", None]
            ),
        ),
    ],
)
async def test_patch_types(
    http: Http, ctype: str, path: str, patch: Any, check: Callable[[Any], bool]
) -> None:
    body = pod(
        "p", labels={"keep": "me"}, status={"conditions": [{"type": "Ready", "status": "True"}]}
    )
    body["metadata"]["finalizers"] = ["a"]
    await http.ok("POST", PODS, body)
    out = await http.ok("PATCH", PODS + "/p" + path, patch, ctype)
    assert check(out), out
    assert check(await http.ok("GET", PODS + "/p"))


@pytest.mark.parametrize(
    ("path", "ctype", "patch", "want"),
    [
        (PODS + "/p", JSONPATCH, [{"op": "test", "path": "/metadata/name", "value": "q"}], 422),
        (PODS + "/p", JSONPATCH, [{"op": "remove", "path": "/spec/nothing"}], 422),
        (PODS + "/p", "application/yaml-patch+yaml", {"metadata": {}}, 415),
        (PODS + "/nope", MERGE, {"metadata": {}}, 404),
    ],
)
async def test_patch_refused(http: Http, path: str, ctype: str, patch: Any, want: int) -> None:
    await http.ok("POST", PODS, pod("p"))
    status, body = await http("PATCH", path, patch, ctype)
    assert (status, body["kind"]) == (want, "Status")


# Selectors ---------------------------------------------------------------------


@pytest.fixture
async def zoo(http: Http) -> Http:
    await http.ok(
        "POST",
        PODS,
        pod("a", labels={"app": "web", "tier": "front"}, schedulerName="troupe-scheduler"),
    )
    await http.ok(
        "POST", PODS, pod("b", labels={"app": "web"}, nodeName="n1", status={"phase": "Running"})
    )
    await http.ok("POST", PODS, pod("c", labels={"app": "db"}))
    await http.ok(
        "POST", "/api/v1/namespaces/other/pods", pod("d", ns="other", labels={"app": "web"})
    )
    return http


@pytest.mark.parametrize(
    ("query", "want"),
    [
        ("labelSelector=app%3Dweb", ["a", "b"]),
        ("labelSelector=app%3D%3Dweb", ["a", "b"]),
        ("labelSelector=app!%3Dweb", ["c"]),
        ("labelSelector=app+in+(db,cache)", ["c"]),
        ("labelSelector=app+notin+(db)", ["a", "b"]),
        ("labelSelector=tier", ["a"]),
        ("labelSelector=!tier", ["b", "c"]),
        ("labelSelector=app%3Dweb,!tier", ["b"]),
        ("fieldSelector=spec.schedulerName%3Dtroupe-scheduler", ["a"]),
        ("fieldSelector=spec.nodeName%3D", ["a", "c"]),
        ("fieldSelector=spec.nodeName!%3D", ["b"]),
        ("fieldSelector=status.phase%3DRunning", ["b"]),
        ("fieldSelector=metadata.name%3Dc", ["c"]),
        ("fieldSelector=spec.nodeName%3D,spec.schedulerName!%3Dtroupe-scheduler", ["c"]),
        ("fieldSelector=spec.nodeName%3D&labelSelector=app%3Dweb", ["a"]),
    ],
)
async def test_list_selectors(zoo: Http, query: str, want: list[str]) -> None:
    got = await zoo.ok("GET", f"{PODS}?{query}")
    assert [i["metadata"]["name"] for i in got["items"]] == want


async def test_selectors_across_namespaces_and_unsupported_fields(zoo: Http) -> None:
    got = await zoo.ok("GET", "/api/v1/pods?labelSelector=app%3Dweb")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in got["items"]] == [
        ("default", "a"),
        ("default", "b"),
        ("other", "d"),
    ]
    status, body = await zoo("GET", f"{PODS}?fieldSelector=spec.image%3Dx")
    assert (status, body["message"]) == (400, "field label not supported: spec.image")


async def test_event_field_selectors(http: Http) -> None:
    def event(name: str, uid: str, kind: str = "Pod", type_: str = "Normal") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": {"kind": kind, "name": "p", "namespace": "default", "uid": uid},
            "reason": "Scheduled",
            "type": type_,
        }

    for e in [event("e1", "u1"), event("e2", "u2"), event("e3", "u1", "Node", "Warning")]:
        await http.ok("POST", "/api/v1/namespaces/default/events", e)
    for query, want in [
        ("involvedObject.uid=u1", ["e1", "e3"]),
        ("involvedObject.kind=Pod,involvedObject.name=p,involvedObject.uid=u1", ["e1"]),
        ("involvedObject.namespace=default,type=Warning", ["e3"]),
        ("reason=Scheduled,involvedObject.uid!=u1", ["e2"]),
    ]:
        got = await http.ok("GET", f"/api/v1/namespaces/default/events?fieldSelector={query}")
        assert [i["metadata"]["name"] for i in got["items"]] == want, query


async def test_events_k8s_io_selects_on_regarding(http: Http) -> None:
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    for name, uid in [("e1", "u1"), ("e2", "u2")]:
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name},
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default", "uid": uid},
            "reason": "Scheduled",
            "reportingController": "troupe-scheduler",
            "action": "Binding",
            "eventTime": "2026-01-01T00:00:00.000000Z",
        }
        await http.ok("POST", path, event)
    got = await http.ok("GET", f"{path}?fieldSelector=regarding.uid%3Du2")
    assert (got["kind"], [i["metadata"]["name"] for i in got["items"]]) == ("EventList", ["e2"])


async def test_bad_selectors_are_400(http: Http) -> None:
    for query in ["labelSelector=a+in+b", "fieldSelector=metadata.name", "labelSelector=(x)"]:
        status, body = await http("GET", f"{PODS}?{query}")
        assert (status, body["reason"]) == (400, "BadRequest"), query


async def test_delete_collection_by_label(srv: ApiServer, http: Http) -> None:
    for name, app in [("a", "web"), ("b", "web"), ("c", "db")]:
        srv.create(pod(name, labels={"app": app}))
    await http.ok("DELETE", f"{PODS}?labelSelector=app%3Dweb")
    assert [p["metadata"]["name"] for p in srv.objects("pods")] == ["c"]
    assert srv.writes[-1].verb == "deletecollection"


# Pagination --------------------------------------------------------------------


async def test_pagination_returns_every_object_once(srv: ApiServer, http: Http) -> None:
    for i in range(1203):
        srv.create(pod(f"p{i:04}", ns="default" if i % 3 else "other", labels={"i": str(i % 2)}))
    for path in ["/api/v1/pods", PODS, "/api/v1/pods?labelSelector=i%3D1"]:
        want = [
            (i["metadata"]["namespace"], i["metadata"]["name"])
            for i in (await http.ok("GET", path))["items"]
        ]
        got, pages, cont = [], 0, ""
        sep = "&" if "?" in path else "?"
        while True:
            page = await http.ok(
                "GET", f"{path}{sep}limit=500" + (f"&continue={cont}" if cont else "")
            )
            pages += 1
            got += [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]
            cont = page["metadata"].get("continue", "")
            if not cont:
                break
        assert got == want and len(set(got)) == len(got)
        assert pages == (len(want) + 499) // 500 or (len(want) % 500 == 0)


# Watch -------------------------------------------------------------------------


async def test_watch_from_a_list_version_sees_only_later_events(http: Http) -> None:
    await http.ok("POST", PODS, pod("old"))
    rv = (await http.ok("GET", PODS))["metadata"]["resourceVersion"]
    await http.ok("POST", PODS, pod("new"))
    await http.ok("PATCH", PODS + "/new", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    await http.ok("DELETE", PODS + "/old")
    async with http.session.get(f"{http.url}{PODS}?watch=1&resourceVersion={rv}") as resp:
        events = await read_events(resp, 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("DELETED", "old"),
    ]
    assert events[0]["object"]["kind"] == "Pod"
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)


async def test_watch_without_version_starts_with_synthetic_added_then_live(
    srv: ApiServer, http: Http
) -> None:
    srv.create(pod("a"))
    async with http.session.get(f"{http.url}{PODS}?watch=true&resourceVersion=0") as resp:
        first = await read_events(resp, 1)
        srv.create(pod("b"))
        srv.delete("pods", "default", "a")
        rest = await read_events(resp, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in first + rest] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]


async def test_watch_resume_after_compaction_is_410_gone(srv: ApiServer, http: Http) -> None:
    srv.create(pod("a"))
    rv = srv.store.rv
    srv.create(pod("b"))
    srv.compact()
    async with http.session.get(f"{http.url}{PODS}?watch=1&resourceVersion={rv}") as resp:
        assert resp.status == 200
        events = await read_events(resp, 2)
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    obj = events[0]["object"]
    assert (obj["kind"], obj["code"], obj["reason"]) == ("Status", 410, "Expired")
    assert obj["message"].startswith(f"too old resource version: {rv} (")


async def test_small_event_log_expires_old_versions() -> None:
    async with ApiServer(log_size=3) as server, aiohttp.ClientSession() as s:
        start = server.store.rv
        for i in range(5):
            server.create(pod(f"p{i}"))
        url = f"{server.url}{PODS}?watch=1&resourceVersion="
        async with s.get(url + str(start)) as resp:
            assert (await read_events(resp, 1))[0]["object"]["code"] == 410
        async with s.get(url + str(server.store.rv - 2)) as resp:
            names = [e["object"]["metadata"]["name"] for e in await read_events(resp, 2)]
            assert names == ["p3", "p4"]


async def test_watch_timeout_and_bookmarks() -> None:
    async with ApiServer(bookmark_interval=0.2) as server, aiohttp.ClientSession() as s:
        t0 = time.monotonic()
        query = "?watch=1&timeoutSeconds=1&allowWatchBookmarks=true"
        async with s.get(f"{server.url}{PODS}{query}") as resp:
            # The server ends the stream itself (read_events stops at its end; the
            # 30 s guard only keeps a broken server from hanging the suite).
            events = await read_events(resp, 100, timeout=30)
            assert resp.content.at_eof()
        assert time.monotonic() - t0 >= 0.9  # not before timeoutSeconds (less timer slack)
        assert len(events) >= 2 and {e["type"] for e in events} == {"BOOKMARK"}
        mark = events[-1]["object"]
        assert (mark["kind"], mark["metadata"]["resourceVersion"]) == ("Pod", str(server.store.rv))


async def test_watch_list_ends_initial_events_with_a_bookmark(srv: ApiServer, http: Http) -> None:
    """client-go 1.37's reflectors (kubectl wait, informers) watch with sendInitialEvents."""
    srv.create(pod("a"))
    srv.create(pod("b"))
    query = (
        "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        "&allowWatchBookmarks=true"
    )
    async with http.session.get(f"{http.url}{PODS}{query}") as resp:
        events = await read_events(resp, 3)
        srv.create(pod("c"))
        events += await read_events(resp, 1)
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK", "ADDED"]
    mark = events[2]["object"]["metadata"]
    assert mark["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(mark["resourceVersion"]) < int(events[3]["object"]["metadata"]["resourceVersion"])


async def test_table_output_for_list_get_and_watch(srv: ApiServer, http: Http) -> None:
    srv.create(pod("p", nodeName="n1", status={"phase": "Running", "podIP": "10.0.0.5"}))
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    status, tab = await http("GET", PODS, headers=accept)
    assert (status, tab["kind"]) == (200, "Table")
    columns = [c["name"] for c in tab["columnDefinitions"]]
    assert columns[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    row = dict(zip(columns, tab["rows"][0]["cells"], strict=True))
    assert (row["Name"], row["Status"], row["IP"], row["Node"]) == (
        "p",
        "Running",
        "10.0.0.5",
        "n1",
    )
    assert tab["rows"][0]["object"]["metadata"]["namespace"] == "default"
    _, one = await http("GET", PODS + "/p", headers=accept)
    assert one["rows"][0]["cells"][0] == "p"
    async with http.session.get(f"{http.url}{PODS}?watch=1", headers=accept) as resp:
        event = (await read_events(resp, 1))[0]
    assert event["object"]["kind"] == "Table" and event["object"]["rows"][0]["cells"][0] == "p"


async def test_watch_selector_transitions(srv: ApiServer, http: Http) -> None:
    srv.create(pod("p", labels={"app": "web"}))
    url = f"{http.url}{PODS}?watch=1&labelSelector=app%3Dweb&resourceVersion={srv.store.rv}"
    async with http.session.get(url) as resp:
        await asyncio.sleep(0)
        await http.ok("PATCH", PODS + "/p", {"metadata": {"labels": {"app": "db"}}}, MERGE)
        srv.create(pod("q", labels={"app": "db"}))
        await http.ok("PATCH", PODS + "/p", {"metadata": {"labels": {"app": "web"}}}, MERGE)
        await http.ok("PATCH", PODS + "/p", {"metadata": {"labels": {"v": "2"}}}, MERGE)
        events = await read_events(resp, 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("DELETED", "p"),
        ("ADDED", "p"),
        ("MODIFIED", "p"),
    ]


async def test_field_selector_watch_sees_a_pod_bound(srv: ApiServer, http: Http) -> None:
    srv.create(pod("p"))
    url = f"{http.url}/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D"
    async with http.session.get(url) as resp:
        assert (await read_events(resp, 1))[0]["type"] == "ADDED"
        await http.ok("POST", PODS + "/p/binding", binding("p", "n1"))
        assert (await read_events(resp, 1))[0]["type"] == "DELETED"


# CustomResourceDefinitions -----------------------------------------------------


async def test_applying_the_crd_serves_podgroups(http: Http) -> None:
    crd = yaml.safe_load((REPO / "crds" / "scheduling.x-k8s.io_podgroups.yaml").read_text())
    assert (await http("GET", "/apis/scheduling.x-k8s.io/v1alpha1"))[0] == 404
    made = await http.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert {c["type"] for c in made["status"]["conditions"]} >= {"Established"}
    groups = await http.ok("GET", "/apis")
    assert "scheduling.x-k8s.io" in {g["name"] for g in groups["groups"]}
    doc = await http.ok("GET", "/apis/scheduling.x-k8s.io/v1alpha1")
    assert {r["name"] for r in doc["resources"]} == {"podgroups", "podgroups/status"}
    path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 2},
        "status": {"phase": "Running"},
    }
    made = await http.ok("POST", path, group)
    assert "status" not in made  # a CRD with a status subresource drops it on create
    out = await http.ok("PATCH", path + "/g/status", {"status": {"phase": "Scheduled"}}, MERGE)
    assert out["status"] == {"phase": "Scheduled"}
    out = await http.ok("PATCH", path + "/g", {"spec": {"minMember": 3}, "status": None}, MERGE)
    assert out["status"] == {"phase": "Scheduled"} and out["metadata"]["generation"] == 2
    assert (await http("PATCH", path + "/g", {"spec": {}}, STRATEGIC))[0] == 415
    listed = await http.ok("GET", path)
    assert listed["kind"] == "PodGroupList"
    await http.ok(
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + crd["metadata"]["name"],
    )
    assert (await http("GET", path))[0] == 404


# Finalizers --------------------------------------------------------------------


async def test_delete_with_finalizers_waits_for_them(srv: ApiServer, http: Http) -> None:
    body = pod("p")
    body["metadata"]["finalizers"] = ["x/y"]
    await http.ok("POST", PODS, body)
    out = await http.ok("DELETE", PODS + "/p")
    assert out["metadata"]["deletionTimestamp"]
    assert srv.get("pods", "default", "p") is not None
    await http.ok("PATCH", PODS + "/p", {"metadata": {"finalizers": None}}, MERGE)
    assert srv.get("pods", "default", "p") is None


# Fault injection and records ---------------------------------------------------


async def test_fail_next_delay_and_counters(srv: ApiServer, http: Http) -> None:
    srv.fail_next["/pods"] = [500, 503]
    assert (await http("GET", PODS))[0] == 500
    status, body = await http("GET", PODS)
    assert (status, body["kind"], body["code"]) == (503, "Status", 503)
    assert (await http("GET", PODS))[0] == 200
    srv.delay["/nodes"] = 0.3
    t0 = time.monotonic()
    await http.ok("GET", "/api/v1/nodes")
    assert time.monotonic() - t0 >= 0.3
    assert srv.requests[("list", "pods", "")] == 3
    assert srv.requests[("list", "nodes", "")] == 1


async def test_hang_holds_one_client_until_unhung(srv: ApiServer, http: Http) -> None:
    h = srv.hang("/pods", header=("User-Agent", "stuck-client"))
    stuck = asyncio.create_task(
        http.session.get(f"{http.url}{PODS}", headers={"User-Agent": "stuck-client/1"})
    )
    await until(lambda: h.waiting == 1)
    assert (await http("GET", PODS))[0] == 200  # other clients pass
    assert not stuck.done()
    srv.unhang(h)
    resp = await asyncio.wait_for(stuck, 5)
    assert resp.status == 200
    resp.release()
    pred = srv.hang(predicate=lambda r: r.method == "DELETE")
    assert pred in srv.hangs
    srv.unhang()
    assert srv.hangs == []


async def test_drop_watches_ends_streams_without_an_event(srv: ApiServer, http: Http) -> None:
    async with http.session.get(f"{http.url}{PODS}?watch=1") as resp:
        await until(lambda: sum(len(b.watchers) for b in srv.store.buckets.values()) == 1)
        assert srv.drop_watches("pods", 2) == 1
        assert await asyncio.wait_for(resp.content.read(), 5) == b""
    async with http.session.get(f"{http.url}{PODS}?watch=1") as resp:  # the next one too
        assert await asyncio.wait_for(resp.content.read(), 5) == b""
    assert srv.requests[("watch", "pods", "")] == 2


async def test_writes_are_recorded_with_their_client(srv: ApiServer, http: Http) -> None:
    seen: list[WriteRecord] = []
    srv.on_write = seen.append
    headers = {"User-Agent": "troupe/test"}
    async with http.session.post(
        f"{http.url}{PODS}?fieldManager=troupe", json=pod("p"), headers=headers
    ) as r:
        assert r.status == 201
    await http("POST", PODS + "/p/binding", binding("p", "n1"))
    await http("POST", PODS + "/p/binding", binding("p", "n2"))
    assert [(w.verb, w.status) for w in srv.writes] == [
        ("create", 201),
        ("bind", 201),
        ("bind", 409),
    ]
    assert (srv.writes[0].user_agent, srv.writes[0].field_manager) == ("troupe/test", "troupe")
    assert srv.writes[1].subresource == "binding" and srv.writes[1].name == "p"
    assert seen == srv.writes


# TLS and authentication --------------------------------------------------------


async def test_tls_with_token_in_cluster_and_kubeconfig(tmp_path: Path) -> None:
    async with ApiServer(tls=True, token="s3cret") as server:
        assert server.url.startswith("https://") and server.ca_pem_path is not None
        (tmp_path / "token").write_text("s3cret")
        env = {
            "KUBERNETES_SERVICE_HOST": server.host,
            "KUBERNETES_SERVICE_PORT": str(server.port),
        }
        cfg = k8s.Configuration()
        incluster_config.InClusterConfigLoader(
            token_filename=str(tmp_path / "token"),
            cert_filename=str(server.ca_pem_path),
            environ=env,
        ).load_and_set(cfg)
        server.create(pod("p"))

        def names(config: k8s.Configuration) -> list[str]:
            with k8s.ApiClient(config) as api:
                return [
                    p.metadata.name for p in k8s.CoreV1Api(api).list_pod_for_all_namespaces().items
                ]

        assert await asyncio.to_thread(names, cfg) == ["p"]
        path = server.write_kubeconfig(tmp_path / "kubeconfig")
        from_file = k8s.Configuration()
        await asyncio.to_thread(
            k8s_config.load_kube_config, config_file=str(path), client_configuration=from_file
        )
        assert await asyncio.to_thread(names, from_file) == ["p"]
        bad = k8s.Configuration()
        await asyncio.to_thread(
            k8s_config.load_kube_config,
            config_file=str(server.write_kubeconfig(tmp_path / "bad", token="wrong")),
            client_configuration=bad,
        )
        with pytest.raises(k8s.ApiException) as err:
            await asyncio.to_thread(names, bad)
        assert err.value.status == 401


# A server in a thread, for sync code --------------------------------------------


def test_thread_server_with_direct_access_from_outside() -> None:
    server = ApiServer()
    with server.start_in_thread() as handle:
        server.create(pod("p"))
        conn = HTTPConnection(handle.url.removeprefix("http://"), timeout=10)
        try:
            conn.request("GET", PODS)
            listed = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        assert [i["metadata"]["name"] for i in listed["items"]] == ["p"]
        server.apply(dict(pod("p"), status={"phase": "Running"}))
        got = server.get("pods", "default", "p")
        assert got is not None and got["status"]["phase"] == "Running"
        assert [o["metadata"]["name"] for o in server.objects("pods")] == ["p"]
        assert server.delete("pods", "default", "p") is not None
        assert server.objects("pods", "default") == []
        assert threading.active_count() >= 2


# kopf: list, then watch from the list's version; re-watch; re-list after 410 ------


async def test_kopf_lists_watches_and_recovers(srv: ApiServer) -> None:
    registry = kopf.OperatorRegistry()
    seen: list[tuple[str | None, str]] = []

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.scanning.disabled = True
        settings.watching.reconnect_backoff = 0.05

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=srv.url, insecure=True)

    @kopf.on.event("v1", "pods", registry=registry)
    def on_pod(event: dict[str, Any], name: str, **_: Any) -> None:
        seen.append((event.get("type"), name))

    srv.create(pod("before"))
    stop = asyncio.Event()
    task = asyncio.create_task(
        kopf.operator(registry=registry, clusterwide=True, standalone=True, stop_flag=stop)
    )
    try:
        await until(lambda: (None, "before") in seen)  # kopf lists: type None
        assert srv.requests[("list", "pods", "")] >= 1
        srv.create(pod("live"))
        await until(lambda: ("ADDED", "live") in seen)
        srv.drop_watches("pods", 1)
        srv.create(pod("after-drop"))
        await until(lambda: ("ADDED", "after-drop") in seen)
        # The re-watch waits while a pod is created and the log forgotten: it resumes
        # from a version the server no longer has, gets 410, and kopf lists again.
        held = srv.hang("watch=")
        srv.drop_watches("pods", 1)
        await until(lambda: held.waiting == 1)
        srv.create(pod("after-compact"))
        srv.compact()
        srv.unhang(held)
        await until(lambda: (None, "after-compact") in seen)
        assert srv.requests[("list", "pods", "")] == 2
        assert srv.requests[("watch", "pods", "")] >= 4
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
