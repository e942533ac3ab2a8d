"""HTTP to the API server, one stack for every request Troupe makes: aiohttp on
the event loop that makes the request, no threads.

- `Http.request` is the one function that sends a request and reads its
  answer (`Http.watch_lines` streams a watch); an answer that is not 2xx is
  raised as the typed error `troupe.kube.errors.error_of` makes of it.
- A `Lane` is one stream of traffic with its own connections (an `Http`), its
  token bucket (QPS with a burst, as client-go's rate limiter), timeout and
  retries with backoff (429, 5xx, connection failures), and the fence that
  keeps a replica that no longer leads from writing. `KubeClient` makes every
  lane, so the rates are set in one place.

Bodies are encoded and answers decoded with `troupe.api.jsonio`. Where the
server is and how to authenticate comes from `troupe.kube.credentials`'s
`Connection`, asked per request for the Authorization header (an expiring
token is renewed there).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

import aiohttp
import yarl

from troupe.api import jsonio
from troupe.core.cluster import Conflict, NotLeader
from troupe.kube.credentials import Connection
from troupe.kube.errors import ApiError, describe, error_of

log = logging.getLogger(__name__)

T = TypeVar("T")
# (connect, read) seconds of every request but lists and the Lease's.
DEFAULT_TIMEOUT: Final = (5.0, 30.0)
# (connect, read) seconds of a list's page (the reflectors' lane).
LIST_TIMEOUT: Final = (10.0, 120.0)
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON: Final = "application/json"


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


class Http:
    """Requests to the API server over at most `limit` connections, each
    carrying `user_agent` and the connection's credentials.

    The session is made on the first request, on the loop that makes it (an
    aiohttp session belongs to one loop), and closed by `close()`.
    """

    def __init__(self, conn: Connection, *, limit: int, user_agent: str) -> None:
        self.conn = conn
        self.limit = limit
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        # Requests beyond `limit` wait here rather than in aiohttp's connector:
        # its wait for a free connection (a future per waiter and retries of
        # the pool) cost binds, hundreds in flight, more than the request.
        self._slots: asyncio.Semaphore | None = None

    def _open(self) -> aiohttp.ClientSession:
        s = self._session
        if s is None or s.closed:
            s = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.limit, ssl=self.conn.ssl),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return s

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"User-Agent": self.user_agent, "Accept": JSON}
        if content_type is not None:
            headers["Content-Type"] = content_type
        auth = self.conn.authorization()
        if auth:
            headers["Authorization"] = auth
        return headers

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout: tuple[float, float],
        *,
        content_type: str = JSON,
        key: str = "",
        conflict: type[Conflict] = Conflict,
    ) -> bytes:
        """Send one request (`path` with its segments quoted by the caller)
        and return the body of a 2xx answer; any other status raises the error
        `error_of` maps it to (about `key`), a TLS failure ApiError(0)."""
        slots = self._slots
        if slots is None:
            slots = self._slots = asyncio.Semaphore(self.limit)
        conn = self.conn
        try:
            async with (
                slots,
                self._open().request(
                    method,
                    yarl.URL(conn.host + path, encoded=True),
                    data=body,
                    headers=self._headers(content_type if body is not None else None),
                    timeout=_client_timeout(timeout),
                    proxy=conn.proxy,
                    proxy_headers=conn.proxy_headers,
                    server_hostname=conn.server_hostname,
                ) as r,
            ):
                data = await r.read()
                status, reason = r.status, r.reason
        except aiohttp.ClientSSLError as e:  # a bad certificate is not transient
            raise _tls_error(e) from None
        if not 200 <= status <= 299:
            raise error_of(status, reason, data, key or path, conflict)
        return data

    async def watch_lines(self, path: str, timeout: float) -> AsyncIterator[bytes]:
        """The lines of a watch stream (one JSON event each), until the server
        ends it; a stream silent for longer than `timeout` (plus a margin)
        breaks with TimeoutError. Not counted against `limit`: a stream holds
        its connection for minutes."""
        conn = self.conn
        try:
            async with self._open().get(
                yarl.URL(conn.host + path, encoded=True),
                headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(sock_connect=10.0, sock_read=timeout + 30.0),
                proxy=conn.proxy,
                proxy_headers=conn.proxy_headers,
                server_hostname=conn.server_hostname,
            ) as r:
                if r.status != 200:
                    raise error_of(r.status, r.reason, await r.read(), path)
                while True:
                    line = await r.content.readline()
                    if not line:
                        return
                    yield line
        except aiohttp.ClientSSLError as e:
            raise _tls_error(e) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._slots = None


def _tls_error(e: aiohttp.ClientSSLError) -> ApiError:
    return ApiError(0, describe(0, f"{type(e).__name__}\n{e}", b""))


@functools.lru_cache(maxsize=8)
def _client_timeout(timeout: tuple[float, float]) -> aiohttp.ClientTimeout:
    """(connect, read) seconds as aiohttp's timeout, made once per pair."""
    return aiohttp.ClientTimeout(sock_connect=timeout[0], sock_read=timeout[1])


class Lane:
    """One stream of API traffic: its connections (`http`), its token bucket
    (none with `qps` None: the watches), timeout and retries."""

    def __init__(
        self,
        name: str,
        http: Http,
        *,
        qps: float | None,
        burst: int,
        timeout: tuple[float, float],
        retries: int,
        backoff: float,
    ) -> None:
        self.name = name
        self.http = http
        self.limiter = TokenBucket(qps, burst) if qps is not None else None
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    async def send(
        self,
        what: str,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        fence: Callable[[], bool] | None = None,
        content_type: str = JSON,
        key: str = "",
        conflict: type[Conflict] = Conflict,
    ) -> bytes:
        """One request, rate-limited, retrying transient failures; the answer's
        body. With a `fence`, the request is not sent (NotLeader) unless
        `fence()` holds at the moment it would leave. Errors are typed about
        `key` (see `Http.request`)."""
        # A Mapping that is not a dict is copied: the encoder takes dicts only.
        data = (
            None if body is None else jsonio.dumps(body if isinstance(body, dict) else dict(body))
        )
        http, timeout = self.http, self.timeout

        async def attempt() -> bytes:
            if fence is not None and not fence():
                raise NotLeader(f"{what}: not sent, this replica no longer leads")
            return await http.request(
                method,
                path,
                data,
                timeout,
                content_type=content_type,
                key=key or what,
                conflict=conflict,
            )

        return await self._retrying(what, attempt)

    async def get(self, what: str, path: str, *, key: str = "") -> Any:
        """GET a JSON document (decoded; `{}` for an empty answer)."""
        return jsonio.loads(await self.send(what, "GET", path, key=key) or b"{}")

    async def get_json(self, path: str) -> Mapping[str, Any]:
        """A list's page (the reflectors' `WatchHttp`)."""
        doc = await self.get(f"list {path}", path, key=path)
        return doc if isinstance(doc, dict) else {}

    def watch_lines(self, path: str, timeout: float) -> AsyncIterator[bytes]:
        """A watch stream's lines (the reflectors' `WatchHttp`), not retried:
        the reflector resumes it."""
        return self.http.watch_lines(path, timeout)

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        delay = self.backoff
        for n in range(self.retries + 1):
            if self.limiter is not None:
                await self.limiter.take()
            try:
                return await attempt()
            except ApiError as e:
                if not e.retriable or n == self.retries:
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
        """Close the lane's connections (on the loop that made the requests)."""
        await self.http.close()
