"""CompositePodGroup (Kubernetes 1.37, scheduling.k8s.io/v1alpha3, alpha behind
the CompositePodGroup gate): a gang of groups placed all-or-nothing across its
children, each child's minCount, the composite's topology key; an invalid tree
keeps its pods waiting and says why; with the gate off parents are not read."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.builders import make_pod
from tests.unit.core.env import Env
from tests.unit.test_preemption import Harness
from troupe.api.types import GroupKey, PodKey, composite_key

GATE_ON = {"troupe": {"featureGates": {"CompositePodGroup": True}}}
NS = "default"


def composite(
    name: str,
    min_group_count: int | None = 2,
    parent: str | None = None,
    topology: str | None = None,
    workload: str = "job",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": workload, "templateName": name},
        "schedulingPolicy": (
            {"gang": {"minGroupCount": min_group_count}}
            if min_group_count is not None
            else {"basic": {}}
        ),
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": spec,
    }


def group(
    name: str, min_count: int, parent: str | None, topology: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "job", "templateName": name},
        "schedulingPolicy": {"gang": {"minCount": min_count}},
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": spec,
    }


def members(e: Env, name: str, n: int, cpu: str = "3") -> list[PodKey]:
    return [
        e.pod(make_pod(f"{name}-{i}").scheduling_group(name).req(cpu=cpu).obj()) for i in range(n)
    ]


def add_composite(e: Env, obj: dict[str, Any]) -> GroupKey:
    """A CompositePodGroup as its watch event; the cluster keeps its own copy
    (its status is patched there)."""
    key = composite_key(NS, obj["metadata"]["name"])
    e.cluster.composite_pod_groups[key] = copy.deepcopy(obj)
    e.s.on_composite_pod_group(copy.deepcopy(obj))
    return key


async def condition(e: Env, key: GroupKey) -> dict[str, Any]:
    """The composite's condition, once what is marked is written."""
    plugin = e.s.profiles["troupe-scheduler"].group_scheduling
    writer = getattr(plugin, "composite_status", None)
    assert writer is not None
    writer.flush_now()
    await e.s.settle()
    (cond,) = e.cluster.composite_pod_groups[key]["status"]["conditions"]
    assert cond["type"] == "CompositePodGroupInitiallyScheduled"
    return dict(cond)


def tree(e: Env, min_group_count: int | None = 2, topology: str | None = None) -> None:
    """A composite "job" of two child gangs, "a" and "b", of two pods each."""
    add_composite(e, composite("job", min_group_count, topology=topology))
    e.s.on_pod_group(group("a", 2, "job"))
    e.s.on_pod_group(group("b", 2, "job"))


async def test_a_gang_of_groups_is_admitted_only_when_every_child_fits() -> None:
    # Three nodes of 4 cpus, pods of 3: room for three pods, and the gang of
    # groups needs two groups of two. Nothing is bound, nothing stays assumed.
    e = Env(GATE_ON)
    for i in range(3):
        e.node(f"n{i}")
    tree(e)
    keys = members(e, "a", 2) + members(e, "b", 2)
    await e.run()
    assert [k for k in keys if e.node_of(k)] == []
    assert e.s.cache.statistics().assumed_pods == 0
    message = e.s.last_failure[keys[0]]
    assert message.startswith('CompositePodGroup "default/job": 1 of minGroupCount 2 groups fit; ')
    assert 'PodGroup "scheduling.k8s.io/default/b": 1 of minCount 2 pods fit' in message
    # A fourth node: the whole tree is placed in one cycle.
    e.node("n3")
    e.later(20)
    await e.run()
    assert len({e.node_of(k) for k in keys}) == 4


async def test_without_the_gate_each_child_is_a_gang_of_its_own() -> None:
    e = Env()
    for i in range(3):
        e.node(f"n{i}")
    tree(e)
    keys = members(e, "a", 2) + members(e, "b", 2)
    await e.run()
    assert len([k for k in keys if e.node_of(k)]) == 2  # one child gang placed


async def test_min_group_count_admits_the_children_that_fit() -> None:
    # minGroupCount 1 of two children: the one that fits is admitted, the
    # other's pods fail with its own message and hold nothing.
    e = Env(GATE_ON)
    for i in range(3):
        e.node(f"n{i}")
    tree(e, min_group_count=1)
    a = members(e, "a", 2)
    b = members(e, "b", 2)
    await e.run()
    assert all(e.node_of(k) for k in a)
    assert not any(e.node_of(k) for k in b)
    assert e.s.last_failure[b[0]].startswith(
        'PodGroup "scheduling.k8s.io/default/b": 1 of minCount 2 pods fit'
    )
    assert e.s.cache.statistics().assumed_pods == 0


async def test_the_composite_topology_keeps_the_whole_tree_in_one_domain() -> None:
    # Two racks of two nodes and one of four: only the big rack holds both
    # children together (each child alone would fit in a small rack).
    e = Env(GATE_ON)
    for i in range(2):
        e.node(f"r1-{i}", rack="r1")
        e.node(f"r2-{i}", rack="r2")
    for i in range(4):
        e.node(f"r3-{i}", rack="r3")
    tree(e, topology="rack")
    keys = members(e, "a", 2) + members(e, "b", 2)
    await e.run()
    assert {e.node_of(k) for k in keys} == {f"r3-{i}" for i in range(4)}


async def test_a_child_topology_is_placed_inside_the_composite_domain() -> None:
    # The composite keeps the tree in one block; each child in one rack of it.
    e = Env(GATE_ON)
    for b in ("b1", "b2"):
        for r in ("r1", "r2"):
            for i in range(2):
                e.node(f"{b}-{r}-{i}", block=b, rack=f"{b}-{r}")
    e.s.on_composite_pod_group(composite("job", 2, topology="block"))
    e.s.on_pod_group(group("a", 2, "job", topology="rack"))
    e.s.on_pod_group(group("b", 2, "job", topology="rack"))
    a = members(e, "a", 2)
    b = members(e, "b", 2)
    await e.run()
    nodes_a = {e.node_of(k) for k in a}
    nodes_b = {e.node_of(k) for k in b}
    assert None not in nodes_a | nodes_b
    blocks = {n.split("-")[0] for n in nodes_a | nodes_b if n}
    assert len(blocks) == 1
    assert len({n.rsplit("-", 1)[0] for n in nodes_a if n}) == 1
    assert len({n.rsplit("-", 1)[0] for n in nodes_b if n}) == 1


async def test_a_tree_of_three_levels() -> None:
    # root (2 of 2) -> mid (1 of 1) -> a; root -> b.
    e = Env(GATE_ON)
    for i in range(4):
        e.node(f"n{i}")
    e.s.on_composite_pod_group(composite("root", 2))
    e.s.on_composite_pod_group(composite("mid", 1, parent="root"))
    e.s.on_pod_group(group("a", 2, "mid"))
    e.s.on_pod_group(group("b", 2, "root"))
    keys = members(e, "a", 2) + members(e, "b", 2)
    await e.run()
    assert all(e.node_of(k) for k in keys)


async def test_a_missing_parent_keeps_the_pods_waiting_and_says_so() -> None:
    e = Env(GATE_ON)
    e.node("n0")
    e.s.on_pod_group(group("a", 1, "job"))
    (k,) = members(e, "a", 1, cpu="1")
    await e.run()
    assert e.node_of(k) is None
    cond = e.condition(k)
    assert cond is not None
    assert cond["message"] == 'CompositePodGroup "default/job" not found'
    # It comes: the pod is placed.
    e.s.on_composite_pod_group(composite("job", 1))
    e.later(1)
    await e.run()
    assert e.node_of(k) == "n0"


async def test_parents_that_form_a_cycle_are_refused() -> None:
    e = Env(GATE_ON)
    e.node("n0")
    e.s.on_composite_pod_group(composite("x", 1, parent="y"))
    e.s.on_composite_pod_group(composite("y", 1, parent="x"))
    e.s.on_pod_group(group("a", 1, "x"))
    (k,) = members(e, "a", 1, cpu="1")
    await e.run()
    cond = e.condition(k)
    assert cond is not None and "form a cycle" in cond["message"]


async def test_a_tree_deeper_than_four_levels_is_refused() -> None:
    # Workload's WorkloadMaxTreeDepth is 4: three composites above a group is
    # the deepest; a fourth is refused.
    e = Env(GATE_ON)
    e.node("n0")
    e.s.on_composite_pod_group(composite("c1", 1))
    for i in (2, 3, 4):
        e.s.on_composite_pod_group(composite(f"c{i}", 1, parent=f"c{i - 1}"))
    e.s.on_pod_group(group("deep", 1, "c4"))
    e.s.on_pod_group(group("ok", 1, "c3"))
    (deep,) = members(e, "deep", 1, cpu="1")
    (ok,) = members(e, "ok", 1, cpu="1")
    await e.run()
    cond = e.condition(deep)
    assert cond is not None and "deeper than 4 levels" in cond["message"]
    assert e.node_of(ok) == "n0"


async def test_groups_of_two_workloads_in_one_tree_are_refused() -> None:
    e = Env(GATE_ON)
    e.node("n0")
    e.s.on_composite_pod_group(composite("job", 1, workload="other"))
    e.s.on_pod_group(group("a", 1, "job"))
    (k,) = members(e, "a", 1, cpu="1")
    await e.run()
    cond = e.condition(k)
    assert cond is not None
    assert cond["message"] == (
        'CompositePodGroup "default/job": the tree of groups references more than one '
        "Workload (job, other)"
    )


# ---- a composite as a preemption unit ------------------------------------------------


def _victims_of_a_lone_pod(disruption: str) -> list[PodKey]:
    """Two child groups of a composite (minCount 1) run two pods each, one on
    each of four 1-cpu nodes; a lone pod of higher priority needs one node.
    Returns the pods deleted, after checking each has the DisruptionTarget
    condition and the lone pod is placed."""
    h = Harness(nodes=4, cpu="1", config=GATE_ON)

    async def go() -> list[PodKey]:
        c = composite("job", 2)
        c["spec"]["disruptionMode"] = {disruption: {}}
        h.s.on_composite_pod_group(c)
        for i, g in enumerate(("a", "b")):
            h.s.on_pod_group(group(g, 1, "job"))
            for j in range(2):
                b = make_pod(f"{g}-{j}").req(cpu="1").priority(10)
                obj = b.node(f"n{2 * i + j}").phase("Running").obj()
                obj["spec"]["schedulingGroup"] = {"podGroupName": g}
                h.add(obj)
        lone = h.add(make_pod("lone").req(cpu="1").priority(100).obj())
        await h.drain()
        deleted = sorted(k for k, _ in h.cluster.deletions)
        for key in deleted:
            conds = h.cluster.pods[key]["status"]["conditions"]
            assert any(
                c["type"] == "DisruptionTarget" and c["reason"] == "PreemptionByScheduler"
                for c in conds
            ), conds
        await h.advance(30)
        assert h.node_of(lone) is not None
        return deleted

    return asyncio.run(go())


def test_a_composite_whose_disruption_mode_is_all_goes_whole() -> None:
    # One unit: every pod of its subtree, on every node, for one lone pod.
    assert _victims_of_a_lone_pod("all") == [f"default/{g}-{j}" for g in "ab" for j in range(2)]


def test_a_composite_whose_disruption_mode_is_single_loses_one_pod() -> None:
    assert len(_victims_of_a_lone_pod("single")) == 1


# ---- status: CompositePodGroupInitiallyScheduled --------------------------------------


async def test_the_composite_says_why_it_waits_then_that_it_is_scheduled() -> None:
    e = Env(GATE_ON)
    for i in range(3):
        e.node(f"n{i}")
    tree(e)
    key = composite_key(NS, "job")
    keys = members(e, "a", 2) + members(e, "b", 2)
    await e.run()
    cond = await condition(e, key)
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == e.s.last_failure[keys[0]]
    e.node("n3")
    e.later(20)
    await e.run()
    cond = await condition(e, key)
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "Scheduled", "")


async def test_an_invalid_tree_is_said_on_the_composite() -> None:
    e = Env(GATE_ON)
    e.node("n0")
    key = add_composite(e, composite("job", 1, workload="other"))
    e.s.on_pod_group(group("a", 1, "job"))
    members(e, "a", 1, cpu="1")
    await e.run()
    cond = await condition(e, key)
    assert (cond["status"], cond["reason"]) == ("False", "Invalid")
    assert "references more than one Workload (job, other)" in cond["message"]


# ---- a gang of groups preempts as one unit -------------------------------------------


def _tree_preempts(guard_priority: int) -> tuple[list[PodKey], list[PodKey]]:
    """Four 4-cpu nodes, each full with one 4-cpu pod (three of priority 0,
    the fourth of `guard_priority`); a composite of two child gangs of two
    3-cpu pods of priority 100. Returns (the pods deleted, the tree's pods
    bound once the victims are gone)."""
    h = Harness(nodes=4, cpu="4", config=GATE_ON)

    async def go() -> tuple[list[PodKey], list[PodKey]]:
        h.s.on_composite_pod_group(composite("job", 2))
        for i in range(4):
            h.running(f"low{i}", f"n{i}", "4", guard_priority if i == 3 else 0)
        keys = []
        for g in ("a", "b"):
            h.s.on_pod_group(group(g, 2, "job"))
            for j in range(2):
                obj = make_pod(f"{g}-{j}").req(cpu="3").priority(100).obj()
                obj["spec"]["schedulingGroup"] = {"podGroupName": g}
                keys.append(h.add(obj))
        await h.drain()
        deleted = sorted(k for k, _ in h.cluster.deletions)
        await h.advance(60)
        await h.drain()
        return deleted, [k for k in keys if h.node_of(k)]

    return asyncio.run(go())


def test_a_gang_of_groups_preempts_for_all_its_children_at_once() -> None:
    deleted, bound = _tree_preempts(guard_priority=0)
    assert deleted == [f"default/low{i}" for i in range(4)]
    assert len(bound) == 4


def test_a_gang_of_groups_evicts_nothing_when_one_child_cannot_be_placed() -> None:
    # The fourth node's pod outranks the tree: only one child could be placed
    # by preemption, short of minGroupCount 2, so nothing is evicted.
    deleted, bound = _tree_preempts(guard_priority=1000)
    assert deleted == []
    assert bound == []


# ---- troupe simulate reads them from a dump ----------------------------------------------


def test_the_simulator_places_a_gang_of_groups_from_a_dump() -> None:
    from tests.builders import make_node
    from troupe.config import parse_config
    from troupe.plugins.registry import IN_TREE
    from troupe.tools.simulate import simulate

    objects: list[dict[str, Any]] = [
        make_node(f"n{i}").capacity(cpu=4, memory="8Gi", pods=110).obj() for i in range(3)
    ]
    objects += [composite("job", 2), group("a", 2, "job"), group("b", 2, "job")]
    for g in ("a", "b"):
        for i in range(2):
            objects.append(make_pod(f"{g}-{i}").scheduling_group(g).req(cpu="3").obj())
    gated = simulate(objects, parse_config(GATE_ON, IN_TREE)).to_json_obj()
    plain = simulate(objects, parse_config({}, IN_TREE)).to_json_obj()
    # Three nodes hold three of the four pods: with the gate, nothing of the
    # gang of groups; without, one child gang on its own.
    assert sum(1 for v in gated["pods"].values() if v["node"]) == 0
    assert sum(1 for v in plain["pods"].values() if v["node"]) == 2
