"""The metrics/health port of `troupe run`, through the real command with a
kubeconfig against the embedded API server: a port that cannot be served ends
the replica at once with one line naming the address, leader or standby (and
`make demo` says so instead of counting pods)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, until


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
