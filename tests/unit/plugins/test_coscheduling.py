"""Coscheduling, extension point by extension point, with a fake lister."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import FakeLister, make_handle
from troupe.api.parse import parse_pod_group
from troupe.api.types import NodeName, Pod, PodGroup
from troupe.core.clock import VirtualClock
from troupe.framework.cycle_state import CycleState
from troupe.framework.handle import Handle
from troupe.framework.interface import NodeToStatus, PluginArgsError, QueuedPodInfo
from troupe.framework.status import Code
from troupe.framework.waiting_pods import WaitingPod
from troupe.plugins.coscheduling import Coscheduling

N = NodeName("n")


def group(
    name: str, min_member: int, created: str = "2024-01-01T00:00:00Z", **spec: Any
) -> PodGroup:
    pg = parse_pod_group(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
            "spec": {"minMember": min_member, **spec},
        }
    )
    assert isinstance(pg, PodGroup)
    return pg


def setup(
    groups: list[PodGroup],
    pending: list[Pod],
    placed: list[Pod] = (),  # type: ignore[assignment]
    args: dict[str, Any] | None = None,
) -> tuple[Coscheduling, Handle, FakeLister]:
    handle = make_handle()
    lister = handle.lister
    assert isinstance(lister, FakeLister)
    for g in groups:
        lister.groups[g.key] = g
    for p in [*pending, *placed]:
        lister.pods[p.key] = p
    for p in placed:
        lister.assumed.add(p.key)
    real_pod = lister.pod
    lister.pod = lambda k: real_pod(k) if k in lister.assumed else None  # type: ignore[method-assign]
    table = table_of([make_node("n").capacity(cpu=8, memory="8Gi", pods=110).build()])
    handle.snapshot = lambda: table
    return Coscheduling.new(args or {}, handle), handle, lister


def members(n: int, g: str = "g", cpu: str = "1") -> list[Pod]:
    return [make_pod(f"{g}-{i}").group(g).req(cpu=cpu).build() for i in range(n)]


@pytest.mark.parametrize(
    ("pods", "groups", "code", "text"),
    [
        pytest.param([make_pod("lone").build()], [], Code.SUCCESS, "", id="lone-pod"),
        pytest.param(
            members(1, "ghost"),
            [],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            'PodGroup "default/ghost" not found',
            id="missing-group",
        ),
        pytest.param(
            members(2),
            [group("g", 3)],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            'PodGroup "default/g" has fewer pods than minMember 3',
            id="too-few",
        ),
        pytest.param(members(3), [group("g", 3)], Code.SUCCESS, "", id="enough"),
    ],
)
def test_pre_enqueue(pods: list[Pod], groups: list[PodGroup], code: Code, text: str) -> None:
    plugin, _, _ = setup(groups, pods)
    st = plugin.pre_enqueue(pods[0])
    assert st.code is code and st.message == text


def test_pre_filter_min_resources() -> None:
    plugin, _, _ = setup([group("g", 2, minResources={"cpu": "16"})], members(2))
    _, st = plugin.pre_filter(CycleState(), members(2)[0], table_of([]))
    assert st.code is Code.UNSCHEDULABLE
    assert st.message == 'PodGroup "default/g" minResources cannot be met: insufficient cpu'
    plugin, _, _ = setup([group("g", 2, minResources={"cpu": "8"})], members(2))
    _, st = plugin.pre_filter(CycleState(), members(2)[0], table_of([]))
    assert st.is_skip  # passes; Coscheduling has no Filter


def test_pre_filter_denied_group_is_refused_quickly() -> None:
    pods = members(4)
    plugin, handle, _ = setup([group("g", 4)], pods, args={"podGroupBackoffSeconds": 10})
    _, st = plugin.post_filter(CycleState(), pods[0], NodeToStatus({}, 1))
    assert "gets rejected" in st.message
    _, st = plugin.pre_filter(CycleState(), pods[1], table_of([]))
    assert st.code is Code.UNSCHEDULABLE and st.message == 'podGroup "default/g" failed recently'
    assert isinstance(handle.clock, VirtualClock)
    handle.clock.advance_by(10)
    _, st = plugin.pre_filter(CycleState(), pods[1], table_of([]))
    assert st.is_skip


@pytest.mark.parametrize(
    ("min_member", "placed", "rejects"),
    [
        pytest.param(4, 4, False, id="quorum-already-met"),
        pytest.param(10, 9, False, id="within-ten-percent"),
        pytest.param(4, 2, True, id="reject-the-group"),
    ],
)
def test_post_filter(min_member: int, placed: int, rejects: bool) -> None:
    pods = members(min_member + 1)
    plugin, handle, _ = setup([group("g", min_member)], pods[placed:], pods[:placed])
    waiting = WaitingPod(pods[0], N, {"Coscheduling": 60}, handle.clock)
    handle.waiting_pods.add(waiting)
    _, st = plugin.post_filter(CycleState(), pods[-1], NodeToStatus({}, 1))
    assert st.code is Code.UNSCHEDULABLE
    assert waiting.done is rejects
    if rejects:
        assert st.message == (
            f'PodGroup "default/g" gets rejected due to Pod "{pods[-1].name}" '
            "is unschedulable even after PostFilter"
        )


async def test_permit_waits_then_the_last_member_allows_all() -> None:
    pods = members(3)
    plugin, handle, lister = setup([group("g", 3, scheduleTimeoutSeconds=20)], pods)
    verdicts = []
    for i, p in enumerate(pods):
        lister.assumed.add(p.key)  # the scheduler assumes before Permit
        st, timeout = plugin.permit(CycleState(), p, N)
        if i < 2:
            assert st.code is Code.WAIT and timeout == 20
            handle.waiting_pods.add(WaitingPod(p, N, {"Coscheduling": timeout}, handle.clock))
        else:
            assert st.is_success
    for p in pods[:2]:
        wp = handle.waiting_pods.get(p.key)
        assert wp is not None
        verdicts.append(await wp.wait())
    assert all(v.is_success for v in verdicts)


async def test_permit_timeout_rejects_the_waiting_members() -> None:
    pods = members(3)
    plugin, handle, lister = setup([group("g", 3)], pods, args={"permitWaitingTimeSeconds": 5})
    lister.assumed.add(pods[0].key)
    st, timeout = plugin.permit(CycleState(), pods[0], N)
    assert st.code is Code.WAIT and timeout == 5
    wp = WaitingPod(pods[0], N, {"Coscheduling": timeout}, handle.clock)
    handle.waiting_pods.add(wp)
    assert isinstance(handle.clock, VirtualClock)
    handle.clock.advance_by(5)
    verdict = await wp.wait()
    assert verdict.code is Code.UNSCHEDULABLE
    assert verdict.message == "rejected due to timeout after waiting 5s at plugin Coscheduling"


def test_unreserve_rejects_the_siblings() -> None:
    pods = members(3)
    plugin, handle, _ = setup([group("g", 3)], pods)
    other = WaitingPod(pods[1], N, {"Coscheduling": 60}, handle.clock)
    lone = WaitingPod(make_pod("lone").build(), N, {"X": 60}, handle.clock)
    handle.waiting_pods.add(other)
    handle.waiting_pods.add(lone)
    plugin.unreserve(CycleState(), pods[0], N)
    assert other.done and not lone.done


def test_queue_sort_keeps_a_gang_together() -> None:
    a = [make_pod(f"a{i}").group("a").build() for i in range(2)]
    b = [make_pod(f"b{i}").group("b").build() for i in range(2)]
    plugin, _, _ = setup(
        [group("a", 2, "2024-01-01T00:00:02Z"), group("b", 2, "2024-01-01T00:00:01Z")], a + b
    )
    hi = make_pod("urgent").priority(100).build()
    infos = [
        QueuedPodInfo(pod=p, timestamp=float(i), seq=i)
        for i, p in enumerate([a[0], b[0], hi, a[1], b[1]])
    ]
    order = [q.pod.name for q in sorted(infos, key=plugin.sort_key)]
    assert order == ["urgent", "b0", "b1", "a0", "a1"]
    assert plugin.less(infos[1], infos[0])


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"permitWaitingTimeSeconds": 0}, "permitWaitingTimeSeconds"),
        ({"podGroupBackoffSeconds": -1}, "podGroupBackoffSeconds"),
        ({"nope": 1}, "nope"),
    ],
)
def test_args(args: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginArgsError) as e:
        Coscheduling.new(args, make_handle())
    assert e.value.field_path == field


def test_issue14_permit_does_not_count_a_rejected_reservation() -> None:
    """A member rejected at Permit (here by PostFilter's optimistic rejection) is
    still assumed until its binding cycle forgets it; the next member's Permit
    must not count it towards minMember."""
    pods = members(3)
    plugin, handle, lister = setup([group("g", 2)], pods)
    lister.assumed.add(pods[0].key)
    st, timeout = plugin.permit(CycleState(), pods[0], N)
    assert st.code is Code.WAIT
    first = WaitingPod(pods[0], N, {"Coscheduling": timeout}, handle.clock)
    handle.waiting_pods.add(first)
    _, st = plugin.post_filter(CycleState(), pods[1], NodeToStatus({}, 1))
    assert first.rejected
    lister.assumed.add(pods[2].key)  # the third member fits and is assumed
    st, _ = plugin.permit(CycleState(), pods[2], N)
    assert st.code is Code.WAIT  # 1 placed of 2, not 2: it must not bind alone


def test_issue14_min_resources_summed_without_int64_overflow() -> None:
    """Free capacity summed over nodes whose total is beyond int64 still counts."""
    plugin, handle, _ = setup([group("g", 2, minResources={"memory": "1Gi"})], members(2))
    table = table_of(
        [make_node(f"n{i}").capacity(cpu=8, memory="7Ei", pods=110).build() for i in range(4)]
    )
    handle.snapshot = lambda: table
    _, st = plugin.pre_filter(CycleState(), members(2)[0], table)
    assert st.is_skip, st.message
