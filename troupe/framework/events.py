"""Cluster events and queueing hints: what happened to which kind of object, and
how a plugin says whether it may make a waiting pod schedulable (kube-scheduler's
framework/types.go ClusterEvent, ActionType and QueueingHint)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from troupe.api.types import Pod


class EventResource(enum.StrEnum):
    POD = "Pod"
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    NODE = "Node"
    POD_GROUP = "PodGroup"
    COMPOSITE_POD_GROUP = "CompositePodGroup"
    PRIORITY_CLASS = "PriorityClass"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    STORAGE_CLASS = "StorageClass"
    CSI_NODE = "CSINode"
    CSI_DRIVER = "CSIDriver"
    CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
    RESOURCE_CLAIM = "ResourceClaim"
    RESOURCE_SLICE = "ResourceSlice"
    DEVICE_CLASS = "DeviceClass"
    DEVICE_TAINT_RULE = "DeviceTaintRule"
    ELASTIC_QUOTA = "ElasticQuota"
    WILDCARD = "*"


class ActionType(enum.IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_POD_LABEL = 128
    UPDATE_POD_SCALE_DOWN = 256
    UPDATE_POD_TOLERATION = 512
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1024
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 2048
    UPDATE_OTHER = 4096
    UPDATE_NODE_DECLARED_FEATURE = 8192
    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_NODE_ANNOTATION
        | UPDATE_NODE_DECLARED_FEATURE
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_POD_TOLERATION
        | UPDATE_POD_SCHEDULING_GATES_ELIMINATED
        | UPDATE_POD_GENERATED_RESOURCE_CLAIM
        | UPDATE_OTHER
    )
    ALL = ADD | DELETE | UPDATE


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: EventResource
    action: ActionType
    label: str = ""

    def matches(self, incoming: ClusterEvent) -> bool:
        """Whether this registered event covers `incoming` (kube-scheduler's Match)."""
        if self.resource is EventResource.WILDCARD:
            return bool(self.action & incoming.action)
        same = self.resource == incoming.resource or (
            self.resource is EventResource.POD
            and incoming.resource in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD)
        )
        return same and bool(self.action & incoming.action)


class QueueingHint(enum.Enum):
    SKIP = 0
    QUEUE = 1


QueueingHintFn = Callable[[Pod, Any, Any], QueueingHint]
"""(the pod waiting, old object or None, new object or None) -> hint."""


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: QueueingHintFn | None = None  # None: always QUEUE
