"""Secure serving of the metrics port, as kube-scheduler serves its own.

/metrics, /debug/explain and the health endpoints share one port, served with
TLS by `serve` (aiohttp's server). The metrics and the health checks are
`troupe.core.metrics.Metrics`'s; this module only answers for them.

The health endpoints behave as k8s.io/apiserver's healthz package does for
kube-scheduler: each runs its named checks (`ping` first, then those
registered in `Metrics.health`), answers `ok`, or with `?verbose` one line per
check (`[+]ping ok`, `[-]informer-sync failed: reason withheld`) and a last line
`livez check passed`; a failing endpoint answers 500 and always lists its
checks, ending `readyz check failed`. The reasons go to the log, not the
response. `/<endpoint>/<check>` runs a single check; `?exclude=<check>` skips
one. `/healthz` runs the liveness checks, as kube-scheduler's `/healthz`
carries its liveness-type checks.

Who may read what is asked of the API server, as k8s.io/apiserver's
delegating authentication and authorization do for kube-scheduler:

- TLS: the certificate and key of `--tls-cert-file`/`--tls-private-key-file`;
  else the pair `troupe-scheduler.crt`/`.key` in `--cert-dir` (made there when
  missing); else a self-signed pair made at start-up and kept in memory. A
  made pair is a CA and a serving certificate it signed for `localhost` and
  127.0.0.1, the certificate file holding both, as kube's
  `MaybeDefaultWithSelfSignedCerts`.
- Authentication: a request with `Authorization: Bearer <token>` is the user
  a TokenReview of the token answers; a token the API server does not
  authenticate, or a review that fails, is 401. A request without a bearer
  token is `system:anonymous` (group `system:unauthenticated`), as kube's
  delegating authenticator (anonymous allowed) makes it; whether it may read
  is then authorization's answer. Client certificates are not read (kube's
  client CA and request-header authentication are not implemented).
- Authorization: `/healthz`, `/livez` and `/readyz` (exactly those paths,
  kube's `--authorization-always-allow-paths` default) and members of
  `system:masters` (its `--authorization-always-allow-groups`) are allowed
  without asking; anything else is a SubjectAccessReview of the user for the
  non-resource path and the lower-case method as verb (`get`). Denied is 403
  with kube's text (`forbidden: User "system:anonymous" cannot get path
  "/metrics"`); a review that fails is 500.
- Both answers are cached for 10 s (kube's token cache and its authorized and
  unauthorized TTLs), at most 1024 of each; errors are not cached. Tokens are
  kept only as their SHA-256.

The reviews are made through a `Reviewer` (the scheduler's `KubeClient`, with
its own credentials: `troupe.kube` is the only package that talks to the API
server); the unit tests give a fake one. There is no plain-HTTP mode.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Protocol, TypeVar

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from troupe.core.metrics import HealthCheck, HealthChecks, Metrics

log = logging.getLogger(__name__)

# <cert-dir>/troupe-scheduler.crt and .key, as kube-scheduler's kube-scheduler.crt/.key.
PAIR_NAME: Final = "troupe-scheduler"
ALWAYS_ALLOW_PATHS: Final = ("/healthz", "/readyz", "/livez")
ALWAYS_ALLOW_GROUPS: Final = ("system:masters",)
CACHE_TTL: Final = 10.0
CACHE_SIZE: Final = 1024
AUTHENTICATED: Final = "system:authenticated"
UNAUTHENTICATED: Final = "system:unauthenticated"


class ServingConfigError(Exception):
    """The serving certificate cannot be read or made (a flag's value, named)."""


class ReviewError(Exception):
    """A TokenReview or SubjectAccessReview could not be made."""


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who a request is, as a TokenReview answers it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS: Final = UserInfo("system:anonymous", groups=(UNAUTHENTICATED,))


class Reviewer(Protocol):
    """Asks the API server (authentication.k8s.io/v1, authorization.k8s.io/v1);
    raises on a failed request."""

    async def review_token(self, token: str) -> Mapping[str, Any]:
        """The status of a TokenReview of `token`."""
        ...

    async def review_access(self, spec: Mapping[str, Any]) -> Mapping[str, Any]:
        """The status of a SubjectAccessReview with this spec."""
        ...


@dataclass(frozen=True, slots=True)
class Refusal:
    """What to answer instead of serving: the HTTP status and the body."""

    status: int
    body: Mapping[str, Any] | str


K = TypeVar("K")
V = TypeVar("V")


class _TtlCache(Generic[K, V]):
    """At most `size` answers, each for `ttl` seconds of `now`, least recently used out first."""

    def __init__(self, ttl: float, size: int, now: Callable[[], float]) -> None:
        self.ttl, self.size, self.now = ttl, size, now
        self._items: collections.OrderedDict[K, tuple[float, V]] = collections.OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        got = self._items.get(key)
        if got is None:
            return False, None
        if got[0] <= self.now():
            del self._items[key]
            return False, None
        self._items.move_to_end(key)
        return True, got[1]

    def put(self, key: K, value: V) -> None:
        self._items[key] = (self.now() + self.ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status, as kube's responsewriters write a refusal."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code,
    }


UNAUTHORIZED: Final = Refusal(401, _status(401, "Unauthorized", "Unauthorized"))


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, as kube's
    bearertoken authenticator reads it; None when there is none (anonymous)."""
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class DelegatingAuth:
    """Authentication by TokenReview and authorization by SubjectAccessReview,
    each answer cached (see the module's docstring)."""

    def __init__(
        self,
        reviewer: Reviewer,
        *,
        now: Callable[[], float] = time.monotonic,
        ttl: float = CACHE_TTL,
        always_allow_paths: tuple[str, ...] = ALWAYS_ALLOW_PATHS,
        always_allow_groups: tuple[str, ...] = ALWAYS_ALLOW_GROUPS,
    ) -> None:
        self.reviewer = reviewer
        self.always_allow_paths = always_allow_paths
        self.always_allow_groups = frozenset(always_allow_groups)
        self._tokens: _TtlCache[bytes, UserInfo | None] = _TtlCache(ttl, CACHE_SIZE, now)
        self._access: _TtlCache[tuple[object, ...], tuple[bool, str]] = _TtlCache(
            ttl, CACHE_SIZE, now
        )

    async def check(self, method: str, path: str, authorization: str) -> Refusal | None:
        """None when the request may be served, else what to answer."""
        token = bearer_token(authorization)
        if token is None:
            user = ANONYMOUS
        else:
            try:
                found = await self.authenticate(token)
            except ReviewError as e:
                log.error("Unable to authenticate the request: %s", e)
                return UNAUTHORIZED
            if found is None:
                return UNAUTHORIZED
            user = found
        verb = method.lower()
        try:
            allowed, reason = await self.authorize(user, path, verb)
        except ReviewError as e:
            log.error("Unable to authorize %s %s for %s: %s", verb, path, user.name, e)
            return Refusal(500, f"Internal Server Error: {path!r}: {e}")
        if allowed:
            return None
        message = f'forbidden: User "{user.name}" cannot {verb} path "{path}"'
        return Refusal(403, _status(403, "Forbidden", message + (f": {reason}" if reason else "")))

    async def authenticate(self, token: str) -> UserInfo | None:
        """The user `token` is (None: not authenticated); raises ReviewError."""
        key = hashlib.sha256(token.encode()).digest()
        hit, user = self._tokens.get(key)
        if hit:
            return user
        try:
            status = await self.reviewer.review_token(token)
        except Exception as e:
            raise ReviewError(f"TokenReview: {e}") from None
        user = _user_of(status)
        if user is None and status.get("error"):
            log.info("token not authenticated: %s", status.get("error"))
        self._tokens.put(key, user)
        return user

    async def authorize(self, user: UserInfo, path: str, verb: str) -> tuple[bool, str]:
        """(allowed, the reason given); raises ReviewError."""
        if path in self.always_allow_paths or any(
            p.endswith("*") and path.startswith(p[:-1]) for p in self.always_allow_paths
        ):
            return True, ""
        if self.always_allow_groups.intersection(user.groups):
            return True, ""
        key = (user, path, verb)
        hit, answer = self._access.get(key)
        if hit and answer is not None:
            return answer
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        try:
            status = await self.reviewer.review_access(spec)
        except Exception as e:
            raise ReviewError(f"SubjectAccessReview: {e}") from None
        if status.get("evaluationError") and not status.get("allowed"):
            log.info("SubjectAccessReview evaluation error: %s", status.get("evaluationError"))
        answer = (bool(status.get("allowed")) and not status.get("denied"), "")
        if not answer[0]:
            answer = (False, str(status.get("reason") or ""))
        self._access.put(key, answer)
        return answer


def _user_of(status: Mapping[str, Any]) -> UserInfo | None:
    """The user of an authenticated TokenReview's status, with the group every
    authenticated user has (kube's AuthenticatedGroupAdder)."""
    if not status.get("authenticated"):
        return None
    u = status.get("user") or {}
    name = str(u.get("username") or "")
    if not name:
        return None
    groups = tuple(str(g) for g in u.get("groups") or ())
    if AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
        groups += (AUTHENTICATED,)
    extra = tuple(
        sorted((str(k), tuple(str(x) for x in v or ())) for k, v in (u.get("extra") or {}).items())
    )
    return UserInfo(name, str(u.get("uid") or ""), groups, extra)


# The port --------------------------------------------------------------------------


class ServeError(Exception):
    """The port cannot be served (taken, or an address this machine does not have)."""


def address(host: str, port: int) -> str:
    """`host:port` as Go prints it (`[::1]:10259` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """One run of an endpoint's checks: the HTTP status and the body kube prints."""

    status: int
    body: str
    failed: dict[str, str]


def _ping() -> None:
    return None


def _run(check: HealthCheck) -> str | None:
    try:
        return check()
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def run_checks(
    endpoint: str,
    checks: dict[str, HealthCheck],
    verbose: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> HealthReport:
    """Run `checks` after `ping` and format the answer as k8s.io/apiserver's
    healthz handleRootHealth does (a check that raises has failed)."""
    lines: list[str] = []
    failed: dict[str, str] = {}
    left = set(exclude)
    for name, check in {"ping": _ping, **checks}.items():
        if name in left:
            left.discard(name)
            lines.append(f"[+]{name} excluded: ok\n")
            continue
        reason = _run(check)
        if reason is None:
            lines.append(f"[+]{name} ok\n")
        else:
            lines.append(f"[-]{name} failed: reason withheld\n")
            failed[name] = reason
    if left:
        names = ",".join(f'"{n}"' for n in sorted(left))
        lines.append(f"warn: some health checks cannot be excluded: no matches for {names}\n")
    if failed:
        return HealthReport(500, "".join(lines) + f"{endpoint} check failed\n", failed)
    if not verbose:
        return HealthReport(200, "ok", failed)
    return HealthReport(200, "".join(lines) + f"{endpoint} check passed\n", failed)


def checks_of(health: HealthChecks, endpoint: str) -> dict[str, HealthCheck]:
    """The checks `endpoint` ("livez", "healthz" or "readyz") runs after `ping`."""
    if endpoint in ("livez", "healthz"):
        return health.livez
    if endpoint == "readyz":
        return health.readyz
    raise ValueError(f"unknown health endpoint {endpoint!r}")


_PLAIN: Final = {"X-Content-Type-Options": "nosniff"}


async def serve(
    metrics: Metrics,
    host: str,
    port: int,
    ready: Callable[[], bool] | None = None,
    explain: Callable[[str], Mapping[str, Any] | None] | None = None,
    *,
    tls: ssl.SSLContext,
    auth: DelegatingAuth,
) -> Callable[[], Awaitable[None]]:
    """Serve `metrics` at /metrics, and /livez, /readyz and /healthz, over
    `tls`, each request authenticated and authorized by `auth`; returns a
    coroutine function that stops the server. `ready`, if given, becomes the
    readyz check `informer-sync` (failing until it returns True). `explain`,
    if given, answers /debug/explain/<namespace>/<name> (troupe.core.explain).
    Raises ServeError when the address cannot be served."""
    health = metrics.health

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        refusal = await auth.check(
            request.method, request.path, request.headers.get("Authorization", "")
        )
        if refusal is None:
            return await handler(request)
        if isinstance(refusal.body, str):
            return web.Response(status=refusal.status, text=refusal.body, headers=_PLAIN)
        return web.json_response(dict(refusal.body), status=refusal.status)

    if ready is not None:
        health.readyz.setdefault(
            "informer-sync", lambda: None if ready() else "initial lists not done"
        )

    async def exposition(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def root(endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(request: web.Request) -> web.Response:
            q = request.query
            report = run_checks(
                endpoint,
                checks_of(health, endpoint),
                verbose="verbose" in q,
                exclude=frozenset(q.getall("exclude", [])),
            )
            if report.failed:
                log.info(
                    "%s check failed: %s\n%s",
                    ",".join(report.failed),
                    endpoint,
                    "".join(f"[-]{n} failed: {r}\n" for n, r in report.failed.items()),
                )
            return web.Response(status=report.status, text=report.body, headers=_PLAIN)

        return answer

    def single(endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def one(request: web.Request) -> web.Response:
            name = request.match_info["check"]
            check = {"ping": _ping, **checks_of(health, endpoint)}.get(name)
            if check is None:
                return web.Response(status=404, text="404 page not found\n", headers=_PLAIN)
            reason = _run(check)
            if reason is not None:
                body = f"internal server error: {reason}\n"
                return web.Response(status=500, text=body, headers=_PLAIN)
            return web.Response(text="ok", headers=_PLAIN)

        return one

    async def explained(request: web.Request) -> web.Response:
        assert explain is not None
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        got = explain(key)
        if got is None:
            body = {"error": f"no decision recorded for pod {key}"}
            return web.json_response(body, status=404)
        return web.json_response(dict(got))

    app = web.Application(middlewares=[guard])
    app.router.add_get("/metrics", exposition)
    if explain is not None:
        app.router.add_get("/debug/explain/{namespace}/{name}", explained)
    for endpoint in ("livez", "readyz", "healthz"):
        app.router.add_get(f"/{endpoint}", root(endpoint))
        app.router.add_get(f"/{endpoint}/{{check}}", single(endpoint))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        why = os.strerror(e.errno).lower() if e.errno else str(e)
        raise ServeError(f"cannot serve on {address(host, port)}: {why}") from None
    log.info("serving securely on %s", address(host, port))  # kube-scheduler's line
    return runner.cleanup


# TLS -------------------------------------------------------------------------------


def server_tls(
    cert_file: str | None = None, key_file: str | None = None, cert_dir: str | None = None
) -> ssl.SSLContext:
    """The serving TLS context (see the module's docstring); raises
    ServingConfigError naming the flag and the file."""
    if bool(cert_file) != bool(key_file):
        raise ServingConfigError(
            "--tls-cert-file and --tls-private-key-file must be given together"
        )
    if cert_file and key_file:
        return _context(cert_file, key_file, "--tls-cert-file")
    if cert_dir:
        cert, key = Path(cert_dir) / f"{PAIR_NAME}.crt", Path(cert_dir) / f"{PAIR_NAME}.key"
        if not (cert.exists() and key.exists()):
            cert_pem, key_pem = self_signed()
            try:
                cert.parent.mkdir(parents=True, exist_ok=True)
                cert.write_bytes(cert_pem)
                _write_private(key, key_pem)
            except OSError as e:
                raise ServingConfigError(f"--cert-dir {cert_dir}: {e.strerror or e}") from None
            log.info("generated a self-signed serving certificate in %s", cert_dir)
        return _context(str(cert), str(key), "--cert-dir")
    cert_pem, key_pem = self_signed()
    # ssl reads a pair only from files: written to a private directory, read, removed.
    with tempfile.TemporaryDirectory(prefix="troupe-serving-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(cert_pem)
        _write_private(key, key_pem)
        ctx = _context(str(cert), str(key), "serving certificate")
    log.info("generated a self-signed serving certificate in memory")
    return ctx


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _context(cert: str, key: str, flag: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except OSError as e:
        raise ServingConfigError(f"{flag} {e.filename or cert}: {e.strerror or e}") from None
    except ssl.SSLError as e:
        raise ServingConfigError(f"{flag} {cert}: {e.reason or e}") from None
    return ctx


def self_signed(
    host: str = "localhost", ips: tuple[str, ...] = ("127.0.0.1",)
) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM): a CA `<host>-ca@<time>` and a serving
    certificate `<host>@<time>` it signed, for `host` and `ips`, valid for a
    year from an hour ago; the certificate PEM holds both, as kube's."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    stamp = int(now.timestamp())
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365)

    def usage(*, sign: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=sign,
            crl_sign=False,
            encipher_only=False,
            decipher_only=False,
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{stamp}")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage(sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(host)]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{stamp}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage(sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(pem) + ca.public_bytes(pem), key_pem
