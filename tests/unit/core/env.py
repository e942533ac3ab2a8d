"""A scheduler on the in-memory cluster and a virtual clock, for the tests of
troupe.core's parts: objects go in as the watch would deliver them, and the
tests read what the scheduler wrote (bindings, conditions, events, the queue)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.builders import make_node
from troupe.api.types import PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster, RecordedEvent
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE


class Env:
    """One scheduler, its cluster and clock. A bind comes back as the pod's
    bound event, as the API's watch would deliver it."""

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        registry: Mapping[str, type] = IN_TREE,
        feed_binds: bool = True,
    ) -> None:
        self.clock = VirtualClock(start=1_700_000_000.0)
        self.cluster = InMemoryCluster()
        self.s = Scheduler(
            parse_config(dict(config or {}), registry), self.cluster, self.clock, registry=registry
        )
        if feed_binds:
            self.cluster.on_pod_bound = lambda key, node: self.s.on_pod(
                copy.deepcopy(self.cluster.pods[key])
            )

    def node(self, name: str, cpu: str = "4", **labels: str) -> None:
        b = make_node(name).capacity(cpu=cpu, memory="8Gi", pods="110")
        for k, v in labels.items():
            b = b.label(k, v)
        self.s.on_node(b.obj())

    def pod(self, obj: dict[str, Any]) -> PodKey:
        """A pod as its watch event: the cluster keeps its own copy."""
        md = obj["metadata"]
        key = PodKey(f"{md['namespace']}/{md['name']}")
        self.cluster.pods[key] = copy.deepcopy(obj)
        self.s.on_pod(copy.deepcopy(obj))
        return key

    def pod_group(
        self, name: str, min_member: int, annotations: Mapping[str, str] | None = None
    ) -> str:
        """A scheduler-plugins PodGroup default/`name`; returns its key."""
        md: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-pg-{name}"}
        if annotations:
            md["annotations"] = dict(annotations)
        obj = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": md,
            "spec": {"minMember": min_member},
        }
        key = f"default/{name}"
        self.cluster.pod_groups[key] = obj
        self.s.on_pod_group(copy.deepcopy(obj))
        return key

    async def run(self) -> int:
        """Scheduling cycles until the activeQ is empty, then every binding
        cycle that can finish without time passing. Returns how many cycles."""
        n = 0
        while self.s.schedule_one():
            n += 1
        await self.s.settle()
        return n

    def later(self, seconds: float) -> None:
        """Time passes: timers fire and the queue moves what is due."""
        self.clock.advance_by(seconds)
        self.s.queue.flush()

    def node_of(self, key: PodKey) -> str | None:
        return self.cluster.pods[key].get("spec", {}).get("nodeName") or None

    def events(self, key: PodKey, reason: str | None = None) -> list[RecordedEvent]:
        return [e for e in self.cluster.events if e.pod == key and reason in (None, e.reason)]

    def condition(self, key: PodKey) -> dict[str, str] | None:
        return self.cluster.conditions.get(key)
