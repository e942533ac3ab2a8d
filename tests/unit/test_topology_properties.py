"""troupe.core.topology over random fabrics (blocks of racks of nodes, some nodes
unlabelled or loaded): every domain's nodes share its values and every node
with them is in it, per-domain sums are the sums of their nodes, a rack always
lies within one block, where a group runs is the narrowest level its members
share, and the allocation score reads the same with the gang added or charged."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod, table_of
from troupe.api.types import Node
from troupe.core.snapshot import NO_VALUE, NodeTable
from troupe.core.topology import (
    DomainSet,
    TopologySpec,
    allocation_score,
    coarser_or_equal,
    domains,
    placement_of,
)

RACK, BLOCK = "troupe.dev/rack", "troupe.dev/block"
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A node: block, rack within the block, labels (0 none, 1 block only, 2+ both), cpu used
node_st = st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 3), st.integers(0, 4))
fabric_st = st.lists(node_st, min_size=1, max_size=14)


def build(fabric: list[tuple[int, int, int, int]]) -> tuple[NodeTable, list[Node]]:
    nodes = []
    for i, (b, r, labelled, _) in enumerate(fabric):
        nb = make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods="110")
        if labelled >= 1:
            nb = nb.label(BLOCK, f"b{b}")
        if labelled >= 2:
            nb = nb.label(RACK, f"b{b}r{r}")
        nodes.append(nb.build())
    pods = [
        make_pod(f"x{i}").req(cpu=str(used)).node(f"n{i}").build()
        for i, (_, _, _, used) in enumerate(fabric)
        if used
    ]
    return table_of(nodes, pods), nodes


@SETTINGS
@given(fabric_st, st.sampled_from([(RACK,), (BLOCK,), (BLOCK, RACK)]), st.data())
def test_every_domains_nodes_share_its_values_and_no_node_is_left_out(
    fabric: list[tuple[int, int, int, int]], keys: tuple[str, ...], data: st.DataObject
) -> None:
    t, _ = build(fabric)
    valid = t.valid_rows().tolist()
    rows = sorted(data.draw(st.sets(st.sampled_from(valid), min_size=1)))
    cand = np.asarray(rows, dtype=np.intp)
    got = domains(t, keys, cand)
    seen: list[int] = []
    for d in got:
        members = d.rows.tolist()
        assert members == sorted(set(members)) and members
        for k, v in zip(keys, d.values, strict=True):
            vid = t.label_ids[k][v]
            col = t.label_column(k)
            assert all(int(col[r]) == vid for r in members)
        seen += members
    labelled = [r for r in rows if all(int(t.label_column(k)[r]) != NO_VALUE for k in keys)]
    assert sorted(seen) == labelled  # each labelled candidate in exactly one domain
    assert [d.values for d in got] == sorted(d.values for d in got)
    # per-domain sums are the sums over the domain's nodes
    ds = DomainSet.build(t, keys, cand)
    col = t.col["cpu"]
    sums = ds.sums(t.requested[:, col]).tolist()
    assert sums == [float(sum(int(t.requested[r, col]) for r in d.rows)) for d in got]


@SETTINGS
@given(fabric_st)
def test_a_rack_lies_within_one_block(fabric: list[tuple[int, int, int, int]]) -> None:
    t, _ = build(fabric)
    has_rack = any(labelled >= 2 for _, _, labelled, _ in fabric)
    assert coarser_or_equal(t, BLOCK, RACK) is has_rack


@SETTINGS
@given(fabric_st, st.lists(st.integers(0, 13), min_size=1, max_size=4))
def test_where_a_group_runs_is_the_narrowest_level_its_members_share(
    fabric: list[tuple[int, int, int, int]], picks: list[int]
) -> None:
    t, nodes = build(fabric)
    names = [nodes[i % len(nodes)].name for i in picks]
    spec = TopologySpec(required=(BLOCK,), preferred=(RACK,))
    got = placement_of(t, spec, names)
    labels = [nodes[i % len(nodes)].labels for i in picks]
    racks = {lb.get(RACK) for lb in labels}
    blocks = {lb.get(BLOCK) for lb in labels}
    if len(racks) == 1 and None not in racks:
        assert got == f"{RACK}={racks.pop()}"
    elif len(blocks) == 1 and None not in blocks:
        assert got == f"{BLOCK}={blocks.pop()}"
    else:
        assert got is None


@SETTINGS
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3000), st.integers(0, 3)), max_size=6),
)
def test_the_allocation_score_is_the_same_added_or_charged(
    cpus: list[int], members: list[tuple[int, int, int]]
) -> None:
    nodes = [make_node(f"n{i}").capacity(cpu=c, memory="4Gi").build() for i, c in enumerate(cpus)]
    pods = []
    for i, (on, milli, mem) in enumerate(members):
        b = make_pod(f"g{i}").node(f"n{on % len(cpus)}")
        if milli:
            b = b.req(cpu=f"{milli}m")
        if mem:
            b = b.req(memory=f"{mem}Gi")
        pods.append(b.build())
    empty, charged = table_of(nodes), table_of(nodes, pods)
    rows = empty.valid_rows()
    added = allocation_score(empty, rows, pods)
    assert 0 <= added <= 100
    assert added == allocation_score(charged, rows, pods, charged=True)
    if len(cpus) == 1:  # one node: NodeResourcesFit's MostAllocated on that node
        cap, req = (
            int(charged.allocatable[0, charged.col["cpu"]]),
            int(charged.nonzero_requested[0, 0]),
        )
        mcap, mreq = (
            int(charged.allocatable[0, charged.col["memory"]]),
            int(charged.nonzero_requested[0, 1]),
        )
        want = (min(req, cap) * 100 // cap + min(mreq, mcap) * 100 // mcap) // 2
        assert added == want
