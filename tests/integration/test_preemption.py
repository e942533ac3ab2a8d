"""Preemption through the deployed path: the real `troupe run` against the
embedded API server. A high-priority pod that does not fit evicts a
lower-priority running pod: the victim gets the DisruptionTarget condition, is
deleted (a DELETE with its uid as precondition) and carries the `Preempted`
event; the preemptor gets status.nominatedNodeName, then its Binding once the
victim is gone. A PodDisruptionBudget served by the API server (policy/v1,
watched) steers the choice to the victim it does not protect.

The victims carry a finalizer of the test's: like a kubelet's graceful
termination, it keeps a deleted pod (with its deletionTimestamp) until the test
lets it go, so that the state between eviction and removal can be looked at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, until
from tests.builders import make_node, make_pod
from tests.integration.test_operator import assert_rbac_covers, events_of, node_of

HOLD = "example.com/hold"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer(podgroups=True)
    with srv.start_in_thread():
        yield srv


def running(api: ApiServer, name: str, node: str, priority: int, app: str) -> dict[str, Any]:
    obj = make_pod(name).req(cpu="2").priority(priority).node(node).phase("Running").obj()
    obj["metadata"]["labels"]["app"] = app
    obj["metadata"]["finalizers"] = [HOLD]
    obj["metadata"].pop("uid", None)
    return api.create(obj)


def pdb(api: ApiServer, name: str, app: str) -> dict[str, Any]:
    """minAvailable 1 over one running pod: no disruption allowed (the status the
    disruption controller would write)."""
    return api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
            "status": {
                "disruptionsAllowed": 0,
                "currentHealthy": 1,
                "desiredHealthy": 1,
                "expectedPods": 1,
                "observedGeneration": 1,
            },
        }
    )


def release(api: ApiServer, name: str) -> None:
    """What the kubelet does once the container stopped: the pod goes."""
    current = api.get("pods", "default", name)
    assert current is not None
    current["metadata"]["finalizers"] = []
    del current["status"]  # apply writes a given status after the object
    api.apply(current)


def deleting(api: ApiServer, name: str) -> dict[str, Any] | None:
    p = api.get("pods", "default", name)
    return p if p is not None and p["metadata"].get("deletionTimestamp") else None


def test_a_high_priority_pod_preempts_the_victim_no_pdb_protects(
    api: ApiServer, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    for i in range(2):
        api.create(make_node(f"n{i}").capacity(cpu=2, memory="4Gi", pods=10).obj())
    # Without the budget n0 would be chosen: its victim has the lower priority.
    guarded = running(api, "guarded", "n0", 0, "guarded")
    free = running(api, "free", "n1", 1, "free")
    pdb(api, "guard", "guarded")
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        obj = make_pod("high").req(cpu="2").priority(100).obj()
        obj["metadata"].pop("uid", None)
        high = api.create(obj)

        victim = until(lambda: deleting(api, "free"), what="the victim deleted")
        conds = {c["type"]: c for c in victim["status"].get("conditions", [])}
        target = conds["DisruptionTarget"]
        assert target["status"] == "True"
        assert target["reason"] == "PreemptionByScheduler"
        assert target["message"] == (
            "troupe-scheduler: preempting to accommodate a higher priority pod"
        )
        deletes = [w for w in api.writes if w.verb == "delete" and w.plural == "pods"]
        assert [(w.name, w.status) for w in deletes] == [("free", 200)]
        ev = until(
            lambda: [e for e in events_of(api, "free") if e["reason"] == "Preempted"],
            what="the Preempted event",
        )
        assert ev[0]["type"] == "Normal"
        assert ev[0]["message"] == f"Preempted by pod {high['metadata']['uid']} on node n1"
        assert ev[0]["involvedObject"]["uid"] == free["metadata"]["uid"]

        nominated = until(
            lambda: (
                (api.get("pods", "default", "high") or {})
                .get("status", {})
                .get("nominatedNodeName")
            ),
            what="the preemptor's nominatedNodeName",
        )
        assert nominated == "n1"
        assert node_of(api, "high") is None  # the victim is still terminating
        assert deleting(api, "guarded") is None  # the budget protects it

        release(api, "free")
        until(lambda: node_of(api, "high"), what="the preemptor bound")
        assert node_of(api, "high") == "n1"
        assert api.get("pods", "default", "free") is None
        assert (api.get("pods", "default", "guarded") or {})["metadata"]["uid"] == guarded[
            "metadata"
        ]["uid"]
        assert t.stop() == 0
    assert "Traceback" not in t.log()
    assert ("list", "poddisruptionbudgets", "") in api.requests
    assert_rbac_covers(api)
