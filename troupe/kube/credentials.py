"""Credentials from one place: the in-cluster service account, else a
kubeconfig; the same serve the watches and the writes."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes import config as k8s_config


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
