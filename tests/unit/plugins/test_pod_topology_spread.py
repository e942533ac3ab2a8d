"""PodTopologySpread, filter and score (the seed's cases and kube-scheduler's rules)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter, run_score
from troupe.api.parse import parse_label_selector
from troupe.config import default_config
from troupe.core.snapshot import PodMatcher
from troupe.framework.interface import PluginArgsError
from troupe.plugins.pod_topology_spread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
)
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import simulate

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
SKEW = (ERR_REASON_CONSTRAINTS_NOT_MATCH,)
WEB = parse_label_selector({"matchLabels": {"app": "web"}}, "s.")


def spread(
    key: str, max_skew: int = 1, when: str = "DoNotSchedule", **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    c.update(extra)
    return c


def web(name: str) -> Any:
    return make_pod(name).label("app", "web")


# Four nodes in two zones with three matching pods: n1 1, n2 1, n3 1, n4 0.
NODES = [
    make_node("n1").zone("z1"),
    make_node("n2").zone("z1"),
    make_node("n3").zone("z2"),
    make_node("n4").zone("z2"),
]
EXISTING = [
    web("e1").node("n1"),
    web("e2").node("n2"),
    web("e3").node("n3"),
    make_pod("other").label("app", "db").node("n4"),
]


def filter_result(
    pod: Any, nodes: list[Any] = NODES, existing: list[Any] = EXISTING
) -> dict[str, tuple[str, ...]]:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing])
    return run_filter(PodTopologySpread.new({}, make_handle()), pod.build(), table)


@pytest.mark.parametrize(
    ("constraints", "want"),
    [
        pytest.param([spread(ZONE)], {"n1": SKEW, "n2": SKEW}, id="max-skew-1-by-zone"),
        pytest.param([spread(HOST)], {"n1": SKEW, "n2": SKEW, "n3": SKEW}, id="max-skew-1-by-node"),
        pytest.param([spread(ZONE, 2)], {}, id="max-skew-2"),
        pytest.param(
            [spread(ZONE), spread(HOST)],
            {"n1": SKEW, "n2": SKEW, "n3": SKEW},
            id="two-constraints-intersect",
        ),
        pytest.param(
            [spread(ZONE, minDomains=3)],
            {"n1": SKEW, "n2": SKEW, "n3": SKEW, "n4": SKEW},
            id="min-domains-not-met",
        ),
        pytest.param([spread(ZONE, when="ScheduleAnyway")], {}, id="schedule-anyway-no-filter"),
        pytest.param(
            [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
            {},
            id="nil-selector-counts-nothing",
        ),
    ],
)
def test_filter(constraints: list[dict[str, Any]], want: dict[str, Any]) -> None:
    pod = web("p").spec(topologySpreadConstraints=constraints)
    assert filter_result(pod) == want


def test_node_without_the_key_is_rejected_as_unresolvable() -> None:
    nodes = [*NODES, make_node("bare")]
    pod = web("p").spec(topologySpreadConstraints=[spread(ZONE)])
    got = filter_result(pod, nodes)
    assert got["bare"] == (ERR_REASON_NODE_LABEL_NOT_MATCH,)


def test_match_label_keys() -> None:
    existing = [
        web("a").label("v", "1").node("n1"),
        web("b").label("v", "1").node("n2"),
        web("c").label("v", "2").node("n3"),
        web("d").label("v", "2").node("n4"),
    ]
    pod = (
        web("p")
        .label("v", "1")
        .spec(topologySpreadConstraints=[spread(ZONE, matchLabelKeys=["v"])])
    )
    # Only v=1 pods count: z1 has 2, z2 has 0.
    assert filter_result(pod, NODES, existing) == {"n1": SKEW, "n2": SKEW}


TAINTED = [
    make_node("n1").zone("z1"),
    make_node("n2").zone("z1"),
    make_node("n3").zone("z2"),
    make_node("n5").zone("z3").taint("dedicated", "infra"),
]
TAINTED_PODS = [web("e1").node("n1"), web("e2").node("n2"), web("e3").node("n3")]


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        # z3's only node is tainted but still a domain with 0 pods: min is 0.
        pytest.param("Ignore", {"n1": SKEW, "n2": SKEW, "n3": SKEW}, id="ignore-taints"),
        # Honor: the tainted node does not count, z3 is no domain: min is 1.
        pytest.param("Honor", {"n1": SKEW, "n2": SKEW}, id="honor-taints"),
    ],
)
def test_zone_whose_only_node_is_tainted(policy: str, want: dict[str, Any]) -> None:
    pod = web("p").spec(topologySpreadConstraints=[spread(ZONE, nodeTaintsPolicy=policy)])
    assert filter_result(pod, TAINTED, TAINTED_PODS) == want


def tainted_cluster(constraint: dict[str, Any]) -> dict[str, Any]:
    objs = [n.obj() for n in TAINTED] + [p.obj() for p in TAINTED_PODS]
    objs.append(web("p").spec(topologySpreadConstraints=[constraint]).obj())
    return simulate(objs, default_config(IN_TREE)).to_json_obj()["pods"]["default/p"]


def test_tainted_zone_end_to_end() -> None:
    assert tainted_cluster(spread(ZONE)) == {
        "node": None,
        "reason": "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: infra},"
        " 3 node(s) didn't match pod topology spread constraints. preemption: 0/4 nodes are"
        " available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found"
        " for incoming pod..",
        "preemptedBy": None,
    }
    assert tainted_cluster(spread(ZONE, nodeTaintsPolicy="Honor"))["node"] == "n3"
    assert tainted_cluster(spread(ZONE, when="ScheduleAnyway"))["node"] == "n3"


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        # Honor (default): only env=qa nodes count: z1 1 (n1), z2 1 (n3).
        pytest.param("Honor", {}, id="honor-affinity"),
        # Ignore: every node counts: z1 2, z2 1.
        pytest.param("Ignore", {"n1": SKEW, "n2": SKEW}, id="ignore-affinity"),
    ],
)
def test_spread_limited_to_qa_nodes(policy: str, want: dict[str, Any]) -> None:
    nodes = [
        make_node("n1").zone("z1").label("env", "qa"),
        make_node("n2").zone("z1"),
        make_node("n3").zone("z2").label("env", "qa"),
        make_node("n4").zone("z2"),
    ]
    pod = (
        web("p")
        .node_selector(env="qa")
        .spec(topologySpreadConstraints=[spread(ZONE, nodeAffinityPolicy=policy)])
    )
    assert filter_result(pod, nodes, EXISTING[:3]) == want


def test_score_prefers_emptier_domains() -> None:
    table = table_of([n.build() for n in NODES], [p.build() for p in EXISTING])
    pod = web("p").spec(topologySpreadConstraints=[spread(ZONE, when="ScheduleAnyway")]).build()
    got = run_score(PodTopologySpread.new({}, make_handle()), pod, table)
    # z1: 2 pods, z2: 1; weight log(2 + 2); raw 3 and 1; normalised 100*(3+1-s)/3
    assert got == {"n1": 33, "n2": 33, "n3": 100, "n4": 100}


def test_score_by_hostname_and_ignored_nodes() -> None:
    nodes = [*NODES, make_node("bare").label(HOST, "")]
    nodes[-1]._o["metadata"]["labels"].pop(HOST)
    table = table_of([n.build() for n in nodes], [p.build() for p in EXISTING])
    pod = web("p").spec(topologySpreadConstraints=[spread(ZONE, when="ScheduleAnyway")]).build()
    got = run_score(PodTopologySpread.new({}, make_handle()), pod, table)
    assert got is not None and got["bare"] == 0  # lacks the key: ignored


def test_pods_without_constraints_are_skipped() -> None:
    table = table_of([n.build() for n in NODES])
    plugin = PodTopologySpread.new({}, make_handle())
    assert run_filter(plugin, web("p").build(), table) == {}
    assert run_score(plugin, web("p").build(), table) is None


def test_list_defaults_use_the_workload_selector() -> None:
    handle = make_handle()
    handle.lister.selector = WEB  # type: ignore[attr-defined]
    plugin = PodTopologySpread.new(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
            ],
        },
        handle,
    )
    table = table_of([n.build() for n in NODES], [p.build() for p in EXISTING])
    assert run_filter(plugin, web("p").build(), table) == {"n1": SKEW, "n2": SKEW}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"defaultingType": "Magic"}, "defaultingType"),
        ({"defaultConstraints": [{"maxSkew": 1}]}, "defaultConstraints"),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            "defaultConstraints[0].maxSkew",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {},
                    }
                ],
            },
            "defaultConstraints[0].labelSelector",
        ),
    ],
)
def test_args(args: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginArgsError) as e:
        PodTopologySpread.new(args, make_handle())
    assert e.value.field_path == field


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    zones=st.lists(st.integers(0, 2), min_size=2, max_size=7),
    pods=st.integers(1, 14),
    skew=st.integers(1, 2),
    key=st.sampled_from([ZONE, HOST]),
)
def test_no_do_not_schedule_violation_and_counts_stay_exact(
    zones: list[int], pods: int, skew: int, key: str
) -> None:
    objs = [
        make_node(f"n{i}").zone(f"z{z}").capacity(cpu=64, memory="64Gi", pods=110).obj()
        for i, z in enumerate(zones)
    ]
    for j in range(pods):
        objs.append(web(f"p{j}").spec(topologySpreadConstraints=[spread(key, skew)]).obj())
    result = simulate(objs, default_config(IN_TREE)).to_json_obj()
    placed: dict[str, int] = {}
    for v in result["pods"].values():
        if v["node"]:
            dom = f"z{zones[int(v['node'][1:])]}" if key == ZONE else v["node"]
            placed[dom] = placed.get(dom, 0) + 1
    domains = {f"z{z}" for z in zones} if key == ZONE else {f"n{i}" for i in range(len(zones))}
    counts = [placed.get(d, 0) for d in domains]
    assert max(counts) - min(counts) <= skew
    # Nothing left pending while spreading is possible: every pod fits somewhere.
    assert all(v["node"] for v in result["pods"].values())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["web", "db"]), st.booleans()), max_size=20
    )
)
def test_incremental_counts_equal_recounting(ops: list[tuple[int, str, bool]]) -> None:
    from troupe.api.types import NodeName, PodKey
    from troupe.core.cache import Cache
    from troupe.core.clock import VirtualClock
    from troupe.core.snapshot import Snapshot

    cache = Cache(VirtualClock())
    for n in NODES:
        cache.add_node(n.build())
    snap = Snapshot()
    cache.update_snapshot(snap)
    matcher = PodMatcher(frozenset({"default"}), WEB)
    snap.match_counts(matcher)
    for i, (node, app, remove) in enumerate(ops):
        key = PodKey(f"default/p{i % 6}")
        if remove or cache.pod(key) is not None:
            if cache.is_assumed(key):
                cache.forget_pod(key)
            else:
                cache.remove_pod(key)
        else:
            cache.assume_pod(
                make_pod(f"p{i % 6}").label("app", app).build(), NodeName(f"n{node + 1}")
            )
        cache.update_snapshot(snap)
    want = np.zeros(snap.capacity, dtype=np.int64)
    for row in snap.valid_rows().tolist():
        want[row] = sum(1 for p in snap.pods[row].values() if matcher.matches(p))
    assert np.array_equal(snap.match_counts(matcher), want)
    assert np.array_equal(cache.table.match_counts(matcher), want)


def test_system_defaults_score_with_the_workload_selector() -> None:
    """A pod without constraints gets kube-scheduler's System defaults (hostname maxSkew
    3, zone maxSkew 5, ScheduleAnyway) with the selector of its Services/controller."""
    handle = make_handle()
    handle.lister.selector = WEB  # type: ignore[attr-defined]
    table = table_of([n.build() for n in NODES], [p.build() for p in EXISTING])
    got = run_score(PodTopologySpread.new({}, handle), web("p").build(), table)
    # zone weight log(2+2), host weight log(4+2); raw n1 = 2*1.386+4 + 1*1.792+2 = 11,
    # n3 = 9, n4 = 7; normalised 100 * (11 + 7 - s) / 11
    assert got == {"n1": 63, "n2": 63, "n3": 81, "n4": 100}


def test_system_default_max_skews_hostname_3_zone_5() -> None:
    """Only a node with both keys gets the zone constraint's maxSkew - 1: n1 (zone z1,
    nothing matching) = 0 + 4 (zone) + 0 + 2 (hostname) = 6; n2 (no zone label, one
    matching pod) = 1 * log(2 + 2) + 2 = 3.39 -> 3; normalised 100 * (6 + 3 - s) / 6."""
    handle = make_handle()
    handle.lister.selector = WEB  # type: ignore[attr-defined]
    table = table_of(
        [make_node("n1").zone("z1").build(), make_node("n2").build()],
        [web("e").node("n2").build()],
    )
    got = run_score(PodTopologySpread.new({}, handle), web("p").build(), table)
    assert got == {"n1": 50, "n2": 100}


@pytest.mark.parametrize("existing", [[], ["n1"], ["n1", "n2", "n2"]])
def test_system_defaults_on_nodes_without_zone_labels(existing: list[str]) -> None:
    """No node carries the zone key: hostname spreading alone decides (this raised
    IndexError from an empty per-zone array)."""
    handle = make_handle()
    handle.lister.selector = WEB  # type: ignore[attr-defined]
    table = table_of(
        [make_node("n1").build(), make_node("n2").build()],
        [web(f"e{i}").node(n).build() for i, n in enumerate(existing)],
    )
    got = run_score(PodTopologySpread.new({}, handle), web("p").build(), table)
    assert got is not None
    fewer = min(("n1", "n2"), key=existing.count)
    assert got[fewer] == 100
    assert all(0 <= v <= 100 for v in got.values())


@pytest.mark.parametrize("when", ["DoNotSchedule", "ScheduleAnyway"])
def test_key_carried_by_no_node(when: str) -> None:
    table = table_of([n.build() for n in NODES], [p.build() for p in EXISTING])
    pod = web("p").spec(topologySpreadConstraints=[spread("rack", when=when)]).build()
    plugin = PodTopologySpread.new({}, make_handle())
    if when == "DoNotSchedule":
        missing = (ERR_REASON_NODE_LABEL_NOT_MATCH,)
        assert run_filter(plugin, pod, table) == {f"n{i}": missing for i in range(1, 5)}
    else:
        assert run_score(plugin, pod, table) == {f"n{i}": 0 for i in range(1, 5)}


def test_system_defaults_end_to_end() -> None:
    objs: list[dict[str, Any]] = [n.obj() for n in NODES]
    objs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "web-rs", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        }
    )
    for i in range(4):
        o = web(f"w{i}").obj()
        o["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-rs"}]
        objs.append(o)
    pods = simulate(objs, default_config(IN_TREE)).to_json_obj()["pods"]
    assert sorted(v["node"] for v in pods.values()) == ["n1", "n2", "n3", "n4"]


def test_default_selector_from_workloads() -> None:
    from troupe.api.parse import parse_workload
    from troupe.api.types import Workload
    from troupe.core.cache import Cache
    from troupe.core.clock import VirtualClock

    c = Cache(VirtualClock())
    for obj in (
        {"kind": "Service", "metadata": {"name": "s"}, "spec": {"selector": {"app": "web"}}},
        {"kind": "Service", "metadata": {"name": "empty"}, "spec": {}},
        {
            "kind": "StatefulSet",
            "metadata": {"name": "ss"},
            "spec": {"selector": {"matchLabels": {"tier": "front"}}},
        },
    ):
        w = parse_workload(obj)
        assert isinstance(w, Workload)
        c.set_workload(w.kind, w.namespace, w.name, w)
    o = web("p").label("tier", "front").obj()
    o["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "name": "ss"}]
    from troupe.api.parse import parse_pod

    pod = parse_pod(o)
    sel = c.default_selector(pod)  # type: ignore[arg-type]
    assert sel is not None and {r.key for r in sel.requirements} == {"app", "tier"}
    assert c.default_selector(make_pod("lonely").build()) is None


def test_queueing_hints() -> None:
    from troupe.framework.events import QueueingHint

    (pods_reg, _) = PodTopologySpread.new({}, make_handle()).events_to_register()
    assert pods_reg.hint is not None
    waiting = web("p").spec(topologySpreadConstraints=[spread(ZONE)]).build()
    assert pods_reg.hint(waiting, web("gone").node("n1").build(), None) is QueueingHint.QUEUE
    other = make_pod("db").label("app", "db").node("n1").build()
    assert pods_reg.hint(waiting, other, None) is QueueingHint.SKIP
