"""The secure port (troupe.operator.serving): the health endpoints as
k8s.io/apiserver's healthz answers them, TLS, authentication by TokenReview,
authorization by SubjectAccessReview, as kube-scheduler's delegating authn/authz
answer; the API server is a fake Reviewer and the caches' clock a fake one."""

from __future__ import annotations

import socket
import ssl
import stat
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from troupe.core.metrics import Metrics
from troupe.operator.serving import (
    PAIR_NAME,
    DelegatingAuth,
    ServeError,
    ServingConfigError,
    run_checks,
    serve,
    server_tls,
)


@dataclass
class FakeApi:
    """Tokens -> users, and the (user, path, verb) allowed; records what was asked."""

    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    allowed: set[tuple[str, str, str]] = field(default_factory=set)
    down: bool = False
    token_reviews: list[str] = field(default_factory=list)
    access_reviews: list[Mapping[str, Any]] = field(default_factory=list)

    async def review_token(self, token: str) -> Mapping[str, Any]:
        self.token_reviews.append(token)
        if self.down:
            raise ConnectionError("the API server is down")
        user = self.users.get(token)
        if user is None:
            return {"authenticated": False, "error": "invalid bearer token"}
        return {"authenticated": True, "user": user}

    async def review_access(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        self.access_reviews.append(spec)
        if self.down:
            raise ConnectionError("the API server is down")
        attrs = spec["nonResourceAttributes"]
        return {"allowed": (spec["user"], attrs["path"], attrs["verb"]) in self.allowed}


@dataclass
class Port:
    api: FakeApi
    base: str
    http: aiohttp.ClientSession
    now: list[float]

    async def get(self, path: str, token: str | None = None) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.get(self.base + path, headers=headers) as r:
            return r.status, await r.text()

    async def get_json(self, path: str, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.get(self.base + path, headers=headers) as r:
            return r.status, await r.json(content_type=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ALICE = {"username": "alice", "uid": "u-1", "groups": ["readers"]}
BOB = {"username": "bob", "groups": []}
ROOT = {"username": "root", "groups": ["system:masters"]}


# Health endpoints ------------------------------------------------------------------


def test_health_output_is_kube_apiservers() -> None:
    checks = {"scheduling-loop": lambda: None, "leader-election": lambda: "lease expired"}
    r = run_checks("livez", {"scheduling-loop": lambda: None})
    assert (r.status, r.body) == (200, "ok")
    r = run_checks("livez", {"scheduling-loop": lambda: None}, verbose=True)
    assert r.body == "[+]ping ok\n[+]scheduling-loop ok\nlivez check passed\n"
    r = run_checks("readyz", checks)
    assert r.status == 500
    assert r.body == (
        "[+]ping ok\n[+]scheduling-loop ok\n"
        "[-]leader-election failed: reason withheld\nreadyz check failed\n"
    )
    assert r.failed == {"leader-election": "lease expired"}
    r = run_checks("readyz", checks, exclude=frozenset({"leader-election", "nope"}))
    assert r.status == 200
    r = run_checks("readyz", checks, verbose=True, exclude=frozenset({"leader-election", "nope"}))
    assert r.body == (
        "[+]ping ok\n[+]scheduling-loop ok\n[+]leader-election excluded: ok\n"
        'warn: some health checks cannot be excluded: no matches for "nope"\n'
        "readyz check passed\n"
    )


def test_a_check_that_raises_has_failed() -> None:
    def broken() -> str | None:
        raise RuntimeError("boom")

    r = run_checks("healthz", {"broken": broken})
    assert r.status == 500
    assert r.failed == {"broken": "RuntimeError: boom"}
    assert "[-]broken failed: reason withheld\n" in r.body


class Masters:
    """TokenReviews: the token "admin" is a member of system:masters (who is
    never asked about; tests/unit/test_serving.py tests the rest)."""

    async def review_token(self, token: str) -> Mapping[str, Any]:
        user = {"username": "admin", "groups": ["system:masters"]}
        return {"authenticated": True, "user": user} if token == "admin" else {}

    async def review_access(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        raise AssertionError("system:masters is always allowed")


async def test_endpoints() -> None:
    metrics = Metrics()
    metrics.schedule_attempts.labels("scheduled", "p").inc()
    ready = False
    loop_alive = True
    metrics.health.livez["scheduling-loop"] = lambda: None if loop_alive else "task ended"
    port = free_port()
    auth = DelegatingAuth(Masters())
    stop = await serve(metrics, "127.0.0.1", port, lambda: ready, tls=server_tls(), auth=auth)
    base = f"https://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(
            headers={"Authorization": "Bearer admin"}, connector=aiohttp.TCPConnector(ssl=False)
        ) as http:

            async def get(path: str) -> tuple[int, str]:
                async with http.get(base + path) as r:
                    return r.status, await r.text()

            status, body = await get("/metrics")
            assert status == 200
            assert 'scheduler_schedule_attempts_total{profile="p",result="scheduled"} 1.0' in body
            assert await get("/livez") == (200, "ok")
            assert await get("/healthz?verbose") == (
                200,
                "[+]ping ok\n[+]scheduling-loop ok\nhealthz check passed\n",
            )
            assert await get("/readyz") == (
                500,
                "[+]ping ok\n[-]informer-sync failed: reason withheld\nreadyz check failed\n",
            )
            assert await get("/readyz/informer-sync") == (
                500,
                "internal server error: initial lists not done\n",
            )
            assert await get("/readyz?exclude=informer-sync") == (200, "ok")
            ready = True
            assert await get("/readyz") == (200, "ok")
            assert await get("/readyz/informer-sync") == (200, "ok")
            assert await get("/readyz/ping") == (200, "ok")
            assert (await get("/readyz/nope"))[0] == 404
            # A check registered after serve() is picked up.
            metrics.health.readyz["shutdown"] = lambda: "stopping"
            assert (await get("/readyz"))[0] == 500
            loop_alive = False
            assert await get("/livez?verbose") == (
                500,
                "[+]ping ok\n[-]scheduling-loop failed: reason withheld\nlivez check failed\n",
            )
            async with http.get(base + "/livez") as r:
                assert r.headers["Content-Type"].startswith("text/plain")
                assert r.headers["X-Content-Type-Options"] == "nosniff"
    finally:
        await stop()


# Authentication and authorization --------------------------------------------------


@pytest.fixture
async def port() -> AsyncIterator[Port]:
    api = FakeApi(users={"alice-token": ALICE, "bob-token": BOB, "root-token": ROOT})
    api.allowed = {("alice", "/metrics", "get"), ("alice", "/debug/explain/default/p", "get")}
    now = [0.0]
    metrics = Metrics()
    n = free_port()
    decisions = {"default/p": {"outcome": "placed on n1"}}
    stop = await serve(
        metrics,
        "127.0.0.1",
        n,
        lambda: True,
        decisions.get,
        tls=server_tls(),
        auth=DelegatingAuth(api, now=lambda: now[0]),
    )
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as http:
            yield Port(api, f"https://127.0.0.1:{n}", http, now)
    finally:
        await stop()


@pytest.mark.parametrize("path", ["/metrics", "/debug/explain/default/p"])
async def test_anonymous_is_system_anonymous_and_refused(port: Port, path: str) -> None:
    status, body = await port.get_json(path)
    assert status == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'forbidden: User "system:anonymous" cannot get path "{path}"',
        "reason": "Forbidden",
        "details": {},
        "code": 403,
    }
    assert port.api.token_reviews == []
    assert port.api.access_reviews == [
        {
            "user": "system:anonymous",
            "groups": ["system:unauthenticated"],
            "nonResourceAttributes": {"path": path, "verb": "get"},
        }
    ]


@pytest.mark.parametrize("path", ["/metrics", "/debug/explain/default/p", "/healthz"])
async def test_a_token_the_api_server_does_not_know_is_401(port: Port, path: str) -> None:
    status, body = await port.get_json(path, "stolen")
    assert status == 401
    assert body["reason"] == "Unauthorized" and body["code"] == 401
    assert body["message"] == "Unauthorized"
    assert port.api.access_reviews == []


async def test_a_user_not_authorized_is_403(port: Port) -> None:
    status, body = await port.get_json("/metrics", "bob-token")
    assert status == 403
    assert body["message"] == 'forbidden: User "bob" cannot get path "/metrics"'
    assert port.api.access_reviews[-1] == {
        "user": "bob",
        "groups": ["system:authenticated"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_an_authorized_user_is_answered(port: Port) -> None:
    status, text = await port.get("/metrics", "alice-token")
    assert status == 200 and "scheduler_schedule_attempts_total" in text
    assert await port.get_json("/debug/explain/default/p", "alice-token") == (
        200,
        {"outcome": "placed on n1"},
    )
    assert port.api.access_reviews[0] == {
        "user": "alice",
        "uid": "u-1",
        "groups": ["readers", "system:authenticated"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    # alice may read one explanation, not every path under /debug
    assert (await port.get("/debug/explain/default/q", "alice-token"))[0] == 403


async def test_system_masters_are_not_asked_about(port: Port) -> None:
    assert (await port.get("/metrics", "root-token"))[0] == 200
    assert (await port.get("/readyz/informer-sync", "root-token")) == (200, "ok")
    assert port.api.access_reviews == []


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
async def test_health_endpoints_answer_anyone(port: Port, path: str) -> None:
    assert await port.get(path) == (200, "ok")
    assert await port.get(path, "bob-token") == (200, "ok")
    assert port.api.access_reviews == []


async def test_only_the_health_paths_themselves_are_always_allowed(port: Port) -> None:
    # kube's --authorization-always-allow-paths are exact: a single check is authorized
    assert (await port.get("/readyz/informer-sync"))[0] == 403
    assert (await port.get("/livez/ping", "bob-token"))[0] == 403


async def test_answers_are_cached_for_ten_seconds(port: Port) -> None:
    for _ in range(3):
        assert (await port.get("/metrics", "alice-token"))[0] == 200
        assert (await port.get("/metrics", "stolen"))[0] == 401
        assert (await port.get("/metrics", "bob-token"))[0] == 403
    assert sorted(port.api.token_reviews) == ["alice-token", "bob-token", "stolen"]
    assert len(port.api.access_reviews) == 2
    port.now[0] += 10.5
    port.api.allowed.add(("bob", "/metrics", "get"))
    assert (await port.get("/metrics", "bob-token"))[0] == 200
    assert len(port.api.token_reviews) == 4 and len(port.api.access_reviews) == 3


async def test_a_failed_review_refuses_and_is_not_cached(port: Port) -> None:
    port.api.down = True
    assert (await port.get("/metrics", "alice-token"))[0] == 401
    status, text = await port.get("/metrics")  # anonymous: no TokenReview, the SAR fails
    assert status == 500
    assert text.startswith("Internal Server Error: '/metrics': SubjectAccessReview: ")
    port.api.down = False
    assert (await port.get("/metrics", "alice-token"))[0] == 200


async def test_there_is_no_plain_http(port: Port) -> None:
    plain = port.base.replace("https://", "http://")
    with pytest.raises(aiohttp.ClientError):
        async with port.http.get(plain + "/healthz") as r:
            await r.read()


# TLS -------------------------------------------------------------------------------


async def serve_with(tls: ssl.SSLContext) -> tuple[int, Any]:
    n = free_port()
    stop = await serve(Metrics(), "127.0.0.1", n, tls=tls, auth=DelegatingAuth(FakeApi()))
    return n, stop


async def healthz(n: int, trust: ssl.SSLContext) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as http,
        http.get(f"https://127.0.0.1:{n}/healthz") as r,
    ):
        return r.status, await r.text()


async def test_cert_dir_keeps_a_self_signed_pair_clients_can_trust(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    n, stop = await serve_with(server_tls(cert_dir=str(certs)))
    try:
        crt, key = certs / f"{PAIR_NAME}.crt", certs / f"{PAIR_NAME}.key"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert crt.read_text().count("BEGIN CERTIFICATE") == 2  # the certificate, then its CA
        assert await healthz(n, ssl.create_default_context(cafile=str(crt))) == (200, "ok")
    finally:
        await stop()
    # Kept: the next start serves the same pair.
    before = crt.read_bytes()
    server_tls(cert_dir=str(certs))
    assert crt.read_bytes() == before


async def test_the_given_certificate_is_served(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "tls.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    tls = server_tls(str(tmp_path / "tls.pem"), str(tmp_path / "tls.key"), str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()  # --cert-dir is not used then
    n, stop = await serve_with(tls)
    try:
        trust = ssl.create_default_context()
        ca.configure_trust(trust)
        assert await healthz(n, trust) == (200, "ok")
    finally:
        await stop()


def test_certificate_flags_that_cannot_be_served_are_named(tmp_path: Path) -> None:
    with pytest.raises(ServingConfigError, match="must be given together"):
        server_tls(str(tmp_path / "tls.crt"), None)
    missing = tmp_path / "tls.crt"
    with pytest.raises(ServingConfigError) as e:
        server_tls(str(missing), str(tmp_path / "tls.key"))
    assert str(e.value) == f"--tls-cert-file {missing}: No such file or directory"
    missing.write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(ServingConfigError, match=f"--tls-cert-file {missing}: "):
        server_tls(str(missing), str(tmp_path / "tls.key"))


async def test_a_port_taken_is_a_serve_error_in_kube_schedulers_words() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        n = taken.getsockname()[1]
        with pytest.raises(ServeError) as e:
            await serve(Metrics(), "127.0.0.1", n, tls=server_tls(), auth=DelegatingAuth(FakeApi()))
    assert str(e.value) == f"cannot serve on 127.0.0.1:{n}: address already in use"
