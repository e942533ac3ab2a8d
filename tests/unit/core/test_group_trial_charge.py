"""The group trial's charges (troupe.framework.interface.TrialChargePlugin) from
a PreFilter plugin: each member placed is charged before the next member's
PreFilter runs, so a budget kept outside the snapshot (a quota) is judged for
the gang together; every charge is undone when the trial ends, whether the
gang is admitted or not, and the admitted members count again from Reserve."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Self

from tests.builders import make_pod
from tests.unit.core.env import Env
from troupe.api.types import NodeName, Pod, PodKey
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    PreFilterPlugin,
    PreFilterResult,
    ReservePlugin,
    TrialChargePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status
from troupe.plugins.registry import IN_TREE

OVER_BUDGET: Final = "over the budget of 2 pods"


class Budget(PreFilterPlugin, ReservePlugin, TrialChargePlugin):
    """At most two pods reserved: a PreFilter-level budget, as a quota is."""

    NAME: Final = "Budget"

    def __init__(self, handle: Handle) -> None:
        self.reserved: set[PodKey] = set()
        self.charges: list[PodKey] = []

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(handle)

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        if len(self.reserved | {pod.key}) > 2:
            return None, Status(Code.UNSCHEDULABLE, (OVER_BUDGET,), self.NAME)
        return None, SKIP

    def reserve(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        self.reserved.add(pod.key)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        self.reserved.discard(pod.key)

    def charge(self, state: CycleState, pod: Pod, node: NodeName) -> Callable[[], None] | None:
        self.charges.append(pod.key)
        self.reserved.add(pod.key)

        def undo() -> None:
            self.reserved.discard(pod.key)

        return undo


CONFIG: Final = {
    "profiles": [
        {
            "plugins": {
                "preFilter": {"enabled": [{"name": "Budget"}]},
                "reserve": {"enabled": [{"name": "Budget"}]},
            }
        }
    ]
}


def gang(e: Env, name: str, members: int) -> list[PodKey]:
    e.pod_group(name, members)
    return [e.pod(make_pod(f"{name}-{i}").group(name).req(cpu="1").obj()) for i in range(members)]


def budget(e: Env) -> Budget:
    (profile,) = e.s.profiles.values()
    p = profile.instances["Budget"]
    assert isinstance(p, Budget)
    return p


async def test_a_prefilter_plugins_charge_makes_the_gang_fit_together_or_not_at_all() -> None:
    e = Env(CONFIG, registry={**IN_TREE, "Budget": Budget})
    for i in range(3):
        e.node(f"n{i}")
    keys = gang(e, "big", 3)
    await e.run()
    assert [k for k in keys if e.node_of(k)] == []
    b = budget(e)
    # The trial (then the preemption plan) charged the first two; the third
    # member's PreFilter saw them charged.
    assert b.charges[:2] == keys[:2] and keys[2] not in b.charges
    assert b.reserved == set()  # nothing stays charged
    assert e.s.last_failure[keys[0]] == (
        f'PodGroup "default/big": 2 of minMember 3 pods fit; 0/3 nodes are available: '
        f"{OVER_BUDGET}."
    )
    small = gang(e, "small", 2)
    await e.run()
    assert all(e.node_of(k) for k in small)
    assert b.reserved == set(small)  # from Reserve, once
