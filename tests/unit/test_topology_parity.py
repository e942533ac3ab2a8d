"""Native PodGroups' preemption fields (scheduling.k8s.io v1alpha2 / v1beta1):
priority, priorityClassName, disruptionMode and v1beta1's preemptionPolicy,
read onto the PodGroup as the API server validates them."""

from __future__ import annotations

from typing import Any

import pytest

from troupe.api.parse import parse_pod_group
from troupe.api.types import (
    DISRUPTION_ALL,
    DISRUPTION_SINGLE,
    InvalidObject,
    PodGroup,
    PriorityClass,
)


def native(version: str = "v1beta1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 8}}} | spec,
    }


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"minMember": 8},
    }


def read(obj: dict[str, Any]) -> PodGroup:
    pg = parse_pod_group(obj)
    assert isinstance(pg, PodGroup), pg
    return pg


def refused(obj: dict[str, Any]) -> str:
    pg = parse_pod_group(obj)
    assert isinstance(pg, InvalidObject), pg
    return pg.message


def test_priority_fields_are_read_and_resolved_as_admission_does() -> None:
    classes = {"high": PriorityClass("high", 1000, False)}
    pg = read(native(priority=7, priorityClassName="high"))
    assert (pg.priority, pg.priority_class_name) == (7, "high")
    assert pg.resolved_priority(classes) == 7  # spec.priority, set by admission, wins
    by_class = read(native(priorityClassName="high"))
    assert by_class.priority is None and by_class.resolved_priority(classes) == 1000
    assert read(native(priorityClassName="nope")).resolved_priority(classes) is None
    assert read(native()).resolved_priority(classes) is None
    assert read(native("v1alpha2", priority=-5)).resolved_priority(classes) == -5


def test_a_scheduler_plugins_group_has_none_of_them() -> None:
    pg = read(crd())
    assert (pg.priority, pg.priority_class_name) == (None, "")
    assert (pg.disruption_mode, pg.preemption_policy) == (DISRUPTION_SINGLE, "")
    assert pg.resolved_priority({"x": PriorityClass("x", 5, True)}) is None


def test_a_priority_beyond_int32_is_refused() -> None:
    assert "spec.priority: Invalid value" in refused(native(priority=2**31))
    assert "spec.priority: Invalid value: true" in refused(native(priority=True))


@pytest.mark.parametrize(
    ("version", "mode", "want"),
    [
        ("v1alpha2", None, DISRUPTION_SINGLE),
        ("v1alpha2", "Pod", DISRUPTION_SINGLE),
        ("v1alpha2", "PodGroup", DISRUPTION_ALL),
        ("v1beta1", None, DISRUPTION_SINGLE),
        ("v1beta1", {"single": {}}, DISRUPTION_SINGLE),
        ("v1beta1", {"all": {}}, DISRUPTION_ALL),
    ],
)
def test_disruption_mode_reads_both_versions(version: str, mode: Any, want: str) -> None:
    spec = {} if mode is None else {"disruptionMode": mode}
    assert read(native(version, **spec)).disruption_mode == want


@pytest.mark.parametrize(
    ("version", "mode", "message"),
    [
        (
            "v1alpha2",
            "All",
            'spec.disruptionMode: Unsupported value: "All": supported values: "Pod", "PodGroup"',
        ),
        ("v1beta1", "All", 'spec.disruptionMode: Invalid value: "All": must be an object'),
        ("v1beta1", {}, "spec.disruptionMode: exactly one of single or all must be set"),
        (
            "v1beta1",
            {"single": {}, "all": {}},
            "spec.disruptionMode: exactly one of single or all must be set",
        ),
        ("v1beta1", {"all": True}, "spec.disruptionMode.all: Invalid value: true"),
    ],
)
def test_a_bad_disruption_mode_is_refused(version: str, mode: Any, message: str) -> None:
    assert message in refused(native(version, disruptionMode=mode))


def test_preemption_policy_is_read_from_v1beta1() -> None:
    assert read(native(preemptionPolicy="Never")).preemption_policy == "Never"
    assert read(native()).preemption_policy == ""
    assert (
        read(native(preemptionPolicy="PreemptLowerPriority")).preemption_policy
        == "PreemptLowerPriority"
    )
    assert 'spec.preemptionPolicy: Unsupported value: "Sometimes"' in refused(
        native(preemptionPolicy="Sometimes")
    )
    # v1alpha2 has no such field: the API server drops it, and so do we.
    assert read(native("v1alpha2", preemptionPolicy="Never")).preemption_policy == ""
