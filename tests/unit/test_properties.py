"""Properties of the whole pipeline over random clusters (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod
from troupe.config import default_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import simulate

nodes_st = st.lists(
    st.tuples(
        st.integers(1, 8),  # cpu
        st.integers(1, 16),  # memory GiB
        st.integers(1, 6),  # pods
        st.booleans(),  # tainted
        st.integers(0, 3),  # isolated cores
    ),
    min_size=1,
    max_size=6,
)
pods_st = st.lists(
    st.tuples(
        st.integers(0, 4000),  # milli cpu
        st.integers(0, 8),  # memory GiB
        st.booleans(),  # tolerates the taint
        st.booleans(),  # isolated
        st.integers(0, 3),  # priority
    ),
    min_size=1,
    max_size=25,
)


def _objects(nodes: list[Any], pods: list[Any]) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for i, (cpu, mem, npods, tainted, iso) in enumerate(nodes):
        b = make_node(f"n{i}").capacity(cpu=cpu, memory=f"{mem}Gi", pods=npods)
        if iso:
            b.ext("troupe.dev/isolated-cpu", iso)
        if tainted:
            b.taint("dedicated", "batch")
        objs.append(b.obj())
    for j, (mcpu, mem, tol, iso, prio) in enumerate(pods):
        p = make_pod(f"p{j}").priority(prio)
        if mcpu:
            p.req(cpu=f"{mcpu}m")
        if mem:
            p.req(memory=f"{mem}Gi")
        if tol:
            p.toleration("dedicated", "batch", "NoSchedule")
        if iso:
            p.isolated()
        objs.append(p.obj())
    return objs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=nodes_st, pods=pods_st)
def test_no_node_overcommitted_and_every_pod_accounted_for(
    nodes: list[Any], pods: list[Any]
) -> None:
    result = simulate(_objects(nodes, pods), default_config(IN_TREE))
    out = result.to_json_obj()
    for name, use in out["nodes"].items():
        for resource, u in use.items():
            assert u["requested"] <= u["allocatable"], (name, resource, u)
    assert len(out["pods"]) == len(pods)
    for key, p in out["pods"].items():
        assert (p["node"] is None) != (p["reason"] is None), (key, p)
        if p["node"] is None:
            assert p["reason"]
    # What the nodes are charged is what the bound pods request (isolated pods on
    # the isolated resource, not cpu).
    charged_cpu = sum(u.get("cpu", {}).get("requested", 0) for u in out["nodes"].values())
    charged_iso = sum(
        u.get("troupe.dev/isolated-cpu", {}).get("requested", 0) for u in out["nodes"].values()
    )
    want_cpu = want_iso = 0.0
    for j, (mcpu, _, _, iso, _) in enumerate(pods):
        if out["pods"][f"default/p{j}"]["node"] is not None:
            if iso:
                want_iso += mcpu / 1000
            else:
                want_cpu += mcpu / 1000
    assert abs(charged_cpu - want_cpu) < 1e-9
    assert abs(charged_iso - want_iso) < 1e-9
