"""The structured allocator's limits: at most 32 devices a claim (kube's
resourceapi.AllocationResultsMaxSize, with its message), a search whose depth
does not grow with what a claim asks, the bound on its steps, and "All" as
every device the request selects, tainted ones included."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.dra_helpers import (
    DRIVER,
    claim,
    device,
    device_class,
    node,
    pod,
    request,
    run,
    slice_,
)
from troupe.dra import allocator
from troupe.dra.allocator import ALLOCATION_RESULTS_MAX, AllocationError, allocate
from troupe.dra.store import DeviceStore
from troupe.dra.types import parse_dra_object

NUMA = [{"matchAttribute": f"{DRIVER}/numa"}]
TAINT = [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]
ALL = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "All"}}


def store_with(*objs: dict[str, Any]) -> DeviceStore:
    store = DeviceStore()
    for o in objs:
        got = parse_dra_object(o["kind"], o)
        assert not hasattr(got, "message"), got
        store.set(got)
    return store


def claim_of(*requests: dict[str, Any], constraints: Any = None) -> Any:
    return parse_dra_object("ResourceClaim", claim("c", *requests, constraints=constraints))


def devices(n: int, **attrs: Any) -> list[dict[str, Any]]:
    return [device(f"gpu-{i}", **attrs) for i in range(n)]


def got_devices(store: DeviceStore, c: Any) -> list[str] | None:
    got = allocate(store, [c], "n0", {})
    if got is None:
        return None
    return [r.device for r in got[0].results]


def test_the_limit_is_kubes() -> None:
    assert ALLOCATION_RESULTS_MAX == 32


@pytest.mark.parametrize("count", [33, 1500])
def test_a_claim_for_more_than_32_devices_gets_kubes_message(count: int) -> None:
    store = store_with(device_class(), slice_("s", *devices(40), node="n0"))
    with pytest.raises(AllocationError) as e:
        allocate(store, [claim_of(request("gpu", count))], "n0", {}, build=False)
    assert str(e.value) == (
        f"claim default/c: number of requested devices {count} exceeds the claim limit of 32"
    )


def test_all_of_more_than_32_devices_gets_kubes_message() -> None:
    store = store_with(device_class(), slice_("s", *devices(40), node="n0"))
    with pytest.raises(AllocationError, match="number of requested devices 40 exceeds"):
        allocate(store, [claim_of(ALL)], "n0", {})


def test_the_requests_of_a_claim_count_together() -> None:
    store = store_with(device_class(), slice_("s", *devices(40), node="n0"))
    c = claim_of(request("a", 20), request("b", 13))
    with pytest.raises(AllocationError, match="number of requested devices 33 exceeds"):
        allocate(store, [c], "n0", {})


def test_1500_devices_with_a_constraint_is_refused_before_any_search() -> None:
    # Enough devices that a search would go 1500 choices deep.
    store = store_with(device_class(), slice_("s", *devices(1600, numa=0), node="n0"))
    c = claim_of(request("gpu", 1500), constraints=NUMA)
    for build in (False, True):
        with pytest.raises(AllocationError, match="number of requested devices 1500 exceeds"):
            allocate(store, [c], "n0", {}, build=build)


def test_32_devices_with_a_constraint_across_40_are_found_behind_8_of_another_value() -> None:
    # The first 8 devices have numa 0, the other 32 numa 1: every choice that
    # starts on numa 0 must be backed out of, 32 deep, before numa 1 serves.
    store = store_with(
        device_class(),
        slice_(
            "s",
            *(device(f"gpu-{i}", numa=0 if i < 8 else 1) for i in range(40)),
            node="n0",
        ),
    )
    c = claim_of(request("gpu", 32), constraints=NUMA)
    assert got_devices(store, c) == [f"gpu-{i}" for i in range(8, 40)]


def test_a_search_with_no_solution_ends_within_the_step_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 17 devices of one numa node out of 48 spread over three (16 each): no
    # solution, and ruling out every choice takes ~97 000 devices tried.
    store = store_with(
        device_class(),
        slice_("s", *(device(f"gpu-{i}", numa=i % 3) for i in range(48)), node="n0"),
    )
    tried = 0
    take = allocator._try

    def counting(*args: Any) -> Any:
        nonlocal tried
        tried += 1
        return take(*args)

    monkeypatch.setattr(allocator, "_try", counting)
    assert got_devices(store, claim_of(request("gpu", 17), constraints=NUMA)) is None
    assert tried == allocator.MAX_STEPS


def test_all_devices_are_every_device_selected_a_tainted_one_rules_the_node_out() -> None:
    store = store_with(
        device_class(),
        slice_("s", device("gpu-0"), device("gpu-1", taints=TAINT), device("gpu-2"), node="n0"),
    )
    assert got_devices(store, claim_of(ALL)) is None
    tolerant = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": DRIVER,
            "allocationMode": "All",
            "tolerations": [{"key": "broken", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    assert got_devices(store, claim_of(tolerant)) == ["gpu-0", "gpu-1", "gpu-2"]


def test_a_pod_asking_all_devices_waits_while_one_of_them_is_tainted() -> None:
    _, result = run(
        [
            node("n0"),
            device_class(),
            slice_("s0", device("gpu-0"), device("gpu-1", taints=TAINT), node="n0"),
            claim("all", ALL),
            pod("p", claim="all"),
        ]
    )
    got = result.to_json_obj()["pods"]["default/p"]
    assert got["node"] is None
    assert got["reason"].startswith("0/1 nodes are available: 1 cannot allocate all claims.")


def test_a_pod_whose_claim_asks_1500_devices_is_told_why_not_an_internal_error() -> None:
    _, result = run(
        [
            node("n0"),
            device_class(),
            slice_("s", *devices(1600, numa=0), node="n0"),
            claim("big", request("gpu", 1500), constraints=NUMA),
            pod("p", claim="big"),
        ]
    )
    got = result.to_json_obj()["pods"]["default/p"]
    assert got["node"] is None
    assert (
        "claim default/big: number of requested devices 1500 exceeds the claim limit of 32"
        in got["reason"]
    )
    assert "internal" not in got["reason"].lower()
