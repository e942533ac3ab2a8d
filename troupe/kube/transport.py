"""HTTP to the API server: a token bucket per lane, JSON requests from the
event loop (aiohttp, configured as the kubernetes client's Configuration says),
the kubernetes client's calls in a lane's threads, timeouts and retries with
backoff, and the fence that keeps a replica that no longer leads from writing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import quote

import aiohttp
import yarl
from kubernetes import client as k8s
from kubernetes.client.rest import should_bypass_proxies

from troupe.core.cluster import NotLeader
from troupe.kube.errors import Gone, NotServed

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRIABLE: Final = frozenset({429, 500, 502, 503, 504})
# (connect, read) seconds of every request but lists and the Lease's.
DEFAULT_TIMEOUT: Final = (5.0, 30.0)
LIST_TIMEOUT: Final = (5.0, 120.0)
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON: Final = "application/json"
# The generated API's name for the credentials of every core call.
AUTH_SETTINGS: Final = ["BearerToken"]


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

    def _get_headers(self, path: str) -> dict[str, str]:
        api = self.api
        headers = {**api.default_headers, "Accept": JSON}
        if api.cookie:
            headers["Cookie"] = api.cookie
        api.update_params_for_auth(headers, [], AUTH_SETTINGS, path, "GET", None)
        return headers

    async def get_json(self, path: str, timeout: tuple[float, float] = (10.0, 120.0)) -> Any:
        """GET a JSON document (a list's page). 404 raises NotServed, 410 Gone,
        other statuses the client's ApiException."""
        async with self._open().get(
            yarl.URL(self.host + path, encoded=True),
            headers=self._get_headers(path),
            timeout=_client_timeout(timeout),
            proxy=self.proxy,
            proxy_headers=self.proxy_headers,
            server_hostname=self.server_hostname,
        ) as r:
            data = await r.read()
            _raise_for(r.status, r.reason, data)
        return json.loads(data or b"{}")

    async def watch_lines(self, path: str, timeout: float) -> AsyncIterator[bytes]:
        """The lines of a watch stream (one JSON event each), until the server
        ends it; a stream silent for longer than `timeout` (plus a margin)
        breaks with TimeoutError."""
        async with self._open().get(
            yarl.URL(self.host + path, encoded=True),
            headers=self._get_headers(path),
            timeout=aiohttp.ClientTimeout(sock_connect=10.0, sock_read=timeout + 30.0),
            proxy=self.proxy,
            proxy_headers=self.proxy_headers,
            server_hostname=self.server_hostname,
        ) as r:
            if r.status != 200:
                _raise_for(r.status, r.reason, await r.read())
            while True:
                line = await r.content.readline()
                if not line:
                    return
                yield line

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._slots = None


def _raise_for(status: int, reason: str | None, body: bytes) -> None:
    if status == 404:
        raise NotServed(body.decode("utf-8", "replace")[:200])
    if status == 410:
        raise Gone(body.decode("utf-8", "replace")[:200])
    if not 200 <= status <= 299:
        raise k8s.ApiException(status=status, reason=reason, body=body.decode("utf-8", "replace"))


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
