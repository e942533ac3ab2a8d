"""Pods with volumes through the whole scheduler, with the in-memory cluster and
the simulated PV controller and provisioner (troupe.tools.volume_sim)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.builders import make_node, make_pod
from tests.volume_builders import pv, pvc, storage_class, with_claims
from troupe.api.storage import ANN_SELECTED_NODE
from troupe.api.types import PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE
from troupe.tools.volume_sim import VolumeControllers

FAST = storage_class("fast", provisioner="csi.example.com")


class Env:
    def __init__(self, n_nodes: int = 3, controllers: bool = True, **plugin_args: Any) -> None:
        self.cluster = InMemoryCluster()
        self.clock = VirtualClock()
        cfg = parse_config({"percentageOfNodesToScore": 100}, IN_TREE)
        self.s = Scheduler(cfg, self.cluster, self.clock, registry=IN_TREE)
        self.cluster.on_pod_bound = lambda key, node: self.s.on_pod(self.cluster.pods[key])
        if controllers:
            self.ctl = VolumeControllers(self.cluster, self.feed, {"fast": FAST})
        else:
            self.cluster.on_volume_write = self.feed
        for i in range(n_nodes):
            self.s.on_node(make_node(f"n{i}").obj())
        self.s.on_volume_object("StorageClass", FAST)
        self.s.on_volume_object("StorageClass", storage_class("local"))

    def feed(self, kind: str, obj: Any) -> None:
        self.s.on_volume_object(kind, obj)

    def claim(self, obj: dict[str, Any]) -> None:
        self.cluster.claims[f"default/{obj['metadata']['name']}"] = obj
        self.feed("PersistentVolumeClaim", obj)

    def volume(self, obj: dict[str, Any]) -> None:
        self.cluster.volumes[obj["metadata"]["name"]] = obj
        self.feed("PersistentVolume", obj)

    def pod(self, obj: dict[str, Any]) -> PodKey:
        key = PodKey(f"default/{obj['metadata']['name']}")
        self.cluster.pods[key] = obj
        self.s.on_pod(obj)
        return key

    async def run(self) -> None:
        for _ in range(10):
            self.s.queue.flush()
            while self.s.schedule_one():
                pass
            await self.s.settle()

    def node_of(self, key: PodKey) -> str | None:
        return self.cluster.pods[key]["spec"].get("nodeName")


def test_wait_for_first_consumer_claim_is_provisioned_on_the_chosen_node() -> None:
    env = Env()
    env.claim(pvc("data", sc="fast"))
    key = env.pod(with_claims(make_pod("p").obj(), "data"))
    asyncio.run(env.run())
    node = env.node_of(key)
    assert node is not None
    claim = env.cluster.claims["default/data"]
    assert claim["metadata"]["annotations"][ANN_SELECTED_NODE] == node
    assert claim["spec"]["volumeName"] in env.cluster.volumes
    outcome = env.ctl.outcomes["default/data"]
    assert outcome.provisioned and outcome.node == node
    assert str(outcome).startswith("provisioned PV ")


def test_static_local_pv_decides_the_node() -> None:
    env = Env()
    env.claim(pvc("data", sc="local"))
    env.volume(pv("local-n2", sc="local", node="n2"))
    key = env.pod(with_claims(make_pod("p").obj(), "data"))
    asyncio.run(env.run())
    assert env.node_of(key) == "n2"
    assert env.cluster.volumes["local-n2"]["spec"]["claimRef"]["name"] == "data"
    assert env.cluster.claims["default/data"]["spec"]["volumeName"] == "local-n2"


def test_bound_pv_node_affinity_and_immediate_claims() -> None:
    env = Env()
    env.volume(pv("v", sc="local", node="n1", claim="bound", phase="Bound"))
    env.claim(pvc("bound", sc="local", volume="v"))
    imm = storage_class("imm", provisioner="x", wffc=False)
    env.feed("StorageClass", imm)
    env.claim(pvc("later", sc="imm"))
    a = env.pod(with_claims(make_pod("a").obj(), "bound"))
    b = env.pod(with_claims(make_pod("b").obj(), "later"))
    asyncio.run(env.run())
    assert env.node_of(a) == "n1"
    assert env.node_of(b) is None
    assert "pod has unbound immediate PersistentVolumeClaims" in env.s.last_failure[b]
    # The PV controller binds the claim: only that pod is requeued, and it fits.
    env.volume(pv("v2", sc="imm", claim="later", phase="Bound"))
    env.claim(pvc("later", sc="imm", volume="v2"))
    env.clock.advance_by(20)
    asyncio.run(env.run())
    assert env.node_of(b) is not None


def test_failed_binding_unreserves_and_nothing_stays_assumed() -> None:
    env = Env(n_nodes=1, controllers=False)
    env.claim(pvc("data", sc="fast"))
    key = env.pod(with_claims(make_pod("p").obj(), "data"))

    async def go() -> None:
        while env.s.schedule_one():
            pass
        await env.s.settle()
        # PreBind wrote the selected node and waits for a provisioner that never comes.
        ann = env.cluster.claims["default/data"]["metadata"]["annotations"]
        assert ann[ANN_SELECTED_NODE] == "n0"
        for _ in range(700):
            env.clock.advance_by(1.0)
            await asyncio.sleep(0)
        await env.s.settle()

    asyncio.run(go())
    assert env.node_of(key) is None
    assert env.s.statistics().bind_failures == 1
    assert ANN_SELECTED_NODE not in env.cluster.claims["default/data"]["metadata"]["annotations"]
    cur = env.s.cache.volumes.pvc("default/data")
    assert cur is not None and ANN_SELECTED_NODE not in cur.annotations


def test_gang_not_admitted_provisions_nothing() -> None:
    env = Env()
    env.s.on_pod_group(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 10},
        }
    )
    keys = []
    for i in range(2):
        env.claim(pvc(f"data{i}", sc="fast"))
        keys.append(env.pod(with_claims(make_pod(f"w{i}").group("job").obj(), f"data{i}")))

    async def go() -> None:
        await env.run()
        env.clock.advance_by(30)
        await env.run()

    asyncio.run(go())
    assert all(env.node_of(k) is None for k in keys)
    assert env.cluster.volume_writes == 0
    for i in range(2):
        cur = env.s.cache.volumes.pvc(f"default/data{i}")
        assert cur is not None and ANN_SELECTED_NODE not in cur.annotations


def test_preemption_frees_a_read_write_once_pod_claim() -> None:
    """As kube-scheduler: the ReadWriteOncePod conflict is Unschedulable, and the
    dry run that takes the claim's user off its node (RemovePod) finds the node
    fits, so the lower-priority user is preempted and the preemptor takes it."""
    from tests.unit.test_preemption import Harness

    h = Harness(nodes=2)
    rwop = pvc("c", volume="v", modes=("ReadWriteOncePod",))
    h.s.on_volume_object("PersistentVolumeClaim", rwop)
    h.s.on_volume_object("PersistentVolume", pv("v", claim="c", phase="Bound"))

    async def go() -> None:
        low_obj = with_claims(make_pod("low").priority(1).node("n0").phase("Running").obj(), "c")
        low_obj["spec"]["terminationGracePeriodSeconds"] = 5
        low = h.add(low_obj)
        high = h.add(with_claims(make_pod("high").priority(100).obj(), "c"))
        await h.drain()
        assert h.s.last_failure[high] == (
            "0/2 nodes are available: 2 node has pod using PersistentVolumeClaim with the "
            "same name and ReadWriteOncePod access mode."
        )
        assert h.cluster.deletions == [(low, 5)]
        assert h.cluster.pods[high]["status"]["nominatedNodeName"] == "n0"
        await h.advance(5)
        assert low not in h.cluster.pods
        assert h.node_of(high) == "n0"

    asyncio.run(go())
