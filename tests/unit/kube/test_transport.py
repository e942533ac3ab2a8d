"""`Http`'s own keep-alive connections, on the wire: a server on a local port
that answers as the test says (chunked, `Connection: close`, a connection
dropped unanswered, no answer at all), and what the client makes of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from troupe.kube import transport
from troupe.kube.credentials import Connection
from troupe.kube.errors import ApiError, NoAnswer
from troupe.kube.transport import Http

TIMEOUT = aiohttp.ClientTimeout(sock_connect=5.0, sock_read=5.0)

# What the server does with the n-th request it reads (0-based, over all
# connections): the bytes it writes back, or None to drop the connection.
Script = Callable[[int, bytes], bytes | None]


def answer(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(*chunks: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for c in chunks:
        out += f"{len(c):x}\r\n".encode() + c + b"\r\n"
    return out + b"0\r\n\r\n"


class Server:
    """Reads one request at a time per connection (headers, then a body of
    Content-Length) and answers as `script` says; counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + (await reader.readexactly(length) if length else b"")
                n = len(self.requests)
                self.requests.append(request)
                out = self.script(n, request)
                if out is None:
                    return
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


@pytest.fixture
async def client() -> AsyncIterator[Callable[[str], Http]]:
    made: list[Http] = []

    def make(url: str) -> Http:
        made.append(Http(Connection.to(url, token="t"), limit=4, user_agent="test/1"))
        return made[-1]

    yield make
    for h in made:
        await h.close()


async def test_requests_share_a_connection_and_carry_the_headers(
    client: Callable[[str], Http],
) -> None:
    async with Server(lambda n, req: answer(b'{"n": %d}' % n)) as srv:
        http = client(srv.url)
        got = [await http.request("POST", "/api/v1/x", b'{"a": 1}', TIMEOUT) for _ in range(3)]
        assert got == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}']
        assert srv.connections == 1
        first = srv.requests[0].decode()
        assert first.startswith("POST /api/v1/x HTTP/1.1\r\n")
        for header in (
            f"Host: {srv.url.removeprefix('http://')}",
            "User-Agent: test/1",
            "Accept: application/json",
            "Authorization: Bearer t",
            "Content-Type: application/json",
            "Content-Length: 8",
        ):
            assert f"\r\n{header}\r\n" in first
        assert first.endswith('\r\n\r\n{"a": 1}')
        # A GET has no body and no Content-Type.
        await http.request("GET", "/api/v1/y?limit=5", None, TIMEOUT)
        get = srv.requests[3].decode()
        assert get.startswith("GET /api/v1/y?limit=5 HTTP/1.1\r\n")
        assert "Content-Type" not in get and "Content-Length" not in get


async def test_a_chunked_answer_is_read_whole_and_connection_close_is_obeyed(
    client: Callable[[str], Http],
) -> None:
    def script(n: int, req: bytes) -> bytes:
        if n == 0:
            return chunked(b'{"items": [', b"1, 2", b"]}")
        if n == 1:
            return answer(b"{}", "Connection: close")
        return answer(b'{"fresh": true}')

    async with Server(script) as srv:
        http = client(srv.url)
        assert await http.request("GET", "/a", None, TIMEOUT) == b'{"items": [1, 2]}'
        assert await http.request("GET", "/b", None, TIMEOUT) == b"{}"
        assert await http.request("GET", "/c", None, TIMEOUT) == b'{"fresh": true}'
        assert srv.connections == 2  # the server said close: a new connection


async def test_an_error_status_is_typed_and_the_connection_kept(
    client: Callable[[str], Http],
) -> None:
    status = b'{"kind": "Status", "message": "etcd is slow"}'

    def script(n: int, req: bytes) -> bytes:
        if n == 0:
            return answer(status, status="503 Service Unavailable")
        return answer(b"{}")

    async with Server(script) as srv:
        http = client(srv.url)
        with pytest.raises(ApiError) as e:
            await http.request("GET", "/a", None, TIMEOUT)
        assert e.value.status == 503 and e.value.retriable
        assert str(e.value) == "HTTP 503 (Service Unavailable): etcd is slow"
        assert await http.request("GET", "/a", None, TIMEOUT) == b"{}"
        assert srv.connections == 1


async def test_a_kept_connection_the_server_dropped_resends_only_what_is_idempotent(
    client: Callable[[str], Http],
) -> None:
    """The second request on a kept connection finds it dropped before any
    answer: a GET is sent again at once on a new connection; a POST is not
    (it may have been carried out), the lane's retry decides."""

    def script(n: int, req: bytes) -> bytes | None:
        return None if n == 1 else answer(b"{}")

    async with Server(script) as srv:
        http = client(srv.url)
        await http.request("GET", "/a", None, TIMEOUT)
        assert await http.request("GET", "/a", None, TIMEOUT) == b"{}"
        assert len(srv.requests) == 3 and srv.connections == 2

    def script2(n: int, req: bytes) -> bytes | None:
        return None if n == 1 else answer(b"{}")

    async with Server(script2) as srv:
        http = client(srv.url)
        await http.request("POST", "/a", b"{}", TIMEOUT)
        with pytest.raises(ConnectionResetError):
            await http.request("POST", "/a", b"{}", TIMEOUT)
        assert len(srv.requests) == 2
        # The broken connection is not kept: the next request opens another.
        assert await http.request("POST", "/a", b"{}", TIMEOUT) == b"{}"
        assert srv.connections == 2


async def test_no_answer_within_the_read_timeout_is_noanswer_and_drops_the_connection(
    client: Callable[[str], Http],
) -> None:
    hung = asyncio.Event()

    def script(n: int, req: bytes) -> bytes | None:
        if n == 0:
            hung.set()
            return b""  # nothing written: the client waits for an answer
        return answer(b"{}")

    async with Server(script) as srv:
        http = client(srv.url)
        short = aiohttp.ClientTimeout(sock_connect=5.0, sock_read=0.2)
        with pytest.raises(NoAnswer):
            await http.request("GET", "/a", None, short)
        assert hung.is_set()
        assert await http.request("GET", "/a", None, TIMEOUT) == b"{}"
        assert srv.connections == 2


async def test_a_connection_idle_too_long_is_not_reused(
    client: Callable[[str], Http], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "IDLE_SECONDS", -1.0)
    async with Server(lambda n, req: answer(b"{}")) as srv:
        http = client(srv.url)
        await http.request("GET", "/a", None, TIMEOUT)
        await http.request("GET", "/a", None, TIMEOUT)
        assert srv.connections == 2


async def test_a_server_url_with_a_path_prefixes_every_request(
    client: Callable[[str], Http],
) -> None:
    async with Server(lambda n, req: answer(b"{}")) as srv:
        http = client(srv.url + "/k8s/clusters/c-1")
        await http.request("GET", "/api/v1/pods", None, TIMEOUT)
        assert srv.requests[0].startswith(b"GET /k8s/clusters/c-1/api/v1/pods HTTP/1.1\r\n")
