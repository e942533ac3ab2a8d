"""DefaultPreemption, table-driven: cases ported from kube-scheduler's
plugins/defaultpreemption/default_preemption_test.go (ids keep upstream's
names; its priorities and resource sizes), run through the whole scheduler with
the in-memory cluster so that the dry runs use the real Filter plugins."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from tests.builders import make_pod
from tests.unit.test_preemption import Harness
from troupe.api.parse import parse_pod
from troupe.api.selectors import parse_label_selector
from troupe.api.types import Pod, PodDisruptionBudget
from troupe.framework.interface import PluginArgsError
from troupe.framework.preemption import Candidate, pick_one, split_by_pdb_violation
from troupe.framework.status import Code, Status
from troupe.plugins.default_preemption import (
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    DefaultPreemption,
    DefaultPreemptionArgs,
    num_candidates,
    parse_args,
)

NEG, LOW, MID, HIGH = -100, 0, 100, 1000
SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}
EPOCH = "1970-01-01T00:00:00Z"


@dataclass(frozen=True)
class Running:
    name: str
    node: str
    priority: int
    res: dict[str, str]
    start: str = EPOCH


def harness_with(nodes: int, pods: list[Running]) -> Harness:
    h = Harness(nodes=0)
    for i in range(1, nodes + 1):
        h.s.on_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"node{i}"},
                "status": {"allocatable": {**VERY_LARGE, "pods": "110"}},
            }
        )
    for p in pods:
        obj = make_pod(p.name).req(**p.res).priority(p.priority).node(p.node).phase("Running").obj()
        obj["status"]["startTime"] = p.start
        obj["spec"]["terminationGracePeriodSeconds"] = 0
        h.add(obj)
    return h


# TestSelectBestCandidate
BEST_CANDIDATE = [
    pytest.param(
        2,
        [Running("p1", "node1", MID, LARGE), Running("p2", "node2", MID, LARGE)],
        {"node1", "node2"},
        id="a pod that fits on both nodes when lower priority pods are preempted",
    ),
    pytest.param(
        3,
        [
            Running("p1.1", "node1", MID, MEDIUM),
            Running("p1.2", "node1", LOW, MEDIUM),
            Running("p2.1", "node2", MID, MEDIUM),
            Running("p2.2", "node2", LOW, MEDIUM),
            Running("p3.1", "node3", LOW, MEDIUM),
            Running("p3.2", "node3", LOW, MEDIUM),
        ],
        {"node3"},
        id="node with min highest priority pod is picked",
    ),
    pytest.param(
        3,
        [
            Running("p1.1", "node1", MID, MEDIUM),
            Running("p1.2", "node1", MID, LARGE),
            Running("p2.1", "node2", MID, LARGE),
            Running("p2.2", "node2", LOW, MEDIUM),
            Running("p3.1", "node3", MID, MEDIUM),
            Running("p3.2", "node3", MID, MEDIUM),
        ],
        {"node2"},
        id="when highest priorities are the same, minimum sum of priorities is picked",
    ),
    pytest.param(
        3,
        [
            Running("p1.1", "node1", MID, SMALL),
            Running("p1.2", "node1", NEG, SMALL),
            Running("p1.3", "node1", MID, SMALL),
            Running("p1.4", "node1", NEG, SMALL),
            Running("p2.1", "node2", MID, LARGE),
            Running("p2.2", "node2", NEG, MEDIUM),
            Running("p3.1", "node3", MID, SMALL),
            Running("p3.2", "node3", NEG, SMALL),
            Running("p3.3", "node3", MID, SMALL),
            Running("p3.4", "node3", NEG, SMALL),
        ],
        {"node2"},
        id="when highest priority and sum are the same, minimum number of pods is picked",
    ),
    pytest.param(
        2,
        [
            Running("p1", "node1", MID, LARGE, start="2020-01-01T00:00:00Z"),
            Running("p2", "node2", MID, LARGE, start="2021-01-01T00:00:00Z"),
        ],
        {"node2"},
        id="same priority, same number of victims, different start time for each node's pod",
    ),
]


@pytest.mark.parametrize(("nodes", "pods", "want"), BEST_CANDIDATE)
def test_select_best_candidate(nodes: int, pods: list[Running], want: set[str]) -> None:
    h = harness_with(nodes, pods)

    async def go() -> None:
        h.add(make_pod("p").req(**VERY_LARGE).priority(HIGH).obj())
        await h.drain()
        victims = {k.split("/")[1] for k, _ in h.cluster.deletions}
        chosen = {p.node for p in pods if p.name in victims}
        assert len(chosen) == 1 and chosen <= want
        # Every pod on the chosen node had to go (the preemptor needs the whole node).
        assert victims == {p.name for p in pods if p.node in chosen}

    asyncio.run(go())


# TestSelectNodesForPreemption: minimal victims after the reprieve.
@pytest.mark.parametrize(
    ("pods", "preemptor", "want"),
    [
        pytest.param(
            [Running("p1", "node1", LOW, SMALL), Running("p2", "node1", LOW, LARGE)],
            MEDIUM,
            {"p2"},  # reprieve tries the more important (earlier) first: both LOW, p1 fits back
            id="a pod that would fit on the node after one lower priority pod is preempted",
        ),
        pytest.param(
            [Running("p1", "node1", MID, SMALL), Running("p2", "node1", LOW, LARGE)],
            LARGE,
            {"p2"},
            id="lower priority pods are reprieved first when the higher ones fit",
        ),
        pytest.param(
            [Running("p1", "node1", HIGH, LARGE), Running("p2", "node1", LOW, SMALL)],
            LARGE,
            set(),
            id="pods of equal priority are never victims",
        ),
    ],
)
def test_select_victims_on_node(pods: list[Running], preemptor: dict[str, str], want: set[str]):
    h = harness_with(1, pods)

    async def go() -> None:
        h.add(make_pod("p").req(**preemptor).priority(HIGH).obj())
        await h.drain()
        assert {k.split("/")[1] for k, _ in h.cluster.deletions} == want

    asyncio.run(go())


def _pod(obj: dict[str, Any]) -> Pod:
    p = parse_pod(obj)
    assert isinstance(p, Pod)
    return p


# TestPodEligibleToPreemptOthers
def test_pod_eligible_to_preempt_others() -> None:
    h = harness_with(1, [Running("victim", "node1", LOW, LARGE)])
    h.s.cache.update_snapshot(h.s.snapshot)
    plugin = h.s.profiles["troupe-scheduler"].plugin("DefaultPreemption")
    assert isinstance(plugin, DefaultPreemption)
    snap = h.s.snapshot

    never = make_pod("p").priority(HIGH).obj()
    never["spec"]["preemptionPolicy"] = "Never"
    assert plugin.pod_eligible_to_preempt_others(_pod(never), None) == (False, NOT_ELIGIBLE_NEVER)

    nominated = make_pod("p").priority(HIGH).obj()
    nominated["status"] = {"nominatedNodeName": "node1"}
    # "Pod with nominated node": no terminating victim there, eligible.
    assert plugin.pod_eligible_to_preempt_others(_pod(nominated), None) == (True, "")
    assert plugin.pod_eligible_to_preempt_others(
        _pod(make_pod("p").priority(HIGH).obj()), None
    ) == (True, "")

    # "victim Pods terminating, feature PodDisruptionConditions is enabled"
    victim = h.cluster.pods["default/victim"]
    victim["metadata"]["deletionTimestamp"] = EPOCH
    victim["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    h.s.on_pod(victim)
    h.s.cache.update_snapshot(snap)
    assert plugin.pod_eligible_to_preempt_others(_pod(nominated), None) == (
        False,
        NOT_ELIGIBLE_TERMINATING,
    )
    # "victim Pods terminating but the nominated node is unresolvable"
    unresolvable = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
    assert plugin.pod_eligible_to_preempt_others(_pod(nominated), unresolvable) == (True, "")
    # "non-victim Pods terminating": a pod of higher priority terminating is no reason.
    higher = make_pod("p").priority(LOW - 1).obj()
    higher["status"] = {"nominatedNodeName": "node1"}
    assert plugin.pod_eligible_to_preempt_others(_pod(higher), None) == (True, "")


@pytest.mark.parametrize(
    ("args", "nodes", "want"),
    [
        pytest.param(DefaultPreemptionArgs(), 0, 0, id="no nodes return 0"),
        pytest.param(DefaultPreemptionArgs(), 10, 10, id="all nodes when fewer than absolute"),
        pytest.param(DefaultPreemptionArgs(40, 1), 10, 4, id="percentage above absolute"),
        pytest.param(DefaultPreemptionArgs(10, 100), 5000, 500, id="10 percent of 5000"),
        pytest.param(DefaultPreemptionArgs(10, 100), 500, 100, id="absolute floor"),
    ],
)
def test_calculate_num_candidates(args: DefaultPreemptionArgs, nodes: int, want: int) -> None:
    assert num_candidates(args, nodes) == want


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"minCandidateNodesPercentage": -1}, "minCandidateNodesPercentage"),
        ({"minCandidateNodesPercentage": 101}, "minCandidateNodesPercentage"),
        ({"minCandidateNodesAbsolute": -1}, "minCandidateNodesAbsolute"),
        (
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            "minCandidateNodesAbsolute",
        ),
        ({"minCandidateNodesAbsolute": "5"}, "minCandidateNodesAbsolute"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_validate_default_preemption_args(args: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginArgsError) as e:
        parse_args(args)
    assert e.value.field_path == field
    assert parse_args({}) == DefaultPreemptionArgs(10, 100)


def test_filter_pods_with_pdb_violation() -> None:
    sel = parse_label_selector({"matchLabels": {"app": "a"}}, "s.")
    pdb = PodDisruptionBudget("default", "pdb", sel, 1, frozenset({"p3"}))
    pods = [_pod(make_pod(n).label("app", "a").obj()) for n in ("p1", "p2", "p3")]
    other = _pod(make_pod("x").label("app", "b").obj())
    violating, ok = split_by_pdb_violation([*pods, other], [pdb])
    # One disruption allowed: p1 uses it, p2 violates, p3 is already disrupted.
    assert [p.name for p in violating] == ["p2"]
    assert [p.name for p in ok] == ["p1", "p3", "x"]
    empty = PodDisruptionBudget("default", "e", parse_label_selector({}, "s."), 0, frozenset())
    assert split_by_pdb_violation(pods, [empty]) == ([], pods)


def test_pick_one_prefers_fewest_pdb_violations_then_a_node_without_victims() -> None:
    a = _pod(make_pod("a").priority(LOW).obj())
    b = _pod(make_pod("b").priority(MID).obj())
    assert pick_one([]) is None
    c1 = Candidate("n1", [a], 1, 0)  # type: ignore[arg-type]
    c2 = Candidate("n2", [b], 0, 1)  # type: ignore[arg-type]
    assert pick_one([c1, c2]) is c2
    c3 = Candidate("n3", [], 0, 2)  # type: ignore[arg-type]
    assert pick_one([c1, c2, c3]) is c3


def test_pick_one_ranks_pdb_violations_before_gangs_touched() -> None:
    """kube-scheduler's order comes first: a candidate that violates a PDB loses to
    one that takes a gang's member without violating any (found by a hostile
    probe: the ranking had put "gangs touched" first). Gangs touched only break
    ties that kube-scheduler's criteria leave."""
    member = _pod(make_pod("m").priority(LOW).group("g").obj())
    lone = _pod(make_pod("l").priority(LOW).obj())
    touches_gang = Candidate("n1", [member], 0, 0)  # type: ignore[arg-type]
    violates_pdb = Candidate("n2", [lone], 1, 1)  # type: ignore[arg-type]
    assert pick_one([violates_pdb, touches_gang]) is touches_gang
    spares_gang = Candidate("n3", [lone], 0, 2)  # type: ignore[arg-type]
    assert pick_one([touches_gang, spares_gang]) is spares_gang
