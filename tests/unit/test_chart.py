"""The Helm chart (charts/troupe): `helm lint`, what `helm template` renders with
default and other values, and the plain manifests it generates (manifests/ must
be exactly the chart's render, so there is one source)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from apiserver.helm import helm
from tests import manifests_render
from troupe.config import parse_config
from troupe.plugins.registry import IN_TREE


def render(*settings: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for text in manifests_render.template(*settings).values():
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (d,) = [d for d in docs if d["kind"] == kind]
    return d


def config_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
    parse_config(cfg, IN_TREE)  # Troupe itself reads it
    return cfg


def test_helm_lint() -> None:
    out = subprocess.run(
        [str(helm()), "lint", "--strict", str(manifests_render.CHART)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_the_plain_manifests_are_the_charts_render() -> None:
    assert manifests_render.check() == []


def test_default_values() -> None:
    docs = render()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Namespace",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    )
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "ghcr.io/troupe-scheduler/troupe:0.1.0"
    assert pod["securityContext"]["runAsNonRoot"] is True
    cfg = config_of(docs)
    assert cfg["profiles"] == [{"schedulerName": "troupe-scheduler"}]
    assert cfg["leaderElection"]["resourceNamespace"] == "troupe-system"
    assert cfg["troupe"]["metricsPort"] == 10259
    role = one(docs, "Role")
    assert role["rules"][1]["resourceNames"] == [cfg["leaderElection"]["resourceName"]]


@pytest.mark.parametrize(
    ("settings", "check"),
    [
        pytest.param(
            ("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=15s"),
            lambda docs: one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"] == "15s",
            id="service-monitor",
        ),
        pytest.param(
            ("replicas=1", "podDisruptionBudget.enabled=false"),
            lambda docs: (
                one(docs, "Deployment")["spec"]["replicas"] == 1
                and not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
            ),
            id="one-replica",
        ),
        pytest.param(
            ("schedulerName=gang-scheduler",),
            lambda docs: config_of(docs)["profiles"] == [{"schedulerName": "gang-scheduler"}],
            id="scheduler-name",
        ),
        pytest.param(
            ("leaderElection.enabled=false",),
            lambda docs: (
                config_of(docs)["leaderElection"]["leaderElect"] is False
                and not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
            ),
            id="no-leader-election",
        ),
        pytest.param(
            ("image.repository=registry.local/troupe", "image.tag=dev"),
            lambda docs: (
                one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
                == "registry.local/troupe:dev"
            ),
            id="image",
        ),
        pytest.param(
            (
                "config.profiles[0].schedulerName=troupe-scheduler",
                "config.profiles[0].pluginConfig[0].name=NodeResourcesFit",
                "config.profiles[0].pluginConfig[0].args.scoringStrategy.type=MostAllocated",
                "config.podMaxBackoffSeconds=20",
            ),
            lambda docs: (
                config_of(docs)["profiles"][0]["pluginConfig"][0]["args"]
                == {"scoringStrategy": {"type": "MostAllocated"}}
                and config_of(docs)["podMaxBackoffSeconds"] == 20
            ),
            id="profiles-and-plugin-config",
        ),
    ],
)
def test_values(settings: tuple[str, ...], check: Any) -> None:
    assert check(render(*settings))
