"""The cache: pod state machine, isolated CPUs, snapshot copies."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod
from troupe.api.parse import parse_pod
from troupe.api.types import InvalidObject, NodeName, Pod, PodKey
from troupe.core.cache import Cache, PodAlreadyInCache
from troupe.core.clock import VirtualClock
from troupe.core.snapshot import Snapshot

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


def test_the_bind_coming_back_keeps_the_charges_and_swaps_the_view() -> None:
    """Our own bind's watch event (the pod as assumed, now on its node) changes
    no charge; the node's row and the next snapshot hold the bound view."""
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    pod = make_pod("p").req(cpu="1").label("app", "a").build()
    c.assume_pod(dataclasses.replace(pod, node_name="n"), NodeName("n"))
    snap = Snapshot()
    c.update_snapshot(snap)
    row = c.table.row_of["n"]
    before = (c.table.requested[row].copy(), c.table.nonzero_requested[row].copy())
    generation = int(c.table.generation[row])
    bound = dataclasses.replace(pod, node_name="n", phase="Running")
    c.add_pod(bound)
    assert not c.is_assumed(pod.key) and c.pod(pod.key) is bound
    assert np.array_equal(c.table.requested[row], before[0])
    assert np.array_equal(c.table.nonzero_requested[row], before[1])
    assert np.array_equal(c.table.requested, c.recompute_requested())
    assert c.table.pods[row][pod.key] is bound and c.table.generation[row] > generation
    c.update_snapshot(snap)
    assert snap.pods[row][pod.key] is bound
    # A bound version that asks for more is charged anew.
    c.add_pod(
        dataclasses.replace(make_pod("p").req(cpu="2").label("app", "a").build(), node_name="n")
    )
    assert requested(c, "n", "cpu") == 2000
    assert np.array_equal(c.table.requested, c.recompute_requested())


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
        elif kind == "add" and (c.pod(key) is None or c.is_assumed(key)):
            # (an assumed pod confirmed: on its node or another, as assumed or not)
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


# ---- issue #14: exact charges for every input; nodes written whole or not at all ----

# Amounts from ordinary to absurd: many of them sum beyond int64 on one node, some
# are beyond int64 on their own (the parser refuses those pods).
EXTREME = st.sampled_from(
    [
        "0",
        "1",
        "100m",
        "3",
        "1Gi",
        "4611686018427387904",  # 2**62
        "9223372036854775807",  # int64 max
        "9223372036854775808",  # int64 max + 1
        "7Ei",
        "8Ei",
        "10Ei",
        "1e18",
        "1e30",
        "9223372036854775",  # cpu: int64 max in milli-units, rounded down
        "9223372036854776",  # cpu: just beyond
    ]
)
POD_OPS = st.lists(
    st.tuples(
        st.sampled_from(["node", "rmnode", "add", "assume", "forget", "remove", "update"]),
        st.integers(0, 2),  # node
        st.integers(0, 7),  # pod
        EXTREME,  # cpu
        EXTREME,  # memory
        st.booleans(),  # isolated
    ),
    max_size=50,
)


def extreme_pod(name: str, cpu: str, memory: str, iso: bool, node: str = "") -> Pod | None:
    b = make_pod(name).container(cpu=cpu, memory=memory).container(cpu=cpu)
    if iso:
        b.isolated()
    if node:
        b.node(node)
    p = parse_pod(b.obj())
    return None if isinstance(p, InvalidObject) else p


@settings(max_examples=300, deadline=None)
@given(POD_OPS)
def test_issue14_charges_are_exact_inverses_for_extreme_quantities(ops: list[Any]) -> None:
    """Any sequence of add/update/remove/assume/forget with any amounts leaves the
    charged amounts equal to a recomputation, and zero once every pod is gone."""
    c = Cache(VirtualClock())
    snap = Snapshot()
    for kind, n, p, cpu, memory, iso in ops:
        node, key = f"n{n}", PodKey(f"default/p{p}")
        if kind == "node":
            c.add_node(make_node(node).ext(ISO, n).build())
        elif kind == "rmnode":
            c.remove_node(node)
        elif kind in ("add", "assume", "update"):
            pod = extreme_pod(f"p{p}", cpu, memory, iso, node if kind != "assume" else "")
            if pod is None:
                continue  # invalid (a total beyond int64): never reaches the cache
            if kind == "add" and (c.pod(key) is None or c.is_assumed(key)):
                c.add_pod(pod)
            elif kind == "assume" and c.pod(key) is None:
                c.assume_pod(pod, NodeName(node))
            elif kind == "update" and c.pod(key) is not None and not c.is_assumed(key):
                old = c.pod(key)
                assert old is not None
                c.update_pod(old, pod)
        elif kind == "forget":
            c.forget_pod(key)
        elif kind == "remove":
            c.remove_pod(key)
        rows = c.table.valid_rows()
        assert np.array_equal(c.table.requested[rows], c.recompute_requested()[rows])
        c.update_snapshot(snap)
    assert np.array_equal(snap.requested, c.table.requested)
    for p in range(8):
        key = PodKey(f"default/p{p}")
        if c.is_assumed(key):
            c.forget_pod(key)
        c.remove_pod(key)
    t = c.table
    assert not t.requested.any() and not t.nonzero_requested.any()
    assert t.excess == {} and t.nonzero_excess == {}
    assert c.requested_exact() == {}


def test_issue14_running_pods_beyond_int64_on_one_node_are_released_exactly() -> None:
    """`{cpu: 3, memory: 7Ei}` twice on one node: the sum is beyond int64; the node
    reads as full, and deleting the pods leaves nothing charged."""
    c = Cache(VirtualClock())
    c.add_node(make_node("n").build())
    for name in ("a", "b"):
        c.add_pod(make_pod(name).req(cpu="3", memory="7Ei").node("n").build())
    row, mem = c.table.row_of["n"], c.table.col["memory"]
    assert int(c.table.requested[row, mem]) == 2**63 - 1
    assert c.requested_exact()[("n", "memory")] == 2 * 7 * 2**60
    assert c.requested_exact()[("n", "cpu")] == 6000
    c.remove_pod(PodKey("default/a"))
    assert int(c.table.requested[row, mem]) == 7 * 2**60
    c.remove_pod(PodKey("default/b"))
    assert not c.table.requested.any() and c.table.excess == {}


def test_issue14_pod_with_a_request_beyond_int64_is_invalid_before_any_charge() -> None:
    p = parse_pod(make_pod("p").req(cpu="3", memory="10Ei").node("n").obj())
    assert isinstance(p, InvalidObject)
    assert p.message.startswith("spec.containers[0].resources.requests.memory: ")
    # Two containers each within int64 whose sum is not: named by resource.
    p = parse_pod(make_pod("p").container(memory="5Ei").container(memory="5Ei").obj())
    assert isinstance(p, InvalidObject)
    assert p.message.startswith("spec.containers[*].resources.requests.memory: ")


@pytest.mark.parametrize(
    "alloc", [{"cpu": 2**70}, {"memory": -1}, {"cpu": 1000, "example.com/gpu": 2**64}]
)
def test_issue14_node_beyond_int64_is_refused_whole(alloc: dict[str, int]) -> None:
    """A Node value no row can hold (built past the parser) is refused before a row
    is allocated or written: no half-written row, no ghost row on each update."""
    c = Cache(VirtualClock())
    good = make_node("n").taint("a", "b").unschedulable().build()
    c.add_node(good)
    before = (c.table.n_rows, c.table.num_nodes, c.table.allocatable.copy())
    bad_new = dataclasses.replace(make_node("m").build(), allocatable=alloc)
    bad_old = dataclasses.replace(good, allocatable=alloc)
    for bad in (bad_new, bad_old, bad_new, bad_old):
        with pytest.raises(ValueError, match=r"status\.allocatable"):
            c.add_node(bad)
        with pytest.raises(ValueError, match=r"status\.allocatable"):
            c.update_node(bad)
    assert (c.table.n_rows, c.table.num_nodes) == before[:2]
    assert np.array_equal(c.table.allocatable, before[2])
    row = c.table.row_of["n"]
    assert c.table.unschedulable[row] and c.table.taint_matrix[row].any()
    assert c.node("n") is good and c.node("m") is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # node
            st.sampled_from(["0", "100m", "3", "9E"]),
            st.sampled_from(["0", "500Mi", "7Ei"]),
            st.booleans(),  # a host port
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.integers(0, 11), max_size=12),  # which of them to move back
)
def test_charge_dense_is_charge_for_many_pods(specs: list[Any], back: list[int]) -> None:
    """NodeTable.charge_dense (preemption's dry runs) leaves the table exactly as
    `charge` pod by pod, sums beyond int64 included (it falls back there)."""
    from tests.builders import table_of
    from troupe.core.snapshot import IsolatedCPU, pod_charge

    nodes = [make_node(f"n{i}").capacity(cpu=4, memory="8Gi", pods=110).build() for i in range(3)]
    pods: list[Pod] = []
    for i, (n, cpu, memory, port) in enumerate(specs):
        b = make_pod(f"p{i}").req(cpu=cpu, memory=memory).node(f"n{n}")
        if port:
            b.host_port(8080)
        p = parse_pod(b.obj())
        if not isinstance(p, InvalidObject):
            pods.append(p)
    one, many = table_of(nodes, pods), table_of(nodes, pods)
    iso = IsolatedCPU()
    charges = [pod_charge(p, iso) for p in pods]
    rows = np.array([one.row_of[p.node_name] for p in pods], dtype=np.intp)
    vecs = [many.charge_vector(c) for c in charges]
    if not pods:
        return
    width = max(len(v[0]) for v in vecs)
    amounts = np.array([np.pad(v[0], (0, width - len(v[0]))) for v in vecs])
    nonzero = np.array([v[1] for v in vecs])

    def same() -> None:
        assert np.array_equal(one.requested, many.requested)
        assert np.array_equal(one.nonzero_requested, many.nonzero_requested)
        assert one.excess == many.excess and one.nonzero_excess == many.nonzero_excess
        assert one.pods == many.pods and one.port_index == many.port_index
        assert np.array_equal(one.generation, many.generation)

    for r, p, c in zip(rows.tolist(), pods, charges, strict=True):
        one.charge(r, p, c, -1)
    many.charge_dense(rows, pods, charges, amounts, nonzero, -1)
    same()
    at = np.array(sorted({i for i in back if i < len(pods)}), dtype=np.intp)
    for i in at.tolist():
        one.charge(int(rows[i]), pods[i], charges[i], +1)
    many.charge_dense(
        rows[at], [pods[i] for i in at.tolist()], [charges[i] for i in at.tolist()],
        amounts[at], nonzero[at], +1,
    )  # fmt: skip
    same()
