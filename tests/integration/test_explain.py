"""Explanations in a live scheduler (`troupe.explain.enabled`), through
`troupe run --kubeconfig`: /debug/explain/<ns>/<name> on the metrics port, and
kube-scheduler-simulator's annotations on the pods that ask for them
(`troupe.dev/explain: "true"`) and on no other. (That the annotations, coming
back through the watch, do not make a pending pod try again is tested without
a clock in tests/unit/test_explain.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from apiserver import ApiError, ApiServer
from apiserver.replica import Troupe, metrics_reader, until
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
    reader = metrics_reader(api)  # /debug/explain answers who may read it
    with Troupe(tmp_path, kubeconfig=kubeconfig, config=config, token=reader) as t:
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


LIMIT = 256 * 1024


def test_the_api_server_refuses_annotations_over_256_kib_as_kube_does(api: ApiServer) -> None:
    """kube-apiserver's total annotation size (keys and values), on create and on
    update, with ValidateAnnotations' message."""
    api.create(created(make_pod("p").obj()))
    key = "example.com/big"
    conn = HTTPConnection(api.url.removeprefix("http://"))

    def patch(value: str) -> tuple[int, dict[str, Any]]:
        body = json.dumps({"metadata": {"annotations": {key: value}}})
        headers = {"Content-Type": "application/merge-patch+json"}
        conn.request("PATCH", "/api/v1/namespaces/default/pods/p", body, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())

    assert patch("x" * (LIMIT - len(key)))[0] == 200  # at the limit
    status, got = patch("x" * (LIMIT - len(key) + 1))
    assert status == 422 and got["reason"] == "Invalid"
    assert got["message"] == (
        'Pod "p" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'
    )
    assert got["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 262144 bytes",
            "field": "metadata.annotations",
        }
    ]
    big = created(make_pod("q").annotate(key, "x" * LIMIT).obj())
    with pytest.raises(ApiError) as refused:
        api.create(big)
    assert refused.value.code == 422
    conn.close()


def long_name(i: int) -> str:
    """A node name as long as kube allows (253 characters)."""
    return f"{'a' * 63}.{'b' * 63}.{'c' * 63}.{'d' * 52}{i:05d}"


def test_explanations_at_many_nodes_are_accepted_and_a_gang_not_placed_says_pending(
    tmp_path: Path,
) -> None:
    """210 nodes with names of 253 characters: every node named in the annotations
    would be about 265 KB, which the API refuses; bounded, the write is accepted
    and says what it left out. A gang of three 3-cpu pods (minMember 3) that two
    nodes can hold: /debug/explain and the annotations say pending, with the
    gang's message, for the member the trial placed."""
    api = ApiServer(podgroups=True)
    with api.start_in_thread():
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        nodes = 210
        for i in range(nodes):
            cpu = 4 if i < 2 else 1
            api.create(make_node(long_name(i)).capacity(cpu=cpu, memory="8Gi", pods=10).obj())
        config = {"troupe": {"explain": {"enabled": True}}}
        reader = metrics_reader(api)
        with Troupe(tmp_path, kubeconfig=kubeconfig, config=config, token=reader) as t:
            t.wait_ready()
            api.create(
                created(
                    make_pod("asks").req(cpu="500m").annotate("troupe.dev/explain", "true").obj()
                )
            )
            group = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "default"},
                "spec": {"minMember": 3},
            }
            api.create(group)
            for i in range(3):
                m = make_pod(f"m{i}").req(cpu="3").group("g")
                if i == 0:
                    m = m.annotate("troupe.dev/explain", "true")
                api.create(created(m.obj()))

            def notes(name: str) -> dict[str, str] | None:
                pod = api.get("pods", "default", name) or {}
                got = (pod.get("metadata") or {}).get("annotations") or {}
                return got if f"{SIM}filter-result" in got else None

            asks = until(lambda: notes("asks"), timeout=60, what="the annotations of asks")
            assert sum(len(k.encode()) + len(v.encode()) for k, v in asks.items()) <= LIMIT
            omitted = json.loads(asks["troupe.dev/explain-omitted"])
            shown = json.loads(asks[f"{SIM}filter-result"])
            assert omitted["nodes"] == nodes and len(shown) + omitted["omitted"] == nodes
            assert asks[f"{SIM}selected-node"] in shown

            def waits(name: str) -> dict[str, Any] | None:
                status, body = t.http(f"/debug/explain/default/{name}")
                got = json.loads(body) if status == 200 else None
                return got if got and str(got["outcome"]).startswith("PodGroup") else None

            gang_waits = 'PodGroup "default/g": 2 of minMember 3 pods fit; '
            for name in ("m0", "m1"):
                got = until(lambda n=name: waits(n), timeout=60, what=f"the decision on {name}")
                assert str(got["outcome"]).startswith(gang_waits), got
                assert got["chosen"] is None
            m0 = until(lambda: notes("m0"), timeout=60, what="the annotations of m0")
            assert m0[f"{SIM}selected-node"] == ""
            assert "could not write the explanation" not in t.log()
