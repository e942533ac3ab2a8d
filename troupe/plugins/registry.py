"""The registry of in-tree plugins and the default profile's plugin set.

Names are kube-scheduler's, so a KubeSchedulerConfiguration reads the same.
The default set, its order (which is the order filters run in) and weights are
kube-scheduler's v1 defaults (apis/config/v1/default_plugins.go) restricted to
the plugins Troupe has, plus Coscheduling, which takes PrioritySort's place as
the queueSort plugin (it sorts lone pods by priority too) so that PodGroups
work out of the box.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from troupe.framework.interface import PluginSpec
from troupe.plugins.balanced_allocation import NodeResourcesBalancedAllocation
from troupe.plugins.capacity_fair_sort import CapacityFairSort
from troupe.plugins.capacity_scheduling import CapacityScheduling
from troupe.plugins.coscheduling import Coscheduling
from troupe.plugins.default_binder import DefaultBinder
from troupe.plugins.default_preemption import DefaultPreemption
from troupe.plugins.dynamic_resources import DynamicResources
from troupe.plugins.image_locality import ImageLocality
from troupe.plugins.inter_pod_affinity import InterPodAffinity
from troupe.plugins.node_affinity import NodeAffinity
from troupe.plugins.node_declared_features import NodeDeclaredFeatures
from troupe.plugins.node_name import NodeName
from troupe.plugins.node_ports import NodePorts
from troupe.plugins.node_resources_fit import NodeResourcesFit
from troupe.plugins.node_unschedulable import NodeUnschedulable
from troupe.plugins.node_volume_limits import NodeVolumeLimits
from troupe.plugins.pod_topology_spread import PodTopologySpread
from troupe.plugins.queuesort import PrioritySort
from troupe.plugins.scheduling_gates import SchedulingGates
from troupe.plugins.taint_toleration import TaintToleration
from troupe.plugins.volume_binding import VolumeBinding
from troupe.plugins.volume_restrictions import VolumeRestrictions
from troupe.plugins.volume_zone import VolumeZone

Registry = Mapping[str, type]

IN_TREE: Final[Registry] = {
    cls.NAME: cls
    for cls in (
        PrioritySort,
        SchedulingGates,
        NodeUnschedulable,
        NodeName,
        TaintToleration,
        NodeAffinity,
        NodePorts,
        NodeResourcesFit,
        VolumeRestrictions,
        NodeVolumeLimits,
        VolumeBinding,
        VolumeZone,
        PodTopologySpread,
        InterPodAffinity,
        DynamicResources,
        DefaultPreemption,
        NodeResourcesBalancedAllocation,
        ImageLocality,
        DefaultBinder,
        NodeDeclaredFeatures,
        Coscheduling,
        CapacityScheduling,
        CapacityFairSort,
    )
}

# multiPoint defaults, in kube-scheduler's order, with its score weights.
DEFAULT_MULTI_POINT: Final[tuple[PluginSpec, ...]] = (
    PluginSpec("SchedulingGates"),
    PluginSpec("Coscheduling"),
    PluginSpec("NodeUnschedulable"),
    PluginSpec("NodeName"),
    PluginSpec("TaintToleration", weight=3),
    PluginSpec("NodeAffinity", weight=2),
    PluginSpec("NodePorts"),
    PluginSpec("NodeResourcesFit", weight=1),
    PluginSpec("VolumeRestrictions"),
    PluginSpec("NodeVolumeLimits"),
    PluginSpec("VolumeBinding"),
    PluginSpec("VolumeZone"),
    PluginSpec("PodTopologySpread", weight=2),
    PluginSpec("InterPodAffinity", weight=2),
    PluginSpec("DynamicResources", weight=2),
    PluginSpec("DefaultPreemption"),
    PluginSpec("NodeResourcesBalancedAllocation", weight=1),
    PluginSpec("ImageLocality", weight=1),
    PluginSpec("DefaultBinder"),
    # Appended by kube-scheduler's applyFeatureGates (GA in 1.37).
    PluginSpec("NodeDeclaredFeatures"),
)
