"""Explanations in a live scheduler (`troupe.explain.enabled`), through
`troupe run --kubeconfig`: /debug/explain/<ns>/<name> on the metrics port, and
kube-scheduler-simulator's annotations on the pods that ask for them
(`troupe.dev/explain: "true"`) and on no other. (That the annotations, coming
back through the watch, do not make a pending pod try again is tested without
a clock in tests/unit/test_explain.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, until
from tests.builders import make_node, make_pod

SIM = "kube-scheduler-simulator.sigs.k8s.io/"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer()
    with srv.start_in_thread():
        yield srv


def created(obj: dict[str, object]) -> dict[str, object]:
    md = obj["metadata"]
    assert isinstance(md, dict)
    for k in ("uid", "resourceVersion"):
        md.pop(k, None)
    return obj


def test_decisions_are_served_and_asked_for_explanations_written(
    api: ApiServer, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.create(make_node("big").capacity(cpu=8, memory="16Gi", pods=10).obj())
    api.create(make_node("small").capacity(cpu=2, memory="4Gi", pods=10).obj())
    config = {"troupe": {"explain": {"enabled": True}}}
    with Troupe(tmp_path, kubeconfig=kubeconfig, config=config) as t:
        t.wait_ready()
        api.create(
            created(make_pod("asks").req(cpu="1").annotate("troupe.dev/explain", "true").obj())
        )
        api.create(created(make_pod("plain").req(cpu="1").obj()))
        api.create(
            created(make_pod("huge").req(cpu="64").annotate("troupe.dev/explain", "true").obj())
        )

        def decision(name: str) -> dict[str, object] | None:
            status, body = t.http(f"/debug/explain/default/{name}")
            return json.loads(body) if status == 200 else None

        asks = until(lambda: decision("asks"), what="the explanation of asks")
        assert asks["chosen"] in ("big", "small")
        assert {s["node"] for s in asks["scores"]} == {"big", "small"}  # type: ignore[union-attr]
        plain = until(lambda: decision("plain"), what="the decision on plain")
        assert "scores" not in plain and str(plain["outcome"]).startswith("placed on ")
        huge = until(lambda: decision("huge"), what="the decision on huge")
        assert str(huge["outcome"]).startswith("0/2 nodes are available: 2 Insufficient cpu.")
        assert t.http("/debug/explain/default/nobody")[0] == 404

        def notes(name: str) -> dict[str, str]:
            pod = api.get("pods", "default", name) or {}
            md = pod.get("metadata") or {}
            return {k: v for k, v in (md.get("annotations") or {}).items() if k.startswith(SIM)}

        got = until(lambda: notes("asks") or None, what="the annotations of asks")
        assert got[f"{SIM}selected-node"] == asks["chosen"]
        filters = json.loads(got[f"{SIM}filter-result"])
        assert filters["big"]["NodeResourcesFit"] == "passed"
        pending = until(lambda: notes("huge") or None, what="the annotations of huge")
        assert json.loads(pending[f"{SIM}filter-result"])["small"]["NodeResourcesFit"] == (
            "Insufficient cpu"
        )
        assert notes("plain") == {}
