"""`troupe simulate --kubeconfig`: a what-if against the embedded API server, over
real HTTP with a kubeconfig, as a user runs it (the `troupe` command in a
subprocess): the cluster is read, never written; the user's new pods are
placed and what they preempt is named; what it asked for the chart's
ClusterRole grants; `--save` keeps a dump a later run reads the same."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver import ApiServer, demo
from apiserver.demo import load
from apiserver.kubectl import KUBECTL
from troupe.api.kinds import READ_VERBS
from troupe.tools.live import LISTED, dump_command, snapshot
from troupe.tools.simulate import load_objects

REPO = Path(__file__).resolve().parents[2]


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, cpu: str, node_name: str | None = None, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "schedulerName": "troupe-scheduler",
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        **spec,
    }
    if node_name:
        s["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": s,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


CLUSTER = [
    node("n1"),
    node("n2"),
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "urgent"},
        "value": 1000,
    },
    pod("filler-1", "3", "n1"),
    pod("filler-2", "4", "n2"),
    # A gang already in the cluster, one member bound: listed with its PodGroup.
    {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "old", "namespace": "team"},
        "spec": {"minMember": 1},
    },
]

# What the user adds: a gang of two that fits in n1's free cpu, and an urgent
# pod that fits nowhere without preempting filler-2.
EXTRA = """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: train, namespace: team}
spec: {minMember: 2}
---
apiVersion: v1
kind: Pod
metadata: {name: train-0, namespace: team, labels: {scheduling.x-k8s.io/pod-group: train}}
spec:
  schedulerName: troupe-scheduler
  containers: [{name: c, image: x, resources: {requests: {cpu: 500m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: train-1, namespace: team, labels: {scheduling.x-k8s.io/pod-group: train}}
spec:
  schedulerName: troupe-scheduler
  containers: [{name: c, image: x, resources: {requests: {cpu: 500m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: hurry, namespace: team}
spec:
  schedulerName: troupe-scheduler
  priorityClassName: urgent
  containers: [{name: c, image: x, resources: {requests: {cpu: "3"}}}]
"""

PLURALS = ("nodes", "pods", "podgroups", "priorityclasses", "namespaces")


def versions(srv: ApiServer) -> dict[tuple[str, str | None, str], str]:
    """Every object's resourceVersion, by (plural, namespace, name)."""
    return {
        (p, o["metadata"].get("namespace"), o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for p in PLURALS
        for o in srv.objects(p)
    }


def granted() -> set[tuple[str, str]]:
    """(resource, verb) the chart's ClusterRole grants (manifests/ is its render)."""
    docs = yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text())
    (role,) = [d for d in docs if d and d["kind"] == "ClusterRole"]
    return {(res, v) for r in role["rules"] for res in r["resources"] for v in r["verbs"]}


def troupe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "troupe", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    srv = ApiServer()
    with srv.start_in_thread():
        load(srv, [dict(o) for o in CLUSTER])
        (tmp_path / "extra.yaml").write_text(EXTRA)
        yield srv, srv.write_kubeconfig(tmp_path / "kubeconfig")


def test_what_if_reads_the_cluster_writes_nothing_and_places_the_new_pods(
    cluster: Any, tmp_path: Path
) -> None:
    srv, kubeconfig = cluster
    before, writes, asked = versions(srv), len(srv.writes), Counter(srv.requests)
    dump = tmp_path / "dump.yaml"
    out = troupe("--kubeconfig", str(kubeconfig), str(tmp_path / "extra.yaml"), "-o", "json",
                 "--save", str(dump))  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    pods = got["pods"]
    assert pods["team/train-0"]["node"] == "n1"
    assert pods["team/train-1"]["node"] == "n1"
    assert pods["team/hurry"]["node"] == "n2"
    assert pods["team/filler-2"]["preemptedBy"] == "team/hurry"
    assert pods["team/filler-2"]["preemptedFrom"] == "n2"
    assert got["podGroups"]["team/train"]["scheduled"] == 2
    assert "team/old" in got["podGroups"]  # the cluster's PodGroup was read
    # Nothing written: no request that writes, every object at its resourceVersion.
    assert len(srv.writes) == writes
    assert versions(srv) == before
    made = Counter(srv.requests)
    made.subtract(asked)
    used = {k for k, n in made.items() if n > 0}
    assert used, "the cluster was not read"
    assert {verb for verb, _, _ in used} == {"list"}
    # Every kind listed once, each allowed by the chart's ClusterRole's read verbs.
    role = granted()
    for verb, plural, sub in used:
        assert verb in READ_VERBS and not sub
        assert (plural, verb) in role, (plural, verb)
    # Every kind the server serves: this one serves no scheduling.k8s.io/v1alpha3
    # (CompositePodGroups), which is said, not read (see the next test).
    served = [k for k in LISTED if srv.store.registry.find_plural(k.plural)]
    assert {k.plural for k in LISTED} - {k.plural for k in served} == {"compositepodgroups"}
    assert {k.plural for k in served} == {plural for _, plural, _ in used}
    assert all(made[("list", k.plural, "")] == 1 for k in served)
    # The dump holds every kind read and gives the same answer later.
    saved = yaml.safe_load(dump.read_text())
    assert saved["kind"] == "List"
    kinds = {o["kind"] for o in saved["items"]}
    assert {"Node", "Pod", "PodGroup", "PriorityClass", "Namespace"} <= kinds
    again = troupe(str(dump), str(tmp_path / "extra.yaml"), "-o", "json")
    assert again.returncode == 0, again.stderr
    assert {k: v["node"] for k, v in json.loads(again.stdout)["pods"].items()} == {
        k: v["node"] for k, v in pods.items()
    }


def test_an_object_the_cluster_has_already_is_refused(cluster: Any, tmp_path: Path) -> None:
    _, kubeconfig = cluster
    (tmp_path / "dup.yaml").write_text(yaml.safe_dump(node("n1")))
    out = troupe("--kubeconfig", str(kubeconfig), str(tmp_path / "dup.yaml"))
    assert out.returncode == 2
    assert "duplicate Node n1 (first in the cluster)" in out.stderr


def test_the_cluster_as_it_is_with_another_configuration(cluster: Any, tmp_path: Path) -> None:
    """No files: the cluster's own pending pods, under --config; --compare too."""
    srv, kubeconfig = cluster
    srv.create(pod("waiting", "1"))
    cfg = tmp_path / "sched.yaml"
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles: [{schedulerName: troupe-scheduler}]\n"
    )
    out = troupe("--kubeconfig", str(kubeconfig), "--config", str(cfg), "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["pods"]["team/waiting"]["node"] == "n1"
    out = troupe("--kubeconfig", str(kubeconfig), "--compare", str(cfg), str(cfg), "-o", "json")
    assert out.returncode == 0, out.stderr


def test_the_documented_dump_command_dumps_what_the_simulator_reads(
    cluster: Any, tmp_path: Path
) -> None:
    """The kubectl commands docs/simulate.md and the README give (generated from
    the kinds table) run as written; a kind the cluster does not serve
    (Kubernetes' own PodGroups here) is said on stderr and the rest is kept;
    the dump answers as the live read does."""
    _, kubeconfig = cluster
    for doc in ("docs/simulate.md", "README.md"):
        assert dump_command() in (REPO / doc).read_text(), f"{doc}: the dump command is stale"
    env = {"PATH": f"{KUBECTL.parent}:/usr/bin:/bin", "KUBECONFIG": str(kubeconfig),
           "HOME": str(tmp_path)}  # fmt: skip
    ran = subprocess.run(
        ["bash", "-c", dump_command()], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert ran.stderr == (
        'error: the server doesn\'t have a resource type "compositepodgroups" in group '
        '"scheduling.k8s.io"\n'
        'error: the server doesn\'t have a resource type "podgroups" in group "scheduling.k8s.io"\n'
    )
    dumped = troupe(str(tmp_path / "cluster.yaml"), str(tmp_path / "extra.yaml"), "-o", "json")
    live = troupe("--kubeconfig", str(kubeconfig), str(tmp_path / "extra.yaml"), "-o", "json")
    assert dumped.returncode == 0 and live.returncode == 0, dumped.stderr + live.stderr
    assert json.loads(dumped.stdout) == json.loads(live.stdout)
    assert "team/old" in json.loads(dumped.stdout)["podGroups"]


def test_a_kind_served_in_several_versions_is_read_in_the_one_served(tmp_path: Path) -> None:
    """Kubernetes' own PodGroups (the demo cluster's ml/ring) are found by API
    discovery, as troupe run finds them, and the gang is placed from the read."""
    srv = ApiServer(native_podgroups=demo.NATIVE_VERSION)
    with srv.start_in_thread():
        demo.load(srv, load_objects([str(demo.EXAMPLE)]))
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        read = snapshot(str(kubeconfig))
        out = troupe("--kubeconfig", str(kubeconfig), "-o", "json")
    # The demo serves PodGroups in v1beta1, where 1.37 serves no CompositePodGroups.
    assert read.not_served == ["compositepodgroups.scheduling.k8s.io"]
    groups = {
        (o["apiVersion"], o["metadata"]["name"]) for o in read.objects if o["kind"] == "PodGroup"
    }
    assert (f"scheduling.k8s.io/{demo.NATIVE_VERSION}", "ring") in groups
    assert ("scheduling.x-k8s.io/v1alpha1", "allreduce") in groups
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["podGroups"]["scheduling.k8s.io/ml/ring"]["scheduled"] == 2
