"""ElasticQuotas through the deployed path: the real `troupe run`, with
scheduler-plugins' CapacityScheduling profile, against the embedded API server
that serves the CRD. A namespace's pods are bound up to its quota's max, the
next is refused with upstream's reason, and status.used is patched as the
pods run (as scheduler-plugins' controller patches it); `kubectl get
elasticquota -A` shows used, min and max."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver import ApiServer
from apiserver.kubectl import KUBECTL, Kubectl, table
from apiserver.replica import Troupe, until
from tests.builders import make_node, make_pod
from tests.integration.test_operator import assert_rbac_covers, node_of

REPO = Path(__file__).resolve().parents[2]
CONFIG = {
    "profiles": [
        {
            "schedulerName": "troupe-scheduler",
            "plugins": {
                "multiPoint": {"enabled": [{"name": "CapacityScheduling"}]},
                "postFilter": {
                    "enabled": [{"name": "CapacityScheduling"}],
                    "disabled": [{"name": "*"}],
                },
            },
        }
    ]
}
QUOTA = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "ElasticQuota",
    "metadata": {"name": "team-a", "namespace": "team-a"},
    "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}},
}
# What team-a borrows: team-b's min, unused (a namespace borrows only what the
# sum of every min leaves, as upstream).
LENDER = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "ElasticQuota",
    "metadata": {"name": "team-b", "namespace": "team-b"},
    "spec": {"min": {"cpu": "2"}, "max": {"cpu": "2"}},
}


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer(podgroups=True)
    with srv.start_in_thread():
        yield srv


def pod(api: ApiServer, name: str) -> dict[str, Any]:
    obj = make_pod(name, "team-a").req(cpu="1").obj()
    obj["metadata"].pop("uid", None)
    return api.create(obj)


def used(api: ApiServer) -> dict[str, Any]:
    q = api.get("elasticquotas", "team-a", "team-a") or {}
    return dict((q.get("status") or {}).get("used") or {})


def test_a_quota_caps_its_namespace_and_its_use_is_written_back(
    api: ApiServer, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    for i in range(2):
        api.create(make_node(f"n{i}").capacity(cpu=4, memory="4Gi", pods=10).obj())
    api.create(QUOTA)
    api.create(LENDER)
    with Troupe(tmp_path, kubeconfig=kubeconfig, config=CONFIG) as t:
        t.wait_ready()
        for i in range(3):
            pod(api, f"p{i}")
        until(
            lambda: sum(1 for i in range(3) if node_of(api, f"p{i}", "team-a")) == 2,
            what="two pods bound (the quota's max)",
        )
        refused = next(f"p{i}" for i in range(3) if not node_of(api, f"p{i}", "team-a"))

        def reason() -> str:
            p = api.get("pods", "team-a", refused) or {}
            conds = (p.get("status") or {}).get("conditions") or []
            return next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"), "")

        message = until(reason, what="the refused pod's reason")
        assert (
            f"Pod team-a/{refused} is rejected in PreFilter because ElasticQuota team-a "
            "is more than Max" in message
        )
        for i in range(3):
            p = api.get("pods", "team-a", f"p{i}")
            if p is not None and p["spec"].get("nodeName"):
                p["status"] = {"phase": "Running"}
                api.apply(p)
        until(lambda: used(api) == {"cpu": "2"}, what="status.used written")
        assert node_of(api, refused, "team-a") is None
    assert_rbac_covers(api)


@pytest.mark.skipif(not KUBECTL.exists(), reason=f"kubectl not installed at {KUBECTL}")
def test_kubectl_get_elasticquota_shows_used_min_and_max(tmp_path: Path) -> None:
    srv = ApiServer()
    with srv.start_in_thread():
        kubectl = Kubectl(srv, tmp_path)
        out = kubectl("apply", "-f", str(REPO / "crds"))
        assert "elasticquotas.scheduling.x-k8s.io" in out
        srv.apply({**QUOTA, "status": {"used": {"cpu": "1500m"}}})
        rows = table(kubectl("get", "elasticquota", "-A"))
        assert len(rows) == 1
        row = rows[0]
        assert (row["NAMESPACE"], row["NAME"]) == ("team-a", "team-a")
        # an object column printed as the API server prints one
        assert (row["USED"], row["MIN"], row["MAX"]) == (
            "map[cpu:1500m]",
            "map[cpu:1]",
            "map[cpu:2]",
        )
        assert table(kubectl("get", "eq", "-n", "team-a"))[0]["NAME"] == "team-a"


def test_a_gang_is_admitted_only_if_its_quorum_fits_the_quota(
    api: ApiServer, tmp_path: Path
) -> None:
    """Beyond scheduler-plugins: a gang of 3 pods of 1 cpu under max 2 cpu is
    refused whole (each member alone would fit), its reason naming the quota,
    and nothing of it is charged: a gang of 2 then runs."""
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    for i in range(2):
        api.create(make_node(f"n{i}").capacity(cpu=4, memory="4Gi", pods=10).obj())
    api.create(QUOTA)
    api.create(LENDER)

    def gang(name: str, members: int) -> list[str]:
        api.create(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "team-a"},
                "spec": {"minMember": members},
            }
        )
        names = []
        for i in range(members):
            obj = make_pod(f"{name}-{i}", "team-a").req(cpu="1").group(name).obj()
            obj["metadata"].pop("uid", None)
            api.create(obj)
            names.append(f"{name}-{i}")
        return names

    def reason(name: str) -> str:
        p = api.get("pods", "team-a", name) or {}
        conds = (p.get("status") or {}).get("conditions") or []
        return next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"), "")

    with Troupe(tmp_path, kubeconfig=kubeconfig, config=CONFIG) as t:
        t.wait_ready()
        big = gang("big", 3)
        message = until(
            lambda: m if "pods fit" in (m := reason(big[0])) else "",
            what="the refused gang's reason (after its members are all created)",
        )
        assert 'PodGroup "team-a/big": 2 of minMember 3 pods fit' in message
        assert "because ElasticQuota team-a is more than Max" in message
        assert all(node_of(api, n, "team-a") is None for n in big)
        small = gang("small", 2)
        until(
            lambda: all(node_of(api, n, "team-a") for n in small),
            what="the gang that fits the quota bound",
        )
        for n in small:
            p = api.get("pods", "team-a", n)
            assert p is not None
            p["status"] = {"phase": "Running"}
            api.apply(p)
        until(lambda: used(api) == {"cpu": "2"}, what="status.used written")
        assert all(node_of(api, n, "team-a") is None for n in big)
