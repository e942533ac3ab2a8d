"""The HTTP face of the embedded API server: routing, watch streams, discovery,
authentication, TLS, fault injection and the direct (no HTTP) access for tests.

Why a server of our own rather than kmock's emulator: fidelity and constant cost.
kmock 0.8 answers discovery with groupVersion "/v1", lists without `kind`,
objects without uid or resourceVersion, never a conflict, cannot serve the
namespaces resource, and walks its whole request history on every request
(about 10 pods/s end to end). A real kubectl cannot list nodes against it.
This server answers what kube-apiserver answers wherever kopf, the kubernetes
client and kubectl look, at a cost per request that does not grow with history.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import json
import secrets
import ssl
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp.web as web
import yaml

from apiserver import protobuf, reviews, tables
from apiserver.faults import Faults
from apiserver.patch import PatchError
from apiserver.resources import Resource
from apiserver.selectors import SelectorError, selector
from apiserver.store import DROP, STOP, ApiError, Store, Watcher, status_body

T = TypeVar("T")
VERSION: Final = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0-troupe",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
OPENAPI_V2_PB: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
Matcher = Callable[[web.Request], bool]


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One write that reached the store (or was refused by it)."""

    verb: str  # create, update, patch, delete, bind
    path: str
    plural: str
    subresource: str
    namespace: str | None
    name: str | None
    user_agent: str
    field_manager: str
    status: int
    time: float


@dataclass(eq=False)
class Hang:
    """Requests matching `matches` wait until `unhang(this)`."""

    matches: Matcher
    released: asyncio.Event | None = None
    waiting: int = 0


@dataclass(frozen=True, slots=True)
class _Target:
    res: Resource
    namespace: str | None
    name: str | None
    subresource: str


class ApiServer:
    """An in-process kube-apiserver for tests: `async with ApiServer() as srv: srv.url`.

    Arguments: `host`, `port` (0: any free port); `tls` serves HTTPS with a throwaway
    trustme CA (`ca_pem_path`); `token` requires that bearer token (else 401);
    `podgroups` pre-registers scheduling.x-k8s.io/v1alpha1 podgroups (otherwise apply
    the CRD); `native_podgroups` ("v1alpha2", "v1alpha3" or "v1beta1") serves Kubernetes' own
    scheduling.k8s.io PodGroups in that version, as a cluster with GenericWorkload;
    `log_size` bounds each resource's event log (older resumes get 410);
    `strict_namespaces` answers 404 for objects in a namespace that does not exist;
    TokenReviews and SubjectAccessReviews are answered (`add_user`, apiserver/reviews.py);
    `bookmark_interval` paces BOOKMARKs on watches that allow them.

    Faults (keys are substrings of the request's path and query): `fail_next[frag]`
    statuses answered before serving normally; `delay[frag]` seconds slept first;
    `hang(...)`/`unhang(...)` hold requests; `drop_watches(plural, n)`; `compact()`.
    Timing faults (write latency, watch events held back and bunched, seeded conflicts):
    `faults = Faults(...)` (apiserver/faults.py).
    Records: `requests[(verb, plural, subresource)]`, `binds`, `writes` and `on_write`.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: bool = False,
        token: str | None = None,
        podgroups: bool = False,
        native_podgroups: str | None = None,
        log_size: int = 10000,
        strict_namespaces: bool = False,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.host, self.port, self.tls, self.token = host, port, tls, token
        self.bookmark_interval = bookmark_interval
        self.store = Store(
            log_size=log_size,
            podgroups=podgroups,
            strict_namespaces=strict_namespaces,
            native_podgroups=native_podgroups,
        )
        # Fault injection, all keyed by a fragment of the request's path and query.
        self.fail_next: dict[str, list[int]] = {}
        self.delay: dict[str, float] = {}
        self.hangs: list[Hang] = []
        self.faults: Faults | None = None
        self._drops: collections.Counter[str] = collections.Counter()
        # What happened.
        self.requests: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.writes: list[WriteRecord] = []
        self.on_write: Callable[[WriteRecord], None] | None = None
        # Token -> user, for TokenReviews (apiserver/reviews.py; `add_user`).
        self.users: dict[str, reviews.User] = {}
        self.ca_pem_path: Path | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._ssl: ssl.SSLContext | None = None
        self._ca_pem = b""
        self._transports: weakref.WeakSet[asyncio.Transport] = weakref.WeakSet()

    # Life cycle ------------------------------------------------------------

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.tls:
            self._setup_tls()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._ssl)
        await site.start()
        self.port = self._runner.addresses[0][1]
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://{self.host}:{self.port}"

    async def stop(self) -> None:
        self.store.stop()
        for h in self.hangs:
            if h.released is not None:
                h.released.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        # A TLS connection's close waits for the peer's close_notify, which may never
        # come before the loop ends: abort what is left so no socket leaks.
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _setup_tls(self) -> None:
        import trustme

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost", self.host)
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self._ssl)
        self._tmp = tempfile.TemporaryDirectory(prefix="troupe-apiserver-")
        self.ca_pem_path = Path(self._tmp.name) / "ca.crt"
        ca.cert_pem.write_to_path(str(self.ca_pem_path))
        self._ca_pem = ca.cert_pem.bytes()

    def start_in_thread(self) -> ServerThread:
        """Serve from a background thread with its own event loop (for sync code and
        subprocesses such as kubectl); the direct-access methods stay usable."""
        return ServerThread(self)

    def write_kubeconfig(self, path: str | Path, token: str | None = None) -> Path:
        """A kubeconfig for this server that kubectl, kopf and the kubernetes client accept."""
        cluster: dict[str, Any] = {"server": self.url}
        if self.tls:
            cluster["certificate-authority-data"] = base64.b64encode(self._ca_pem).decode()
        user: dict[str, Any] = {}
        if token or self.token:
            user["token"] = token or self.token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "troupe", "cluster": cluster}],
            "users": [{"name": "troupe", "user": user}],
            "contexts": [
                {
                    "name": "troupe",
                    "context": {"cluster": "troupe", "user": "troupe", "namespace": "default"},
                }
            ],
            "current-context": "troupe",
            "preferences": {},
        }
        out = Path(path)
        out.write_text(yaml.safe_dump(config))
        return out

    def add_user(self, name: str, groups: Sequence[str] = ()) -> str:
        """A new bearer token that TokenReviews answer as user `name` in `groups`
        (and system:authenticated); what it may do is the RBAC objects' say."""
        token = secrets.token_urlsafe(24)
        self.users[token] = reviews.User(name, (*groups, "system:authenticated"))
        return token

    # Fault injection -------------------------------------------------------

    def hang(
        self,
        fragment: str | None = None,
        *,
        header: tuple[str, str] | None = None,
        predicate: Matcher | None = None,
    ) -> Hang:
        """Hold matching requests (path fragment, header (name, substring), or
        predicate, all of those given) until `unhang`."""

        def matches(request: web.Request) -> bool:
            if fragment is not None and fragment not in request.path_qs:
                return False
            if header is not None and header[1] not in request.headers.get(header[0], ""):
                return False
            return predicate is None or predicate(request)

        h = Hang(matches)
        self.hangs.append(h)
        return h

    def unhang(self, h: Hang | None = None) -> None:
        """Release one hang (or all of them) and the requests it holds."""
        for one in [h] if h is not None else list(self.hangs):
            if one in self.hangs:
                self.hangs.remove(one)
            if one.released is not None:
                self._call_soon(one.released.set)

    def drop_watches(self, plural: str, n: int = 1) -> int:
        """End n watch streams of `plural` without a final event: the current ones
        first, then the next ones to start. Returns how many were current."""

        def drop() -> int:
            closed = 0
            for bucket in self.store.buckets.values():
                if bucket.res.plural != plural:
                    continue
                for w in list(bucket.watchers):
                    if closed < n:
                        w.queue.put_nowait(DROP)
                        self.store.unwatch(w)
                        closed += 1
            self._drops[plural] += n - closed
            return closed

        return self._sync(drop)

    def compact(self) -> None:
        """Forget the event logs: a watch resuming from any earlier version gets 410."""
        self._sync(self.store.compact)

    @property
    def binds(self) -> int:
        """Successful pods/binding calls."""
        return self.store.binds

    # Direct access ---------------------------------------------------------

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        res = self.store.resolve(plural)
        return self._sync(lambda: copy.deepcopy(list(self.store.list(res, namespace)[0])))

    def get(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        res = self.store.resolve(plural)

        def get() -> dict[str, Any] | None:
            try:
                return copy.deepcopy(self.store.get(res, namespace, name))
            except ApiError:
                return None

        return self._sync(get)

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create `obj` (its apiVersion/kind pick the resource) as a POST would, except
        that a given status is kept (as a kubelet or controller would then write it)."""
        res = self._resource_of(obj)
        ns = (obj.get("metadata") or {}).get("namespace")
        return self._sync(lambda: self.store.create(res, ns, obj))

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create `obj`, or replace the object of that name (its status too)."""
        res = self._resource_of(obj)
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name", "")

        def apply() -> dict[str, Any]:
            try:
                self.store.get(res, ns, name)
            except ApiError:
                return self.store.create(res, ns, obj)
            body = {k: v for k, v in obj.items() if k != "status"}
            body["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
            out = self.store.update(res, ns, name, body)
            if res.has_status and "status" in obj:
                out = self.store.update(res, ns, name, {"status": obj["status"]}, "status")
            return out

        return self._sync(apply)

    def delete(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        res = self.store.resolve(plural)

        def delete() -> dict[str, Any] | None:
            try:
                return self.store.delete(res, namespace, name)
            except ApiError:
                return None

        return self._sync(delete)

    def _resource_of(self, obj: Mapping[str, Any]) -> Resource:
        res = self.store.registry.by_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
        if res is None:
            raise KeyError(f"no resource serves {obj.get('apiVersion')} {obj.get('kind')}")
        return res

    def _sync(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the server's loop (it owns the store and the watch queues)."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return fn()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return fn()

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=30)

    def _call_soon(self, fn: Callable[[], object]) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            fn()
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn()
        else:
            loop.call_soon_threadsafe(fn)

    # HTTP ------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.transport is not None:
            self._transports.add(request.transport)
        try:
            return await self._serve(request)
        except ApiError as e:
            return _json(e.status(), e.code)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if self.token is not None and (scheme.lower() != "bearer" or given.strip() != self.token):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        counted = self._classify(request)
        if counted is not None:
            self.requests[counted] += 1
        for h in list(self.hangs):
            if h.matches(request):
                if h.released is None:
                    h.released = asyncio.Event()
                h.waiting += 1
                await h.released.wait()
        path_qs = request.path_qs
        for fragment, seconds in list(self.delay.items()):
            if fragment in path_qs:
                await asyncio.sleep(seconds)
        for fragment, codes in self.fail_next.items():
            if fragment in path_qs and codes:
                code = codes.pop(0)
                reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}
                raise ApiError(code, reason.get(code, "InternalError"), f"injected {code}")
        faults = self.faults
        if faults is not None and counted is not None:
            return await faults.around(
                request, counted, self.store.resolve, lambda: self._route(request)
            )
        return await self._route(request)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        reg = self.store.registry
        if not parts:
            return _json({"paths": ["/api", "/api/v1", "/apis", "/version", "/openapi/v2"]})
        if parts == ["version"]:
            return _json(VERSION)
        if parts[0] in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if parts[0] == "openapi":
            return self._openapi(request, parts)
        if parts[0] == "api":
            if len(parts) == 1:
                return _json(reg.api_versions(f"{self.host}:{self.port}"))
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return _json(reg.api_group_list())
            if len(parts) == 2:
                return _json_or_404(reg.api_group(parts[1]), request.path)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _path_not_found(request.path)
        if not rest:
            return _json_or_404(reg.resource_list(group, version), request.path)
        target = self._target(group, version, rest, request.path)
        if group in reviews.GROUPS and request.method == "POST" and target.name is None:
            return _json(self._review(target.res, await _body(request)), 201)
        return await self._verb(request, target)

    def _review(self, res: Resource, body: Any) -> dict[str, Any]:
        """A TokenReview or SubjectAccessReview answered (apiserver/reviews.py)."""
        if not isinstance(body, Mapping):
            raise ApiError(400, "BadRequest", "the request body must be an object")
        if res.plural == "tokenreviews":
            users = {self.token: reviews.ADMIN} if self.token is not None else {}
            return reviews.token_review(users | self.users, body)

        def objects(plural: str, namespace: str | None) -> list[dict[str, Any]]:
            return list(self.store.list(self.store.resolve(plural), namespace)[0])

        return reviews.access_review(objects, body)

    def _classify(self, request: web.Request) -> tuple[str, str, str] | None:
        """(verb, plural, subresource) of a resource request, as kube's audit names it."""
        parts = [p for p in request.path.split("/") if p]
        if len(parts) < 3 or parts[0] not in ("api", "apis"):
            return None
        group, version, rest = (
            ("", parts[1], parts[2:])
            if parts[0] == "api"
            else (
                parts[1],
                parts[2],
                parts[3:],
            )
        )
        if not rest:
            return None
        try:
            t = self._target(group, version, rest, request.path)
        except ApiError:
            return None
        method, sub = request.method, t.subresource
        if method == "GET":
            if t.name is not None:
                verb = "get"
            else:
                verb = "watch" if request.query.get("watch") in ("1", "true", "True") else "list"
        elif method == "POST":
            verb = "create"
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if t.name is not None else "deletecollection"
        else:
            verb = method.lower()
        return (verb, t.res.plural, sub)

    def _target(self, group: str, version: str, rest: list[str], path: str) -> _Target:
        reg = self.store.registry
        if rest[0] == "namespaces" and len(rest) >= 3:
            res = reg.get(group, version, rest[2])
            if res is not None and res.namespaced and len(rest) <= 5:
                name = rest[3] if len(rest) > 3 else None
                return _Target(res, rest[1], name, rest[4] if len(rest) > 4 else "")
        res = reg.get(group, version, rest[0])
        if res is None or len(rest) > 3:
            raise _path_not_found(path)
        name = rest[1] if len(rest) > 1 else None
        if res.namespaced and name is not None:
            raise _path_not_found(path)
        return _Target(res, None, name, rest[2] if len(rest) > 2 else "")

    def _openapi(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        # kubectl validates with the v2 document and falls back to client-side
        # checks when a kind is missing from it: an empty document is enough.
        if parts == ["openapi", "v2"]:
            if "protobuf" in request.headers.get("Accept", ""):
                return web.Response(body=b"", content_type=OPENAPI_V2_PB)
            doc = {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.37.0"}}
            return _json(doc | {"paths": {}, "definitions": {}})
        raise _path_not_found(request.path)

    async def _verb(self, request: web.Request, t: _Target) -> web.StreamResponse:
        method, q, res = request.method, request.query, t.res
        store = self.store
        if t.subresource and t.subresource not in res.subresources:
            raise _path_not_found(request.path)
        if method == "GET":
            if t.name is not None:
                obj = store.get(res, t.namespace, t.name)
                if _wants_table(request):
                    return _json(tables.table(res, [obj], store.rv, None))
                return _json(obj)
            pred = _selector(q, res)
            if q.get("watch") in ("1", "true", "True"):
                return await self._watch(request, t, pred)
            limit = _int(q.get("limit", "0"), "limit")
            items, rv, cont, remaining = store.list(
                res, t.namespace, pred, limit, q.get("continue")
            )
            if _wants_table(request):
                return _json(tables.table(res, items, rv, cont))
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if cont:
                meta["continue"] = cont
                if remaining is not None:
                    meta["remainingItemCount"] = remaining
            return _json(
                {
                    "kind": res.list_kind,
                    "apiVersion": res.group_version,
                    "metadata": meta,
                    "items": items,
                }
            )
        body = await _body(request)
        if method == "POST" and t.subresource == "binding":
            assert t.namespace is not None and t.name is not None
            ns, name = t.namespace, t.name
            return self._write(
                request,
                "bind",
                t,
                lambda: store.bind(ns, name, body),
                lambda _: _json(status_body(201), 201),
            )
        if method == "POST" and t.name is None:
            if not isinstance(body, Mapping):
                raise ApiError(400, "BadRequest", "the request body must be an object")
            return self._write(
                request,
                "create",
                t,
                lambda: store.create(res, t.namespace, body, keep_status=False),
                lambda obj: _json(obj, 201),
            )
        if t.name is None:
            if method == "DELETE":
                pred = _selector(q, res)

                def delete_all() -> None:
                    for obj in store.list(res, t.namespace, pred)[0]:
                        meta = obj["metadata"]
                        store.delete(res, meta.get("namespace"), meta["name"])

                return self._write(
                    request,
                    "deletecollection",
                    t,
                    delete_all,
                    lambda _: _json(status_body(200, "", "")),
                )
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        name = t.name
        if method == "PUT":
            if not isinstance(body, Mapping):
                raise ApiError(400, "BadRequest", "the request body must be an object")
            return self._write(
                request,
                "update",
                t,
                lambda: store.update(res, t.namespace, name, body, t.subresource),
                _json,
            )
        if method == "PATCH":
            ctype = request.headers.get("Content-Type", "")
            return self._write(
                request,
                "patch",
                t,
                lambda: store.patch(res, t.namespace, name, ctype, body, t.subresource),
                _json,
            )
        if method == "DELETE" and not t.subresource:
            opts = body if isinstance(body, Mapping) else {}
            return self._write(
                request, "delete", t, lambda: store.delete(res, t.namespace, name, opts), _json
            )
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _write(
        self,
        request: web.Request,
        verb: str,
        t: _Target,
        action: Callable[[], Any],
        answer: Callable[[Any], web.StreamResponse],
    ) -> web.StreamResponse:
        code = 200
        try:
            try:
                out = action()
            except PatchError as e:
                raise ApiError(422, "Invalid", str(e)) from e
            resp = answer(out)
            code = resp.status
            return resp
        except ApiError as e:
            code = e.code
            raise
        finally:
            record = WriteRecord(
                verb,
                request.path,
                t.res.plural,
                t.subresource,
                t.namespace,
                t.name,
                request.headers.get("User-Agent", ""),
                request.query.get("fieldManager", ""),
                code,
                time.time(),
            )
            self.writes.append(record)
            if self.on_write is not None:
                self.on_write(record)

    async def _watch(
        self, request: web.Request, t: _Target, pred: Callable[[Mapping[str, Any]], bool] | None
    ) -> web.StreamResponse:
        q, res = request.query, t.res
        rv_text = q.get("resourceVersion", "")
        since = None if rv_text in ("", "0") else _int(rv_text, "resourceVersion")
        initial = q.get("sendInitialEvents")
        if initial == "true":  # a watch-list request: the state now, then changes
            since = None
        elif initial == "false" and rv_text == "":
            since = self.store.rv
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        if self._drops[res.plural] > 0:
            self._drops[res.plural] -= 1
            await resp.prepare(request)
            return resp
        try:
            w = self.store.watch(res, t.namespace, pred, since, initial == "true")
        except ApiError as e:
            await resp.prepare(request)
            await resp.write(json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
            return resp
        try:
            await resp.prepare(request)
            await self._pump(resp, w, timeout, bookmarks, _wants_table(request))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(w)
        return resp

    async def _pump(
        self,
        resp: web.StreamResponse,
        w: Watcher,
        timeout: float | None,
        bookmarks: bool,
        as_table: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        while True:
            wait = None if deadline is None else max(0.0, deadline - loop.time())
            if bookmarks:
                wait = self.bookmark_interval if wait is None else min(wait, self.bookmark_interval)
            try:
                if w.queue.empty() and wait is not None:
                    item = await asyncio.wait_for(w.queue.get(), wait)
                else:
                    item = await w.queue.get()
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    return
                mark = {"resourceVersion": str(self.store.rv)}
                obj = {"kind": w.res.kind, "apiVersion": w.res.group_version, "metadata": mark}
                await resp.write(json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n")
                continue
            if self.faults is not None and item is not STOP and item is not DROP:
                await self.faults.hold_watch(w.res.plural)
            chunk: list[bytes] = []
            while True:
                if item is STOP or item is DROP:
                    if chunk:
                        await resp.write(b"".join(chunk))
                    return
                ev, as_type = item
                if as_table and ev.type != "BOOKMARK":
                    obj = tables.table(w.res, [ev.obj], ev.rv, None)
                    line = {"type": as_type or ev.type, "object": obj}
                    chunk.append(json.dumps(line).encode() + b"\n")
                else:
                    chunk.append(ev.line(as_type))
                if w.queue.empty():
                    break
                item = w.queue.get_nowait()
            await resp.write(b"".join(chunk))


class ServerThread:
    """An ApiServer serving from a daemon thread: `.url`, `.server`, `.stop()`."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="apiserver", daemon=True)
        self._thread.start()
        self._started.wait(timeout=30)
        if self._error is not None:
            raise self._error

    @property
    def url(self) -> str:
        return self.server.url

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as e:
            self._error = e
            self._started.set()
            self._loop.close()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop())
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(), status=status, content_type="application/json"
    )


def _json_or_404(body: dict[str, Any] | None, path: str) -> web.Response:
    if body is None:
        raise _path_not_found(path)
    return _json(body)


def _path_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError as e:
        raise ApiError(400, "BadRequest", f"invalid {what}: {text!r}") from e


def _selector(q: Mapping[str, str], res: Resource) -> Callable[[Mapping[str, Any]], bool] | None:
    try:
        kind = f"{res.group}/{res.kind}" if res.group else res.kind
        return selector(q.get("labelSelector"), q.get("fieldSelector"), kind)
    except SelectorError as e:
        raise ApiError(400, "BadRequest", str(e)) from e


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    ctype = request.headers.get("Content-Type", "")
    if "protobuf" in ctype:
        try:
            return protobuf.decode(raw)
        except protobuf.ProtobufError as e:
            raise ApiError(415, "UnsupportedMediaType", str(e)) from e
    if "cbor" in ctype:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types "
            f'include: application/json, application/yaml (got "{ctype}")',
        )
    if not raw:
        return {}
    try:
        if "yaml" in request.headers.get("Content-Type", ""):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise ApiError(400, "BadRequest", f"the request body is not valid: {e}") from e
