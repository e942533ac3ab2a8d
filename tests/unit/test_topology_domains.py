"""Every topology domain is tried (issue 33): a gang whose domains outnumber
`topologyDomainsPerCycle` goes on, cycle after cycle, through the domains
ranked beyond the cap (and those the cpu/memory prediction cannot tell apart:
node selectors, taints, affinity, extended resources); it preempts only once
every domain was tried without preemption; and a preferred level no node has
is skipped with a Warning instead of keeping the gang pending.

The scheduler runs with the in-memory cluster and the virtual clock: a failed
gang waits out its backoff, victims terminate after their grace period."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from troupe.api.types import NodeName, PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.core.topology import PREFERRED_ANNOTATION, REQUIRED_ANNOTATION
from troupe.plugins.registry import IN_TREE

RACK = "troupe.dev/rack"
BLOCK = "troupe.dev/block"
GPU = "example.com/gpu"
CAP = 16  # topologyDomainsPerCycle's default


def rack_name(i: int, n: int) -> str:
    """Rack i of n, named so that names sort as numbers do (the last sorts last)."""
    return f"r{i:0{len(str(n))}d}"


def coscheduling(**args: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "troupe-scheduler",
                "pluginConfig": [{"name": "Coscheduling", "args": args}],
            }
        ],
    }


class Harness:
    """A scheduler on an in-memory cluster: binds come back as updates, deleted
    pods go after their grace period on the virtual clock."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.clock = VirtualClock()
        self.cluster = InMemoryCluster()
        self.s = Scheduler(
            parse_config(config or {}, IN_TREE), self.cluster, self.clock, registry=IN_TREE
        )
        self.cluster.on_pod_bound = self._bound
        self.cluster.on_pod_deleted = self._deleted
        self.rack: dict[str, str] = {}
        # Group attempts made when each victim was deleted.
        self.deleted_at: list[int] = []

    def _bound(self, key: PodKey, node: NodeName) -> None:
        self.s.on_pod(self.cluster.pods[key])

    def _deleted(self, key: PodKey, grace: int) -> None:
        self.deleted_at.append(self.s.group_attempts)
        self.s.on_pod(self.cluster.pods[key])

        def gone() -> None:
            obj = self.cluster.pods.pop(key, None)
            if obj is not None:
                self.s.on_pod(obj, deleted=True)

        self.clock.call_at(self.clock.now() + grace, gone)

    def node(
        self,
        name: str,
        rack: str | None,
        cpu: int = 4,
        gpus: int = 0,
        edit: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        b = make_node(name).capacity(cpu=cpu, memory="64Gi", pods=110)
        if rack is not None:
            b = b.label(RACK, rack)
            self.rack[name] = rack
        if gpus:
            b = b.ext(GPU, gpus)
        obj = b.obj()
        if edit is not None:
            edit(obj)
        self.s.on_node(obj)

    def group(
        self,
        name: str,
        min_member: int,
        required: str | None = RACK,
        preferred: str | None = None,
        native: bool = False,
    ) -> None:
        ann = {}
        if required is not None:
            ann[REQUIRED_ANNOTATION] = required
        if preferred is not None:
            ann[PREFERRED_ANNOTATION] = preferred
        if native:
            obj: dict[str, Any] = {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "default", "annotations": ann},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min_member}}},
            }
            self.cluster.pod_groups[f"scheduling.k8s.io/default/{name}"] = obj
        else:
            obj = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "default", "annotations": ann},
                "spec": {"minMember": min_member},
            }
            self.cluster.pod_groups[f"default/{name}"] = obj
        self.s.on_pod_group(obj)

    def add(self, obj: dict[str, Any]) -> PodKey:
        key = PodKey(f"default/{obj['metadata']['name']}")
        self.cluster.pods[key] = obj
        self.s.on_pod(obj)
        return key

    def member(
        self, group: str, i: int, cpu: str = "1", gpus: int = 0, native: bool = False, **spec: Any
    ) -> PodKey:
        b = make_pod(f"{group}-{i}").req(cpu=cpu).priority(1000).label("job", group)
        if gpus:
            b = b.ext(GPU, gpus)
        b = b.scheduling_group(group) if native else b.group(group)
        if spec:
            b = b.spec(**spec)
        return self.add(b.obj())

    def running(self, name: str, node: str, cpu: str = "100m", gpus: int = 0) -> PodKey:
        b = make_pod(name).req(cpu=cpu).priority(0).node(node).phase("Running")
        if gpus:
            b = b.ext(GPU, gpus)
        return self.add(b.spec(terminationGracePeriodSeconds=5).obj())

    async def drain(self) -> None:
        while self.s.schedule_one():
            await self.s.settle()
        await self.s.settle()

    async def advance(self, seconds: float) -> None:
        """Let `seconds` of virtual time pass, running every timer and cycle due."""
        end = self.clock.now() + seconds
        await self.drain()
        while True:
            nxt = self.clock.next_deadline()
            backoff = self.s.queue.next_wakeup()
            if backoff is not None and (nxt is None or backoff < nxt):
                nxt = backoff
            if nxt is None or nxt > end:
                break
            self.clock.advance_to(max(nxt, self.clock.now()))
            await self.s.settle()
            self.s.queue.flush()
            await self.drain()
        self.clock.advance_to(end)
        self.s.queue.flush()
        await self.drain()

    def racks_of(self, group: str) -> list[str | None]:
        out = []
        for k, o in sorted(self.cluster.pods.items()):
            if k.startswith(f"default/{group}-"):
                node = o["spec"].get("nodeName")
                out.append(self.rack.get(node) if node else None)
        return out

    def tried(self) -> float:
        """Placements in one domain tried so far (troupe_topology_placements_tried)."""
        return float(self.s.ctx.metrics.topology_placements._value.get())

    def skipped(self) -> list[tuple[str, str, str]]:
        """The TopologyLevelSkipped events: (object, type, message)."""
        return [
            (e.pod, e.type, e.message)
            for e in self.cluster.events
            if e.reason == "TopologyLevelSkipped"
        ]


def one_by_host(group: str) -> dict[str, Any]:
    """Members repel each other per node: a rack holds as many members as it has
    nodes, which the prediction (cpu, memory, pod slots) cannot see."""
    term = {
        "labelSelector": {"matchLabels": {"job": group}},
        "topologyKey": "kubernetes.io/hostname",
    }
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


# ---- every domain is tried ---------------------------------------------------------------


def gold_only(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"]["pool"] = "gold"


def tainted(obj: dict[str, Any]) -> None:
    obj["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]


GOLD_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gold"]}]}
            ]
        }
    }
}


@pytest.mark.parametrize("way", ["nodeSelector", "taint", "affinity"])
async def test_a_gang_reaches_the_17th_rack_the_prediction_cannot_tell_apart(way: str) -> None:
    # 17 racks equal in cpu and memory; only r17 can take the members. Ranked by
    # name among equals, r17 comes 17th: beyond the cap of 16.
    h = Harness()
    for r in range(1, 18):
        rack = rack_name(r, 17)
        for n in range(2):
            edit: Callable[[dict[str, Any]], None] | None = None
            if way in ("nodeSelector", "affinity") and r == 17:
                edit = gold_only
            elif way == "taint" and r != 17:
                edit = tainted
            h.node(f"{rack}-n{n}", rack, edit=edit)
    h.group("job", 2)
    for i in range(2):
        if way == "nodeSelector":
            h.member("job", i, nodeSelector={"pool": "gold"})
        elif way == "affinity":
            h.member("job", i, affinity=GOLD_AFFINITY)
        else:
            h.member("job", i)
    await h.advance(120)
    assert h.racks_of("job") == ["r17", "r17"]
    assert h.s.group_attempts <= 2


@pytest.mark.parametrize("racks", [17, 40, 100])
async def test_members_that_repel_each_other_reach_the_last_rack(racks: int) -> None:
    # Racks of two nodes rank first (the gang would fill them best), but the four
    # members repel each other per node: only the last rack, of four nodes,
    # holds them. No filter of one member can tell: every cycle tries the cap's
    # worth of racks, and the next cycle goes on where it stopped.
    h = Harness()
    for r in range(1, racks + 1):
        rack = rack_name(r, racks)
        for n in range(4 if r == racks else 2):
            h.node(f"{rack}-n{n}", rack)
    h.group("job", 4)
    for i in range(4):
        h.member("job", i, affinity=one_by_host("job"))
    await h.drain()
    assert h.tried() <= CAP  # one cycle's work stays bounded
    await h.advance(600)
    last = rack_name(racks, racks)
    assert h.racks_of("job") == [last] * 4
    assert h.s.group_attempts <= math.ceil(racks / CAP)
    assert h.tried() <= racks


@pytest.mark.parametrize("launcher", [True, False])
async def test_a_gang_takes_the_empty_rack_instead_of_preempting(launcher: bool) -> None:
    # 20 racks of two nodes with a GPU each; lower-priority pods hold the GPUs of
    # racks 1..19 (and a little cpu: those racks rank first, fuller). Rack 20 is
    # empty. The workers need a GPU, which the prediction does not count; with a
    # launcher first (no GPU, fits everywhere) no filter of the first member
    # tells either. The gang goes to r20 and nobody is evicted.
    h = Harness()
    for r in range(1, 21):
        rack = rack_name(r, 20)
        for n in range(2):
            h.node(f"{rack}-n{n}", rack, gpus=1)
            if r < 20:
                h.running(f"low-{rack}-n{n}", f"{rack}-n{n}", gpus=1)
    h.group("job", 3 if launcher else 2)
    i = 0
    if launcher:
        h.member("job", 0)
        i = 1
    h.member("job", i, gpus=1)
    h.member("job", i + 1, gpus=1)
    await h.advance(600)
    assert h.cluster.deletions == []
    assert set(h.racks_of("job")) == {"r20"}
    assert h.s.group_attempts <= 2


@pytest.mark.parametrize("racks", [20, 40, 100])
async def test_a_gang_preempts_only_after_every_rack_was_tried(racks: int) -> None:
    # Every GPU is held by lower-priority pods: no rack holds the gang without
    # preemption, and the prediction cannot see it. Each cycle tries the cap's
    # worth of racks; only the cycle that tried the last of them preempts, in
    # one rack, and the gang then runs there.
    h = Harness()
    for r in range(1, racks + 1):
        rack = rack_name(r, racks)
        for n in range(2):
            h.node(f"{rack}-n{n}", rack, gpus=1)
            h.running(f"low-{rack}-n{n}", f"{rack}-n{n}", gpus=1)
    h.group("job", 3)
    h.member("job", 0)
    h.member("job", 1, gpus=1)
    h.member("job", 2, gpus=1)
    await h.advance(600)
    rounds = math.ceil(racks / CAP)
    assert h.deleted_at == [rounds, rounds]  # two victims, both in the cycle that tried the last
    victims = {
        k.split("/")[1].removeprefix("low-").rsplit("-", 1)[0] for k, _ in h.cluster.deletions
    }
    assert len(victims) == 1  # one rack cleared
    assert set(h.racks_of("job")) == victims


async def test_the_cap_is_the_profiles() -> None:
    # With topologyDomainsPerCycle 1, one rack per cycle: r1 (ranked first: its
    # two nodes would be fuller) cannot hold the repelling members, r2 can.
    h = Harness(coscheduling(topologyDomainsPerCycle=1))
    for n in range(2):
        h.node(f"a{n}", "r1")
    for n in range(3):
        h.node(f"b{n}", "r2")
    h.group("job", 3)
    for i in range(3):
        h.member("job", i, affinity=one_by_host("job"))
    await h.drain()
    assert h.tried() == 1 and h.racks_of("job") == [None] * 3
    reason = h.s.last_failure[PodKey("default/job-0")]
    assert reason.startswith(
        f'PodGroup "default/job": no {RACK} has room for minMember 3 among the 1 tried so far '
        f"(1 more to try): best {RACK}=r1 fits 2; "
    ), reason
    await h.advance(60)
    assert h.racks_of("job") == ["r2"] * 3
    assert h.tried() == 2


# ---- a preferred level no node has -----------------------------------------------------------


@pytest.mark.parametrize("native", [False, True])
async def test_a_preferred_level_no_node_has_is_skipped_with_one_warning(native: bool) -> None:
    # Racks, but no blocks: the gang prefers a rack, then a block. It is placed
    # in one rack; the block level is skipped with one Warning on the PodGroup,
    # not one per attempt (the first attempt fails: a node is missing).
    h = Harness()
    h.node("a0", "r1", cpu=2)
    h.node("a1", "r1", cpu=2)
    h.group("job", 3, required=None, preferred=f"{RACK},{BLOCK}", native=native)
    for i in range(3):
        h.member("job", i, cpu="2", native=native)
    await h.advance(30)
    assert h.racks_of("job") == [None] * 3
    h.node("a2", "r1", cpu=2)
    await h.advance(30)
    assert h.racks_of("job") == ["r1"] * 3
    where = f"metadata.annotations[{PREFERRED_ANNOTATION}]"
    message = f"{where}: preferred level {BLOCK!r} is skipped: no node has the label {BLOCK!r}"
    assert h.skipped() == [("default/job", "Warning", message)]


@pytest.mark.parametrize("native", [False, True])
async def test_a_preferred_level_alone_that_no_node_has_places_the_gang_anywhere(
    native: bool,
) -> None:
    h = Harness()
    h.node("n0", None)
    h.node("n1", None)
    h.group("job", 2, required=None, preferred="troupe.dev/row", native=native)
    for i in range(2):
        h.member("job", i, native=native)
    await h.advance(30)
    assert all(h.cluster.pods[f"default/job-{i}"]["spec"].get("nodeName") for i in range(2))
    assert len(h.skipped()) == 1


@pytest.mark.parametrize("native", [False, True])
async def test_a_required_level_no_node_has_stays_unschedulable(native: bool) -> None:
    h = Harness()
    h.node("n0", "r1")
    h.group("job", 2, required="troupe.dev/row", native=native)
    for i in range(2):
        h.member("job", i, native=native)
    await h.advance(30)
    assert h.racks_of("job") == [None, None]
    group = "scheduling.k8s.io/default/job" if native else "default/job"
    assert h.s.last_failure[PodKey("default/job-0")] == (
        f'PodGroup "{group}": metadata.annotations[{REQUIRED_ANNOTATION}]: '
        "no node has the label 'troupe.dev/row'"
    )
    assert h.skipped() == []


async def test_what_is_kept_per_gang_goes_with_its_group() -> None:
    # Three times over, 300 gangs that do not fit are each told their preferred
    # level is skipped, then their PodGroups are deleted: what the group cycle
    # keeps per gang is swept of gone groups as it grows (it holds at most
    # twice what live gangs need), not kept for all 900.
    h = Harness()
    h.node("n0", None, cpu=1)
    for r in range(3):
        for g in range(300):
            h.group(f"r{r}-g{g}", 1, required=None, preferred="troupe.dev/row")
            h.member(f"r{r}-g{g}", 0, cpu="2")
        await h.drain()
        for key in list(h.cluster.pod_groups):
            h.s.on_pod_group(h.cluster.pod_groups.pop(key), deleted=True)
    assert len(h.skipped()) == 900
    kept = list(h.s.groups._skipped)
    assert len(kept) <= 600
    assert not any(k.startswith("default/r0-") for k in kept)
