"""Credentials from one place: the in-cluster service account, else a
kubeconfig; the same serve the watches, the writes and kopf's login.

The kubernetes package is imported here and nowhere else, and only for what it
does well: reading a kubeconfig (contexts, client certificates, exec and auth
providers) or the service account, and renewing a token that expires (its
refresh hook). Every request is then made by `troupe.kube.transport` with
aiohttp from a `Connection`: the server, TLS, proxy and, per request, the
Authorization header.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import should_bypass_proxies


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


def load_connection(kubeconfig: str | None = None) -> Connection:
    """The `Connection` of `load_configuration(kubeconfig)`."""
    return Connection(load_configuration(kubeconfig))


def credentials_of(cfg: k8s.Configuration) -> Credentials:
    """The credentials a Configuration holds now (a rotating service-account
    token is re-read through the client's refresh hook)."""
    header = _authorization(cfg)
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


def _authorization(cfg: k8s.Configuration) -> str | None:
    """The Authorization header's value now: the client's refresh hook (a
    service-account token re-read from its file, an exec or auth provider's
    new token) runs first, as before each of the client's own requests."""
    header = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
    return header or None


class Connection:
    """How to reach the API server, as a kubernetes client `Configuration` says:
    host, TLS (CA file or data, client certificate, verify_ssl,
    assert_hostname, tls_server_name), an HTTP(S) proxy (unless no_proxy
    bypasses it) and, asked per request, the Authorization header."""

    def __init__(self, cfg: k8s.Configuration) -> None:
        self._cfg = cfg
        self.host: str = str(cfg.host).rstrip("/")
        self.proxy: str | None = None
        self.proxy_headers: dict[str, str] | None = None
        if cfg.proxy and not should_bypass_proxies(self.host, cfg.no_proxy or ""):
            if not str(cfg.proxy).startswith(("http://", "https://")):
                raise ValueError(f"proxy {cfg.proxy}: only HTTP(S) proxies are supported")
            self.proxy = str(cfg.proxy)
            self.proxy_headers = dict(cfg.proxy_headers) if cfg.proxy_headers else None
        https = self.host.startswith("https")
        self.ssl: ssl.SSLContext | bool = _ssl_context(cfg) if https else True
        self.server_hostname: str | None = cfg.tls_server_name or None

    @classmethod
    def to(cls, host: str, *, token: str | None = None, verify: bool = True) -> Connection:
        """A connection to `host` (tests, tools): a bearer token if given, no proxy."""
        cfg = k8s.Configuration()
        cfg.host = host
        cfg.verify_ssl = verify
        if token:
            cfg.api_key = {"BearerToken": token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return cls(cfg)

    def authorization(self) -> str | None:
        """The Authorization header for the next request (None: anonymous)."""
        return _authorization(self._cfg)

    def credentials(self) -> Credentials:
        """The same credentials for kopf's login."""
        return credentials_of(self._cfg)


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


def default_identity() -> str:
    """This replica's name: the pod's (POD_NAME, set by the Deployment), else
    hostname_pid, as kube-scheduler's hostname_uuid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"
