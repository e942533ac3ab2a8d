"""Property: InterPodAffinity and PodTopologySpread never raise, whatever topology
keys the nodes carry (on some, none or all nodes) and whatever terms the incoming
and the existing pods have (required / preferred, affinity / anti-affinity, spread
constraints, system-default spreading). Before issue #9 a key carried by no node
raised IndexError, which reached users as the pod's reason."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle
from troupe.api.parse import parse_label_selector
from troupe.framework.cycle_state import CycleState
from troupe.plugins.inter_pod_affinity import InterPodAffinity
from troupe.plugins.pod_topology_spread import PodTopologySpread

KEYS = ["topology.kubernetes.io/zone", "region", "rack", "kubernetes.io/hostname"]
APPS = ["a", "b"]

term_st = st.fixed_dictionaries(
    {
        "labelSelector": st.fixed_dictionaries(
            {"matchLabels": st.fixed_dictionaries({"app": st.sampled_from(APPS)})}
        ),
        "topologyKey": st.sampled_from(KEYS),
    }
)
weighted_st = st.builds(
    lambda w, t: {"weight": w, "podAffinityTerm": t}, st.integers(1, 100), term_st
)


def affinity_st() -> st.SearchStrategy[dict[str, Any]]:
    side = st.fixed_dictionaries(
        {},
        optional={
            "requiredDuringSchedulingIgnoredDuringExecution": st.lists(term_st, max_size=2),
            "preferredDuringSchedulingIgnoredDuringExecution": st.lists(weighted_st, max_size=2),
        },
    )
    return st.fixed_dictionaries({}, optional={"podAffinity": side, "podAntiAffinity": side})


spread_st = st.fixed_dictionaries(
    {
        "maxSkew": st.integers(1, 3),
        "topologyKey": st.sampled_from(KEYS),
        "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
        "labelSelector": st.fixed_dictionaries(
            {"matchLabels": st.fixed_dictionaries({"app": st.sampled_from(APPS)})}
        ),
    },
    optional={"minDomains": st.integers(1, 4)},
).map(
    lambda c: (
        c
        if c["whenUnsatisfiable"] == "DoNotSchedule"
        else {k: v for k, v in c.items() if k != "minDomains"}
    )
)

# each node: which of the non-hostname keys it carries, and the value (0..2)
node_labels_st = st.lists(
    st.dictionaries(st.sampled_from(KEYS[:3]), st.integers(0, 2), max_size=3),
    min_size=1,
    max_size=5,
)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Any], list[Any], Any]:
    labels = draw(node_labels_st)
    nodes = []
    for i, ls in enumerate(labels):
        n = make_node(f"n{i}")
        for k, v in ls.items():
            n.label(k, f"v{v}")
        nodes.append(n.build())
    existing = []
    for j in range(draw(st.integers(0, 6))):
        p = make_pod(f"e{j}").label("app", draw(st.sampled_from(APPS)))
        aff = draw(affinity_st())
        if aff:
            p.spec(affinity=aff)
        existing.append(p.node(f"n{draw(st.integers(0, len(nodes) - 1))}").build())
    incoming = make_pod("p").label("app", draw(st.sampled_from(APPS)))
    aff = draw(affinity_st())
    if aff:
        incoming.spec(affinity=aff)
    spreads = draw(
        st.lists(
            spread_st, max_size=2, unique_by=lambda c: (c["topologyKey"], c["whenUnsatisfiable"])
        )
    )
    if spreads:
        incoming.spec(topologySpreadConstraints=spreads)
    return nodes, existing, incoming.build()


def run_plugin(plugin: Any, pod: Any, table: Any) -> None:
    """Run every extension point the way the runtime does; nothing may raise, scores
    stay in [0, 100], and no point answers ERROR."""
    state = CycleState()
    rows = table.valid_rows()
    _, st_ = plugin.pre_filter(state, pod, table)
    assert st_.is_success or st_.is_skip, st_
    if st_.is_success:
        res = plugin.filter(state, pod, table, rows)
        assert res.rejected.shape == (len(rows), len(res.reasons))
    st_ = plugin.pre_score(state, pod, table, rows)
    assert st_.is_success or st_.is_skip, st_
    if st_.is_success:
        s = np.asarray(plugin.normalize_score(state, pod, plugin.score(state, pod, table, rows)))
        assert s.shape == (len(rows),)
        assert ((s >= 0) & (s <= 100)).all(), s


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans(), st.booleans())
def test_topology_plugins_never_raise(
    cluster: tuple[list[Any], list[Any], Any], system_default: bool, hard_zero: bool
) -> None:
    nodes, existing, pod = cluster
    table = table_of(nodes, existing)
    handle = make_handle()
    if system_default:  # the pod's workload selector, for system-default spreading
        handle.lister.selector = parse_label_selector(  # type: ignore[attr-defined]
            {"matchLabels": {"app": pod.labels["app"]}}, "s."
        )
    run_plugin(PodTopologySpread.new({}, handle), pod, table)
    args = {"hardPodAffinityWeight": 0} if hard_zero else {}
    run_plugin(InterPodAffinity.new(args, handle), pod, table)
