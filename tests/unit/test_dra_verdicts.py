"""What the device store remembers of CEL selectors is bounded by what exists:
the verdicts of a selector go with the last claim, class or DeviceTaintRule
that uses it (live, 300 deleted claims with selectors of their own left
67 MB of verdicts behind)."""

from __future__ import annotations

from typing import Any

from tests.unit.dra_helpers import claim, device, device_class, request, slice_
from troupe.api.types import InvalidObject
from troupe.dra.allocator import allocate
from troupe.dra.store import UNOWNED_MAX, DeviceStore, Published
from troupe.dra.types import DraObject, ResourceClaim, parse_dra_object

CLASS_EXPR = 'device.driver == "gpu.example.com"'


def _obj(raw: dict[str, Any]) -> DraObject:
    got = parse_dra_object(raw["kind"], raw)
    assert not isinstance(got, InvalidObject), got
    return got


def _claim(name: str, expr: str) -> ResourceClaim:
    got = _obj(claim(name, request("gpu", 1, expr)))
    assert isinstance(got, ResourceClaim)
    return got


def _store() -> tuple[DeviceStore, tuple[Published, ...]]:
    store = DeviceStore()
    store.set(_obj(device_class()))
    s = _obj(
        slice_("node-0", device("gpu-0", model="a"), device("gpu-1", model="b"), node="node-0")
    )
    store.set(s)
    return store, store.published(s)  # type: ignore[arg-type]


def _judge(store: DeviceStore, published: tuple[Published, ...], *exprs: str) -> None:
    for p in published:
        for e in exprs:
            assert not isinstance(store.selects(e, p), Exception)


def test_the_verdicts_of_a_selector_go_with_the_last_claim_using_it() -> None:
    store, published = _store()
    for i in range(300):
        expr = f'device.attributes["gpu.example.com"].model != "m{i}"'
        c = _claim(f"c{i}", expr)
        store.set(c)
        _judge(store, published, CLASS_EXPR, expr)
        store.set(c, deleted=True)
    # the class's selector stays, with its verdicts; no claim's does
    assert list(store._verdicts) == [CLASS_EXPR]


def test_a_selector_two_claims_use_stays_until_both_are_gone() -> None:
    store, published = _store()
    expr = 'device.attributes["gpu.example.com"].model == "a"'
    first, second = _claim("first", expr), _claim("second", expr)
    store.set(first)
    store.set(second)
    _judge(store, published, expr)
    store.set(first, deleted=True)
    assert expr in store._verdicts
    store.set(second, deleted=True)
    assert expr not in store._verdicts


def test_a_class_and_a_rule_keep_their_selectors_while_they_exist() -> None:
    store, published = _store()
    rule_expr = 'device.attributes["gpu.example.com"].model == "b"'
    rule = _obj(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "broken-b"},
            "spec": {
                "taint": {"key": "broken", "effect": "NoSchedule"},
                "deviceSelector": {"selectors": [{"cel": {"expression": rule_expr}}]},
            },
        }
    )
    store.set(rule)
    _judge(store, published, CLASS_EXPR)
    assert [store.taints(p) != () for p in published] == [False, True]
    assert {CLASS_EXPR, rule_expr} <= store._verdicts.keys()
    store.set(rule, deleted=True)
    assert rule_expr not in store._verdicts
    store.set(_obj(device_class()), deleted=True)
    assert CLASS_EXPR not in store._verdicts


def test_selectors_no_stored_object_uses_are_remembered_only_for_the_last_few() -> None:
    # Claims judged without being stored (a simulation's dry run): a bounded
    # number of their selectors keep verdicts.
    store, published = _store()
    for i in range(5 * UNOWNED_MAX):
        _judge(store, published, f'device.attributes["gpu.example.com"].model != "x{i}"')
    assert len(store._verdicts) <= UNOWNED_MAX
    # a selector a stored claim then uses is not dropped with the others
    expr = f'device.attributes["gpu.example.com"].model != "x{5 * UNOWNED_MAX - 1}"'
    store.set(_claim("late", expr))
    for i in range(5 * UNOWNED_MAX):
        _judge(store, published, f'device.attributes["gpu.example.com"].model != "y{i}"')
    assert expr in store._verdicts


def test_what_requests_admit_is_not_kept_for_claims_that_went() -> None:
    # The allocator remembers, per slice and per node, the devices each
    # request (class, selectors, tolerations) admits: those of claims that
    # went are dropped as well, in batches.
    store, _ = _store()
    for i in range(10 * UNOWNED_MAX):
        c = _claim(f"c{i}", f'device.attributes["gpu.example.com"].model != "m{i}"')
        store.set(c)
        assert allocate(store, [c], "node-0", {}, build=False) is not None
        store.set(c, deleted=True)
    assert sum(len(keys) for keys in store._matching.values()) <= UNOWNED_MAX
    assert sum(len(keys) for keys in store._node_matches.values()) <= UNOWNED_MAX
