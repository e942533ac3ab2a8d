"""The cache: pod state machine, isolated CPUs, snapshot copies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.types import NodeName, PodKey
from scheduler.cache import Cache, PodAlreadyInCache
from scheduler.clock import VirtualClock
from scheduler.snapshot import Snapshot
from tests.builders import make_node, make_pod

ISO = "troupe.dev/isolated-cpu"


def requested(cache: Cache, node: str, resource: str) -> int:
    t = cache.table
    return int(t.requested[t.row_of[node], t.col[resource]])


def test_assume_then_add_confirms() -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    pod = make_pod("p").req(cpu="1").build()
    c.assume_pod(pod, NodeName("n"))
    assert c.is_assumed(pod.key) and requested(c, "n", "cpu") == 1000
    c.add_pod(make_pod("p").req(cpu="1").node("n").build())
    assert not c.is_assumed(pod.key) and requested(c, "n", "cpu") == 1000


def test_assume_then_forget() -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    pod = make_pod("p").req(cpu="1").build()
    c.assume_pod(pod, NodeName("n"))
    c.forget_pod(pod.key)
    assert c.pod(pod.key) is None and requested(c, "n", "cpu") == 0
    assert requested(c, "n", "pods") == 0


def test_assume_twice_raises() -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    pod = make_pod("p").build()
    c.assume_pod(pod, NodeName("n"))
    with pytest.raises(PodAlreadyInCache, match="can't be assumed"):
        c.assume_pod(pod, NodeName("n"))


def test_issue14_assume_of_a_bound_pod_raises_and_changes_nothing() -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    c.add_node(make_node("m").build())
    c.add_pod(make_pod("p").req(cpu="1").node("n").build())
    before = c.table.requested.copy()
    with pytest.raises(PodAlreadyInCache):
        c.assume_pod(make_pod("p").req(cpu="1").build(), NodeName("m"))
    assert (c.table.requested == before).all()
    assert not c.is_assumed(PodKey("default/p")) and c.pod_node(PodKey("default/p")) == "n"
    assert (c.recompute_requested() == c.table.requested).all()


def test_assumed_pod_expires_after_ttl_once_binding_finished() -> None:
    clock = VirtualClock()
    c = Cache(clock, assumed_ttl=30)
    c.add_node(make_node("n").build())
    pod = make_pod("p").req(cpu="1").build()
    c.assume_pod(pod, NodeName("n"))
    clock.advance_by(100)
    assert c.cleanup_expired() == []  # binding not finished: never expires
    c.finish_binding(pod.key)
    clock.advance_by(29)
    assert c.cleanup_expired() == []
    clock.advance_by(1)
    assert c.cleanup_expired() == [pod.key]
    assert requested(c, "n", "cpu") == 0


def test_update_and_remove_pod() -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    old = make_pod("p").req(cpu="1").node("n").build()
    c.add_pod(old)
    new = make_pod("p").req(cpu="2").node("n").build()
    c.update_pod(old, new)
    assert requested(c, "n", "cpu") == 2000
    c.update_pod(new, make_pod("p").req(cpu="2").node("n").phase("Succeeded").build())
    assert requested(c, "n", "cpu") == 0  # terminal pods are not charged
    c.remove_pod(PodKey("default/p"))
    assert requested(c, "n", "pods") == 0


def test_pod_before_its_node() -> None:
    c = Cache(VirtualClock())
    c.add_pod(make_pod("p").req(cpu="1").node("late").build())
    c.add_node(make_node("late").build())
    assert requested(c, "late", "cpu") == 1000


def test_node_removed_and_back() -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    c.add_pod(make_pod("p").req(cpu="1").node("n").build())
    c.remove_node("n")
    assert c.table.num_nodes == 0
    c.add_node(make_node("other").build())  # reuses the row
    assert requested(c, "other", "cpu") == 0
    c.add_node(make_node("n").build())
    assert requested(c, "n", "cpu") == 1000


@pytest.mark.parametrize(
    ("op", "want_cpu", "want_iso"),
    [
        ("add", 0, 4000),
        ("assume", 0, 4000),
        ("forget", 0, 0),
        ("remove", 0, 0),
        ("update-to-ordinary", 4000, 0),
    ],
)
def test_isolated_cpus_in_every_path(op: str, want_cpu: int, want_iso: int) -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").capacity(cpu=4, memory="8Gi", pods=10).ext(ISO, 4).build())
    iso = make_pod("p").req(cpu="4").isolated()
    if op in ("assume", "forget"):
        c.assume_pod(iso.build(), NodeName("n"))
        if op == "forget":
            c.forget_pod(PodKey("default/p"))
    else:
        c.add_pod(iso.node("n").build())
        if op == "remove":
            c.remove_pod(PodKey("default/p"))
        elif op == "update-to-ordinary":
            c.update_pod(iso.build(), make_pod("p").req(cpu="4").node("n").build())
    assert requested(c, "n", "cpu") == want_cpu
    assert requested(c, "n", ISO) == want_iso


def test_snapshot_copies_only_dirty_rows() -> None:
    c = Cache(VirtualClock())
    for i in range(4):
        c.add_node(make_node(f"n{i}").build())
    snap = Snapshot()
    c.update_snapshot(snap)
    before = snap.generation.copy()
    c.add_pod(make_pod("p").req(cpu="1").node("n2").build())
    c.update_snapshot(snap)
    changed = np.flatnonzero(snap.generation != before)
    assert changed.tolist() == [c.table.row_of["n2"]]
    assert int(snap.requested[c.table.row_of["n2"], snap.col["cpu"]]) == 1000


def test_groups_list_pending_and_bound_members() -> None:
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    c.track_pending(make_pod("a").group("g").build())
    c.add_pod(make_pod("b").group("g").node("n").build())
    c.track_pending(make_pod("lone").build())
    assert [p.name for p in c.pods_in_group("default/g")] == ["a", "b"]  # type: ignore[arg-type]
    c.untrack_pending(PodKey("default/a"))
    assert [p.name for p in c.pods_in_group("default/g")] == ["b"]  # type: ignore[arg-type]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["node", "rmnode", "add", "assume", "forget", "remove", "update"]),
        st.integers(0, 4),
        st.integers(0, 9),
        st.integers(0, 3000),
        st.booleans(),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_snapshot_and_incremental_counts_match_recomputation(ops: list[Any]) -> None:
    c = Cache(VirtualClock())
    snap = Snapshot()
    for kind, n, p, cpu, iso in ops:
        node, key = f"n{n}", PodKey(f"default/p{p}")
        b = make_pod(f"p{p}").req(cpu=f"{cpu}m")
        if iso:
            b.isolated()
        if kind == "node":
            c.add_node(make_node(node).ext(ISO, n).label("k", str(cpu % 3)).build())
        elif kind == "rmnode":
            c.remove_node(node)
        elif kind == "add" and c.pod(key) is None:
            c.add_pod(b.node(node).build())
        elif kind == "assume" and c.pod(key) is None:
            c.assume_pod(b.build(), NodeName(node))
        elif kind == "forget":
            c.forget_pod(key)
        elif kind == "remove":
            c.remove_pod(key)
        elif kind == "update" and c.pod(key) is not None and not c.is_assumed(key):
            old = c.pod(key)
            assert old is not None
            c.update_pod(old, b.node(old.node_name).build())
        if p % 2:
            c.update_snapshot(snap)
    c.update_snapshot(snap)
    t = c.table
    rows = t.valid_rows()
    assert np.array_equal(t.requested[rows], c.recompute_requested()[rows])
    assert np.array_equal(snap.valid_rows(), rows)
    for name in ("allocatable", "requested", "nonzero_requested", "unschedulable", "taint_matrix"):
        assert np.array_equal(getattr(snap, name)[rows], getattr(t, name)[rows]), name
    for k, col in t.labels.items():
        assert np.array_equal(snap.labels[k][rows], col[rows])
    assert [snap.names[r] for r in rows] == [t.names[r] for r in rows]
    assert [snap.pods[r] for r in rows] == [t.pods[r] for r in rows]
