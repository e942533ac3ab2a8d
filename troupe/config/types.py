"""The configuration's records and constants, and the one error it raises."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from troupe.api.types import IsolatedCPU
from troupe.framework.features import Features
from troupe.framework.interface import (
    EXTENSION_POINTS,
    PluginSpec,
)

API_VERSION: Final = "kubescheduler.config.k8s.io/v1"
KIND: Final = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME: Final = "troupe-scheduler"
MULTI_POINT: Final = "multiPoint"
ALL: Final = "*"

# Extension point names in file order (multiPoint is expanded into these).
POINTS: Final = tuple(EXTENSION_POINTS)

# kube-scheduler's in-tree plugins (framework/plugins/names). Those missing from
# the registry may be disabled or configured, but not enabled.
KUBE_SCHEDULER_PLUGINS: Final = frozenset(
    {
        "PrioritySort",
        "DefaultBinder",
        "DefaultPreemption",
        "DynamicResources",
        "ImageLocality",
        "InterPodAffinity",
        "NodeAffinity",
        "NodeName",
        "NodePorts",
        "NodeResourcesBalancedAllocation",
        "NodeResourcesFit",
        "NodeUnschedulable",
        "NodeVolumeLimits",
        "AzureDiskLimits",
        "CinderLimits",
        "EBSLimits",
        "GCEPDLimits",
        "PodTopologySpread",
        "SchedulingGates",
        "TaintToleration",
        "VolumeBinding",
        "VolumeRestrictions",
        "VolumeZone",
        # Kubernetes 1.37's workload scheduling (see troupe.config.workload,
        # which reads them onto Coscheduling) and in-place resize.
        "GangScheduling",
        "TopologyPlacementGenerator",
        "PodGroupPodsCount",
        "DeferredPodScheduling",
    }
)

# As kube-scheduler's framework.MaxTotalScore: the weighted sum must fit an int64.
MAX_TOTAL_SCORE: Final = 2**63 - 1
# A plugin's weight is an int32 in kube-scheduler's API (its validation sets no
# other bound; 0 means 1, and the total is checked against MAX_TOTAL_SCORE).
MAX_PLUGIN_WEIGHT: Final = 2**31 - 1
# Resources that are not extended resources, so cannot be the isolated-CPU one.
NATIVE_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})
QUALIFIED_PREFIX: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
QUALIFIED_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


class ConfigError(ValueError):
    """A bad configuration: one message naming the file (when there is one),
    the field and the problem, e.g. `percentageOfNodesToScore: Invalid value:
    120: must be between 0 and 100, inclusive` (the typed readers' `ParseError`,
    in the API server's words, becomes one of these in `parse_config`)."""

    def __init__(self, field_path: str, problem: str, file: str = "") -> None:
        super().__init__(": ".join(p for p in (file, field_path, problem) if p))
        self.field_path = field_path
        self.problem = problem
        self.file = file


# ---- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TroupeSettings:
    """The `troupe:` section."""

    fifo_enabled: bool = True
    fifo_min_queue_length: int = 100
    fifo_failure_streak: int = 50
    fifo_duration_seconds: float = 30.0
    unschedulable_flush_seconds: float = 300.0
    # As kube-scheduler's durationToExpireAssumedPod: 0 means never expire.
    assumed_pod_ttl_seconds: float = 0.0
    seed: int = 0
    group_cycle: bool = True
    podgroup_status_coalesce_seconds: float = 1.0
    metrics_port: int = 10259
    # Fraction in (0, 1] of a profile's highest total score (100 x the sum of its
    # Score weights); None = off. See Scheduler._score_to_watermark.
    score_watermark: float | None = None
    features: Features = field(default_factory=Features)
    # troupe.explain: keep the last decision of each pod for /debug/explain and
    # annotate pods that ask (troupe.dev/explain: "true"); off by default.
    explain_enabled: bool = False
    explain_max_pods: int = 10_000


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """kube-scheduler's `leaderElection` (LeaderElectionConfiguration), with
    Troupe's Lease name. Durations in seconds."""

    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_name: str = "troupe-scheduler"
    resource_namespace: str = "kube-system"


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """kube-scheduler's `clientConnection`: the kubeconfig ("" = in-cluster,
    then the default kubeconfig) and the API request budget."""

    kubeconfig: str = ""
    qps: float = 50.0
    burst: int = 100


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """One profile: per extension point (every key of EXTENSION_POINTS), the
    enabled plugins in the order they run, with score weights and args."""

    scheduler_name: str
    plugins: Mapping[str, tuple[PluginSpec, ...]]
    percentage_of_nodes_to_score: int | None = None  # None: the global value


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    profiles: tuple[ProfileConfig, ...]
    percentage_of_nodes_to_score: int = 0  # 0: adaptive, as kube-scheduler
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    troupe: TroupeSettings = field(default_factory=TroupeSettings)
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    client_connection: ClientConnection = field(default_factory=ClientConnection)
    # NodeResourcesFit's isolated-CPU names, read once (the cache charges by them).
    isolated: IsolatedCPU = field(default_factory=IsolatedCPU)

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None
