"""The real ClusterClient: the only module that imports the kubernetes client.

Credentials come from one place (`load_api_client`): in-cluster service
account, else a kubeconfig. The same credentials serve the writes made here
and kopf's watches (`credentials()` feeds the operator's login handler), so
there is no second way in.

Traffic runs in three lanes, as kube-scheduler gives events and leader
election their own clients: writes of the scheduling work (binds, conditions,
PodGroup status), Events, and the Lease. Each lane has its own token bucket
(QPS with a burst, as client-go) and its own connections, so Lease renewals
never wait behind a backlog of binds. Every request has a timeout; 429, 5xx
and transport errors are retried with exponential backoff. Writes of
scheduling work are *fenced*: right before a request leaves, `fence()` must
say this replica still leads, else it fails with `NotLeader` (a leader that
could not renew in time drops its queued binds instead of sending them late).

The requests made per pod (binds, Events, pod status patches) are sent from
the event loop with aiohttp (`LoopHttp`), as JSON built here, with the
kubernetes client's configuration: its host, TLS settings (CA, client
certificate, insecure-skip-tls-verify, server name), proxy, default headers
(User-Agent) and credentials (a rotating or exec-provided token refreshed
through the client's own hook). Through the kubernetes client each of them
cost ~1 ms of CPU (the generated API's per-call machinery, then urllib3 and
http.client in a thread and the hop back to the loop); on the loop a request
costs ~0.2 ms. The kubernetes client, which is synchronous, still makes the
other calls (lists, reads, PodGroup status, volumes, the Lease) in its lane's
thread pool, with `_preload_content=False` where the answer is not a model the
client can parse (a real API server answers a binding with a Status).

A 409 on bind raises BindConflict (the scheduler then reads the pod to tell a
bind by someone else from a re-created pod); a 404 raises NotFound. Other API
errors become `ApiError`, whose text is the status and the server's message,
not the response headers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import functools
import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import quote

import aiohttp
import yarl
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import should_bypass_proxies

from troupe import __version__
from troupe.api.types import (
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
    NodeName,
    PodKey,
    split_group_key,
)
from troupe.cluster import BindConflict, Conflict, NotFound, NotLeader
from troupe.events import Create, EventRecorder, ObjectRef
from troupe.leader import LeaseConflict, LeaseRecord

log = logging.getLogger(__name__)

T = TypeVar("T")
COMPONENT: Final = "troupe-scheduler"
POD_GROUP_GROUP: Final = "scheduling.x-k8s.io"
POD_GROUP_VERSION: Final = "v1alpha1"
RETRIABLE: Final = frozenset({429, 500, 502, 503, 504})
# (connect, read) seconds of every request but lists and the Lease's.
DEFAULT_TIMEOUT: Final = (5.0, 30.0)
LIST_TIMEOUT: Final = (5.0, 120.0)
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON: Final = "application/json"
# The generated API's name for the credentials of every core call.
AUTH_SETTINGS: Final = ["BearerToken"]


class ApiError(Exception):
    """An API error without the response headers: `HTTP 500 (InternalError): msg`."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def _api_error(e: k8s.ApiException) -> ApiError:
    status = int(e.status or 0)
    message = ""
    try:
        body = json.loads(e.body) if e.body else {}
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except (ValueError, TypeError):
        message = ""
    reason = str(e.reason or "").strip()
    text = (
        f"HTTP {status}" + (f" ({reason})" if reason else "") + (f": {message}" if message else "")
    )
    return ApiError(status, text)


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where the API server is and how to authenticate (for kopf's login)."""

    server: str
    ca_path: str | None = None
    insecure: bool = False
    scheme: str | None = None
    token: str | None = None
    username: str | None = None
    password: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None


def load_configuration(kubeconfig: str | None = None) -> k8s.Configuration:
    """A kubeconfig file when given; else in-cluster credentials (service account
    token and CA, KUBERNETES_SERVICE_HOST/PORT); else the default kubeconfig
    ($KUBECONFIG or ~/.kube/config)."""
    cfg = k8s.Configuration()
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            return cfg
        except k8s_config.ConfigException:
            pass
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    return cfg


def load_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    return k8s.ApiClient(load_configuration(kubeconfig))


def credentials_of(cfg: k8s.Configuration) -> Credentials:
    """The credentials a Configuration holds now (a rotating service-account
    token is re-read through the client's refresh hook)."""
    hook = getattr(cfg, "refresh_api_key_hook", None)
    if hook is not None:
        hook(cfg)
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    parts = header.split(" ", 1) if header else []
    scheme, token = (
        (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    )
    return Credentials(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme,
        token=token,
        username=cfg.username or None,
        password=cfg.password or None,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
    )


def default_identity() -> str:
    """This replica's name: the pod's (POD_NAME, set by the Deployment), else
    hostname_pid, as kube-scheduler's hostname_uuid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


class TokenBucket:
    """client-go's rate limiter: `qps` tokens per second, up to `burst` at once."""

    def __init__(self, qps: float, burst: int, now: Callable[[], float] = time.monotonic):
        self.qps = qps
        self.burst = burst
        self.now = now
        self.tokens = float(burst)
        self.last = now()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        t = self.now()
        self.tokens = min(self.burst, self.tokens + (t - self.last) * self.qps)
        self.last = t

    async def take(self) -> None:
        if not self._lock.locked():  # nobody waits: no need to queue
            self._refill()
            if self.tokens >= 1:
                self.tokens -= 1
                return
        async with self._lock:
            while True:
                self._refill()
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.qps)


class LoopHttp:
    """JSON requests sent from the event loop (aiohttp), configured as the
    kubernetes client's `Configuration` says: host, TLS (CA file or data,
    client certificate, verify_ssl, assert_hostname, tls_server_name), proxy
    (unless no_proxy bypasses it) and, per request, the client's default headers
    (User-Agent), cookie and credentials through `update_params_for_auth` (the
    client's refresh hook renews an expiring token).

    At most `limit` connections; the session is made on the first request, on
    the loop that makes it, and closed by `close()`.
    """

    def __init__(self, api: k8s.ApiClient, *, limit: int) -> None:
        cfg = api.configuration
        self.api = api
        self.limit = limit
        self.host = str(cfg.host).rstrip("/")
        self.proxy: str | None = None
        self.proxy_headers: Any = None
        if cfg.proxy and not should_bypass_proxies(self.host, cfg.no_proxy or ""):
            if not str(cfg.proxy).startswith(("http://", "https://")):
                raise ValueError(f"proxy {cfg.proxy}: only HTTP(S) proxies are supported")
            self.proxy, self.proxy_headers = str(cfg.proxy), cfg.proxy_headers
        https = self.host.startswith("https")
        self.ssl: ssl.SSLContext | bool = _ssl_context(cfg) if https else True
        self.server_hostname: str | None = cfg.tls_server_name or None
        self._session: aiohttp.ClientSession | None = None
        # Requests beyond `limit` wait here rather than in aiohttp's connector:
        # its wait for a free connection (a future per waiter and retries of
        # the pool) cost binds, hundreds in flight, more than the request.
        self._slots: asyncio.Semaphore | None = None

    def _open(self) -> aiohttp.ClientSession:
        s = self._session
        if s is None or s.closed:
            s = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.limit, ssl=self.ssl),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return s

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any],
        timeout: tuple[float, float],
        content_type: str = JSON,
    ) -> bytes:
        """Send one request and return the body of a 2xx answer; any other
        status raises the client's ApiException (status, reason, body), as its
        own calls do, so that callers map errors and Lanes retry alike."""
        api = self.api
        # A new dict per request: update_params_for_auth writes the credentials in.
        headers = {**api.default_headers, "Accept": JSON, "Content-Type": content_type}
        if api.cookie:
            headers["Cookie"] = api.cookie
        queries: list[tuple[str, str]] = []
        api.update_params_for_auth(headers, queries, AUTH_SETTINGS, path, method, body)
        url = self.host + path
        if queries:
            url += "?" + "&".join(f"{quote(str(k))}={quote(str(v))}" for k, v in queries)
        data = _ENCODER.encode(body).encode()
        slots = self._slots
        if slots is None:
            slots = self._slots = asyncio.Semaphore(self.limit)
        try:
            async with (
                slots,
                self._open().request(
                    method,
                    yarl.URL(url, encoded=True),  # the path segments are quoted by the caller
                    data=data,
                    headers=headers,
                    timeout=_client_timeout(timeout),
                    proxy=self.proxy,
                    proxy_headers=self.proxy_headers,
                    server_hostname=self.server_hostname,
                ) as r,
            ):
                data = await r.read()
                status, reason = r.status, r.reason
        except aiohttp.ClientSSLError as e:  # a bad certificate is not transient
            raise k8s.ApiException(status=0, reason=f"{type(e).__name__}\n{e}") from None
        if not 200 <= status <= 299:
            raise k8s.ApiException(
                status=status, reason=reason, body=data.decode("utf-8", "replace")
            )
        return data

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._slots = None


# Compact JSON; one encoder for every request (json.dumps with arguments makes
# a new one per call), without the cycle check: the bodies are built here.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), check_circular=False)


@functools.lru_cache(maxsize=8)
def _client_timeout(timeout: tuple[float, float]) -> aiohttp.ClientTimeout:
    """(connect, read) seconds as aiohttp's timeout, made once per pair."""
    return aiohttp.ClientTimeout(sock_connect=timeout[0], sock_read=timeout[1])


def _ssl_context(cfg: k8s.Configuration) -> ssl.SSLContext:
    """The TLS settings the client's urllib3 pool would use, as an SSLContext."""
    ctx = ssl.create_default_context()
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        if cfg.ssl_ca_cert or cfg.ca_cert_data:
            data = cfg.ca_cert_data
            ctx.load_verify_locations(
                cafile=cfg.ssl_ca_cert or None,
                cadata=data.decode() if isinstance(data, bytes) else data or None,
            )
        if cfg.assert_hostname is False:
            ctx.check_hostname = False
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    return ctx


class Lane:
    """One stream of API traffic: its own token bucket, timeout, retries and
    connections: a thread pool for the kubernetes client's calls (`call`) and,
    with `http`, aiohttp on the loop (`send`)."""

    def __init__(
        self,
        name: str,
        *,
        qps: float,
        burst: int,
        workers: int,
        timeout: tuple[float, float],
        retries: int,
        backoff: float,
        http: LoopHttp | None = None,
    ) -> None:
        self.name = name
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=name)
        self.limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.http = http

    async def call(
        self,
        what: str,
        fn: Callable[[tuple[float, float]], T],
        fence: Callable[[], bool] | None = None,
        timeout: tuple[float, float] | None = None,
    ) -> T:
        """Run `fn(timeout)` in this lane's threads, rate-limited, retrying
        transient failures. With a `fence`, the request is not sent unless
        `fence()` holds at the moment it would leave."""
        t = timeout or self.timeout

        def run() -> T:
            if fence is not None and not fence():
                raise NotLeader(f"{what}: not sent, this replica no longer leads")
            out = fn(t)
            release = getattr(out, "release_conn", None)
            if release is not None:
                # A response read with `_preload_content=False` keeps its
                # connection until read and released: unread, every call
                # opened a new connection (connect, getaddrinfo, close).
                _ = out.data  # type: ignore[attr-defined]  # read once; kept for the caller
                release()
            return out

        loop = asyncio.get_running_loop()
        return await self._retrying(what, lambda: loop.run_in_executor(self.pool, run))

    async def send(
        self,
        what: str,
        method: str,
        path: str,
        body: Mapping[str, Any],
        fence: Callable[[], bool] | None = None,
        content_type: str = JSON,
    ) -> bytes:
        """One JSON request from the loop (no thread), rate-limited and retried
        as `call`; fenced the same way, right before the request leaves."""
        http = self.http
        assert http is not None, f"lane {self.name} sends through threads only"

        async def attempt() -> bytes:
            if fence is not None and not fence():
                raise NotLeader(f"{what}: not sent, this replica no longer leads")
            return await http.request(method, path, body, self.timeout, content_type)

        return await self._retrying(what, attempt)

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        delay = self.backoff
        for n in range(self.retries + 1):
            await self.limiter.take()
            try:
                return await attempt()
            except k8s.ApiException as e:
                if e.status not in RETRIABLE or n == self.retries:
                    raise
                log.warning("%s: HTTP %s, retrying in %.1fs", what, e.status, delay)
            except (OSError, TimeoutError, aiohttp.ClientError) as e:
                if n == self.retries:
                    raise
                log.warning("%s: %s, retrying in %.1fs", what, e or type(e).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close the loop's connections, then the threads (see `close`)."""
        if self.http is not None:
            await self.http.close()
        self.close()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _any(body: Mapping[str, Any]) -> Any:
    """A plain dict where the client's stubs want a model: it serializes both."""
    return dict(body)


def _split(key: str) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return ns, name


def _seg(s: str) -> str:
    """A path segment, escaped as the generated API escapes path parameters."""
    return quote(s, safe="")


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeClient:
    """ClusterClient (and LeaseClient factory) over the kubernetes client."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        qps: float = 50.0,
        burst: int = 100,
        workers: int = 8,
        connections: int = 32,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        identity: str | None = None,
    ) -> None:
        self.api = api
        self.identity = identity or default_identity()
        # As kube-scheduler's "kube-scheduler/v1.x (...)": the API server's audit
        # log and our tests can tell which replica wrote what.
        api.user_agent = f"{COMPONENT}/{__version__} ({self.identity})"
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.writes = Lane(
            "kube",
            qps=qps,
            burst=burst,
            workers=workers,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            http=LoopHttp(api, limit=connections),
        )
        self.event_lane = Lane(
            "kube-events",
            qps=qps,
            burst=burst,
            workers=1,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            http=LoopHttp(api, limit=max(1, connections // 4)),
        )
        self.retries = retries
        self.backoff = backoff
        # Set by the operator: True while this replica may write scheduling work.
        self.fence: Callable[[], bool] | None = None
        self.recorder = EventRecorder(
            COMPONENT,
            f"{COMPONENT}-{self.identity}",
            now=time.monotonic,
            wall=time.time,
        )
        self.events_written = 0
        self._leases: list[KubeLease] = []
        # The scheduling.k8s.io version whose PodGroups we watch (discovered at start).
        self.native_pod_group_version = NATIVE_POD_GROUP_VERSIONS[0]

    def credentials(self) -> Credentials:
        return credentials_of(self.api.configuration)

    async def call(self, what: str, fn: Callable[[tuple[float, float]], T]) -> T:
        """A read on the writes lane (lists, gets), not fenced."""
        return await self.writes.call(what, fn)

    async def _write(self, what: str, fn: Callable[[tuple[float, float]], T]) -> T:
        return await self.writes.call(what, fn, self.fence)

    async def _patch_pod_status(self, what: str, pod: PodKey, patch: Mapping[str, Any]) -> None:
        """A fenced strategic-merge patch of the pod's status (what the generated
        `patch_namespaced_pod_status` sends for a dict), from the loop."""
        ns, name = _split(pod)
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}/status"
        await self.writes.send(what, "PATCH", path, patch, self.fence, STRATEGIC_MERGE_PATCH)

    # ---- ClusterClient -------------------------------------------------------------

    async def bind(self, pod: PodKey, uid: str, node: NodeName) -> None:
        ns, name = _split(pod)
        body: Any = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{_seg(ns)}/pods/{_seg(name)}/binding"
        try:
            await self.writes.send(f"bind {pod}", "POST", path, body, self.fence)
        except k8s.ApiException as e:
            if e.status == 409:
                raise BindConflict(f"pod {pod}: {_api_error(e)}") from None
            if e.status == 404:
                raise NotFound(pod) from None
            raise _api_error(e) from None

    async def read_pod(self, pod: PodKey) -> Mapping[str, Any] | None:
        ns, name = _split(pod)
        try:
            resp: Any = await self.call(
                f"get pod {pod}",
                lambda t: self.core.read_namespaced_pod(
                    name, ns, _preload_content=False, _request_timeout=t
                ),
            )
        except k8s.ApiException as e:
            if e.status == 404:
                return None
            raise _api_error(e) from None
        obj = json.loads(resp.data or b"{}")
        return obj if isinstance(obj, dict) else None

    async def patch_pod_group_status(self, group: str, status: Mapping[str, Any]) -> None:
        native, ns, name = split_group_key(group)
        api_group, version = (
            (NATIVE_POD_GROUP_API, self.native_pod_group_version)
            if native
            else (POD_GROUP_GROUP, POD_GROUP_VERSION)
        )
        try:
            await self._write(
                f"patch PodGroup {group} status",
                lambda t: self.custom.patch_namespaced_custom_object_status(
                    api_group,
                    version,
                    ns,
                    "podgroups",
                    name,
                    {"status": dict(status)},
                    _request_timeout=t,
                ),
            )
        except k8s.ApiException as e:
            if e.status == 404:
                raise NotFound(group) from None
            raise _api_error(e) from None

    async def record_event(
        self, obj: ObjectRef, event_type: str, reason: str, message: str, action: str = ""
    ) -> None:
        """Write an Event as client-go's recorder does (see troupe/events.py):
        a repeat patches the existing Event's count; bursts are dropped."""
        if self.fence is not None and not self.fence():
            return  # a standby or a former leader writes nothing
        op = self.recorder.record(obj, event_type, reason, message, action)
        if op is None:
            return
        if isinstance(op, Create):
            await self._create_event(op)
            return
        try:
            path = f"/api/v1/namespaces/{_seg(op.namespace)}/events/{_seg(op.name)}"
            await self.event_lane.send(
                f"event for {obj.namespace}/{obj.name}",
                "PATCH",
                path,
                op.body,
                content_type=STRATEGIC_MERGE_PATCH,
            )
            self.events_written += 1
        except k8s.ApiException as e:
            self.recorder.forget(op.key)
            if e.status != 404:
                raise _api_error(e) from None
            # The Event expired meanwhile (events have a TTL): create it anew.
            again = self.recorder.record(obj, event_type, reason, message, action)
            if isinstance(again, Create):
                await self._create_event(again)

    async def _create_event(self, op: Create) -> None:
        try:
            path = f"/api/v1/namespaces/{_seg(op.namespace)}/events"
            what = f"event {op.body['metadata']['name']}"
            await self.event_lane.send(what, "POST", path, op.body)
            self.events_written += 1
        except k8s.ApiException as e:
            self.recorder.forget(op.key)
            raise _api_error(e) from None

    async def set_pod_condition(self, pod: PodKey, status: str, reason: str, message: str) -> None:
        cond = {
            "type": "PodScheduled",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339(),
        }
        try:
            await self._patch_pod_status(
                f"condition of {pod}", pod, {"status": {"conditions": [cond]}}
            )
        except k8s.ApiException as e:
            if e.status != 404:
                raise _api_error(e) from None

    async def patch_persistent_volume(
        self, name: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        return await self._merge_patch(
            f"patch PersistentVolume {name}",
            name,
            lambda t: self.core.patch_persistent_volume(
                name,
                dict(patch),
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=t,
            ),
        )

    async def patch_persistent_volume_claim(
        self, key: str, patch: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        ns, name = _split(key)
        return await self._merge_patch(
            f"patch PersistentVolumeClaim {key}",
            key,
            lambda t: self.core.patch_namespaced_persistent_volume_claim(
                name,
                ns,
                dict(patch),
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=t,
            ),
        )

    async def _merge_patch(
        self, what: str, key: str, fn: Callable[[tuple[float, float]], Any]
    ) -> Mapping[str, Any]:
        """A fenced merge patch of a volume object (VolumeBinding's PreBind)."""
        try:
            resp = await self._write(what, fn)
        except k8s.ApiException as e:
            if e.status == 409:
                raise Conflict(f"{key}: {_api_error(e)}") from None
            if e.status == 404:
                raise NotFound(key) from None
            raise _api_error(e) from None
        obj = json.loads(resp.data or b"{}")
        return obj if isinstance(obj, dict) else {}

    async def set_nominated_node(self, pod: PodKey, node: str | None) -> None:
        try:
            await self._patch_pod_status(
                f"nominated node of {pod}", pod, {"status": {"nominatedNodeName": node or None}}
            )
        except k8s.ApiException as e:
            if e.status != 404:
                raise _api_error(e) from None

    async def set_disruption_target(self, pod: PodKey, reason: str, message: str) -> None:
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339(),
        }
        try:
            await self._patch_pod_status(
                f"DisruptionTarget of {pod}", pod, {"status": {"conditions": [cond]}}
            )
        except k8s.ApiException as e:
            if e.status == 404:
                raise NotFound(pod) from None
            raise _api_error(e) from None

    async def delete_pod(self, pod: PodKey, uid: str, grace_period_seconds: int | None) -> None:
        ns, name = _split(pod)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self._write(
                f"delete pod {pod}",
                lambda t: self.core.delete_namespaced_pod(
                    name, ns, body=_any(body), _preload_content=False, _request_timeout=t
                ),
            )
        except k8s.ApiException as e:
            # 409: the uid precondition failed, the victim is gone (re-created since).
            if e.status in (404, 409):
                raise NotFound(pod) from None
            raise _api_error(e) from None

    def lease(
        self,
        namespace: str,
        name: str,
        timeout: float = 5.0,
    ) -> KubeLease:
        """A LeaseClient with its own API connection, thread and budget, and a
        short per-request timeout, so that renewals never wait behind writes."""
        api = k8s.ApiClient(self.api.configuration)
        api.user_agent = f"{COMPONENT}/{__version__} ({self.identity}) leader-election"
        lane = Lane(
            "kube-lease",
            qps=5.0,
            burst=10,
            workers=1,
            timeout=(timeout, timeout),
            retries=0,
            backoff=self.backoff,
        )
        lease = KubeLease(api, lane, namespace, name)
        self._leases.append(lease)
        return lease

    async def aclose(self) -> None:
        """Close every connection and thread (on the loop that made the requests)."""
        await self.writes.aclose()
        await self.event_lane.aclose()
        self.close()

    def close(self) -> None:
        """Stop the threads; `aclose` closes the loop's connections too."""
        self.writes.close()
        self.event_lane.close()
        for lease in self._leases:
            lease.lane.close()


class KubeLease:
    """LeaseClient on a coordination.k8s.io/v1 Lease."""

    def __init__(self, api: k8s.ApiClient, lane: Lane, namespace: str, name: str) -> None:
        self.api = api
        self.coordination = k8s.CoordinationV1Api(api)
        self.lane = lane
        self.namespace = namespace
        self.name = name

    @staticmethod
    def _parse_time(v: Any) -> float:
        if v is None:
            return 0.0
        if isinstance(v, datetime.datetime):
            return v.timestamp()
        return datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()

    def _record(self, obj: Mapping[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            lease_duration_seconds=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=self._parse_time(spec.get("acquireTime")),
            renew_time=self._parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        )

    def _body(self, r: LeaseRecord) -> dict[str, Any]:
        def ts(t: float) -> str:
            return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"
            )

        md: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if r.version:
            md["resourceVersion"] = r.version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": md,
            "spec": {
                "holderIdentity": r.holder,
                "leaseDurationSeconds": int(r.lease_duration_seconds),
                "acquireTime": ts(r.acquire_time),
                "renewTime": ts(r.renew_time),
                "leaseTransitions": r.transitions,
            },
        }

    async def _call(self, what: str, fn: Callable[[tuple[float, float]], Any]) -> Mapping[str, Any]:
        obj: Mapping[str, Any] = await self.lane.call(
            what,
            lambda t: self.api.sanitize_for_serialization(fn(t)),  # type: ignore[no-untyped-call]
        )
        return obj

    async def get(self) -> LeaseRecord | None:
        api = self.coordination
        try:
            obj = await self._call(
                "get lease",
                lambda t: api.read_namespaced_lease(self.name, self.namespace, _request_timeout=t),
            )
        except k8s.ApiException as e:
            if e.status == 404:
                return None
            raise
        return self._record(obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        api = self.coordination
        body: Any = self._body(record)
        try:
            obj = await self._call(
                "create lease",
                lambda t: api.create_namespaced_lease(self.namespace, body, _request_timeout=t),
            )
        except k8s.ApiException as e:
            if e.status == 409:
                raise LeaseConflict("lease exists") from e
            raise
        return self._record(obj)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """A merge patch carrying metadata.resourceVersion: the API server applies it
        only if the Lease has not changed since it was read (else 409)."""
        api = self.coordination
        body: Any = self._body(record)
        try:
            obj = await self._call(
                "update lease",
                lambda t: api.patch_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=t
                ),
            )
        except k8s.ApiException as e:
            if e.status == 409:
                raise LeaseConflict("lease changed") from e
            raise
        return self._record(obj)


def native_kind(version: str) -> str:
    """The key under which WATCHED holds scheduling.k8s.io PodGroups of `version`."""
    return f"PodGroup.{NATIVE_POD_GROUP_API}/{version}"


# (group, version, plural, namespaced) of what the scheduler watches, by kind.
WATCHED: Final = {
    "Node": ("", "v1", "nodes"),
    "Pod": ("", "v1", "pods"),
    "PriorityClass": ("scheduling.k8s.io", "v1", "priorityclasses"),
    "PodGroup": (POD_GROUP_GROUP, POD_GROUP_VERSION, "podgroups"),
    # Kubernetes' own PodGroups: the operator watches the one version discovery finds.
    **{native_kind(v): (NATIVE_POD_GROUP_API, v, "podgroups") for v in NATIVE_POD_GROUP_VERSIONS},
    "Namespace": ("", "v1", "namespaces"),
    "Service": ("", "v1", "services"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "PersistentVolume": ("", "v1", "persistentvolumes"),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
    "StorageClass": ("storage.k8s.io", "v1", "storageclasses"),
    "CSINode": ("storage.k8s.io", "v1", "csinodes"),
    "CSIDriver": ("storage.k8s.io", "v1", "csidrivers"),
    "CSIStorageCapacity": ("storage.k8s.io", "v1", "csistoragecapacities"),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets"),
}


def _lister(kube: KubeClient, kind: str) -> Callable[[tuple[float, float]], Any]:
    core, apps = kube.core, k8s.AppsV1Api(kube.api)
    storage, policy = k8s.StorageV1Api(kube.api), k8s.PolicyV1Api(kube.api)
    if kind.startswith("PodGroup"):
        group, version, _ = WATCHED[kind]
        return lambda t: kube.custom.list_cluster_custom_object(
            group,
            version,
            "podgroups",
            _preload_content=False,
            _request_timeout=LIST_TIMEOUT,
        )
    fns: dict[str, Callable[..., Any]] = {
        "Node": core.list_node,
        "Pod": core.list_pod_for_all_namespaces,
        "Namespace": core.list_namespace,
        "Service": core.list_service_for_all_namespaces,
        "ReplicationController": core.list_replication_controller_for_all_namespaces,
        "PriorityClass": k8s.SchedulingV1Api(kube.api).list_priority_class,
        "ReplicaSet": apps.list_replica_set_for_all_namespaces,
        "StatefulSet": apps.list_stateful_set_for_all_namespaces,
        "PersistentVolume": core.list_persistent_volume,
        "PersistentVolumeClaim": core.list_persistent_volume_claim_for_all_namespaces,
        "StorageClass": storage.list_storage_class,
        "CSINode": storage.list_csi_node,
        "CSIDriver": storage.list_csi_driver,
        "CSIStorageCapacity": storage.list_csi_storage_capacity_for_all_namespaces,
        "PodDisruptionBudget": policy.list_pod_disruption_budget_for_all_namespaces,
    }
    fn = fns[kind]
    return lambda t: fn(_preload_content=False, _request_timeout=LIST_TIMEOUT)


async def list_objects(kube: KubeClient, kind: str) -> list[dict[str, Any]]:
    """Every object of a watched kind, as plain dicts (the initial sync)."""
    group, version, plural = WATCHED[kind]
    fetch = _lister(kube, kind)
    try:
        resp = await kube.call(f"list {plural}", fetch)
    except k8s.ApiException as e:
        if e.status == 404:  # e.g. the PodGroup CRD is not installed
            log.warning("cannot list %s: %s", plural, e.reason)
            return []
        raise _api_error(e) from None
    data = json.loads(resp.data or b"{}")
    out = []
    for item in data.get("items") or []:
        if isinstance(item, dict):
            item.setdefault("kind", kind.partition(".")[0])
            item.setdefault("apiVersion", f"{group}/{version}" if group else version)
            out.append(item)
    return out


async def discover_native_pod_groups(kube: KubeClient) -> str | None:
    """The scheduling.k8s.io version whose PodGroups to watch, or None.

    API discovery, as kube-scheduler's informers would find the resource: GET
    /apis/scheduling.k8s.io for the versions served, then, of those Troupe
    reads (v1beta1 before v1alpha2), the first whose resource list has
    `podgroups`. A cluster without the API (older, or the GenericWorkload gate
    off) is normal: None, and one log line by the caller.
    """

    def fetch(path: str, t: tuple[float, float]) -> bytes | None:
        method, url, headers, body, post = kube.api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        resp = kube.api.call_api(
            method, url, header_params=headers, body=body, post_params=post, _request_timeout=t
        )
        resp.read()  # type: ignore[no-untyped-call]
        if resp.status == 404:
            return None
        if not 200 <= resp.status < 300:
            raise k8s.ApiException(status=resp.status, reason=resp.reason)
        return bytes(resp.data or b"{}")

    async def get(path: str) -> dict[str, Any] | None:
        try:
            data = await kube.call(f"discover {path}", lambda t: fetch(path, t))
        except k8s.ApiException as e:
            raise _api_error(e) from None
        doc = json.loads(data) if data is not None else None
        return doc if isinstance(doc, dict) else None

    group = await get(f"/apis/{NATIVE_POD_GROUP_API}")
    served = {v.get("version") for v in (group or {}).get("versions") or [] if isinstance(v, dict)}
    for version in NATIVE_POD_GROUP_VERSIONS:
        if version not in served:
            continue
        resources = await get(f"/apis/{NATIVE_POD_GROUP_API}/{version}")
        names = {
            r.get("name") for r in (resources or {}).get("resources") or [] if isinstance(r, dict)
        }
        if "podgroups" in names:
            return version
    return None
