"""The Lease never depends on how heavy a pod is (issue 33): two replicas of
`troupe run`, as in test_lease_under_load, and pods that are slow to schedule,
each claiming a device with selectors of its own (CEL expressions no other claim
has, compiled and evaluated on every device). The scheduling loop used to give
the event loop a turn only every 64 pods, the heartbeat the elector child waits
for stopped past renewDeadline ("the scheduler does not answer") and the leader
lost its Lease. One pod, heavier still, may take longer than renewDeadline in
a single cycle: a thread beats for the loop while it is busy in one. The
leader keeps its Lease throughout: one holder, no leaseTransitions, and only
it binds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, until
from bench.e2e import LeaseWatch
from tests.builders import make_node

LEASE = ("leases", "kube-system", "troupe-scheduler")
DRIVER = "gpu.example.com"
NODES = 8
DEVICES = 16  # per node
PODS = 80
SELECTORS = 6  # per claim, each its own expression


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer(podgroups=True)
    with srv.start_in_thread():
        yield srv


def device_slice(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"index": {"int": i}, "model": {"string": "a100"}},
                }
                for i in range(DEVICES)
            ],
        },
    }


def heavy_pod(api: ApiServer, i: int, requests: int = 1, selectors: int = SELECTORS) -> None:
    """A pod whose claim's selectors no other claim shares."""

    def request(r: int) -> dict[str, Any]:
        cel = [
            {
                "cel": {
                    "expression": f'device.attributes["{DRIVER}"].index >= 0 && '
                    f'device.attributes["{DRIVER}"].model != "p{i}-r{r}-s{j}"'
                }
            }
            for j in range(selectors)
        ]
        return {"name": f"gpu{r}", "exactly": {"deviceClassName": DRIVER, "selectors": cel}}

    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"c{i}", "namespace": "default"},
            "spec": {"devices": {"requests": [request(r) for r in range(requests)]}},
        }
    )
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default"},
            "spec": {
                "schedulerName": "troupe-scheduler",
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": f"c{i}"}],
            },
        }
    )


def transitions(api: ApiServer) -> int:
    lease = api.get(*LEASE) or {}
    return int((lease.get("spec") or {}).get("leaseTransitions") or 0)


def test_the_leader_keeps_its_lease_while_pods_are_slow_to_schedule(
    api: ApiServer, tmp_path: Path
) -> None:
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    for n in range(NODES):
        api.create(make_node(f"n{n}").capacity(cpu=64, memory="64Gi", pods=110).obj())
        api.create(device_slice(f"n{n}"))
    leases = LeaseWatch(api)
    kc = api.write_kubeconfig(tmp_path / "kc")
    replicas = [Troupe(tmp_path, kubeconfig=kc, identity=i).start() for i in ("a", "b")]
    try:
        for r in replicas:
            r.wait_ready(120)
        leader = until(leases.holder, 60, "a leader")
        before = transitions(api)
        t0 = time.time()
        # One pod heavier than the rest (kube's limits: 32 selectors a request),
        # whose one cycle may well outlast renewDeadline, then the others.
        heavy_pod(api, PODS, requests=4, selectors=30)
        for i in range(PODS):
            heavy_pod(api, i)

        def over() -> bool:
            lost = bool(leases.holders(t0) - {leader}) or not all(r.running for r in replicas)
            return lost or api.binds >= PODS + 1

        until(over, 600, "the pods bound")
        assert all(r.running for r in replicas), [r.log()[-3000:] for r in replicas]
        assert leases.holders(t0) <= {leader}, leases.renewals[-5:]
        assert api.binds == PODS + 1
        assert transitions(api) == before
        assert len(leases.bind_writers) == 1 and f"({leader})" in next(iter(leases.bind_writers))
    finally:
        for r in replicas:
            if r.running:
                r.stop(60)
