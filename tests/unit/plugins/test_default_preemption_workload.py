"""Workload-aware preemption as kube-scheduler 1.37 does it (issue #34 point 3):
preemption units, victim priorities and the order of importance among victims.

Ported cases keep upstream's names:
- TestMoreImportantVictim from kubernetes pkg/scheduler/framework/preemption/util_test.go;
- TestPodGroupPreemption from kubernetes
  test/integration/scheduler/preemption/podgroup/podgrouppreemption_test.go.
The rest test what those files state for a lone preemptor (a PodGroup whose
disruptionMode is All is one unit, on whatever nodes its members run; a
victim's priority is its PodGroup's; the victims get DisruptionTarget with
reason PreemptionByScheduler)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

from tests.builders import make_pod
from tests.unit.test_preemption import Harness
from tests.unit.test_topology import native_gang, native_member, node, run
from troupe.api.parse import parse_pod, parse_pod_group
from troupe.api.types import GroupKey, Pod, PodGroup, PodKey
from troupe.framework.preemption import Units

BEFORE, NOW = "1970-01-01T00:08:20Z", "1970-01-01T00:16:40Z"  # 500 s, 1000 s


def victim(name: str, priority: int, group: str = "", start: str = NOW) -> Pod:
    b = make_pod(name).priority(priority).node("n0").phase("Running")
    obj = b.obj()
    obj["status"]["startTime"] = start
    if group:
        obj["spec"]["schedulingGroup"] = {"podGroupName": group}
    pod = parse_pod(obj)
    assert isinstance(pod, Pod), pod
    return pod


class Lister:
    """The cache's lister over a fixed set of pods and native PodGroups."""

    def __init__(self, groups: Iterable[dict[str, Any]], pods: Iterable[Pod]) -> None:
        self.groups: dict[GroupKey, PodGroup] = {}
        for g in groups:
            pg = parse_pod_group(g)
            assert isinstance(pg, PodGroup), pg
            self.groups[pg.key] = pg
        self.pods = {p.key: p for p in pods}

    def pod_group(self, key: GroupKey) -> PodGroup | None:
        return self.groups.get(key)

    def invalid_pod_group(self, key: GroupKey) -> str | None:
        return None

    def pods_in_group(self, key: GroupKey) -> Iterable[Pod]:
        return [p for p in self.pods.values() if p.group_key == key]

    def pod(self, key: PodKey) -> Pod | None:
        return self.pods.get(key)

    def is_assumed(self, key: PodKey) -> bool:
        return False

    def default_selector(self, pod: Pod) -> None:
        return None


def units_of(groups: list[dict[str, Any]], pods: list[Pod]) -> Units:
    return Units(Lister(groups, pods), {}, ())


def whole(name: str, priority: int) -> dict[str, Any]:
    return native_gang(name, 1, priority=priority, disruptionMode={"all": {}})


def single(name: str, priority: int) -> dict[str, Any]:
    return native_gang(name, 1, priority=priority, disruptionMode={"single": {}})


# TestMoreImportantVictim: (groups, pods, the first unit's pod, the second's, want).
# A unit of a PodGroup (PodGroupKeyType) is a member of a native group; a
# group of two pods is one whose disruptionMode is All.
MORE_IMPORTANT = [
    pytest.param([], [victim("a", 20), victim("b", 10)], True, id="vi1 has higher priority"),
    pytest.param([], [victim("a", 10), victim("b", 20)], False, id="vi2 has higher priority"),
    pytest.param(
        [single("pg", 10)],
        [victim("a", 10, "pg"), victim("b", 10)],
        True,
        id="vi1 is PG, vi2 is Pod, same priority",
    ),
    pytest.param(
        [single("pg", 10)],
        [victim("a", 10), victim("b", 10, "pg")],
        False,
        id="vi1 is Pod, vi2 is PG, same priority",
    ),
    pytest.param(
        [], [victim("a", 10, start=BEFORE), victim("b", 10)], True, id="both Pods, vi1 older"
    ),
    pytest.param(
        [], [victim("a", 10), victim("b", 10, start=BEFORE)], False, id="both Pods, vi2 older"
    ),
    pytest.param(
        [whole("pg1", 10), single("pg2", 10)],
        [victim("a", 10, "pg1"), victim("a2", 10, "pg1"), victim("b", 10, "pg2")],
        True,
        id="both PGs, vi1 larger",
    ),
    pytest.param(
        [single("pg1", 10), whole("pg2", 10)],
        [victim("a", 10, "pg1"), victim("b", 10, "pg2"), victim("b2", 10, "pg2")],
        False,
        id="both PGs, vi2 larger",
    ),
    pytest.param(
        [whole("pg1", 10), whole("pg2", 10)],
        [
            victim("a", 10, "pg1", BEFORE),
            victim("a2", 10, "pg1"),
            victim("b", 10, "pg2"),
            victim("b2", 10, "pg2"),
        ],
        True,
        id="both PGs, same size, vi1 older",
    ),
    pytest.param(
        [whole("pg1", 10), whole("pg2", 10)],
        [
            victim("a", 10, "pg1"),
            victim("a2", 10, "pg1"),
            victim("b", 10, "pg2", BEFORE),
            victim("b2", 10, "pg2"),
        ],
        False,
        id="both PGs, same size, vi2 older",
    ),
]


@pytest.mark.parametrize(("groups", "pods", "want"), MORE_IMPORTANT)
def test_more_important_victim(groups: list[dict[str, Any]], pods: list[Pod], want: bool) -> None:
    units = units_of(groups, pods)
    first = pods[0]
    second = next(p for p in pods if p.name.startswith("b"))
    assert (units.importance(first) < units.importance(second)) is want


def test_a_victims_priority_is_its_pod_groups_when_the_group_sets_one() -> None:
    # upstream's getPodPriority (preemption/util.go)
    pods = [victim("a", 1000, "pg"), victim("b", 1000, "unset"), victim("c", 5)]
    units = units_of([single("pg", 10), native_gang("unset", 1)], pods)
    assert [units.priority(p) for p in pods] == [10, 1000, 5]


def test_a_whole_groups_members_sort_together_as_one_unit() -> None:
    # Same priority: the group of three (one unit, larger) before the lone pods,
    # its pods adjacent however old the lone pods are.
    pods = [
        victim("g0", 10, "pg"),
        victim("lone-old", 10, start=BEFORE),
        victim("g1", 10, "pg"),
        victim("lone", 10),
        victim("g2", 10, "pg"),
    ]
    units = units_of([whole("pg", 10)], pods)
    order = [p.name for p in sorted(pods, key=units.importance)]
    assert order[:3] == ["g0", "g1", "g2"] and order[3:] == ["lone-old", "lone"]


# ---- TestPodGroupPreemption (integration cases, through the simulator) ---------------


def cpu_node(name: str, cpu: int) -> dict[str, Any]:
    return node(name, "r0", cpu=cpu)


@pytest.mark.parametrize(
    "victim_group",
    [
        pytest.param(
            native_gang("pg2", 3, priority=10, disruptionMode={"all": {}}),
            id="Preempt the whole PodGroup even if preempting a single Pod would suffice",
        ),
        pytest.param(
            {
                **native_gang("pg2", 1, priority=10, disruptionMode={"all": {}}),
                "spec": {
                    "schedulingPolicy": {"basic": {}},
                    "priority": 10,
                    "disruptionMode": {"all": {}},
                },
            },
            id="Preempt the whole basic PodGroup with a PodGroup disruption mode",
        ),
    ],
)
def test_pod_group_preemption(victim_group: dict[str, Any]) -> None:
    low = [native_member("pg2", i, 1, 10, "n0") for i in range(1, 4)]
    high = native_member("pg1", 1, 1, 100)
    out = run([cpu_node("n0", 3), native_gang("pg1", 1, priority=100), victim_group, *low, high])
    assert {k for k, v in out["pods"].items() if v.get("preemptedBy")} == {
        f"default/pg2-{i}" for i in range(1, 4)
    }
    assert out["pods"]["default/pg1-1"]["node"] == "n0"


# ---- a lone preemptor ------------------------------------------------------------------


def test_a_lone_pod_takes_a_whole_group_on_every_node_and_marks_each_member() -> None:
    # The group runs one member on each of two 1-cpu nodes; the lone pod needs
    # one node. kube-scheduler 1.37: the group is one victim, so both members go,
    # each with the DisruptionTarget condition (reason PreemptionByScheduler).
    h = Harness(nodes=2, cpu="1")

    async def go() -> None:
        h.s.on_pod_group(whole("g", 10))
        members = [h.add(native_member("g", i, 1, 10, f"n{i}")) for i in range(2)]
        lone = h.add(make_pod("lone").req(cpu="1").priority(100).obj())
        await h.drain()
        for key in members:
            conds = h.cluster.pods[key]["status"]["conditions"]
            assert any(
                c["type"] == "DisruptionTarget"
                and c["status"] == "True"
                and c["reason"] == "PreemptionByScheduler"
                for c in conds
            ), conds
        assert sorted(k for k, _ in h.cluster.deletions) == sorted(members)
        await h.advance(30)
        assert h.node_of(lone) in {"n0", "n1"}

    asyncio.run(go())


def test_a_lone_pod_does_not_take_a_whole_group_of_its_priority_or_higher() -> None:
    # The group's priority (100) rules, not its pods' (10).
    nodes = [cpu_node(f"n{i}", 2) for i in range(2)]
    members = [native_member("v", i, 2, 10, f"n{i}") for i in range(2)]
    lone = make_pod("lone").req(cpu="2").priority(100).obj()
    out = run(
        [*nodes, native_gang("v", 1, priority=100, disruptionMode={"all": {}}), *members, lone]
    )
    assert not any(v.get("preemptedBy") for v in out["pods"].values())
    assert out["pods"]["default/lone"]["node"] is None


def test_a_lone_pod_weighs_a_victim_at_its_pod_groups_priority() -> None:
    # Members of priority 0 in a group of priority 500 are not victims of a
    # priority-100 pod; members of priority 1000 in a group of priority 10 are.
    def scene(group_priority: int, pod_priority: int) -> dict[str, Any]:
        members = [native_member("v", i, 2, pod_priority, f"n{i}") for i in range(3)]
        lone = make_pod("lone").req(cpu="2").priority(100).obj()
        nodes = [cpu_node(f"n{i}", 2) for i in range(3)]
        return run([*nodes, native_gang("v", 1, priority=group_priority), *members, lone])

    out = scene(500, 0)
    assert not any(v.get("preemptedBy") for v in out["pods"].values())
    out = scene(10, 1000)
    assert sum(1 for v in out["pods"].values() if v.get("preemptedBy")) == 1
    assert out["pods"]["default/lone"]["node"] is not None


def test_a_lone_pod_prefers_the_node_where_no_whole_group_goes() -> None:
    # n0 holds a member of a two-member group that goes whole, n1 a lone pod of
    # the same priority: the candidate on n1 takes one victim, n0's two.
    nodes = [cpu_node(f"n{i}", 2) for i in range(3)]
    members = [native_member("v", 0, 2, 10, "n0"), native_member("v", 1, 2, 10, "n2")]
    other = make_pod("other").req(cpu="2").priority(10).node("n1").phase("Running").obj()
    lone = make_pod("lone").req(cpu="2").priority(100).obj()
    out = run([*nodes, native_gang("v", 1, disruptionMode={"all": {}}), *members, other, lone])
    assert {k for k, v in out["pods"].items() if v.get("preemptedBy")} == {"default/other"}
    assert out["pods"]["default/lone"]["node"] == "n1"


def test_a_unit_is_reprieved_whole_or_not_at_all() -> None:
    # n0 (3 cpu) holds a group of two that goes whole and a lone pod, all of
    # priority 10; the preemptor needs 2 cpu. The group (a PodGroup, so more
    # important) is tried first: one member fits back, the second does not, so
    # both go and the lone pod stays (default_preemption.go's reprieveVictim).
    members = [native_member("g", i, 1, 10, "n0") for i in range(2)]
    other = make_pod("other").req(cpu="1").priority(10).node("n0").phase("Running").obj()
    high = make_pod("high").req(cpu="2").priority(100).obj()
    out = run([cpu_node("n0", 3), whole("g", 10), *members, other, high])
    assert {k for k, v in out["pods"].items() if v.get("preemptedBy")} == {
        "default/g-0",
        "default/g-1",
    }
    assert out["pods"]["default/high"]["node"] == "n0"


def test_a_units_pdb_violations_count_every_member() -> None:
    # upstream's FilterVictimsWithPDBViolation: "podgroup victim with multiple
    # pods, all violating". n0 holds one member of a group of priority 5 that
    # goes whole (its other member on n2), n1 a lone pod of priority 10; no
    # budget allows a disruption. Counting both members, n0's candidate violates
    # two budgets' pods and n1's one: n1 wins (counting only n0's member, the
    # tie would go to n0's lower priority).
    h = Harness(nodes=3, cpu="1")

    async def go() -> None:
        h.s.on_pod_group(whole("g", 5))
        for i, n in ((0, "n0"), (1, "n2")):
            obj = native_member("g", i, 1, 5, n)
            obj["metadata"]["labels"] = {"app": "g"}
            h.add(obj)
        h.running("other", "n1", "1", 10)
        h.cluster.pods[PodKey("default/other")]["metadata"]["labels"] = {"app": "other"}
        h.s.on_pod(h.cluster.pods[PodKey("default/other")])
        for app in ("g", "other"):
            h.s.on_pdb(
                {
                    "metadata": {"name": app, "namespace": "default"},
                    "spec": {"selector": {"matchLabels": {"app": app}}},
                    "status": {"disruptionsAllowed": 0},
                }
            )
        high = h.add(make_pod("high").req(cpu="1").priority(100).obj())
        await h.drain()
        assert [k for k, _ in h.cluster.deletions] == ["default/other"]
        await h.advance(30)
        assert h.node_of(high) == "n1"

    asyncio.run(go())
