"""Topology-aware gang placement (issue #20), end to end in the simulator: a
required level keeps a gang in one domain, preferred levels are tried from the
narrowest, placements are scored to fill domains, a bad request is a reason on
the pods, and preemption clears one domain."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod, table_of
from troupe.api.parse import parse_pod_group
from troupe.api.types import PodGroup
from troupe.config import default_config
from troupe.core.topology import (
    PREFERRED_ANNOTATION,
    REQUIRED_ANNOTATION,
    TopologyError,
    coarser_or_equal,
    domains,
    topology_of,
)
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import simulate

RACK = "troupe.dev/rack"
BLOCK = "troupe.dev/block"


def node(name: str, rack: str | None, block: str | None = None, cpu: int = 4) -> dict[str, Any]:
    b = make_node(name).capacity(cpu=cpu, memory="64Gi", pods=110)
    if rack is not None:
        b = b.label(RACK, rack)
    if block is not None:
        b = b.label(BLOCK, block)
    return b.obj()


def group(
    name: str, min_member: int, required: str | None = None, preferred: str | None = None
) -> dict[str, Any]:
    ann = {}
    if required is not None:
        ann[REQUIRED_ANNOTATION] = required
    if preferred is not None:
        ann[PREFERRED_ANNOTATION] = preferred
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "annotations": ann},
        "spec": {"minMember": min_member},
    }


def members(g: str, n: int, cpu: int = 1, priority: int = 0) -> list[dict[str, Any]]:
    return [
        make_pod(f"{g}-{i}").group(g).req(cpu=str(cpu)).priority(priority).obj() for i in range(n)
    ]


def run(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return simulate(objects, default_config(IN_TREE)).to_json_obj()


def racks_of(out: dict[str, Any], rack_of: dict[str, str], prefix: str) -> set[str]:
    return {
        rack_of[v["node"]] for k, v in out["pods"].items() if k.startswith(prefix) and v["node"]
    }


# ---- reading the request -------------------------------------------------------------


def pg_of(obj: dict[str, Any]) -> PodGroup:
    pg = parse_pod_group(obj)
    assert isinstance(pg, PodGroup), pg
    return pg


def native(topology: Any, field: str = "topology") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {field: topology},
        },
    }


def test_the_native_field_and_the_annotations_are_read() -> None:
    spec = topology_of(pg_of(native([{"key": RACK}])))
    assert spec.required == (RACK,) and spec.preferred == ()
    assert spec.where(RACK) == "spec.schedulingConstraints.topology[0].key"
    spec = topology_of(pg_of(native([{"level": BLOCK}], "topologyConstraints")))
    assert spec.required == (BLOCK,)
    spec = topology_of(pg_of(group("g", 2, required=BLOCK, preferred=f"{RACK}, zone")))
    assert spec.required == (BLOCK,) and spec.preferred == (RACK, "zone")
    assert topology_of(pg_of(group("g", 2))).empty


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (native([{"key": ""}]), "spec.schedulingConstraints.topology[0].key: Invalid value"),
        (native([{}]), "spec.schedulingConstraints.topology[0].key: Required value"),
        (
            native({"key": RACK}),
            "spec.schedulingConstraints.topology: Invalid value: must be a list",
        ),
        (group("g", 2, required=f"{RACK},{BLOCK}"), "one label key"),
        (group("g", 2, preferred=f"{RACK},{RACK}"), "a key is listed twice"),
        (group("g", 2, preferred=f"{RACK},,zone"), "empty label key"),
        (group("g", 2, required=RACK, preferred=RACK), "required already"),
        (
            group("g", 2, required="Troupe.dev/rack"),
            "'Troupe.dev/rack': prefix part must be a lowercase RFC 1123 subdomain",
        ),
        (native([{"key": "rack!"}]), "'rack!': name part must consist of alphanumeric"),
    ],
)
def test_a_request_that_cannot_be_read_names_its_field(obj: dict[str, Any], problem: str) -> None:
    with pytest.raises(TopologyError) as e:
        topology_of(pg_of(obj))
    assert problem in str(e.value)


def test_domains_group_nodes_by_label_value_and_leave_unlabelled_out() -> None:
    from troupe.api.parse import parse_node

    labels = [("r1", "b1"), ("r2", "b1"), ("r1", "b1"), (None, "b2"), ("r3", "b2")]
    ns = [parse_node(node(f"n{i}", rack, block)) for i, (rack, block) in enumerate(labels)]
    t = table_of(ns)
    got = {d.name: [t.names[r] for r in d.rows] for d in domains(t, (RACK,), t.valid_rows())}
    assert got == {f"{RACK}=r1": ["n0", "n2"], f"{RACK}=r2": ["n1"], f"{RACK}=r3": ["n4"]}
    both = domains(t, (BLOCK, RACK), t.valid_rows())
    assert [d.name for d in both] == [
        f"{BLOCK}=b1,{RACK}=r1",
        f"{BLOCK}=b1,{RACK}=r2",
        f"{BLOCK}=b2,{RACK}=r3",
    ]
    assert coarser_or_equal(t, BLOCK, RACK) and not coarser_or_equal(t, RACK, BLOCK)
    assert domains(t, (RACK,), np.empty(0, dtype=np.intp)) == []


# ---- placement -----------------------------------------------------------------------


def test_a_required_rack_keeps_the_gang_in_the_one_rack_that_holds_it() -> None:
    # r1 has two nodes, r2 three: three 3-cpu members fit only in r2.
    nodes = [
        node("a0", "r1"),
        node("a1", "r1"),
        node("b0", "r2"),
        node("b1", "r2"),
        node("b2", "r2"),
    ]
    rack = {"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2", "b2": "r2"}
    out = run([*nodes, group("job", 3, required=RACK), *members("job", 3, cpu=3)])
    assert racks_of(out, rack, "default/job-") == {"r2"}
    assert all(out["pods"][f"default/job-{i}"]["node"] for i in range(3))


def test_without_topology_the_same_gang_spreads() -> None:
    """The baseline the issue measures: the scheduler spreads a gang by default."""
    nodes = [node(f"n{i}", f"r{i % 2}") for i in range(4)]
    rack = {f"n{i}": f"r{i % 2}" for i in range(4)}
    out = run([*nodes, group("job", 4), *members("job", 4, cpu=1)])
    assert len(racks_of(out, rack, "default/job-")) == 2
    out = run([*nodes, group("job", 4, required=RACK), *members("job", 4, cpu=1)])
    assert len(racks_of(out, rack, "default/job-")) == 1


def test_gangs_fill_a_rack_before_starting_another() -> None:
    # Two racks of two 4-cpu nodes; r1 already half used. A 2x1-cpu gang goes to
    # the fuller rack (bin-packing), leaving r2 whole for a larger gang.
    nodes = [node("a0", "r1"), node("a1", "r1"), node("b0", "r2"), node("b1", "r2")]
    busy = make_pod("busy").req(cpu="3").node("a0").phase("Running").obj()
    rack = {"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2"}
    out = run([*nodes, busy, group("small", 2, required=RACK), *members("small", 2)])
    assert racks_of(out, rack, "default/small-") == {"r1"}


def test_no_rack_with_room_is_said_with_the_best_rack() -> None:
    nodes = [node("a0", "r1"), node("a1", "r1"), node("b0", "r2")]
    out = run([*nodes, group("job", 3, required=RACK), *members("job", 3, cpu=3)])
    for i in range(3):
        p = out["pods"][f"default/job-{i}"]
        assert p["node"] is None
        assert p["reason"].startswith(
            f'PodGroup "default/job": no {RACK} has room for minMember 3: best {RACK}=r1 fits 2; '
        ), p["reason"]


def test_preferred_levels_are_tried_narrowest_first_and_never_block() -> None:
    # Racks of one 4-cpu node, blocks of two racks: a gang of 3x2 cpu fits in no
    # rack, in block b1 (2 racks = 8 cpu), and anywhere.
    nodes = [node("n0", "r0", "b0"), node("n1", "r1", "b1"), node("n2", "r2", "b1")]
    block = {"n0": "b0", "n1": "b1", "n2": "b1"}
    pref = f"{RACK},{BLOCK}"
    out = run([*nodes, group("job", 3, preferred=pref), *members("job", 3, cpu=2)])
    assert racks_of(out, block, "default/job-") == {"b1"}
    # Four members of 2 cpu fit in no block (b1 has 8 cpu, 4x2 does fit; make it 5).
    out = run([*nodes, group("big", 5, preferred=pref), *members("big", 5, cpu=2)])
    assert sum(1 for k, v in out["pods"].items() if k.startswith("default/big") and v["node"]) == 5
    assert len(racks_of(out, block, "default/big-")) == 2  # anywhere: a preference never blocks


@pytest.mark.parametrize(
    ("pg", "problem"),
    [
        (group("job", 2, required="troupe.dev/row"), "no node has the label 'troupe.dev/row'"),
        (
            group("job", 2, required=RACK, preferred=BLOCK),
            f"preferred level '{BLOCK}' is not narrower than the required '{RACK}'",
        ),
    ],
)
def test_a_bad_request_is_a_reason_on_the_pods(pg: dict[str, Any], problem: str) -> None:
    nodes = [node("n0", "r0", "b0"), node("n1", "r1", "b0")]
    out = run([*nodes, pg, *members("job", 2)])
    for i in range(2):
        p = out["pods"][f"default/job-{i}"]
        assert p["node"] is None and problem in p["reason"], p["reason"]


def test_a_member_created_later_joins_its_group_in_its_rack_or_waits() -> None:
    nodes = [node("a0", "r1", cpu=2), node("b0", "r2"), node("b1", "r2")]
    running = [
        make_pod(f"job-{i}").group("job").req(cpu="1").node("a0").phase("Running").obj()
        for i in range(2)
    ]
    late = make_pod("job-2").group("job").req(cpu="1").obj()
    out = run([*nodes, group("job", 2, required=RACK), *running, late])
    late_out = out["pods"]["default/job-2"]
    assert late_out["node"] is None  # r1 is full; r2 has room but is another rack
    assert f"node(s) outside {RACK}=r1" in late_out["reason"], late_out["reason"]


def test_the_native_field_keeps_a_gang_in_one_rack() -> None:
    nodes = [node(f"n{i}", f"r{i % 2}") for i in range(4)]
    rack = {f"n{i}": f"r{i % 2}" for i in range(4)}
    pg = native([{"key": RACK}])
    pg["spec"]["schedulingPolicy"] = {"gang": {"minCount": 4}}
    pods = []
    for i in range(4):
        p = make_pod(f"g-{i}").req(cpu="1").obj()
        p["spec"]["schedulingGroup"] = {"podGroupName": "g"}
        pods.append(p)
    out = run([*nodes, pg, *pods])
    placed = [v["node"] for v in out["pods"].values() if v["node"]]
    assert len(placed) == 4 and len({rack[n] for n in placed}) == 1


def test_preemption_clears_the_rack_with_the_fewest_lowest_victims() -> None:
    # Two full racks of two 2-cpu nodes. r1 runs two priority-100 pods of 2 cpu;
    # r2 runs four priority-0 pods of 1 cpu. A 2x2-cpu gang of priority 1000 with a
    # required rack: r1 costs 2 victims of priority 100, r2 4 of priority 0: the
    # lower priority wins (kube-scheduler's order: the highest victim first).
    nodes = [
        node("a0", "r1", cpu=2),
        node("a1", "r1", cpu=2),
        node("b0", "r2", cpu=2),
        node("b1", "r2", cpu=2),
    ]
    rack = {"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2"}
    run_r1 = [
        make_pod(f"mid{i}").req(cpu="2").priority(100).node(f"a{i}").phase("Running").obj()
        for i in range(2)
    ]
    run_r2 = [
        make_pod(f"low{i}").req(cpu="1").priority(0).node(f"b{i // 2}").phase("Running").obj()
        for i in range(4)
    ]
    out = run(
        [
            *nodes,
            *run_r1,
            *run_r2,
            group("job", 2, required=RACK),
            *members("job", 2, cpu=2, priority=1000),
        ]
    )
    assert racks_of(out, rack, "default/job-") == {"r2"}
    victims = {k for k, v in out["pods"].items() if v.get("preemptedBy")}
    assert victims == {f"default/low{i}" for i in range(4)}
    assert all(out["pods"][f"default/mid{i}"]["node"] for i in range(2))


# ---- properties ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    racks=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    gangs=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(0, 1)), max_size=4),
    running=st.lists(st.tuples(st.integers(0, 11), st.integers(1, 3)), max_size=6),
)
def test_a_required_gang_never_spans_two_racks_nor_runs_below_quorum(
    racks: list[int], gangs: list[tuple[int, int, int]], running: list[tuple[int, int]]
) -> None:
    objs: list[dict[str, Any]] = []
    rack: dict[str, str] = {}
    names: list[str] = []
    for r, n in enumerate(racks):
        for i in range(n):
            name = f"r{r}n{i}"
            objs.append(node(name, f"r{r}"))
            rack[name] = f"r{r}"
            names.append(name)
    for j, (idx, cpu) in enumerate(running):
        objs.append(
            make_pod(f"run{j}")
            .req(cpu=str(cpu))
            .node(names[idx % len(names)])
            .phase("Running")
            .obj()
        )
    for g, (size, cpu, extra) in enumerate(gangs):
        objs.append(group(f"g{g}", size, required=RACK))
        objs.extend(members(f"g{g}", size + extra, cpu=cpu, priority=100))
    out = run(objs)
    for g, (size, _, _) in enumerate(gangs):
        placed = [
            v["node"]
            for k, v in out["pods"].items()
            if k.startswith(f"default/g{g}-") and v["node"]
        ]
        assert len({rack[n] for n in placed}) <= 1, (g, placed)
        assert not placed or len(placed) >= size, (g, placed)


def test_the_domain_is_said_in_the_output_the_status_and_an_event() -> None:
    from troupe.tools.simulate import format_output

    nodes = [node(f"n{i}", f"r{i % 2}") for i in range(4)]
    pg = native([{"key": RACK}])
    pg["spec"]["schedulingPolicy"] = {"gang": {"minCount": 2}}
    pods = []
    for i in range(2):
        p = make_pod(f"g-{i}").req(cpu="1").obj()
        p["spec"]["schedulingGroup"] = {"podGroupName": "g"}
        pods.append(p)
    plain = [group("plain", 2), *members("plain", 2)]
    result = simulate([*nodes, pg, *pods, *plain], default_config(IN_TREE))
    out = result.to_json_obj()
    g = out["podGroups"]["scheduling.k8s.io/default/g"]
    rack = g["domain"]
    assert rack in (f"{RACK}=r0", f"{RACK}=r1")
    assert "domain" not in out["podGroups"]["default/plain"]  # no topology, no key
    (cond,) = g["conditions"]
    assert cond["status"] == "True" and cond["message"] == f"placed in {rack}"
    placed = [e for e in result.events if e["reason"] == "Placed"]
    assert [e["message"] for e in placed] == [f"placed in {rack}: 2 pods"]
    table = format_output(result, "table")
    header = next(line for line in table.splitlines() if line.startswith("PODGROUP"))
    assert header.endswith("DOMAIN")
    row = next(line for line in table.splitlines() if line.startswith("scheduling.k8s.io/"))
    assert row.endswith(rack)
    assert next(line for line in table.splitlines() if line.startswith("default/plain ")).endswith(
        "-"
    )


def test_a_rack_no_member_passes_filter_in_ranks_after_the_others() -> None:
    # r1 (two nodes) would be the fuller rack with the gang in it, but its nodes
    # are tainted: the first member's Filter rules it out before any trial, so
    # r2 (three nodes) holds the gang even with one domain tried per cycle
    # (tests/unit/test_topology_domains.py tries the cap itself).
    from troupe.config import parse_config

    def objs() -> list[dict[str, Any]]:
        nodes = []
        for i in range(2):
            n = node(f"a{i}", "r1")
            n["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
            nodes.append(n)
        nodes += [node(f"b{i}", "r2") for i in range(3)]
        return [*nodes, group("job", 2, required=RACK), *members("job", 2, cpu=2)]

    out = run(objs())
    assert {"r2"} == racks_of(
        out, {"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2", "b2": "r2"}, "default/job-"
    )
    one = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "troupe-scheduler",
                    "pluginConfig": [
                        {"name": "Coscheduling", "args": {"topologyDomainsPerCycle": 1}}
                    ],
                }
            ],
        },
        IN_TREE,
    )
    out = simulate(objs(), one).to_json_obj()
    assert {"r2"} == racks_of(
        out, {"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2", "b2": "r2"}, "default/job-"
    )


# ---- where a group already runs; the order of preferred levels -----------------------


def test_a_group_already_split_across_racks_is_said_not_joined() -> None:
    # Someone else placed two members in two racks: a late member cannot keep the
    # group in one rack, and the reason says where the members run.
    nodes = [node("a0", "r1"), node("b0", "r2")]
    running = [
        make_pod("job-0").group("job").req(cpu="1").node("a0").phase("Running").obj(),
        make_pod("job-1").group("job").req(cpu="1").node("b0").phase("Running").obj(),
    ]
    late = make_pod("job-2").group("job").req(cpu="1").obj()
    out = run([*nodes, group("job", 2, required=RACK), *running, late])
    reason = out["pods"]["default/job-2"]["reason"]
    assert out["pods"]["default/job-2"]["node"] is None
    assert "members run in more than one domain" in reason, reason
    assert f"{RACK}=r1" in reason and f"{RACK}=r2" in reason, reason


def test_preferred_levels_written_widest_first_are_a_reason() -> None:
    nodes = [node("n0", "r0", "b0"), node("n1", "r1", "b0")]
    out = run([*nodes, group("job", 2, preferred=f"{BLOCK},{RACK}"), *members("job", 2)])
    for i in range(2):
        p = out["pods"][f"default/job-{i}"]
        assert p["node"] is None
        assert f"but '{RACK}' lies within '{BLOCK}'" in p["reason"], p["reason"]


# ---- native PodGroup preemption fields (priority, preemptionPolicy, disruptionMode) ---


def native_gang(name: str, min_count: int, version: str = "v1beta1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def native_member(
    g: str, i: int, cpu: int, priority: int, node_name: str | None = None
) -> dict[str, Any]:
    b = make_pod(f"{g}-{i}").req(cpu=str(cpu)).priority(priority)
    if node_name is not None:
        b = b.node(node_name).phase("Running")
    p = b.obj()
    p["spec"]["schedulingGroup"] = {"podGroupName": g}
    return p


def two_full_nodes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node("n0", "r0", cpu=2), node("n1", "r0", cpu=2)]
    running = [
        make_pod(f"low{i}").req(cpu="2").priority(50).node(f"n{i}").phase("Running").obj()
        for i in range(2)
    ]
    return nodes, running


def test_the_pod_groups_priority_is_the_gangs_in_preemption() -> None:
    # Members of priority 0 could evict nothing; their PodGroup's priority 100
    # evicts the priority-50 pods.
    nodes, running = two_full_nodes()
    pg = native_gang("job", 2, priority=100)
    out = run([*nodes, *running, pg, *(native_member("job", i, 2, 0) for i in range(2))])
    victims = {k for k, v in out["pods"].items() if v.get("preemptedBy")}
    assert victims == {"default/low0", "default/low1"}
    # Without the group's priority the same gang evicts nothing.
    nodes, running = two_full_nodes()
    pg = native_gang("job", 2)
    out = run([*nodes, *running, pg, *(native_member("job", i, 2, 0) for i in range(2))])
    assert not any(v.get("preemptedBy") for v in out["pods"].values())


def test_the_pod_groups_priority_class_is_resolved() -> None:
    nodes, running = two_full_nodes()
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "train"},
        "value": 100,
    }
    pg = native_gang("job", 2, priorityClassName="train")
    out = run([*nodes, *running, pc, pg, *(native_member("job", i, 2, 0) for i in range(2))])
    assert {k for k, v in out["pods"].items() if v.get("preemptedBy")} == {
        "default/low0",
        "default/low1",
    }


def test_a_pod_groups_preemption_policy_never_preempts_nothing() -> None:
    nodes, running = two_full_nodes()
    pg = native_gang("job", 2, priority=100, preemptionPolicy="Never")
    out = run([*nodes, *running, pg, *(native_member("job", i, 2, 0) for i in range(2))])
    assert not any(v.get("preemptedBy") for v in out["pods"].values())
    assert all(out["pods"][f"default/job-{i}"]["node"] is None for i in range(2))


@pytest.mark.parametrize(
    ("version", "single", "whole"),
    [("v1beta1", {"single": {}}, {"all": {}}), ("v1alpha2", "Pod", "PodGroup")],
)
def test_a_victim_group_whose_disruption_mode_is_all_goes_whole(
    version: str, single: Any, whole: Any
) -> None:
    # A running native group of three (minCount 1) on three 2-cpu nodes. A
    # one-member gang of higher priority needs one node: with disruptionMode
    # Single one victim is enough (the group keeps its quorum); with All the
    # whole group goes.
    nodes = [node(f"n{i}", "r0", cpu=2) for i in range(3)]
    victims = [native_member("v", i, 2, 10, f"n{i}") for i in range(3)]
    gang = [native_member("job", 0, 2, 1000)]
    out = run(
        [
            *nodes,
            native_gang("v", 1, version, disruptionMode=single),
            *victims,
            native_gang("job", 1),
            *gang,
        ]
    )
    assert sum(1 for v in out["pods"].values() if v.get("preemptedBy")) == 1
    victims = [native_member("v", i, 2, 10, f"n{i}") for i in range(3)]
    gang = [native_member("job", 0, 2, 1000)]
    out = run(
        [
            *nodes,
            native_gang("v", 1, version, disruptionMode=whole),
            *victims,
            native_gang("job", 1),
            *gang,
        ]
    )
    assert {k for k, v in out["pods"].items() if v.get("preemptedBy")} == {
        f"default/v-{i}" for i in range(3)
    }


def test_a_lone_pod_takes_a_group_that_goes_whole_on_every_node() -> None:
    # kube-scheduler 1.37 (workload-aware preemption): the group is one
    # preemption unit, so the lone pod that needs one node takes both members.
    nodes = [node(f"n{i}", "r0", cpu=2) for i in range(2)]
    victims = [native_member("v", i, 2, 10, f"n{i}") for i in range(2)]
    lone = make_pod("lone").req(cpu="2").priority(1000).obj()
    out = run([*nodes, native_gang("v", 1, disruptionMode={"all": {}}), *victims, lone])
    assert {k for k, v in out["pods"].items() if v.get("preemptedBy")} == {
        "default/v-0",
        "default/v-1",
    }
    assert out["pods"]["default/lone"]["node"] in {"n0", "n1"}
