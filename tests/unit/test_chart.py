"""The Helm chart (charts/troupe): `helm lint`, what `helm template` renders with
default and other values, and the plain manifests it generates (manifests/ must
be exactly the chart's render, so there is one source)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.helm import helm
from tests import manifests_render
from troupe.api.kinds import KINDS, READ_VERBS
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
            ("metrics.serviceMonitor.enabled=true",),
            lambda docs: (
                (ep := one(docs, "ServiceMonitor")["spec"]["endpoints"][0])["scheme"] == "https"
                and ep["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
                and ep["tlsConfig"] == {"insecureSkipVerify": True}
            ),
            id="service-monitor-scrapes-https-with-a-token",
        ),
        pytest.param(
            (
                "metrics.serviceMonitor.enabled=true",
                "metrics.serviceMonitor.tlsConfig.serverName=troupe",
                "metrics.tls.secretName=troupe-tls",
            ),
            lambda docs: (
                one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"]
                == {"serverName": "troupe"}
                and (pod := one(docs, "Deployment")["spec"]["template"]["spec"])["containers"][0][
                    "args"
                ][-2:]
                == [
                    "--tls-cert-file=/etc/troupe/tls/tls.crt",
                    "--tls-private-key-file=/etc/troupe/tls/tls.key",
                ]
                and {"name": "tls", "secret": {"secretName": "troupe-tls"}} in pod["volumes"]
            ),
            id="serving-certificate-from-a-secret",
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
                # one active scheduler: without a Lease a second replica would schedule too
                and one(docs, "Deployment")["spec"]["replicas"] == 1
            ),
            id="no-leader-election",
        ),
        pytest.param(
            ("leaderElection.enabled=false", "replicas=1"),
            lambda docs: one(docs, "Deployment")["spec"]["replicas"] == 1,
            id="no-leader-election-one-replica",
        ),
        pytest.param(
            ("replicas=3",),
            lambda docs: one(docs, "Deployment")["spec"]["replicas"] == 3,
            id="three-replicas",
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


@pytest.mark.parametrize("replicas", ["2", "5"])
def test_no_leader_election_with_several_replicas_is_refused(replicas: str) -> None:
    """Without leader election every replica schedules: two active schedulers
    bind conflicting pods. The chart refuses to render that, and says why."""
    with pytest.raises(subprocess.CalledProcessError) as e:
        render("leaderElection.enabled=false", f"replicas={replicas}")
    assert (
        f"replicas={replicas} with leaderElection.enabled=false: every replica would "
        "schedule, and two active schedulers bind conflicting pods"
    ) in e.value.stderr


def pod_verbs(docs: list[dict[str, Any]]) -> set[str]:
    """The verbs the ClusterRole grants on pods (the resource itself)."""
    return {
        v
        for r in one(docs, "ClusterRole")["rules"]
        if "" in r["apiGroups"] and "pods" in r["resources"]
        for v in r["verbs"]
    }


def test_pods_are_patched_only_with_explain_on() -> None:
    """Least privilege, as kube-scheduler's system:kube-scheduler role (delete,
    get, list, watch on pods): `patch` is for the explanation annotations only."""
    assert pod_verbs(render()) == {"get", "list", "watch", "delete"}
    assert pod_verbs(render("config.troupe.explain.enabled=false")) == {
        "get",
        "list",
        "watch",
        "delete",
    }
    docs = render("config.troupe.explain.enabled=true")
    assert pod_verbs(docs) == {"get", "list", "watch", "delete", "patch"}
    assert config_of(docs)["troupe"]["explain"] == {"enabled": True}


# What the ClusterRole grants beyond the kinds of the table: Events, and the
# delegated authentication and authorization of the secure port.
NOT_KINDS = {
    ("", "events", "create"),
    ("", "events", "patch"),
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
}


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) the ClusterRole grants."""
    return {
        (g, res, v)
        for r in one(docs, "ClusterRole")["rules"]
        for g in r["apiGroups"]
        for res in r["resources"]
        for v in r["verbs"]
    }


def needed(options: frozenset[str] = frozenset()) -> set[tuple[str, str, str]]:
    """What the table's rows need, with the configuration fields `options` on:
    a watched kind is read, and written as its row says."""
    out = {(k.group, k.plural, v) for k in KINDS if k.watched for v in READ_VERBS}
    for k in KINDS:
        for w in k.writes:
            if not w.option or w.option in options:
                res = f"{k.plural}/{w.subresource}" if w.subresource else k.plural
                out |= {(k.group, res, v) for v in w.verbs}
    return out


def test_the_cluster_role_grants_what_the_kinds_need() -> None:
    """The chart's rules are exactly the table's (troupe.api.kinds.KINDS): a
    kind added to the table without its rule, or a rule left behind, fails."""
    assert granted(render()) == needed() | NOT_KINDS
    options = frozenset(w.option for k in KINDS for w in k.writes if w.option)
    docs = render(*(f"config.{o}=true" for o in sorted(options)))
    assert granted(docs) == needed(options) | NOT_KINDS


SPREAD = {
    "weight": 100,
    "podAffinityTerm": {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "troupe",
                "app.kubernetes.io/instance": "troupe",
            }
        },
    },
}


def affinity_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    aff: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]["affinity"]
    return aff


def test_the_replicas_are_spread_by_default() -> None:
    assert affinity_of(render()) == {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [SPREAD]}
    }


def test_a_users_pod_anti_affinity_is_merged_with_the_replica_spreading_rule() -> None:
    """The user's podAntiAffinity (required and preferred terms) and nodeAffinity
    are kept, and the chart's preferred term is still there (the key was rendered
    twice, and the later one silently replaced the chart's)."""
    zone = "topology.kubernetes.io/zone"
    docs = render(
        "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        f".topologyKey={zone}",
        "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".labelSelector.matchLabels.app=db",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=10",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        f".podAffinityTerm.topologyKey={zone}",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".podAffinityTerm.labelSelector.matchLabels.app=troupe-other",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=role",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    )
    aff = affinity_of(docs)
    anti = aff["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"] == [
        SPREAD,
        {
            "weight": 10,
            "podAffinityTerm": {
                "topologyKey": zone,
                "labelSelector": {"matchLabels": {"app": "troupe-other"}},
            },
        },
    ]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"topologyKey": zone, "labelSelector": {"matchLabels": {"app": "db"}}}
    ]
    assert aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "role", "operator": "Exists"}]}]
    }
    # the pod template holds one affinity key, with one podAntiAffinity in it
    text = manifests_render.template(
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=10",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".podAffinityTerm.topologyKey=kubernetes.io/hostname",
    )["deployment.yaml"]
    assert text.count("podAntiAffinity:") == 1 and text.count("affinity:") == 1


def notes(tmp_path: Path, *settings: str) -> str:
    """What `helm install` prints after installing (NOTES.txt), without a cluster."""
    home = tmp_path / "helm-home"
    env = {
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "PATH": "/usr/bin:/bin",
    }
    args = [str(helm()), "install", "troupe", str(manifests_render.CHART), "--dry-run=client"]
    args += ["--namespace", "troupe-system"]
    for s in settings:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout
    return out[out.index("NOTES:") :]


@pytest.mark.parametrize(
    ("settings", "names", "replicas"),
    [
        pytest.param((), ["troupe-scheduler"], 2, id="default"),
        pytest.param(("schedulerName=gang-scheduler",), ["gang-scheduler"], 2, id="name"),
        pytest.param(
            (
                "config.profiles[0].schedulerName=gangs",
                "config.profiles[1].schedulerName=batch",
                "leaderElection.enabled=false",
            ),
            ["gangs", "batch"],
            1,
            id="profiles",
        ),
        pytest.param(
            ("config.profiles[0].percentageOfNodesToScore=50",),
            ["troupe-scheduler"],  # a lone profile without a name: Troupe's default
            2,
            id="lone-profile-without-name",
        ),
    ],
)
def test_notes_name_the_configured_profiles(
    tmp_path: Path, settings: tuple[str, ...], names: list[str], replicas: int
) -> None:
    out = notes(tmp_path, *settings)
    assert f"({replicas} replica(s)" in out
    assert f"spec.schedulerName ({', '.join(names)}):" in out
    assert f"schedulerName: {names[0]}\n" in out
    named = " ".join(line for line in out.splitlines() if "schedulerName" in line)
    for other in {"troupe-scheduler", "gang-scheduler", "gangs", "batch"} - set(names):
        assert other not in named


def test_the_liveness_probe_outlasts_the_longest_cycle_leader_election_keeps() -> None:
    """/livez is answered on the scheduling loop; a replica busy with one pod's
    cycle keeps its Lease for up to MAX_CYCLE_SECONDS, so the kubelet must not
    restart it sooner (the default probe failed after ~30 s)."""
    from troupe.operator.leader import MAX_CYCLE_SECONDS

    (container,) = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"]
    probe = container["livenessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] > MAX_CYCLE_SECONDS
    assert probe["timeoutSeconds"] >= 10
