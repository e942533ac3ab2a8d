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

A request that is not a watch goes, unless a proxy is configured, over
`Http`'s own keep-alive connections (`_Connection`): the request written in
one piece, the answer read by aiohttp's HTTP parser (`aiohttp.http`), one
request at a time per connection. aiohttp's `ClientSession` carries the
watches and proxied requests. The session's request path (headers merged,
cookies, redirects, tracing, a request and a response object, a task to
write the body) cost 0.42 ms of the client's CPU per Event or bind against
0.17 ms for this one, side by side on one machine
(docs/benchmarks-side-by-side.md): two writes per pod, a fifth of Troupe's CPU
end to end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import aiohttp
import yarl
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import HttpProcessingError, HttpResponseParser
from multidict import CIMultiDict

from troupe.api import jsonio
from troupe.core.cluster import Conflict, NotLeader
from troupe.kube.credentials import Connection
from troupe.kube.errors import ApiError, NoAnswer, describe, error_of

log = logging.getLogger(__name__)

# (connect, read) seconds of every request but lists and the Lease's.
DEFAULT_TIMEOUT: Final = (5.0, 30.0)
# (connect, read) seconds of a list's page (the reflectors' lane).
LIST_TIMEOUT: Final = (10.0, 120.0)
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON: Final = "application/json"
# An idle keep-alive connection older than this is closed rather than reused
# (aiohttp's keepalive_timeout): a load balancer may have dropped it.
IDLE_SECONDS: Final = 15.0
# Methods that a connection found closed before any answer may resend at
# once (aiohttp's rule for its pooled connections); others go back to the
# lane, whose retry waits its backoff.
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "PUT", "DELETE"})


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

    def try_take(self) -> bool:
        """Take a token now if one is there and nobody waits for one."""
        if not self._lock.locked():
            self._refill()
            if self.tokens >= 1:
                self.tokens -= 1
                return True
        return False

    async def take(self) -> None:
        if self.try_take():  # nobody waits: no need to queue
            return
        async with self._lock:
            while True:
                self._refill()
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.qps)


class _Slots:
    """At most `n` requests at once, the others waiting in order: an
    asyncio.Semaphore whose uncontended path is a counter, not two coroutines
    (`take` is a plain function; only a request that finds no slot awaits)."""

    __slots__ = ("_waiters", "free")

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take(self) -> bool:
        """Take a slot if one is free and nobody waits for it."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Wait for a slot (after `take` failed); `release` hands it over."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot, but cancelled before using it
            raise

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():  # a cancelled waiter is skipped
                fut.set_result(None)
                return
        self.free += 1


class _Connection(BaseProtocol):
    """One keep-alive HTTP/1.1 connection of `Http`: one request at a time,
    its answer parsed by aiohttp's parser on aiohttp's protocol base (TCP
    without Nagle's delay). `answer` is the future of the request in flight:
    (status, reason, body), or the error that ended it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.parser = HttpResponseParser(self, loop, 1 << 30)
        self._parser = self.parser
        self.answer: asyncio.Future[tuple[int, str, bytes]] | None = None
        self.received = False  # a byte of the answer in flight came
        self.idle_since = 0.0
        self.closed = False
        self._message: Any = None
        self._payload: Any = None

    # The body reader asks to pause past the limit (never reached) and to
    # resume whenever it is read; nothing is ever paused, and resuming would
    # re-enter data_received.
    def pause_reading(self) -> None:
        pass

    def resume_reading(self, resume_parser: bool = True) -> None:
        pass

    def send(self, data: bytes) -> asyncio.Future[tuple[int, str, bytes]]:
        self.received = False
        self.answer = fut = self._loop.create_future()
        assert self.transport is not None
        self.transport.write(data)
        return fut

    def data_received(self, data: bytes) -> None:
        self.received = True
        fut = self.answer
        try:
            messages, _, _ = self.parser.feed_data(data)
            if messages:
                self._message, self._payload = messages[0]
            payload = self._payload
            if payload is None or not payload.is_eof():
                return
            body = payload.read_nowait()
        except (HttpProcessingError, ValueError) as e:
            self.close()
            if fut is not None and not fut.done():
                fut.set_exception(ConnectionResetError(f"bad answer from the server: {e!r}"))
            return
        msg, self._message, self._payload = self._message, None, None
        if msg.should_close:
            self.close()
        if fut is not None and not fut.done():
            fut.set_result((msg.code, msg.reason, body))

    def eof_received(self) -> bool | None:
        with contextlib.suppress(HttpProcessingError, ValueError):
            self.parser.feed_eof()  # an answer read until the connection ends
        payload = self._payload
        if payload is not None and payload.is_eof() and self._message is not None:
            fut, msg = self.answer, self._message
            self._message = self._payload = None
            if fut is not None and not fut.done():
                fut.set_result((msg.code, msg.reason, payload.read_nowait()))
        return None  # the transport closes

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self.closed = True
        fut = self.answer
        if fut is not None and not fut.done():
            fut.set_exception(
                ConnectionResetError(f"the server closed the connection: {exc}")
                if exc
                else ConnectionResetError("the server closed the connection")
            )

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Http:
    """Requests to the API server over at most `limit` connections, each
    carrying `user_agent` and the connection's credentials.

    The session is made on the first request, on the loop that makes it (an
    aiohttp session belongs to one loop), and closed by `close()`. What is the
    same for every request is made once: the session's default headers
    (User-Agent, Accept), the Content-Type and Authorization headers per
    (content type, token), the server's URL that each path joins.
    """

    def __init__(self, conn: Connection, *, limit: int, user_agent: str) -> None:
        self.conn = conn
        self.limit = limit
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        # Requests beyond `limit` wait here rather than in aiohttp's connector:
        # its wait for a free connection (a future per waiter and retries of
        # the pool) cost binds, hundreds in flight, more than the request.
        self._slots: _Slots | None = None
        self._headers: dict[tuple[str | None, str | None], CIMultiDict[str] | None] = {}
        base = yarl.URL(conn.host, encoded=True)
        # A path is joined to the server's URL by `with_path` (no parse of the
        # whole URL), unless it has a query or the server's URL has a path.
        self._base = base if base.raw_path in ("", "/") and not base.raw_query_string else None
        self._proxy: dict[str, Any] = (
            {"proxy": conn.proxy, "proxy_headers": conn.proxy_headers} if conn.proxy else {}
        )
        if conn.server_hostname is not None:
            self._proxy["server_hostname"] = conn.server_hostname
        # The keep-alive connections of every request but watches (none with
        # a proxy: the session tunnels through it).
        self._idle: list[_Connection] = []
        https = base.scheme == "https"
        self._addr = (base.raw_host or "", base.port or (443 if https else 80))
        self._tls: ssl.SSLContext | None = None
        if https:
            ctx = conn.ssl
            self._tls = ctx if isinstance(ctx, ssl.SSLContext) else ssl.create_default_context()
        self._server_hostname = conn.server_hostname or (base.raw_host if https else None)
        self._prefix = base.raw_path.rstrip("/")
        # The request's first lines, the same for every request: what follows
        # the method and path.
        self._host_line = f" HTTP/1.1\r\nHost: {base.host_port_subcomponent}\r\n"
        self._fixed = f"User-Agent: {user_agent}\r\nAccept: {JSON}\r\n"

    def _open(self) -> aiohttp.ClientSession:
        s = self._session
        if s is None or s.closed:
            s = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.limit, ssl=self.conn.ssl),
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": self.user_agent, "Accept": JSON},
                trust_env=False,
            )
        return s

    def _request_headers(self, content_type: str | None) -> CIMultiDict[str] | None:
        """Content-Type and Authorization (asked of the connection each time: a
        token may have been renewed), made once per pair; aiohttp copies them."""
        auth = self.conn.authorization()
        key = (content_type, auth)
        try:
            return self._headers[key]
        except KeyError:
            pass
        headers: CIMultiDict[str] = CIMultiDict()
        if content_type is not None:
            headers["Content-Type"] = content_type
        if auth:
            headers["Authorization"] = auth
        if len(self._headers) >= 16:  # tokens renewed many times: start over
            self._headers.clear()
        self._headers[key] = out = headers or None
        return out

    def _url(self, path: str) -> yarl.URL:
        base = self._base
        if base is None or "?" in path:
            return yarl.URL(self.conn.host + path, encoded=True)
        return base.with_path(path, encoded=True)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout: aiohttp.ClientTimeout,
        *,
        content_type: str = JSON,
        key: str = "",
        conflict: type[Conflict] = Conflict,
    ) -> bytes:
        """Send one request (`path` with its segments quoted by the caller)
        and return the body of a 2xx answer; any other status raises the error
        `error_of` maps it to (about `key`), a TLS failure ApiError(0), no
        answer within the timeout's sock_read seconds NoAnswer, a
        connection lost ConnectionResetError."""
        slots = self._slots
        if slots is None:
            slots = self._slots = _Slots(self.limit)
        if not slots.take():
            await slots.wait()
        try:
            send = self._via_session if self.conn.proxy else self._direct
            status, reason, data = await send(method, path, body, timeout, content_type)
        except ssl.SSLError as e:  # a bad certificate is not transient
            raise ApiError(0, describe(0, f"{type(e).__name__}\n{e}", b"")) from None
        finally:
            slots.release()
        if not 200 <= status <= 299:
            raise error_of(status, reason, data, key or path, conflict)
        return data

    async def _direct(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout: aiohttp.ClientTimeout,
        content_type: str,
    ) -> tuple[int, str, bytes]:
        """One request over a keep-alive connection of this `Http`'s own."""
        head = [method, " ", self._prefix, path, self._host_line, self._fixed]
        auth = self.conn.authorization()
        if auth:
            head.append(f"Authorization: {auth}\r\n")
        if body is not None:
            head.append(f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n")
        else:
            head.append("\r\n")
        data = "".join(head).encode("latin-1")
        if body is not None:
            data += body
        loop = asyncio.get_running_loop()
        while True:
            conn, reused = await self._connection(loop, timeout.sock_connect)
            fut = conn.send(data)
            timer = loop.call_later(timeout.sock_read or 30.0, _expire, fut)
            try:
                answer = await fut
            except ConnectionResetError:
                conn.close()
                # A kept connection the server had closed before it read a
                # byte: once more on a new one, if resending does no harm.
                if reused and not conn.received and method in IDEMPOTENT:
                    continue
                raise
            except BaseException:  # a timeout, or the caller cancelled
                conn.close()
                raise
            finally:
                timer.cancel()
            if not conn.closed:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            return answer

    async def _connection(
        self, loop: asyncio.AbstractEventLoop, connect_timeout: float | None
    ) -> tuple[_Connection, bool]:
        """A kept connection that is still open and not idle too long, else a
        new one; and whether it was kept."""
        idle = self._idle
        if idle:
            oldest = time.monotonic() - IDLE_SECONDS
            while idle:
                conn = idle.pop()
                if not conn.closed and conn.idle_since >= oldest:
                    return conn, True
                conn.close()
        host, port = self._addr
        async with asyncio.timeout(connect_timeout):
            _, conn = await loop.create_connection(
                lambda: _Connection(loop),
                host,
                port,
                ssl=self._tls,
                server_hostname=self._server_hostname,
            )
        return conn, False

    async def _via_session(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout: aiohttp.ClientTimeout,
        content_type: str,
    ) -> tuple[int, str, bytes]:
        """One request through aiohttp's session (a proxy tunnels it)."""
        try:
            async with self._open().request(
                method,
                self._url(path),
                data=body,
                headers=self._request_headers(content_type if body is not None else None),
                timeout=timeout,
                **self._proxy,
            ) as r:
                return r.status, r.reason or "", await r.read()
        except aiohttp.ClientSSLError as e:  # a bad certificate is not transient
            raise _tls_error(e) from None

    async def watch_lines(self, path: str, timeout: float) -> AsyncIterator[bytes]:
        """The lines of a watch stream (one JSON event each), until the server
        ends it; a stream silent for longer than `timeout` (plus a margin)
        breaks with TimeoutError. Not counted against `limit`: a stream holds
        its connection for minutes."""
        try:
            async with self._open().get(
                self._url(path),
                headers=self._request_headers(None),
                timeout=aiohttp.ClientTimeout(sock_connect=10.0, sock_read=timeout + 30.0),
                **self._proxy,
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
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._slots = None


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(NoAnswer("no answer from the server within the read timeout"))


def _tls_error(e: aiohttp.ClientSSLError) -> ApiError:
    return ApiError(0, describe(0, f"{type(e).__name__}\n{e}", b""))


def _client_timeout(timeout: tuple[float, float]) -> aiohttp.ClientTimeout:
    """(connect, read) seconds as aiohttp's timeout."""
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

    @property
    def timeout(self) -> tuple[float, float]:
        """(connect, read) seconds of each request."""
        return self._timeout

    @timeout.setter
    def timeout(self, timeout: tuple[float, float]) -> None:
        self._timeout = timeout
        self._client_timeout = _client_timeout(timeout)

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
        """One request, rate-limited, retrying transient failures (429, 5xx,
        connection failures) with backoff; the answer's body. With a `fence`,
        the request is not sent (NotLeader) unless `fence()` holds at the
        moment it would leave. Errors are typed about `key` (see
        `Http.request`)."""
        # A Mapping that is not a dict is copied: the encoder takes dicts only.
        data = (
            None if body is None else jsonio.dumps(body if isinstance(body, dict) else dict(body))
        )
        http, limiter = self.http, self.limiter
        delay = self.backoff
        n = 0
        while True:
            if limiter is not None and not limiter.try_take():
                await limiter.take()
            if fence is not None and not fence():
                raise NotLeader(f"{what}: not sent, this replica no longer leads")
            try:
                return await http.request(
                    method,
                    path,
                    data,
                    self._client_timeout,
                    content_type=content_type,
                    key=key or what,
                    conflict=conflict,
                )
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
            n += 1

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

    async def aclose(self) -> None:
        """Close the lane's connections (on the loop that made the requests)."""
        await self.http.close()
