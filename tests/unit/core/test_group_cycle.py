"""The gang's group cycle (troupe.core.group_cycle): which popped pod starts
one, what it places and what it holds when the gang does not fit, asked of the
profile's GroupSchedulingPlugin, whichever plugin that is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Self

import pytest

from tests.builders import make_pod
from tests.unit.core.env import Env
from troupe.api.types import GroupKey, NodeName, Pod, PodGroup, PodKey
from troupe.core.topology import REQUIRED_ANNOTATION, PlacementWeights
from troupe.framework.cycle_state import CycleState
from troupe.framework.fit import NodeSubset
from troupe.framework.handle import Handle
from troupe.framework.interface import GroupSchedulingPlugin, PermitPlugin
from troupe.framework.status import SUCCESS, Status
from troupe.plugins.registry import IN_TREE


def gang(e: Env, name: str, members: int, min_member: int, cpu: str = "3") -> list[PodKey]:
    e.pod_group(name, min_member)
    return [e.pod(make_pod(f"{name}-{i}").group(name).req(cpu=cpu).obj()) for i in range(members)]


# ---- a gang placed whole, or nothing held -----------------------------------------------


@pytest.mark.parametrize(
    ("name", "nodes", "members", "min_member", "want_bound", "want_message"),
    [
        ("fits whole", 3, 3, 3, 3, None),
        (
            "one node short: nothing is held",
            2,
            3,
            3,
            0,
            'PodGroup "default/job": 2 of minMember 3 pods fit; '
            "0/2 nodes are available: 2 Insufficient cpu.",
        ),
        (
            "quorum met: the member that does not fit fails alone",
            2,
            3,
            2,
            2,
            "0/2 nodes are available: 2 Insufficient cpu.",
        ),
    ],
)
async def test_a_gang_is_admitted_only_with_its_quorum(
    name: str,
    nodes: int,
    members: int,
    min_member: int,
    want_bound: int,
    want_message: str | None,
) -> None:
    e = Env()
    for i in range(nodes):
        e.node(f"n{i}")
    keys = gang(e, "job", members, min_member)
    assert await e.run() == 1  # one scheduling cycle places, or fails, the whole gang
    bound = [k for k in keys if e.node_of(k)]
    assert len(bound) == want_bound
    assert len({e.node_of(k) for k in bound}) == len(bound)  # 3 of 4 cpus each: one a node
    assert e.s.group_attempts == 1
    pending = [k for k in keys if k not in bound]
    for k in pending:
        assert e.s.last_failure[k] == want_message
        assert e.condition(k) == {
            "status": "False",
            "reason": "Unschedulable",
            "message": want_message,
        }
        assert e.s.queue.where(k) == "unschedulable"
    for k in bound:
        (ev,) = e.events(k, "Scheduled")
        assert ev.message == f"Successfully assigned {k} to {e.node_of(k)}"
    # Nothing of a gang that failed stays assumed.
    assert e.s.cache.statistics().assumed_pods == 0


async def test_a_gang_that_does_not_fit_waits_for_its_plugin_and_the_resource_plugin() -> None:
    e = Env()
    e.node("n0")
    keys = gang(e, "job", 2, 2)
    await e.run()
    for k in keys:
        qpi = e.s.queue.get(k)
        assert qpi is not None
        assert qpi.unschedulable_plugins == {"Coscheduling", "NodeResourcesFit"}
    # A node that makes room moves them out of the pool; after their backoff
    # they are placed together.
    e.node("n1")
    assert {e.s.queue.where(k) for k in keys} == {"backoffQ"}
    e.later(10)
    await e.run()
    assert {e.node_of(k) for k in keys} == {"n0", "n1"}


async def test_members_beyond_the_quorum_that_arrive_later_are_scheduled_alone() -> None:
    e = Env()
    for i in range(3):
        e.node(f"n{i}")
    keys = gang(e, "job", 2, 2)
    await e.run()
    assert e.s.group_attempts == 1
    late = e.pod(make_pod("job-2").group("job").req(cpu="3").obj())
    await e.run()
    assert e.s.group_attempts == 1  # admitted already: no second group cycle
    assert all(e.node_of(k) for k in [*keys, late])


# ---- which popped pod starts a group cycle ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "config", "pod_group", "placed", "want"),
    [
        ("a pod of no group", {}, None, 0, False),
        ("a gang not admitted", {}, 2, 0, True),
        ("a gang admitted already", {}, 1, 1, False),
        ("the group cycle switched off", {"troupe": {"gangGroupCycle": False}}, 2, 0, False),
        (
            "no GroupSchedulingPlugin at Permit",
            {"profiles": [{"plugins": {"permit": {"disabled": [{"name": "Coscheduling"}]}}}]},
            2,
            0,
            False,
        ),
    ],
)
async def test_wants(
    name: str, config: dict[str, Any], pod_group: int | None, placed: int, want: bool
) -> None:
    e = Env(config)
    e.node("n0", cpu="8")
    if pod_group is not None:
        e.pod_group("job", pod_group)
    for i in range(placed):
        e.s.on_pod(make_pod(f"job-p{i}").group("job").req(cpu="1").node("n0").obj())
    # Enough pending members that PreEnqueue lets them in.
    for i in range(max(1, (pod_group or 0) - placed)):
        b = make_pod(f"job-x{i}").req(cpu="1")
        e.pod((b.group("job") if pod_group is not None else b).obj())
    qpi = e.s.queue.pop()
    assert qpi is not None
    profile = e.s.profiles[qpi.pod.scheduler_name]
    got = e.s.groups.wants(profile, qpi)
    if want:
        assert got is not None and got.key == "default/job"
    else:
        assert got is None


# ---- the group cycle asks its extension point, not Coscheduling ---------------------------


class Pairs(PermitPlugin, GroupSchedulingPlugin):
    """A GroupSchedulingPlugin of its own: every group is a gang of two."""

    NAME: Final = "Pairs"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(handle)

    def permit(self, state: CycleState, pod: Pod, node: NodeName) -> tuple[Status, float]:
        return SUCCESS, 0.0

    def group_to_schedule(self, pod: Pod) -> PodGroup | None:
        key = pod.group_key
        pg = self.handle.lister.pod_group(key) if key is not None else None
        if pg is None or self.placed_members(pg.key) >= 2:
            return None
        return pg

    def min_count(self, pg: PodGroup) -> int:
        return 2

    def min_count_name(self, pg: PodGroup) -> str:
        return "pairs"

    def placed_members(self, group: GroupKey) -> int:
        lister = self.handle.lister
        return sum(1 for p in lister.pods_in_group(group) if lister.pod(p.key) is not None)

    def domains_per_cycle(self) -> int:
        return 4

    def placement_weights(self) -> PlacementWeights:
        return PlacementWeights()

    def group_phase(self, api_version: str, status: Mapping[str, Any]) -> str:
        return "Paired" if status.get("paired") else "Unpaired"


PAIRS_CONFIG: Final = {
    "profiles": [
        {
            "plugins": {
                "permit": {"enabled": [{"name": "Pairs"}], "disabled": [{"name": "Coscheduling"}]}
            }
        }
    ]
}


@pytest.mark.parametrize(
    ("name", "nodes", "want_bound", "want_message", "want_rejectors"),
    [
        (
            "two fit: the pair is admitted, the third fails alone",
            2,
            2,
            "0/2 nodes are available: 2 Insufficient cpu.",
            {"NodeResourcesFit"},
        ),
        (
            "one fits: nothing is held",
            1,
            0,
            'PodGroup "default/job": 1 of pairs 2 pods fit; '
            "0/1 nodes are available: 1 Insufficient cpu.",
            {"Pairs", "NodeResourcesFit"},
        ),
    ],
)
async def test_the_group_cycle_asks_the_profiles_group_scheduling_plugin(
    name: str,
    nodes: int,
    want_bound: int,
    want_message: str,
    want_rejectors: set[str],
) -> None:
    e = Env(PAIRS_CONFIG, registry={**IN_TREE, "Pairs": Pairs})
    for i in range(nodes):
        e.node(f"n{i}")
    keys = gang(e, "job", 3, 3)  # minMember 3, but Pairs says two
    await e.run()
    assert e.s.group_attempts == 1
    assert sum(1 for k in keys if e.node_of(k)) == want_bound
    for k in keys:
        if e.node_of(k) is None:
            assert e.s.last_failure[k] == want_message
            qpi = e.s.queue.get(k)
            assert qpi is not None and qpi.unschedulable_plugins == want_rejectors
    assert e.s.group_phase("scheduling.x-k8s.io/v1alpha1", {"paired": True}) == "Paired"


# ---- a pod of a group with required topology, scheduled alone -----------------------------


@pytest.mark.parametrize(
    ("name", "annotations", "placed_on", "want"),
    [
        ("no topology request", None, None, None),
        (
            "before any member runs: the nodes with the label",
            {REQUIRED_ANNOTATION: "rack"},
            None,
            ("node(s) without the label(s) rack", ["n0", "n1", "n2"]),
        ),
        (
            "a member runs: its rack",
            {REQUIRED_ANNOTATION: "rack"},
            "n2",
            ("node(s) outside rack=r2", ["n2"]),
        ),
        (
            "a key that cannot be a label",
            {REQUIRED_ANNOTATION: "rack,"},
            None,
            'PodGroup "default/job": metadata.annotations[troupe.dev/topology-required]: '
            "Invalid value: 'rack,': empty label key",
        ),
    ],
)
def test_within(
    name: str,
    annotations: dict[str, str] | None,
    placed_on: str | None,
    want: tuple[str, list[str]] | str | None,
) -> None:
    e = Env()
    e.node("n0", rack="r1")
    e.node("n1", rack="r1")
    e.node("n2", rack="r2")
    e.node("n3")
    e.pod_group("job", 1, annotations)
    if placed_on is not None:
        e.s.on_pod(make_pod("job-0").group("job").node(placed_on).obj())
    e.s.cache.update_snapshot(e.s.snapshot)
    got = e.s.groups.within(make_pod("job-1").group("job").build())
    if isinstance(got, NodeSubset):
        assert isinstance(want, tuple)
        assert (got.reason, [e.s.snapshot.name(int(r)) for r in got.rows]) == want
    else:
        assert got == want
