"""Small builders for test objects: Kubernetes dicts, parsed by the real parser.

    make_pod("p").req(cpu="1", memory="1Gi").label("app", "web").build()
    make_node("n1").capacity(cpu="4", memory="8Gi").taint("dedicated", "gpu").build()

`.obj()` gives the dict as the API would serve it; `.build()` parses it and fails
the test if the object is invalid.
"""

from __future__ import annotations

import copy
from typing import Any

from troupe.api.parse import parse_node, parse_pod
from troupe.api.types import InvalidObject, Node, Pod

SCHEDULER = "troupe-scheduler"


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._o: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{namespace}-{name}",
                "labels": {},
                "annotations": {},
            },
            "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Pending"},
        }

    @property
    def _spec(self) -> dict[str, Any]:
        return self._o["spec"]  # type: ignore[no-any-return]

    def req(self, **resources: str | int) -> PodBuilder:
        """Requests of the (first) container; `ephemeral_storage` -> ephemeral-storage."""
        c = self._spec["containers"][0]
        r = c.setdefault("resources", {}).setdefault("requests", {})
        for k, v in resources.items():
            r[k.replace("_", "-")] = str(v)
        return self

    def ext(self, name: str, amount: str | int) -> PodBuilder:
        c = self._spec["containers"][0]
        c.setdefault("resources", {}).setdefault("requests", {})[name] = str(amount)
        return self

    def container(self, image: str = "busybox", **requests: str | int) -> PodBuilder:
        c: dict[str, Any] = {"name": f"c{len(self._spec['containers'])}", "image": image}
        if requests:
            c["resources"] = {
                "requests": {k.replace("_", "-"): str(v) for k, v in requests.items()}
            }
        self._spec["containers"].append(c)
        return self

    def init_container(self, sidecar: bool = False, **requests: str | int) -> PodBuilder:
        c: dict[str, Any] = {"name": f"i{len(self._spec.get('initContainers', []))}", "image": "x"}
        if requests:
            c["resources"] = {
                "requests": {k.replace("_", "-"): str(v) for k, v in requests.items()}
            }
        if sidecar:
            c["restartPolicy"] = "Always"
        self._spec.setdefault("initContainers", []).append(c)
        return self

    def pod_resources(
        self, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
    ) -> PodBuilder:
        """Pod-level `spec.resources` (PodLevelResources)."""
        r: dict[str, Any] = {}
        if requests is not None:
            r["requests"] = dict(requests)
        if limits is not None:
            r["limits"] = dict(limits)
        self._spec["resources"] = r
        return self

    def overhead(self, **resources: str | int) -> PodBuilder:
        self._spec["overhead"] = {k.replace("_", "-"): str(v) for k, v in resources.items()}
        return self

    def image(self, image: str) -> PodBuilder:
        self._spec["containers"][0]["image"] = image
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._o["metadata"]["labels"][key] = value
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self._o["metadata"]["annotations"][key] = value
        return self

    def isolated(self) -> PodBuilder:
        return self.annotate("troupe.dev/isolated-cpu", "true")

    def group(self, name: str) -> PodBuilder:
        return self.label("scheduling.x-k8s.io/pod-group", name)

    def scheduling_group(self, name: str) -> PodBuilder:
        """Join the native (scheduling.k8s.io) PodGroup `name`."""
        self._spec["schedulingGroup"] = {"podGroupName": name}
        return self

    def scheduler(self, name: str) -> PodBuilder:
        self._spec["schedulerName"] = name
        return self

    def node(self, name: str) -> PodBuilder:
        self._spec["nodeName"] = name
        self._o["status"]["phase"] = "Running"
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._o["status"]["phase"] = phase
        return self

    def priority(self, value: int) -> PodBuilder:
        self._spec["priority"] = value
        return self

    def priority_class(self, name: str) -> PodBuilder:
        self._spec["priorityClassName"] = name
        return self

    def created(self, ts: str) -> PodBuilder:
        """RFC 3339, e.g. 2024-01-01T00:00:00Z."""
        self._o["metadata"]["creationTimestamp"] = ts
        return self

    def node_selector(self, **labels: str) -> PodBuilder:
        self._spec.setdefault("nodeSelector", {}).update(labels)
        return self

    def required_affinity(self, *terms: dict[str, Any]) -> PodBuilder:
        """Each term is a NodeSelectorTerm dict (matchExpressions / matchFields)."""
        na = self._spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": list(terms)}
        return self

    def preferred_affinity(self, weight: int, term: dict[str, Any]) -> PodBuilder:
        na = self._spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        na.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {"weight": weight, "preference": term}
        )
        return self

    def toleration(
        self, key: str = "", value: str = "", effect: str = "", operator: str = "Equal"
    ) -> PodBuilder:
        t: dict[str, Any] = {"key": key, "operator": operator}
        if value:
            t["value"] = value
        if effect:
            t["effect"] = effect
        self._spec.setdefault("tolerations", []).append(t)
        return self

    def host_port(self, port: int, protocol: str = "TCP", host_ip: str = "") -> PodBuilder:
        p: dict[str, Any] = {"containerPort": port, "hostPort": port, "protocol": protocol}
        if host_ip:
            p["hostIP"] = host_ip
        self._spec["containers"][0].setdefault("ports", []).append(p)
        return self

    def nominated(self, node: str) -> PodBuilder:
        """status.nominatedNodeName (a preemptor waiting for its room)."""
        self._o["status"]["nominatedNodeName"] = node
        return self

    def gate(self, name: str) -> PodBuilder:
        self._spec.setdefault("schedulingGates", []).append({"name": name})
        return self

    def spec(self, **fields: Any) -> PodBuilder:
        self._spec.update(fields)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._o)

    def build(self) -> Pod:
        p = parse_pod(self.obj())
        assert not isinstance(p, InvalidObject), p.message
        return p


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._o: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": f"uid-node-{name}",
                "labels": {"kubernetes.io/hostname": name},
            },
            "spec": {},
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            },
        }

    def capacity(self, **resources: str | int) -> NodeBuilder:
        """Sets allocatable (and capacity); `ephemeral_storage` -> ephemeral-storage."""
        alloc = {k.replace("_", "-"): str(v) for k, v in resources.items()}
        self._o["status"]["allocatable"] = dict(alloc)
        self._o["status"]["capacity"] = dict(alloc)
        return self

    def ext(self, name: str, amount: str | int) -> NodeBuilder:
        self._o["status"]["allocatable"][name] = str(amount)
        self._o["status"]["capacity"][name] = str(amount)
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._o["metadata"]["labels"][key] = value
        return self

    def zone(self, zone: str) -> NodeBuilder:
        return self.label("topology.kubernetes.io/zone", zone)

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        t = {"key": key, "effect": effect}
        if value:
            t["value"] = value
        self._o["spec"].setdefault("taints", []).append(t)
        return self

    def unschedulable(self) -> NodeBuilder:
        self._o["spec"]["unschedulable"] = True
        return self

    def image(self, name: str, size_bytes: int) -> NodeBuilder:
        self._o["status"].setdefault("images", []).append(
            {"names": [name], "sizeBytes": size_bytes}
        )
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._o)

    def build(self) -> Node:
        n = parse_node(self.obj())
        assert not isinstance(n, InvalidObject), n.message
        return n


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def table_of(nodes: list[Node], pods: list[Pod] = ()):  # type: ignore[assignment]
    """A NodeTable holding `nodes` with `pods` (with spec.nodeName) charged."""
    from troupe.core.snapshot import IsolatedCPU, NodeTable, pod_charge

    t = NodeTable()
    for n in nodes:
        row = t.allocate_row(n.name)
        t.set_node(row, n)
    iso = IsolatedCPU()
    for p in pods:
        t.charge(t.row_of[p.node_name], p, pod_charge(p, iso), +1)
    return t
