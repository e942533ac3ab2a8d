"""`troupe run` as a user starts it, for the integration tests and the demo.

A `Troupe` is a child process running `python -m troupe run --kubeconfig F`
(the `troupe` command) against the embedded API server: the same way in as a
user's, with the same credentials for kopf's watches and the client's writes.
There is no other door. Leader-election timings and the like go into a
KubeSchedulerConfiguration file, as a user would write them. The in-cluster
variant runs the same command with KUBERNETES_SERVICE_HOST/PORT set and the
service-account token and CA read from a directory of the test's (the only
thing changed is where the kubernetes library looks for the mounted files,
which in a pod is a volume).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from apiserver.server import ApiServer

REPO = Path(__file__).resolve().parents[1]

# Short leader-election timings so that fail-over tests take seconds.
FAST_LEADER_ELECTION: Mapping[str, Any] = {
    "leaseDuration": "4s",
    "renewDeadline": "3s",
    "retryPeriod": "500ms",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(cond: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll `cond` until it returns something truthy (integration tests only)."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"{what} not met in {timeout:.0f}s")
        time.sleep(0.05)


class Troupe:
    """One replica of `troupe run` in a child process."""

    def __init__(
        self,
        workdir: Path,
        *,
        kubeconfig: Path | None,
        identity: str = "troupe-0",
        config: Mapping[str, Any] | None = None,
        args: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        prelude: str = "",
        port: int | None = None,
        token: str | None = None,
    ) -> None:
        self.workdir = workdir
        # The bearer token `http` sends (see `metrics_reader`); the health
        # endpoints answer without one.
        self.token = token
        self.identity = identity
        self.port = port or free_port()
        self.log_path = workdir / f"{identity}.log"
        cfg: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": dict(FAST_LEADER_ELECTION),
        }
        for k, v in (config or {}).items():
            if isinstance(v, Mapping) and isinstance(cfg.get(k), dict):
                cfg[k] = {**cfg[k], **v}
            else:
                cfg[k] = v
        self.config_path = workdir / f"{identity}-config.yaml"
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.cmd = [sys.executable]
        if prelude:
            self.cmd += [
                "-c",
                prelude + "\nfrom troupe.cli import main; raise SystemExit(main())",
            ]
        else:
            self.cmd += ["-m", "troupe"]
        self.cmd += [
            "run",
            f"--config={self.config_path}",
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            *((f"--kubeconfig={kubeconfig}",) if kubeconfig is not None else ()),
            *args,
        ]
        self.env = {**os.environ, "POD_NAME": identity, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Troupe:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.cmd, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        return self

    def __enter__(self) -> Troupe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def http(self, path: str, token: str | None = None) -> tuple[int, str]:
        """GET a path of the secure port, with `token` (None: the replica's; "":
        none) as a Prometheus with insecureSkipVerify would: (status, body);
        (0, "") if down."""
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}")
        token = self.token if token is None else token
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5, context=_UNVERIFIED) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def ready(self) -> bool:
        return self.http("/readyz")[0] == 200

    def wait_ready(self, timeout: float = 30.0) -> Troupe:
        until(lambda: self.ready() or not self.running, timeout, f"{self.identity} ready")
        assert self.running, f"{self.identity} exited:\n{self.log()}"
        return self

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        status, text = self.http("/metrics")
        if status != 200:
            return None
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                    return float(s.value)
        return None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as the kubelet stops a pod; the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(
                f"{self.identity} did not stop on SIGTERM:\n{self.log()}"
            ) from None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


# The replica's certificate is self-signed (made at its start).
_UNVERIFIED = ssl.create_default_context()
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE


def metrics_reader(api: ApiServer, name: str = "metrics-reader") -> str:
    """A token of a user the embedded API server lets read /metrics and
    /debug/* (a ClusterRole and its ClusterRoleBinding, as a cluster admin
    grants a Prometheus): what `Troupe(token=...)` sends."""
    token = api.add_user(name)
    role = f"troupe-{name}"
    api.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}],
        }
    )
    api.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}],
        }
    )
    return token


def in_cluster_prelude(secrets: Path) -> str:
    """Point the kubernetes library's in-cluster loader at `secrets` (token, ca.crt)."""
    return (
        "import kubernetes.config.incluster_config as _ic\n"
        f"_ic.SERVICE_TOKEN_FILENAME = {json.dumps(str(secrets / 'token'))}\n"
        f"_ic.SERVICE_CERT_FILENAME = {json.dumps(str(secrets / 'ca.crt'))}\n"
    )
