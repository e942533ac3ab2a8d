"""Parsing whole objects: priorities, PodGroups, and malformed objects as values."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.parse import parse_node, parse_pod, parse_pod_group, parse_priority_class
from scheduler.api.types import InvalidObject, PodGroup, PriorityClass
from tests.builders import make_node, make_pod

CLASSES = {"high": PriorityClass("high", 1000, False), "std": PriorityClass("std", 10, True)}


@pytest.mark.parametrize(
    ("pod", "classes", "want"),
    [
        (make_pod("p").priority(5), CLASSES, 5),
        (make_pod("p").priority_class("high"), CLASSES, 1000),
        (make_pod("p"), CLASSES, 10),
        (make_pod("p"), {}, 0),
        (make_pod("p").priority_class("unknown"), {"high": CLASSES["high"]}, 0),
    ],
    ids=["spec-priority", "class", "global-default", "none", "unknown-class"],
)
def test_priority(pod: Any, classes: dict[str, PriorityClass], want: int) -> None:
    p = parse_pod(pod.obj(), classes)
    assert not isinstance(p, InvalidObject) and p.priority == want


def broken(path: list[str | int], value: Any) -> dict[str, Any]:
    o = make_pod("bad").obj()
    cur: Any = o
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return o


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (
            broken(["spec", "containers", 0, "resources"], {"requests": {"cpu": "two"}}),
            "spec.containers[0].resources.requests.cpu",
        ),
        (
            broken(["spec", "tolerations"], [{"key": "a", "effect": "Sometimes"}]),
            "spec.tolerations[0].effect",
        ),
        (broken(["spec"], "not-a-spec"), "spec"),
        (broken(["metadata", "name"], ""), "metadata.name"),
        (broken(["spec", "containers"], []), "spec.containers"),
        (
            broken(
                ["spec", "affinity"],
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "a", "operator": "Near"}]}
                            ]
                        }
                    }
                },
            ),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
            "nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (broken(["metadata", "creationTimestamp"], "yesterday"), "metadata.creationTimestamp"),
    ],
    ids=[
        "quantity",
        "toleration-effect",
        "spec-type",
        "no-name",
        "no-containers",
        "selector-operator",
        "timestamp",
    ],
)
def test_malformed_pod_is_a_value_naming_the_field(obj: dict[str, Any], field: str) -> None:
    p = parse_pod(obj)
    assert isinstance(p, InvalidObject)
    assert p.message.startswith(field + ":"), p.message
    assert p.kind == "Pod" and p.key in ("default/bad", "default/<unnamed>")


def test_malformed_node() -> None:
    o = make_node("n").taint("a", "b").obj()
    o["spec"]["taints"][0]["effect"] = "Maybe"
    n = parse_node(o)
    assert isinstance(n, InvalidObject) and n.message.startswith("spec.taints[0].effect:")


@pytest.mark.parametrize("api", ["scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1"])
def test_pod_group(api: str) -> None:
    pg = parse_pod_group(
        {
            "apiVersion": api,
            "kind": "PodGroup",
            "metadata": {
                "name": "job",
                "namespace": "ml",
                "creationTimestamp": "2024-01-01T00:00:00Z",
            },
            "spec": {"minMember": 4, "minResources": {"cpu": "8"}, "scheduleTimeoutSeconds": 30},
        }
    )
    assert isinstance(pg, PodGroup)
    assert (pg.key, pg.min_member, dict(pg.min_resources), pg.schedule_timeout_seconds) == (
        "ml/job",
        4,
        {"cpu": 8000},
        30,
    )
    assert pg.creation_timestamp == 1704067200.0


def test_bad_pod_group() -> None:
    pg = parse_pod_group({"metadata": {"name": "g"}, "spec": {"minMember": 0}})
    assert isinstance(pg, InvalidObject) and pg.message.startswith("spec.minMember:")


def test_priority_class() -> None:
    pc = parse_priority_class({"metadata": {"name": "x"}, "value": 7, "globalDefault": True})
    assert pc == PriorityClass("x", 7, True)
    assert isinstance(parse_priority_class({"metadata": {"name": "x"}}), InvalidObject)


def test_pod_fields() -> None:
    p = (
        make_pod("p")
        .label("a", "b")
        .group("g")
        .host_port(80, "UDP", "0.0.0.0")
        .gate("x")
        .image("nginx")
        .build()
    )
    assert p.group_key == "default/g"
    assert [(h.host_ip, h.protocol, h.port) for h in p.host_ports] == [("", "UDP", 80)]
    assert p.scheduling_gates == ("x",)
    assert p.images == ("nginx:latest",)
