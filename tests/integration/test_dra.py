"""Devices through the deployed path: a DeviceClass, a driver's ResourceSlice, a
ResourceClaim and a pod that claims it, applied with the real kubectl;
`troupe run --kubeconfig` allocates a device, writes the claim's finalizer,
allocation and reservedFor, and binds the pod where the device is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from apiserver import ApiServer
from apiserver.kubectl import KUBECTL, Kubectl
from apiserver.replica import Troupe, until
from tests.builders import make_node

pytestmark = pytest.mark.skipif(
    not KUBECTL.exists(), reason=f"kubectl not installed at {KUBECTL} (run `make install`)"
)

# The class of the fake GPU driver, and a pod "trainer" claiming one GPU by
# the claim "gpu": what the manifests below share.
GPU_CLASS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.example.com"'}
"""
TRAINER = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: gpu, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  schedulerName: troupe-scheduler
  containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m}}}]
  resourceClaims: [{name: gpu, resourceClaimName: gpu}]
"""

MANIFEST = f"""{GPU_CLASS}---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: n1-gpu.example.com}}
spec:
  driver: gpu.example.com
  nodeName: n1
  pool: {{name: n1, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: gpu-0
    attributes: {{model: {{string: a100}}}}
---{TRAINER}"""


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer()
    with srv.start_in_thread():
        yield srv


def bound(api: ApiServer, tmp_path: Path, manifest: str, pod: str) -> tuple[Kubectl, str]:
    """Three nodes, the manifest applied with kubectl, troupe run until `pod`
    is bound: kubectl, and the pod's node."""
    for i in range(3):
        api.create(make_node(f"n{i}").capacity(cpu=4, memory="8Gi", pods=10).obj())
    kubectl = Kubectl(api, tmp_path)
    kubectl.apply(manifest)
    with Troupe(tmp_path, kubeconfig=kubectl.kubeconfig) as t:
        t.wait_ready()

        def node() -> str | None:
            p = json.loads(kubectl("get", "pod", pod, "-o", "json"))
            return p["spec"].get("nodeName") or None

        return kubectl, until(node, what=f"pod {pod} bound")


def test_a_pod_claiming_a_device_is_bound_where_it_is_and_the_claim_allocated(
    api: ApiServer, tmp_path: Path
) -> None:
    kubectl, node = bound(api, tmp_path, MANIFEST, "trainer")
    assert node == "n1"
    claim = json.loads(kubectl("get", "resourceclaim", "gpu", "-o", "json"))
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    assert claim["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}
    ]
    (consumer,) = claim["status"]["reservedFor"]
    assert (consumer["resource"], consumer["name"]) == ("pods", "trainer")


EXTENDED = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  extendedResourceName: example.com/gpu
  selectors:
  - cel: {expression: 'device.driver == "gpu.example.com"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-gpu.example.com}
spec:
  driver: gpu.example.com
  nodeName: n2
  pool: {name: n2, generation: 1, resourceSliceCount: 1}
  devices: [{name: gpu-0}, {name: gpu-1}]
---
apiVersion: v1
kind: Pod
metadata: {name: legacy, namespace: default}
spec:
  schedulerName: troupe-scheduler
  containers:
  - name: c
    image: busybox
    resources: {requests: {cpu: 100m}, limits: {example.com/gpu: 2}}
"""


def test_an_extended_resource_backed_by_a_device_class_gets_a_claim_made_for_it(
    api: ApiServer, tmp_path: Path
) -> None:
    kubectl, node = bound(api, tmp_path, EXTENDED, "legacy")
    assert node == "n2"
    pod = json.loads(kubectl("get", "pod", "legacy", "-o", "json"))
    claims = json.loads(kubectl("get", "resourceclaims", "-o", "json"))["items"]
    (claim,) = claims
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["resourceClaimName"] == claim["metadata"]["name"]
    assert claim["metadata"]["name"].startswith("legacy-extended-resources-")
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    devices = sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
    assert devices == ["gpu-0", "gpu-1"]


SHARED = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: nic.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "nic.example.com" && device.allowMultipleAllocations'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n0-nic.example.com}
spec:
  driver: nic.example.com
  nodeName: n0
  pool: {name: n0, generation: 1, resourceSliceCount: 1}
  devices:
  - name: nic-0
    allowMultipleAllocations: true
    capacity:
      bandwidth:
        value: 10G
        requestPolicy: {default: 1G, validRange: {min: 1G, step: 1G}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: net, namespace: default}
spec:
  devices:
    requests:
    - name: nic
      exactly:
        deviceClassName: nic.example.com
        capacity: {requests: {bandwidth: 2500M}}
---
apiVersion: v1
kind: Pod
metadata: {name: net, namespace: default}
spec:
  schedulerName: troupe-scheduler
  containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m}}}]
  resourceClaims: [{name: nic, resourceClaimName: net}]
"""


def test_a_share_of_a_device_claims_share_is_written_with_its_share_id_and_capacity(
    api: ApiServer, tmp_path: Path
) -> None:
    """Consumable capacity through `troupe run`: the claim's allocation names
    the shared NIC, a shareID and the bandwidth taken (2500M rounded up to the
    policy's 1G steps), as kube-scheduler writes them."""
    kubectl, node = bound(api, tmp_path, SHARED, "net")
    assert node == "n0"
    claim = json.loads(kubectl("get", "resourceclaim", "net", "-o", "json"))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (
        "nic.example.com",
        "n0",
        "nic-0",
    )
    assert len(result["shareID"]) == 36
    assert result["consumedCapacity"] == {"bandwidth": "3G"}


TAINTED = f"""{GPU_CLASS}---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: n1-gpu.example.com}}
spec:
  driver: gpu.example.com
  nodeName: n1
  pool: {{name: n1, generation: 1, resourceSliceCount: 1}}
  devices: [{{name: gpu-0}}, {{name: gpu-1}}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {{name: gpu-0-ecc}}
spec:
  deviceSelector: {{driver: gpu.example.com, pool: n1, device: gpu-0}}
  taint: {{key: example.com/ecc-errors, value: "true", effect: NoSchedule}}
---{TRAINER}"""


def test_an_admins_device_taint_rule_keeps_the_pod_off_the_tainted_gpu(
    api: ApiServer, tmp_path: Path
) -> None:
    """A DeviceTaintRule applied with kubectl (resource.k8s.io/v1, found by API
    discovery) taints gpu-0: `troupe run` allocates gpu-1."""
    kubectl, node = bound(api, tmp_path, TAINTED, "trainer")
    assert node == "n1"
    claim = json.loads(kubectl("get", "resourceclaim", "gpu", "-o", "json"))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-1"
