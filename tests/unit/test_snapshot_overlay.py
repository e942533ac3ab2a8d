"""NodeTable.overlay(): temporary charges (a gang's placements, preemption's
removed victims, nominated pods) are undone however the block ends, so no
missed uncharge can skew a later pod."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod, table_of
from troupe.api.types import IsolatedCPU, LabelSelector, Requirement, SelectorOp
from troupe.core.snapshot import NodeTable, PodMatcher, pod_charge


def state(t: NodeTable) -> tuple[Any, ...]:
    return (
        t.requested.tolist(),
        t.nonzero_requested.tolist(),
        dict(t.excess),
        [dict(p) for p in t.pods],
        # host ports in use (an entry emptied by an uncharge is no port in use)
        {
            (k, r): {ip: n for ip, n in c.items() if n}
            for k, v in t.port_index.items()
            for r, c in v.items()
            if any(c.values())
        },
        {m: c.tolist() for m, c in t.counters.items()},
    )


ops = st.lists(
    st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 5), st.integers(1, 3)),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops, fail=st.booleans())
def test_an_overlay_leaves_the_table_as_it_found_it(
    ops: list[tuple[bool, int, int, int]], fail: bool
) -> None:
    running = [
        make_pod(f"r{i}").label("app", "web").req(cpu=f"{i + 1}").node(f"n{i % 3}").build()
        for i in range(6)
    ]
    t = table_of([make_node(f"n{i}").build() for i in range(3)], running)
    web = LabelSelector((Requirement("app", SelectorOp.IN, ("web",)),))
    t.counters[PodMatcher(frozenset({"default"}), web)] = np.array(
        [sum(1 for p in running if p.node_name == f"n{r}") for r in range(3)], dtype=np.int64
    )
    before = state(t)
    iso = IsolatedCPU()
    removed: set[int] = set()
    with pytest.raises(RuntimeError) if fail else contextlib.nullcontext(), t.overlay() as ov:
        for add, row, i, cpu in ops:
            if add:
                p = make_pod(f"x{len(removed)}-{row}-{i}-{cpu}").label("app", "web")
                p = p.req(cpu=str(cpu)).host_port(8000 + i)
                pod = p.build()
                ov.add(row, pod, pod_charge(pod, iso))
            elif i not in removed:
                victim = running[i]
                removed.add(i)
                ov.remove(t.row_of[victim.node_name], victim, pod_charge(victim, iso))
        if fail:
            raise RuntimeError("a bug in the middle of a search")
    assert state(t) == before
