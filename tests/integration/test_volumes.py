"""A pod with a WaitForFirstConsumer claim through `troupe run --kubeconfig`:
Troupe writes the claim's selected-node annotation, the test plays the
provisioner (creates the PV on that node and binds the claim), and the pod is
bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, until
from tests.builders import make_node, make_pod
from tests.volume_builders import hostname_affinity, pvc, storage_class, with_claims

SELECTED = "volume.kubernetes.io/selected-node"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer(podgroups=True)
    with srv.start_in_thread():
        yield srv


def test_wffc_claim_gets_its_node_and_the_pod_binds_after_provisioning(
    api: ApiServer, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    for i in range(2):
        api.create(make_node(f"n{i}").capacity(cpu=2, memory="4Gi", pods=10).obj())
    api.create(storage_class("fast", provisioner="csi.example.com"))
    claim = pvc("data", sc="fast")
    for k in ("uid", "resourceVersion"):
        claim["metadata"].pop(k)
    api.create(claim)
    obj = with_claims(make_pod("p").req(cpu="100m").obj(), "data")
    obj["metadata"].pop("uid", None)
    obj["metadata"].pop("resourceVersion", None)
    api.create(obj)
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()

        def selected() -> str | None:
            c = api.get("persistentvolumeclaims", "default", "data") or {}
            return ((c.get("metadata") or {}).get("annotations") or {}).get(SELECTED)

        node = until(selected, what="the claim's selected-node annotation")
        p = api.get("pods", "default", "p") or {}
        assert not (p.get("spec") or {}).get("nodeName")  # waits for the claim
        # The provisioner: a PV on that node, and the claim bound to it.
        api.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": "pv-data"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "fast",
                    "nodeAffinity": hostname_affinity(node),
                    "claimRef": {"namespace": "default", "name": "data"},
                },
                "status": {"phase": "Bound"},
            }
        )
        c = api.get("persistentvolumeclaims", "default", "data") or {}
        c["spec"]["volumeName"] = "pv-data"
        c["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
        c["status"] = {"phase": "Bound"}
        api.apply(c)

        def bound_node() -> str | None:
            return ((api.get("pods", "default", "p") or {}).get("spec") or {}).get("nodeName")

        assert until(bound_node, what="the pod bound") == node
        assert t.stop() == 0
