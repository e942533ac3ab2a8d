"""Input for timing `troupe simulate` end to end: a cluster as kubectl prints it.

`kubectl get nodes,pods -A -o yaml` (or `-o json`) prints a `kind: List` whose
items carry everything the API server stores: labels, annotations, uid,
resourceVersion, managedFields, ownerReferences, full container specs with
probes, environment and volume mounts, and status with conditions, addresses
and images. The simulator reads a few fields of each and must still parse all
the rest, so this is what the intake benchmark feeds it (the templates in
workloads.py are the minimal objects scheduler_perf uses).

    python -m bench.sim_input DIR [--nodes 5000] [--running 1000] [--pending 10000]

writes DIR/cluster.yaml (Nodes and running Pods), DIR/pods.yaml (pending Pods)
and the same two as .json; and DIR/pods-text.yaml, the pending pods with long
text that kubectl folds over lines (an annotation; kube-scheduler's condition
message from an earlier attempt on a quarter of them). Output is deterministic.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

SCHEDULER = "troupe-scheduler"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
APPS = ("web", "api", "worker", "cache", "batch", "ingest", "search", "auth")
NAMESPACES = ("default", "shop", "payments", "data", "ml")
IMAGES = (
    "registry.k8s.io/pause:3.10",
    "docker.io/library/nginx:1.27.2",
    "ghcr.io/example/api:v2.14.3",
    "quay.io/prometheus/node-exporter:v1.8.2",
    "registry.k8s.io/kube-proxy:v1.31.2",
    "docker.io/library/redis:7.4.1",
    "ghcr.io/example/worker:v5.0.1",
    "registry.k8s.io/coredns/coredns:v1.11.3",
)
SIZES = (("100m", "128Mi"), ("250m", "256Mi"), ("500m", "512Mi"), ("50m", "64Mi"))


def _ts(seconds: int) -> str:
    """An RFC 3339 timestamp `seconds` after 2024-05-01T00:00:00Z (no datetime: fast)."""
    d, s = divmod(seconds, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"2024-{5 + d // 28:02d}-{1 + d % 28:02d}T{h:02d}:{m:02d}:{s:02d}Z"


def _uid(kind: int, i: int) -> str:
    x = f"{(i * 2654435761 + kind * 40503) % 2**64:016x}{i:016x}"
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:32]}"


def _managed(manager: str, op: str, ts: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": op,
        "time": ts,
    }


def node(i: int) -> dict[str, Any]:
    name = f"ip-10-{i // 250}-{i % 250}-{(i * 7) % 250}.ec2.internal"
    zone = ZONES[i % len(ZONES)]
    ts = _ts(i)
    alloc = {
        "cpu": "3920m",
        "ephemeral-storage": "95551679124",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "15896704Ki",
        "pods": "110",
    }
    cap = {**alloc, "cpu": "4", "ephemeral-storage": "104845292Ki", "memory": "16164992Ki"}
    cond = [
        {
            "lastHeartbeatTime": _ts(i + 86400),
            "lastTransitionTime": ts,
            "message": msg,
            "reason": reason,
            "status": status,
            "type": typ,
        }
        for typ, status, reason, msg in (
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            (
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        )
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": f"10.{i // 250}.{i % 250}.{(i * 7) % 250}",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{i:017x}"}),
            },
            "creationTimestamp": ts,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": "m6i.xlarge",
                "beta.kubernetes.io/os": "linux",
                "failure-domain.beta.kubernetes.io/region": "us-east-1",
                "failure-domain.beta.kubernetes.io/zone": zone,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m6i.xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": zone,
            },
            "managedFields": [
                _managed(
                    "kubelet",
                    "Update",
                    ts,
                    {
                        "f:metadata": {
                            "f:annotations": {".": {}, "f:node.alpha.kubernetes.io/ttl": {}},
                            "f:labels": {".": {}, "f:kubernetes.io/hostname": {}},
                        },
                        "f:spec": {"f:providerID": {}},
                    },
                ),
                _managed(
                    "kubelet",
                    "Update",
                    _ts(i + 86400),
                    {"f:status": {"f:conditions": {}, "f:images": {}, "f:nodeInfo": {}}},
                ),
            ],
            "name": name,
            "resourceVersion": str(1000000 + i),
            "uid": _uid(1, i),
        },
        "spec": {
            "podCIDR": f"100.{64 + i // 256}.{i % 256}.0/24",
            "podCIDRs": [f"100.{64 + i // 256}.{i % 256}.0/24"],
            "providerID": f"aws:///{zone}/i-{i:017x}",
        },
        "status": {
            "addresses": [
                {"address": f"10.{i // 250}.{i % 250}.{(i * 7) % 250}", "type": "InternalIP"},
                {"address": name, "type": "InternalDNS"},
                {"address": name, "type": "Hostname"},
            ],
            "allocatable": alloc,
            "capacity": cap,
            "conditions": cond,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [
                {"names": [img, f"{img.split(':')[0]}@sha256:{_uid(3, k)}"], "sizeBytes": 1000 * k}
                for k, img in enumerate(IMAGES)
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": _uid(4, i),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.112-122.189.amzn2023.x86_64",
                "kubeProxyVersion": "v1.31.2",
                "kubeletVersion": "v1.31.2",
                "machineID": _uid(5, i).replace("-", ""),
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023.6.20241031",
                "systemUUID": _uid(6, i),
            },
        },
    }


def node_name(i: int) -> str:
    return f"ip-10-{i // 250}-{i % 250}-{(i * 7) % 250}.ec2.internal"


def pod(i: int, *, running_on: str | None = None) -> dict[str, Any]:
    """Pod i; pending (schedulerName troupe-scheduler) unless running_on names its node."""
    app = APPS[i % len(APPS)]
    ns = NAMESPACES[i % len(NAMESPACES)]
    rs_hash = f"{(i // 50) * 2654435761 % 16**10:010x}"[:10]
    name = f"{app}-{rs_hash}-{_uid(7, i)[-5:]}"
    cpu, mem = SIZES[i % len(SIZES)]
    ts = _ts(200000 + i)
    image = IMAGES[i % len(IMAGES)]
    containers: list[dict[str, Any]] = [
        {
            "args": ["--port=8080", f"--app={app}", "--log-level=info"],
            "env": [
                {"name": "APP", "value": app},
                {
                    "name": "POD_NAME",
                    "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
                },
                {
                    "name": "POD_NAMESPACE",
                    "valueFrom": {
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
                    },
                },
            ],
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "livenessProbe": {
                "failureThreshold": 3,
                "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                "periodSeconds": 10,
                "successThreshold": 1,
                "timeoutSeconds": 1,
            },
            "name": app,
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
            "resources": {
                "limits": {"memory": mem},
                "requests": {"cpu": cpu, "memory": mem},
            },
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [
                {
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "name": "kube-api-access-x7k2p",
                    "readOnly": True,
                }
            ],
        }
    ]
    if i % 3 == 0:
        containers.append(
            {
                "image": "docker.io/envoyproxy/envoy:v1.31.2",
                "imagePullPolicy": "IfNotPresent",
                "name": "envoy",
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        )
    spec: dict[str, Any] = {
        "containers": containers,
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": SCHEDULER if running_on is None else "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
        ],
        "volumes": [
            {
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                "name": "kube-root-ca.crt",
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                        "path": "namespace",
                                    }
                                ]
                            }
                        },
                    ],
                },
            }
        ],
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if running_on is not None:
        spec["nodeName"] = running_on
        status = {
            "conditions": [
                {"lastProbeTime": None, "lastTransitionTime": ts, "status": "True", "type": t}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "containerID": f"containerd://{_uid(8, i).replace('-', '')}",
                    "image": c["image"],
                    "imageID": f"{c['image'].split(':')[0]}@sha256:{_uid(9, i).replace('-', '')}",
                    "lastState": {},
                    "name": c["name"],
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": ts}},
                }
                for c in containers
            ],
            "hostIP": "10.0.0.1",
            "phase": "Running",
            "podIP": f"100.64.{i // 256 % 256}.{i % 256}",
            "podIPs": [{"ip": f"100.64.{i // 256 % 256}.{i % 256}"}],
            "qosClass": "Burstable",
            "startTime": ts,
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2024-04-30T12:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
            },
            "creationTimestamp": ts,
            "generateName": f"{app}-{rs_hash}-",
            "labels": {
                "app.kubernetes.io/name": app,
                "app.kubernetes.io/part-of": "shop",
                "pod-template-hash": rs_hash,
            },
            "managedFields": [
                _managed(
                    "kube-controller-manager",
                    "Update",
                    ts,
                    {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app.kubernetes.io/name": {}},
                            "f:ownerReferences": {
                                ".": {},
                                f'k:{{"uid":"{_uid(10, i // 50)}"}}': {},
                            },
                        },
                        "f:spec": {
                            "f:containers": {f'k:{{"name":"{app}"}}': {".": {}, "f:image": {}}}
                        },
                    },
                )
            ],
            "name": name,
            "namespace": ns,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": "ReplicaSet",
                    "name": f"{app}-{rs_hash}",
                    "uid": _uid(10, i // 50),
                }
            ],
            "resourceVersion": str(2000000 + i),
            "uid": _uid(2, i),
        },
        "spec": spec,
        "status": status,
    }


def kube_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def cluster(nodes: int, running: int) -> dict[str, Any]:
    """Nodes and running pods (one per node in turn), as one List."""
    items = [node(i) for i in range(nodes)]
    items += [pod(1_000_000 + i, running_on=node_name(i % nodes)) for i in range(running)]
    return kube_list(items)


def pending(n: int, text: bool = False) -> dict[str, Any]:
    return kube_list([with_text(pod(i), i) if text else pod(i) for i in range(n)])


def with_text(p: dict[str, Any], i: int) -> dict[str, Any]:
    """Pod i with long text that kubectl folds over lines: an annotation, and on a
    quarter of the pods kube-scheduler's condition from an earlier attempt."""
    md, app, ns = p["metadata"], APPS[i % len(APPS)], NAMESPACES[i % len(NAMESPACES)]
    md["annotations"]["example.com/description"] = (
        f"The {app} tier of the {ns} namespace, owned by team {APPS[(i + 3) % len(APPS)]}, "
        "scaled between 3 and 30 replicas by its autoscaler, paged at 99.9 percent availability"
    )
    if i % 4 == 0:
        p["status"]["conditions"] = [
            {
                "lastProbeTime": None,
                "lastTransitionTime": md["creationTimestamp"],
                "message": "0/5000 nodes are available: 1667 node(s) didn't match Pod's node "
                "affinity/selector, 3333 Insufficient cpu. preemption: 0/5000 nodes are "
                "available: 5000 No preemption victims found for incoming pod.",
                "reason": "Unschedulable",
                "status": "False",
                "type": "PodScheduled",
            }
        ]
    return p


def write(
    out: Path, nodes: int = 5000, running: int = 1000, pods: int = 10000
) -> dict[str, list[Path]]:
    """Write cluster and pods files, YAML and JSON, and the pods with long text
    (pods-text.yaml). Returns {"yaml": [...], "json": [...], "yaml+text": [...]}."""
    out.mkdir(parents=True, exist_ok=True)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    files: dict[str, list[Path]] = {"yaml": [], "json": [], "yaml+text": []}
    for stem, obj in (("cluster", cluster(nodes, running)), ("pods", pending(pods))):
        y, j = out / f"{stem}.yaml", out / f"{stem}.json"
        with y.open("w") as f:  # as kubectl prints: block style, keys sorted, 80 columns
            yaml.dump(obj, f, Dumper=dumper, default_flow_style=False, sort_keys=True)
        j.write_text(json.dumps(obj, indent=4, sort_keys=True) + "\n")
        files["yaml"].append(y)
        files["json"].append(j)
    text = out / "pods-text.yaml"
    with text.open("w") as f:
        yaml.dump(pending(pods, text=True), f, Dumper=dumper, default_flow_style=False)
    files["yaml+text"] = [files["yaml"][0], text]
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("dir", type=Path)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--running", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=10000)
    args = ap.parse_args(argv)
    for kind, paths in write(args.dir, args.nodes, args.running, args.pending).items():
        for p in paths:
            print(f"{kind}: {p} ({p.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
