"""Coscheduling: cases ported from troupe-plugins' pkg/coscheduling/core/core_test.go
(kubernetes-sigs/scheduler-plugins at commit 903da7df82cb8794dda8f2d510ba1156111662dd):
TestPreFilter and TestPermit, through Troupe's plugin (pre_filter, permit) as the
scheduler calls it.

Upstream's PodGroupManager.PreFilter returns nil (go on) or an error; here "go on"
is PreFilter's Skip (Coscheduling has no Filter work) and an error is a non-success
Status. Upstream's pods live in namespace "ns"; here in "default". The lister's
pods are the upstream informer's (pending pods and the pod itself); a pod counts
as placed when the lister has it (bound or assumed), as the cache does.

Troupe differs on purpose, and the cases say so:
- "pod belongs to a non-existent pg": upstream lets the pod through PreFilter (and
  rejects it at Permit); Troupe keeps it waiting (UnschedulableAndUnresolvable,
  'PodGroup ... not found') until the PodGroup appears, so a gang member is never
  bound alone because its PodGroup arrived late (docs/design.md, "Gangs").

Skipped (and why):
- TestCheckClusterResource: a function of upstream's manager over NodeInfos; its
  facts (minResources against free capacity, the group's own pods counted back) are
  the PreFilter minResources cases here and tests/unit/plugins/test_coscheduling.py.
- TestMarkAndClearPodGroupScheduleFailure, TestSchemeRestriction: upstream client
  and scheme plumbing with no counterpart in Troupe.
- pkg/coscheduling/coscheduling_test.go: not ported in this change (time); its
  QueueSort/PostFilter/Permit behaviour is covered by test_coscheduling.py's own
  cases, not yet by upstream-named ones.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import FakeLister, make_handle
from troupe.api.parse import parse_pod_group
from troupe.api.types import NodeName, Pod, PodGroup
from troupe.framework.cycle_state import CycleState
from troupe.framework.status import Code
from troupe.plugins.coscheduling import Coscheduling

GO_ON = "go-on"  # upstream PreFilter returns nil


def pg(name: str, min_member: int, **spec: Any) -> PodGroup:
    g = parse_pod_group(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": min_member, **spec},
        }
    )
    assert isinstance(g, PodGroup)
    return g


def member(name: str, group: str | None = None, gated: bool = False) -> PodBuilder:
    pb = make_pod(name)
    if group is not None:
        pb.group(group)
    if gated:
        pb.gate("example-gate")
    return pb


def setup(
    groups: list[PodGroup],
    pods: list[Pod],
    placed: list[Pod] = (),  # type: ignore[assignment]
) -> Coscheduling:
    handle = make_handle()
    lister = handle.lister
    assert isinstance(lister, FakeLister)
    for g in groups:
        lister.groups[g.key] = g
    for p in [*pods, *placed]:
        lister.pods[p.key] = p
    placed_keys = {p.key for p in placed}
    lister.assumed |= placed_keys
    real_pod = lister.pod
    lister.pod = lambda k: real_pod(k) if k in placed_keys else None  # type: ignore[method-assign]
    # upstream's fixture: two nodes with 4 cpu each
    table = table_of(
        [make_node(n).capacity(cpu=4, memory="8Gi", pods=110).build() for n in ("node-a", "node-b")]
    )
    handle.snapshot = lambda: table
    return Coscheduling.new({}, handle)


PRE_FILTER = [
    pytest.param(
        member("p"),
        [member("p1", "pg1"), member("p2", "pg2")],
        [pg("pg1", 1), pg("pg2", 1)],
        GO_ON,
        id="upstream: pod does not belong to any pg",
    ),
    # deliberate difference (module docstring): upstream goes on, Troupe waits for the group
    pytest.param(
        member("p", "pg-non-existent"),
        [],
        [pg("pg1", 1)],
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'PodGroup "default/pg-non-existent" not found'),
        id="upstream: pod belongs to a non-existent pg",
    ),
    pytest.param(
        member("p", "pg1"),
        [member("pg2-1", "pg2")],
        [pg("pg1", 2), pg("pg2", 2)],
        (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            'PodGroup "default/pg1" has fewer pods than minMember 2',
        ),
        id="upstream: pod count less than minMember",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1"), member("p1c", "pg1")],
        [pg("pg1", 2), pg("pg2", 2)],
        GO_ON,
        id="upstream: pod count equal minMember",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1"), member("p1c", "pg1")],
        [pg("pg1", 2), pg("pg2", 2)],
        GO_ON,
        id="upstream: pod count more than minMember",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1"), member("p1c", "pg1", gated=True)],
        [pg("pg1", 2)],
        GO_ON,
        id="upstream: gated pods but still meeting quorum (minMember < replicas)",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1", gated=True), member("p1c", "pg1")],
        [pg("pg1", 3)],
        (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            'PodGroup "default/pg1" has fewer pods than minMember 3',
        ),
        id="upstream: gated pods push group below quorum",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1", gated=True), member("p1c", "pg1", gated=True)],
        [pg("pg1", 2)],
        (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            'PodGroup "default/pg1" has fewer pods than minMember 2',
        ),
        id="upstream: all sibling pods are gated",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1"), member("p1c", "pg1")],
        [pg("pg1", 2, minResources={"cpu": "6"})],
        GO_ON,
        id="upstream: cluster's resource satisfies minResource",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1"), member("p1c", "pg1")],
        [pg("pg1", 2, minResources={"cpu": "10"})],
        (Code.UNSCHEDULABLE, 'PodGroup "default/pg1" minResources cannot be met: insufficient cpu'),
        id="upstream: cluster's resource cannot satisfy minResource",
    ),
]


@pytest.mark.parametrize(("incoming", "pending", "groups", "want"), PRE_FILTER)
def test_pre_filter(
    incoming: PodBuilder,
    pending: list[PodBuilder],
    groups: list[PodGroup],
    want: str | tuple[Code, str],
) -> None:
    p = incoming.build()
    plugin = setup(groups, [p, *(pb.build() for pb in pending)])
    _, st = plugin.pre_filter(CycleState(), p, table_of([]))
    if want == GO_ON:
        assert st.is_skip, st
    else:
        assert (st.code, st.message) == want


NODE = NodeName("node")

PERMIT = [
    pytest.param(
        member("p"), [], [pg("pg1", 2)], Code.SUCCESS, id="upstream: pod does not belong to any pg"
    ),
    pytest.param(
        member("p", "pg-non-existent"),
        [],
        [pg("pg1", 2)],
        Code.UNSCHEDULABLE,
        id="upstream: pod specifies a non-existent pg",
    ),
    pytest.param(
        member("p", "pg1"),
        [],
        [pg("pg1", 2)],
        Code.WAIT,
        id="upstream: pod belongs to a pg that doesn't have quorum",
    ),
    pytest.param(
        member("p1a", "pg1"),
        [member("p1b", "pg1").node("node")],
        [pg("pg1", 2)],
        Code.SUCCESS,
        id="upstream: pod belongs to a pg that have quorum satisfied",
    ),
]


@pytest.mark.parametrize(("incoming", "existing", "groups", "want"), PERMIT)
def test_permit(
    incoming: PodBuilder, existing: list[PodBuilder], groups: list[PodGroup], want: Code
) -> None:
    p = incoming.build()
    # the scheduler assumes the pod before Permit, so it holds a place too
    plugin = setup(groups, [], [p, *(pb.build() for pb in existing)])
    st, _ = plugin.permit(CycleState(), p, NODE)
    assert st.code is want
    if want is Code.UNSCHEDULABLE:
        assert st.message == 'PodGroup "default/pg-non-existent" not found'
