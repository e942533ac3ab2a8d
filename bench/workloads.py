"""scheduler_perf-like workloads: node and pod templates, generated as dicts.

Templates follow kube-scheduler's test/integration/scheduler_perf config
(node-default.yaml: 4 cpu, 32Gi, 110 pods; pod-default.yaml: 100m, 500Mi).
"""

from __future__ import annotations

from typing import Any

SCHEDULER = "troupe-scheduler"


def node(i: int, zones: int = 3) -> dict[str, Any]:
    name = f"node-{i}"
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": f"zone-{i % zones}",
            },
        },
        "spec": {},
        "status": {"allocatable": dict(alloc), "capacity": dict(alloc)},
    }


def pod_group(name: str, min_member: int, namespace: str = "sched-perf") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-pg-{name}",
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": {"minMember": min_member},
    }


def elastic_quota(namespace: str, min_: dict[str, str], max_: dict[str, str]) -> dict[str, Any]:
    """scheduler-plugins' ElasticQuota of a namespace (named after it)."""
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": namespace, "namespace": namespace, "uid": f"uid-eq-{namespace}"},
        "spec": {"min": dict(min_), "max": dict(max_)},
    }


def spreading(when: str) -> list[dict[str, Any]]:
    """scheduler_perf's pod-with-topology-spreading: hostname and zone, maxSkew 5."""
    return [
        {
            "maxSkew": 5,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"foo": "bar"}},
        }
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]


def pod(
    i: int,
    prefix: str = "pod",
    node_name: str | None = None,
    group: str | None = None,
    spread: str | None = None,
    affinity: bool = False,
    pod_affinity: str | None = None,
    namespace: str = "sched-perf",
) -> dict[str, Any]:
    name = f"{prefix}-{i}"
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    md: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if group:
        md["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    if spread:
        md["labels"] = {"foo": "bar"}
        spec["topologySpreadConstraints"] = spreading(spread)
    if pod_affinity == "anti":  # scheduler_perf's pod-with-pod-anti-affinity
        md["labels"] = {"color": "green", "name": "test"}
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"color": "green"}},
                        "topologyKey": "kubernetes.io/hostname",
                        "namespaces": ["sched-perf"],
                    }
                ]
            }
        }
    elif pod_affinity == "affinity":  # scheduler_perf's pod-with-pod-affinity
        md["labels"] = {"foo": ""}
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"foo": ""}},
                        "topologyKey": "topology.kubernetes.io/zone",
                        "namespaces": ["sched-perf"],
                    }
                ]
            }
        }
    if affinity:  # scheduler_perf's pod-with-node-affinity
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "topology.kubernetes.io/zone",
                                    "operator": "In",
                                    "values": ["zone-0", "zone-1"],
                                }
                            ]
                        }
                    ]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def zone_volume(i: int, zones: int = 3) -> tuple[dict[str, Any], dict[str, Any]]:
    """A PV bound to claim `data-<i>`, with node affinity to one zone (as CSI
    migration writes it for a cloud disk), and that claim: scheduler_perf's
    SchedulingInTreePVs/SchedulingCSIPVs pairs, pre-bound."""
    name, claim = f"pv-{i}", f"data-{i}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{i}"},
            "claimRef": {"namespace": "sched-perf", "name": claim, "uid": f"uid-{claim}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "topology.kubernetes.io/zone",
                                    "operator": "In",
                                    "values": [f"zone-{i % zones}"],
                                }
                            ]
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Bound"},
    }
    return pv, claim_obj(claim, "", volume=name)


def claim_obj(name: str, storage_class: str, volume: str = "") -> dict[str, Any]:
    md: dict[str, Any] = {
        "name": name,
        "namespace": "sched-perf",
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "annotations": {"pv.kubernetes.io/bind-completed": "yes"} if volume else {},
    }
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": md,
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def wffc_class(name: str = "csi-wffc") -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "csi.example.com",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def with_claim(obj: dict[str, Any], claim: str) -> dict[str, Any]:
    obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return obj


# ---- Dynamic Resource Allocation (scheduler_perf's dra/ templates) -----------------

DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_API = "resource.k8s.io/v1"


def device_class() -> dict[str, Any]:
    """templates/deviceclass.yaml: the test driver's devices."""
    return {
        "apiVersion": DRA_API,
        "kind": "DeviceClass",
        "metadata": {"name": "test-class"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
    }


def resource_slice(i: int, devices: int) -> dict[str, Any]:
    """The test driver's slice for node-i: `devices` devices (maxClaimsPerNode)."""
    node = f"node-{i}"
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRA_DRIVER}", "resourceVersion": "1"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"device-{d:03d}"} for d in range(devices)],
        },
    }


def partitioned_slices(i: int) -> list[dict[str, Any]]:
    """One 80Gi GPU on node-i published as partitionable devices: the whole
    GPU, 2 halves, 4 quarters and 8 eighths, all drawing on the counter set
    of one slice of the pool (the devices are in another)."""
    node = f"node-{i}"
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    sizes = [("whole", 1, 80), ("half", 2, 40), ("quarter", 4, 20), ("eighth", 8, 10)]
    devices = [
        {
            "name": f"gpu-{size}-{k}",
            "attributes": {"size": {"string": size}},
            "consumesCounters": [
                {"counterSet": "gpu-0", "counters": {"memory": {"value": f"{gib}Gi"}}}
            ],
        }
        for size, n, gib in sizes
        for k in range(n)
    ]
    return [
        {
            "apiVersion": DRA_API,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRA_DRIVER}-counters", "resourceVersion": "1"},
            "spec": {
                "driver": DRA_DRIVER,
                "nodeName": node,
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
            },
        },
        {
            "apiVersion": DRA_API,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRA_DRIVER}", "resourceVersion": "1"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node, "pool": pool, "devices": devices},
        },
    ]


def resource_claim(
    name: str,
    pod_name: str,
    pod_uid: str,
    allocated: tuple[int, int] | None = None,
    selector: str = "",
) -> dict[str, Any]:
    """A claim as the resourceclaim controller makes it from
    templates/resourceclaimtemplate.yaml (one device of the class) for the pod;
    `allocated` (node, device): already allocated to it and reserved for it, as
    scheduler_perf's allocResourceClaims op leaves the init claims."""
    obj: dict[str, Any] = {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": "sched-perf",
            "uid": f"uid-claim-{name}",
            "resourceVersion": "1",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": pod_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]
            }
        },
    }
    if selector:
        exactly = obj["spec"]["devices"]["requests"][0]["exactly"]
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if allocated is not None:
        node, d = allocated
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "req-0",
                            "driver": DRA_DRIVER,
                            "pool": f"node-{node}",
                            "device": f"device-{d:03d}",
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [f"node-{node}"],
                                }
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
        }
    return obj


def with_resource_claim(obj: dict[str, Any], claim: str) -> dict[str, Any]:
    """templates/pod-with-claim-template.yaml: the pod's claim "resource" from the
    template, created (status.resourceClaimStatuses names it)."""
    obj["spec"]["resourceClaims"] = [
        {"name": "resource", "resourceClaimTemplateName": "test-claim-template"}
    ]
    obj.setdefault("status", {})["resourceClaimStatuses"] = [
        {"name": "resource", "resourceClaimName": claim}
    ]
    return obj
