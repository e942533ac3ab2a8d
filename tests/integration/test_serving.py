"""The secure port of `troupe run`, through the real command with a
kubeconfig against the embedded API server: HTTPS, and who may read
/metrics and /debug/explain is the API server's answer (TokenReview,
SubjectAccessReview from its RBAC objects), the health endpoints anyone's; a
port that cannot be served ends the replica at once with one line naming the
address, leader or standby (and `make demo` says so instead of counting pods)."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, metrics_reader, until
from tests.builders import make_node, make_pod


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer()
    with srv.start_in_thread():
        yield srv


@pytest.fixture
def taken() -> Iterator[int]:
    """A port of 127.0.0.1 another process listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def holder(api: ApiServer) -> str | None:
    lease = api.get("leases", "kube-system", "troupe-scheduler") or {}
    return (lease.get("spec") or {}).get("holderIdentity")


def cannot_serve(t: Troupe, port: int) -> None:
    assert t.wait(60) != 0
    log = t.log()
    assert f"troupe: cannot serve on 127.0.0.1:{port}: address already in use\n" in log, log
    assert "Traceback" not in log, log


def test_a_taken_port_ends_a_replica_without_leader_election(
    api: ApiServer, tmp_path: Path, taken: int
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    with Troupe(tmp_path, kubeconfig=kubeconfig, port=taken, args=("--leader-elect=false",)) as t:
        cannot_serve(t, taken)


def test_a_taken_port_ends_a_standby_at_once(api: ApiServer, tmp_path: Path, taken: int) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    with Troupe(tmp_path, kubeconfig=kubeconfig, identity="leader") as leader:
        leader.wait_ready()
        until(lambda: holder(api) == "leader", 60, "the first replica leads")
        with Troupe(tmp_path, kubeconfig=kubeconfig, identity="standby", port=taken) as standby:
            cannot_serve(standby, taken)
        assert leader.running and holder(api) == "leader"


def test_a_taken_port_ends_a_replica_that_would_lead(
    api: ApiServer, tmp_path: Path, taken: int
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    with Troupe(tmp_path, kubeconfig=kubeconfig, identity="alone", port=taken) as t:
        cannot_serve(t, taken)
    # Whatever it had won of the Lease is given up.
    assert holder(api) in (None, "")


def test_make_demo_says_the_port_is_taken(taken: int, capsys: pytest.CaptureFixture[str]) -> None:
    from apiserver import demo

    assert demo.main(["--metrics-port", str(taken), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert (
        f"troupe run failed: troupe: cannot serve on 127.0.0.1:{taken}: address already in use"
        in out
    ), out
    assert "pods bound" not in out


def test_metrics_and_explanations_only_for_whom_the_api_server_authorizes(
    tmp_path: Path,
) -> None:
    # A server that checks the scheduler's own token (over TLS), as a cluster does.
    api = ApiServer(tls=True, token="scheduler-token")
    with api.start_in_thread():
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        reader = metrics_reader(api)
        nobody = api.add_user("nobody")
        api.create(make_node("n1").capacity(cpu=4, memory="8Gi", pods=10).obj())
        config = {"troupe": {"explain": {"enabled": True}}}
        certs = tmp_path / "certs"
        args = (f"--cert-dir={certs}",)
        with Troupe(tmp_path, kubeconfig=kubeconfig, config=config, args=args, token=reader) as t:
            t.wait_ready()
            for health in ("/healthz", "/livez", "/readyz"):
                assert t.http(health, "") == (200, "ok"), health
            p = make_pod("p").req(cpu="1").obj()
            for k in ("uid", "resourceVersion"):
                p["metadata"].pop(k, None)
            api.create(p)
            until(
                lambda: t.http("/debug/explain/default/p")[0] == 200,
                60,
                "the decision on p",
            )
            for path in ("/metrics", "/debug/explain/default/p"):
                status, body = t.http(path, "")
                assert status == 403, path
                assert json.loads(body)["message"] == (
                    f'forbidden: User "system:anonymous" cannot get path "{path}"'
                )
                assert t.http(path, "not-a-token")[0] == 401, path
                status, body = t.http(path, nobody)
                assert status == 403, path
                assert json.loads(body)["message"] == (
                    f'forbidden: User "nobody" cannot get path "{path}"'
                )
                assert t.http(path)[0] == 200, path
            assert "scheduler_schedule_attempts_total" in t.http("/metrics")[1]
            assert t.metric("leader_election_master_status", {"name": "troupe-scheduler"}) == 1
            # The reviews were asked by the scheduler, with its own credentials.
            assert api.requests[("create", "tokenreviews", "")] >= 2
            assert api.requests[("create", "subjectaccessreviews", "")] >= 3
            # The self-signed pair kept in --cert-dir is what the port serves.
            trust = ssl.create_default_context(cafile=str(certs / "troupe-scheduler.crt"))
            with urllib.request.urlopen(
                f"https://localhost:{t.port}/healthz", timeout=10, context=trust
            ) as r:
                assert r.read() == b"ok"
