"""NodeDeclaredFeatures: a pod whose spec needs a node feature goes only to nodes
that declare it in status.declaredFeatures (nodedeclaredfeatures/
nodedeclaredfeatures.go, KEP-5328; GA and locked on in Kubernetes 1.37, a default
plugin).

Which features a pod needs is inferred from its spec by a registry of features,
as k8s.io/component-helpers' nodedeclaredfeatures does (features/registry.go,
AllFeatures): each feature says whether a pod needs it at scheduling time, and may
stop applying after a Kubernetes version (its MaxVersion). `FEATURES` is that
registry; only the features that infer something at scheduling are listed (the
others, such as the in-place resize ones, matter for pod updates only, which the
kubelet and admission check, not the scheduler):

* ``RestartAllContainersOnContainerExits``: a container or init container has a
  restartPolicyRules entry with action RestartAllContainers;
* ``UserNamespacesHostNetworkSupport``: spec.hostNetwork with spec.hostUsers false;
* ``VolumeBindMountOptions``: a volumeMount of a container, init container or
  ephemeral container sets bindMountOptions.

PreFilter infers the pod's features once and skips (the pod goes anywhere) when
there are none. Filter reads the node table's declared-features matrix (names x
rows): a node passes when it declares every required feature; a feature no node
declares rejects every row. The rejection is UnschedulableAndUnresolvable:
evicting pods does not give a node a feature.

Queueing hint (isSchedulableAfterNodeChange, on Node Add and
UpdateNodeDeclaredFeature): a node added, or one whose declared features changed
(compared in order, as upstream's slices.Equal), may help. Upstream also hints the
pod's own update (TargetPod Update: queue when its inferred features changed);
Troupe's queue already retries a pending pod whose spec changed (kube's
isPodUpdated), so that hint would narrow nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from troupe.api.types import Node, Pod
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.filtering import FilterResult
from troupe.framework.interface import (
    BoolArray,
    EnqueueExtensions,
    FilterPlugin,
    IntpArray,
    NoArgs,
    PreFilterPlugin,
    PreFilterResult,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status

ERR_REASON_UNSATISFIED_REQUIREMENTS: Final = "node(s) didn't match Pod's required features"
_STATE_KEY: Final = "PreFilterNodeDeclaredFeatures"

Version = tuple[int, int, int]
# The Kubernetes release whose registry `FEATURES` is, against which a feature's
# max_version is compared (upstream: the scheduler's own version).
KUBERNETES_VERSION: Final[Version] = (1, 37, 0)

RESTART_ALL_CONTAINERS: Final = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK: Final = "UserNamespacesHostNetworkSupport"
VOLUME_BIND_MOUNT_OPTIONS: Final = "VolumeBindMountOptions"


@dataclass(frozen=True, slots=True)
class NodeFeature:
    """One feature of the registry: its name as nodes declare it, whether a pod
    needs it to be scheduled, and the last release it applies to (None: every
    release)."""

    name: str
    infer_for_scheduling: Callable[[Pod], bool]
    max_version: Version | None = None


def _restart_all_containers(pod: Pod) -> bool:
    """restartallcontainers/restart_all_containers.go."""
    return "RestartAllContainers" in pod.restart_rule_actions


def _user_namespaces_host_network(pod: Pod) -> bool:
    """usernamespaceshostnetwork/user_namespaces_host_network.go."""
    return pod.host_network and pod.host_users is False


def _volume_bind_mount_options(pod: Pod) -> bool:
    """volumebindmountoptions/feature.go."""
    return pod.bind_mount_options


FEATURES: Final = (
    NodeFeature(RESTART_ALL_CONTAINERS, _restart_all_containers),
    NodeFeature(USER_NAMESPACES_HOST_NETWORK, _user_namespaces_host_network),
    NodeFeature(VOLUME_BIND_MOUNT_OPTIONS, _volume_bind_mount_options),
)


class NodeDeclaredFeatures(NoArgs, PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME: Final = "NodeDeclaredFeatures"
    # Its PreFilter state depends on the pod only (see
    # troupe.framework.interface.pre_filter_is_node_local).
    PRE_FILTER_NODE_LOCAL: Final = True

    def __init__(
        self,
        features: Sequence[NodeFeature] = FEATURES,
        version: Version = KUBERNETES_VERSION,
    ) -> None:
        # Sorted by name, as upstream's Framework keeps its registry.
        self.features = tuple(sorted(features, key=lambda f: f.name))
        self.version = version

    def required_features(self, pod: Pod) -> tuple[str, ...]:
        """The features `pod` needs (upstream's InferForPodScheduling), by name."""
        return tuple(
            f.name
            for f in self.features
            if (f.max_version is None or self.version <= f.max_version)
            and f.infer_for_scheduling(pod)
        )

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        required = self.required_features(pod)
        if not required:
            return None, SKIP
        state.write(_STATE_KEY, required)
        return None, SUCCESS

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        required = state.read(_STATE_KEY, tuple)
        cols = [nodes.feature_ids.get(name) for name in required]
        if any(c is None for c in cols):
            missing: BoolArray = np.ones(len(rows), dtype=bool)
        else:
            declared = nodes.feature_matrix[np.ix_(rows, np.array(cols, dtype=np.intp))]
            missing = ~np.logical_and.reduce(declared, axis=1)
        if not missing.any():
            return FilterResult.all_pass(len(rows))
        return FilterResult.single(
            ERR_REASON_UNSATISFIED_REQUIREMENTS, missing, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        )

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE
                ),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """As nodedeclaredfeatures.go (an object that is not a Node queues, as
        upstream's error path)."""
        if not isinstance(new, Node) or (old is not None and not isinstance(old, Node)):
            return QueueingHint.QUEUE
        if old is not None and old.declared_features == new.declared_features:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE
