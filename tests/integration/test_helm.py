"""The chart installed as an operator installs it: the official helm against the
embedded API server (`helm install`, `upgrade`, `uninstall`), and what landed
checked with the real kubectl."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver import ApiServer
from apiserver.helm import helm
from apiserver.kubectl import Kubectl
from troupe.config import parse_config
from troupe.plugins.registry import IN_TREE

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "troupe"
NS = "troupe-system"


class Helm:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.env = {
            "KUBECONFIG": str(kubeconfig),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "PATH": "/usr/bin:/bin",
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(helm()), *args], capture_output=True, text=True, env=self.env, timeout=120
        )

    def __call__(self, *args: str) -> str:
        proc = self.run(*args)
        assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
        return proc.stdout


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Helm, Kubectl]]:
    srv = ApiServer()
    with srv.start_in_thread():
        kubectl = Kubectl(srv, tmp_path)
        yield Helm(kubectl.kubeconfig, tmp_path / "helm-home"), kubectl


def get(kubectl: Kubectl, *what: str) -> list[dict[str, Any]]:
    out = json.loads(kubectl("get", *what, "-o", "json"))
    items: list[dict[str, Any]] = out.get("items", [out])
    return items


def names(kubectl: Kubectl, kind: str, namespaced: bool = True) -> set[str]:
    args = (kind, "-n", NS) if namespaced else (kind,)
    return {o["metadata"]["name"] for o in get(kubectl, *args)}


def test_install_upgrade_uninstall(cluster: tuple[Helm, Kubectl]) -> None:
    helm_, kubectl = cluster
    out = helm_("install", "troupe", str(CHART), "--namespace", NS, "--create-namespace")
    assert "STATUS: deployed" in out and "schedulerName: troupe-scheduler" in out

    assert "podgroups.scheduling.x-k8s.io" in names(kubectl, "crd", namespaced=False)
    assert names(kubectl, "deployments") == {"troupe-scheduler"}
    assert names(kubectl, "poddisruptionbudgets") == {"troupe-scheduler"}
    assert names(kubectl, "services") == {"troupe-scheduler-metrics"}
    assert "troupe-scheduler" in names(kubectl, "serviceaccounts")
    assert names(kubectl, "roles") == {"troupe-scheduler-leader-election"}
    assert "troupe-scheduler" in names(kubectl, "clusterroles", namespaced=False)
    assert "troupe-scheduler" in names(kubectl, "clusterrolebindings", namespaced=False)
    (dep,) = get(kubectl, "deployment", "troupe-scheduler", "-n", NS)
    assert dep["spec"]["replicas"] == 2
    assert dep["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    (cm,) = get(kubectl, "configmap", "troupe-scheduler-config", "-n", NS)
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    parse_config(cfg, IN_TREE)
    assert cfg["profiles"] == [{"schedulerName": "troupe-scheduler"}]
    assert "troupe" in helm_("list", "--namespace", NS)

    helm_(
        "upgrade", "troupe", str(CHART), "--namespace", NS,
        "--set", "replicas=1", "--set", "schedulerName=gang-scheduler",
    )  # fmt: skip
    (dep,) = get(kubectl, "deployment", "troupe-scheduler", "-n", NS)
    assert dep["spec"]["replicas"] == 1
    (cm,) = get(kubectl, "configmap", "troupe-scheduler-config", "-n", NS)
    assert yaml.safe_load(cm["data"]["config.yaml"])["profiles"] == [
        {"schedulerName": "gang-scheduler"}
    ]
    assert "deployed" in helm_("status", "troupe", "--namespace", NS)

    helm_("uninstall", "troupe", "--namespace", NS)
    for kind in ("deployments", "poddisruptionbudgets", "services", "configmaps", "roles"):
        assert names(kubectl, kind) == set(), kind
    assert "troupe-scheduler" not in names(kubectl, "serviceaccounts")
    assert "troupe-scheduler" not in names(kubectl, "clusterroles", namespaced=False)
    # Helm never deletes the CRDs of a chart's crds/ (nor the PodGroups in them)
    assert "podgroups.scheduling.x-k8s.io" in names(kubectl, "crd", namespaced=False)
    assert helm_("list", "--namespace", NS, "--short").strip() == ""


def test_refusals_rbac_and_notes_as_installed(cluster: tuple[Helm, Kubectl]) -> None:
    """Two replicas without leader election are refused before anything is
    installed; the ClusterRole patches pods only with explain on; NOTES name the
    configured profiles."""
    helm_, kubectl = cluster
    proc = helm_.run(
        "install", "troupe", str(CHART), "--namespace", NS, "--create-namespace",
        "--set", "leaderElection.enabled=false", "--set", "replicas=2",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "two active schedulers bind conflicting pods" in proc.stderr
    assert names(kubectl, "deployments") == set()
    assert helm_("list", "--namespace", NS, "--short").strip() == ""

    out = helm_(
        "install", "troupe", str(CHART), "--namespace", NS, "--create-namespace",
        "--set", "config.profiles[0].schedulerName=gangs",
        "--set", "config.profiles[1].schedulerName=batch",
    )  # fmt: skip
    assert "spec.schedulerName (gangs, batch):" in out and "schedulerName: gangs" in out
    assert "schedulerName: troupe-scheduler" not in out

    def pod_verbs() -> set[str]:
        (role,) = get(kubectl, "clusterrole", "troupe-scheduler")
        return {
            v
            for r in role["rules"]
            if "" in r["apiGroups"] and "pods" in r["resources"]
            for v in r["verbs"]
        }

    assert pod_verbs() == {"get", "list", "watch", "delete"}
    helm_(
        "upgrade", "troupe", str(CHART), "--namespace", NS, "--reuse-values",
        "--set", "config.troupe.explain.enabled=true",
    )  # fmt: skip
    assert "patch" in pod_verbs()
    helm_(
        "upgrade", "troupe", str(CHART), "--namespace", NS, "--reuse-values",
        "--set", "leaderElection.enabled=false",
    )  # fmt: skip
    (dep,) = get(kubectl, "deployment", "troupe-scheduler", "-n", NS)
    assert dep["spec"]["replicas"] == 1
    assert names(kubectl, "roles") == set()
