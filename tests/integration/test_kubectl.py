"""The real kubectl against the embedded API server: what a user types in the README.

The server runs in a thread (kubectl is a subprocess); `cluster` yields the server
and a `Kubectl` bound to it, for tests that add `troupe run` to the picture.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apiserver import ApiServer
from apiserver.kubectl import KUBECTL, Kubectl, table

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not KUBECTL.exists(), reason=f"kubectl not installed at {KUBECTL} (run `make install`)"
)

GANG = """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: gang}
spec: {minMember: 2, scheduleTimeoutSeconds: 30}
---
apiVersion: v1
kind: Pod
metadata:
  name: gang-0
  labels: {scheduling.x-k8s.io/pod-group: gang}
spec:
  schedulerName: troupe-scheduler
  containers: [{name: main, image: busybox, resources: {requests: {cpu: 500m}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: gang-1
  labels: {scheduling.x-k8s.io/pod-group: gang}
spec:
  schedulerName: troupe-scheduler
  containers: [{name: main, image: busybox, resources: {requests: {cpu: 500m}}}]
"""


def node(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.37.0"},
        },
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ApiServer, Kubectl]]:
    srv = ApiServer()
    with srv.start_in_thread():
        yield srv, Kubectl(srv, tmp_path)


@pytest.fixture
def gang(cluster: tuple[ApiServer, Kubectl]) -> tuple[ApiServer, Kubectl]:
    """The repo's CRDs and a two-pod gang, applied with kubectl; nodes n1 and n2."""
    srv, kubectl = cluster
    out = kubectl("apply", "-f", str(REPO / "crds"))
    assert "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.x-k8s.io" in out
    out = kubectl.apply(GANG)
    assert "podgroup.scheduling.x-k8s.io/gang created" in out
    assert "pod/gang-0 created" in out
    srv.create(node("n1"))
    srv.create(node("n2"))
    return srv, kubectl


def test_wait_for_the_crd_to_be_established(cluster: tuple[ApiServer, Kubectl]) -> None:
    _, kubectl = cluster
    kubectl("apply", "-f", str(REPO / "crds"))
    out = kubectl(
        "wait", "--for=condition=established", "crd/podgroups.scheduling.x-k8s.io", "--timeout=10s"
    )
    assert "condition met" in out


def test_get_nodes(gang: tuple[ApiServer, Kubectl]) -> None:
    _, kubectl = gang
    rows = table(kubectl("get", "nodes"))
    assert [(r["NAME"], r["STATUS"], r["VERSION"]) for r in rows] == [
        ("n1", "Ready", "v1.37.0"),
        ("n2", "Ready", "v1.37.0"),
    ]
    assert "n1" in kubectl("get", "no", "n1", "-o", "name")


def test_get_podgroups_prints_the_crd_columns(gang: tuple[ApiServer, Kubectl]) -> None:
    srv, kubectl = gang
    srv.apply(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": "default"},
            "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30},
            "status": {"phase": "Running", "running": 2, "succeeded": 0, "failed": 0},
        }
    )
    rows = table(kubectl("get", "podgroups"))
    assert len(rows) == 1
    row = rows[0]
    assert (row["NAME"], row["PHASE"], row["MINMEMBER"], row["RUNNING"]) == (
        "gang",
        "Running",
        "2",
        "2",
    )
    assert table(kubectl("get", "pg"))[0]["NAME"] == "gang"


def test_get_pods_wide_shows_the_node(gang: tuple[ApiServer, Kubectl]) -> None:
    _, kubectl = gang
    with k8s_config.new_client_from_config(str(kubectl.kubeconfig)) as api:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "gang-0"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n2"},
        }
        k8s.CoreV1Api(api).create_namespaced_pod_binding(
            "gang-0", "default", binding, _preload_content=False
        )
    rows = {r["NAME"]: r for r in table(kubectl("get", "pods", "-o", "wide"))}
    assert rows["gang-0"]["NODE"] == "n2"
    assert rows["gang-1"]["NODE"] == "<none>"
    assert rows["gang-1"]["STATUS"] == "Pending"
    assert rows["gang-0"]["READY"] == "0/1"
    unassigned = kubectl("get", "pods", "--field-selector", "spec.nodeName=", "-o", "name")
    assert unassigned.split() == ["pod/gang-1"]


def test_get_pods_in_all_namespaces(gang: tuple[ApiServer, Kubectl]) -> None:
    _, kubectl = gang
    kubectl.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n")
    kubectl.apply(
        GANG.replace("metadata: {name: gang}", "metadata: {name: gang, namespace: team-a}")
        .replace("name: gang-0\n", "name: gang-0\n  namespace: team-a\n")
        .replace("name: gang-1\n", "name: gang-1\n  namespace: team-a\n")
    )
    rows = table(kubectl("get", "pods", "-A"))
    assert sorted((r["NAMESPACE"], r["NAME"]) for r in rows) == [
        ("default", "gang-0"),
        ("default", "gang-1"),
        ("team-a", "gang-0"),
        ("team-a", "gang-1"),
    ]
    listed = kubectl("get", "pods", "-n", "team-a", "-l", "scheduling.x-k8s.io/pod-group=gang")
    assert [r["NAME"] for r in table(listed)] == ["gang-0", "gang-1"]


def test_describe_pod_lists_its_events(gang: tuple[ApiServer, Kubectl]) -> None:
    srv, kubectl = gang
    pod = srv.get("pods", "default", "gang-1")
    assert pod is not None
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "gang-1.", "namespace": "default"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "gang-1",
            "namespace": "default",
            "uid": pod["metadata"]["uid"],
        },
        "type": "Warning",
        "reason": "FailedScheduling",
        "message": "0/2 nodes are available: 2 Insufficient cpu.",
        "source": {"component": "troupe-scheduler"},
        "reportingComponent": "troupe-scheduler",
        "count": 1,
        "firstTimestamp": pod["metadata"]["creationTimestamp"],
        "lastTimestamp": pod["metadata"]["creationTimestamp"],
    }
    with k8s_config.new_client_from_config(str(kubectl.kubeconfig)) as api:
        k8s.CoreV1Api(api).create_namespaced_event("default", event, _preload_content=False)
    out = kubectl("describe", "pod", "gang-1")
    assert "Labels:       scheduling.x-k8s.io/pod-group=gang" in out
    events = out.split("Events:", 1)[1]
    assert "FailedScheduling" in events
    assert "troupe-scheduler" in events
    assert "0/2 nodes are available: 2 Insufficient cpu." in events
    rows = table(kubectl("get", "events"))
    assert [(r["TYPE"], r["REASON"], r["OBJECT"]) for r in rows] == [
        ("Warning", "FailedScheduling", "pod/gang-1")
    ]
    # An event about another pod is not listed.
    assert "FailedScheduling" not in kubectl("describe", "pod", "gang-0").split("Events:", 1)[1]


def test_server_side_apply(gang: tuple[ApiServer, Kubectl]) -> None:
    srv, kubectl = gang
    out = kubectl(
        "apply", "--server-side", "-f", "-", stdin=GANG.replace("minMember: 2", "minMember: 5")
    )
    assert "podgroup.scheduling.x-k8s.io/gang serverside-applied" in out
    group = srv.get("podgroups", "default", "gang")
    assert group is not None and group["spec"]["minMember"] == 5
    kubectl("apply", "--server-side", "-f", "-", stdin=GANG.replace("gang-1", "gang-2"))
    assert srv.get("pods", "default", "gang-2") is not None


def test_plain_server_flag_without_a_kubeconfig(
    gang: tuple[ApiServer, Kubectl], tmp_path: Path
) -> None:
    """`kubectl --server URL get pods -A`, as the demo prints it."""
    srv, _ = gang
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [str(KUBECTL), "--server", srv.url, "get", "pods", "-A"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["NAME"] for r in table(proc.stdout)] == ["gang-0", "gang-1"]


def test_typed_client_creates_send_protobuf(cluster: tuple[ApiServer, Kubectl]) -> None:
    """kubectl create <kind> posts protobuf: understood for a few simple kinds."""
    srv, kubectl = cluster
    assert "namespace/team-x created" in kubectl("create", "namespace", "team-x")
    kubectl("create", "configmap", "cfg", "-n", "team-x", "--from-literal=a=b")
    kubectl("create", "priorityclass", "high", "--value=1000", "--description=gangs first")
    cm = srv.get("configmaps", "team-x", "cfg")
    assert cm is not None and cm["data"] == {"a": "b"}
    pc = srv.get("priorityclasses", None, "high")
    assert pc is not None and (pc["value"], pc["description"]) == (1000, "gangs first")
    refused = kubectl.run("create", "deployment", "d", "--image=x", check=False)
    assert refused.returncode == 1 and "not understood" in refused.stderr


def test_secrets_in_protobuf_and_delete_options(cluster: tuple[ApiServer, Kubectl]) -> None:
    """Secrets are served (Helm keeps its releases in them) and their protobuf
    bodies understood (data as bytes, base64 in JSON); a delete's protobuf
    DeleteOptions keep their preconditions."""
    srv, kubectl = cluster
    kubectl("create", "secret", "generic", "s", "--from-literal=k=v=1", "--type=app/x")
    sec = srv.get("secrets", "default", "s")
    assert sec is not None and sec["type"] == "app/x"
    assert base64.b64decode(sec["data"]["k"]) == b"v=1"
    assert json.loads(kubectl("get", "secret", "s", "-o", "json"))["data"] == sec["data"]
    stale = kubectl.run(
        "delete", "secret", "s", "--wait=false", "--grace-period=0", "--force", check=False
    )
    assert stale.returncode == 0, stale.stderr
    assert srv.get("secrets", "default", "s") is None


def test_readme_manifests_apply(cluster: tuple[ApiServer, Kubectl]) -> None:
    srv, kubectl = cluster
    out = kubectl("apply", "-f", str(REPO / "crds"))
    out += kubectl(
        "apply",
        *("-f", str(REPO / "manifests" / "namespace.yaml")),
        *("-f", str(REPO / "manifests" / "rbac.yaml")),
        *("-f", str(REPO / "manifests" / "configmap.yaml")),
        *("-f", str(REPO / "manifests" / "deployment.yaml")),
        *("-f", str(REPO / "manifests" / "service.yaml")),
    )
    assert "created" in out
    assert srv.objects("deployments")
    assert srv.objects("clusterroles")
    assert srv.objects("poddisruptionbudgets")


def test_apply_again_patches_and_delete_removes(gang: tuple[ApiServer, Kubectl]) -> None:
    srv, kubectl = gang
    assert "pod/gang-0 unchanged" in kubectl.apply(GANG)
    changed = GANG.replace("minMember: 2", "minMember: 3").replace(
        "labels: {scheduling.x-k8s.io/pod-group: gang}\n",
        "labels: {scheduling.x-k8s.io/pod-group: gang, tier: web}\n",
        1,
    )
    out = kubectl.apply(changed)
    assert "podgroup.scheduling.x-k8s.io/gang configured" in out
    assert "pod/gang-0 configured" in out
    group = srv.get("podgroups", "default", "gang")
    assert group is not None and group["spec"]["minMember"] == 3
    pod0 = srv.get("pods", "default", "gang-0")
    assert pod0 is not None and pod0["metadata"]["labels"]["tier"] == "web"
    assert "deleted" in kubectl("delete", "pod", "gang-0")
    assert srv.get("pods", "default", "gang-0") is None
    assert [r["NAME"] for r in table(kubectl("get", "pods"))] == ["gang-1"]
    result = kubectl.run("get", "pod", "gang-0", check=False)
    assert result.returncode == 1
    assert 'pods "gang-0" not found' in result.stderr


def test_get_pdb_shows_kubes_columns(cluster: tuple[ApiServer, Kubectl]) -> None:
    """policy/v1 PodDisruptionBudgets (what preemption watches) under `kubectl get pdb`."""
    srv, kubectl = cluster
    kubectl.apply(
        "apiVersion: policy/v1\n"
        "kind: PodDisruptionBudget\n"
        "metadata: {name: guard, namespace: default}\n"
        "spec: {minAvailable: 1, selector: {matchLabels: {app: guarded}}}\n"
    )
    rows = table(kubectl("get", "pdb"))
    assert [(r["NAME"], r["MIN AVAILABLE"], r["MAX UNAVAILABLE"]) for r in rows] == [
        ("guard", "1", "N/A")
    ]
    assert rows[0]["ALLOWED DISRUPTIONS"] == "0"
    assert srv.get("poddisruptionbudgets", "default", "guard") is not None
