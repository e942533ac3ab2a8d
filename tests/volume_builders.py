"""Builders for storage objects (PVs, claims, classes, CSINodes, capacities)
and a small world to run the volume plugins against: a cache with nodes, its
volume store, a snapshot and a Handle."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.builders import make_node
from tests.unit.plugins.conftest import FakeLister
from troupe.api.parse import parse_node, parse_pod
from troupe.api.storage import parse_storage_object
from troupe.api.types import Node, NodeName, Pod
from troupe.core.cache import Cache
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.snapshot import Snapshot
from troupe.framework.cycle_state import CycleState
from troupe.framework.filtering import FilterResult
from troupe.framework.handle import Handle
from troupe.framework.waiting_pods import WaitingPods

HOSTNAME = "kubernetes.io/hostname"


def hostname_affinity(*nodes: str) -> dict[str, Any]:
    return {
        "required": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": list(nodes)}]}
            ]
        }
    }


def pv(
    name: str,
    size: str = "1Gi",
    sc: str = "",
    node: str | None = None,
    claim: str | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    labels: dict[str, str] | None = None,
    csi: tuple[str, str] | None = None,
    phase: str = "Available",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": sc,
    }
    if node is not None:
        spec["nodeAffinity"] = hostname_affinity(node)
    if claim is not None:
        ns, _, n = claim.rpartition("/")
        spec["claimRef"] = {"namespace": ns or "default", "name": n}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "resourceVersion": "1", "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def pvc(
    name: str,
    sc: str | None = "",
    size: str = "1Gi",
    volume: str = "",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    owner_uid: str = "",
) -> dict[str, Any]:
    ann = dict(annotations or {})
    phase = "Pending"
    if volume:
        ann["pv.kubernetes.io/bind-completed"] = "yes"
        phase = "Bound"
    md: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "annotations": ann,
    }
    if owner_uid:
        md["ownerReferences"] = [
            {"kind": "Pod", "name": "x", "uid": owner_uid, "controller": True, "apiVersion": "v1"}
        ]
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": size}},
    }
    if sc is not None:
        spec["storageClassName"] = sc
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": md,
        "spec": spec,
        "status": {"phase": phase},
    }


def storage_class(
    name: str,
    provisioner: str = "kubernetes.io/no-provisioner",
    wffc: bool = True,
    zones: tuple[str, ...] = (),
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer" if wffc else "Immediate",
    }
    if zones:
        obj["allowedTopologies"] = [
            {
                "matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": list(zones)}
                ]
            }
        ]
    return obj


def csi_node(name: str, **limits: int) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {
            "drivers": [
                {"name": d.replace("_", "."), "nodeID": name, "allocatable": {"count": n}}
                for d, n in limits.items()
            ]
        },
    }


def csi_driver(name: str, capacity: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {"storageCapacity": capacity},
    }


def capacity(name: str, sc: str, size: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": sc,
        "capacity": size,
        "nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": zone}},
    }


def with_claims(obj: dict[str, Any], *claims: str) -> dict[str, Any]:
    vols = obj["spec"].setdefault("volumes", [])
    for c in claims:
        vols.append({"name": f"v-{c}", "persistentVolumeClaim": {"claimName": c}})
    return obj


def with_volume(obj: dict[str, Any], volume: dict[str, Any]) -> dict[str, Any]:
    obj["spec"].setdefault("volumes", []).append(volume)
    return obj


class World:
    """A cache with nodes and storage objects, for running one plugin."""

    def __init__(self, nodes: list[dict[str, Any]] | int = 3) -> None:
        self.cache = Cache(VirtualClock())
        self.snapshot = Snapshot()
        if isinstance(nodes, int):
            nodes = [make_node(f"n{i}").obj() for i in range(nodes)]
        for n in nodes:
            node = parse_node(n)
            assert isinstance(node, Node)
            self.cache.add_node(node)
        self.client = InMemoryCluster()
        self.handle = Handle(
            clock=VirtualClock(),
            client=self.client,
            waiting_pods=WaitingPods(),
            lister=FakeLister(),
            snapshot=lambda: self.snapshot,
            volumes=self.cache.volumes,
        )

    def add(self, *objs: dict[str, Any]) -> World:
        for o in objs:
            v = parse_storage_object(o["kind"], o)
            assert not hasattr(v, "message"), v
            self.cache.volumes.set(v)  # type: ignore[arg-type]
        return self

    def place(self, pod_obj: dict[str, Any], node: str) -> World:
        pod = parse_pod(pod_obj)
        assert isinstance(pod, Pod)
        self.cache.assume_pod(pod, NodeName(node))
        return self

    def table(self) -> Snapshot:
        self.cache.update_snapshot(self.snapshot)
        return self.snapshot

    def filter(self, plugin: Any, pod_obj: dict[str, Any]) -> dict[str, list[str]] | str:
        """Run PreFilter then Filter; the reasons per node name, or the PreFilter
        status message (prefixed with its code) when it does not pass."""
        pod = parse_pod(pod_obj)
        assert isinstance(pod, Pod)
        nodes = self.table()
        state = CycleState()
        _, st = plugin.pre_filter(state, pod, nodes)
        if st.is_skip:
            return "Skip"
        if not st.is_success:
            return f"{st.code.name}: {st.message}"
        rows = nodes.valid_rows()
        res: FilterResult = plugin.filter(state, pod, nodes, rows)
        out: dict[str, list[str]] = {}
        for i, r in enumerate(rows.tolist()):
            out[nodes.names[r]] = [res.reasons[j] for j in np.flatnonzero(res.rejected[i]).tolist()]
        return out
