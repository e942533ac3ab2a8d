"""The preemption Evaluator serves any plugin that implements its Interface, for
pods and for gangs: a plugin with its own victim selection and ranking (what a
quota plugin such as scheduler-plugins' CapacityScheduling is) preempts
through the same engine, and gangs reach it only through a plugin that
subclasses GroupPreemptionPlugin."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, Self

from tests.builders import make_node, make_pod
from tests.unit.test_preemption import Harness, gang_member, pod_group
from troupe.api.types import NodeName, Pod, PodKey
from troupe.config import parse_config
from troupe.core.scheduler import Scheduler
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.filtering import FilterRunner
from troupe.framework.fit import NodeSubset
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    GroupPreemptionPlugin,
    IntpArray,
    NodeToStatus,
    PostFilterPlugin,
    PreemptionCandidate,
)
from troupe.framework.preemption import (
    Candidate,
    DryRun,
    Evaluator,
    Interface,
    ScoreFunc,
    Victims,
)
from troupe.framework.status import Code, Status
from troupe.plugins.registry import IN_TREE

PREEMPTIBLE: Final = "example.com/preemptible"


class OnlyLabelled(PostFilterPlugin, GroupPreemptionPlugin, Interface):
    """Preempts only pods labelled preemptible, looks at every node, and prefers
    the node whose name sorts last."""

    NAME: Final = "OnlyLabelled"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.evaluator = Evaluator(self.NAME, handle, self)

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(handle)

    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        return self.evaluator.preempt(state, pod, filtered)

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        return 0, num_nodes

    def candidates_to_victims_map(self, candidates: Sequence[Candidate]) -> dict[NodeName, Victims]:
        return {c.node: Victims(c.victims, c.pdb_violations) for c in candidates}

    def pod_eligible_to_preempt_others(
        self, pod: Pod, nominated_node_status: Status | None
    ) -> tuple[bool, str]:
        return True, ""

    def select_victims_on_node(
        self, state: CycleState, pod: Pod, snap: NodeTable, rows: IntpArray, dry: DryRun
    ) -> list[Candidate]:
        for row in rows.tolist():
            mine = [
                p
                for p in snap.pods[row].values()
                if p.priority < pod.priority and p.labels.get(PREEMPTIBLE) == "true"
            ]
            if not dry.add(row, mine):
                dry.reject(row, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("none",), self.NAME))
        return dry.run()

    def ordered_score_funcs(
        self, nodes_to_victims: Mapping[NodeName, Victims]
    ) -> list[ScoreFunc] | None:
        return [lambda node: int(node[1:])]

    def member_candidate(
        self,
        state: CycleState,
        pod: Pod,
        runner: FilterRunner,
        priority: int,
        taken: Collection[PodKey],
        within: NodeSubset | None = None,
    ) -> Candidate | None:
        return self.evaluator.member_candidate(state, pod, runner, priority, taken, within)

    def prepare_member(self, pod: Pod, candidate: PreemptionCandidate, gang: str) -> None:
        self.evaluator.prepare_member(pod, candidate, gang)


class LooksLikeIt(PostFilterPlugin):
    """Has gang preemption's methods but does not say it serves gangs."""

    NAME: Final = "LooksLikeIt"

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls()

    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        return None, Status(Code.UNSCHEDULABLE)

    def member_candidate(self, *args: Any) -> Candidate | None:
        raise AssertionError("asked for a gang")

    def prepare_member(self, *args: Any) -> None:
        raise AssertionError("asked for a gang")


def harness(nodes: int, post_filter: str) -> Harness:
    h = Harness(nodes=0)
    registry = {**IN_TREE, OnlyLabelled.NAME: OnlyLabelled, LooksLikeIt.NAME: LooksLikeIt}
    cfg = parse_config(
        {
            "profiles": [
                {
                    "schedulerName": "troupe-scheduler",
                    "plugins": {
                        "postFilter": {
                            "disabled": [{"name": "DefaultPreemption"}],
                            "enabled": [{"name": post_filter}],
                        }
                    },
                }
            ]
        },
        registry,
    )
    h.s = Scheduler(cfg, h.cluster, h.clock, registry=registry)
    for i in range(nodes):
        h.s.on_node(make_node(f"n{i}").capacity(cpu="1", pods=110).obj())
    return h


def running(h: Harness, name: str, node: str, priority: int, preemptible: bool) -> PodKey:
    b = make_pod(name).req(cpu="1").priority(priority).node(node).phase("Running")
    if preemptible:
        b = b.label(PREEMPTIBLE, "true")
    obj = b.obj()
    obj["spec"]["terminationGracePeriodSeconds"] = 5
    return h.add(obj)


def test_a_plugin_of_its_own_selects_the_victims_and_ranks_the_candidates() -> None:
    """DefaultPreemption would take n0's pod (the lowest victim priority); this
    plugin may not take it (unlabelled), and of n1 and n2 its score prefers n2."""
    h = harness(3, OnlyLabelled.NAME)

    async def go() -> None:
        running(h, "keep", "n0", 1, preemptible=False)
        running(h, "mid", "n1", 10, preemptible=True)
        last = running(h, "last", "n2", 20, preemptible=True)
        high = h.add(make_pod("high").req(cpu="1").priority(100).obj())
        await h.drain()
        assert [k for k, _ in h.cluster.deletions] == [last]
        await h.advance(5)
        assert h.node_of(high) == "n2"

    asyncio.run(go())


def test_a_plugin_of_its_own_selects_a_gangs_victims() -> None:
    """The gang reaches the plugin's victim selection through the same
    Evaluator: of three nodes, only the two with preemptible pods are cleared."""
    h = harness(3, OnlyLabelled.NAME)

    async def go() -> None:
        running(h, "keep", "n0", 1, preemptible=False)
        a = running(h, "a", "n1", 1, preemptible=True)
        b = running(h, "b", "n2", 1, preemptible=True)
        pod_group(h, "job", 2)
        m0 = h.add(gang_member("m0", "job", 100))
        m1 = h.add(gang_member("m1", "job", 100))
        await h.drain()
        assert sorted(k for k, _ in h.cluster.deletions) == sorted([a, b])
        assert all("Preempted by gang default/job on node" in m for _, m in h.events("Preempted"))
        await h.advance(5)
        assert {h.node_of(m0), h.node_of(m1)} == {"n1", "n2"}

    asyncio.run(go())


def test_a_plugin_that_does_not_subclass_group_preemption_is_never_asked_for_gangs() -> None:
    """Gang preemption is an extension point a plugin declares, not one found by
    the methods it happens to have (the runtime used to check them
    structurally)."""
    h = harness(1, LooksLikeIt.NAME)
    profile = h.s.profiles["troupe-scheduler"]
    assert profile.group_preemption() is None

    async def go() -> None:
        running(h, "low", "n0", 1, preemptible=True)
        pod_group(h, "job", 1)
        h.add(gang_member("m0", "job", 100))
        await h.drain()
        assert h.cluster.deletions == []

    asyncio.run(go())
