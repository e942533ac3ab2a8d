"""The waiting-pods map answers a group's waiting members from its index, and
the index follows every add and remove."""

from __future__ import annotations

from tests.builders import make_pod
from troupe.api.parse import parse_pod
from troupe.api.types import Pod, PodKey, pod_group_key
from troupe.core.clock import VirtualClock
from troupe.framework.waiting_pods import WaitingPod, WaitingPods


def pod(name: str, group: str | None) -> Pod:
    b = make_pod(name)
    if group is not None:
        b = b.group(group)
    p = parse_pod(b.obj(), {})
    assert isinstance(p, Pod)
    return p


def test_a_groups_waiting_members_follow_adds_and_removes() -> None:
    clock = VirtualClock()
    wps = WaitingPods()
    a = pod("a-0", "a")
    for p in (a, pod("a-1", "a"), pod("b-0", "b"), pod("lone", None)):
        wps.add(WaitingPod(p, "n0", {"Coscheduling": 10.0}, clock))
    ga, gb = pod_group_key("default", "a"), pod_group_key("default", "b")
    assert [w.pod.name for w in wps.in_group(ga)] == ["a-0", "a-1"]
    assert [w.pod.name for w in wps.in_group(gb)] == ["b-0"]
    assert len(wps) == 4
    wps.remove(PodKey("default/a-0"))
    wps.remove(PodKey("default/b-0"))
    wps.remove(PodKey("default/missing"))
    assert [w.pod.name for w in wps.in_group(ga)] == ["a-1"]
    assert wps.in_group(gb) == []
    # The same pod waiting again replaces its entry in both maps.
    wps.add(WaitingPod(a, "n1", {"Coscheduling": 10.0}, clock))
    wps.add(WaitingPod(a, "n2", {"Coscheduling": 10.0}, clock))
    assert [w.node for w in wps.in_group(ga) if w.pod.name == "a-0"] == ["n2"]
    assert len(wps) == 3
